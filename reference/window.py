"""The candidate window of the scale walk (spec clause HSCALE-WIN-1)."""

from __future__ import annotations

import numpy as np

from .constants import LADDER_FIRST_BYTE, LADDER_LAST_BYTE

# The longest walk that can reach a new byte: from one end of the ladder to the other. Any
# shift beyond it only repeats a clipped end (HSCALE-WIN-1), so larger windows search the same
# bytes (docs/spec.md, HSCALE-WIN-1: "windows wider than the ladder").
LONGEST_WALK = LADDER_LAST_BYTE - LADDER_FIRST_BYTE  # 125


def window_deltas(K: int, U: int) -> list[int]:
    """The K shifts ``-D .. +U`` with ``D = K - 1 - U``, in ascending order (HSCALE-WIN-1).

    For explanations and small windows: a window wider than the ladder is a list of K ints.
    """
    D = K - 1 - U
    return list(range(-D, U + 1))


def searched_shifts(K: int, U: int) -> tuple[int, int]:
    """``(D, U)`` limited to the longest walk: the shifts a search needs, whatever K is.

    Shifts beyond ``LONGEST_WALK`` give a byte that a shorter shift of the same sign already
    gave (both are clipped to 0x01 or 0x7E), and a clipped duplicate never replaces the earlier
    candidate (HSCALE-ARGMIN-1), so dropping them changes no choice and keeps the search bounded
    for any K (HSCALE-WIN-1).
    """
    D = K - 1 - U
    return min(D, LONGEST_WALK), min(U, LONGEST_WALK)


def window_bytes(initial_bytes: np.ndarray, shifts, first_byte: int = LADDER_FIRST_BYTE,
                 last_byte: int = LADDER_LAST_BYTE) -> np.ndarray:
    """``clip(c0 + delta, 0x01, 0x7E)`` for each initial byte (...) and each shift (k,), as
    uint8 (..., k), the candidates in the order of ``shifts`` (HSCALE-WIN-1).

    ``first_byte`` and ``last_byte`` are the ends of the ladder (NVFP4-E4M3-3); they are
    parameters only so that a backend that models another ladder can be described by the same
    rule (conformance mutants).
    """
    walked = np.asarray(initial_bytes).astype(np.int64)[..., None] + np.asarray(shifts, np.int64)
    return np.clip(walked, first_byte, last_byte).astype(np.uint8)  # HSCALE-WIN-1
