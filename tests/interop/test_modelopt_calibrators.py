"""ModelOpt's MSE, FP8-scale-sweep and local-Hessian calibrators on one seeded Linear
(``hscale.backends.interop.modelopt_calibrators``).

The calibrators need CUDA and Triton (the adapter's docstring says why); where they are missing
the runs skip with the adapter's reason, and the tests that pin that reason run instead. The
NVFP4 structure is checked with ml_dtypes and the E2M1 grid alone, not with project code.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("modelopt.torch.quantization")
torch = pytest.importorskip("torch")

from hscale.backends.interop import modelopt_calibrators as calibrators  # noqa: E402

E2M1_GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
#: The 126 finite positive E4M3 values (bytes 0x01 .. 0x7E).
E4M3_VALUES = np.arange(1, 127, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
ALL = ["max", *calibrators.CALIBRATORS.values()]


def _layer(m=32, n=64, tokens=512, seed=0):
    """A seeded weight with a few outliers, and G from activations whose channel scales span
    two decades (so the local Hessian differs from the identity)."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((m, n)) * 0.02).astype(np.float32)
    weight[rng.integers(0, m, 6), rng.integers(0, n, 6)] *= 8
    channel_scale = 10.0 ** rng.uniform(-1, 1, n)
    X = rng.standard_normal((tokens, n)) * channel_scale
    return weight, X.T @ X


def _spec_global_scale(weight):
    return np.float32(np.float32(np.abs(weight).max()) / np.float32(6 * 448))


def _unstructured_blocks(dequantized, global_scale, rtol=4e-6):
    """Indices of the 16-element blocks that are NOT (E2M1 value) x (E4M3 value) x s for one
    E4M3 value per block; an all-zero block is (0) x (any scale)."""
    blocks = np.asarray(dequantized, np.float64).reshape(-1, 16) / np.float64(global_scale)
    ratios = np.abs(blocks)[:, :, None] / E4M3_VALUES  # (blocks, 16, 126): would-be E2M1
    nearest = E2M1_GRID[np.abs(ratios[..., None] - E2M1_GRID).argmin(-1)]
    on_grid = np.abs(ratios - nearest) <= rtol * np.maximum(nearest, 1)
    return np.flatnonzero(~on_grid.all(axis=1).any(axis=1))


def _output_error(weight, dequantized, G):
    d = weight.astype(np.float64) - dequantized
    return float(np.sum((d @ G) * d))


def test_calibration_inputs_reproduce_G():
    weight, G = _layer()
    X = calibrators.calibration_inputs(G)
    assert X.shape == G.shape
    np.testing.assert_allclose(X.T @ X, G, rtol=1e-9, atol=1e-9 * np.abs(G).max())
    # A singular G (a dead input channel) needs no jitter.
    G[:, 3] = G[3, :] = 0
    X = calibrators.calibration_inputs(G)
    np.testing.assert_allclose(X.T @ X, G, rtol=1e-9, atol=1e-9 * np.abs(G).max())


def test_every_report_row_has_an_algorithm():
    assert set(calibrators.CALIBRATORS.values()) <= set(calibrators.ALGORITHMS)
    assert calibrators.algorithm_key("ModelOpt MSE calibrator") == "mse"
    ok, why = calibrators.available("ModelOpt nothing calibrator")
    assert not ok and "unknown" in why


@pytest.mark.skipif(torch.cuda.is_available(), reason="pins the CPU failure")
def test_without_cuda_the_static_nvfp4_fake_quant_is_what_fails():
    """The reason ``available`` gives is ModelOpt's own error: max calibration itself runs on
    CPU, the static NVFP4 fake-quantization that every search scores candidates with does not."""
    import modelopt.torch.quantization as mtq
    for calibrator in calibrators.CALIBRATORS:
        ok, why = calibrators.available(calibrator)
        assert not ok and "requires triton" in why
    weight, _ = _layer()
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(weight))
    mtq.quantize(model, calibrators._config("max"), None)
    assert model[0].weight_quantizer.amax.numel() == 32 * 64 // 16  # calibrated on CPU
    with pytest.raises(RuntimeError, match="static_blockwise_fp4_fake_quant requires triton"):
        model[0].weight_quantizer(model[0].weight)
    with pytest.raises(RuntimeError, match="requires triton"):
        calibrators.dequantized(weight, _spec_global_scale(weight), _layer()[1],
                                "ModelOpt MSE calibrator")


@pytest.mark.skipif(torch.cuda.is_available(), reason="pins the CPU failure")
@pytest.mark.parametrize("key", list(calibrators.CALIBRATORS.values()))
def test_without_cuda_each_search_fails_scoring_its_first_candidate(monkeypatch, key):
    """Past ``available`` (bypassed here), the whole set-up runs on CPU (the config, the forward
    loop, max calibration, the local Hessian's capture) and the search fails in ModelOpt's
    per-candidate quantization function, at the static NVFP4 fake-quant."""
    import traceback
    monkeypatch.setattr(calibrators, "available", lambda calibrator: (True, ""))
    weight, G = _layer()
    with pytest.raises(RuntimeError, match="static_blockwise_fp4_fake_quant requires triton") \
            as failure:
        calibrators.calibrate(weight, G, key)
    frames = [frame.name for frame in traceback.extract_tb(failure.value.__traceback__)]
    assert "_mse_quant_func" in frames and "_fake_quantize" in frames


@pytest.fixture(scope="module")
def results():
    """algorithm key -> ModelOpt's Calibration of the seeded layer (skips where none runs)."""
    ok, why = calibrators.available("max")
    if not ok:
        pytest.skip(why)
    weight, G = _layer()
    return weight, G, {key: calibrators.calibrate(weight, G, key) for key in ALL}


@pytest.mark.parametrize("key", ALL)
def test_result_is_nvfp4_with_the_spec_global_scale(results, key):
    weight, G, by_key = results
    result = by_key[key]
    # ModelOpt's checkpoint global scale is the spec's s_g bit for bit.
    assert result.global_amax == np.float32(np.abs(weight).max())
    assert result.global_scale == _spec_global_scale(weight)
    assert result.dequantized.shape == weight.shape
    assert _unstructured_blocks(result.dequantized, result.global_scale).size == 0
    # Every block's chosen amax is global_amax * (an E4M3 value) / 448 for the sweeps.
    if key in ("mse_fp8_sweep", "local_hessian"):
        codes = result.block_amax.astype(np.float64).ravel() * 448 / result.global_amax
        nearest = E4M3_VALUES[np.abs(codes[:, None] - E4M3_VALUES).argmin(axis=1)]
        np.testing.assert_allclose(codes, nearest, rtol=1e-6)


def test_dequantized_warns_for_another_global_scale(results):
    weight, G, _ = results
    with pytest.warns(UserWarning, match="its own global scale"):
        calibrators.dequantized(weight, np.float32(1.0), G, "ModelOpt MSE calibrator")


@pytest.mark.parametrize("key", ["mse", "mse_fp8_sweep"])
def test_mse_searches_are_no_worse_than_max_in_weight_error(results, key):
    weight, _, by_key = results
    mse = np.sum((weight - by_key[key].dequantized) ** 2)
    assert mse <= np.sum((weight - by_key["max"].dequantized) ** 2)


def test_local_hessian_is_no_worse_than_max_in_output_error(results):
    weight, G, by_key = results
    assert (_output_error(weight, by_key["local_hessian"].dequantized, G)
            <= _output_error(weight, by_key["max"].dequantized, G))
