"""The candidate window of the scale walk (spec clause HSCALE-WIN-1) and its priority order
(HSCALE-ARGMIN-1)."""

from __future__ import annotations

import numpy as np

from .e4m3 import LADDER_FIRST_BYTE, LADDER_LAST_BYTE


def window_deltas(K: int, U: int) -> list[int]:
    """The K shifts ``-D .. +U`` with ``D = K - 1 - U``, in ascending order (HSCALE-WIN-1)."""
    D = K - 1 - U
    return list(range(-D, U + 1))


def priority_order(K: int, U: int) -> list[int]:
    """The window's shifts in tie-break priority: 0, +1, -1, +2, -2, ... (HSCALE-ARGMIN-1).

    Keep the baseline unless something is strictly better; then the smallest move; between two
    moves of the same size, the larger scale.
    """
    D = K - 1 - U
    order = [0]
    for step in range(1, max(U, D) + 1):
        if step <= U:
            order.append(+step)
        if step <= D:
            order.append(-step)
    return order


def candidate_byte(initial_byte: np.ndarray, delta: int) -> np.ndarray:
    """``clip(c0 + delta, 1, 126)``: a walk of ``delta`` rungs, clipped to the ladder."""
    walked = initial_byte.astype(np.int16) + delta  # HSCALE-WIN-1
    return np.clip(walked, LADDER_FIRST_BYTE, LADDER_LAST_BYTE).astype(np.uint8)  # HSCALE-WIN-1
