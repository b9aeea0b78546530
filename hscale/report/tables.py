"""The markdown tables of ``hscale report`` (OUT/tables.md), the paper's values beside ours."""

from __future__ import annotations

from .vocabulary import LABELS, METHODS, PAPER

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
    lines += spread_table(doc.get("spread"))
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


def spread_table(spread) -> list[str]:
    """The spread over calibration subsets: mean and 95% interval of each method's held-out
    output error relative to min-max, and of its seconds, all from the same run."""
    if not spread:
        return []
    lines = ["", f"### (f) Spread over {spread['subsets']} calibration subsets (each a seeded "
             f"random {spread['sentences']} of the calibration sentences; held-out text fixed)",
             "", "| method | held-out output error vs min-max, mean +- 95% interval | per subset "
             "| seconds (all Linears), mean +- 95% interval |", "|---|---:|---|---:|"]
    for method, v in spread["methods"].items():
        e, t = v["heldout"], v["seconds"]
        lines.append(f"| {LABELS[method]} | {100 * (e['mean'] - 1):+.2f}% +- "
                     f"{100 * e['half_width']:.2f} | "
                     + ", ".join(f"{100 * (x - 1):+.2f}%" for x in e["values"])
                     + f" | {t['mean']:.2f} +- {t['half_width']:.2f} |")
    d = spread["block_minus_hscale"]
    lines += ["", f"hscale-block minus H-Scale, paired by subset: {100 * d['mean']:+.2f} points "
              f"+- {100 * d['half_width']:.2f} (95% interval)."]
    return lines
