"""The FP32 global scale of a tensor (spec clauses NVFP4-GS-1 .. NVFP4-GS-3).

``s_g`` is stored as the dequantization multiplier: a weight dequantizes to
``code_value * e4m3(scale_byte) * s_g``. It is chosen so that the tensor's largest magnitude,
divided by ``6 * s_g``, lands on the scale ceiling ``C`` of the E4M3 ladder.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .constants import DEFAULT_SCALE_CEILING, E4M3_MAX, FP32_SMALLEST_NORMAL
from .e2m1 import MAX_MAGNITUDE

FP32_MANTISSA_BITS = 23
# The smallest real that rounds to +inf in fp32 (ties to even): 2^128 - 2^103, halfway between
# the largest finite fp32 value and 2^128.
FP32_OVERFLOW_THRESHOLD = Fraction(2) ** 128 - Fraction(2) ** 103
# The largest dequantized magnitude is 6 (E2M1) * 448 (E4M3) * s_g.
LARGEST_PRODUCT_OF_CODES = int(MAX_MAGNITUDE * E4M3_MAX)


def fraction_to_fp32(value: Fraction) -> float:
    """Round a positive rational in the normal fp32 range to fp32, ties to even."""
    # floor(log2(value)), exactly.
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    if Fraction(2) ** exponent > value:
        exponent -= 1
    quantum = Fraction(2) ** (exponent - FP32_MANTISSA_BITS)
    steps = round(value / quantum)  # Fraction.__round__ rounds half to even
    return float(steps * quantum)  # exact: at most 25 significant bits


def dequantizes_finitely(global_scale: float) -> bool:
    """True when ``fp32(6 * 448 * s_g)``, the largest dequantized magnitude, is finite."""
    largest = LARGEST_PRODUCT_OF_CODES * float(global_scale)  # exact in float64
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.float32(largest)))


def compute_global_scale(amax: float, scale_ceiling: float = DEFAULT_SCALE_CEILING) -> np.float32:
    """``s_g = fp32_rne(amax / (6 * C))`` of the exact real quotient (NVFP4-GS-1).

    ``amax == 0`` gives 1.0, and a quotient below the smallest normal fp32 is raised to it
    (NVFP4-GS-2), so ``s_g`` is always a positive normal fp32. A tensor whose ``s_g`` would
    let a dequantized value overflow fp32 (possible only with a scale ceiling far below 448 and
    weights near the fp32 maximum) is rejected (NVFP4-GS-2).
    """
    if amax == 0:
        return np.float32(1.0)  # NVFP4-GS-2
    exact_quotient = Fraction(float(amax)) / (6 * Fraction(float(scale_ceiling)))  # NVFP4-GS-1
    if exact_quotient < FP32_SMALLEST_NORMAL:
        return np.float32(FP32_SMALLEST_NORMAL)  # NVFP4-GS-2
    # A quotient beyond fp32 (a tiny scale ceiling) rounds to inf: rejected below, without
    # converting the fraction to a float first (it can exceed even float64).
    global_scale = (math.inf if exact_quotient >= FP32_OVERFLOW_THRESHOLD
                    else fraction_to_fp32(exact_quotient))  # NVFP4-GS-1
    if not dequantizes_finitely(global_scale):
        shown = (repr(fraction_to_fp32(exact_quotient)) if exact_quotient < Fraction(2) ** 1000
                 else "more than 1e300")  # the quotient on the fp32 grid, beyond fp32's range
        raise ValueError(f"global scale: amax = {float(amax)!r} with scale_ceiling = "
                         f"{float(scale_ceiling)!r} gives s_g = {shown}, and 6 * 448 * s_g "
                         "overflows fp32 on dequantization; use a larger scale_ceiling "
                         "(spec NVFP4-GS-2)")
    return np.float32(global_scale)


def multiplier_from_reciprocal(reciprocal) -> np.float32:
    """The dequantization multiplier s_g implied by a global scale stored as its reciprocal
    ``r = 6C/amax`` (compressed-tensors): ``s_g = fp32_rne(1 / r)`` of the exact real reciprocal
    (NVFP4-GS-4). ``r`` must be a positive normal fp32 whose reciprocal is a normal fp32."""
    value = float(np.float32(reciprocal))
    if float(reciprocal) != value or not (np.isfinite(value) and value > 0):
        raise ValueError(f"global scale stored as a reciprocal: {reciprocal!r} is not a positive "
                         "finite fp32 value (spec NVFP4-GS-4)")
    return np.float32(fraction_to_fp32(1 / Fraction(value)))  # NVFP4-GS-4


def reciprocal_from_multiplier(global_scale) -> np.float32:
    """The reciprocal a writer stores for s_g: ``r = fp32_rne(1 / s_g)`` (NVFP4-GS-4). A reader
    recovers ``multiplier_from_reciprocal(r)``, which is s_g for about 83% of fp32 values and one
    ulp off for the rest (docs/spec.md, NVFP4-GS-4)."""
    value = float(np.float32(global_scale))
    if float(global_scale) != value or not (np.isfinite(value) and value > 0):
        raise ValueError(f"global_scale = {global_scale!r}: not a positive finite fp32 value "
                         "(spec NVFP4-GS-4)")
    return np.float32(fraction_to_fp32(1 / Fraction(value)))  # NVFP4-GS-4
