"""The tile kind's judge (hscale.judge.tiles) on independent kernels (tests/helpers/
tile_kernels.py, importing nothing of the kit): the exact 16 x 16 tile kernel conforms, its
transpose is its result transposed; per-group scaling, a transposed tile and a tile amax of one
row are refused naming their clause."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.tiles import TileCase, diagnose_2d, observe_2d, transpose_findings

from helpers.tile_kernels import FAULTS, Tiles


def _w(shape=(48, 48), seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp(2 * rng.standard_normal((shape[0], 1)))) \
        .astype(np.float32).astype(ml_dtypes.bfloat16)


def _cited(kernel, w) -> tuple[set, set]:
    observed, _ = observe_2d(kernel.quantize_2d(w), w.shape)
    of_wt, _ = observe_2d(kernel.quantize_2d(np.ascontiguousarray(w.T)), w.T.shape)
    return ({f.clause for f in diagnose_2d(TileCase(w), observed).findings},
            {f.clause for f in transpose_findings(observed, of_wt)})


@pytest.mark.clause("NVFP4-2D-1", "NVFP4-2D-2")
@pytest.mark.parametrize("shape", [(16, 16), (48, 48), (32, 64)])
def test_the_tile_kernel_conforms_and_commutes_with_transposition(shape):
    assert _cited(Tiles(), _w(shape)) == (set(), set())


@pytest.mark.clause("NVFP4-2D-1", "NVFP4-2D-2")
@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_refused_naming_its_clause(fault):
    bitwise, transpose = _cited(Tiles(fault), _w())
    assert bitwise == {"NVFP4-2D-1"}, (fault, bitwise)
    if fault in ("per-group", "rows-only"):  # neither commutes with transposition
        assert transpose == {"NVFP4-2D-2"}, (fault, transpose)


@pytest.mark.clause("NVFP4-2D-1")
def test_a_tile_byte_worked_by_hand():
    """One tile of 0.25 with a single 96.0: amax 96, g = 2688 / 96 = 28; the scale 96 *
    fp32(28 * fp32(1/6)) is just above 448, clamped: byte 0x7E on all 16 rows; o = 1 / (448 /
    28) = 1/16, so 96 -> 6 (code 0x7) and 0.25 -> 0.015625 (code 0x0)."""
    w = np.full((16, 16), 0.25, np.float32)
    w[3, 5] = 96.0
    result = Tiles().quantize_2d(w)
    assert result.global_scale == np.float32(28.0)
    assert (result.scale_bytes == 0x7E).all()
    assert result.codes[3, 5] == 0x7 and (np.delete(result.codes.ravel(), 3 * 16 + 5) == 0).all()
    observed, _ = observe_2d(result, w.shape)
    assert diagnose_2d(TileCase(w), observed).ok
