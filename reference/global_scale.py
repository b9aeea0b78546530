"""The FP32 global scale of a tensor (spec clauses NVFP4-GS-1 .. NVFP4-GS-3).

``s_g`` is stored as the dequantization multiplier: a weight dequantizes to
``code_value * e4m3(scale_byte) * s_g``. It is chosen so that the tensor's largest magnitude,
divided by ``6 * s_g``, lands on the scale ceiling ``C`` of the E4M3 ladder.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

DEFAULT_SCALE_CEILING = 448.0  # ModelOpt, torchao, TransformerEngine
FOUR_OVER_SIX_SCALE_CEILING = 256.0  # the 4over6 reference: leaves E4M3 headroom
FP32_SMALLEST_NORMAL = 2.0 ** -126
FP32_MANTISSA_BITS = 23


def fraction_to_fp32(value: Fraction) -> float:
    """Round a positive rational in the normal fp32 range to fp32, ties to even."""
    # floor(log2(value)), exactly.
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    if Fraction(2) ** exponent > value:
        exponent -= 1
    quantum = Fraction(2) ** (exponent - FP32_MANTISSA_BITS)
    steps = round(value / quantum)  # Fraction.__round__ rounds half to even
    return float(steps * quantum)  # exact: at most 25 significant bits


def compute_global_scale(amax: float, scale_ceiling: float = DEFAULT_SCALE_CEILING) -> np.float32:
    """``s_g = fp32_rne(amax / (6 * C))`` of the exact real quotient (NVFP4-GS-1).

    ``amax == 0`` gives 1.0, and a quotient below the smallest normal fp32 is raised to it
    (NVFP4-GS-2), so ``s_g`` is always a positive normal fp32.
    """
    if amax == 0:
        return np.float32(1.0)  # NVFP4-GS-2
    exact_quotient = Fraction(float(amax)) / (6 * Fraction(float(scale_ceiling)))  # NVFP4-GS-1
    if exact_quotient < FP32_SMALLEST_NORMAL:
        return np.float32(FP32_SMALLEST_NORMAL)  # NVFP4-GS-2
    return np.float32(fraction_to_fp32(exact_quotient))  # NVFP4-GS-1
