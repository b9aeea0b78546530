"""``hscale report``: the paper's analyses on the bundled all-MiniLM-L6-v2, regenerated
(docs/fidelity.md).

Every Linear is calibrated on the bundled text (G = X^T X) and evaluated on that text and on
held-out text. The figures go to ``OUT/figures.json``, the tables to ``OUT/tables.md`` and the
plots to ``OUT/*.png``; the same inputs give the same bytes on the same machine (Agg, fixed size
and dpi, no timestamp or software tag in the PNGs). The head-to-head rows of competitor
libraries that are not installed here are kept from an earlier ``OUT/figures.json``.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np

from hscale import fidelity
from hscale.vectors.formats import (write_bytes_atomically, write_json_atomically,
                                    write_text_atomically)

DEFAULT_OUT = Path("docs") / "fidelity"
METHODS = ("scale-only", "hscale", "full-ladder", "best-scale")
LABELS = {"rtn": "min-max (RTN)", "scale-only": "weight-guided (h = 1)", "hscale": "H-Scale",
          "full-ladder": "full ladder (diag objective)", "best-scale": "Best Scale (oracle)"}
BEST_SCALE_ITERATIONS = 60
# The paper's figures (Qwen3-4B-Instruct), for the tables beside ours.
PAPER = {"output_reduction": {"hscale": 0.325, "scale-only": 0.126, "best-scale": 0.408},
         "shift_shares": {"keep": 0.312, "larger": 0.479, "smaller": 0.209},
         "window_median_U6_K16": 1.0,
         "window": {"0,16": 0.6463}}


def short_name(module: str) -> str:
    for prefix in ("encoder.layer.", "model.layers."):
        if module.startswith(prefix):
            return module[len(prefix):]
    return module


def _bar(items, progress, desc):
    if not progress:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=desc, unit="layer", file=sys.stderr)


def layer_analyses(model, iterations=BEST_SCALE_ITERATIONS, progress=True) -> dict:
    """(a), (b), (c) on every Linear: per-layer errors of each method, the shift statistics of
    H-Scale, the window sweep, and the time each method took."""
    from hscale.reference import SCALE_BYTE_VALUES, quantize
    scales = fidelity.global_scales(model, 448.0)
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
                ("full-ladder", lambda: fidelity.full_ladder(weight, h, s_g))):
            start = time.perf_counter()
            results[method] = run()
            timed[method] = time.perf_counter() - start
        dequantized = {m: r.dequantize() for m, r in results.items()}
        start = time.perf_counter()
        hs = results["hscale"]
        oracle = fidelity.best_scale(weight, G, SCALE_BYTE_VALUES[hs.scale_bytes]
                                     .astype(np.float64) * float(s_g), iterations=iterations)
        timed["best-scale"] = time.perf_counter() - start
        dequantized["best-scale"] = oracle.dequantized
        start = time.perf_counter()
        sweep = fidelity.window_sweep(weight, G, s_g, ladder=results["full-ladder"])
        timed["window-sweep"] = time.perf_counter() - start
        for method, t in timed.items():
            seconds[method] += t
        record = {"module": module, "shape": list(weight.shape), "output": {},
                  "output_heldout": {}, "weight_mse": {}}
        for method, deq in dequantized.items():
            d = weight.astype(np.float64) - deq
            record["output"][method] = fidelity.output_error(weight, deq, G)
            record["output_heldout"][method] = fidelity.output_error(weight, deq, Gh)
            record["weight_mse"][method] = float(np.mean(d * d))
        record["window"] = {f"{U},{K}": v for (U, K), v in sweep.items()}
        layers.append(record)
        stats = fidelity.shift_statistics(weight, h, hs)
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
    """(d): H-Scale on the rtn, 4over6 and GPTQ baselines (fidelity.pipelines_table)."""
    return fidelity.pipelines_table(model, out=io.StringIO())


# -- head to head -----------------------------------------------------------------------------

HSCALE_ROW = "H-Scale (hscale.reference, U = 6, K = 16)"
BASELINE_ROW = "min-max (RTN: the spec's max-abs byte), the baseline"
# (name, adapter module, factory, library, init); each run on every Linear with the same s_g,
# as rtn from the init that selects its scale rule (fouroversix's 4-or-6 choice is its 4over6).
COMPETITORS = (
    ("llm-compressor MSE observer", "llmcompressor_nvfp4", "create_mse", "llmcompressor",
     "maxabs"),
    ("llm-compressor expanded-MSE observer (= its fouroversix observer in 0.14)",
     "llmcompressor_nvfp4", "create_expanded_mse", "llmcompressor", "maxabs"),
    ("llm-compressor min-max observer", "llmcompressor_nvfp4", "create", "llmcompressor",
     "maxabs"),
    ("ModelOpt NVFP4QTensor (max calibration)", "modelopt_nvfp4", "create", "modelopt",
     "maxabs"),
    ("AutoRound NVFP4 RTN (iters=0)", "autoround_nvfp4", "create", "auto_round", "maxabs"),
    ("fouroversix (4-or-6 per group, by weight error)", "fouroversix_nvfp4", "create",
     "fouroversix", "4over6"),
)
# ModelOpt's three NVFP4 weight-scale searches, each through mtq.quantize on one Linear
# (hscale/backends/interop/modelopt_calibrators.py); they need CUDA and Triton.
MODELOPT_CALIBRATORS = ("ModelOpt local-Hessian calibrator",
                        "ModelOpt FP8 scale sweep calibrator", "ModelOpt MSE calibrator")


def autoround_opt_rtn(weight, s_g, h=None) -> np.ndarray:
    """AutoRound's ``opt_rtn_nv_fp4`` (``auto_round/data_type/nvfp.py``, what AutoRound runs
    for NVFP4 with ``iters=0`` and its RTN optimisation): 101 multipliers 0.50 .. 1.51 of each
    group's range scale, picked by the error weighted by the importance matrix ``imatrix``
    (here h = diag(X^T X) of the calibration text, or none: plain weight MSE), then RTN with
    the global scale s_g (AutoRound stores its reciprocal). Returns its dequantized weight."""
    import torch
    from auto_round.data_type.nvfp import opt_rtn_fast_nvfp4
    from hscale.reference.global_scale import reciprocal_from_multiplier
    imatrix = None if h is None else torch.from_numpy(np.asarray(h, np.float32))
    with torch.no_grad():
        qdq, _, _ = opt_rtn_fast_nvfp4(
            torch.from_numpy(np.asarray(weight, np.float32)), 4, 16,
            global_scale=torch.tensor(float(reciprocal_from_multiplier(s_g)), dtype=torch.float32),
            imatrix=1.0 if imatrix is None else imatrix)
    return qdq.numpy().astype(np.float64)


# (name, library, function(weight, s_g, h) -> dequantized): library functions called directly
FUNCTIONS = (
    ("AutoRound opt_rtn_nv_fp4, importance matrix = diag(X^T X)", "auto_round",
     lambda w, s_g, h: autoround_opt_rtn(w, s_g, h)),
    ("AutoRound opt_rtn_nv_fp4, no importance matrix (weight MSE)", "auto_round",
     lambda w, s_g, h: autoround_opt_rtn(w, s_g, None)),
)


def library_dequantized(adapter, result) -> np.ndarray:
    """float64 (m, n) of a library's result: code value x E4M3 scale x s_g, s_g the multiplier
    or the reciprocal of what the library stores, as its ``global_scale_convention`` says."""
    from hscale.reference import E2M1_VALUES, SCALE_BYTE_VALUES, unpack_codes
    codes = result.codes if hasattr(result, "codes") else unpack_codes(result.packed)
    g = float(result.global_scale)
    if getattr(adapter, "global_scale_convention", "multiplier") == "reciprocal":
        g = 1.0 / g
    scale = np.repeat(SCALE_BYTE_VALUES[result.scale_bytes].astype(np.float64), 16, axis=1)
    return E2M1_VALUES[np.asarray(codes).astype(np.intp)] * scale * g


def head_to_head(model, progress=True, skip=()) -> dict:
    """name -> {output, output_heldout (mean and median of each layer's error over RTN's),
    embedding_cosine_heldout (the whole model with every Linear so quantized: each held-out
    sentence embedding's cosine to fp32, mean and min), seconds (scale selection over all
    Linears), ran / reason}. H-Scale's own row first, then min-max itself."""
    import importlib
    from hscale.calibration import heldout_texts
    from hscale.quantize_model import EmbeddingProbe
    from hscale.reference import quantize
    scales = fidelity.global_scales(model, 448.0)
    base = {}
    for module, weight in model.weights.items():
        deq = quantize(weight, method="rtn", global_scale=scales[module]).dequantize()
        base[module] = (fidelity.output_error(weight, deq, model.G[module]),
                        fidelity.output_error(weight, deq, model.G_heldout[module]))
    # The end-to-end check needs the model itself; a bare set of layers (tests) has none.
    probe = (EmbeddingProbe(model.directory, heldout_texts())
             if model.directory is not None else None)

    def measure(run):
        ratios, ratios_h, seconds, dequantized = [], [], 0.0, {}
        for module in _bar(list(model.weights), progress, "head to head"):
            weight = model.weights[module]
            start = time.perf_counter()
            deq = dequantized[module] = run(module, weight)
            seconds += time.perf_counter() - start
            ratios.append(fidelity.output_error(weight, deq, model.G[module]) / base[module][0])
            ratios_h.append(fidelity.output_error(weight, deq, model.G_heldout[module])
                            / base[module][1])
        row = {"ran": True, "seconds": seconds,
               "output": {"mean": float(np.mean(ratios)), "median": float(np.median(ratios))},
               "output_heldout": {"mean": float(np.mean(ratios_h)),
                                  "median": float(np.median(ratios_h))},
               "improved_heldout": int(np.sum(np.array(ratios_h) < 1)), "layers": len(ratios)}
        if probe is not None:
            row["embedding_cosine_heldout"] = dict(probe.cosine(dequantized),
                                                   texts=len(probe.texts))
        return row

    rows = {HSCALE_ROW: measure(
        lambda m, w: quantize(w, np.diag(model.G[m]).copy(), global_scale=scales[m])
        .dequantize()),
        BASELINE_ROW: measure(
        lambda m, w: quantize(w, method="rtn", global_scale=scales[m]).dequantize())}
    def competitor_row(library, prepare) -> dict:
        """A competitor's row: not run where ``library`` cannot be imported or ``prepare()``
        returns why not (a str); else ``prepare()`` returns ``(run, version)`` and ``run`` is
        measured. A library's own failure is a finding for its row, not a crash."""
        try:
            importlib.import_module(library)
        except ImportError:
            return {"ran": False, "reason": f"{library} is not installed here"}
        try:
            prepared = prepare()
            if isinstance(prepared, str):
                return {"ran": False, "reason": prepared}
            run, version = prepared
            return dict(measure(run), version=version)
        except Exception as error:  # noqa: BLE001
            return {"ran": False, "reason": f"{type(error).__name__}: {error}"[:300]}

    warm = np.ones((1, 16), np.float32)  # imports and first-call set-up, not timed

    def adapter_run(module_name, factory, init):
        adapter = getattr(importlib.import_module(f"hscale.backends.interop.{module_name}"),
                          factory)()
        ok, why = adapter.available()
        if not ok:
            return why
        adapter.quantize(warm, None, method="rtn", init=init, global_scale=np.float32(1 / 2688))
        version = adapter.version
        return (lambda m, w: library_dequantized(adapter, adapter.quantize(
            w, None, method="rtn", init=init, global_scale=scales[m])),
            str(version() if callable(version) else version))

    def function_run(library, function):
        function(warm, np.float32(1 / 2688), np.ones(16))
        version = getattr(importlib.import_module(library), "__version__", "")
        return (lambda m, w: function(w, scales[m], np.diag(model.G[m]).copy()),
                f"{library} {version}")

    def modelopt_run(name):
        from hscale.backends.interop import modelopt_calibrators as calibrators
        from hscale.backends.interop.common import dist_version
        ok, why = calibrators.available(name)
        if not ok:
            return why

        def run(m, w):
            with warnings.catch_warnings():
                # ModelOpt takes max|W| / 2688 as s_g itself (a fused set's shared s_g cannot
                # be handed in); the module's docstring says so, the warning would repeat it
                warnings.simplefilter("ignore")
                return calibrators.dequantized(w, scales[m], model.G[m], name)
        return run, dist_version("nvidia-modelopt")

    wanted = [(name, library, lambda m=m, f=f, i=i: adapter_run(m, f, i))
              for name, m, f, library, i in COMPETITORS]
    wanted += [(name, library, lambda lib=library, fn=fn: function_run(lib, fn))
               for name, library, fn in FUNCTIONS]
    wanted += [(name, "modelopt", lambda n=name: modelopt_run(n))
               for name in MODELOPT_CALIBRATORS]
    for name, library, prepare in wanted:
        if name not in skip:
            rows[name] = competitor_row(library, prepare)
    return rows


