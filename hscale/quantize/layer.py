"""One planned weight quantized: its global scale (shared across a fused set, NVFP4-CKPT-3), the
pipeline's quantizer on the chosen backend, the format's tensors, and its report entry (the
errors against RTN at the same s_g, the calibration tokens it saw). Both paths of
``quantize_model`` (the whole model, block by block) quantize each weight through one step,
``quantize_planned``."""

from __future__ import annotations

import time

import numpy as np

from hscale.calibration import LayerStatistics
from hscale.checkpoints import layout_named
from hscale.evaluation.quality import layer_quality, rounding_quality, shift_histogram
from hscale.pipelines import PIPELINES, quantize_weight
from hscale.reference import GROUP_SIZE, QuantizedWeight, compute_global_scale
from hscale.reference.validation import method_named
from hscale.reference.quantize import encode_groups
from hscale.reference.validation import WEIGHT_DTYPES, check_weight_finite

from .activations import add_input_scale
from .context import RunContext

#: Rows encoded at once where a layer's codes are recomputed (bounds the float64 copies).
ROWS_PER_BLOCK = 1024


def tensor_amax(name: str, weight: np.ndarray) -> float:
    """max |w| of a stored weight. A NaN or an infinity makes it non-finite (max and min carry
    them), and only then is the weight searched for the first bad element, so that the message
    names the tensor and the index (NVFP4-IN-1) without a second pass over every finite weight."""
    amax = max(float(np.max(weight)), -float(np.min(weight)))
    if not np.isfinite(amax):
        try:
            check_weight_finite(weight)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return amax


def set_global_scale(members, weight_of, layout, ceiling: float) -> np.float32:
    """The one s_g of a fused set (NVFP4-CKPT-3): NVFP4-GS-1 from the largest amax of its
    members (``weight_of(module)`` gives each weight), as ``layout`` can store it."""
    amax = max(tensor_amax(f"{m}.weight", weight_of(m)) for m in members)
    return layout_named(layout).writable_global_scale(compute_global_scale(amax, ceiling))


def rtn_counterpart(weight, result, pipeline: str, backend):
    """RTN (max-abs init, HSCALE-METHOD-1) at the result's s_g, to compare with. For the rtn
    pipeline the result's initial bytes *are* RTN's bytes (NVFP4-INIT-1 at the same s_g), so
    with the numpy reference only their codes are encoded; a fast backend quantizes RTN (3x
    faster than encoding in numpy), as the other pipelines, which start elsewhere, need."""
    chosen = PIPELINES[pipeline]
    if method_named(result.method).keeps_initial_bytes and chosen.initial_bytes_are_rtns:
        return result
    if getattr(backend, "name", "numpy") != "numpy":  # a fast backend's RTN beats numpy's encode
        return backend.quantize(weight, method="rtn", init="maxabs",
                                global_scale=result.global_scale)
    if chosen.initial_bytes_are_rtns and result.initial_bytes is not None:
        rows, cols = weight.shape
        codes = np.empty((rows, cols), np.uint8)
        for r0 in range(0, rows, ROWS_PER_BLOCK):  # float64 copies of a block, not the layer
            block = slice(r0, r0 + ROWS_PER_BLOCK)
            groups = np.asarray(weight[block], np.float64).reshape(-1, cols // GROUP_SIZE,
                                                                   GROUP_SIZE)
            codes[block] = encode_groups(groups, result.initial_bytes[block],
                                         result.global_scale).reshape(-1, cols)
        return QuantizedWeight.from_bytes(codes, result.initial_bytes,
                                          result.initial_bytes, result.global_scale,
                                          method="rtn", init="maxabs")
    return backend.quantize(weight, method="rtn", init="maxabs", global_scale=result.global_scale)


