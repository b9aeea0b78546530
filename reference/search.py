"""The choice among the candidates: the priority order, the minimum and its tie rule, and the
reported shift (spec clause HSCALE-ARGMIN-1)."""

from __future__ import annotations

import numpy as np

from .dequantize import effective_scale
from .e2m1 import encode_e2m1
from .objective import weighted_error
from .window import searched_shifts, window_bytes


def priority_order(K: int, U: int) -> list[int]:
    """The window's shifts in tie-break priority: 0, +1, -1, +2, -2, ... (HSCALE-ARGMIN-1),
    limited to the shifts a search needs (``window.searched_shifts``).

    Keep the baseline unless something is strictly better; then the smallest move; between two
    moves of the same size, the larger scale.
    """
    D, U = searched_shifts(K, U)
    order = [0]
    for step in range(1, max(U, D) + 1):
        if step <= U:
            order.append(+step)
        if step <= D:
            order.append(-step)
    return order


def first_minimum(errors: np.ndarray) -> np.ndarray:
    """Index (...) of the least objective along the last axis of ``errors`` (..., k), the
    candidates being in priority order; on exactly equal objectives the earlier candidate wins
    (HSCALE-ARGMIN-1). ``np.argmin`` returns the first minimal index, and an objective is never
    NaN (HSCALE-OBJ-1), so this is the spec's "replace only when strictly smaller"."""
    return np.argmin(errors, axis=-1)  # HSCALE-ARGMIN-1


def reported_delta(chosen_bytes: np.ndarray, initial_bytes: np.ndarray) -> np.ndarray:
    """The reported shift ``delta = chosen byte - initial byte`` as int8 (HSCALE-ARGMIN-1)."""
    return (np.asarray(chosen_bytes).astype(np.int16)
            - np.asarray(initial_bytes).astype(np.int16)).astype(np.int8)  # HSCALE-ARGMIN-1


def candidate_errors(group: np.ndarray, hessian_diag, initial_byte: int, global_scale: float,
                     K: int, U: int) -> list[tuple[int, int, float]]:
    """For one group (16,): ``(delta, scale_byte, objective)`` of every candidate in priority
    order, a clipped duplicate listed under each of its shifts.

    For explanations and failure reports; the search does not use it.
    """
    group = np.asarray(group, dtype=np.float64)
    shifts = priority_order(K, U)
    candidates = window_bytes(np.array(initial_byte), shifts)  # (k,)
    scale = effective_scale(candidates, global_scale)
    codes = encode_e2m1(group[None, :], scale[:, None])
    errors = weighted_error(group[None, :], hessian_diag, codes, scale)
    return [(delta, int(b), float(e)) for delta, b, e in zip(shifts, candidates, errors)]
