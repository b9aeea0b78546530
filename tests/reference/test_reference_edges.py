"""Edge rules added after review: no dequantized value can overflow, bf16 h is accepted, a
missing h cites the input clause."""

import ml_dtypes
import numpy as np
import pytest

from fractions import Fraction

from hscale.reference import compute_global_scale, quantize
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier


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


@pytest.mark.clause("NVFP4-GS-4")
def test_reciprocal_storage_round_trip_fails_for_the_counted_significands():
    """Exhaustively over the 2^23 fp32 significands (exponent 0): fp32(1 / fp32(1 / s)) != s for
    exactly the 1,439,258 the spec counts, always by one ulp, and for those no fp32 r near
    fp32(1 / s) has fp32(1 / r) == s. float64 division then the fp32 cast is a correct
    rounding here: 1/x is never within 2^-49 (relative) of an fp32 midpoint."""
    s = (np.arange(2 ** 23, dtype=np.uint32) | np.uint32(127 << 23)).view(np.float32)
    r = (1.0 / s.astype(np.float64)).astype(np.float32)
    back = (1.0 / r.astype(np.float64)).astype(np.float32)
    lost = back != s
    assert int(lost.sum()) == 1_439_258
    assert int(np.abs(back[lost].view(np.int32) - s[lost].view(np.int32)).max()) == 1
    assert float(s[lost].min()) > 1.4142
    for step in (-2, -1, 1, 2):  # no other reciprocal recovers them either
        neighbour = (r[lost].view(np.int32) + step).view(np.float32)
        assert not np.any((1.0 / neighbour.astype(np.float64)).astype(np.float32) == s[lost])


@pytest.mark.clause("NVFP4-GS-4")
def test_reciprocal_conversions_are_correctly_rounded():
    rng = np.random.default_rng(5)
    for value in np.float32(rng.uniform(1e-6, 1e6, 200)):
        r = reciprocal_from_multiplier(value)
        assert Fraction(float(r)) == _nearest_fp32(1 / Fraction(float(value)))
        assert Fraction(float(multiplier_from_reciprocal(r))) == _nearest_fp32(1 / Fraction(float(r)))
    with pytest.raises(ValueError, match="NVFP4-GS-4"):
        multiplier_from_reciprocal(-1.0)
    with pytest.raises(ValueError, match="NVFP4-GS-4"):
        reciprocal_from_multiplier(0.1)  # not an fp32 value


def _nearest_fp32(x: Fraction) -> Fraction:
    """The fp32 nearest to x > 0, ties to even, among the neighbours of its float64 estimate."""
    guess = np.float32(float(x))
    candidates = [np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf))]
    best = min(candidates, key=lambda c: (abs(Fraction(float(c)) - x),
                                          int(np.array(c).view(np.uint32)) & 1))
    return Fraction(float(best))
