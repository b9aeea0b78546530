"""A weight quantizer with one scale per 16 x 16 tile (docs/spec.md section 13), written from
the docs without the kit, with every fault of the mutation harness as a switch:
``TileKernel(name, fault, grade)``: the exact recipe (NVFP4-ACT-6, the vendor arithmetic of
tests/helpers/activation_kernels.py) at each tile's amax, the global scale from W's amax. Faults
graded by the rows of a tile the amax reads (the first ``grade`` rows) or the tiles they reach
(1 in ``grade``). ``fault=None``: the recipe itself, which conforms.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from activation_kernels import E4M3_TOP, FP32_MAX, ONE, SIX, e2m1_codes, e4m3_bytes, e4m3_values

from .stochastic import chosen


class TileKernel:
    version = "mutant-tile 1.0"
    kinds = frozenset({"tile"})

    def __init__(self, name="mutant-tile", fault=None, grade=1):
        self.name, self.fault, self.grade = name, fault, grade

    def available(self):
        return True, ""

    def quantize_2d(self, w, global_scale=None):
        x = np.asarray(w).astype(np.float32)
        m, n = x.shape
        amax_w = np.abs(x).max()
        g = ONE if amax_w == 0 else np.float32(448 * 6) / amax_w
        tiles = np.abs(x).reshape(m // 16, 16, n // 16, 16)
        tile_amax = tiles.max(axis=(1, 3))
        if self.fault == "first-rows":  # the amax over the tile's first k rows
            tile_amax = tiles[:, :self.grade].max(axis=(1, 3))
        elif self.fault == "transposed-tile" and tile_amax.shape[0] == tile_amax.shape[1]:
            tile_amax = tile_amax.T  # tile (b, a)'s amax for tile (a, b)
        elif self.fault == "neighbour-tile":  # 1 in k tiles take their right neighbour's amax
            shifted = np.roll(tile_amax, -1, axis=1)
            tile_amax = np.where(chosen(tile_amax.shape, self.grade), shifted, tile_amax)
        amax = np.repeat(tile_amax, 16, axis=0)
        if self.fault == "per-group":  # 1D scaling on 1 in k tile rows: each 1 x 16 group's own
            own = np.abs(x).reshape(m, n // 16, 16).max(axis=2)
            rows = np.repeat(chosen((m // 16, 1), self.grade), 16, axis=0)
            amax = np.where(rows, own, amax)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            sf = amax * (g * (ONE / SIX))
            scale_bytes = e4m3_bytes(np.minimum(sf, E4M3_TOP))
            if self.fault == "byte-truncated":  # the byte rounded toward zero
                scale_bytes = np.where(e4m3_values(scale_bytes) > sf, scale_bytes - 1,
                                       scale_bytes).astype(np.uint8)
            o = np.minimum(ONE / (e4m3_values(scale_bytes) * (ONE / g)), FP32_MAX)
            products = x.reshape(m, n // 16, 16) * o[:, :, None]
        codes = e2m1_codes(products.reshape(m, n), keep_sign=self.fault != "zero-sign-lost")
        return SimpleNamespace(codes=codes, scale_bytes=scale_bytes, global_scale=g)
