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
from .head_to_head import warm_up_layer

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
    """name -> (function(weight, s_g, G), library) of the head-to-head's searches whose scales
    depend on the calibration (an importance matrix diag G, or ModelOpt's local Hessian from
    G's diagonal 16 x 16 blocks), or the reason one cannot run here."""
    import importlib
    from .head_to_head import CALIBRATED_ROWS, FUNCTIONS, MODELOPT_CALIBRATORS
    out = {}
    for name, library, function in FUNCTIONS:
        if name in CALIBRATED_ROWS:
            try:
                importlib.import_module(library)
                out[name] = (lambda w, s_g, G, f=function: f(w, s_g, np.diag(G).copy()),
                             library)
            except ImportError:
                out[name] = f"{library} is not installed here"
    for name in MODELOPT_CALIBRATORS:
        if name in CALIBRATED_ROWS:
            try:
                from hscale.backends.interop import modelopt_calibrators as calibrators
                ok, why = calibrators.available(name)
            except ImportError as error:
                ok, why = False, f"modelopt is not installed here ({error})"
            out[name] = ((lambda w, s_g, G, n=name: _modelopt(w, s_g, G, n), "modelopt")
                         if ok else why)
    return out


def _modelopt(weight, s_g, G, name):
    """ModelOpt's calibrator ``name`` on one Linear; it takes max|W| / 2688 as s_g itself
    (modelopt_calibrators' docstring), so the warning that says so is not repeated per Linear."""
    import warnings
    from hscale.backends.interop import modelopt_calibrators as calibrators
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return calibrators.dequantized(weight, s_g, G, name)


def calibration_spread(model, subsets: int = SUBSETS, fraction: float = FRACTION,
                       progress: bool = True, competitors: bool = True,
                       methods=tuple(SPREAD_METHODS), only=None) -> dict:
    """Per subset: each method's mean over the Linears of its held-out output error relative to
    min-max, and its seconds over all Linears; then the interval over subsets (and of the
    paired difference hscale-block minus hscale). ``competitors``: also the head-to-head's
    library searches whose scales depend on the calibration (an importance matrix from the
    subset's diag G), in the same run; a library's failure is its row's finding. ``methods``:
    the kit's methods to run (rtn, the reference, always); ``only``: the competitor names to run
    (default all), for a run that measures some rows alone (tools/modelopt_fidelity.py)."""
    from hscale.calibration import calibration_texts
    from hscale.quantize import QuantizeRequest, calibrate
    texts = calibration_texts()
    scales = pipelines.global_scales(model, DEFAULT_SCALE_CEILING)  # from the weights alone
    modules = list(model.weights)
    request = QuantizeRequest(progress=False)
    kit = {m: SPREAD_METHODS[m] for m in SPREAD_METHODS if m == "rtn" or m in methods}
    per = {m: {"heldout": [], "seconds": []} for m in kit}
    others = calibrated_competitors() if competitors else {}
    if only is not None:
        others = {n: f for n, f in others.items() if n in only}
    other = {n: {"heldout": [], "seconds": []} for n, f in others.items() if not isinstance(f, str)}
    failed = {n: f for n, f in others.items() if isinstance(f, str)}
    for seed in range(subsets):
        pick = np.sort(np.random.default_rng(seed).choice(len(texts), int(fraction * len(texts)),
                                                          replace=False))
        _, G, _ = calibrate(model.directory, modules, request, True,
                            texts=[texts[i] for i in pick])
        ratios = {m: [] for m in kit}
        seconds = dict.fromkeys(kit, 0.0)
        for module in modules:
            w, Gh = model.weights[module], model.G_heldout[module]
            errors = {}
            for method, run in kit.items():
                start = time.perf_counter()
                result = run(w, G[module], scales[module])
                seconds[method] += time.perf_counter() - start
                errors[method] = output_error(w, result.dequantize(), Gh)
            for method in kit:
                ratios[method].append(errors[method] / errors["rtn"])
        for method in kit:
            per[method]["heldout"].append(float(np.mean(ratios[method])))
            per[method]["seconds"].append(seconds[method])
        for name in [n for n in other if n not in failed]:
            function = others[name][0]
            try:
                warm_weight, warm_G = warm_up_layer()  # imports and set-up, untimed
                function(warm_weight, np.float32(1 / 2688), warm_G)
                ratio, spent = [], 0.0
                for module in modules:
                    w, Gh = model.weights[module], model.G_heldout[module]
                    start = time.perf_counter()
                    deq = function(w, scales[module], G[module])
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
                              for m in kit), flush=True)
    rows = {n: {"ran": True, "library": others[n][1], "heldout": interval(v["heldout"]),
                "seconds": interval(v["seconds"])} for n, v in other.items() if n not in failed}
    rows.update({n: {"ran": False, "reason": why} for n, why in failed.items()})
    return {"subsets": subsets, "fraction": fraction, "sentences": int(fraction * len(texts)),
            "methods": {m: {"heldout": interval(v["heldout"]), "seconds": interval(v["seconds"])}
                        for m, v in per.items()},
            "competitors": rows,
            "block_minus_hscale": (interval(np.array(per["hscale-block"]["heldout"])
                                            - np.array(per["hscale"]["heldout"]))
                                   if {"hscale", "hscale-block"} <= set(kit) else None)}
