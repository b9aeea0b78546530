"""The spread of ``hscale report``'s figures over calibration subsets: each subset a seeded
random half of the bundled calibration text, calibrated afresh (G = X^T X), and every method
evaluated on the same held-out text; mean and a 95% Student-t interval over the subsets, and
the seconds of each method in the same run."""

from __future__ import annotations

import time

import numpy as np

from hscale.evaluation.quality import output_error
from hscale.reference import DEFAULT_SCALE_CEILING, diagonal_blocks, quantize

from . import pipelines

SUBSETS = 5
FRACTION = 0.5
# Student t, 97.5% quantile, by degrees of freedom (subsets - 1)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262}

SPREAD_METHODS = {
    "rtn": lambda w, G, s_g: quantize(w, method="rtn", global_scale=s_g),
    "hscale": lambda w, G, s_g: quantize(w, np.diag(G).copy(), global_scale=s_g),
    "hscale-block": lambda w, G, s_g: quantize(w, diagonal_blocks(G), method="hscale-block",
                                               global_scale=s_g),
}


def interval(values) -> dict:
    """mean, and the half width of its 95% Student-t interval (n >= 2), of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    half = T975[v.size - 1] * v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
    return {"mean": float(v.mean()), "half_width": float(half), "values": [float(x) for x in v]}


def calibration_spread(model, subsets: int = SUBSETS, fraction: float = FRACTION,
                       progress: bool = True) -> dict:
    """Per subset: each method's mean over the Linears of its held-out output error relative to
    min-max, and its seconds over all Linears; then the interval over subsets (and of the
    paired difference hscale-block minus hscale)."""
    from hscale.calibration import calibration_texts
    from hscale.quantize import QuantizeRequest, calibrate
    texts = calibration_texts()
    scales = pipelines.global_scales(model, DEFAULT_SCALE_CEILING)  # from the weights alone
    modules = list(model.weights)
    request = QuantizeRequest(progress=False)
    per = {m: {"heldout": [], "seconds": []} for m in SPREAD_METHODS}
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
        if progress:
            print(f"  calibration subset {seed + 1}/{subsets}: "
                  + ", ".join(f"{m} {100 * (per[m]['heldout'][-1] - 1):+.2f}%"
                              for m in SPREAD_METHODS), flush=True)
    return {"subsets": subsets, "fraction": fraction, "sentences": int(fraction * len(texts)),
            "methods": {m: {"heldout": interval(v["heldout"]), "seconds": interval(v["seconds"])}
                        for m, v in per.items()},
            "block_minus_hscale": interval(np.array(per["hscale-block"]["heldout"])
                                           - np.array(per["hscale"]["heldout"]))}
