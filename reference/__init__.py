"""The NumPy reference of NVFP4 and H-Scale: the specification in code.

Each module holds one concept of ``docs/spec.md`` and names the clause beside the code that
implements it. There are no device branches and no fast paths here; speed lives in
``hscale.backends``.
"""

from .e2m1 import E2M1_MAGNITUDES, E2M1_MIDPOINTS, E2M1_VALUES, decode_e2m1, encode_e2m1
from .e4m3 import E4M3_VALUES, LADDER, SCALE_BYTE_VALUES, decode_e4m3, encode_e4m3
from .global_scale import (DEFAULT_SCALE_CEILING, FOUR_OVER_SIX_SCALE_CEILING,
                           compute_global_scale)
from .gptq import gptq_quantize
from .initial_scale import four_over_six_byte, maxabs_byte
from .objective import GROUP_SIZE, pairwise_sum, weighted_error
from .packing import pack_codes, swizzle_scale_bytes, unpack_codes, unswizzle_scale_bytes
from .quantize import QuantizedWeight, quantize
from .search import candidate_errors, effective_scale, search_scale_byte
from .window import candidate_byte, priority_order, window_deltas

__all__ = [
    "DEFAULT_SCALE_CEILING", "E2M1_MAGNITUDES", "E2M1_MIDPOINTS", "E2M1_VALUES", "E4M3_VALUES",
    "FOUR_OVER_SIX_SCALE_CEILING", "GROUP_SIZE", "LADDER", "QuantizedWeight", "SCALE_BYTE_VALUES",
    "candidate_byte", "candidate_errors", "compute_global_scale", "decode_e2m1", "decode_e4m3",
    "effective_scale", "encode_e2m1", "encode_e4m3", "four_over_six_byte", "gptq_quantize", "maxabs_byte",
    "pack_codes", "pairwise_sum", "priority_order", "quantize", "search_scale_byte",
    "swizzle_scale_bytes", "unpack_codes", "unswizzle_scale_bytes", "weighted_error",
    "window_deltas",
]
