"""Stochastic rounding of an fp32 value to E2M1 with explicit random bits: the carry rule and the
satfinite specials (spec clauses NVFP4-SR-2, NVFP4-SR-3, docs/spec.md section 11).

This is what ``cvt.rs.satfinite.e2m1x4.f32`` does to one element, given the 8 random bits the
element receives (which byte of the random word that is belongs to ``random_bits``,
NVFP4-SR-4). Every decision is made on exact rationals: ``fractions.Fraction`` of the fp32
value, so no floating-point rounding enters the rule.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .e2m1 import E2M1_MAGNITUDES, MAX_MAGNITUDE, SIGN_BIT

#: 8 random bits per element: the carry is out of an 8-bit addition.
RANDOM_BITS = 8
CARRY = 1 << RANDOM_BITS  # 256
#: The code of +6, what NaN becomes whatever its sign (NVFP4-SR-3).
NAN_CODE = 0x7
#: The grid cells [lo, hi) of the magnitudes below 6, by the code of ``lo``.
CELLS = tuple((Fraction(lo), Fraction(hi))
              for lo, hi in zip(E2M1_MAGNITUDES[:-1], E2M1_MAGNITUDES[1:]))


def cell_of(magnitude: Fraction) -> int:
    """The code of the grid point at or below ``magnitude`` (0 <= magnitude < 6)."""
    return max(k for k, (lo, _) in enumerate(CELLS) if lo <= magnitude)


def discarded_top(magnitude: Fraction) -> int:
    """NVFP4-SR-2: ``D_top``, the top 8 bits of what lies between ``magnitude`` and the grid
    point below it, in units of the cell's width: ``floor(256 * (|v| - lo) / (hi - lo))``, 0 on
    a grid point. The bits below those 8 never matter."""
    lo, hi = CELLS[cell_of(magnitude)]
    return int((magnitude - lo) * CARRY / (hi - lo))  # floor: the quotient is >= 0


def round_stochastic(value: float, byte: int) -> int:
    """The E2M1 code of the fp32 ``value`` rounded stochastically with the 8 random bits
    ``byte`` (NVFP4-SR-2), the specials as satfinite makes them (NVFP4-SR-3)."""
    v = np.float32(value)
    if np.isnan(v):
        return NAN_CODE  # NVFP4-SR-3: NaN -> +6, the sign dropped
    sign = SIGN_BIT if np.signbit(v) else 0  # NVFP4-SR-3: -0 and negatives keep the sign
    if np.isinf(v) or abs(float(v)) >= MAX_MAGNITUDE:
        return sign | (len(E2M1_MAGNITUDES) - 1)  # NVFP4-SR-3: satfinite, +-6
    magnitude = Fraction(abs(float(v)))
    low_code = cell_of(magnitude)
    rounds_up = discarded_top(magnitude) + byte >= CARRY  # NVFP4-SR-2: the carry out
    return sign | (low_code + int(rounds_up))


def round_stochastic_array(values: np.ndarray, bytes_: np.ndarray) -> np.ndarray:
    """:func:`round_stochastic` of every element with its own byte (same shapes), the same rule
    on arrays: ``|v| - lo`` and its product by ``256 / (hi - lo)`` (a power of two) are exact in
    float64 for every fp32 ``v`` (26 significant bits at most where ``lo > 0``; ``|v|`` itself
    where ``lo = 0``), so the floor is ``D_top`` exactly."""
    values = np.asarray(values, np.float32)
    bytes_ = np.asarray(bytes_).astype(np.int32)
    sign = np.where(np.signbit(values), SIGN_BIT, 0).astype(np.uint8)  # NVFP4-SR-3
    top = discarded_top_array(values)
    low_code = _low_codes(values)
    rounds_up = (top >= 0) & (top + bytes_ >= CARRY)  # NVFP4-SR-2
    codes = sign | (low_code + rounds_up).astype(np.uint8)
    saturated = ~np.isnan(values) & (top < 0)
    codes[saturated] = sign[saturated] | (len(E2M1_MAGNITUDES) - 1)  # NVFP4-SR-3: +-6
    codes[np.isnan(values)] = NAN_CODE  # NVFP4-SR-3: NaN -> +6
    return codes


def _low_codes(values: np.ndarray) -> np.ndarray:
    """The code of the grid point at or below each finite |v| < 6 (0 elsewhere)."""
    magnitude = np.abs(values.astype(np.float64))
    grid = np.asarray(E2M1_MAGNITUDES[:-1], np.float64)
    with np.errstate(invalid="ignore"):
        return np.clip(np.searchsorted(grid, magnitude, side="right") - 1, 0,
                       len(grid) - 1).astype(np.uint8)


def discarded_top_array(values: np.ndarray) -> np.ndarray:
    """:func:`discarded_top` of every finite element below 6 in magnitude (-1 elsewhere: a
    special, whose result no byte changes), exact in float64 (see
    :func:`round_stochastic_array`)."""
    values = np.asarray(values, np.float32)
    magnitude = np.abs(values.astype(np.float64))
    lows = np.asarray([float(lo) for lo, _ in CELLS])
    widths = np.asarray([float(hi - lo) for lo, hi in CELLS])
    cell = _low_codes(values)
    with np.errstate(invalid="ignore"):
        top = np.floor((magnitude - lows[cell]) * (CARRY / widths[cell]))  # NVFP4-SR-2
        regular = np.isfinite(magnitude) & (magnitude < MAX_MAGNITUDE)
    return np.where(regular, top, -1).astype(np.int16)
