"""The GPTQ-like pipeline with H-Scale as its local selector (HSCALE-GPTQ-1)."""

import numpy as np
import pytest

from hscale.reference import gptq_quantize, quantize


def _layer(seed=0, rows=32, cols=64, tokens=512):
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((cols, cols)) * 0.3 + np.eye(cols)
    X = rng.standard_normal((tokens, cols)) @ mixing * rng.uniform(0.2, 3.0, cols)
    W = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    return W, X, X.T @ X


def _output_error(X, W, result):
    return float(np.sum((X @ (W.astype(np.float64) - result.dequantize()).T) ** 2))


@pytest.mark.clause("HSCALE-GPTQ-1")
@pytest.mark.parametrize("method", ["rtn", "scale-only", "hscale"])
def test_diagonal_hessian_moves_no_error_and_equals_plain_quantization(method):
    W, X, H = _layer(1)
    diagonal = np.diag(np.diag(H))
    got = gptq_quantize(W, diagonal, method=method)
    want = quantize(W, np.diag(H), method=method)
    np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_array_equal(got.scale_bytes, want.scale_bytes)
    np.testing.assert_array_equal(got.delta, want.delta)
    assert got.global_scale == want.global_scale


@pytest.mark.clause("HSCALE-GPTQ-1")
def test_gptq_lowers_the_layer_output_error_and_hscale_helps_it():
    W, X, H = _layer(2)
    rtn = _output_error(X, W, quantize(W, method="rtn"))
    gptq_rtn = _output_error(X, W, gptq_quantize(W, H, method="rtn"))
    gptq_hscale = _output_error(X, W, gptq_quantize(W, H, method="hscale"))
    assert gptq_rtn < 0.9 * rtn
    assert gptq_hscale < gptq_rtn


@pytest.mark.clause("HSCALE-GPTQ-1")
def test_gptq_rejects_a_bad_hessian():
    W, X, H = _layer(3, rows=4, cols=32)
    with pytest.raises(ValueError, match=r"hessian: shape \(16, 16\), expected \(32, 32\)"):
        gptq_quantize(W, H[:16, :16])
    asymmetric = H.copy()
    asymmetric[0, 5] += 1
    with pytest.raises(ValueError, match=r"hessian\[0, 5\] != hessian\[5, 0\].*HSCALE-GPTQ-1"):
        gptq_quantize(W, asymmetric)
    negative = H.copy()
    negative[7, 7] = -1
    with pytest.raises(ValueError, match=r"hessian_diag\[7\].*non-negative"):
        gptq_quantize(W, negative)


@pytest.mark.clause("HSCALE-GPTQ-1", "NVFP4-ZERO-1")
def test_dead_channels_and_zero_groups():
    W, X, H = _layer(4, rows=8, cols=32)
    W[0, :] = 0  # a zero row quantizes without error, so nothing is pushed along it
    W[1, 16:] = -0.0  # a zero group that the errors of columns 0..15 do reach
    H[3, :] = H[:, 3] = 0  # channel 3 never fires
    result = gptq_quantize(W, H)
    assert (result.scale_bytes[0] == 0).all() and (result.codes[0] == 0).all()
    assert result.scale_bytes[1, 1] != 0  # the pushed error made the group non-zero
    assert np.isfinite(result.dequantize()).all()


def _agreement(a, b):
    return float(np.mean(a.codes == b.codes)), float(np.mean(a.scale_bytes == b.scale_bytes))


@pytest.mark.clause("HSCALE-GPTQ-1")
@pytest.mark.parametrize("act_order", [False, True])
def test_lazy_blocks_are_the_column_by_column_sweep(act_order):
    """block_size=1 is GPTQ's sweep as written (every error applied to every later column at
    once); larger blocks defer the updates beyond the block and, under act-order, bring a
    group's outside columns up to date before its byte is chosen. Only the order of
    floating-point additions differs, so the results agree but for near-ties."""
    W, X, H = _layer(5, rows=24, cols=96)
    one = gptq_quantize(W, H, block_size=1, act_order=act_order)
    for block in (7, 16, 40, 96, 1000):
        other = gptq_quantize(W, H, block_size=block, act_order=act_order)
        codes, bytes_ = _agreement(one, other)
        assert codes > 0.999 and bytes_ > 0.99, (block, codes, bytes_)
        assert abs(_output_error(X, W, other) / _output_error(X, W, one) - 1) < 1e-3


@pytest.mark.clause("HSCALE-GPTQ-1")
def test_act_order_and_static_groups():
    W, X, H = _layer(6, rows=32, cols=64)
    rtn = _output_error(X, W, quantize(W, method="rtn"))
    for static in (False, True):
        result = gptq_quantize(W, H, method="hscale", act_order=True, static_groups=static)
        assert _output_error(X, W, result) < 0.9 * rtn
    # static groups: every byte chosen from the original weights, before any error moves
    static = gptq_quantize(W, H, method="hscale", act_order=True, static_groups=True)
    plain = quantize(W, np.diag(H), method="hscale")
    np.testing.assert_array_equal(static.scale_bytes, plain.scale_bytes)
    # with a diagonal H no error moves: any order, static or not, is plain quantization
    diagonal = np.diag(np.diag(H))
    for static_groups in (False, True):
        got = gptq_quantize(W, diagonal, act_order=True, static_groups=static_groups)
        np.testing.assert_array_equal(got.codes, plain.codes)
        np.testing.assert_array_equal(got.scale_bytes, plain.scale_bytes)


def test_gptq_builds_the_window_table_once():
    """The window table depends on K and U only, the same for every group column: GPTQ built it
    once per group column (cols / 16 times)."""
    from hscale.reference import Quantizer

    class Counting(Quantizer):
        tables = 0

        def window_table(self, K, U):
            Counting.tables += 1
            return super().window_table(K, U)

    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 128)).astype(np.float32)
    X = rng.standard_normal((64, 128))
    H = X.T @ X
    plain = gptq_quantize(w, H, method="hscale")
    counted = gptq_quantize(w, H, method="hscale", group_quantizer=Counting())
    assert Counting.tables == 1
    assert np.array_equal(plain.codes, counted.codes)
    assert np.array_equal(plain.scale_bytes, counted.scale_bytes)
