"""Initial scale bytes: the baselines H-Scale starts its walk from.

Max-abs (RTN) init is spec clause NVFP4-INIT-1, 4over6 init is NVFP4-INIT-2.
"""

from __future__ import annotations

import numpy as np

from .e2m1 import encode_e2m1
from .e4m3 import LADDER_FIRST_BYTE, encode_e4m3, decode_e4m3
from .objective import UNIT_WEIGHTS, weighted_error


def range_fitting_byte(group_amax: np.ndarray, global_scale: float, top_magnitude: float) -> np.ndarray:
    """The byte that maps each group's maximum onto the E2M1 magnitude ``top_magnitude``.

    ``c = E4M3_RNE_satfinite(amax_g / (top_magnitude * s_g))``. The quotient is taken in float64:
    ``amax_g`` has at most 24 significant bits and ``top_magnitude * s_g`` at most 26, so the
    exact quotient is either an E4M3 rounding midpoint or at a relative distance far above
    2^-53 from every one, and the float64 rounding cannot move it across or onto one.
    A non-zero group whose byte rounds to 0x00 gets 0x01, the smallest ladder scale.
    """
    denominator = top_magnitude * float(global_scale)  # exact
    quotient = group_amax / denominator  # NVFP4-INIT-1
    scale_byte = encode_e4m3(quotient)  # NVFP4-INIT-1: RNE, satfinite
    rounds_to_zero = (scale_byte == 0) & (group_amax > 0)
    return np.where(rounds_to_zero, LADDER_FIRST_BYTE, scale_byte).astype(np.uint8)


def maxabs_byte(group_amax: np.ndarray, global_scale: float) -> np.ndarray:
    """Max-abs (RTN) initial byte: the group maximum lands on 6 (NVFP4-INIT-1)."""
    return range_fitting_byte(group_amax, global_scale, 6.0)


def four_over_six_byte(groups: np.ndarray, group_amax: np.ndarray, global_scale: float) -> np.ndarray:
    """4over6 initial byte (NVFP4-INIT-2).

    Two candidates: the group maximum mapped to 6 and to 4. The one with the lower unweighted
    sum of squared error (the objective of HSCALE-OBJ-1 with h = 1) wins; a tie keeps 6.
    """
    byte_at_six = range_fitting_byte(group_amax, global_scale, 6.0)
    byte_at_four = range_fitting_byte(group_amax, global_scale, 4.0)
    error_at_six = _unweighted_error(groups, byte_at_six, global_scale)
    error_at_four = _unweighted_error(groups, byte_at_four, global_scale)
    four_is_better = error_at_four < error_at_six  # NVFP4-INIT-2: a tie keeps 6
    return np.where(four_is_better, byte_at_four, byte_at_six).astype(np.uint8)


def _unweighted_error(groups: np.ndarray, scale_byte: np.ndarray, global_scale: float) -> np.ndarray:
    scale = float(global_scale) * decode_e4m3(scale_byte)  # exact
    codes = encode_e2m1(groups, scale[:, None])
    return weighted_error(groups, UNIT_WEIGHTS, codes, scale)
