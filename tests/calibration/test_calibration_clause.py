"""HSCALE-CAL-1: h = diag(X^T X), summed over (non-padding) tokens in fp64, checked with a
tolerance against an independent computation (the summation order is not specified).

Calibration is not part of the backend protocol (a backend is given h), so these tests run
once, not per backend."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="calibration needs torch (the 'models' extra)")

RTOL = 1e-6


@pytest.mark.clause("HSCALE-CAL-1")
def test_hessian_diag_of_a_two_layer_model_with_padding():
    from hscale.calibration import CalibrationBatch, collect_hessian_diag
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 16))
    batches, want = [], {"0": np.zeros(32), "2": np.zeros(48)}
    for b in range(3):
        x = torch.randn(4, 7, 32) * (b + 1)
        mask = (torch.rand(4, 7) < 0.7).int()
        mask[:, 0] = 1
        batches.append(CalibrationBatch(x, mask))
        keep = mask.bool()
        x1 = x[keep].double()
        with torch.no_grad():
            x2 = torch.nn.functional.gelu(model[0](x))[keep].double()
        want["0"] += (x1 ** 2).sum(0).numpy()
        want["2"] += (x2 ** 2).sum(0).numpy()
    got = collect_hessian_diag(model, batches, progress=False)
    assert set(got) == {"0", "2"}, f"[HSCALE-CAL-1] layers calibrated: {sorted(got)}"
    for name, h in want.items():
        assert got[name].dtype == np.float64 and got[name].shape == h.shape, \
            f"[HSCALE-CAL-1] layer {name}: h must be float64 {h.shape}"
        np.testing.assert_allclose(got[name], h, rtol=RTOL, err_msg=f"[HSCALE-CAL-1] layer {name}")


@pytest.mark.slow
@pytest.mark.clause("HSCALE-CAL-1")
# MiniLM's calibration (about 17 CPU s) in the extended tier, the tiny decoder's in the default
@pytest.mark.parametrize("model", [pytest.param("minilm", marks=pytest.mark.extended),
                                   "tiny-decoder"])
def test_calibrated_models_give_valid_h(zoo, model):
    """Every Linear of the full models gets a finite, non-negative h of length in_features, not
    identically zero (the layer ran)."""
    for name, weight, h in zoo.layers(model):
        assert h.shape == (weight.shape[1],), f"[HSCALE-CAL-1] {model} {name}: h shape {h.shape}"
        assert np.isfinite(h).all() and (h >= 0).all(), f"[HSCALE-CAL-1] {model} {name}: bad h"
        assert h.max() > 0, f"[HSCALE-CAL-1] {model} {name}: h is all zero (layer never ran?)"
