"""The plots of ``hscale report``: Agg, fixed size and dpi, no timestamp or software tag, so that
the same figures give the same PNG bytes on the same machine."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np

from hscale.files import write_bytes

from .vocabulary import LABELS, METHODS, PAPER, PAPER_SOURCE, short_name

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
    return write_bytes(path, buffer.getvalue())


# One style per method: H-Scale drawn last and on top (filled, black); the methods that can
# coincide with it (the full ladder) hollow and larger, so that both stay visible.
STYLES = {"scale-only": dict(marker="^", color="tab:orange", markersize=3, linestyle="-"),
          "full-ladder": dict(marker="o", color="tab:cyan", markersize=7, linestyle=":",
                              markerfacecolor="none"),
          "hscale-block": dict(marker="s", color="tab:purple", markersize=4, linestyle="-"),
          "best-scale": dict(marker="D", color="tab:green", markersize=3, linestyle="-"),
          "hscale": dict(marker="o", color="black", markersize=3, linestyle="-")}


def plot_layers(doc: dict, key: str, path: Path, title: str) -> Path:
    """Each method's per-layer error over min-max (top) and its difference from H-Scale's in
    percentage points (bottom), where methods that nearly coincide can be told apart."""
    plt = _figure()
    fig, (ax, diff) = plt.subplots(2, 1, figsize=(10, 5.8), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    layers = doc["layers"]
    x = np.arange(len(layers))
    methods = [m for m in METHODS if m in layers[0][key]]
    ratio = {m: np.array([r[key][m] / r[key]["rtn"] for r in layers]) for m in methods}
    for method in sorted(methods, key=lambda m: m == "hscale"):  # H-Scale on top
        ax.plot(x, ratio[method], linewidth=1, label=LABELS[method], **STYLES[method])
        if method != "hscale":
            diff.plot(x, 100 * (ratio[method] - ratio["hscale"]), linewidth=1,
                      label=LABELS[method], **STYLES[method])
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--", label=LABELS["rtn"])
    if key == "output":  # the paper's means (Figure 1's curves are images: only the means)
        right = len(layers) + 0.5
        for method, reduction in sorted(PAPER["output_reduction"].items()):
            ax.plot([right], [1 - reduction], marker="*", markersize=10, linestyle="none",
                    color=STYLES[method]["color"], markeredgecolor="black",
                    markeredgewidth=0.5)
            ax.annotate(f"paper {LABELS[method]}: {-100 * reduction:+.1f}%",
                        (right, 1 - reduction), xytext=(7, 0), textcoords="offset points",
                        va="center", fontsize=6)
        ax.plot([], [], marker="*", markersize=8, linestyle="none", color="grey",
                label="paper means (Qwen3-4B-Instruct gate_proj, their setup; Fig. 1 text)")
        ax.set_xlim(-0.5, len(layers) + 6.5)
    diff.axhline(0.0, color="black", linewidth=0.8)
    diff.set_xticks(x)
    diff.set_xticklabels([short_name(r["module"]) for r in layers], rotation=90, fontsize=6)
    ax.set_ylabel("relative to min-max")
    diff.set_ylabel("minus H-Scale\n(percentage points)")
    ax.set_title(title, pad=36)
    ax.legend(fontsize=7, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return save_png(fig, path)


def plot_shifts(doc: dict, path: Path) -> Path:
    """(a) the share of groups per selected shift, (b) their mean reduction of the diagonal
    objective, with the paper's values where its text gives them (its per-shift bars are an
    image): the reduction at delta = -1 and the mean over delta <= -4 on (b), the keep / larger
    / smaller shares beside ours on (c)."""
    plt = _figure()
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(12, 3.4), gridspec_kw={"width_ratios": [3, 3, 2]})
    shifts = sorted(doc["shifts"], key=int)
    x = [int(s) for s in shifts]
    a.bar(x, [100 * doc["shifts"][s]["share"] for s in shifts], color="tab:blue")
    a.set_xlabel("selected shift delta")
    a.set_ylabel("% of groups")
    a.set_title("(a) selected shift")
    b.bar(x, [100 * doc["shifts"][s]["mean_reduction"] for s in shifts], color="tab:orange",
          label="this model")
    b.plot([-1], [100 * PAPER["reduction_at_minus_1"]], marker="*", markersize=11,
           color="black", linestyle="none", label="paper, delta = -1")
    deep = [v for v in x if v <= -4]
    if deep:
        b.plot([min(deep) - 0.4, -3.6], [100 * PAPER["reduction_at_most_minus_4"]] * 2,
               color="black", linestyle="--", marker="|", markersize=8,
               label="paper, mean over delta <= -4")
    b.set_xlabel("selected shift delta")
    b.set_ylabel("mean reduction of sum h d^2 (%)")
    b.set_title("(b) mean Hessian-weighted error reduction")
    b.legend(fontsize=6, loc="upper right", title=PAPER_SOURCE["shifts"], title_fontsize=6)
    b.set_ylim(0, 100)
    names = ("keep", "larger", "smaller")
    sh = doc.get("summary", {}).get("shift_shares") or {}
    ours = [100 * sh.get(n, np.nan) for n in names]
    paper = [100 * PAPER["shift_shares"][n] for n in names]
    xx = np.arange(3)
    for offset, values, label, kwargs in ((-0.2, ours, "this model", dict(color="tab:blue")),
                                          (0.2, paper, "paper", dict(color="white",
                                                                     edgecolor="black",
                                                                     hatch="//"))):
        bars = c.bar(xx + offset, values, 0.4, label=label, **kwargs)
        for bar_, value in zip(bars, values):
            c.annotate(f"{value:.1f}", (bar_.get_x() + bar_.get_width() / 2, value),
                       ha="center", va="bottom", fontsize=6, xytext=(0, 1),
                       textcoords="offset points")
    c.set_xticks(xx)
    c.set_xticklabels(["keep\n(delta = 0)", "larger\n(delta > 0)", "smaller\n(delta < 0)"],
                      fontsize=7)
    c.set_ylabel("% of groups")
    c.set_ylim(0, 60)
    c.set_title("(c) shares, beside the paper's")
    c.legend(fontsize=6, loc="upper left")
    return save_png(fig, path)


def plot_window(summary: dict, path: Path) -> Path:
    """The window sweep twice: every window on 0-100% (left), and the windows within 5 points
    of the whole gain on an axis that shows hundredths of a percent (right)."""
    plt = _figure()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw={"width_ratios": [1, 1]})
    names = list(summary["window"])
    labels = [f"U={n.split(',')[0]}\nK={n.split(',')[1]}" for n in names]
    median = np.array([100 * summary["window"][n]["median"] for n in names])
    p10 = np.array([100 * summary["window"][n]["p10"] for n in names])
    close = [i for i in range(len(names)) if p10[i] >= 95.0]
    table = PAPER["window_table"]
    paper = {"median": np.array([table.get(n, (np.nan, np.nan))[0] for n in names]),
             "p10": np.array([table.get(n, (np.nan, np.nan))[1] for n in names])}
    for ax, index, low in ((a, list(range(len(names))), 0.0),
                           (b, close, min(p10[close].min(), median[close].min(),
                                          np.nanmin(paper["p10"][close])) - 0.05
                            if close else 0.0)):
        x = np.arange(len(index))
        for offset, values, label, color in ((-0.2, median, "median", "tab:blue"),
                                             (0.2, p10, "P10 over layers", "tab:orange")):
            bars = ax.bar(x + offset, values[index] - low, 0.4, bottom=low, label=label,
                          color=color)
            for bar_, value in zip(bars, values[index]):
                ax.annotate(f"{value:.2f}", (bar_.get_x() + bar_.get_width() / 2, value),
                            ha="center", va="bottom", fontsize=6, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
        for offset, key, marker, label in ((-0.2, "median", "*", "paper median"),
                                           (0.2, "p10", "D", "paper P10")):
            ax.plot(x + offset, paper[key][index], marker=marker, linestyle="none",
                    color="black", markerfacecolor="white" if marker == "D" else "black",
                    markersize=7 if marker == "*" else 4, label=label)
        ax.set_xticks(x)
        ax.set_xticklabels([labels[i] for i in index], fontsize=7)
        ax.set_ylim(low, 100.0 + (100.0 - low) * 0.12)
    a.set_ylabel("% of max-abs -> full-ladder gain")
    a.set_title("every window (0-100%)")
    b.set_title("windows with P10 >= 95% (zoomed)")
    a.set_ylim(0.0, 160.0)  # room for the legend above the bars
    a.legend(fontsize=6, loc="upper center", ncol=2, title=PAPER_SOURCE["window"],
             title_fontsize=6)
    fig.suptitle("window sweep: share of the L_full gain of the full ladder recovered "
                 "(bars: this model; markers: the paper's Table 7)", fontsize=9)
    return save_png(fig, path)


def plot_head_to_head(rows: dict, path: Path) -> Path:
    """Every row, sorted by mean layer output error (calibration text, best first), with its
    value; rows that did not run are listed at the bottom as such."""
    plt = _figure()
    ran = sorted(((n, r) for n, r in rows.items() if r.get("ran")),
                 key=lambda item: (item[1]["output"]["mean"], item[0]))
    missing = [n for n, r in rows.items() if not r.get("ran")]
    names = [n for n, _ in ran] + missing
    fig, (ax, ax_cos) = plt.subplots(1, 2, figsize=(12, 1.0 + 0.5 * max(1, len(names))),
                                     sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    y = np.arange(len(names))
    for offset, key, label, color in ((-0.2, "output", "calibration text", "tab:blue"),
                                      (0.2, "output_heldout", "held-out text", "tab:orange")):
        values = [100 * (r[key]["mean"] - 1) for _, r in ran]
        bars = ax.barh(y[:len(ran)] + offset, values, 0.4, label=label, color=color)
        for bar_, value in zip(bars, values):
            ax.annotate(f"{value:+.1f}%", (min(value, 0.0), bar_.get_y() + bar_.get_height() / 2),
                        ha="right", va="center", fontsize=6, xytext=(-2, 0),
                        textcoords="offset points")
    low = min([100 * (r[k]["mean"] - 1) for _, r in ran for k in ("output", "output_heldout")]
              + [-1.0])
    ax.set_xlim(low * 1.25, max(2.0, -0.05 * low))
    for i in range(len(ran), len(names)):
        ax.annotate("not run (see the table for why)", (0, i), ha="right", va="center",
                    fontsize=7, color="grey", xytext=(-4, 0), textcoords="offset points")
        ax_cos.annotate("not run", (0, i), ha="left", va="center", fontsize=7, color="grey",
                        xytext=(4, 0), textcoords="offset points")
    ax.axvline(0.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(y)
    ax.set_yticklabels(["\n".join(textwrap.wrap(textwrap.shorten(n, 90, placeholder="..."), 45))
                        for n in names], fontsize=7)
    ax.set_ylim(len(names) - 0.5, -0.5)  # first row on top, every row (not-run ones too) shown
    ax.set_xlabel("mean layer output error relative to min-max (RTN), % (lower is better)")
    ax.legend(fontsize=7, loc="lower left")
    # End to end: 1 - cosine, so that smaller is better on both panels; rows kept from a run
    # before the embeddings were measured have no bar.
    distance = [1.0 - r["embedding_cosine_heldout"]["mean"]
                if r.get("embedding_cosine_heldout") else np.nan for _, r in ran]
    bars = ax_cos.barh(y[:len(ran)], distance, 0.5, color="tab:green")
    for bar_, value in zip(bars, distance):
        if np.isfinite(value):
            ax_cos.annotate(f"{value:.4f}", (value, bar_.get_y() + bar_.get_height() / 2),
                            ha="left", va="center", fontsize=6, xytext=(2, 0),
                            textcoords="offset points")
    finite = [d for d in distance if np.isfinite(d)]
    ax_cos.set_xlim(0, 1.25 * max(finite) if finite else 1.0)
    ax_cos.set_xlabel("1 - sentence-embedding cosine to fp32\n(held-out sentences, mean)")
    return save_png(fig, path)


def _row_label(name: str) -> str:
    return "\n".join(textwrap.wrap(textwrap.shorten(LABELS.get(name, name), 70,
                                                    placeholder="..."), 38))


def plot_synthetic(synthetic: dict, path: Path) -> Path:
    """One panel per tiny decoder family: every row's held-out output error relative to
    min-max, sorted (best first), with its 95% interval over the calibration subsets and its
    value; data-free rows hatched (no calibration spread), not-run rows listed as such."""
    plt = _figure()
    families = synthetic["families"]
    count = max(len(f["rows"]) for f in families.values())
    fig, axes = plt.subplots(1, len(families), figsize=(6 * len(families), 1.2 + 0.42 * count))
    axes = np.atleast_1d(axes)
    for ax, (label, family) in zip(axes, families.items()):
        rows = family["rows"]
        ran = sorted(((n, r) for n, r in rows.items() if r.get("ran") and n != "rtn"),
                     key=lambda item: (item[1]["heldout"]["mean"], item[0]))
        missing = [n for n, r in rows.items() if not r.get("ran")]
        names = [n for n, _ in ran] + missing
        y = np.arange(len(names))
        values = np.array([100 * (r["heldout"]["mean"] - 1) for _, r in ran])
        errors = np.array([100 * (r["heldout"]["half_width"] or 0.0) for _, r in ran])
        free = [r["data_free"] for _, r in ran]
        bars = ax.barh(y[:len(ran)], values, 0.6, xerr=errors, capsize=2,
                       color=["white" if f else "tab:blue" for f in free],
                       edgecolor=["grey" if f else "tab:blue" for f in free],
                       hatch=None, error_kw=dict(elinewidth=0.8))
        for bar_, f in zip(bars, free):
            if f:
                bar_.set_hatch("//")
        for i, (value, half, f) in enumerate(zip(values, errors, free)):
            text = f"{value:+.1f}%" + (" (data-free)" if f else f" +- {half:.2f}")
            ax.annotate(text, (min(value, 0.0) - half, i), ha="right", va="center", fontsize=6,
                        xytext=(-2, 0), textcoords="offset points")
        for i in range(len(ran), len(names)):
            ax.annotate("not run (see the table)", (0, i), ha="right", va="center", fontsize=6,
                        color="grey", xytext=(-4, 0), textcoords="offset points")
        low = min(list(values - errors) + [-1.0])
        ax.set_xlim(low * 1.45, max(2.0, -0.04 * low))
        ax.axvline(0.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_yticks(y)
        ax.set_yticklabels([_row_label(n) for n in names], fontsize=6)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.set_xlabel("held-out layer output error vs min-max, % (mean over Linears;\n"
                      f"+- 95% interval over {synthetic['subsets']} calibration subsets)",
                      fontsize=7)
        ax.set_title(f"{label} ({family['layers']} Linears"
                     + (f", {family['experts']} of them experts" if family["experts"] else "")
                     + ")", fontsize=8)
    fig.suptitle(f"Tiny decoders, hidden {synthetic['shape']['hidden_size']}, "
                 f"{synthetic['shape']['num_hidden_layers']} blocks: {synthetic['caption']}",
                 fontsize=9, color="darkred")
    return save_png(fig, path)
