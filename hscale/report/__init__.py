"""``hscale report``: the paper's analyses on the bundled all-MiniLM-L6-v2, regenerated
(docs/fidelity.md).

Every Linear is calibrated on the bundled text (G = X^T X) and evaluated on that text and on
held-out text; the spread over 5 calibration subsets covers every row whose scales depend on
the calibration, and the same head to head runs on the kit's tiny decoder families (Llama,
Qwen3, Qwen3-MoE shapes with seeded weights: synthetic, and labelled so; ``synthetic.py``).
The figures go to ``OUT/figures.json``, the tables to ``OUT/tables.md`` and the
plots to ``OUT/*.png``; the same inputs give the same bytes on the same machine (Agg, fixed size
and dpi, no timestamp or software tag in the PNGs). The head-to-head rows of competitor
libraries that are not installed here are kept from an earlier ``OUT/figures.json``.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np

from hscale.files import write_json, write_text

from . import analyses, pipelines, spread, synthetic
from hscale.evaluation.quality import output_error
from hscale.reference import DEFAULT_SCALE_CEILING

from .head_to_head import (BASELINE_ROW, BLOCK_ROW, COMPETITORS, FUNCTIONS, HSCALE_ROW,
                           MODELOPT_CALIBRATORS, head_to_head)
from .plots import plot_head_to_head, plot_layers, plot_shifts, plot_synthetic, plot_window
from .tables import tables
from .progress import bar as _bar
from .vocabulary import BEST_SCALE_ITERATIONS, DEFAULT_OUT, METHODS

def layer_analyses(model, iterations=BEST_SCALE_ITERATIONS, progress=True) -> dict:
    """(a), (b), (c) on every Linear: per-layer errors of each method, the shift statistics of
    H-Scale, the window sweep, and the time each method took."""
    from hscale.reference import SCALE_BYTE_VALUES, diagonal_blocks, quantize
    scales = pipelines.global_scales(model, DEFAULT_SCALE_CEILING)
    layers, seconds = [], {m: 0.0 for m in ("rtn",) + METHODS + ("window-sweep",)}
    pooled = {}
    initial_objective = removed_objective = 0.0
    for module in _bar(list(model.weights), progress, "fidelity"):
        weight, G, Gh = model.weights[module], model.G[module], model.G_heldout[module]
        h, s_g = np.diag(G).copy(), scales[module]
        results, timed = {}, {}
        for method, run in (
                ("rtn", lambda: quantize(weight, method="rtn", global_scale=s_g)),
                ("scale-only", lambda: quantize(weight, method="scale-only", global_scale=s_g)),
                ("hscale", lambda: quantize(weight, h, global_scale=s_g)),
                ("hscale-block", lambda: quantize(weight, diagonal_blocks(G), method="hscale-block",
                                                  global_scale=s_g)),
                ("full-ladder", lambda: analyses.full_ladder(weight, h, s_g))):
            start = time.perf_counter()
            results[method] = run()
            timed[method] = time.perf_counter() - start
        dequantized = {m: r.dequantize() for m, r in results.items()}
        start = time.perf_counter()
        hs = results["hscale"]
        oracle = analyses.best_scale(weight, G, SCALE_BYTE_VALUES[hs.scale_bytes]
                                     .astype(np.float64) * float(s_g), iterations=iterations)
        timed["best-scale"] = time.perf_counter() - start
        dequantized["best-scale"] = oracle.dequantized
        start = time.perf_counter()
        sweep = analyses.window_sweep(weight, G, s_g, ladder=results["full-ladder"])
        timed["window-sweep"] = time.perf_counter() - start
        for method, t in timed.items():
            seconds[method] += t
        record = {"module": module, "shape": list(weight.shape), "output": {},
                  "output_heldout": {}, "weight_mse": {}}
        for method, deq in dequantized.items():
            d = weight.astype(np.float64) - deq
            record["output"][method] = output_error(weight, deq, G)
            record["output_heldout"][method] = output_error(weight, deq, Gh)
            record["weight_mse"][method] = float(np.mean(d * d))
        record["window"] = {f"{U},{K}": v for (U, K), v in sweep.items()}
        layers.append(record)
        stats = analyses.shift_statistics(weight, h, hs)
        initial_objective += stats["initial_objective"]
        removed_objective += stats["removed_objective"]
        for shift, s in stats["shifts"].items():
            p = pooled.setdefault(shift, {"groups": 0, "reduction_sum": 0.0, "removed": 0.0})
            p["groups"] += s["groups"]
            p["reduction_sum"] += s["mean_reduction"] * s["groups"]
            p["removed"] += s["removed"]
    groups = sum(p["groups"] for p in pooled.values())
    shifts = {str(k): {"groups": p["groups"], "share": p["groups"] / groups,
                       "mean_reduction": p["reduction_sum"] / p["groups"],
                       "removed_share": p["removed"] / removed_objective}
              for k, p in sorted(pooled.items())}
    return {"layers": layers, "seconds": seconds, "best_scale_iterations": iterations,
            "shifts": shifts, "groups": groups,
            "removed_fraction_of_initial": removed_objective / initial_objective}


def summarise(doc: dict) -> dict:
    """The tables' numbers from the per-layer records."""
    layers = doc["layers"]
    summary = {}
    for key in ("output", "output_heldout", "weight_mse"):
        summary[key] = {}
        for method in METHODS:
            ratios = np.array([r[key][method] / r[key]["rtn"] for r in layers])
            summary[key][method] = {"mean": float(ratios.mean()),
                                    "median": float(np.median(ratios)),
                                    "improved": int(np.sum(ratios < 1))}
    window = {}
    for name in layers[0]["window"]:
        values = np.array([r["window"][name] for r in layers], dtype=np.float64)
        values = values[np.isfinite(values)]
        window[name] = {"median": float(np.median(values)),
                        "p10": float(np.percentile(values, 10)), "layers": int(values.size)}
    summary["window"] = window
    shifts = doc["shifts"]
    summary["shift_shares"] = {
        "keep": shifts.get("0", {"share": 0.0})["share"],
        "larger": sum(v["share"] for k, v in shifts.items() if int(k) > 0),
        "smaller": sum(v["share"] for k, v in shifts.items() if int(k) < 0)}
    return summary


