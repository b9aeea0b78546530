"""Exact objective ties: one group for every pair of window shifts (a, b) whose objectives tie
exactly at the minimum, so that the tie rule HSCALE-ARGMIN-1 alone decides the scale byte.

The construction (s_g = 1, default window K = 16, U = 6): element 0 is ``6 * e4m3(c0)`` with
h = 0, so the baseline byte is c0 and element 0 does not count; element 1 prefers candidate b,
element 2 prefers candidate a, and their weights are chosen crosswise,
``h1 = e2(b) - e2(a)``, ``h2 = e1(a) - e1(b)`` (e_j(c) the squared error of element j at
candidate c), so that ``E(a) - E(b) = h1 (e1(a) - e1(b)) + h2 (e2(a) - e2(b)) = 0``. Every
value is a short dyadic number, and the tie is confirmed with the reference's own objective
(``hscale.reference.candidate_errors``), evaluated in the spec's order. Where no such pair of
elements makes {a, b} the only minimisers, a third element that itself ties at a and b
(e3(a) == e3(b)) is added with a power-of-two weight to push the other candidates up.

:func:`search_tie_table` runs the search (about 20 s); its result is frozen in
``vectors/tie_table.py`` so that generating vectors never depends on a search, and
``python -m hscale.vectors freeze-ties`` rewrites that file.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from hscale.reference import LADDER, candidate_errors, priority_order
from hscale.reference.e2m1 import E2M1_VALUES, encode_e2m1
from hscale.reference.dequantize import effective_scale
from hscale.reference.window import window_bytes

from . import formats, hexio

TIE_K, TIE_U = 16, 6
GRID_STEPS = 32  # element values k / 32 * e4m3(c0), k = 1 .. 192
C0_ORDER = list(range(0x30, 0x40)) + list(range(0x08, 0x30)) + list(range(0x40, 0x70))


def tie_pattern(group: np.ndarray, h: np.ndarray, c0: int, global_scale: float = 1.0,
                K: int = TIE_K, U: int = TIE_U) -> tuple[int, ...]:
    """The sorted shifts whose objective equals the window minimum (the reference's values)."""
    rows = candidate_errors(np.asarray(group, dtype=np.float64), np.asarray(h, dtype=np.float64),
                            c0, global_scale, K, U)
    best = min(e for _, _, e in rows)
    return tuple(sorted(d for d, _, e in rows if e == best))


def _error_table(c0: int, deltas: np.ndarray):
    grid = np.arange(1, 6 * GRID_STEPS + 1) / GRID_STEPS * float(LADDER[c0 - 1])
    scales = effective_scale(window_bytes(np.array(c0), [int(d) for d in deltas]), 1.0)
    codes = encode_e2m1(np.broadcast_to(grid[:, None], (grid.size, scales.size)), scales[None, :])
    return grid, (grid[:, None] - E2M1_VALUES[codes] * scales[None, :]) ** 2


def _try_pair(c0, deltas, grid, M, ia, ib, penalty):
    h1 = M[None, :, ib] - M[None, :, ia]  # weight of element 1, indexed by element 2's value
    h2 = M[:, None, ia] - M[:, None, ib]
    usable = (h1 > 0) & (h2 > 0)
    base = h1[..., None] * M[:, None, :] + h2[..., None] * M[None, :, :]
    extras = [(None, 0.0)]
    if penalty:
        ties = np.nonzero(M[:, ia] == M[:, ib])[0][:6]
        extras = [(int(v), 2.0 ** k) for v in ties for k in range(-6, 16, 2)]
    for v, h3 in extras:
        E = base if v is None else base + h3 * M[v][None, None, :]
        others = np.delete(E, [ia, ib], axis=2)
        good = usable & (others.min(axis=2) > E[..., ia])
        for i, j in np.argwhere(good)[:8]:
            group = np.zeros(16)
            h = np.zeros(16)
            group[0] = 6.0 * float(LADDER[c0 - 1])
            group[1], group[2] = grid[i], grid[j]
            h[1], h[2] = M[j, ib] - M[j, ia], M[i, ia] - M[i, ib]
            if v is not None:
                group[3], h[3] = grid[v], h3
            if tie_pattern(group, h, c0) == (int(deltas[ia]), int(deltas[ib])):
                return group, h
    return None


def search_tie_table(progress=None) -> dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]]:
    """(a, b) -> (c0, group float64 (16,), h float64 (16,)) for every pair of shifts a < b."""
    deltas = np.array(sorted(priority_order(TIE_K, TIE_U)))
    pairs = list(itertools.combinations(range(deltas.size), 2))
    table = {}
    for penalty in (False, True):
        for c0 in C0_ORDER:
            todo = [(ia, ib) for ia, ib in pairs
                    if (int(deltas[ia]), int(deltas[ib])) not in table]
            if not todo:
                break
            grid, M = _error_table(c0, deltas)
            for ia, ib in todo:
                found = _try_pair(c0, deltas, grid, M, ia, ib, penalty)
                if found is not None:
                    table[(int(deltas[ia]), int(deltas[ib]))] = (c0, found[0], found[1])
            if progress:
                progress(f"penalty={penalty} c0={c0:#04x}: {len(table)} of {len(pairs)} pairs")
    return dict(sorted(table.items()))


TIE_TABLE = "tie_table.json"


def write_tie_table(table, path: Path | None = None) -> Path:
    """Freeze a search result as ``vectors/data/tie_table.json`` (weights fp32 hex, h float64
    hex), written to a temporary name and renamed."""
    path = Path(path) if path else Path(__file__).with_name("data") / TIE_TABLE
    document = {
        "about": ("Frozen exact-tie groups, generated by `python -m hscale.vectors.maintain "
                  f"freeze-ties`; do not edit. With s_g = 1 and the window K = {TIE_K}, U = "
                  f"{TIE_U}, exactly the shifts a and b of each entry reach the minimal "
                  "objective. c0 is the initial byte; weight: fp32 hex words; hessian_diag: "
                  "float64 hex words."),
        "ties": [{"shifts": [a, b], "c0": c0,
                  "weight": hexio.row_text(np.asarray(group, dtype=np.float32)),
                  "hessian_diag": hexio.row_text(np.asarray(h, dtype=np.float64))}
                 for (a, b), (c0, group, h) in sorted(table.items())],
    }
    return formats.write_json_atomically(path, document)


def load_tie_table() -> dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]]:
    """The frozen table: (a, b) -> (c0, weight float32 (16,), h float64 (16,))."""
    document = formats.read_data_json(TIE_TABLE)
    return {tuple(entry["shifts"]): (entry["c0"], hexio.from_row_text(entry["weight"], "float32"),
                                     hexio.from_row_text(entry["hessian_diag"], "float64"))
            for entry in document["ties"]}
