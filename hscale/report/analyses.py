"""The paper's analyses, as tools: the full-ladder search, the Best Scale oracle, the shift
statistics, the (U, K) window sweep and the paper's microcase (tests/evaluation/test_fidelity.py checks
each on small cases).

For a Linear with calibration inputs X (rows: tokens) the output error of a quantized weight
W' is ``L_full = ||X (W - W')^T||_F^2 = Tr(dW G dW^T)`` with ``G = X^T X`` (the paper's layer
objective); its diagonal proxy ``sum_ij G_jj dW_ij^2`` is the sum of H-Scale's group
objectives (h = diag(G), HSCALE-CAL-1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hscale.evaluation.quality import output_error


LADDER_BYTES = np.arange(0x01, 0x7F, dtype=np.uint8)  # every positive E4M3 byte, 0x01 .. 0x7E


WINDOWS = ((0, 16), (4, 16), (5, 16), (6, 16), (7, 16), (8, 16), (10, 16), (6, 20), (6, 24))


def direct_output_error(X, weight, dequantized) -> float:
    """``||X dW^T||_F^2`` from the activations themselves (rows of X: tokens)."""
    d = np.asarray(weight, np.float64) - np.asarray(dequantized, np.float64)
    return float(np.sum((np.asarray(X, np.float64) @ d.T) ** 2))


def _groups(weight):
    from hscale.reference import GROUP_SIZE
    w = np.asarray(weight, np.float64)
    return w.reshape(w.shape[0], -1, GROUP_SIZE)


def _shift_rank(shift):
    """The tie-break rank of a shift in HSCALE-ARGMIN-1's priority order 0, +1, -1, +2, ..."""
    shift = np.asarray(shift, np.int64)
    return 2 * np.abs(shift) - (shift > 0)


def full_ladder(weight, h, global_scale, init: str = "maxabs"):
    """Every positive E4M3 byte (0x01 .. 0x7E) tried for every group; the one of least
    **diagonal** objective ``sum_j h_j (w_j - q_j s)^2`` (HSCALE-OBJ-1, the objective H-Scale's
    window search minimises; the paper's "full grid") is kept, equal objectives broken in
    H-Scale's priority order around the initial byte. ``h`` (n,), or None for h = 1. Zero
    groups keep byte 0x00 (NVFP4-ZERO-1). Returns a reference QuantizedWeight."""
    from hscale.reference import QuantizedWeight, effective_scale, encode_e2m1, weighted_error
    from hscale.reference.quantize import encode_groups, select_scale_bytes
    groups = _groups(weight)
    rows, group_cols, size = groups.shape
    flat = groups.reshape(-1, size)
    hh = (np.ones(flat.shape) if h is None
          else np.broadcast_to(np.asarray(h, np.float64).reshape(group_cols, size),
                               groups.shape).reshape(-1, size))
    initial, _ = select_scale_bytes(flat, None, "rtn", init, 16, 6, np.float32(global_scale))
    live = initial != 0
    errors = np.empty((int(live.sum()), LADDER_BYTES.size))
    live_groups, live_h = flat[live], hh[live]
    for k, byte in enumerate(LADDER_BYTES):
        scale = np.full(live_groups.shape[0], effective_scale(byte, global_scale))
        codes = encode_e2m1(live_groups, scale[:, None])
        errors[:, k] = weighted_error(live_groups, live_h, codes, scale)
    best = errors.min(axis=1, keepdims=True)
    rank = _shift_rank(LADDER_BYTES[None, :].astype(np.int64)
                       - initial[live][:, None].astype(np.int64))
    rank = np.where(errors == best, rank, np.iinfo(np.int64).max)
    chosen = initial.copy()
    chosen[live] = LADDER_BYTES[np.argmin(rank, axis=1)]
    codes = encode_groups(flat, chosen, np.float32(global_scale))
    return QuantizedWeight.from_bytes(codes.reshape(rows, -1), chosen.reshape(rows, group_cols),
                                      initial.reshape(rows, group_cols), global_scale,
                                      method="full-ladder", init=init, K=252, U=126)


@dataclass
class BestScale:
    """The continuous oracle: per-group scales (rows, groups), the dequantized weight, its
    ``L_full``, and the ``L_full`` of each iteration's accepted iterate (non-increasing)."""

    scales: np.ndarray
    dequantized: np.ndarray
    error: float
    history: list


