"""The demo's bundled layer: one real MiniLM layer with its h, ``data/default_layer.npz``.

It is the first block's FFN down-projection (weight 384 x 1536, 36,864 groups). Its input is
the GELU output, whose per-channel energy is the most uneven in MiniLM: on the bundled text
max(h)/median(h) is about 580 here, against about 25 (q/k/v), 35 (attention.output.dense) and
130 (intermediate.dense) in the same block -- the layer where H-Scale's weighting differs most
from the unweighted scale search. ``tools/build_default_layer.py`` regenerates it.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

DEFAULT_LAYER_NAME = "encoder.layer.0.output.dense"
_DEFAULT_LAYER_FILE = "default_layer.npz"


@dataclass(frozen=True)
class DefaultLayer:
    """One calibrated layer: ``weight`` float32 (m, n), ``hessian_diag`` float64 (n,)."""

    name: str
    weight: np.ndarray
    hessian_diag: np.ndarray
    source: str
    n_tokens: int


def _layer_from_npz(data) -> DefaultLayer:
    return DefaultLayer(
        # scalars as 0-d or one-element arrays (hscale.files.npz_bytes writes the latter)
        name=str(data["name"].item()),
        weight=np.array(data["weight"], dtype=np.float32),
        hessian_diag=np.array(data["hessian_diag"], dtype=np.float64),
        source=str(data["source"].item()),
        n_tokens=int(data["n_tokens"].item()),
    )


def load_default_layer(path: Union[str, Path, None] = None) -> DefaultLayer:
    """Read the bundled default layer (via importlib.resources) or the npz at ``path``."""
    if path is not None:
        with np.load(path, allow_pickle=False) as data:
            return _layer_from_npz(data)
    bundled = importlib.resources.files(__package__).joinpath("data", _DEFAULT_LAYER_FILE)
    with importlib.resources.as_file(bundled) as p:
        with np.load(p, allow_pickle=False) as data:
            return _layer_from_npz(data)
