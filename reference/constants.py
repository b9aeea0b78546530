"""The numbers of NVFP4 and of H-Scale's window: the one home of each constant.

Every module of the project that needs one of these numbers imports it from here, so that the
group size, the ladder's ends or the default window are never restated. Each carries the clause
of docs/spec.md that defines it.
"""

from __future__ import annotations

#: One E4M3 scale byte per 16 consecutive elements of a row (NVFP4-PACK-2).
GROUP_SIZE = 16
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
