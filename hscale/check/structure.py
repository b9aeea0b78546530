"""A checkpoint judged from its files alone: the configs, each quantized Linear's tensors (names,
dtypes, shapes, the global scale, the scale bytes), the fused sets and the plausibility of each
global scale."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hscale.checkpoints import LAYOUTS, ROLE_DTYPES, Layout, SafetensorsModel
from hscale.judge.findings import Finding
from hscale.models.architecture import ignored
from hscale.reference import GROUP_SIZE
from hscale.reference.constants import (E2M1_MAGNITUDES, FP32_LARGEST_RECIPROCAL_NORMAL,
                                        FP32_SMALLEST_NORMAL)
from hscale.reference.global_scale import LARGEST_PRODUCT_OF_CODES

from .report import LayerResult, Problem, _bits, _f32, counted

#: Places listed per kind of bad scale byte in one tensor; the rest are counted.
LISTED = 8


#: Decoded weights above this are not a trained Linear's: a global scale in the other
#: convention gives about (6 * 448)^2 / amax, 7e6 for amax = 1 (NVFP4-GS-4).
IMPLAUSIBLE_MAGNITUDE = 1e4


#: A layer whose decoded magnitude is this many decades from the reference (the original's
#: amax, or the other layers' median) while the other reading is close is flagged.
IMPLAUSIBLE_DECADES = 2.0



def config_problems(detected, model, modules, linears, directory: Path) -> tuple[list, list]:
    """(problems, notes): the quantization config against the layout (4-bit floats in groups
    of 16) and its ignore / exclude list against what the checkpoint stores (``linears``: the
    matmuls the architecture declares, None when it could not be built)."""
    layout = detected.layout
    findings, notes = layout.config_findings(detected, model)
    problems = [Problem(detected.config_name, Finding(layout.clause, text, kind="config"))
                for text in findings]

    def problem(text):
        problems.append(Problem(detected.config_name, Finding(layout.clause, text,
                                                              kind="config")))

    word = layout.ignore_key
    for module in modules:
        pattern = ignored(module, detected.ignore)
        if pattern is not None:
            problem(f"{module} is stored quantized, but the {word} list names it ({pattern!r}): "
                    "a loader expects it unquantized")
    if linears is not None and layout.lists_unquantized:
        for module in linears:
            info = model.info.get(f"{module}.weight")
            if module in modules or info is None or info.dtype not in ("F32", "F16", "BF16"):
                continue
            if ignored(module, detected.ignore) is None:
                problem(f"{module} is a Linear stored unquantized ({module}.weight {info.dtype}), "
                        f"but the {word} list does not name it: a loader expects "
                        f"{layout.tensor_names(module)['packed']}")
    return problems, notes


def read_layer(model: SafetensorsModel, layout: Layout, layer: LayerResult, linears) -> dict | None:
    """Check one quantized Linear's tensors (names, dtypes, shapes, global scale, scale bytes)
    and gather its decoded statistics into ``layer``; returns its arrays (packed, scale_bytes,
    codes, global_scale) when they can be judged further, else None."""
    from hscale.reference.packing import swizzled_size
    clause = layout.clause
    names = layout.tensor_names(layer.module)
    layer.tensors = names
    missing = [role for role in names if names[role] not in model.info]
    for role in missing:
        present = [names[r] for r in names if r not in missing]
        if role == "input":
            layer.problem(role, "NVFP4-CKPT-4", f"missing: a W4A4 {layout.name} checkpoint "
                          f"stores each quantized Linear's activation scale {names[role]} "
                          f"beside {', '.join(present)}; an engine has no scale to quantize "
                          "this Linear's input with", kind="structure")
            continue
        layer.problem(role, clause, f"missing: the {layout.name} layout stores {names[role]} beside "
                      f"{', '.join(present)}", kind="structure")
    if [role for role in missing if role != "input"]:
        return None
    infos = {role: model.info[names[role]] for role in names if role not in missing}
    broken = False
    for role, info in infos.items():
        if info.dtype != ROLE_DTYPES[role]:
            layer.problem(role, clause, f"dtype {info.dtype}, the {layout.name} layout stores "
                          f"{ROLE_DTYPES[role]}", kind="structure", expected=ROLE_DTYPES[role],
                          observed=info.dtype)
            broken = True
    if linears is not None and layer.module in linears:
        rows, cols = linears[layer.module]
    elif len(infos["packed"].shape) == 2:
        rows, cols = infos["packed"].shape[0], 2 * infos["packed"].shape[1]
    else:
        layer.problem("packed", "NVFP4-PACK-1", f"shape {infos['packed'].shape}: packed codes "
                      "are 2-D (out, in/2)", kind="structure")
        return None
    layer.shape = (rows, cols)
    if cols % GROUP_SIZE:
        layer.problem("packed", "NVFP4-IN-1", f"in_features {cols} is not a multiple of the "
                      f"group size {GROUP_SIZE}", kind="structure")
        return None
    wanted = {"packed": ((rows, cols // 2), "NVFP4-PACK-1", "(out, in/2)"),
              "scale": ((rows, cols // GROUP_SIZE), "NVFP4-PACK-2", "(out, in/16), row-major"),
              "global": (layout.global_shape, clause, "the layout's"),
              "input": (layout.global_shape, "NVFP4-CKPT-4", "the layout's")}
    for role, (shape, shape_clause, what) in wanted.items():
        if role not in infos:
            continue
        found = infos[role].shape
        if found == shape:
            continue
        text = f"shape {found}, expected {shape} {what} for the ({rows}, {cols}) Linear"
        if role == "scale" and math.prod(found) == swizzled_size(rows, cols // GROUP_SIZE) \
                and math.prod(found) != rows * (cols // GROUP_SIZE):
            shape_clause = "NVFP4-PACK-3"
            text += (f"; {math.prod(found)} bytes is the size of the swizzled 128x4 layout of "
                     "NVFP4-PACK-3, which is for GEMM kernels, not for checkpoints")
        layer.problem(role, shape_clause, text, kind="structure", expected=str(shape),
                      observed=str(found))
        broken = True
    if broken:
        return None

    packed = model.array(names["packed"])
    scale_bytes = model.array(names["scale"])
    stored = np.float32(model.array(names["global"]).reshape(-1)[0])
    layer.stored_global_scale = float(stored)
    global_scale = _usable_global_scale(layer, layout, stored)
    codes = _statistics(layer, packed, scale_bytes, global_scale)
    if "input" in infos:  # after _statistics, which sets layer.stats afresh
        _usable_input_scale(layer, layout, np.float32(model.array(names["input"]).reshape(-1)[0]))
    if global_scale is None:
        return None
    return {"packed": packed, "scale_bytes": scale_bytes, "codes": codes,
            "global_scale": global_scale}


def _usable_global_scale(layer: LayerResult, layout: Layout, stored: np.float32):
    """The multiplier s_g the stored value means, or None (and a finding) when it is not a
    usable fp32: finite, positive, normal, its dequantized range finite (NVFP4-GS-2, GS-4)."""
    from hscale.reference.global_scale import dequantizes_finitely
    problem = layout.stored_global_scale_problem(float(stored), _f32(float(stored)))
    if problem is not None:
        layer.problem("global", *problem, kind="sg")
        return None
    global_scale = layout.implied_global_scale(stored)
    if not dequantizes_finitely(global_scale):
        layer.problem("global", "NVFP4-GS-2", f"s_g = {_f32(global_scale)}: 6 * 448 * s_g "
                      "overflows fp32, so the largest codes decode to infinity", kind="sg")
        return None
    layer.global_scale = float(global_scale)
    return global_scale


#: An activation range (6 * 448 * a) outside (1e-6, 1e5) is no trained network's input (1e5 is
#: above float16's largest value, 65504, which bounds the activations of fp16 models); the
#: stored value read in the other convention means (6 * 448)^2 / amax, so a scale stored in the
#: wrong one lands there for any amax below about 72 (HSCALE-CAL-2, NVFP4-GS-4).
ACTIVATION_RANGE = (1e-6, 1e5)


def _usable_input_scale(layer: LayerResult, layout: Layout, stored: np.float32) -> None:
    """A W4A4 activation scale (NVFP4-CKPT-4): a positive normal fp32 in the layout's
    convention (for compressed-tensors the divisor g whose reciprocal is normal too, NVFP4-ACT-1),
    whose activation range 2688 a is plausible; recorded in the layer's stats."""
    value = float(stored)
    layer.stats["stored_input_scale"] = value
    shown = _f32(value)
    if layout.stores_reciprocal:
        ok = np.isfinite(value) and FP32_SMALLEST_NORMAL <= value <= FP32_LARGEST_RECIPROCAL_NORMAL
        what = (f"the stored activation divisor g = {shown} is not a positive normal fp32 whose "
                "reciprocal is a normal fp32")
    else:
        ok = np.isfinite(value) and value >= FP32_SMALLEST_NORMAL and value <= FP32_LARGEST_RECIPROCAL_NORMAL
        what = (f"the stored activation multiplier a = {shown} is not a positive normal fp32 "
                "whose reciprocal is a normal fp32")
    if not ok:
        layer.problem("input", "NVFP4-CKPT-4", what + " (NVFP4-ACT-1): an engine cannot "
                      "quantize this Linear's input with it", kind="input")
        return
    multiplier = float(layout.implied_global_scale(stored))
    layer.stats["input_scale"] = multiplier
    activation_range = LARGEST_PRODUCT_OF_CODES * multiplier
    other = next(o for o in LAYOUTS.values() if o.stores_reciprocal != layout.stores_reciprocal)
    other_range = LARGEST_PRODUCT_OF_CODES * float(other.implied_global_scale(stored))
    low, high = ACTIVATION_RANGE
    if not low <= activation_range <= high:
        text = (f"stored {shown}, read as {layout.convention} as {layout.name} stores it, means "
                f"an input range (6 * 448 * a) of {activation_range:.4g}, which no trained "
                "network's input has")
        if low <= other_range <= high:
            text += (f"; read as {other.name} stores it the range is {other_range:.4g}: the "
                     "activation scale looks stored in the other convention (NVFP4-GS-4)")
        layer.problem("input", "NVFP4-CKPT-4", text, kind="input")


