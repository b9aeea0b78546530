"""The plan of a quantization: which Linears of the source are quantized, which are not and why,
which share a global scale, and the output's tensors, all decided from the safetensors headers
and the architecture before any weight is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hscale.checkpoints import CheckpointError, Layout, SafetensorsModel, TensorInfo
from hscale.models.architecture import fused_sets, ignored
from hscale.reference import GROUP_SIZE


@dataclass
class LayerPlan:
    """One Linear of the source: quantized, or why not."""

    module: str
    rows: int
    cols: int
    dtype: str
    quantize: bool
    reason: str = ""
    fused_with: tuple[str, ...] = ()


def plan_layers(source: SafetensorsModel, linears: dict[str, tuple[int, int]],
                ignore: Iterable[str]) -> list[LayerPlan]:
    """The Linears whose weight the source stores, each quantized or not, with the reason."""
    plans = []
    for module, (rows, cols) in linears.items():
        info = source.info.get(f"{module}.weight")
        if info is None:
            continue  # not stored (a tied head): nothing to quantize or copy
        if info.shape != (rows, cols):
            raise CheckpointError(f"{source.directory}: {module}.weight is {info.shape}, the "
                                  f"architecture says ({rows}, {cols})")
        plan = LayerPlan(module, rows, cols, info.dtype, True)
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


def output_tensors(source: SafetensorsModel, plans: list[LayerPlan], layout: Layout) -> list[TensorInfo]:
    """The output's tensors in the source's order, each quantized weight replaced in place by
    its format's tensors."""
    replaced = {f"{p.module}.weight": p for p in plans if p.quantize}
    tensors = []
    for name, info in source.info.items():
        plan = replaced.get(name)
        if plan is None:
            tensors.append(info)
        else:
            tensors.extend(layout.tensor_infos(plan.module, plan.rows, plan.cols))
    return tensors
