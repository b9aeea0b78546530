"""H-Scale on each pipeline's baseline, measured on a calibrated model (docs/results.md's pipeline
table): every Linear quantized by each pipeline (rtn, 4over6, gptq) with its baseline scale rule
and with H-Scale, the output error computed with G from the calibration text and from held-out
text (hscale/calibration/data/heldout.txt), which no quantizer saw."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hscale.checkpoints import SafetensorsModel
from hscale.evaluation.quality import diagonal_error, output_error
from hscale.models.architecture import architecture_linears
from hscale.pipelines import PIPELINES, quantize_weight
from hscale.quantize import (QuantizeRequest, calibrate, model_directory, plan_layers,
                             set_global_scale)

# The analysis uses the multiplier s_g as computed (the ModelOpt convention); a compressed-tensors
# file may hold the neighbouring fp32 value (NVFP4-GS-4), which changes nothing measured here.
SCALE_CONVENTION = "modelopt"


@dataclass
class CalibratedModel:
    """The Linears a quantizer sees, with G from the calibration text and from held-out text."""

    directory: Path
    weights: dict     # module -> float32 (out, in)
    fused: dict       # module -> the modules sharing its global scale
    G: dict           # module -> X^T X over the calibration text (float64)
    G_heldout: dict   # module -> X^T X over the held-out text


def calibrated_model(model_dir=None, progress: bool = True) -> CalibratedModel:
    from hscale.calibration import heldout_texts
    request = QuantizeRequest(model_dir=model_dir, progress=progress)
    directory = model_directory(request)
    source = SafetensorsModel(directory)
    plans = [p for p in plan_layers(source, architecture_linears(directory), request.ignore)
             if p.quantize]
    modules = [p.module for p in plans]
    _, G, _ = calibrate(directory, modules, request, True)
    _, G_heldout, _ = calibrate(directory, modules, request, True, texts=heldout_texts())
    weights = {m: source.array(f"{m}.weight").astype(np.float32) for m in modules}
    return CalibratedModel(directory, weights, {p.module: p.fused_with for p in plans},
                           G, G_heldout)


def global_scales(model: CalibratedModel, ceiling: float) -> dict:
    """module -> s_g, one per fused set (NVFP4-CKPT-3), as ``hscale quantize`` computes it."""
    scales = {}
    for module, members in model.fused.items():
        if module not in scales:
            s_g = set_global_scale(members, model.weights.__getitem__, SCALE_CONVENTION, ceiling)
            scales.update({m: s_g for m in members})
    return scales


def pipeline_errors(model: CalibratedModel, pipeline: str, method: str,
                    backend: str = "numpy") -> dict:
    """module -> {output, output_heldout, diagonal, weight_mse} of one pipeline and method."""
    ceiling = PIPELINES[pipeline].scale_ceiling
    scales = global_scales(model, ceiling)
    errors = {}
    for module, weight in model.weights.items():
        G = model.G[module]
        result = quantize_weight(weight, np.diag(G).copy(), pipeline=pipeline, method=method,
                                 backend=backend, hessian=G, global_scale=scales[module])
        dequantized = result.dequantize()
        d = weight.astype(np.float64) - dequantized
        errors[module] = {"output": output_error(weight, dequantized, G),
                          "output_heldout": output_error(weight, dequantized,
                                                         model.G_heldout[module]),
                          "diagonal": diagonal_error(weight, dequantized, np.diag(G)),
                          "weight_mse": float(np.mean(d * d))}
    return errors


def relative_to(errors: dict, baseline: dict, key: str) -> np.ndarray:
    """Each layer's ``key`` error over the baseline's, in layer order."""
    return np.array([errors[m][key] / baseline[m][key] for m in errors])


def pipelines_table(model: CalibratedModel, backend: str = "numpy", out=sys.stdout) -> list[dict]:
    """For each pipeline: H-Scale against the pipeline's own baseline (method rtn), per layer;
    the mean, the median and how many layers improved, on calibration and held-out text."""
    rows = []
    print("| pipeline | baseline | output error, calibration text | output error, held-out "
          "text | diag(G) objective | weight MSE | layers improved (held-out) |", file=out)
    print("|---|---|---:|---:|---:|---:|---:|", file=out)
    for pipeline in PIPELINES:
        start = time.perf_counter()
        baseline = pipeline_errors(model, pipeline, "rtn", backend)
        hscale = pipeline_errors(model, pipeline, "hscale", backend)
        seconds = time.perf_counter() - start
        row = {"pipeline": pipeline, "layers": len(hscale), "seconds": seconds}
        for key in ("output", "output_heldout", "diagonal", "weight_mse"):
            ratios = relative_to(hscale, baseline, key)
            row[key] = {"mean": float(np.mean(ratios)), "median": float(np.median(ratios)),
                        "improved": int(np.sum(ratios < 1))}
        rows.append(row)
        name = {"rtn": "RTN (max-abs)", "4over6": "4over6 (C = 256)", "gptq": "GPTQ"}[pipeline]
        print(f"| {name} + H-Scale | {name} | {row['output']['mean']:.3f} (median "
              f"{row['output']['median']:.3f}) | {row['output_heldout']['mean']:.3f} (median "
              f"{row['output_heldout']['median']:.3f}) | {row['diagonal']['mean']:.3f} | "
              f"{row['weight_mse']['mean']:.3f} | {row['output_heldout']['improved']} of "
              f"{row['layers']} |", file=out, flush=True)
    return rows
