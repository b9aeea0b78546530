"""Run-time activation quantization (spec clauses NVFP4-ACT-1 .. NVFP4-ACT-11, docs/spec.md
section 8): the activation kind.

What an inference engine does to a Linear's input on every forward pass of a W4A4 checkpoint:
each group of 16 consecutive input features of one token gets an E4M3 scale byte and 16 E2M1
codes, computed in fp32 with the global scale ``g`` (the quantization multiplier,
NVFP4-ACT-1) by one of the field's recipes (``activation_recipes``). This module checks the
inputs (NVFP4-ACT-1, -9, -11), derives a dynamic global scale (NVFP4-ACT-1), dispatches to the
recipe, and decodes the result (NVFP4-ACT-4). The layouts an engine hands the scale bytes to
its GEMM in are ``packing``'s (NVFP4-ACT-10).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from . import activation_recipes as recipes
from .activation_recipes import group_maxima
from .constants import E4M3_MAX, FP32_LARGEST_RECIPROCAL_NORMAL, FP32_SMALLEST_NORMAL, GROUP_SIZE
from .dequantize import dequantize
from .e2m1 import MAX_MAGNITUDE

#: The field's recipes, by name (NVFP4-ACT-5): the one a kernel follows is what it declares,
#: and what it is certified under.
ACTIVATION_RECIPES = ("fast-math", "exact", "torchao")
#: How a kernel gets its global scale (NVFP4-ACT-1): given (a calibrated, static scale, as a
#: W4A4 checkpoint stores it) or computed from the tensor at run time.
GLOBAL_SCALE_MODES = ("static", "dynamic")
#: The activation dtypes an engine feeds the kernel (bfloat16, float16) and float32
#: (NVFP4-ACT-11).
ACTIVATION_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
#: 6 * 448: the quotient of NVFP4-ACT-1's dynamic global scale (exact in fp32).
RANGE = np.float32(MAX_MAGNITUDE * E4M3_MAX)


@dataclass(frozen=True)
class QuantizedActivations:
    """One activation tensor as a kernel quantizes it: ``codes`` uint8 (tokens, n), one E2M1
    code per element; ``scale_bytes`` uint8 (tokens, n/16); ``global_scale`` the ``g`` it was
    quantized with and ``multiplier`` the dequantization multiplier ``a`` (NVFP4-ACT-1);
    ``recipe`` the recipe's name (NVFP4-ACT-5)."""

    codes: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32
    multiplier: np.float32
    recipe: str = "fast-math"

    def dequantize(self, multiplier=None) -> np.ndarray:
        """The emulated activation (NVFP4-ACT-4), with the activation multiplier ``a`` (default
        this result's own)."""
        return dequantize_activations(self.codes, self.scale_bytes,
                                      self.multiplier if multiplier is None else multiplier)


def reciprocal(value) -> np.float32:
    """``fp32(1 / v)``, correctly rounded: how the fast-math recipe's ``rcp`` is read here
    (NVFP4-ACT-2, -3), and the exact recipe's division (NVFP4-ACT-6)."""
    return np.float32(1) / np.float32(value)  # one IEEE fp32 division: RNE


def check_activation_global_scale(global_scale, name: str = "global_scale") -> np.float32:
    """A positive normal fp32 whose reciprocal is normal too (NVFP4-ACT-1)."""
    try:
        value = float(global_scale)
    except (TypeError, ValueError):
        raise ValueError(f"{name} {global_scale!r}: a real number (spec NVFP4-ACT-1)") from None
    g = np.float32(value)
    if not (np.isfinite(g) and float(g) == value
            and FP32_SMALLEST_NORMAL <= value <= FP32_LARGEST_RECIPROCAL_NORMAL):
        raise ValueError(f"{name} {global_scale!r}: the activation global scale is a positive "
                         "normal fp32 whose reciprocal is a normal fp32 (spec NVFP4-ACT-1)")
    return g


