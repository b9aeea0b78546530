"""The field's recipes for quantizing activations at run time (spec clauses NVFP4-ACT-2, -3,
-5 .. -8, docs/spec.md section 8).

A run-time kernel quantizes each group of 16 consecutive input features of one token with the
global scale it is given. Three recipes are in use, and they differ in bits:

- ``fast-math`` (NVFP4-ACT-2, -3): vLLM, SGLang, FlashInfer and TensorRT-LLM by default,
  ``rcp.approx`` reciprocals and products in one association; read here with correctly rounded
  reciprocals, one of the results the recipe admits (NVFP4-ACT-5 says which others);
- ``exact`` (NVFP4-ACT-6): TransformerEngine's kernel and reference, FlashInfer / TensorRT-LLM
  with ``*_DISABLE_FP4_QUANT_FAST_MATH=1``: another association and IEEE divisions;
- ``torchao`` (NVFP4-ACT-7): torchao's ``NVFP4Tensor``, given the dequantization multiplier,
  block scales clamped to ``[2^-6, 448]``.

Every function takes the activations as float32 (exact from float16 and bfloat16) and works
in IEEE fp32 arithmetic, one rounding (to nearest, ties to even) per operation, in the order
the clause writes; numpy's float32 operations are exactly that.
"""

from __future__ import annotations

import numpy as np

from .constants import E4M3_MAX, GROUP_SIZE
from .e2m1 import MAX_MAGNITUDE, encode_e2m1
from .e4m3 import SMALLEST_NORMAL, decode_e4m3, encode_e4m3

ONE = np.float32(1)
SIX = np.float32(MAX_MAGNITUDE)
#: The largest finite fp32 value (TransformerEngine's bound on an encode factor).
FP32_MAX = np.float32(np.finfo(np.float32).max)


