"""Dequantization (spec clause NVFP4-DEQ-1): what a stored NVFP4 tensor means."""

from __future__ import annotations

import numpy as np

from .e2m1 import E2M1_VALUES
from .e4m3 import decode_e4m3
from .constants import GROUP_SIZE


def effective_scale(scale_bytes, global_scale) -> np.ndarray:
    """``s = s_g * e4m3(scale_byte)`` of each group, exact in float64 (24 x 4 significant bits;
    NVFP4-DEQ-1)."""
    return float(global_scale) * decode_e4m3(scale_bytes)  # NVFP4-DEQ-1: exact


def dequantize(codes: np.ndarray, scale_bytes: np.ndarray, global_scale) -> np.ndarray:
    """float32 (m, n): ``fp32_rne(code_value * e4m3(scale_byte) * s_g)`` (NVFP4-DEQ-1).

    The product is exact in float64 (2 + 4 + 24 significant bits); one rounding to fp32.
    """
    code_value = E2M1_VALUES[np.asarray(codes).astype(np.intp)]
    element_scale = np.repeat(effective_scale(scale_bytes, global_scale), GROUP_SIZE, axis=-1)
    return (code_value * element_scale).astype(np.float32)  # NVFP4-DEQ-1: one rounding
