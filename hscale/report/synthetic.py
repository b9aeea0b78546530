"""The report's analyses on the tiny decoder families the kit builds (Llama, Qwen3 and Qwen3-MoE
shapes, ``hscale.models.synthetic``), with SEEDED weights (``hscale.checkpoints.synthetic``):
synthetic, not evidence about trained models, and labelled so in every table and plot.

Each family is written small (hidden 256, 2 blocks) to a temporary directory and calibrated by
the kit's own block-by-block calibration (``hscale calibrate --full``'s route: MoE experts get
X^T X of the tokens routed to them) on the same 5 seeded halves of the bundled calibration text
as the MiniLM spread (table (f)), and once on the held-out text. For each subset every method
picks its scales from that subset's G (H-Scale from diag G, ``hscale-block`` from its diagonal
16 x 16 blocks, the oracle from G itself, the competitors' importance from diag G) and is
scored on the held-out G, relative to min-max; the figure is the mean over the Linears, and the
table gives its mean and 95% Student-t interval over the subsets. Methods whose scales depend
on the weights alone (data-free) are run once: their held-out figure has no calibration spread.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from hscale.evaluation.quality import output_error
from hscale.reference import DEFAULT_SCALE_CEILING

from . import analyses, pipelines
from .spread import FRACTION, SUBSETS, interval

CAPTION = "synthetic seeded weights: not evidence about trained models"

#: The small shape of every family here (every in_features a multiple of 16).
SHAPE = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False)

#: (family of hscale.models.synthetic, label, the family's own settings)
FAMILIES = (("llama", "Llama", {}), ("qwen3", "Qwen3", {}),
            ("qwen3_moe", "Qwen3-MoE", dict(num_experts=8, num_experts_per_tok=2,
                                            moe_intermediate_size=128, norm_topk_prob=True)))

BEST_SCALE_ITERATIONS = 30  # the MiniLM oracle is the same at 30, 60 and 120 steps (docs)


def _kit_methods(iterations):
    """method -> (data_free, run): run(weight, G, s_g) -> dequantized float64; data_free: its
    scales depend on the weights alone, not on the calibration."""
    from hscale.reference import SCALE_BYTE_VALUES, diagonal_blocks, quantize

    def best(w, G, s_g):
        hs = quantize(w, np.diag(G).copy(), global_scale=s_g)
        start = SCALE_BYTE_VALUES[hs.scale_bytes].astype(np.float64) * float(s_g)
        return analyses.best_scale(w, G, start, iterations=iterations).dequantized

    return {
        "rtn": (True, lambda w, G, s_g: quantize(w, method="rtn", global_scale=s_g).dequantize()),
        "scale-only": (True, lambda w, G, s_g: quantize(w, method="scale-only",
                                                        global_scale=s_g).dequantize()),
        "hscale": (False, lambda w, G, s_g: quantize(w, np.diag(G).copy(),
                                                     global_scale=s_g).dequantize()),
        "hscale-block": (False, lambda w, G, s_g: quantize(
            w, diagonal_blocks(G), method="hscale-block", global_scale=s_g).dequantize()),
        "full-ladder": (False, lambda w, G, s_g: analyses.full_ladder(
            w, np.diag(G).copy(), s_g).dequantize()),
        "best-scale": (False, best)}


def _subset(texts, seed, fraction=FRACTION):
    """The same seeded subset as the MiniLM spread (hscale/report/spread.py)."""
    pick = np.sort(np.random.default_rng(seed).choice(len(texts), int(fraction * len(texts)),
                                                      replace=False))
    return [texts[i] for i in pick]


def _hessians(directory: Path, texts, work: Path, name: str) -> dict:
    """module -> X^T X (float64) over ``texts``, by the kit's block-by-block calibration."""
    from safetensors import safe_open
    from hscale.quantize import QuantizeRequest, calibrate_to_file
    source = work / f"{name}.txt"
    source.write_text("\n".join(texts) + "\n")
    request = QuantizeRequest(model_dir=str(directory), calibration_text=str(source),
                              progress=False)
    path = work / f"{name}.safetensors"
    calibrate_to_file(request, path, full=True, force=True)
    with safe_open(str(path), framework="numpy") as f:
        return {k[2:]: np.asarray(f.get_tensor(k), np.float64) for k in f.keys()
                if k.startswith("H.")}