# -- rendering --------------------------------------------------------------------------------

def _figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"svg.hashsalt": "hscale", "font.size": 9})
    return plt


def save_png(fig, path: Path) -> Path:
    """The figure laid out, as PNG bytes with no timestamp or software tag (same figure, same
    bytes), written to a temporary name and renamed; the figure is closed."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return write_bytes_atomically(path, buffer.getvalue())


def plot_layers(doc: dict, key: str, path: Path, title: str) -> Path:
    plt = _figure()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    layers = doc["layers"]
    x = np.arange(len(layers))
    for method, marker, style in zip(METHODS, "o^sD", ("-", "-", ":", "-")):
        ax.plot(x, [r[key][method] / r[key]["rtn"] for r in layers], marker=marker,
                markersize=3 if method != "hscale" else 5, linewidth=1, linestyle=style,
                label=LABELS[method])
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--", label=LABELS["rtn"])
    ax.set_xticks(x)
    ax.set_xticklabels([short_name(r["module"]) for r in layers], rotation=90, fontsize=6)
    ax.set_ylabel("relative to min-max")
    ax.set_title(title, pad=24)
    ax.legend(fontsize=7, ncol=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return save_png(fig, path)


def plot_shifts(doc: dict, path: Path) -> Path:
    plt = _figure()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    shifts = sorted(doc["shifts"], key=int)
    x = [int(s) for s in shifts]
    a.bar(x, [100 * doc["shifts"][s]["share"] for s in shifts], color="tab:blue")
    a.set_xlabel("selected shift delta")
    a.set_ylabel("% of groups")
    a.set_title("(a) selected shift")
    b.bar(x, [100 * doc["shifts"][s]["mean_reduction"] for s in shifts], color="tab:orange")
    b.set_xlabel("selected shift delta")
    b.set_ylabel("mean reduction of sum h d^2 (%)")
    b.set_title("(b) mean Hessian-weighted error reduction")
    return save_png(fig, path)


def plot_window(summary: dict, path: Path) -> Path:
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 3.0))
    names = list(summary["window"])
    x = np.arange(len(names))
    ax.bar(x - 0.2, [100 * summary["window"][n]["median"] for n in names], 0.4, label="median")
    ax.bar(x + 0.2, [100 * summary["window"][n]["p10"] for n in names], 0.4, label="P10")
    ax.set_xticks(x)
    ax.set_xticklabels([f"U={n.split(',')[0]}\nK={n.split(',')[1]}" for n in names], fontsize=7)
    ax.set_ylabel("% of max-abs -> full-ladder gain")
    ax.legend(fontsize=7)
    ax.set_title("window sweep: L_full gain recovered")
    return save_png(fig, path)


def plot_head_to_head(rows: dict, path: Path) -> Path:
    plt = _figure()
    ran = [(n, r) for n, r in rows.items() if r.get("ran")]
    fig, (ax, ax_cos) = plt.subplots(1, 2, figsize=(11, 0.8 + 0.55 * max(1, len(ran))),
                                     sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    y = np.arange(len(ran))
    ax.barh(y - 0.2, [r["output"]["mean"] for _, r in ran], 0.4, label="calibration text")
    ax.barh(y + 0.2, [r["output_heldout"]["mean"] for _, r in ran], 0.4, label="held-out text")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(y)
    ax.set_yticklabels(["\n".join(textwrap.wrap(textwrap.shorten(n, 90, placeholder="..."), 45))
                        for n, _ in ran], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("mean layer output error relative to min-max (RTN)")
    ax.legend(fontsize=7)
    # End to end: 1 - cosine, so that smaller is better on both panels; rows kept from a run
    # before the embeddings were measured have no bar.
    distance = [1.0 - r["embedding_cosine_heldout"]["mean"]
                if r.get("embedding_cosine_heldout") else np.nan for _, r in ran]
    ax_cos.barh(y, distance, 0.5, color="tab:green")
    ax_cos.set_xlabel("1 - sentence-embedding cosine to fp32\n(held-out sentences, mean)")
    return save_png(fig, path)


def pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


def tables(doc: dict) -> str:
    """The markdown tables of docs/fidelity.md."""
    s = doc["summary"]
    n = len(doc["layers"])
    lines = [f"### (a) Layer output error and weight MSE relative to min-max ({n} Linears)", "",
             "| method | output error, calibration (mean / median) | output error, held-out "
             "(mean / median) | layers improved (held-out) | weight MSE (mean) | paper, Qwen3-4B "
             "output error |", "|---|---:|---:|---:|---:|---:|"]
    for method in METHODS:
        paper = PAPER["output_reduction"].get(method)
        lines.append(
            f"| {LABELS[method]} | {pct(s['output'][method]['mean'])} / "
            f"{pct(s['output'][method]['median'])} | {pct(s['output_heldout'][method]['mean'])} / "
            f"{pct(s['output_heldout'][method]['median'])} | "
            f"{s['output_heldout'][method]['improved']} of {n} | "
            f"{pct(s['weight_mse'][method]['mean'])} | "
            f"{'' if paper is None else f'-{100 * paper:.1f}%'} |")
    sh = s["shift_shares"]
    lines += ["", f"### (b) Selected shift ({doc['groups']} groups, all Linears pooled)", "",
              "| | keep (delta = 0) | larger scale (delta > 0) | smaller scale (delta < 0) |",
              "|---|---:|---:|---:|",
              f"| MiniLM | {100 * sh['keep']:.1f}% | {100 * sh['larger']:.1f}% | "
              f"{100 * sh['smaller']:.1f}% |",
              "| paper, Qwen3-4B | 31.2% | 47.9% | 20.9% |", "",
              "| delta | " + " | ".join(sorted(doc["shifts"], key=int)) + " |",
              "|---|" + "---:|" * len(doc["shifts"]),
              "| % of groups | " + " | ".join(f"{100 * doc['shifts'][k]['share']:.2f}"
                                              for k in sorted(doc["shifts"], key=int)) + " |",
              "| mean reduction of sum h d^2 | " + " | ".join(
                  f"{100 * doc['shifts'][k]['mean_reduction']:.1f}%"
                  for k in sorted(doc["shifts"], key=int)) + " |",
              "| share of the removed objective | " + " | ".join(
                  f"{100 * doc['shifts'][k]['removed_share']:.1f}%"
                  for k in sorted(doc["shifts"], key=int)) + " |", "",
              f"H-Scale removes {100 * doc['removed_fraction_of_initial']:.1f}% of the "
              "initialisation's diagonal objective (paper: 50.6%).", "",
              "### (c) Window sweep: share of the max-abs -> full-ladder L_full gain recovered", "",
              "| (U, K) | median | P10 | layers |", "|---|---:|---:|---:|"]
    for name, v in s["window"].items():
        bold = "**" if name == "6,16" else ""
        lines.append(f"| {bold}({name}){bold} | {100 * v['median']:.2f}% | {100 * v['p10']:.2f}% "
                     f"| {v['layers']} |")
    lines += ["", "### (d) H-Scale on each pipeline's baseline (mean of each layer's error over "
              "the baseline's)", "",
              "| pipeline | output error, calibration | output error, held-out | layers improved "
              "(held-out) | seconds (baseline + H-Scale) |", "|---|---:|---:|---:|---:|"]
    for row in doc["pipelines"]:
        lines.append(f"| {row['pipeline']} + H-Scale vs {row['pipeline']} | "
                     f"{pct(row['output']['mean'])} | {pct(row['output_heldout']['mean'])} | "
                     f"{row['output_heldout']['improved']} of {row['layers']} | "
                     f"{row['seconds']:.1f} |")
    m = doc["microcase"]
    lines += ["", "### (e) The appendix microcase, recomputed", "",
              "| objective | paper's scale (codes) | best E4M3 scale in the H-Scale window of the "
              "min-max byte (codes) | best of all E4M3 scales (codes) | best continuous scale "
              "(codes) |", "|---|---|---|---|---|"]
    for objective, key in (("weight ||w - w'||^2", "weight"), ("output ||X(w - w')^T||^2",
                                                               "output")):
        r = m[key]
        printed = m["printed"][key]
        idx = "weight_error" if key == "weight" else "output_error"
        lines.append(
            f"| {objective} | {r['printed_scale']} {printed['codes']}: {printed[idx]:.3f} | "
            f"{r['window_scale']:g} {r['window_codes']}: {r['window_errors'][idx]:.3f} | "
            f"{r['e4m3_scale']:g} {r['e4m3_codes']}: {r['e4m3_errors'][idx]:.3f} | "
            f"{r['continuous_scale']:.4f} {r['continuous_codes']}: "
            f"{r['continuous_errors'][idx]:.3f} |")
    rows = doc.get("head_to_head") or {}
    if rows:
        lines += ["", "### Head to head: layer output error relative to min-max (RTN), every "
                  "Linear, same s_g and calibration", "",
                  "| scale selection | calibration text (mean / median) | held-out text (mean / "
                  "median) | layers improved (held-out) | sentence-embedding cosine to fp32, "
                  "held-out (mean / min) | seconds (all Linears) | version |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for name, r in rows.items():
            if r.get("ran"):
                lines.append(f"| {name} | {pct(r['output']['mean'])} / "
                             f"{pct(r['output']['median'])} | {pct(r['output_heldout']['mean'])}"
                             f" / {pct(r['output_heldout']['median'])} | "
                             f"{r['improved_heldout']} of {r['layers']} | "
                             f"{_cosine(r.get('embedding_cosine_heldout'))} | "
                             f"{r['seconds']:.2f} | {_version(r.get('version', ''))} |")
        for name, r in rows.items():
            if not r.get("ran"):
                reason = r["reason"].removeprefix("not run: ")
                lines.append(f"| {name} | not run: {reason} | | | | | |")
    return "\n".join(lines) + "\n"


def _cosine(stats) -> str:
    """mean / min of the sentence-embedding cosines, or why there are none."""
    if not stats:
        return "not measured (row kept from an earlier run)"
    return f"{stats['mean']:.5f} / {stats['min']:.5f}"


def _version(text: str) -> str:
    """A version as the tables show it: 'llmcompressor llmcompressor 0.14' (an earlier run's
    form) as 'llmcompressor 0.14'."""
    words = text.split(" ", 1)
    return words[1] if len(words) == 2 and words[1].startswith(words[0]) else text


def render(doc: dict, out: Path) -> list[Path]:
    """Every file of the report from its figures: JSON, tables, plots."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_json_atomically(out / "figures.json", doc),
               write_text_atomically(out / "tables.md", tables(doc))]
    written.append(plot_layers(doc, "output", out / "output_error.png",
                               "layer output error Tr(dW G dW^T), calibration text"))
    written.append(plot_layers(doc, "output_heldout", out / "output_error_heldout.png",
                               "layer output error, held-out text"))
    written.append(plot_layers(doc, "weight_mse", out / "weight_mse.png", "weight MSE"))
    written.append(plot_shifts(doc, out / "shifts.png"))
    written.append(plot_window(doc["summary"], out / "window.png"))
    if any(r.get("ran") for r in (doc.get("head_to_head") or {}).values()):
        written.append(plot_head_to_head(doc["head_to_head"], out / "head_to_head.png"))
    return written


