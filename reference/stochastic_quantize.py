"""Quantizing a tensor with stochastic rounding: where the random bits enter (spec clause
NVFP4-SR-1, docs/spec.md section 11).

The bits touch the element rounding only. A kernel that scales (``scaling`` one of the
activation recipes, NVFP4-ACT-5) computes its E4M3 block scales and the fp32 products
``x * o`` exactly as that recipe does with round to nearest, and rounds each product
stochastically (NVFP4-SR-2, -3) with the byte NVFP4-SR-4 routes to it; the global scale is the
one it is given. A kernel that does not scale (``none``: the element conversion itself, what
``cvt.rs.satfinite.e2m1x4.f32`` is) rounds its fp32 inputs as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import activation_recipes as recipes
from .activations import (ACTIVATION_RECIPES, check_activation_global_scale,
                          check_activations, reciprocal)
from .constants import GROUP_SIZE
from .random_bits import PER_WORD, ROUTINGS, element_bytes
from .stochastic_rounding import round_stochastic_array

#: What a stochastic kernel rounds: its inputs as they are, or a recipe's products.
SCALINGS = ("none",) + ACTIVATION_RECIPES


@dataclass(frozen=True)
class StochasticResult:
    """``codes`` uint8 (rows, n); ``scale_bytes`` uint8 (rows, n/16), None for ``none``;
    ``global_scale`` the g it was given (None for ``none``)."""

    codes: np.ndarray
    scale_bytes: np.ndarray | None
    global_scale: np.float32 | None
    scaling: str
    routing: str


def check_random_words(random_bits, shape) -> np.ndarray:
    """One uint32 word per 4 elements of each row (NVFP4-SR-4)."""
    words = np.asarray(random_bits)
    rows, n = shape
    if words.dtype != np.uint32 or words.shape != (rows, n // PER_WORD):
        raise ValueError(f"random_bits: uint32 of shape {(rows, n // PER_WORD)}, one word per "
                         f"{PER_WORD} elements of a row, not {words.dtype} {words.shape} (spec "
                         "NVFP4-SR-4)")
    return words


def check_values(x) -> np.ndarray:
    """The element conversion's inputs: a 2-D float32 array, n a multiple of 4 (any value:
    NaN and infinities are its specials, NVFP4-SR-3)."""
    x = np.asarray(x)
    if x.dtype != np.float32 or x.ndim != 2 or x.shape[1] % PER_WORD or x.size == 0:
        raise ValueError(f"values: float32 (rows, n), n a non-zero multiple of {PER_WORD}, not "
                         f"{x.dtype} {x.shape} (spec NVFP4-SR-1)")
    return x


def scaled_products(x, global_scale, scaling: str):
    """NVFP4-SR-1: ``(scale bytes or None, the fp32 values the element rounding sees)``."""
    if scaling == "none":
        return None, check_values(x)
    x32 = check_activations(x)
    g = check_activation_global_scale(global_scale)
    amax = recipes.group_maxima(x32)
    if scaling == "fast-math":
        scale_bytes = recipes.fast_math_scale_bytes(amax, g)
        return scale_bytes, recipes.fast_math_products(x32, scale_bytes, g)
    if scaling == "exact":
        scale_bytes = recipes.exact_scale_bytes(amax, g)
        return scale_bytes, recipes.exact_products(x32, scale_bytes, g)
    a = reciprocal(g)
    scale_bytes = recipes.torchao_scale_bytes(amax, a)
    return scale_bytes, recipes.torchao_products(x32, scale_bytes, a)


def quantize_stochastic(x, global_scale, random_bits, *, scaling: str = "none",
                        routing: str = "straight") -> StochasticResult:
    """``x`` (rows, n) quantized with stochastic rounding: the block scales and products of
    ``scaling`` (NVFP4-SR-1), each product rounded with its byte of ``random_bits`` under
    ``routing`` (NVFP4-SR-2 .. -4)."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling {scaling!r}: one of {', '.join(SCALINGS)} (spec NVFP4-SR-1)")
    if routing not in ROUTINGS:
        raise ValueError(f"routing {routing!r}: one of {', '.join(ROUTINGS)} (spec NVFP4-SR-4)")
    shape = np.shape(x)
    if scaling != "none" and (len(shape) != 2 or shape[1] % GROUP_SIZE):
        raise ValueError(f"x: shape {shape}, not (rows, n) with n a multiple of {GROUP_SIZE} "
                         "(spec NVFP4-ACT-11)")
    scale_bytes, products = scaled_products(x, global_scale, scaling)
    words = check_random_words(random_bits, products.shape)
    codes = round_stochastic_array(products, element_bytes(words, routing))
    g = None if scaling == "none" else np.float32(global_scale)
    return StochasticResult(codes, scale_bytes, g, scaling, routing)
