"""Exact constructions for the hand-written tests: grid points, ties, midpoints."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .cases import CaseError
from .independent import GROUP, MAGNITUDES, MIDPOINTS, SCALE_VALUES

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
DTYPES = (F32, F16, BF16)
_UINT = {2: np.uint16, 4: np.uint32}


def L(byte: int) -> float:
    """Value of ladder byte ``byte``."""
    return float(SCALE_VALUES[byte])


def exact(values, dtype=F32) -> np.ndarray:
    """``values`` (float64) in ``dtype``, refusing any that the conversion would change: a
    rounded value, or a zero whose sign is lost (NaN stays NaN). A construction that is not
    what it claims is a bug of the case, ``CaseError``."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):  # an overflow to infinity is refused below
        out = values.astype(dtype)
    back = out.astype(np.float64)
    both_nan = np.isnan(back) & np.isnan(values)
    bad = ((back != values) | (np.signbit(back) != np.signbit(values))) & ~both_nan
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise CaseError(f"construction: {values[i]!r} at {list(i)} is not exact in "
                        f"{np.dtype(dtype).name}")
    return out


def step(values: np.ndarray, ulps: int) -> np.ndarray:
    """Move each (positive, finite) value ``ulps`` units in the last place, in its own dtype."""
    values = np.asarray(values)
    bits = values.view(_UINT[values.dtype.itemsize]).astype(np.int64) + ulps
    return bits.astype(_UINT[values.dtype.itemsize]).view(values.dtype)


def group_at(byte: int, global_scale: float, values) -> np.ndarray:
    """A 16-element group (float64) whose maximum maps the initial byte exactly onto ``byte``:
    element 0 is ``6 * L(byte) * s_g`` and ``values`` (multiples of the effective scale) fill
    the rest (padded with zeros)."""
    s = L(byte) * global_scale
    vals = [6.0] + list(values)
    vals += [0.0] * (GROUP - len(vals))
    assert len(vals) == GROUP, "at most 15 values besides the maximum"
    return np.array(vals, dtype=np.float64) * s


def tie_code(mid: float) -> int:
    """Magnitude code a tie at ``mid`` rounds to (the even one of its two neighbours)."""
    k = list(MIDPOINTS).index(mid)
    return k if k % 2 == 0 else k + 1


def magnitude_code(value: float) -> int:
    return list(MAGNITUDES).index(value)