def _layers(directory: Path):
    """(weights: module -> float32, fused: module -> its fused set) of the Linears the kit
    quantizes, as ``hscale quantize`` plans them."""
    from hscale.checkpoints import SafetensorsModel
    from hscale.models.architecture import meta_model
    from hscale.models.inventory import inventory
    from hscale.quantize import QuantizeRequest
    from hscale.quantize.plan import plan_layers
    source = SafetensorsModel(directory)
    found = inventory(directory, meta_model(directory))
    plans = [p for p in plan_layers(source, found.matmuls(), QuantizeRequest().ignore,
                                    found.tied) if p.quantize]
    weights = {p.module: source.array(f"{p.module}.weight").astype(np.float32) for p in plans}
    return weights, {p.module: tuple(p.fused_with) or (p.module,) for p in plans}


def family_analyses(family: str, own: dict, subsets: int = SUBSETS,
                    iterations: int = BEST_SCALE_ITERATIONS, competitors: bool = True,
                    progress: bool = True, kit_methods=None, only=None) -> dict:
    """One family: rows (method -> held-out and calibration error vs min-max and seconds, each
    an interval over the subsets, or one value when data-free), the window sweep's U = 0 and
    U = 6 (K = 16) recovered share and H-Scale's shift shares, each an interval over subsets.
    ``kit_methods``: the kit's methods to run (default all; rtn always); the window and shift
    figures need the full ladder and are None without it. ``only``: the competitor rows to run
    (default all), for a run that measures some rows alone (tools/modelopt_fidelity.py)."""
    from hscale.calibration import calibration_texts, heldout_texts
    from hscale.checkpoints.synthetic import write_synthetic_model
    from hscale.models.synthetic import family_config
    from hscale.reference import quantize
    from .head_to_head import (BASELINE_ROW, BLOCK_ROW, COMPETITORS, FUNCTIONS, HSCALE_ROW,
                               MODELOPT_CALIBRATORS, head_to_head)
    methods = {m: v for m, v in _kit_methods(iterations).items()
               if kit_methods is None or m == "rtn" or m in kit_methods}
    figures = "full-ladder" in methods and "hscale" in methods  # window and shift figures
    not_wanted = set() if only is None else (
        {c[0] for c in COMPETITORS + FUNCTIONS} | set(MODELOPT_CALIBRATORS)) - set(only)
    per = {m: {"heldout": [], "output": [], "seconds": []} for m in methods}
    competitor_rows: dict = {}
    window = {"0,16": [], "6,16": [], "6,16 p10": []}
    shares = {"keep": [], "larger": [], "smaller": []}
    with tempfile.TemporaryDirectory(prefix="hscale-report-") as work:
        work = Path(work)
        config = family_config(family, {**SHAPE, **own})
        write_synthetic_model(work / "model", config, seed=0)
        weights, fused = _layers(work / "model")
        Gh = _hessians(work / "model", heldout_texts(), work, "heldout")
        texts = calibration_texts()
        model = None
        for seed in range(subsets):
            G = _hessians(work / "model", _subset(texts, seed), work, f"subset{seed}")
            model = pipelines.CalibratedModel(None, weights, fused, G, Gh)
            scales = pipelines.global_scales(model, DEFAULT_SCALE_CEILING)
            errors = {m: {"heldout": [], "output": []} for m in methods}
            seconds = dict.fromkeys(methods, 0.0)
            recovered = {"0,16": [], "6,16": []}
            counts = np.zeros(3)
            for module, w in weights.items():
                for method, (_, run) in methods.items():  # every one, data-free ones too
                    start = time.perf_counter()
                    deq = run(w, G[module], scales[module])
                    seconds[method] += time.perf_counter() - start
                    errors[method]["heldout"].append(output_error(w, deq, Gh[module]))
                    errors[method]["output"].append(output_error(w, deq, G[module]))
                if not figures:
                    continue
                h = np.diag(G[module]).copy()
                base, top = errors["rtn"]["output"][-1], errors["full-ladder"]["output"][-1]
                for U in (0, 6):
                    mine = output_error(w, quantize(w, h, K=16, U=U, global_scale=scales[module])
                                        .dequantize(), G[module])
                    recovered[f"{U},16"].append(analyses.recovered_fraction(base, mine, top))
                hs = quantize(w, h, global_scale=scales[module])
                d = np.asarray(hs.delta)[np.asarray(hs.scale_bytes) != 0]
                counts += [np.sum(d == 0), np.sum(d > 0), np.sum(d < 0)]
            for method in methods:
                for key in ("heldout", "output"):
                    per[method][key].append(float(np.mean(
                        np.array(errors[method][key]) / np.array(errors["rtn"][key]))))
                per[method]["seconds"].append(seconds[method])
            for key, values in (recovered if figures else {}).items():
                finite = np.array(values)[np.isfinite(values)]
                window[key].append(float(np.median(finite)))
                if key == "6,16":
                    window["6,16 p10"].append(float(np.percentile(finite, 10)))
            for key, count in zip(("keep", "larger", "smaller"), counts if figures else ()):
                shares[key].append(float(count / counts.sum()))
            if competitors:
                done = {n for n, r in competitor_rows.items() if r.get("data_free")
                        or not r.get("ran")}
                rows = head_to_head(model, progress=False,
                                    skip=done | not_wanted | set(_BASELINES)
                                    | {HSCALE_ROW, BLOCK_ROW, BASELINE_ROW})
                for name, row in rows.items():
                    if name in (HSCALE_ROW, BLOCK_ROW, BASELINE_ROW):
                        continue
                    entry = competitor_rows.setdefault(name, {
                        "ran": row.get("ran", False), "data_free": name not in _CALIBRATED(),
                        "heldout": [], "output": [], "seconds": []})
                    if not row.get("ran"):
                        entry.update(ran=False, reason=row["reason"])
                        continue
                    entry["version"] = row.get("version", "")
                    entry["heldout"].append(row["output_heldout"]["mean"])
                    entry["output"].append(row["output"]["mean"])
                    entry["seconds"].append(row["seconds"])
            if progress:
                print(f"  {family} subset {seed + 1}/{subsets}: " + ", ".join(
                    f"{m} {100 * (per[m]['heldout'][-1] - 1):+.2f}%" for m in methods
                    if m in ("hscale", "hscale-block")), flush=True)
    rows = {}
    for method, (data_free, _) in methods.items():
        rows[method] = _row(per[method], data_free)
    for name, entry in competitor_rows.items():
        rows[name] = (_row(entry, entry["data_free"], version=entry.get("version", ""))
                      if entry["ran"] else {"ran": False, "reason": entry["reason"],
                                            "data_free": entry["data_free"]})
    groups = sum(w.size // 16 for w in weights.values())
    return {"architecture": config.architectures[0], "layers": len(weights), "groups": groups,
            "experts": sum(".experts." in m for m in weights),
            "rows": rows,
            "window": {k: interval(v) for k, v in window.items()} if figures else None,
            "shift_shares": {k: interval(v) for k, v in shares.items()} if figures else None}


#: Competitors that give min-max itself (the MiniLM head-to-head shows it): not repeated here.
_BASELINES = ("llm-compressor min-max observer", "ModelOpt NVFP4QTensor (max calibration)",
              "AutoRound NVFP4 RTN (iters=0)")


def _CALIBRATED():
    from .head_to_head import CALIBRATED_ROWS
    return CALIBRATED_ROWS


def _row(values: dict, data_free: bool, version: str = "") -> dict:
    """A row from its per-subset values: an interval each, or the one value when data-free."""
    row = {"ran": True, "data_free": bool(data_free), "version": version}
    for key in ("heldout", "output", "seconds"):
        row[key] = interval(values[key]) if not data_free else {
            "mean": float(values[key][0]), "half_width": None,
            "values": [float(v) for v in values[key]]}
    return row


def synthetic_analyses(subsets: int = SUBSETS, iterations: int = BEST_SCALE_ITERATIONS,
                       competitors: bool = True, progress: bool = True) -> dict:
    """Every family of FAMILIES, with the caption every table and plot of it carries."""
    start = time.perf_counter()
    families = {label: family_analyses(family, own, subsets, iterations, competitors, progress)
                for family, label, own in FAMILIES}
    return {"caption": CAPTION, "shape": dict(SHAPE), "subsets": subsets,
            "fraction": FRACTION, "best_scale_iterations": iterations, "families": families,
            "moe": dict(FAMILIES[2][2]), "wall_seconds": time.perf_counter() - start}
