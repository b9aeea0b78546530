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
        spread = doc.get("spread")
        lines += ["", "### Head to head: layer output error relative to min-max (RTN), every "
                  "Linear, same s_g and calibration", "",
                  "| scale selection | calibration text (mean / median) | held-out text (mean / "
                  "median) | held-out, over "
                  f"{spread['subsets'] if spread else 'no'} calibration subsets (mean +- 95% "
                  "interval) | layers improved (held-out) | sentence-embedding cosine to fp32, "
                  "held-out (mean / min) | seconds (all Linears) | version |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for name, r in rows.items():
            if r.get("ran"):
                lines.append(f"| {name} | {pct(r['output']['mean'])} / "
                             f"{pct(r['output']['median'])} | {pct(r['output_heldout']['mean'])}"
                             f" / {pct(r['output_heldout']['median'])} | "
                             f"{_spread_cell(name, spread)} | "
                             f"{r['improved_heldout']} of {r['layers']} | "
                             f"{_cosine(r.get('embedding_cosine_heldout'))} | "
                             f"{r['seconds']:.2f} | {_version(r.get('version', ''))} |")
        for name, r in rows.items():
            if not r.get("ran"):
                reason = r["reason"].removeprefix("not run: ")
                lines.append(f"| {name} | not run: {reason} | | | | | | |")
    lines += synthetic_table(doc.get("synthetic"))
    return "\n".join(lines) + "\n"


def _interval(v, digits=2) -> str:
    return f"{100 * (v['mean'] - 1):+.{digits}f}% +- {100 * v['half_width']:.{digits}f}"


def _spread_cell(name: str, spread) -> str:
    """A head-to-head row's held-out figure over the calibration subsets (table (f)), or why
    it has none."""
    from .head_to_head import BASELINE_ROW, BLOCK_ROW, CALIBRATED_ROWS, HSCALE_ROW
    if not spread:
        return "not measured (no calibration subsets in this run)"
    if name == BASELINE_ROW:
        return "the reference (data-free)"
    if name in (HSCALE_ROW, BLOCK_ROW):
        return _interval(spread["methods"]["hscale" if name == HSCALE_ROW else "hscale-block"]
                         ["heldout"])
    if name not in CALIBRATED_ROWS:
        return "data-free: scales from the weights alone, no calibration spread"
    row = (spread.get("competitors") or {}).get(name)
    if row is None:
        return "not measured over the subsets"
    if not row.get("ran"):
        return f"not run over the subsets: {row['reason']}"
    return _interval(row["heldout"])


def synthetic_table(synthetic) -> list[str]:
    """(g): the head to head and the shift and window figures on the tiny decoder families,
    labelled synthetic."""
    if not synthetic:
        return []
    shape = synthetic["shape"]
    lines = ["", f"### (g) Tiny decoders ({', '.join(synthetic['families'])}; hidden "
             f"{shape['hidden_size']}, {shape['num_hidden_layers']} blocks): "
             f"{synthetic['caption']}", "",
             f"Held-out output error relative to min-max, mean over the Linears; mean +- 95% "
             f"interval over {synthetic['subsets']} calibration subsets (each a seeded random "
             f"{int(100 * synthetic['fraction'])}% of the calibration sentences, the same as "
             "(f)); a data-free method's scales depend on the weights alone, so it has one "
             "value. Seconds: scale selection of all the family's Linears, per subset.", ""]
    families = synthetic["families"]
    names = []
    for family in families.values():
        names += [n for n in family["rows"] if n not in names and n != "rtn"]
    lines += ["| method | " + " | ".join(f"{k} (held-out) | {k} (s)" for k in families) + " |",
              "|---|" + "---:|---:|" * len(families)]
    for name in names:
        cells = []
        for family in families.values():
            r = family["rows"].get(name)
            if r is None:
                cells += ["", ""]
            elif not r.get("ran"):
                cells += [f"not run: {r['reason'].split(':')[0]} (the head to head above "
                          "gives the whole reason)", ""]
            elif r["data_free"]:
                cells += [f"{pct(r['heldout']['mean'])} (data-free)",
                          f"{r['seconds']['mean']:.2f}"]
            else:
                cells += [_interval(r["heldout"]),
                          f"{r['seconds']['mean']:.2f} +- {r['seconds']['half_width']:.2f}"]
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(cells) + " |")
    lines += ["", "| figure | " + " | ".join(families) + " | paper, Qwen3-4B-Instruct |",
              "|---|" + "---:|" * (len(families) + 1)]
    for key, label, paper in (
            ("keep", "groups keeping the max-abs byte", PAPER["shift_shares"]["keep"]),
            ("larger", "groups taking a larger scale", PAPER["shift_shares"]["larger"]),
            ("smaller", "groups taking a smaller scale", PAPER["shift_shares"]["smaller"])):
        lines.append(f"| {label} | " + " | ".join(
            f"{100 * f['shift_shares'][key]['mean']:.1f}% +- "
            f"{100 * f['shift_shares'][key]['half_width']:.1f}" for f in families.values())
            + f" | {100 * paper:.1f}% |")
    for key, label, paper in (("0,16", "U = 0, K = 16: median share of the full-ladder gain",
                               PAPER["window_table"]["0,16"][0]),
                              ("6,16", "U = 6, K = 16: median share",
                               PAPER["window_table"]["6,16"][0]),
                              ("6,16 p10", "U = 6, K = 16: P10 over the Linears",
                               PAPER["window_table"]["6,16"][1])):
        lines.append(f"| {label} | " + " | ".join(
            f"{100 * f['window'][key]['mean']:.2f}% +- {100 * f['window'][key]['half_width']:.2f}"
            for f in families.values()) + f" | {paper:.2f}% |")
    return lines


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
    for name, row in (spread.get("competitors") or {}).items():
        if row.get("ran"):
            e, t = row["heldout"], row["seconds"]
            lines.append(f"| {name} | {100 * (e['mean'] - 1):+.2f}% +- "
                         f"{100 * e['half_width']:.2f} | "
                         + ", ".join(f"{100 * (x - 1):+.2f}%" for x in e["values"])
                         + f" | {t['mean']:.2f} +- {t['half_width']:.2f} |")
        else:
            lines.append(f"| {name} | not run: {row['reason']} | | |")
    lines += ["", "Every other head-to-head row is data-free (its scales come from the weights "
              "alone), so a calibration subset cannot move its held-out figure; the head-to-head "
              "table says so row by row."]
    d = spread["block_minus_hscale"]
    lines += ["", f"hscale-block minus H-Scale, paired by subset: {100 * d['mean']:+.2f} points "
              f"+- {100 * d['half_width']:.2f} (95% interval)."]
    return lines
