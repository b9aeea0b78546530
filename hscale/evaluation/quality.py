"""How far a quantized layer is from its original: the weight error, the diagonal proxy
``sum_j h_j dW_ij^2`` (the sum of H-Scale's group objectives, HSCALE-OBJ-1) and the output error
``Tr(dW G dW^T)`` with ``G = X^T X``, each beside RTN's at the same s_g."""

from __future__ import annotations

from collections import Counter

import numpy as np


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
    if result.delta is not None:
        live = result.scale_bytes != 0
        values, counts = np.unique(result.delta[live], return_counts=True)
        out["shifts"] = {int(v): int(c) for v, c in zip(values, counts)}
    return out


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