def group_maxima(x32: np.ndarray) -> np.ndarray:
    """``amax_g = max_j |x_j|`` of each group (tokens, n/16): exact, a maximum of fp32 values."""
    tokens, n = x32.shape
    return np.abs(x32).reshape(tokens, n // GROUP_SIZE, GROUP_SIZE).max(axis=2)


def e4m3_satfinite(block_scale: np.ndarray) -> np.ndarray:
    """NVFP4-E4M3-2 of an fp32 block scale: round to nearest even, anything above 448 (an fp32
    infinity included) is 0x7E (NVFP4-ACT-8: saturation, never the NaN byte 0x7F)."""
    return encode_e4m3(np.minimum(np.asarray(block_scale, np.float64), 2 * E4M3_MAX))


def e2m1_satfinite(products: np.ndarray) -> np.ndarray:
    """``cvt.rn.satfinite`` to E2M1 of fp32 products: NVFP4-E2M1-2's rounding of ``|p|`` at
    scale 1 (ties to even, saturating at 6, infinities included) and the sign bit of ``p``
    (NVFP4-ACT-8: ``-0.0`` and a negative that rounds to 0 give 0x8)."""
    return encode_e2m1(np.asarray(products, np.float64), 1.0)


def per_element(group_values: np.ndarray) -> np.ndarray:
    """A value per group (tokens, n/16) repeated over the group's 16 elements."""
    return np.repeat(group_values, GROUP_SIZE, axis=1)


# -- fast-math (NVFP4-ACT-2, -3) ----------------------------------------------------------------

def fast_math_scale_bytes(amax: np.ndarray, g: np.float32) -> np.ndarray:
    """NVFP4-ACT-2: ``E4M3_RNE_satfinite(fp32(g * fp32(amax_g * rcp(6))))``."""
    per_unit = amax * (ONE / SIX)  # NVFP4-ACT-2: rcp(6), then an fp32 product
    with np.errstate(over="ignore"):
        return e4m3_satfinite(g * per_unit)  # NVFP4-ACT-2: fp32 product; NVFP4-ACT-8


def fast_math_products(x32: np.ndarray, scale_bytes: np.ndarray, g: np.float32) -> np.ndarray:
    """NVFP4-ACT-3: ``o = fp32(rcp(fp32(e4m3(c) * rcp(g))))`` (0 where ``c = 0x00``), the
    products ``fp32(x * o)`` the element conversion rounds."""
    byte_values = decode_e4m3(scale_bytes).astype(np.float32)  # exact: E4M3 values are fp32
    denominator = byte_values * (ONE / g)  # NVFP4-ACT-3: fp32 product
    live = scale_bytes != 0
    o = np.zeros_like(denominator)
    o[live] = ONE / denominator[live]  # NVFP4-ACT-3: rcp
    return x32 * per_element(o)  # NVFP4-ACT-3: fp32 product


def fast_math_codes(x32: np.ndarray, scale_bytes: np.ndarray, g: np.float32) -> np.ndarray:
    """NVFP4-ACT-3: codes ``cvt.rn.satfinite`` of the products."""
    return e2m1_satfinite(fast_math_products(x32, scale_bytes, g))


# -- exact (NVFP4-ACT-6) ------------------------------------------------------------------------

def exact_scale_bytes(amax: np.ndarray, g: np.float32) -> np.ndarray:
    """NVFP4-ACT-6: ``SF = fp32(amax_g * fp32(g * fp32(1/6)))``, clamped to 448, to E4M3."""
    multiplier = g * (ONE / SIX)  # NVFP4-ACT-6: fp32(1/6), then fp32(g * 1/6)
    with np.errstate(over="ignore"):
        return e4m3_satfinite(amax * multiplier)  # NVFP4-ACT-6: fp32 product, clamp, RN


def exact_products(x32: np.ndarray, scale_bytes: np.ndarray, g: np.float32) -> np.ndarray:
    """NVFP4-ACT-6: ``o = min(fp32(1 / fp32(e4m3(c) * fp32(1/g))), FLT_MAX)`` (``FLT_MAX`` for
    ``c = 0x00``), the products ``fp32(x * o)`` the element conversion rounds."""
    byte_values = decode_e4m3(scale_bytes).astype(np.float32)
    decode = ONE / g  # NVFP4-ACT-6: the global decode scale fp32(1/g)
    with np.errstate(divide="ignore", over="ignore"):
        o = np.minimum(ONE / (byte_values * decode), FP32_MAX)  # NVFP4-ACT-6: 1/0 = inf -> max
        return x32 * per_element(o)  # NVFP4-ACT-6: fp32 product


def exact_codes(x32: np.ndarray, scale_bytes: np.ndarray, g: np.float32) -> np.ndarray:
    """NVFP4-ACT-6: codes the RNE, saturating at 6, of the products."""
    return e2m1_satfinite(exact_products(x32, scale_bytes, g))


# -- torchao (NVFP4-ACT-7) ----------------------------------------------------------------------

def torchao_scale_bytes(amax: np.ndarray, a: np.float32) -> np.ndarray:
    """NVFP4-ACT-7: ``fp32(fp32(amax_g / 6) / a)`` clamped to ``[2^-6, 448]``, to E4M3: no
    subnormal byte, and a zero group gets 0x08."""
    block_scale = amax / SIX  # NVFP4-ACT-7: an fp32 division
    with np.errstate(over="ignore"):
        scaled = block_scale / a  # NVFP4-ACT-7: an fp32 division by the multiplier
    return e4m3_satfinite(np.clip(scaled, np.float32(SMALLEST_NORMAL), np.float32(E4M3_MAX)))


def torchao_products(x32: np.ndarray, scale_bytes: np.ndarray, a: np.float32) -> np.ndarray:
    """NVFP4-ACT-7: ``r = fp32(fp32(1 / a) / e4m3(c))``, the products ``fp32(x * r)`` the
    element conversion rounds."""
    byte_values = decode_e4m3(scale_bytes).astype(np.float32)  # never 0: bytes >= 0x08
    with np.errstate(over="ignore"):
        r = (ONE / a) / byte_values  # NVFP4-ACT-7: two fp32 divisions
        return x32 * per_element(r)  # NVFP4-ACT-7: fp32 product


def torchao_codes(x32: np.ndarray, scale_bytes: np.ndarray, a: np.float32) -> np.ndarray:
    """NVFP4-ACT-7: codes the RNE, saturating at 6, of the products."""
    with np.errstate(over="ignore"):
        return e2m1_satfinite(torchao_products(x32, scale_bytes, a))