def pipeline_rows(model) -> list[dict]:
    """(d): H-Scale on the rtn, 4over6 and GPTQ baselines (pipelines.pipelines_table)."""
    return pipelines.pipelines_table(model, out=io.StringIO())


def render(doc: dict, out: Path) -> list[Path]:
    """Every file of the report from its figures: JSON, tables, plots."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_json(out / "figures.json", doc),
               write_text(out / "tables.md", tables(doc))]
    written.append(plot_layers(doc, "output", out / "output_error.png",
                               "layer output error Tr(dW G dW^T), calibration text"))
    written.append(plot_layers(doc, "output_heldout", out / "output_error_heldout.png",
                               "layer output error, held-out text"))
    written.append(plot_layers(doc, "weight_mse", out / "weight_mse.png", "weight MSE"))
    written.append(plot_shifts(doc, out / "shifts.png"))
    written.append(plot_window(doc["summary"], out / "window.png"))
    if any(r.get("ran") for r in (doc.get("head_to_head") or {}).values()):
        written.append(plot_head_to_head(doc["head_to_head"], out / "head_to_head.png"))
    if doc.get("synthetic"):
        written.append(plot_synthetic(doc["synthetic"], out / "synthetic.png"))
    return written


def row_names() -> list:
    """The head-to-head rows, in table order: H-Scale, min-max, then the competitors."""
    return ([HSCALE_ROW, BLOCK_ROW, BASELINE_ROW] + [c[0] for c in COMPETITORS]
            + [f[0] for f in FUNCTIONS] + list(MODELOPT_CALIBRATORS))


def _row_order(name: str) -> int:
    order = row_names()
    return order.index(name) if name in order else len(order)


def previous_figures(out: Path) -> dict:
    try:
        return json.loads((Path(out) / "figures.json").read_text())
    except (OSError, ValueError):
        return {}


def keep_measured(rows: dict, earlier: dict) -> dict:
    """``rows`` with each row that did not run here replaced by ``earlier``'s measured one
    (marked ``kept_from_earlier_run``): a library missing here (ModelOpt's calibrators need
    CUDA, tools/modelopt_fidelity.py measures them on a GPU) does not erase its figures."""
    out = dict(rows)
    for name, row in rows.items():
        if not row.get("ran") and (earlier or {}).get(name, {}).get("ran"):
            out[name] = dict(earlier[name], kept_from_earlier_run=True)
    return out


def keep_measured_elsewhere(doc: dict, earlier: dict) -> None:
    """The spread's and the tiny decoders' competitor rows: what ``keep_measured`` does for the
    head to head."""
    if doc.get("spread") and earlier.get("spread"):
        doc["spread"]["competitors"] = keep_measured(doc["spread"].get("competitors") or {},
                                                     earlier["spread"].get("competitors"))
    if doc.get("synthetic") and earlier.get("synthetic"):
        before = earlier["synthetic"].get("families") or {}
        for label, family in doc["synthetic"]["families"].items():
            family["rows"] = keep_measured(family["rows"], before.get(label, {}).get("rows"))


def build(out: Path = DEFAULT_OUT, progress=True, iterations=BEST_SCALE_ITERATIONS,
          model=None, reuse_measured=False) -> dict:
    """Compute every figure and write the report; returns the document. ``reuse_measured``:
    competitor rows measured by an earlier run (OUT/figures.json) are kept, not re-run."""
    start = time.perf_counter()
    earlier_doc = previous_figures(out)
    earlier = earlier_doc.get("head_to_head") or {}
    model = pipelines.calibrated_model(progress=progress) if model is None else model
    doc = layer_analyses(model, iterations, progress)
    doc["summary"] = summarise(doc)
    doc["pipelines"] = pipeline_rows(model)
    doc["microcase"] = analyses.microcase()
    # the spread recalibrates the model on subsets of the text: a bare set of layers has none
    doc["spread"] = (spread.calibration_spread(model, progress=progress)
                     if model.directory is not None else None)
    # the tiny decoder families (synthetic seeded weights), with the same subsets; the report's
    # own model, not a bare set of layers (tests), brings them
    doc["synthetic"] = (synthetic.synthetic_analyses(progress=progress)
                        if model.directory is not None else None)
    # Earlier rows of methods the report no longer has (renamed, dropped) are not carried on.
    earlier = {n: r for n, r in earlier.items() if n in row_names()}
    skip = {n for n, r in earlier.items() if r.get("ran")} if reuse_measured else set()
    rows = head_to_head(model, progress, skip)
    rows.update({n: dict(earlier[n], kept_from_earlier_run=True) for n in skip if n not in rows})
    rows = {n: rows[n] for n in sorted(rows, key=_row_order)}
    doc["head_to_head"] = keep_measured(rows, earlier)  # a library missing here
    keep_measured_elsewhere(doc, earlier_doc)
    doc["wall_seconds"] = time.perf_counter() - start
    render(doc, out)
    return doc