def _statistics(layer: LayerResult, packed, scale_bytes, global_scale) -> np.ndarray:
    """Scale-byte findings (NaN, negative, zero under non-zero codes) and the counts a reader
    wants; returns the unpacked codes."""
    from hscale.reference import SCALE_BYTE_VALUES, unpack_codes
    rows, cols = layer.shape
    codes = unpack_codes(packed)
    magnitude = (codes & 0x7).reshape(rows, cols // GROUP_SIZE, GROUP_SIZE)
    live_codes = magnitude.any(axis=2)  # some element of the group is not +-0
    nan = (scale_bytes & 0x7F) == 0x7F
    negative = ((scale_bytes & 0x80) != 0) & ~nan
    zero_under_codes = (scale_bytes == 0) & live_codes

    def listed(mask, clause, describe):
        hits = np.argwhere(mask)
        for r, i in hits[:LISTED]:
            layer.problem("scale", clause, describe(int(scale_bytes[r, i])),
                          group=(int(r), int(i)), kind="byte",
                          observed=f"0x{int(scale_bytes[r, i]):02X}")
        if len(hits) > LISTED:
            layer.problems.append(counted(layer.tensors["scale"], clause, len(hits) - LISTED))

    listed(nan, "NVFP4-E4M3-1", lambda b: f"scale byte 0x{b:02X} is NaN (0x7F and 0xFF are NaN "
                                          "in E4M3): the group decodes to NaN")
    listed(negative, "NVFP4-E4M3-3", lambda b: f"scale byte 0x{b:02X} has the sign bit set: "
                                               "scale bytes are the positive ladder 0x01..0x7E "
                                               "(and 0x00)")
    listed(zero_under_codes, "NVFP4-ZERO-1",
           lambda b: "scale byte 0x00 (a zero group) under codes that are not all zero: every "
                     "element decodes to 0 whatever its code")
    valid = ~nan & ~negative
    dead = ~live_codes | (scale_bytes == 0)
    top = np.take(np.array(E2M1_MAGNITUDES), magnitude.max(axis=2))
    byte_values = np.where(valid, SCALE_BYTE_VALUES[np.where(valid, scale_bytes, 0) & 0x7F], 0.0)
    units = float(np.max(top * byte_values)) if top.size else 0.0  # max |q| * e4m3(c)
    layer.stats = {
        "weights": rows * cols, "groups": int(scale_bytes.size),
        "dead_groups": int(np.count_nonzero(dead)),
        "zero_rows": int(np.count_nonzero(dead.all(axis=1))),
        "zero_bytes": int(np.count_nonzero(scale_bytes == 0)),
        "subnormal_bytes": int(np.count_nonzero((scale_bytes >= 0x01) & (scale_bytes <= 0x07))),
        "saturated_bytes": int(np.count_nonzero(scale_bytes == 0x7E)),
        "nan_bytes": int(np.count_nonzero(nan)), "negative_bytes": int(np.count_nonzero(negative)),
        "largest_byte": f"0x{int(np.max(np.where(valid, scale_bytes, 0))):02X}",
        # the largest |decoded weight| is max(|q| e4m3(c)) s_g (exact in float64)
        "code_units_max": units,
    }
    if global_scale is not None:
        layer.stats["decoded_amax"] = units * float(global_scale)
    return codes


def fused_set_problems(layers: list, layout: Layout) -> list:
    """Fused layers whose stored global scales differ (NVFP4-CKPT-3), for a layout whose
    engines fuse them (GGUF keeps each its own tensor and .scale); and, W4A4, whose activation
    scales differ (NVFP4-CKPT-4)."""
    if not layout.one_scale_per_fused_set:
        return []
    return _fused_global_scales(layers, layout) + (
        _fused_input_scales(layers, layout) if layout.activations else [])


def _differing_fused_sets(layers: list, stored: dict):
    """``(members, {member: stored value}, set name)`` of each fused set (layers reading one
    input) whose members' stored values are all present and not all the same bits."""
    seen = set()
    for layer in layers:
        members = layer.fused_with
        if len(members) < 2 or members in seen:
            continue
        seen.add(members)
        values = {m: stored.get(m) for m in members}
        if None in values.values() or len({_bits(v) for v in values.values()}) == 1:
            continue
        name = f"{members[0].rsplit('.', 1)[0]}.{{{','.join(m.rsplit('.', 1)[-1] for m in members)}}}"
        yield members, values, name


def _fused_input_scales(layers: list, layout: Layout) -> list:
    """Fused layers (one input, one matmul) whose stored activation scales differ: an engine
    keeps one, vLLM the largest divisor for dense Linears and the smallest for MoE,
    TensorRT-LLM refuses to load (NVFP4-CKPT-4)."""
    stored = {layer.module: layer.stats.get("stored_input_scale") for layer in layers}
    problems = []
    for members, values, name in _differing_fused_sets(layers, stored):
        shown = ", ".join(f"{m.rsplit('.', 1)[-1]}{layout.input_suffix} = {values[m]!r} "
                          f"({_bits(values[m])})" for m in members)
        problems.append(Problem(name + layout.input_suffix, Finding(
            "NVFP4-CKPT-4", f"fused layers with different activation scales: {shown}; they "
            "read one input, which an engine quantizes once with one scale (TensorRT-LLM "
            "refuses such a checkpoint, vLLM keeps one and mis-scales the others)",
            kind="fused")))
    return problems


def _fused_global_scales(layers: list, layout: Layout) -> list:
    # A member whose stored value is not a usable global scale has a finding of its own
    # (NVFP4-GS-2, -4) and means no s_g to compare: its set is not judged here.
    stored = {layer.module: layer.stored_global_scale if layer.global_scale is not None
              else None for layer in layers}
    problems = []
    for members, values, name in _differing_fused_sets(layers, stored):
        meaning = {m: float(layout.implied_global_scale(np.float32(v))) for m, v in values.items()}
        shown = ", ".join(f"{m.rsplit('.', 1)[-1]} s_g = {meaning[m]!r} ({_bits(values[m])} "
                          "stored)" for m in members)
        problems.append(Problem(name, Finding(
            "NVFP4-CKPT-3", f"fused layers with different global scales: {shown}; an engine "
            "fuses them into one matmul with one s_g (the largest) and mis-scales the others",
            kind="fused")))
    return problems


def plausibility_problems(layers: list, layout: Layout) -> None:
    """Layers whose global scale decodes absurd weights, for those not judged against their
    original already: the reference magnitude is the other layers' median (or, with fewer than
    three layers, the largest magnitude a trained Linear reaches)."""
    judged = [layer for layer in layers if layer.stats.get("decoded_amax")
              and "original_amax" not in layer.stats]
    read = {layer.module: layer.stats["decoded_amax"] for layer in layers
            if layer.stats.get("decoded_amax")}
    for layer in judged:
        others = [v for m, v in read.items() if m != layer.module]
        implausible_global_scale(layer, layout, float(np.median(others)) if len(others) >= 2
                                 else None)


def implausible_global_scale(layer: LayerResult, layout: Layout, reference) -> bool:
    """Whether the layer's global scale decodes weights far from ``reference`` (the original's
    amax, or the other layers' median; None: compared with what no trained Linear reaches), and
    if so a finding, which says when the stored value reads sensibly in the other convention
    (a compressed-tensors reciprocal stored as the multiplier, or the reverse, NVFP4-GS-4)."""
    other = next(o for o in LAYOUTS.values() if o.stores_reciprocal != layout.stores_reciprocal)
    magnitude = layer.stats["decoded_amax"]
    other_magnitude = layer.stats["code_units_max"] * float(
        other.implied_global_scale(np.float32(layer.stored_global_scale)))
    if reference is not None and _decades(magnitude, reference) > IMPLAUSIBLE_DECADES:
        plausible_other = _decades(other_magnitude, reference) < 1
    elif reference is None and magnitude > IMPLAUSIBLE_MAGNITUDE:
        plausible_other = other_magnitude < magnitude
    else:
        return False
    if "original_amax" in layer.stats:
        compared = f"the original weights reach {layer.stats['original_amax']:.4g}"
    elif reference is not None:
        compared = f"the other layers' median is {reference:.4g}"
    else:
        compared = f"no trained Linear reaches {IMPLAUSIBLE_MAGNITUDE:g}"
    text = (f"stored {_f32(layer.stored_global_scale)}, read as {layout.convention} as {layout.name} stores "
            f"it, decodes the weights up to {magnitude:.4g}, where {compared}")
    if plausible_other:
        text += (f"; read as {other.name} stores it they reach {other_magnitude:.4g}: the global "
                 "scale looks stored in the other convention")
    layer.problem("global", "NVFP4-GS-4" if plausible_other else "NVFP4-GS-1", text, kind="sg")
    return True


def _decades(value: float, reference) -> float:
    if reference is None or not value > 0 or not reference > 0:
        return 0.0
    return abs(math.log10(value / reference))
