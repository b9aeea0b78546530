"""16 x 16 tile-scaling kernels written from docs/spec.md section 13 alone, with numpy and
ml_dtypes (through the independent exact-recipe helpers of activation_kernels), importing
nothing of hscale.

``Tiles(fault)``: the exact recipe at each tile's amax; faults: ``per-group`` (each 1 x 16
group's own amax: 1D scaling), ``transposed-tile`` (the amax of tile (b, a) used for tile
(a, b), square tile grids), ``rows-only`` (the amax over the tile's first row only)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .activation_kernels import E4M3_TOP, FP32_MAX, ONE, SIX, e2m1_codes, e4m3_bytes, e4m3_values

FAULTS = ("per-group", "transposed-tile", "rows-only")


class Tiles:
    version = "independent tile kernel 1"
    kinds = frozenset({"tile"})

    def __init__(self, fault: str | None = None):
        self.fault = fault
        self.name = "tiles" + (f"-{fault}" if fault else "")

    def available(self):
        return True, ""

    def quantize_2d(self, w, global_scale=None):
        x = np.asarray(w).astype(np.float32)
        m, n = x.shape
        amax_t = np.abs(x).max()
        g = ONE if amax_t == 0 else np.float32(448 * 6) / amax_t
        tiles = np.abs(x).reshape(m // 16, 16, n // 16, 16)
        if self.fault == "rows-only":
            tile_amax = tiles[:, 0].max(axis=2)
        else:
            tile_amax = tiles.max(axis=(1, 3))
        if self.fault == "transposed-tile" and tile_amax.shape[0] == tile_amax.shape[1]:
            tile_amax = tile_amax.T
        amax = np.repeat(tile_amax, 16, axis=0)
        if self.fault == "per-group":
            amax = np.abs(x).reshape(m, n // 16, 16).max(axis=2)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            scale_bytes = e4m3_bytes(np.minimum(amax * (g * (ONE / SIX)), E4M3_TOP))
            o = np.minimum(ONE / (e4m3_values(scale_bytes) * (ONE / g)), FP32_MAX)
            products = x.reshape(m, n // 16, 16) * o[:, :, None]
        codes = e2m1_codes(products.reshape(m, n))
        return SimpleNamespace(codes=codes, scale_bytes=scale_bytes, global_scale=g)


def tiles():
    return Tiles()


for _fault in FAULTS:
    globals()[_fault.replace("-", "_")] = (lambda f: (lambda: Tiles(f)))(_fault)
