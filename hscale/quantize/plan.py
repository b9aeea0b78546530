"""The plan of a quantization: which matmul weights of the source are quantized (every Linear and
every MoE expert's matrix), which are not and why, which share a global scale, what every other
stored tensor is and why it is kept as stored, and the output's tensors in the order they are
written; all decided from the safetensors headers and the architecture (built on the meta
device) before any weight is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hscale.checkpoints import CheckpointError, Layout, SafetensorsModel, TensorInfo
from hscale.models.architecture import fused_sets, ignored
from hscale.reference import GROUP_SIZE


@dataclass
class LayerPlan:
    """One matmul weight (a Linear, or one expert's gate, up or down matrix): quantized, or why
    not. ``module`` is its name in the checkpoint (its weight: ``module + ".weight"``)."""

    module: str
    rows: int
    cols: int
    dtype: str
    quantize: bool
    reason: str = ""
    fused_with: tuple[str, ...] = ()
    expert: bool = False

    @property
    def weights(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class Kept:
    """A stored tensor that is not a quantized weight, kept as stored, and why (``kind`` groups
    the reasons in the summary)."""

    name: str
    kind: str
    reason: str


def plan_layers(source: SafetensorsModel, linears: dict[str, tuple[int, int]],
                ignore: Iterable[str], tied: dict | None = None) -> list[LayerPlan]:
    """Every matmul weight of ``linears`` (checkpoint module -> (out, in): the Linears, and the
    experts' matrices), each quantized or not, with the reason. One the source does not store
    is listed unquantized: a tied head (``tied``: module -> the tensor it shares), or absent."""
    plans = []
    tied = tied or {}
    for module, (rows, cols) in linears.items():
        info = source.info.get(f"{module}.weight")
        if info is None:
            if module in tied:
                reason = (f"tied to {tied[module]} (not stored: the embedding, kept in 16 bits, "
                          "is the head): left unquantized and named in the ignore list, as "
                          "transformers needs to load it")
            else:
                reason = "not stored in the checkpoint: named in the ignore list"
            plans.append(LayerPlan(module, rows, cols, "", False, reason))
            continue
        if info.shape != (rows, cols):
            raise CheckpointError(f"{source.directory}: {module}.weight is {info.shape}, the "
                                  f"architecture says ({rows}, {cols})")
        plan = LayerPlan(module, rows, cols, info.dtype, True, expert=".experts." in module)
        pattern = ignored(module, ignore)
        if pattern is not None:
            plan.quantize, plan.reason = False, f"ignored (matches {pattern!r})"
        elif cols % GROUP_SIZE:
            plan.quantize, plan.reason = False, (f"in_features {cols} is not a multiple of 16 "
                                                 "(NVFP4-IN-1): left unquantized")
        elif info.dtype not in ("F32", "F16", "BF16"):
            plan.quantize, plan.reason = False, (f"stored as {info.dtype}, not float32, "
                                                 "float16 or bfloat16: left as it is")
        plans.append(plan)
    quantized = [p.module for p in plans if p.quantize]
    sets = fused_sets(quantized)
    for plan in plans:
        if plan.quantize:
            plan.fused_with = sets[plan.module]
    return plans


def kept_tensors(source: SafetensorsModel, plans: list[LayerPlan], inventory) -> list[Kept]:
    """What every stored tensor that is not a quantized weight is, and why it is kept."""
    planned = {f"{p.module}.weight": p for p in plans}
    kept = []
    for name, info in source.info.items():
        plan = planned.get(name)
        module = name.rpartition(".")[0]
        owner = inventory.owners.get(name) if inventory is not None else None
        if plan is not None:
            if not plan.quantize:
                kept.append(Kept(name, "ignored" if plan.reason.startswith("ignored")
                                 else "not quantizable", plan.reason))
            continue
        if inventory is not None and name in inventory.embeddings:
            kept.append(Kept(name, "embedding", "an embedding (a table lookup, not a matmul): "
                                                "kept as stored, as engines expect"))
        elif inventory is not None and module in inventory.routers:
            kept.append(Kept(name, "router", "an MoE router: kept in 16 bits (engines run it "
                                             "unquantized) and named in the ignore list"))
        elif len(info.shape) == 1 and name.endswith(".bias"):
            kept.append(Kept(name, "bias", "a bias (added, not multiplied): kept as stored"))
        elif len(info.shape) == 1 and owner is not None and "norm" in owner.lower():
            kept.append(Kept(name, "norm", f"a norm's gain ({owner}): kept as stored"))
        elif owner is not None and owner.startswith("buffer "):
            kept.append(Kept(name, "buffer", f"a buffer of {owner[7:]}, not a weight: copied "
                                             "unchanged"))
        elif owner is None and inventory is not None:
            kept.append(Kept(name, "unknown", "not a parameter of the architecture: copied "
                                              "unchanged"))
        else:
            what = owner or "a tensor"
            kept.append(Kept(name, "other", f"not a Linear or an expert ({what}, shape "
                                            f"{list(info.shape)}): kept as stored"))
    return kept


def ignore_list(plans: list[LayerPlan], inventory) -> list[str]:
    """The checkpoint's ignore list: every matmul an engine builds as a Linear and must not
    expect quantized (the Linears and experts left unquantized, stored or tied, and the MoE
    routers)."""
    names = [p.module for p in plans if not p.quantize]
    if inventory is not None:
        names += list(inventory.routers)
    return list(dict.fromkeys(names))


def output_tensors(source: SafetensorsModel, plans: list[LayerPlan], layout: Layout,
                   names: list[str] | None = None) -> list[TensorInfo]:
    """The output's tensors, in the order of ``names`` (the source's order by default), each
    quantized weight replaced in place by its format's tensors."""
    replaced = {f"{p.module}.weight": p for p in plans if p.quantize}
    tensors = []
    for name in (source.names() if names is None else names):
        plan = replaced.get(name)
        if plan is None:
            tensors.append(source.info[name])
        else:
            tensors.extend(layout.tensor_infos(plan.module, plan.rows, plan.cols))
    return tensors


def block_order(source: SafetensorsModel, plans: list[LayerPlan], inventory) -> list[list[str]]:
    """The source's tensors in the order the sequential path writes them, as consecutive
    groups: first every tensor outside the blocks that is copied (embeddings, the final norm, a
    head left unquantized), then each block's tensors, then the quantized tensors outside the
    blocks (a head quantized on the last block's output); within a group, the source's order."""
    quantized = {f"{p.module}.weight" for p in plans if p.quantize}
    groups: list[list[str]] = [[] for _ in range(inventory.blocks + 2)]
    for name in source.names():
        block = inventory.block_of(name)
        if block is not None:
            groups[1 + block].append(name)
        else:
            groups[-1 if name in quantized else 0].append(name)
    return groups
