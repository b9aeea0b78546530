"""What ``hscale quantize`` reports: per layer the errors against RTN at the same s_g and the
shifts chosen, the totals, what was not quantized and why, the time per phase; on screen
(``format_summary``) and as ``quantization_report.json`` in the output."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

REPORT_NAME = "quantization_report.json"


@dataclass
class QuantizeReport:
    request: dict
    source: str
    out: str
    layers: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


def format_summary(report: QuantizeReport) -> str:
    """The per-layer table and the totals, readable in one screen."""
    request = report.request
    lines = [f"{report.source} -> {report.out}: pipeline {request['pipeline']}, method "
             f"{request['method']}, format {request['format']}, backend {request['backend']}",
             f"{'layer':48} {'shape':>11} {'weight MSE':>11} {'diag(H) err':>12} "
             f"{'output err':>11}   (each relative to RTN at the same s_g)"]

    def ratio(layer, key):
        if key not in layer or not layer[key + "_rtn"]:
            return f"{'-':>11}"
        return f"{layer[key] / layer[key + '_rtn']:11.3f}"
    for layer in report.layers:
        name = layer["module"] if len(layer["module"]) <= 48 else "..." + layer["module"][-45:]
        shape = "x".join(map(str, layer["shape"]))
        lines.append(f"{name:48} {shape:>11} {ratio(layer, 'weight_mse')} "
                     f"{ratio(layer, 'diag_error'):>12} {ratio(layer, 'output_error')}")
    summary = report.summary

    def shown(value):
        return "-" if value is None else f"{value:.3f}"
    lines.append(f"mean over {summary['layers']} layers: weight MSE "
                 f"{shown(summary['weight_mse_vs_rtn'])}, diag(H) error "
                 f"{shown(summary['diag_error_vs_rtn'])}, output error "
                 f"{shown(summary['output_error_vs_rtn'])} of RTN's")
    if summary.get("shifts"):
        lines.append("shifts chosen (delta: groups): " + ", ".join(
            f"{k:+d}: {v}" for k, v in summary["shifts"].items()))
    for entry in report.skipped:
        lines.append(f"not quantized: {entry['module']}: {entry['reason']}")
    cosine = summary.get("embedding_cosine_heldout")
    if cosine:
        lines.append(f"sentence embeddings on {cosine['texts']} held-out texts, cosine to fp32: "
                     f"mean {cosine['dequantize']['mean']:.5f} (min "
                     f"{cosine['dequantize']['min']:.5f})")
    seconds = report.seconds
    lines.append(f"time: calibration {seconds.get('calibration', 0):.1f} s, quantization "
                 f"{seconds.get('quantize', 0):.1f} s, total {seconds.get('total', 0):.1f} s")
    return "\n".join(lines)


def summarize(layers: list[dict]) -> dict:
    """Means over layers of the ratios to RTN, and the shift histogram of the whole model."""
    def mean_ratio(key):
        ratios = [layer[key] / layer[key + "_rtn"] for layer in layers
                  if key in layer and layer[key + "_rtn"] > 0]
        return float(np.mean(ratios)) if ratios else None
    shifts: Counter = Counter()
    for layer in layers:
        shifts.update({int(k): v for k, v in layer.get("shifts", {}).items()})
    return {"layers": len(layers), "weight_mse_vs_rtn": mean_ratio("weight_mse"),
            "diag_error_vs_rtn": mean_ratio("diag_error"),
            "output_error_vs_rtn": mean_ratio("output_error"),
            "shifts": dict(sorted(shifts.items()))}


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc="quantize", unit="tensor")
