"""The quantization report's errors against RTN read from the group objectives
(``rounding_quality``): the same figures as decoding both results (``layer_quality``), exact
against a ``fractions.Fraction`` evaluation on a small layer, and the same on every backend;
the objectives the search hands back (``quantize(objectives=True)``) are the rescoring's."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from hscale.evaluation.quality import layer_quality, rounding_quality
from hscale.reference import compute_global_scale, quantize

# E2M1 code -> value, written out from the format (sign bit 0x8, magnitudes 0..6).
E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
E2M1_BY_CODE = {code: (-1 if code & 8 else 1) * Fraction(E2M1[code & 7]) for code in range(16)}


def _layer(rows=48, cols=64, seed=3):
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((rows, cols)) * rng.uniform(0.1, 3, (rows, 1))).astype(
        np.float32)
    weight[5, 16:32] = 0.0  # a zero group (NVFP4-ZERO-1)
    weight[9, :16] = -0.0
    h = rng.uniform(0.0, 4.0, cols)
    s_g = compute_global_scale(float(np.max(np.abs(weight))))
    return weight.astype(ml_dtypes.bfloat16), h, s_g


def _exact_sums(weight, codes, scale_bytes, s_g, h):
    """sum (w - q s)^2 and sum h (w - q s)^2 in rationals, each scale decoded by ml_dtypes."""
    square, weighted = Fraction(0), Fraction(0)
    rows, cols = weight.shape
    for r in range(rows):
        for c in range(cols):
            byte = np.uint8(scale_bytes[r, c // 16])
            scale = Fraction(float(byte.view(ml_dtypes.float8_e4m3fn))) * Fraction(float(s_g))
            d = Fraction(float(weight[r, c])) - E2M1_BY_CODE[int(codes[r, c])] * scale
            square += d * d
            weighted += Fraction(float(h[c])) * d * d
    return square, weighted


@pytest.mark.parametrize("method", ["hscale", "rtn"])
def test_the_figures_are_the_exact_sums_of_both_results_errors(method):
    weight, h, s_g = _layer()
    result = quantize(weight, h if method == "hscale" else None, method=method, global_scale=s_g)
    rtn = quantize(weight, method="rtn", global_scale=s_g)
    assert method == "rtn" or not np.array_equal(result.scale_bytes, rtn.scale_bytes)
    got = rounding_quality(weight, result, h)
    for tag, q in (("", result), ("_rtn", rtn)):
        square, weighted = _exact_sums(weight, q.codes, q.scale_bytes, s_g, h)
        assert got["weight_mse" + tag] == pytest.approx(float(square) / weight.size, rel=1e-13)
        assert got["diag_error" + tag] == pytest.approx(float(weighted), rel=1e-13)


def test_the_figures_agree_with_decoding_both_results():
    """Against the decoded fp32 weights (one fp32 rounding from q * s): 1e-6 relative."""
    weight, h, s_g = _layer(rows=64, cols=256, seed=8)
    result = quantize(weight, h, global_scale=s_g)
    decoded = layer_quality(weight, result, quantize(weight, method="rtn", global_scale=s_g), h,
                            None)
    got = rounding_quality(weight, result, h)
    assert got.keys() == decoded.keys()
    assert got["shifts"] == decoded["shifts"]
    for key in ("weight_mse", "weight_mse_rtn", "diag_error", "diag_error_rtn"):
        assert got[key] == pytest.approx(decoded[key], rel=1e-6), key


def test_every_backend_gives_the_same_figures_bit_for_bit(monkeypatch):
    """The objectives are the reference's on every backend, kept per group and summed in one
    order: the figures are equal as floats, whatever the backend's blocks and threads."""
    pytest.importorskip("torch")
    monkeypatch.delenv("HSCALE_TORCH_COMPILE", raising=False)  # the fused walk's blocks too
    weight, h, s_g = _layer(rows=300, cols=1024, seed=11)
    result = quantize(weight, h, global_scale=s_g)
    expected = rounding_quality(weight, result, h)
    for compile_ in (False, True):  # the eager kernels' blocks and the fused walk's
        from hscale.backends.torch_backend import TorchBackend
        backend = TorchBackend("cpu", chunk_groups=512, compile=compile_)
        assert rounding_quality(weight, result, h, backend.layer_quantizer(weight.size // 16)) \
            == expected, compile_


# -- the objectives the search hands back (quantize(objectives=True)) ---------------------------

@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
@pytest.mark.parametrize("method", ["rtn", "scale-only", "hscale", "hscale-block"])
def test_the_searchs_objectives_are_the_rescorings_on_hard_groups(method, backend_name):
    """Each group's objective at its chosen and initial byte as the search hands it back (the
    reference's numpy path; the torch backend's eager kernels; the fused walk in
    tests/backends/test_fused_walk.py) equals the old route's rescoring of the result's bytes
    (``score_objectives``: the reference's steps at the two bytes), bit for bit, on the hard
    layer (ties, both ends of the ladder, subnormal scales, zero groups, h with zeros); the
    report's figures from them are the old ones, as floats; asking changes no byte; without
    an h only the squared errors come back."""
    from helpers.backend_checks import S_G, assert_identical, assert_objectives_identical, \
        hard_layer

    from hscale.evaluation.quality import score_objectives
    run = quantize
    if backend_name == "torch":
        pytest.importorskip("torch")
        from hscale.backends.torch_backend import TorchBackend
        run = TorchBackend("cpu", chunk_groups=24, compile=False).quantize  # blocks of 3 rows
    weight, h, blocks = hard_layer()
    second = blocks if method == "hscale-block" else h
    plain = run(weight, second, method=method, global_scale=S_G)
    scored = run(weight, second, method=method, global_scale=S_G, objectives=True,
                 objectives_h=h)
    assert_identical(plain, scored, method)
    assert plain.objectives is None
    expected = score_objectives(weight, plain, h)
    assert_objectives_identical(expected, scored.objectives, f"{backend_name} {method}")
    assert rounding_quality(weight, scored, h) == rounding_quality(weight, plain, h)
    squared = run(weight, second, method=method, global_scale=S_G, objectives=True).objectives
    assert squared.weighted is None and np.array_equal(squared.squared, expected.squared)
    other = h[::-1].copy()  # an h the search did not rank by: computed, not the search's
    assert_objectives_identical(score_objectives(weight, plain, other), run(
        weight, second, method=method, global_scale=S_G, objectives=True,
        objectives_h=other).objectives, f"{backend_name} {method}, another h")


@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
def test_an_objective_request_checks_its_h_as_the_hessian_diagonal_is_checked(backend_name):
    run = quantize
    if backend_name == "torch":
        pytest.importorskip("torch")
        from hscale.backends.torch_backend import TorchBackend
        run = TorchBackend("cpu", compile=False).quantize
    weight, h, _ = _layer(rows=12, cols=32)
    with pytest.raises(ValueError, match=r"objectives_h: shape \(16,\).*NVFP4-IN-2"):
        run(weight, h, objectives=True, objectives_h=h[:16])
    bad = h.copy()
    bad[3] = -1.0
    with pytest.raises(ValueError, match=r"objectives_h\[3\] = -1.0: must be non-negative"):
        run(weight, h, objectives=True, objectives_h=bad)