def quantize_layer(plan, weight, global_scale, request, backend, layout, h=None, H=None,
                   tokens=None, fallback: str | None = None, on_groups=None, timings=None,
                   blocks=None):
    """``(tensors to write, report entry)`` of one planned weight. ``h`` (or for hscale-block
    ``blocks``, the diagonal 16 x 16 blocks of H) None where the method needs it (a Linear no
    calibration token reached): the scale-only search (h = 1), said in the entry. ``timings``
    (a dict) gets the seconds of the search and of the report's errors added under ``search``
    and ``errors``."""
    started = time.perf_counter()
    name = f"{plan.module}.weight"
    if weight.dtype not in WEIGHT_DTYPES:
        raise ValueError(f"{name}: dtype {weight.dtype}")
    if global_scale is None:
        global_scale = set_global_scale((plan.module,), lambda m: weight, layout,
                                        PIPELINES[request.pipeline].scale_ceiling)
    pipeline, method, note = request.pipeline, request.method, fallback
    statistic = {"h": h, "blocks": blocks, None: None}[method_named(method).statistic]
    if PIPELINES[pipeline].needs_full_hessian and H is None:
        # GPTQ with H = I has no error feedback: it is the rtn pipeline (HSCALE-GPTQ-1)
        pipeline, method = "rtn", ("scale-only" if method_named(method).reads_h else method)
        note = (fallback or "no calibration token reached it") + ": GPTQ with H = I (no error " \
            f"feedback), method {method}"
    elif method_named(method).reads_statistics and statistic is None:
        method = "scale-only"
        note = (fallback or "no calibration token reached it") + ": the scale-only search (h = 1)"
    chosen = PIPELINES[pipeline]
    # the report's errors from the group objectives (rounding_quality): the search hands them
    # back, with h = 1 and with h
    from_objectives = not request.no_report and H is None and chosen.initial_bytes_are_rtns
    try:
        result = quantize_weight(
            weight, statistic, pipeline=pipeline,
            method=method, backend=backend, hessian=H, global_scale=global_scale,
            K=request.K, U=request.U, damp=request.damp,
            block_size=request.block_size, act_order=request.act_order,
            static_groups=request.static_groups, on_groups=on_groups,
            objectives_h=h if from_objectives else False)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    tensors = layout.tensors(plan.module, result)
    searched = time.perf_counter()
    entry = {"module": plan.module, "shape": [plan.rows, plan.cols],
             "global_scale": float(result.global_scale), "fused_with": list(plan.fused_with)}
    if plan.expert:
        entry["expert"] = True
    if tokens is not None:
        entry["tokens"] = int(tokens)
    if note:
        entry["fallback"] = note
    if method != request.method:
        entry["method"] = method
    if request.no_report:  # --no-report: no errors against RTN, the chosen shifts only
        entry.update(shift_histogram(result))
    elif from_objectives and result.initial_bytes is not None:
        # RTN's bytes are the result's initial bytes: both errors from the group objectives,
        # the search's own (scored on the backend's steps where it did not hand them back)
        steps = getattr(backend, "layer_quantizer", None)
        steps = steps if result.objectives is None else None
        entry.update(rounding_quality(weight, result, h,
                                      steps(weight.size // GROUP_SIZE) if steps else None))
    else:
        entry.update(layer_quality(weight, result, rtn_counterpart(weight, result, pipeline,
                                                                   backend), h, H))
    if timings is not None:
        timings["search"] = timings.get("search", 0.0) + searched - started
        if not request.no_report:
            timings["errors"] = timings.get("errors", 0.0) + time.perf_counter() - searched
    return tensors, entry


def quantize_planned(c: RunContext, plan, weight, scales: dict, stats: LayerStatistics,
                     position: tuple[int, int]):
    """The one step of both paths of a run for one planned weight (``position``: its index
    and the count shown on the progress bar): its fused set's s_g (NVFP4-CKPT-3, from the
    largest amax of the members, computed when the set's first member comes and kept in
    ``scales``), ``quantize_layer`` with the weight's statistics, the activation scale of a
    W4A4 layout (HSCALE-CAL-2), the progress. Returns ``(tensors to write, report entry)``."""
    c.progress.tensor(*position, plan.module)
    if plan.module not in scales and len(plan.fused_with) > 1:
        s_g = set_global_scale(
            plan.fused_with,
            lambda m: weight if m == plan.module else c.source.array(f"{m}.weight"),
            c.layout, PIPELINES[c.request.pipeline].scale_ceiling)
        scales.update({m: s_g for m in plan.fused_with})
    done = [0]

    def on_groups(weights):
        done[0] += weights
        c.progress.advance(weights)
    tensors, entry = quantize_layer(
        plan, weight, scales.get(plan.module), c.request, c.backend, c.layout,
        stats.h.get(plan.module), stats.H.get(plan.module), stats.tokens.get(plan.module),
        stats.fallbacks.get(plan.module), on_groups, c.timings, stats.blocks.get(plan.module))
    add_input_scale(plan, tensors, entry, stats.amax, c.layout)
    c.progress.advance(plan.weights - done[0])
    return tensors, entry
