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
    kept: list = field(default_factory=list)  # every stored tensor kept as stored, and why
    warnings: list = field(default_factory=list)
    path: str = ""  # "block by block" or "whole model" (on N processes)
    rank: int = 0  # under torchrun: this process's (only process 0's report is complete)
    gguf: dict = field(default_factory=dict)  # --format gguf: the conversion to the file
    kept_h: str = ""  # the file of the h H-Scale used, beside the output (quantize.kept)


#: Tensors named per reason in the summary; the rest counted.
NAMED = 3


def header_line(report: QuantizeReport, plans, inventory, backend: str, asked: str, rule: str,
                world: int) -> str:
    """What the run is about to do, in one line: source, output, pipeline, method, format, the
    backend (and what ``auto`` meant), the path, the weights to quantize."""
    request = report.request
    quantized = [p for p in plans if p.quantize]
    weights = sum(p.weights for p in quantized)
    how = f"{backend} (auto: {rule})" if asked == "auto" else backend
    path = report.path + (f", {inventory.blocks} blocks"
                          if report.path.startswith("block by block") else "")
    experts = sum(1 for p in quantized if p.expert)
    return (f"hscale quantize {report.source} -> {report.out}: pipeline {request['pipeline']}, "
            f"method {request['method']}, format {request['format']}{_scheme(request)}, "
            f"backend {how}; {path}"
            + f"; {len(quantized)} weights to quantize ({weights / 1e6:,.1f} M parameters"
            + (f", {experts} expert matrices" if experts else "") + f"), "
            f"{len(report.kept)} tensors kept as stored")


def _scheme(request: dict) -> str:
    """``, W4A4 (...)`` for a W4A4 run; nothing for the default W4A16."""
    if request.get("scheme") != "w4a4":
        return ""
    return ", W4A4 (an activation scale per Linear, HSCALE-CAL-2)"


def format_summary(report: QuantizeReport) -> str:
    """The per-layer table and the totals, readable in one screen."""
    request = report.request
    lines = [f"{report.source} -> {report.out}: pipeline {request['pipeline']}, method "
             f"{request['method']}, format {request['format']}{_scheme(request)}, backend "
             f"{request['backend']}",
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
    lines += _kept_lines(report)
    experts = [layer for layer in report.layers if layer.get("expert")]
    if experts:
        lines.append(_experts_line(report))
        for layer in experts:
            if layer.get("fallback") and layer["module"].endswith(("gate_proj", "w1")):
                lines.append(f"expert {layer['module'].rsplit('.', 1)[0]}: {layer['fallback']}")
    for layer in report.layers:
        if layer.get("fallback") and not layer.get("expert"):
            lines.append(f"{layer['module']}: {layer['fallback']}")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    cosine = summary.get("embedding_cosine_heldout")
    if cosine:
        lines.append(f"sentence embeddings on {cosine['texts']} held-out texts, cosine to fp32: "
                     f"mean {cosine['dequantize']['mean']:.5f} (min "
                     f"{cosine['dequantize']['min']:.5f})" + (
                         "; weights decoded, activations in float32: the W4A16 view, not the "
                         "engine's run-time activation quantization (its emulation: "
                         "docs/checkpoints.md)" if request.get("scheme") == "w4a4" else ""))
    seconds = report.seconds
    calibration = (f"calibration {seconds['calibration']:.1f} s" if "calibration" in seconds
                   else "no calibration (not needed)")
    facts = report.calibration
    if facts.get("tokens"):
        calibration += f" ({facts['texts']} texts, {facts['tokens']:,} tokens" + (
            f", in {facts['dtype']})" if facts.get("dtype", "float32") != "float32" else ")")
    lines.append(f"time: {calibration}, quantization {seconds.get('quantize', 0):.1f} s"
                 + (f" (search {seconds['search']:.1f} s, errors for this report "
                    f"{seconds['errors']:.1f} s)" if "search" in seconds else "")
                 + (f", writing {seconds['write']:.1f} s" if "write" in seconds else "")
                 + f", total {seconds.get('total', 0):.1f} s ({report.path})")
    return "\n".join(lines)


def _kept_lines(report: QuantizeReport) -> list[str]:
    """What was not quantized, grouped by reason: the Linears and experts one line each (up to
    NAMED per reason), the other tensors counted per kind."""
    lines = []
    by_reason: dict = {}
    for entry in report.kept:
        by_reason.setdefault(entry["reason"], []).append(entry["name"])
    for entry in report.skipped:  # Linears not stored (a tied head) are in no kept entry
        name = entry["module"] + ".weight"
        if not any(name in names for names in by_reason.values()):
            by_reason.setdefault(entry["reason"], []).append(entry["module"])
    for reason, names in by_reason.items():
        shown = ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED} more"
                                            if len(names) > NAMED else "")
        lines.append(f"not quantized: {shown}: {reason}")
    return lines


def _experts_line(report: QuantizeReport) -> str:
    s = report.summary
    return (f"experts: {s.get('experts', 0)} quantized (each its gate, up and down), "
            f"{s.get('never_routed', 0)} never routed to by the calibration data; tokens routed "
            f"to the others: min {s.get('tokens_min', 0)}, median {s.get('tokens_median', 0)}, "
            f"max {s.get('tokens_max', 0)}")


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
