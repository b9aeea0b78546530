"""The tile kind (docs/spec.md section 13): one scale per 16 x 16 tile, judged bit for bit
(NVFP4-2D-1), and the kernel's result for W^T against its result for W transposed
(NVFP4-2D-2)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hscale.judge.tiles import TileCase


def _weights(shape, seed, spread=2.0, dtype=ml_dtypes.bfloat16):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape) * np.exp(spread * rng.standard_normal((shape[0], 1)))
    return w.astype(np.float32).astype(dtype)


@pytest.mark.clause("NVFP4-2D-1")
@pytest.mark.parametrize("shape", [(16, 16), (32, 64), (64, 32), (48, 48)])
def test_tiles_of_rows_with_different_magnitudes(tile_checker, shape):
    tile_checker.check(TileCase(_weights(shape, 1), title=f"rows of mixed magnitude {shape}"))


@pytest.mark.clause("NVFP4-2D-1")
def test_one_large_element_sets_its_whole_tile(tile_checker):
    w = np.full((32, 32), 0.25, np.float32)
    w[5, 3], w[20, 30] = 96.0, -7.0
    tile_checker.check(TileCase(w.astype(ml_dtypes.bfloat16), title="one outlier per tile"))


@pytest.mark.clause("NVFP4-2D-2")
@pytest.mark.parametrize("shape", [(16, 48), (48, 48), (64, 32)])
def test_the_transpose_is_quantized_as_the_transposed_result(tile_checker, shape):
    tile_checker.check_transpose(TileCase(_weights(shape, 2), title=f"transpose {shape}"))


@pytest.mark.clause("NVFP4-2D-1", "NVFP4-2D-2")
@given(data=st.data())
def test_generated_weights(tile_checker, data):
    m, n = 16 * data.draw(st.integers(1, 4)), 16 * data.draw(st.integers(1, 4))
    case = TileCase(_weights((m, n), data.draw(st.integers(0, 2 ** 32 - 1)),
                             data.draw(st.sampled_from([0.0, 1.0, 3.0]))), title="generated")
    tile_checker.check(case)
    tile_checker.check_transpose(case)


@pytest.mark.clause("NVFP4-2D-1")
def test_signed_zeros_keep_their_sign(tile_checker):
    """-0.0 and negatives that round to 0 give the code 0x8 (NVFP4-ACT-8's rule, at the
    tile's byte)."""
    w = np.full((16, 32), 3.0, np.float32)
    w[0, :8] = -0.0
    w[1, :8] = -1e-4
    tile_checker.check(TileCase(w.astype(ml_dtypes.bfloat16), title="signed zeros"))
