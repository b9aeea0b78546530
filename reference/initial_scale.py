"""Initial scale bytes: the baselines H-Scale starts its walk from.

Max-abs (RTN) init is spec clause NVFP4-INIT-1, 4over6 init is NVFP4-INIT-2.
"""

from __future__ import annotations

import numpy as np

from .constants import LADDER_FIRST_BYTE
from .e2m1 import MAX_MAGNITUDE
from .e4m3 import encode_e4m3
from .search import first_minimum

# NVFP4-INIT-1 maps the group maximum onto the largest E2M1 magnitude; NVFP4-INIT-2 also tries 4.
TOP_MAGNITUDE = MAX_MAGNITUDE
FOUR_OVER_SIX_TOPS = (MAX_MAGNITUDE, 4.0)  # NVFP4-INIT-2: in this order, so that a tie keeps 6


def range_fitting_byte(group_amax: np.ndarray, global_scale: float, top_magnitude: float,
                       first_byte: int = LADDER_FIRST_BYTE) -> np.ndarray:
    """The byte that maps each group's maximum onto the E2M1 magnitude ``top_magnitude``.

    ``c = E4M3_RNE_satfinite(amax_g / (top_magnitude * s_g))``. The quotient is taken in float64:
    ``amax_g`` has at most 24 significant bits and ``top_magnitude * s_g`` at most 26, so the
    exact quotient is either an E4M3 rounding midpoint or at a relative distance far above
    2^-53 from every one, and the float64 rounding cannot move it across or onto one.
    A non-zero group whose byte rounds below the ladder gets the ladder's first byte 0x01
    (``first_byte`` is a parameter only so that the conformance mutants can model a library
    without subnormal scales).
    """
    denominator = top_magnitude * float(global_scale)  # exact
    quotient = np.asarray(group_amax) / denominator  # NVFP4-INIT-1
    scale_byte = encode_e4m3(quotient)  # NVFP4-INIT-1: RNE, satfinite
    on_ladder = np.maximum(scale_byte, first_byte)  # NVFP4-INIT-1: 0x00 -> 0x01
    return np.where(np.asarray(group_amax) > 0, on_ladder, scale_byte).astype(np.uint8)


def maxabs_byte(group_amax: np.ndarray, global_scale: float) -> np.ndarray:
    """Max-abs (RTN) initial byte: the group maximum lands on 6 (NVFP4-INIT-1)."""
    return range_fitting_byte(group_amax, global_scale, TOP_MAGNITUDE)


def four_over_six_choice(candidates: np.ndarray, unweighted_errors: np.ndarray) -> np.ndarray:
    """The 4over6 initial byte (NVFP4-INIT-2) from its two candidates (..., 2), the bytes that
    map the group maximum onto 6 and onto 4 (``range_fitting_byte`` at ``FOUR_OVER_SIX_TOPS``),
    and their unweighted errors (..., 2), the objective HSCALE-OBJ-1 with h = 1: the byte at 4
    only when its error is strictly smaller, so a tie keeps 6 (the first minimum)."""
    index = first_minimum(unweighted_errors)  # NVFP4-INIT-2: a tie keeps 6
    return np.take_along_axis(candidates, index[..., None], axis=-1)[..., 0]
