"""The numbers of NVFP4 and of H-Scale's window: the one home of each constant.

Every module of the project that needs one of these numbers imports it from here, so that the
group size, the ladder's ends or the default window are never restated. Each carries the clause
of docs/spec.md that defines it.
"""

from __future__ import annotations

#: One E4M3 scale byte per 16 consecutive elements of a row (NVFP4-PACK-2).
GROUP_SIZE = 16
#: NVFP4-E2M1-1: the magnitude of E2M1 codes 0..7 (the grid), with the bit fields of each.
E2M1_MAGNITUDES = (
    0.0,  # 0b000  subnormal 0
    0.5,  # 0b001  subnormal 0.5 * 2^0
    1.0,  # 0b010  1.0 * 2^0
    1.5,  # 0b011  1.5 * 2^0
    2.0,  # 0b100  1.0 * 2^1
    3.0,  # 0b101  1.5 * 2^1
    4.0,  # 0b110  1.0 * 2^2
    6.0,  # 0b111  1.5 * 2^2  (the largest magnitude: encoding saturates here)
)
#: NVFP4-E2M1-2: the midpoint between magnitude code k and k + 1, for k = 0..6.
E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
#: The largest finite E4M3 value, byte 0x7E (NVFP4-E4M3-1).
E4M3_MAX = 448.0
#: The ladder of scale bytes: the 126 positive finite E4M3 values 0x01..0x7E (NVFP4-E4M3-3).
LADDER_FIRST_BYTE = 0x01
LADDER_LAST_BYTE = 0x7E
#: The smallest normal E4M3 byte (2^-6); 0x01..0x07 are subnormal (NVFP4-E4M3-1).
FIRST_NORMAL_BYTE = 0x08
#: The scale ceiling C of s_g = amax / (6 C): 448, ModelOpt's, torchao's and
#: TransformerEngine's (NVFP4-GS-1), and 256, the 4over6 reference's, which leaves E4M3
#: headroom above the group maximum (NVFP4-INIT-2).
DEFAULT_SCALE_CEILING = E4M3_MAX
FOUR_OVER_SIX_SCALE_CEILING = 256.0
#: H-Scale's window: K candidates, U of them above the initial byte and D = K - 1 - U below
#: (HSCALE-WIN-1).
DEFAULT_K = 16
DEFAULT_U = 6
DEFAULT_D = DEFAULT_K - 1 - DEFAULT_U
#: The smallest normal fp32 value: a global scale is never below it (NVFP4-GS-2, NVFP4-IN-4).
FP32_SMALLEST_NORMAL = 2.0 ** -126
#: The largest power of two whose fp32 reciprocal is normal: a multiplier stored as its
#: reciprocal, or an activation global scale, is at most this (NVFP4-GS-4, NVFP4-ACT-1).
FP32_LARGEST_RECIPROCAL_NORMAL = 2.0 ** 126
