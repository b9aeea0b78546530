"""E2M1, the 4-bit element format of NVFP4 (spec clauses NVFP4-E2M1-1 .. NVFP4-E2M1-3).

A code is 4 bits: bit 3 the sign, bits 2..1 the exponent, bit 0 the mantissa. Only the
magnitude table matters to the arithmetic; it lives, with its bit fields, in ``constants``.
"""

from __future__ import annotations

import numpy as np

from .constants import E2M1_MAGNITUDES, E2M1_MIDPOINTS

SIGN_BIT = 0x8  # NVFP4-E2M1-1

MAX_MAGNITUDE = E2M1_MAGNITUDES[-1]

# Value of every code 0x0..0xF (0x8 is -0.0), as float64.
E2M1_VALUES = np.array(
    [m for m in E2M1_MAGNITUDES] + [-m for m in E2M1_MAGNITUDES], dtype=np.float64)


def decode_e2m1(codes) -> np.ndarray:
    """Value (float64) of each 4-bit code; bit 3 set gives the negative (0x8 is -0.0)."""
    codes = np.asarray(codes)
    if codes.size and (codes.min() < 0 or codes.max() > 0xF):
        raise ValueError("codes: E2M1 codes are 4-bit values 0..15 (spec NVFP4-E2M1-1)")
    return E2M1_VALUES[codes.astype(np.intp)]


def encode_e2m1(weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """E2M1 code of each ``weight`` element for the effective ``scale`` (> 0, broadcastable).

    The magnitude is the round-to-nearest-even of the exact real ``|w| / scale`` on the E2M1
    grid, saturating at 6 (NVFP4-E2M1-2). It is computed in the division-free threshold form:
    ``|w|`` is compared with ``midpoint * scale``, a product that is exact in float64 (the
    midpoint has 3 significant bits, the scale at most 28), so no rounding enters the decision.

    Why not E4M3's routine (``e4m3.encode_e4m3``: frexp, a power-of-two rescaling, ``rint``):
    that rounds a value it is given exactly, and here the value is a quotient, ``|w| / scale``,
    which float64 cannot hold exactly; dividing first would round twice. E2M1 has 7 midpoints,
    so comparing against each (exact products) is as cheap as one division; E4M3's 126-step
    ladder is not, and its inputs are exact.
    """
    weight = np.asarray(weight, dtype=np.float64)
    magnitude = np.abs(weight)
    magnitude_code = np.zeros(np.broadcast_shapes(weight.shape, np.shape(scale)), dtype=np.uint8)
    for lower_code, midpoint in enumerate(E2M1_MIDPOINTS):
        threshold = midpoint * scale  # NVFP4-E2M1-2: exact in float64
        if lower_code % 2 == 0:
            # A tie lies between an even code below and an odd code above: stay on the even one.
            passes = magnitude > threshold
        else:
            # A tie lies between an odd code below and an even code above: move up to it.
            passes = magnitude >= threshold
        magnitude_code += passes.astype(np.uint8)
    sign = np.where(np.signbit(weight), SIGN_BIT, 0).astype(np.uint8)  # NVFP4-E2M1-3
    return sign | magnitude_code
