"""Edge rules added after review: no dequantized value can overflow, bf16 h is accepted, a
missing h cites the input clause."""

import ml_dtypes
import numpy as np
import pytest

from hscale.reference import compute_global_scale, quantize


@pytest.mark.clause("NVFP4-GS-2")
def test_a_computed_global_scale_that_would_overflow_dequantization_is_rejected():
    fp32_max = float(np.finfo(np.float32).max)
    with pytest.raises(ValueError, match=r"overflows fp32.*NVFP4-GS-2"):
        compute_global_scale(fp32_max, 0.01)
    # At the default ceiling the largest weight maps onto 6 * 448 * s_g, which stays finite.
    s_g = compute_global_scale(fp32_max)
    assert np.isfinite(np.float32(2688.0 * float(s_g)))
    weight = np.full((1, 16), np.finfo(np.float32).max, dtype=np.float32)
    assert np.isfinite(quantize(weight, method="rtn").dequantize()).all()


@pytest.mark.clause("NVFP4-IN-4")
def test_a_supplied_global_scale_that_would_overflow_dequantization_is_rejected():
    weight = np.ones((1, 16), dtype=np.float32)
    with pytest.raises(ValueError, match=r"global_scale = .*overflows fp32.*NVFP4-IN-4"):
        quantize(weight, method="rtn", global_scale=np.float32(2.0 ** 118))
    largest_ok = np.float32(np.finfo(np.float32).max / 2688)
    assert np.isfinite(quantize(weight, method="rtn", global_scale=largest_ok).dequantize()).all()


@pytest.mark.clause("NVFP4-IN-2")
def test_bfloat16_h_is_accepted_and_a_missing_h_cites_the_input_clause():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 32)).astype(np.float32)
    h = rng.uniform(0, 4, 32).astype(ml_dtypes.bfloat16)
    got = quantize(weight, h)
    want = quantize(weight, h.astype(np.float64))
    np.testing.assert_array_equal(got.scale_bytes, want.scale_bytes)
    with pytest.raises(ValueError, match=r"hessian_diag: .*got None \(spec NVFP4-IN-2"):
        quantize(weight, None, method="hscale")
