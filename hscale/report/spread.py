"""The spread of ``hscale report``'s figures over calibration subsets: each subset a seeded
random half of the bundled calibration text, calibrated afresh (G = X^T X), and every method
evaluated on the same held-out text; mean and a 95% Student-t interval over the subsets, and
the seconds of each method in the same run."""

from __future__ import annotations

import time

import numpy as np

from hscale.evaluation.intervals import t_interval
from hscale.evaluation.quality import output_error
from hscale.reference import DEFAULT_SCALE_CEILING, diagonal_blocks, quantize

from . import pipelines

SUBSETS = 5
FRACTION = 0.5

SPREAD_METHODS = {
    "rtn": lambda w, G, s_g: quantize(w, method="rtn", global_scale=s_g),
    "hscale": lambda w, G, s_g: quantize(w, np.diag(G).copy(), global_scale=s_g),
    "hscale-block": lambda w, G, s_g: quantize(w, diagonal_blocks(G), method="hscale-block",
                                               global_scale=s_g),
}


def interval(values) -> dict:
    """mean, and the half width of its 95% Student-t interval (n >= 2; NaN for one value),
    of ``values`` (``hscale.evaluation.intervals.t_interval``)."""
    v = np.asarray(values, dtype=np.float64)
    half = t_interval(v).half_width
    return {"mean": float(v.mean()), "half_width": float("nan") if half is None else half,
            "values": [float(x) for x in v]}


def calibrated_competitors() -> dict:
    """name -> function(weight, s_g, h) of the head-to-head's library functions whose scales
    depend on the calibration (an importance matrix h), or the reason one cannot run here."""
    import importlib
    from .head_to_head import CALIBRATED_ROWS, FUNCTIONS
    out = {}
    for name, library, function in FUNCTIONS:
        if name in CALIBRATED_ROWS:
            try:
                importlib.import_module(library)
                out[name] = (function, library)
            except ImportError:
                out[name] = f"{library} is not installed here"
    return out


def calibration_spread(model, subsets: int = SUBSETS, fraction: float = FRACTION,
                       progress: bool = True, competitors: bool = True) -> dict:
    """Per subset: each method's mean over the Linears of its held-out output error relative to
    min-max, and its seconds over all Linears; then the interval over subsets (and of the
    paired difference hscale-block minus hscale). ``competitors``: also the head-to-head's
    library searches whose scales depend on the calibration (an importance matrix from the
    subset's diag G), in the same run; a library's failure is its row's finding."""
    from hscale.calibration import calibration_texts
    from hscale.quantize import QuantizeRequest, calibrate
    texts = calibration_texts()
    scales = pipelines.global_scales(model, DEFAULT_SCALE_CEILING)  # from the weights alone
    modules = list(model.weights)
    request = QuantizeRequest(progress=False)
    per = {m: {"heldout": [], "seconds": []} for m in SPREAD_METHODS}
    others = calibrated_competitors() if competitors else {}
    other = {n: {"heldout": [], "seconds": []} for n, f in others.items() if not isinstance(f, str)}
    failed = {n: f for n, f in others.items() if isinstance(f, str)}
    for seed in range(subsets):
        pick = np.sort(np.random.default_rng(seed).choice(len(texts), int(fraction * len(texts)),
                                                          replace=False))
        _, G, _ = calibrate(model.directory, modules, request, True,
                            texts=[texts[i] for i in pick])
        ratios = {m: [] for m in SPREAD_METHODS}
        seconds = dict.fromkeys(SPREAD_METHODS, 0.0)
        for module in modules:
            w, Gh = model.weights[module], model.G_heldout[module]
            errors = {}
            for method, run in SPREAD_METHODS.items():
                start = time.perf_counter()
                result = run(w, G[module], scales[module])
                seconds[method] += time.perf_counter() - start
                errors[method] = output_error(w, result.dequantize(), Gh)
            for method in SPREAD_METHODS:
                ratios[method].append(errors[method] / errors["rtn"])
        for method in SPREAD_METHODS:
            per[method]["heldout"].append(float(np.mean(ratios[method])))
            per[method]["seconds"].append(seconds[method])
        for name in [n for n in other if n not in failed]:
            function = others[name][0]
            try:
                function(np.ones((1, 16), np.float32), np.float32(1 / 2688), np.ones(16))  # warm
                ratio, spent = [], 0.0
                for module in modules:
                    w, Gh = model.weights[module], model.G_heldout[module]
                    start = time.perf_counter()
                    deq = function(w, scales[module], np.diag(G[module]).copy())
                    spent += time.perf_counter() - start
                    rtn = quantize(w, method="rtn", global_scale=scales[module]).dequantize()
                    ratio.append(output_error(w, deq, Gh) / output_error(w, rtn, Gh))
                other[name]["heldout"].append(float(np.mean(ratio)))
                other[name]["seconds"].append(spent)
            except Exception as error:  # noqa: BLE001 - a library's failure is its finding
                failed[name] = f"{type(error).__name__}: {error}"[:300]
        if progress:
            print(f"  calibration subset {seed + 1}/{subsets}: "
                  + ", ".join(f"{m} {100 * (per[m]['heldout'][-1] - 1):+.2f}%"
                              for m in SPREAD_METHODS), flush=True)
    rows = {n: {"ran": True, "library": others[n][1], "heldout": interval(v["heldout"]),
                "seconds": interval(v["seconds"])} for n, v in other.items() if n not in failed}
    rows.update({n: {"ran": False, "reason": why} for n, why in failed.items()})
    return {"subsets": subsets, "fraction": fraction, "sentences": int(fraction * len(texts)),
            "methods": {m: {"heldout": interval(v["heldout"]), "seconds": interval(v["seconds"])}
                        for m, v in per.items()},
            "competitors": rows,
            "block_minus_hscale": interval(np.array(per["hscale-block"]["heldout"])
                                           - np.array(per["hscale"]["heldout"]))}
