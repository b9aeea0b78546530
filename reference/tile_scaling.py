"""2D block scaling: one amax and one E4M3 scale per 16 x 16 tile (spec clauses NVFP4-2D-1,
NVFP4-2D-2, docs/spec.md section 13).

TransformerEngine quantizes weights for training with 16 x 16 tiles so that the row-wise and
the column-wise copies (the forward and the backward GEMMs) share one set of scales: each
tile's amax gives its scale byte by the declared activation recipe (NVFP4-ACT-6 for
``exact``), every 1 x 16 group of the tile carries that byte (the layout a block-scaled GEMM
reads), and each element's code is that recipe's at its tile's byte. Quantizing ``W^T`` then
gives the transpose of quantizing ``W``, bit for bit (NVFP4-2D-2).
"""

from __future__ import annotations

import numpy as np

from . import activation_recipes as recipes
from .activations import QuantizedActivations, check_activations, dynamic_global_scale, reciprocal

TILE = 16
#: The recipe of the tile scales: TransformerEngine's (NVFP4-ACT-6).
TILE_RECIPES = ("exact",)


def tile_maxima(x32: np.ndarray) -> np.ndarray:
    """NVFP4-2D-1: ``max |x|`` over each 16 x 16 tile, repeated for each of its 16 rows: the
    amax of each 1 x 16 group's tile, (m, n/16)."""
    m, n = x32.shape
    tiles = np.abs(x32).reshape(m // TILE, TILE, n // TILE, TILE).max(axis=(1, 3))
    return np.repeat(tiles, TILE, axis=0)


def quantize_2d(x, global_scale=None, *, recipe: str = "exact") -> QuantizedActivations:
    """NVFP4-2D-1: ``x`` (m, n), both multiples of 16, quantized with one scale byte per tile
    (each tile's byte repeated over its 16 rows), the global scale given or, when None, from the
    tensor's amax (NVFP4-ACT-1)."""
    x32 = check_activations(x)
    m, n = x32.shape
    if m % TILE or n % TILE:
        raise ValueError(f"x: shape {x32.shape}, not multiples of {TILE} x {TILE} (spec "
                         "NVFP4-2D-1)")
    if recipe not in TILE_RECIPES:
        raise ValueError(f"recipe {recipe!r}: one of {', '.join(TILE_RECIPES)} (spec NVFP4-2D-1)")
    if global_scale is None:
        g, a = dynamic_global_scale(x32, recipe)
    else:
        g = np.float32(global_scale)
        a = reciprocal(g)
    amax = tile_maxima(x32)  # NVFP4-2D-1: the tile's, in place of the group's
    scale_bytes = recipes.exact_scale_bytes(amax, g)  # NVFP4-ACT-6 at the tile's amax
    codes = recipes.exact_codes(x32, scale_bytes, g)  # NVFP4-ACT-6 at the tile's byte
    return QuantizedActivations(codes, scale_bytes, g, a, recipe)


def transposed(result: QuantizedActivations) -> tuple[np.ndarray, np.ndarray]:
    """NVFP4-2D-2: the codes and the per-group scale bytes of the transposed tensor, read from
    ``result``: codes transposed, each tile's byte moved to the transposed tile."""
    m, n = result.codes.shape
    tiles = result.scale_bytes[::TILE]  # (m/16, n/16), one byte per tile
    return result.codes.T.copy(), np.repeat(tiles.T, TILE, axis=0)
