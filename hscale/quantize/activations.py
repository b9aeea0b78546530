"""W4A4 (``--scheme w4a4``): each quantized Linear's activation scale from the amax of its
input over the calibration tokens (spec HSCALE-CAL-2), one per fused set, and the tensors and
report entries that carry it (NVFP4-CKPT-4). Both paths of ``quantize_model`` (the whole model,
block by block) go through here; the amax comes from the calibration forward pass that collects
h (``hscale.calibration``)."""

from __future__ import annotations

import numpy as np

from hscale.reference import compute_global_scale
from hscale.reference.constants import E4M3_MAX
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier


def activation_multiplier(amax: float) -> np.float32:
    """The activation multiplier ``a`` of an input whose calibrated ``max |x|`` is ``amax``
    (HSCALE-CAL-2): NVFP4-GS-1 with the ceiling 448 (``fp32(amax / 2688)``, 1.0 for amax 0 and
    raised to 2^-126, NVFP4-GS-2), then moved to ``fp32(1 / fp32(1 / a))``, so that the
    engine's quantization multiplier ``g = fp32(1 / a)`` reads back as ``a`` in either layout."""
    a = compute_global_scale(float(amax), E4M3_MAX)  # NVFP4-GS-1, -2
    return multiplier_from_reciprocal(reciprocal_from_multiplier(a))  # HSCALE-CAL-2


def set_input_amax(members, amax: dict, module: str) -> float:
    """The amax of a fused set's one input (HSCALE-CAL-2): the largest of its members' (they
    read the same tensor, so the same value, unless the model feeds them differently; the
    largest is the range every member sees). A set no calibration token reached is an error."""
    values = [amax[m] for m in members if m in amax]
    if not values:
        raise ValueError(f"{module}: no calibration token reached its input, so its W4A4 "
                         "activation scale cannot be calibrated (spec HSCALE-CAL-2); leave it "
                         "unquantized (--ignore) or quantize --scheme w4a16")
    return max(values)


def add_input_scale(plan, tensors: dict, entry: dict, amax: dict, layout) -> None:
    """For a W4A4 layout: the Linear's activation scale added to its tensors (the layout's
    name, convention and shape, NVFP4-CKPT-4) and its amax, multiplier and set to its report
    entry. Nothing for a weights-only layout."""
    if not layout.activations:
        return
    members = plan.fused_with or (plan.module,)
    value = set_input_amax(members, amax, plan.module)
    multiplier = activation_multiplier(value)
    tensors.update(layout.input_tensors(plan.module, multiplier))
    entry["input_amax"] = float(value)
    entry["input_scale"] = float(multiplier)  # the multiplier a (HSCALE-CAL-2)
    if value == 0:
        entry["input_note"] = ("every calibration input was zero: activation multiplier 1.0 "
                               "(NVFP4-GS-2)")
