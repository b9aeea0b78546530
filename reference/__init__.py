"""The NumPy reference of NVFP4 and H-Scale: the specification in code.

Each module holds one concept of ``docs/spec.md`` and names the clause beside the code that
implements it. There are no device branches and no fast paths here; speed lives in
``hscale.backends``.
"""

from .activations import (QuantizedActivations, dequantize_activations,
                          fake_quantize_activations, quantize_activations)
from .constants import (DEFAULT_D, DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, E4M3_MAX,
                        FIRST_NORMAL_BYTE, FOUR_OVER_SIX_SCALE_CEILING, GROUP_SIZE,
                        LADDER_FIRST_BYTE, LADDER_LAST_BYTE)
from .dequantize import dequantize, effective_scale
from .e2m1 import E2M1_MAGNITUDES, E2M1_MIDPOINTS, E2M1_VALUES, decode_e2m1, encode_e2m1
from .e4m3 import E4M3_VALUES, LADDER, SCALE_BYTE_VALUES, decode_e4m3, encode_e4m3
from .global_scale import compute_global_scale
from .gptq import gptq_quantize
from .initial_scale import four_over_six_choice, maxabs_byte, range_fitting_byte
from .objective import block_error, diagonal_blocks, pairwise_sum, weighted_error
from .packing import pack_codes, swizzle_scale_bytes, unpack_codes, unswizzle_scale_bytes
from .quantize import GroupObjectives, Options, QuantizedWeight, Quantizer, quantize
from .search import candidate_errors, first_minimum, priority_order, reported_delta
from .window import window_bytes, window_deltas
from .zero_groups import ZERO_GROUP_BYTE, is_zero_group, zero_group_codes

__all__ = [
    "DEFAULT_D", "DEFAULT_K", "DEFAULT_SCALE_CEILING", "DEFAULT_U", "E4M3_MAX",
    "FIRST_NORMAL_BYTE", "LADDER_FIRST_BYTE", "LADDER_LAST_BYTE", "E2M1_MAGNITUDES", "E2M1_MIDPOINTS", "E2M1_VALUES", "E4M3_VALUES",
    "FOUR_OVER_SIX_SCALE_CEILING", "GROUP_SIZE", "LADDER", "Options", "QuantizedActivations",
    "GroupObjectives", "QuantizedWeight", "dequantize_activations", "fake_quantize_activations",
    "quantize_activations",
    "Quantizer", "SCALE_BYTE_VALUES", "ZERO_GROUP_BYTE", "block_error", "candidate_errors",
    "compute_global_scale", "decode_e2m1", "decode_e4m3", "dequantize", "diagonal_blocks", "effective_scale",
    "encode_e2m1", "encode_e4m3", "first_minimum", "four_over_six_choice", "gptq_quantize",
    "is_zero_group", "maxabs_byte", "pack_codes", "pairwise_sum", "priority_order", "quantize",
    "range_fitting_byte", "reported_delta", "swizzle_scale_bytes", "unpack_codes",
    "unswizzle_scale_bytes", "weighted_error", "window_bytes", "window_deltas",
    "zero_group_codes",
]