def dequantize_continuous(weight, scales) -> np.ndarray:
    """float64 (m, n): every group's codes re-rounded to E2M1 at its (any positive) scale, times
    that scale; zero groups stay zero."""
    from hscale.reference import E2M1_VALUES, encode_e2m1
    groups = _groups(weight)
    s = np.asarray(scales, np.float64)[..., None]
    codes = encode_e2m1(groups, s)
    return (E2M1_VALUES[codes.astype(np.intp)] * s).reshape(np.shape(weight))


def best_scale(weight, G, start_scales, iterations: int = 60, rate: float = 0.02) -> BestScale:
    """The paper's "Best Scale" oracle: continuous per-group scales optimised by gradient
    descent (Adam on log s, float64, deterministic) on the full layer-output objective
    ``L_full = Tr(dW G dW^T)``, the codes re-rounded to E2M1 at each scale. The gradient treats
    the codes as constants at each step (``d w'/d s = q``, the straight-through rule); an
    iterate is kept only when it lowers ``L_full``, so the result is never worse than the start
    (pass H-Scale's effective scales to start from H-Scale)."""
    w = np.asarray(weight, np.float64)
    s = np.array(start_scales, np.float64)
    live = s > 0
    safe = np.where(live, s, 1.0)
    deq = dequantize_continuous(w, np.where(live, s, np.inf)) if not live.all() else \
        dequantize_continuous(w, s)
    deq = np.where(np.repeat(live, 16, axis=1), deq, 0.0)
    best_err = output_error(w, deq, G)
    best = (safe.copy(), deq)
    history = [best_err]
    log_s = np.log(safe)
    m = np.zeros_like(log_s)
    v = np.zeros_like(log_s)
    b1, b2 = 0.9, 0.999
    for t in range(1, iterations + 1):
        cur = np.exp(log_s)
        deq = dequantize_continuous(w, cur)
        deq = np.where(np.repeat(live, 16, axis=1), deq, 0.0)
        d = w - deq
        err = float(np.sum((d @ G) * d))
        if err < best_err:
            best_err, best = err, (cur.copy(), deq)
        history.append(best_err)
        q = (deq / np.repeat(cur, 16, axis=1)).reshape(_groups(w).shape)
        grad_s = -2.0 * np.sum((d @ G).reshape(q.shape) * q, axis=-1)
        grad = np.where(live, grad_s * cur, 0.0)  # d L / d log s
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        step = rate * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + 1e-30)
        log_s = log_s - np.where(live, step, 0.0)
    scales, deq = best
    return BestScale(np.where(live, scales, 0.0), deq, best_err, history)


def shift_statistics(weight, h, result) -> dict:
    """Per chosen shift ``delta`` of a search result (non-zero groups): how many groups chose
    it, their share, the mean relative reduction of the group's diagonal objective against its
    initial byte (delta = 0), and the share of the total objective removed that they account
    for. ``h`` (n,) the Hessian diagonal the objective weighs by."""
    from hscale.reference import effective_scale, encode_e2m1, weighted_error
    groups = _groups(weight).reshape(-1, 16)
    group_cols = _groups(weight).shape[1]
    hh = np.broadcast_to(np.asarray(h, np.float64).reshape(group_cols, 16),
                         _groups(weight).shape).reshape(-1, 16)
    chosen = result.scale_bytes.reshape(-1)
    initial = result.initial_bytes.reshape(-1)
    live = chosen != 0
    g, hl = groups[live], hh[live]
    errs = []
    for b in (initial[live], chosen[live]):
        s = effective_scale(b, result.global_scale)
        errs.append(weighted_error(g, hl, encode_e2m1(g, s[:, None]), s))
    e0, e1 = errs
    delta = result.delta.reshape(-1)[live].astype(int)
    removed = e0 - e1
    total_removed = float(removed.sum())
    stats = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(e0 > 0, removed / e0, 0.0)
    for shift in np.unique(delta):
        sel = delta == shift
        stats[int(shift)] = {"groups": int(sel.sum()), "share": float(sel.mean()),
                             "mean_reduction": float(relative[sel].mean()),
                             "removed": float(removed[sel].sum()),
                             "removed_share": (float(removed[sel].sum() / total_removed)
                                               if total_removed > 0 else 0.0)}
    return {"shifts": stats, "groups": int(live.sum()),
            "initial_objective": float(e0.sum()), "removed_objective": total_removed}


def recovered_fraction(maxabs_error: float, window_error: float, ladder_error: float) -> float:
    """The share of the max-abs -> full-ladder ``L_full`` gain a window recovers (NaN when the
    full ladder gains nothing)."""
    gain = maxabs_error - ladder_error
    return float((maxabs_error - window_error) / gain) if gain > 0 else float("nan")


