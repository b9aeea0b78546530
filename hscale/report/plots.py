"""The plots of ``hscale report``: Agg, fixed size and dpi, no timestamp or software tag, so that
the same figures give the same PNG bytes on the same machine."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np

from hscale.files import write_bytes

from .vocabulary import LABELS, METHODS, short_name

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
