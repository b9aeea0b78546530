"""FP8 E4M3 (the ``e4m3fn`` variant), the format of NVFP4 scale bytes.

Spec clauses NVFP4-E4M3-1 (decoding), NVFP4-E4M3-2 (encoding) and NVFP4-E4M3-3 (the ladder).
Bit 7 is the sign, bits 6..3 the exponent (bias 7), bits 2..0 the mantissa. There is no
infinity; 0x7F and 0xFF are NaN; the largest finite value is 448 and subnormals reach 2^-9.
"""

from __future__ import annotations

import math

import numpy as np

from .constants import LADDER_FIRST_BYTE, LADDER_LAST_BYTE

EXPONENT_BIAS = 7
MANTISSA_BITS = 3
SMALLEST_NORMAL = 2.0 ** -6  # 0x08

# NVFP4-E4M3-3: the ladder is the 126 positive finite values, bytes LADDER_FIRST_BYTE (0x01)
# .. LADDER_LAST_BYTE (0x7E). The byte is its own ladder index, so a walk on the ladder is
# integer arithmetic on bytes.


def decode_e4m3_byte(byte: int) -> float:
    """Value of one E4M3 byte (NVFP4-E4M3-1)."""
    if not 0 <= byte <= 0xFF:
        raise ValueError(f"byte {byte}: an E4M3 byte is 0..255 (spec NVFP4-E4M3-1)")
    sign = -1.0 if byte & 0x80 else 1.0
    exponent_field = (byte >> MANTISSA_BITS) & 0xF
    mantissa_field = byte & 0x7
    if exponent_field == 0xF and mantissa_field == 0x7:
        return math.nan  # e4m3fn spends the all-ones pattern on NaN, so there is no infinity
    if exponent_field == 0:
        # Subnormal: 0.mmm * 2^(1 - bias)
        return sign * (mantissa_field / 8.0) * 2.0 ** (1 - EXPONENT_BIAS)
    return sign * (1.0 + mantissa_field / 8.0) * 2.0 ** (exponent_field - EXPONENT_BIAS)


# Value of every byte 0x00..0xFF, built from the rule above (NVFP4-E4M3-1).
E4M3_VALUES = np.array([decode_e4m3_byte(b) for b in range(256)], dtype=np.float64)

# Value of each non-negative scale byte 0x00..0x7E: 0x00 (zero groups) then the ladder. These
# are increasing, so the byte of a non-negative finite value is its position here.
SCALE_BYTE_VALUES = E4M3_VALUES[: LADDER_LAST_BYTE + 1]
LADDER = SCALE_BYTE_VALUES[LADDER_FIRST_BYTE:]


def decode_e4m3(scale_bytes) -> np.ndarray:
    """Value (float64) of each E4M3 byte (NVFP4-E4M3-1)."""
    return E4M3_VALUES[np.asarray(scale_bytes).astype(np.intp)]


def encode_e4m3(value: np.ndarray) -> np.ndarray:
    """E4M3 byte of each non-negative real ``value`` (given exactly as float64).

    Round to nearest, ties to even, saturating to finite: anything above 448 gives 448
    (NVFP4-E4M3-2). The caller guarantees finite, non-negative inputs.

    Why not E2M1's routine (``e2m1.encode_e2m1``: a comparison with every midpoint): the ladder
    has 126 values over 16 binades, so thresholds would be 126 comparisons per value, while its
    input here is exact in float64 (the caller's real value), so frexp, a power-of-two rescaling
    and ``rint`` round it once, exactly, in O(1). E2M1 compares instead because its input is a
    quotient float64 cannot hold exactly (see there).
    """
    value = np.asarray(value, dtype=np.float64)
    _, binary_exponent = np.frexp(value)  # value = f * 2^binary_exponent, f in [0.5, 1)
    # The quantum is 2^(exponent - 3) in a binade; below the smallest normal (and at 0) it
    # stays at the subnormal spacing 2^-9.
    quantum_exponent = np.where(value < SMALLEST_NORMAL, -6, binary_exponent - 1) - MANTISSA_BITS
    steps = np.ldexp(value, -quantum_exponent)  # exact: a power-of-two rescaling
    rounded_steps = np.rint(steps).astype(np.int64)  # NVFP4-E4M3-2: round half to even
    # A value of ``rounded_steps`` (8..16) quanta 2^q is byte 8 * exponent_field + mantissa_field
    # = 8 * (q + 10) + (rounded_steps - 8); subnormals (q = -9, 0..8 steps) follow the same
    # formula, and 16 steps is the next binade's first byte. Above 0x7E is above 448.
    scale_byte = 8 * (quantum_exponent + 9) + rounded_steps
    return np.minimum(scale_byte, LADDER_LAST_BYTE).astype(np.uint8)  # NVFP4-E4M3-2: satfinite
