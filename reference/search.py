"""The scale search: every candidate of the window scored, the argmin with its tie rule
(spec clauses HSCALE-WIN-1, HSCALE-OBJ-1, HSCALE-ARGMIN-1)."""

from __future__ import annotations

import numpy as np

from .e2m1 import encode_e2m1
from .e4m3 import decode_e4m3
from .objective import weighted_error
from .window import candidate_byte, priority_order


def effective_scale(scale_byte: np.ndarray, global_scale: float) -> np.ndarray:
    """``s = s_g * e4m3(scale_byte)``, exact in float64 (24 x 4 significant bits)."""
    return float(global_scale) * decode_e4m3(scale_byte)


def search_scale_byte(groups: np.ndarray, hessian_diag: np.ndarray, initial_byte: np.ndarray,
                      global_scale: float, K: int, U: int) -> np.ndarray:
    """The scale byte of each group (rows of ``groups``, shape (G, 16)) minimising the objective
    over the window around ``initial_byte`` (G,). ``hessian_diag`` is (G, 16) or (16,).

    Candidates are visited in priority order and a later one replaces the incumbent only when
    its objective is strictly smaller, so an exact tie keeps the earlier candidate
    (HSCALE-ARGMIN-1). Clipped duplicates are the same byte, hence the same objective, and
    never replace each other.
    """
    best_byte = None
    best_error = None
    for delta in priority_order(K, U):
        scale_byte = candidate_byte(initial_byte, delta)  # HSCALE-WIN-1
        scale = effective_scale(scale_byte, global_scale)
        codes = encode_e2m1(groups, scale[:, None])
        error = weighted_error(groups, hessian_diag, codes, scale)  # HSCALE-OBJ-1
        if best_byte is None:
            best_byte, best_error = scale_byte, error
            continue
        strictly_better = error < best_error  # HSCALE-ARGMIN-1
        best_byte = np.where(strictly_better, scale_byte, best_byte)
        best_error = np.where(strictly_better, error, best_error)
    return best_byte.astype(np.uint8)


def candidate_errors(group: np.ndarray, hessian_diag: np.ndarray, initial_byte: int,
                     global_scale: float, K: int, U: int) -> list[tuple[int, int, float]]:
    """For one group: ``(delta, scale_byte, objective)`` of every candidate in priority order.

    For explanations and failure reports; the search above does not use it.
    """
    rows = []
    for delta in priority_order(K, U):
        scale_byte = candidate_byte(np.array([initial_byte], dtype=np.uint8), delta)
        scale = effective_scale(scale_byte, global_scale)
        codes = encode_e2m1(group[None, :], scale[:, None])
        error = weighted_error(group[None, :], hessian_diag, codes, scale)
        rows.append((delta, int(scale_byte[0]), float(error[0])))
    return rows