def window_sweep(weight, G, global_scale, windows=WINDOWS, ladder=None) -> dict:
    """(U, K) -> the fraction of the max-abs -> full-ladder ``L_full`` gain the H-Scale window
    recovers on one layer (h = diag(G))."""
    from hscale.reference import quantize
    h = np.diag(G).copy()
    base = output_error(weight, quantize(weight, method="rtn", global_scale=global_scale)
                        .dequantize(), G)
    ladder = full_ladder(weight, h, global_scale) if ladder is None else ladder
    top = output_error(weight, ladder.dequantize(), G)
    return {(U, K): recovered_fraction(base, output_error(
        weight, quantize(weight, h, method="hscale", K=K, U=U, global_scale=global_scale)
        .dequantize(), G), top) for U, K in windows}


# The paper's appendix microcase (Table "A calibration microcase ...").
MICROCASE_W = np.array([-3.750, -1.740, 4.320, 4.880])


MICROCASE_X = np.array([[0.600, 1.400, 1.500, 2.000], [2.000, 1.000, 0.700, 1.000]])


MICROCASE_PRINTED = {"min-max": 0.813, "weight": 0.801, "output": 0.895}


def microcase() -> dict:
    """The microcase recomputed: for each objective (weight error ``||w - w'||^2`` and output
    error ``||X (w - w')^T||^2``), the best of every positive E4M3 scale (s_g = 1), the best
    continuous scale (codes re-rounded at each scale; exact: the objective is a quadratic on
    each interval where the codes are constant), and the printed scale's own errors."""
    from hscale.reference import (E2M1_MIDPOINTS, SCALE_BYTE_VALUES, priority_order,
                                  range_fitting_byte, window_bytes)
    w, X = MICROCASE_W, MICROCASE_X
    G = X.T @ X

    def errors(s):
        d = w - dequantize_continuous(np.pad(w, (0, 12))[None, :], np.array([[s]]))[0, :4]
        return float(d @ d), float(d @ G @ d)

    def codes(s):
        deq = dequantize_continuous(np.pad(w, (0, 12))[None, :], np.array([[s]]))[0, :4]
        return [round(float(x / s), 3) for x in deq]

    out = {"printed": {}}
    for name, s in MICROCASE_PRINTED.items():
        we, oe = errors(s)
        out["printed"][name] = {"scale": s, "codes": codes(s), "weight_error": we,
                                "output_error": oe}
    ladder = [float(v) for v in SCALE_BYTE_VALUES[1:0x7F]]
    # continuous: the codes change only where |w_j| / s crosses an E2M1 midpoint
    breaks = sorted({abs(x) / m for x in w for m in E2M1_MIDPOINTS if m > 0})
    for index, objective in enumerate(("weight", "output")):
        M = np.eye(4) if objective == "weight" else G
        e4m3 = min(ladder, key=lambda s: (errors(s)[index], s))
        candidates = []
        edges = [breaks[0] * 0.5] + breaks + [breaks[-1] * 2]
        for lo, hi in zip(edges[:-1], edges[1:]):
            mid = 0.5 * (lo + hi)
            q = dequantize_continuous(np.pad(w, (0, 12))[None, :], np.array([[mid]]))[0, :4] / mid
            denominator = float(q @ M @ q)
            s = float(q @ M @ w) / denominator if denominator > 0 else mid
            s = min(max(s, lo), hi)
            candidates.append(s)
        continuous = min(candidates, key=lambda s: errors(s)[index])
        start = int(range_fitting_byte(np.array([np.max(np.abs(w))]), 1.0, 6.0)[0])
        window = [float(SCALE_BYTE_VALUES[b]) for b in
                  window_bytes(np.array(start), priority_order(16, 6))]
        windowed = min(window, key=lambda s: (errors(s)[index], s))
        out[objective] = {
            "e4m3_scale": e4m3, "e4m3_codes": codes(e4m3),
            "e4m3_errors": dict(zip(("weight_error", "output_error"), errors(e4m3))),
            "continuous_scale": continuous, "continuous_codes": codes(continuous),
            "continuous_errors": dict(zip(("weight_error", "output_error"),
                                          errors(continuous))),
            "window_scale": windowed, "window_codes": codes(windowed),
            "window_errors": dict(zip(("weight_error", "output_error"), errors(windowed))),
            "printed_scale": MICROCASE_PRINTED[objective],
            "printed_is_e4m3": MICROCASE_PRINTED[objective] in ladder}
    return out
