"""Mixture-of-experts layers: how transformers 5 builds them and how checkpoints store them.

In transformers 5 the experts of a Qwen3-MoE or Mixtral block are one module holding two fused
3-D parameters, not ``nn.Linear`` modules: ``gate_up_proj`` ``[E, 2I, H]`` (rows ``[0, I)`` the
gate, ``[I, 2I)`` the up projection of each expert, ``[out, in]`` like a Linear) and
``down_proj`` ``[E, H, I]``; the expert computes ``F.linear(x, gate_up_proj[e])``. The
checkpoints engines load (and ``save_pretrained`` writes) store each expert's three matrices as
2-D tensors under per-expert names, and transformers fuses them on load (its
``conversion_mapping``):

=============  ==========================================================  ============
family         per-expert names on disk (gate, up, down)                   router
=============  ==========================================================  ============
``qwen2_moe``  ``mlp.experts.{e}.gate_proj`` / ``up_proj`` / ``down_proj``  ``mlp.gate``
``mixtral``    ``block_sparse_moe.experts.{e}.w1`` / ``w3`` / ``w2``        ``block_sparse_moe.gate``
=============  ==========================================================  ============

(the module path of Mixtral's block is ``mlp``: the checkpoint's ``block_sparse_moe`` is renamed
on load). Qwen3-MoE, OLMoE, DeepSeek-V2/V3, GLM-4-MoE and the other families transformers maps
to ``qwen2_moe`` use the first layout; Mixtral and MiniMax the second.

The router (``mlp.gate``, a 2-D ``[E, H]`` weight in a module that is not an ``nn.Linear``) is
kept in 16 bits: engines build it as a Linear and run it unquantized, so it goes in the
checkpoint's ignore list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ExpertLayout:
    """How one family names its experts on disk: checkpoint <-> module renames and the leaf
    names of gate, up and down."""

    family: str
    renames: tuple  # (checkpoint text, module text)
    gate: str
    up: str
    down: str

    @property
    def leaves(self) -> tuple[str, str, str]:
        return self.gate, self.up, self.down

    def to_module(self, name: str) -> str:
        """A checkpoint name as the module tree says it."""
        for disk, module in self.renames:
            name = name.replace(disk, module)
        return name

    def to_checkpoint(self, name: str) -> str:
        """A module name as the checkpoint says it."""
        for disk, module in self.renames:
            name = name.replace(module, disk)
        return name

    def expert_module(self, experts: str, expert: int, part: str) -> str:
        """The checkpoint module name of one expert's ``part`` (``gate``, ``up``, ``down``) of
        the experts module ``experts`` (its module path)."""
        return self.to_checkpoint(f".{experts}.{expert}.{getattr(self, part)}")[1:]

    def parse(self, name: str):
        """``(experts module path, expert, part)`` of a per-expert checkpoint weight name
        (``....experts.7.up_proj.weight``), else None."""
        match = re.match(rf"^(.*\.experts)\.(\d+)\.({self.gate}|{self.up}|{self.down})\.weight$",
                         self.to_module("." + name))
        if match is None:
            return None
        part = {self.gate: "gate", self.up: "up", self.down: "down"}[match.group(3)]
        return match.group(1)[1:], int(match.group(2)), part


LAYOUTS = {
    "qwen2_moe": ExpertLayout("qwen2_moe", (), "gate_proj", "up_proj", "down_proj"),
    "mixtral": ExpertLayout("mixtral", ((".block_sparse_moe.", ".mlp."),), "w1", "w3", "w2"),
}


def expert_layout(model_type: str) -> ExpertLayout:
    """The per-expert layout of a model type, from transformers' own table of which families
    share a conversion (``conversion_mapping._MODEL_TO_CONVERSION_PATTERN``)."""
    try:
        from transformers.conversion_mapping import _MODEL_TO_CONVERSION_PATTERN as patterns
    except ImportError:  # pragma: no cover - an older transformers: names as Qwen2-MoE's
        patterns = {}
    family = patterns.get(model_type, model_type)
    return LAYOUTS.get(family, LAYOUTS["qwen2_moe"])


def is_experts(module) -> bool:
    """A fused experts module: 3-D ``gate_up_proj`` and ``down_proj`` parameters."""
    import torch
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    return (isinstance(gate_up, torch.Tensor) and gate_up.dim() == 3
            and isinstance(down, torch.Tensor) and down.dim() == 3)


def is_router(module) -> bool:
    """An MoE router: a 2-D ``weight`` of ``[num_experts, hidden]`` in a module that is not an
    ``nn.Linear`` (transformers 5's ``*TopKRouter``)."""
    import torch
    weight = getattr(module, "weight", None)
    return (not isinstance(module, torch.nn.Linear) and isinstance(weight, torch.Tensor)
            and weight.dim() == 2 and hasattr(module, "top_k")
            and weight.shape[0] == getattr(module, "num_experts", -1))


def check_experts(name: str, module) -> None:
    """The layouts this module reads: gate and up concatenated, ``[out, in]`` (transformers'
    ``is_concatenated=True, is_transposed=False``), no biases."""
    if getattr(module, "is_transposed", False) or not getattr(module, "is_concatenated", True) \
            or getattr(module, "has_bias", False) or not getattr(module, "has_gate", True):
        raise ValueError(f"{name}: experts stored transposed, interleaved, with biases or "
                         "without a gate are not a layout hscale quantize reads")


def block_state(layout: ExpertLayout, names, read, shape, dtype) -> dict:
    """A block's checkpoint tensors (``names``, relative to the block) -> the block module's
    state dict: per-expert 2-D weights become the fused ``<path>.gate_up_proj`` ``[E, 2I, H]``
    (gate rows first) and ``<path>.down_proj`` ``[E, H, I]``, allocated once and filled expert
    by expert as each 2-D weight is read (``read(name)``, in ``dtype``; peak: the fused tensors
    and one expert); every other tensor is read as it is, under its module name."""
    import torch
    state, experts = {}, {}
    for name in names:
        parsed = layout.parse(name)
        if parsed is None:
            state[layout.to_module("." + name)[1:]] = read(name)
            continue
        path, expert, part = parsed
        experts.setdefault(path, {})[(expert, part)] = name
    for path, parts in experts.items():
        count = 1 + max(e for e, _ in parts)
        missing = [(e, p) for e in range(count) for p in ("gate", "up", "down")
                   if (e, p) not in parts]
        if missing:
            raise ValueError(f"{path}: expert {missing[0][0]} has no {missing[0][1]} weight")
        inter, hidden = shape(parts[(0, "gate")])
        gate_up = torch.empty(count, 2 * inter, hidden, dtype=dtype)
        down = torch.empty(count, hidden, inter, dtype=dtype)
        for e in range(count):
            gate_up[e, :inter] = read(parts[(e, "gate")])
            gate_up[e, inter:] = read(parts[(e, "up")])
            down[e] = read(parts[(e, "down")])
        state[f"{path}.gate_up_proj"] = gate_up
        state[f"{path}.down_proj"] = down
    return state
