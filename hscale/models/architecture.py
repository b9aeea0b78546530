"""What a model's structure says to a quantizer: its architecture, its Linear layers, which of
them engines fuse, and which a user's patterns leave out.

:func:`linear_layers` lists the layers a quantizer sees in a built model:

* included: every module that is an instance of ``torch.nn.Linear`` (subclasses too) whose
  ``in_features`` is a multiple of 16 (an NVFP4 group is 16 consecutive input elements of a row),
  in ``model.named_modules()`` order; a module registered under two names is listed once, under
  its first name.
* excluded, always: anything that is not an ``nn.Linear`` -- embeddings (a table lookup, not a
  matmul, so h = diag(X^T X) is undefined), LayerNorm/RMSNorm, convolutions and GPT-2 style
  ``Conv1D`` layers (a different weight layout, [in, out]); and ``nn.Linear`` layers whose
  in_features is not a multiple of 16 (NVFP4 cannot store them without padding, which the spec
  does not define).
* tied output heads: a Linear whose weight is the same Parameter as another module's (e.g. an
  ``lm_head`` tied to the token embedding) is a genuine matmul with a genuine input, so it is
  included by default; pass ``include_tied=False`` to drop it (what deployment recipes such as
  ModelOpt and llm-compressor usually do with ``lm_head``).

:func:`architecture_linears` gives the same for a model directory, built on the meta device from
its config.json (no weights read). :func:`fused_sets` groups the Linears engines fuse into one
matmul (q/k/v, gate/up, MoE w1/w3), which must share one global scale (NVFP4-CKPT-3).

torch and transformers are imported lazily, so importing this module costs nothing.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

from .loading import quiet_transformers, require

DEFAULT_IGNORE = ("lm_head",)


# Sibling Linears that engines fuse into one matmul, so they must share one global scale.
FUSED_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"),
                  ("gate_proj", "up_proj"), ("w1", "w3"))


def architecture(directory) -> tuple:
    """``(model class, config)`` of a model directory: the transformers class its config.json
    names in ``architectures``."""
    import transformers
    with quiet_transformers():
        config = transformers.AutoConfig.from_pretrained(directory)
    names = list(config.architectures or [])
    cls = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), None)
    if cls is None:
        raise ValueError(f"{directory}/config.json: architecture {names or '(none)'} is not one "
                         f"that the installed transformers {transformers.__version__} knows")
    return cls, config


def meta_model(directory):
    """The model of a directory's config.json built on the meta device: its structure, no
    weights read, no memory taken."""
    import torch
    cls, config = architecture(directory)
    with torch.device("meta"), quiet_transformers():
        return cls(config)


def architecture_linears(directory: Path) -> dict[str, tuple[int, int]]:
    """{module name: (out, in)} of every nn.Linear of the model's architecture, built on the
    meta device from its config (no weights read)."""
    import torch
    model = meta_model(directory)
    return {name: (module.out_features, module.in_features)
            for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def saved_state(model) -> dict:
    """{name: tensor} of what transformers' ``save_pretrained`` writes for ``model``: its state
    dict through the two steps save_pretrained applies, tied weights removed and the load-time
    conversions reverted (fused MoE experts written per expert, 2-D; Mixtral's ``mlp`` renamed
    ``block_sparse_moe``)."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    state = remove_tied_weights_from_state_dict(model.state_dict(), model)
    return revert_weight_conversion(model, state)


def saved_tensor_shapes(model) -> dict[str, tuple[int, ...]]:
    """{name: shape} of what ``save_pretrained`` writes for ``model`` (built on meta will do):
    ``saved_state``'s shapes."""
    return {name: tuple(tensor.shape) for name, tensor in saved_state(model).items()}


def linear_layers(model, *, include_tied: bool = True) -> List[Tuple[str, Any]]:
    """Ordered ``[(qualified_name, nn.Linear)]`` of the layers an NVFP4 quantizer covers.

    Every ``torch.nn.Linear`` whose ``in_features % 16 == 0``, in ``named_modules()`` order
    (each module once). With ``include_tied=False`` a Linear whose weight Parameter is shared with
    another module (a tied output head) is left out. See the module docstring for the rationale.
    """
    torch = require("torch")
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


def ignored(module: str, patterns: Iterable[str]) -> str | None:
    """The first of ``patterns`` that names ``module``: a module name, a glob, its last name
    component, or ``re:REGEX`` (searched); None if none does."""
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.search(pattern[3:], module):
                return pattern
        elif fnmatch.fnmatchcase(module, pattern) or module.split(".")[-1] == pattern:
            return pattern
    return None


def fused_sets(modules: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """module -> the quantized modules it shares a global scale with (itself included)."""
    modules = list(modules)
    present = set(modules)
    sets: dict[str, tuple[str, ...]] = {m: (m,) for m in modules}
    for module in modules:
        parent, _, leaf = module.rpartition(".")
        for siblings in FUSED_SIBLINGS:
            if leaf in siblings:
                members = tuple(f"{parent}.{s}" if parent else s for s in siblings
                                if (f"{parent}.{s}" if parent else s) in present)
                sets[module] = members
    return sets