def check_activations(x) -> np.ndarray:
    """A 2-D numpy array (tokens, n) of float32, float16 or bfloat16, n a non-zero multiple of
    16 (NVFP4-ACT-11), every element finite (NVFP4-ACT-9); returned as float32 (exact)."""
    if not isinstance(x, np.ndarray) or type(x) is not np.ndarray and not isinstance(x, np.memmap):
        raise ValueError(f"activations: a numpy array, not {type(x).__name__} (spec NVFP4-ACT-11)")
    if x.dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"activations: dtype {x.dtype}, not float32, float16 or bfloat16 "
                         "(spec NVFP4-ACT-11)")
    if x.ndim != 2 or x.shape[1] % GROUP_SIZE or x.size == 0:
        raise ValueError(f"activations: shape {x.shape}, not (tokens, n) with n a non-zero "
                         f"multiple of {GROUP_SIZE} (spec NVFP4-ACT-11)")
    x32 = x.astype(np.float32)  # exact from every accepted dtype
    bad = np.argwhere(~np.isfinite(x32))
    if bad.size:
        r, j = (int(v) for v in bad[0])
        raise ValueError(f"activations[{r}, {j}] = {x32[r, j]}: not finite; the reference "
                         "quantizes finite activations only (spec NVFP4-ACT-9)")
    return x32


def dynamic_global_scale(x32: np.ndarray, recipe: str) -> tuple[np.float32, np.float32]:
    """``(g, a)`` computed from the tensor at run time (NVFP4-ACT-1): with ``amax_t = max |x|``,
    ``g = fp32(2688 / amax_t)`` (the fast-math and exact recipes) or ``a = fp32(amax_t / 2688)``
    (torchao, which is given the multiplier), the other the fp32 reciprocal; an all-zero tensor
    has ``g = a = 1``. A tensor so small that the scale would not be a normal fp32 with a normal
    reciprocal (``amax_t < 2688 * 2^-126``) is outside the dynamic mode's domain."""
    amax = np.float32(np.max(np.abs(x32)))  # exact
    if amax == 0:
        return np.float32(1), np.float32(1)
    if amax < RANGE * np.float32(FP32_SMALLEST_NORMAL):
        raise ValueError(f"activations: amax {float(amax)!r} < 2688 * 2^-126: a dynamic global "
                         "scale would not be a normal fp32 with a normal reciprocal (spec "
                         "NVFP4-ACT-1); give a static one")
    if recipe == "torchao":
        a = amax / RANGE  # NVFP4-ACT-1: the multiplier, an fp32 division
        return reciprocal(a), a
    g = RANGE / amax  # NVFP4-ACT-1: an fp32 division
    return g, reciprocal(g)


def quantize_activations(x, global_scale=None, *, recipe: str = "fast-math") -> QuantizedActivations:
    """Quantize activations ``x`` (tokens, n) as a run-time kernel of ``recipe`` does
    (NVFP4-ACT-1 .. -3, -5 .. -8), with the global scale ``g`` given (static) or, when
    ``global_scale`` is None, computed from ``x`` (dynamic)."""
    if recipe not in ACTIVATION_RECIPES:
        raise ValueError(f"recipe {recipe!r}: one of {', '.join(ACTIVATION_RECIPES)} (spec "
                         "NVFP4-ACT-5)")
    x32 = check_activations(x)
    if global_scale is None:
        g, a = dynamic_global_scale(x32, recipe)
    else:
        g = check_activation_global_scale(global_scale)
        a = reciprocal(g)  # the dequantization multiplier g means (NVFP4-ACT-1)
    amax = group_maxima(x32)
    if recipe == "fast-math":
        scale_bytes = recipes.fast_math_scale_bytes(amax, g)
        codes = recipes.fast_math_codes(x32, scale_bytes, g)
    elif recipe == "exact":
        scale_bytes = recipes.exact_scale_bytes(amax, g)
        codes = recipes.exact_codes(x32, scale_bytes, g)
    else:
        scale_bytes = recipes.torchao_scale_bytes(amax, a)
        codes = recipes.torchao_codes(x32, scale_bytes, a)
    return QuantizedActivations(codes, scale_bytes, g, a, recipe)


def dequantize_activations(codes, scale_bytes, multiplier) -> np.ndarray:
    """float32 ``fp32(q * e4m3(c) * a)``: the activation the W4A4 matmul sees (NVFP4-ACT-4,
    NVFP4-DEQ-1's rule with the activation multiplier ``a``)."""
    return dequantize(codes, scale_bytes, multiplier)  # NVFP4-ACT-4


def fake_quantize_activations(x, global_scale, multiplier=None, *,
                              recipe: str = "fast-math") -> np.ndarray:
    """``x`` quantized and dequantized (NVFP4-ACT-1 .. -4): what a W4A4 Linear multiplies by its
    weights, for emulating a W4A4 checkpoint on the CPU."""
    return quantize_activations(x, global_scale, recipe=recipe).dequantize(multiplier)
