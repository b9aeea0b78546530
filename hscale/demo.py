"""``hscale demo``: RTN, scale-only and H-Scale side by side on one layer."""

from __future__ import annotations

import numpy as np

from hscale.reference.window import window_deltas

METHODS = ("rtn", "scale-only", "hscale")


def layer_errors(weight: np.ndarray, dequantized: np.ndarray, hessian_diag: np.ndarray):
    """(weighted error sum_rj h_j dW_rj^2, plain weight error sum_rj dW_rj^2), in float64."""
    difference = weight.astype(np.float64) - dequantized.astype(np.float64)
    squared = difference * difference
    return float((squared * hessian_diag).sum()), float(squared.sum())


def run_demo(weight, hessian_diag, *, backend, init="maxabs", K=16, U=6, name="layer"):
    """Quantize with each method; return rows of (method, weighted, plain, histogram)."""
    deltas = window_deltas(K, U)
    rows = []
    for method in METHODS:
        result = backend.quantize(weight, hessian_diag, method=method, init=init, K=K, U=U)
        weighted, plain = layer_errors(weight, result.dequantize(), hessian_diag)
        histogram = {d: int(np.count_nonzero(result.delta == d)) for d in deltas}
        rows.append((method, weighted, plain, histogram))
    return rows


def format_report(rows, *, name, shape, backend_name, init, K, U) -> str:
    base_weighted, base_plain = rows[0][1], rows[0][2]
    lines = [f"layer {name}  shape {shape[0]}x{shape[1]}  backend {backend_name}  init {init}"
             f"  K={K} U={U}", ""]
    lines.append(f"{'method':<11} {'weighted error':>15} {'vs rtn':>7} {'weight error':>14} "
                 f"{'vs rtn':>7}")
    for method, weighted, plain, _ in rows:
        lines.append(f"{method:<11} {weighted:>15.6g} {weighted / base_weighted:>7.3f} "
                     f"{plain:>14.6g} {plain / base_plain:>7.3f}")
    lines += ["", "shift histogram (groups per chosen delta; rtn is all 0)"]
    deltas = list(rows[0][3])
    lines.append(f"{'delta':<11}" + "".join(f"{d:>7d}" for d in deltas))
    for method, _, _, histogram in rows:
        lines.append(f"{method:<11}" + "".join(f"{histogram[d]:>7d}" for d in deltas))
    return "\n".join(lines)


def plot_histograms(rows, path, *, name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    deltas = list(rows[0][3])
    width = 0.4
    for offset, (method, _, _, histogram) in zip((-width / 2, width / 2), rows[1:]):
        left.bar(np.array(deltas) + offset, [histogram[d] for d in deltas], width, label=method)
    left.set_xlabel("chosen shift delta (rungs of the E4M3 ladder)")
    left.set_ylabel("groups")
    left.set_title(f"{name}: chosen shifts")
    left.legend()
    methods = [r[0] for r in rows]
    base = rows[0]
    right.bar(np.arange(3) - 0.2, [r[1] / base[1] for r in rows], 0.4, label="weighted error")
    right.bar(np.arange(3) + 0.2, [r[2] / base[2] for r in rows], 0.4, label="weight error")
    right.set_xticks(np.arange(3), methods)
    right.axhline(1.0, color="gray", lw=0.8)
    right.set_ylabel("relative to rtn")
    right.set_title("error relative to rtn")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
