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

    ``quantizer``: the steps of a backend set up for this layer (``layer_quantizer``), whose
    objectives are the reference's bit for bit; default the reference's. The objectives of
    every group are kept and summed at the end in one order, so the figures do not depend on
    the backend, its blocks or its threads. They measure the error against the exact NVFP4
    values ``q * s`` (HSCALE-OBJ-1); ``layer_quality`` measures it against the decoded fp32
    weights (NVFP4-DEQ-1), one fp32 rounding away: the two agree to about 1e-7 relative."""
    from hscale.reference import Quantizer
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
    errors = {key: np.empty(candidates.shape)
              for key in ("weight_se",) + (() if h is None else ("diag_error",))}

    def run_block(block):
        r0, r1, i0, i1 = block
        groups = quantizer.load_groups(weight[r0:r1, GROUP_SIZE * i0:GROUP_SIZE * i1])
        weightings = [UNIT_WEIGHTS if key == "weight_se" else h_groups[i0:i1] for key in errors]
        scored = quantizer.candidate_objectives_weighted(
            groups, weightings, candidates[r0:r1, i0:i1], result.global_scale)
        for key, values in zip(errors, scored):
            errors[key][r0:r1, i0:i1] = values

    quantizer.map_blocks(run_block, plan_blocks(rows, group_cols, quantizer.block_groups))
    sums = {key: (float(np.sum(e[..., 0])), float(np.sum(e[..., -1])))
            for key, e in errors.items()}
    out = {"weight_mse": sums["weight_se"][0] / weight.size,
           "weight_mse_rtn": sums["weight_se"][1] / weight.size}
    if h is not None:
        out["diag_error"], out["diag_error_rtn"] = sums["diag_error"]
    out.update(shift_histogram(result))
    return out


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