def row_names() -> list:
    """The head-to-head rows, in table order: H-Scale, min-max, then the competitors."""
    return ([HSCALE_ROW, BASELINE_ROW] + [c[0] for c in COMPETITORS]
            + [f[0] for f in FUNCTIONS] + list(MODELOPT_CALIBRATORS))


def _row_order(name: str) -> int:
    order = row_names()
    return order.index(name) if name in order else len(order)


def previous_head_to_head(out: Path) -> dict:
    try:
        return json.loads((Path(out) / "figures.json").read_text()).get("head_to_head") or {}
    except (OSError, ValueError):
        return {}


def build(out: Path = DEFAULT_OUT, progress=True, iterations=BEST_SCALE_ITERATIONS,
          model=None, reuse_measured=False) -> dict:
    """Compute every figure and write the report; returns the document. ``reuse_measured``:
    competitor rows measured by an earlier run (OUT/figures.json) are kept, not re-run."""
    start = time.perf_counter()
    earlier = previous_head_to_head(out)
    model = fidelity.calibrated_model(progress=progress) if model is None else model
    doc = layer_analyses(model, iterations, progress)
    doc["summary"] = summarise(doc)
    doc["pipelines"] = pipeline_rows(model)
    doc["microcase"] = fidelity.microcase()
    # Earlier rows of methods the report no longer has (renamed, dropped) are not carried on.
    earlier = {n: r for n, r in earlier.items() if n in row_names()}
    skip = {n for n, r in earlier.items() if r.get("ran")} if reuse_measured else set()
    rows = head_to_head(model, progress, skip)
    rows.update({n: dict(earlier[n], kept_from_earlier_run=True) for n in skip if n not in rows})
    rows = {n: rows[n] for n in sorted(rows, key=_row_order)}
    for name, row in rows.items():  # keep a measured row when the library is missing here
        if not row.get("ran") and earlier.get(name, {}).get("ran"):
            rows[name] = dict(earlier[name], kept_from_earlier_run=True)
    doc["head_to_head"] = rows
    doc["wall_seconds"] = time.perf_counter() - start
    render(doc, out)
    return doc
