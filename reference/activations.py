"""Run-time activation quantization, the engines' W4A4 profile (spec clauses NVFP4-ACT-1 ..
NVFP4-ACT-4, docs/spec.md section 8).

What vLLM, TensorRT-LLM and FlashInfer do to a Linear's input on every forward pass of a W4A4
checkpoint, step by step in fp32, so that the activations a GPU would feed its FP4 matmul can
be emulated on the CPU. The kernels' ``rcp.approx.ftz.f32`` is read as the correctly rounded
``fp32(1 / v)`` (the spec says where a GPU may differ).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .constants import (E4M3_MAX, FP32_LARGEST_RECIPROCAL_NORMAL, FP32_SMALLEST_NORMAL,
                        GROUP_SIZE)
from .dequantize import dequantize
from .e2m1 import MAX_MAGNITUDE, encode_e2m1
from .e4m3 import decode_e4m3, encode_e4m3

#: The field's recipes for quantizing activations at run time, by name (docs/spec.md section 8):
#: the one a kernel follows is what it declares, and what it is certified under.
ACTIVATION_RECIPES = ("fast-math", "exact", "torchao")
#: The activation dtypes an engine feeds the kernel (bfloat16, float16) and float32.
ACTIVATION_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


@dataclass(frozen=True)
class QuantizedActivations:
    """One activation tensor as the kernel quantizes it: ``codes`` uint8 (tokens, n), one E2M1
    code per element; ``scale_bytes`` uint8 (tokens, n/16); ``global_scale`` the ``g`` it was
    quantized with (NVFP4-ACT-1)."""

    codes: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32

    def dequantize(self, multiplier=None) -> np.ndarray:
        """The emulated activation (NVFP4-ACT-4), with the activation multiplier ``a``
        (default ``fp32(1 / g)``, as a compressed-tensors checkpoint means it)."""
        if multiplier is None:
            multiplier = reciprocal(self.global_scale)
        return dequantize_activations(self.codes, self.scale_bytes, multiplier)


def reciprocal(value) -> np.float32:
    """``rcp(v)`` as this profile reads the kernels' ``rcp.approx.ftz.f32``: ``fp32(1 / v)``,
    correctly rounded (NVFP4-ACT-2, -3)."""
    return np.float32(1) / np.float32(value)  # one IEEE fp32 division: RNE


def check_activation_global_scale(global_scale) -> np.float32:
    """``g``: a positive normal fp32 whose reciprocal is normal too (NVFP4-ACT-1)."""
    try:
        value = float(global_scale)
    except (TypeError, ValueError):
        raise ValueError(f"global_scale {global_scale!r}: a real number (spec NVFP4-ACT-1)") \
            from None
    g = np.float32(value)
    if not (np.isfinite(g) and float(g) == value and FP32_SMALLEST_NORMAL <= value
            <= FP32_LARGEST_RECIPROCAL_NORMAL):
        raise ValueError(f"global_scale {global_scale!r}: the activation global scale g is a "
                         "positive normal fp32 whose reciprocal is a normal fp32 (spec "
                         "NVFP4-ACT-1)")
    return g


def check_activations(x) -> np.ndarray:
    """A 2-D numpy array (tokens, n) of float32, float16 or bfloat16, n a multiple of 16, every
    element finite; returned as float32 (exact)."""
    if not isinstance(x, np.ndarray) or type(x) is not np.ndarray and not isinstance(x, np.memmap):
        raise ValueError(f"activations: a numpy array, not {type(x).__name__} (spec NVFP4-ACT-2)")
    if x.dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"activations: dtype {x.dtype}, not float32, float16 or bfloat16 "
                         "(spec NVFP4-ACT-2)")
    if x.ndim != 2 or x.shape[1] % GROUP_SIZE or x.size == 0:
        raise ValueError(f"activations: shape {x.shape}, not (tokens, n) with n a non-zero "
                         f"multiple of {GROUP_SIZE} (spec NVFP4-ACT-2)")
    x32 = x.astype(np.float32)  # exact from every accepted dtype
    bad = np.argwhere(~np.isfinite(x32))
    if bad.size:
        r, j = (int(v) for v in bad[0])
        raise ValueError(f"activations[{r}, {j}] = {x32[r, j]}: not finite (spec NVFP4-ACT-2)")
    return x32


def activation_scale_bytes(x32: np.ndarray, g: np.float32) -> np.ndarray:
    """The E4M3 byte of each group (NVFP4-ACT-2): ``E4M3_RNE_satfinite(fp32(g * fp32(amax_g *
    rcp(6))))``."""
    tokens, n = x32.shape
    groups = np.abs(x32).reshape(tokens, n // GROUP_SIZE, GROUP_SIZE)
    amax = groups.max(axis=2)  # exact: a maximum of fp32 values
    per_unit = amax * reciprocal(MAX_MAGNITUDE)  # NVFP4-ACT-2: fp32 product, RNE
    block_scale = g * per_unit  # NVFP4-ACT-2: fp32 product, RNE
    # NVFP4-E4M3-2 on the fp32 value; satfinite: everything above 448 (an fp32 overflow to
    # infinity included) is 448, so a value past 2 * 448 decides nothing more.
    return encode_e4m3(np.minimum(block_scale.astype(np.float64), 2 * E4M3_MAX))


def output_scales(scale_bytes: np.ndarray, g: np.float32) -> np.ndarray:
    """``o = fp32(rcp(fp32(e4m3(c) * rcp(g))))`` per group, 0 where ``c = 0x00``
    (NVFP4-ACT-3)."""
    byte_values = decode_e4m3(scale_bytes).astype(np.float32)  # exact: E4M3 values are fp32
    denominator = byte_values * reciprocal(g)  # NVFP4-ACT-3: fp32 product, RNE
    scales = np.zeros_like(denominator)
    live = scale_bytes != 0
    scales[live] = np.float32(1) / denominator[live]  # NVFP4-ACT-3: rcp, read as RNE
    return scales


def activation_codes(x32: np.ndarray, scale_bytes: np.ndarray, g: np.float32) -> np.ndarray:
    """The E2M1 code of each element (NVFP4-ACT-3): RNE, saturating at 6, of the fp32 product
    ``x * o``, its sign kept."""
    per_element = np.repeat(output_scales(scale_bytes, g), GROUP_SIZE, axis=1)
    products = x32 * per_element  # NVFP4-ACT-3: fp32 product, RNE
    return encode_e2m1(products.astype(np.float64), 1.0)  # NVFP4-E2M1-2, -3 at scale 1


def quantize_activations(x, global_scale) -> QuantizedActivations:
    """Quantize activations ``x`` (tokens, n) as the engines do at run time with the
    activation global scale ``g`` (NVFP4-ACT-1 .. -3)."""
    g = check_activation_global_scale(global_scale)
    x32 = check_activations(x)
    scale_bytes = activation_scale_bytes(x32, g)
    return QuantizedActivations(activation_codes(x32, scale_bytes, g), scale_bytes, g)


def dequantize_activations(codes, scale_bytes, multiplier) -> np.ndarray:
    """float32 ``fp32(q * e4m3(c) * a)``: the activation the W4A4 matmul sees (NVFP4-ACT-4,
    NVFP4-DEQ-1's rule with the activation multiplier ``a``)."""
    return dequantize(codes, scale_bytes, multiplier)  # NVFP4-ACT-4


def fake_quantize_activations(x, global_scale, multiplier=None) -> np.ndarray:
    """``x`` quantized and dequantized (NVFP4-ACT-1 .. -4): what a W4A4 Linear multiplies by its
    weights, for emulating a W4A4 checkpoint on the CPU."""
    return quantize_activations(x, global_scale).dequantize(multiplier)
