"""How far a quantized layer is from its original: the weight error, the diagonal proxy
``sum_j h_j dW_ij^2`` (the sum of H-Scale's group objectives, HSCALE-OBJ-1) and the output error
``Tr(dW G dW^T)`` with ``G = X^T X``, each beside RTN's at the same s_g."""

from __future__ import annotations

from collections import Counter

import numpy as np

from hscale.reference import FIRST_NORMAL_BYTE, GROUP_SIZE, ZERO_GROUP_BYTE


def layer_quality(weight, result, rtn, h, G, rows_per_block: int = 256) -> dict:
    """Weight MSE, the diagonal proxy sum_j h_j dW_ij^2 and (with G) Tr(dW G dW^T), each with
    the same quantity of RTN at the same s_g, and the shift histogram; computed by blocks of
    rows, so that the float64 differences of a large layer never exist whole."""
    from hscale.reference import dequantize
    sums = Counter()
    for r0 in range(0, weight.shape[0], rows_per_block):
        rows = slice(r0, r0 + rows_per_block)
        w = np.asarray(weight[rows], np.float64)
        for tag, q in (("", result), ("_rtn", rtn)):
            d = w - dequantize(q.codes[rows], q.scale_bytes[rows], q.global_scale)
            sums["weight_se" + tag] += float(np.sum(d * d))
            if h is not None:
                sums["diag_error" + tag] += float(np.sum((d * d) @ h))
            if G is not None:
                sums["output_error" + tag] += float(np.sum((d @ G) * d))  # Tr(dW G dW^T)
    out = {"weight_mse": sums["weight_se"] / weight.size,
           "weight_mse_rtn": sums["weight_se_rtn"] / weight.size}
    for key in ("diag_error", "output_error"):
        if key in sums:
            out[key], out[key + "_rtn"] = sums[key], sums[key + "_rtn"]
    out.update(shift_histogram(result))
    return out


def rounding_quality(weight, result, h, quantizer=None) -> dict:
    """``layer_quality`` without G, for a result whose codes are the rounding at its bytes
    (NVFP4-E2M1-2) and whose initial bytes are RTN's at the same s_g (NVFP4-INIT-1): each sum
    is a sum of group objectives (HSCALE-OBJ-1) at the chosen and at the initial byte, with h
    and with h = 1 (the squared error), so RTN's codes are never kept and nothing is decoded.

    The objectives are the result's own (``result.objectives``: the search's arithmetic, asked
    for by ``quantize(objectives=True, objectives_h=h)``) where it has those of every weighting
    needed; else they are scored here (``score_objectives``, on ``quantizer``'s steps), for a
    backend whose search does not hand them back (cupy, a third party's). Either way every
    group's objective is the reference's bit for bit and the sums are taken at the end in one
    order, so the figures do not depend on the backend, its blocks or its threads. They
    measure the error against the exact NVFP4 values ``q * s`` (HSCALE-OBJ-1);
    ``layer_quality`` measures it against the decoded fp32 weights (NVFP4-DEQ-1), one fp32
    rounding away: the two agree to about 1e-7 relative."""
    objectives = result.objectives
    if objectives is None or (h is not None and objectives.weighted is None):
        objectives = score_objectives(weight, result, h, quantizer)
    out = {"weight_mse": float(np.sum(objectives.squared[..., 0])) / weight.size,
           "weight_mse_rtn": float(np.sum(objectives.squared[..., -1])) / weight.size}
    if h is not None:
        out["diag_error"] = float(np.sum(objectives.weighted[..., 0]))
        out["diag_error_rtn"] = float(np.sum(objectives.weighted[..., -1]))
    out.update(shift_histogram(result))
    return out


def score_objectives(weight, result, h, quantizer=None):
    """The ``GroupObjectives`` of a result (at its chosen and initial bytes, h = 1 and, where
    given, h), scored from the weight by one rounding of the two bytes under both weightings.

    ``quantizer``: the steps of a backend set up for this layer (``layer_quantizer``), whose
    objectives are the reference's bit for bit; default the reference's."""
    from hscale.reference import GroupObjectives, Quantizer
    from hscale.reference.objective import UNIT_WEIGHTS
    from hscale.reference.quantize import plan_blocks
    quantizer = quantizer or Quantizer()
    rows, cols = weight.shape
    group_cols = cols // GROUP_SIZE
    h_groups = None if h is None else np.asarray(h, np.float64).reshape(group_cols, GROUP_SIZE)
    rtn_is_result = np.array_equal(result.scale_bytes, result.initial_bytes)
    pair = (result.scale_bytes,) if rtn_is_result else (result.scale_bytes, result.initial_bytes)
    # A zero group (byte 0x00, NVFP4-ZERO-1) has w = 0 and so no error at any scale: it is
    # scored at a live byte, where the objective is defined and is exactly 0.
    candidates = np.stack(pair, axis=-1)
    candidates[candidates == ZERO_GROUP_BYTE] = FIRST_NORMAL_BYTE
    errors = [np.empty(candidates.shape) for _ in range(1 if h is None else 2)]

    def run_block(block):
        r0, r1, i0, i1 = block
        groups = quantizer.load_groups(weight[r0:r1, GROUP_SIZE * i0:GROUP_SIZE * i1])
        weightings = [UNIT_WEIGHTS, None if h is None else h_groups[i0:i1]][:len(errors)]
        scored = quantizer.candidate_objectives_weighted(
            groups, weightings, candidates[r0:r1, i0:i1], result.global_scale)
        for array, values in zip(errors, scored):
            array[r0:r1, i0:i1] = values

    quantizer.map_blocks(run_block, plan_blocks(rows, group_cols, quantizer.block_groups))
    both = [np.broadcast_to(e, (rows, group_cols, 2)) for e in errors]  # rtn: one byte
    return GroupObjectives(both[0], both[1] if h is not None else None)


def shift_histogram(result) -> dict:
    """``{"shifts": {delta: groups}}`` of the live groups of a searched result, else ``{}``."""
    if result.delta is None:
        return {}
    live = result.scale_bytes != ZERO_GROUP_BYTE
    values, counts = np.unique(result.delta[live], return_counts=True)
    return {"shifts": {int(v): int(c) for v, c in zip(values, counts)}}


def cosine_stats(a: np.ndarray, b: np.ndarray) -> dict:
    cosines = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"mean": float(np.mean(cosines)), "min": float(np.min(cosines))}


def output_error(weight, dequantized, G) -> float:
    """``Tr(dW G dW^T)`` with ``dW = weight - dequantized`` (float64)."""
    d = np.asarray(weight, np.float64) - np.asarray(dequantized, np.float64)
    return float(np.sum((d @ G) * d))


def diagonal_error(weight, dequantized, h) -> float:
    """``sum_ij h_j dW_ij^2``: the sum of H-Scale's group objectives."""
    d = np.asarray(weight, np.float64) - np.asarray(dequantized, np.float64)
    return float(np.sum((d * d) @ h))
