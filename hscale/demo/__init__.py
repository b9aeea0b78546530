"""``hscale demo``: RTN, scale-only and H-Scale side by side on one layer (by default the
bundled MiniLM layer of ``default_layer``)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from hscale.reference.validation import check_hessian_diag, check_weight
from hscale.reference.window import window_deltas

METHODS = ("rtn", "scale-only", "hscale")
LAYER_KEYS = ("weight", "hessian_diag")


class LayerFileError(ValueError):
    """A layer file that cannot be used: says which file and what is wrong with it."""


LAYER_FORM = "np.savez(path, weight=W, hessian_diag=h) with W (m, n) and h (n,)"

# What the columns of the report mean, printed under it.
LEGEND = """\
weighted error  sum over rows r and columns j of h_j (w_rj - q_rj)^2, q the dequantized weight
                and h_j = diag(X^T X)_j from calibration (how much an error in column j moves
                the layer's output): the objective H-Scale minimises
weight error    sum of (w_rj - q_rj)^2, the plain squared error of the weights
vs rtn          the error divided by rtn's: below 1 is better than round-to-nearest
Why H-Scale's weight error can exceed scale-only's: both search the same window of scale bytes,
scale-only for the smallest plain error (h = 1), H-Scale for the smallest weighted error. It
gives up plain error in columns where h is small to cut the error where h is large."""


def load_layer(path) -> tuple[np.ndarray, np.ndarray, str]:
    """(weight, hessian_diag, name) from an .npz written by ``np.savez(path, weight=W,
    hessian_diag=h, name=...)``, checked as the quantize API checks them; every problem with
    the file is a LayerFileError naming it."""
    where = f"--layer {path}"
    if not os.path.exists(path):
        raise LayerFileError(f"{where}: no such file")
    if not os.path.isfile(path):
        raise LayerFileError(f"{where}: not a file")
    if not zipfile.is_zipfile(path):
        raise LayerFileError(f"{where}: not an .npz archive; write the layer with {LAYER_FORM}")
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as data:
            held = list(data.files)
            for key in (k for k in LAYER_KEYS + ("name",) if k in held):
                arrays[key] = _read_array(data, key, where)
    except (OSError, EOFError, zipfile.BadZipFile) as error:
        raise LayerFileError(f"{where}: a damaged .npz archive ({error})") from None
    missing = [key for key in LAYER_KEYS if key not in arrays]
    if missing:
        raise LayerFileError(f"{where}: no {' and no '.join(map(repr, missing))} in the archive (it "
                         f"holds {', '.join(map(repr, held)) or 'no arrays'}); write the layer "
                         f"with {LAYER_FORM}")
    name = str(arrays["name"]) if "name" in arrays else Path(path).name
    try:
        weight = check_weight(arrays["weight"])
        check_hessian_diag(arrays["hessian_diag"], weight.shape[1])
    except (ValueError, TypeError) as error:
        raise LayerFileError(f"{where}: {error}") from None
    return arrays["weight"], arrays["hessian_diag"], name


def _read_array(data, key: str, where: str) -> np.ndarray:
    try:
        return data[key]
    except ValueError as error:
        if "Object arrays" in str(error):  # numpy refuses to unpickle: say what the array is
            raise LayerFileError(f"{where}: {key!r} holds Python objects, not numbers; save a "
                             "numeric array (np.asarray(x, dtype=np.float32))") from None
        raise LayerFileError(f"{where}: {key!r} cannot be read ({error})") from None


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
    lines += ["", LEGEND, "",
              "shift histogram: how many groups chose each delta, the rungs of the E4M3 ladder "
              "from the", "initial scale byte to the chosen one (rtn keeps the initial byte: "
              "all 0)"]
    deltas = list(rows[0][3])
    lines.append(f"{'delta':<11}" + "".join(f"{d:>7d}" for d in deltas))
    for method, _, _, histogram in rows:
        lines.append(f"{method:<11}" + "".join(f"{histogram[d]:>7d}" for d in deltas))
    return "\n".join(lines)


def plot_histograms(rows, path, *, name, image_format="png"):
    """The shift histograms and the relative errors as an image at ``path``, written to a
    temporary name and renamed when complete."""
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
    partial = f"{path}.partial"
    try:
        fig.savefig(partial, dpi=110, format=image_format)
        os.replace(partial, path)
    finally:
        plt.close(fig)
        if os.path.exists(partial):
            os.remove(partial)
