"""What quantization does to a layer's outputs, measured on a real model (docs/results.md).

For a Linear with calibration inputs X (rows: tokens) the output error of a quantized weight
W' is ``L_full = ||X (W - W')^T||_F^2 = Tr(dW G dW^T)`` with ``G = X^T X`` (the paper's layer
objective); its diagonal proxy ``sum_ij G_jj dW_ij^2`` is the sum of H-Scale's group
objectives (h = diag(G), HSCALE-CAL-1). Both are computed with G from the calibration text and
with G from held-out text (hscale/data/heldout.txt), which no quantizer saw.

``python -m hscale.fidelity pipelines`` prints docs/results.md's pipeline table: every Linear
of the bundled all-MiniLM-L6-v2, each pipeline (rtn, 4over6, gptq) with its baseline scale rule
and with H-Scale, the mean over layers of each layer's error relative to the pipeline's own
baseline.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hscale.checkpoint import SafetensorsModel
from hscale.quantize_model import (PIPELINES, QuantizeRequest, architecture_linears, calibrate,
                                   model_directory, plan_layers, quantize_weight,
                                   set_global_scale)

# The analysis uses the multiplier s_g as computed (the ModelOpt convention); a compressed-tensors
# file may hold the neighbouring fp32 value (NVFP4-GS-4), which changes nothing measured here.
SCALE_CONVENTION = "modelopt"


def output_error(weight, dequantized, G) -> float:
    """``Tr(dW G dW^T)`` with ``dW = weight - dequantized`` (float64)."""
    d = np.asarray(weight, np.float64) - np.asarray(dequantized, np.float64)
    return float(np.sum((d @ G) * d))


def diagonal_error(weight, dequantized, h) -> float:
    """``sum_ij h_j dW_ij^2``: the sum of H-Scale's group objectives."""
    d = np.asarray(weight, np.float64) - np.asarray(dequantized, np.float64)
    return float(np.sum((d * d) @ h))


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
    init, ceiling = PIPELINES[pipeline]
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hscale.fidelity",
                                     description="Layer-output fidelity on a real model.")
    parser.add_argument("what", choices=("pipelines",))
    parser.add_argument("model_dir", nargs="?", default=None,
                        help="a Hugging Face model directory (default: the bundled MiniLM)")
    parser.add_argument("--backend", default="numpy")
    args = parser.parse_args(argv)
    model = calibrated_model(args.model_dir, progress=False)
    pipelines_table(model, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
