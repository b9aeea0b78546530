"""The one result record travels whole: what ``observe`` reads from an implementation (its
packed bytes, its delta, a global scale stored as the reciprocal) survives ``crop``, so that a
result cut back from a padded case is diagnosed exactly as the whole one is."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hscale.conformance.checker import crop
from hscale.judge.cases import Case
from hscale.judge.diagnose import diagnose, observe
from hscale.judge.domain import Domain
from hscale.reference import quantize


def _no_read_back_weight() -> np.ndarray:
    """A weight whose s_g = fp32(amax / 2688) has no fp32 reciprocal reading back as itself
    (NVFP4-GS-4: about 17% of fp32 values), so that a writer of the reciprocal quantizes with
    fp32(1 / fp32(1 / s_g)), one ulp away."""
    one = np.float32(1)
    for amax in np.linspace(1.0, 2.0, 4001, dtype=np.float32):
        s_g = np.float32(float(amax) / 2688)
        if float(np.float32(float(amax)) / 2688) != float(s_g):
            continue
        if one / (one / s_g) != s_g:
            weight = np.random.default_rng(5).uniform(-1, 1, (3, 48)).astype(np.float32)
            weight[0, 0] = amax
            return weight
    raise AssertionError("no such amax in [1, 2]: the search is wrong")


@pytest.mark.clause("NVFP4-GS-4")
def test_a_cropped_reciprocal_result_is_diagnosed_as_the_whole_one():
    case = Case(_no_read_back_weight(), method="rtn", title="reciprocal, padded")
    domain = Domain(shape_multiple=(8, 64), global_scale_convention="reciprocal")
    padded_weight, _ = domain.pad_weight(case.weight, None)
    padded = case.with_(weight=padded_weight)
    one = np.float32(1)
    spec_sg = quantize(case.weight, method="rtn").global_scale
    read_back = one / (one / spec_sg)
    assert read_back != spec_sg  # the weight is what it says it is
    # What a writer of the reciprocal produces (NVFP4-GS-4): quantized with fp32(1/r).
    stored = one / spec_sg
    result = quantize(padded_weight, method="rtn", global_scale=one / stored)
    raw = SimpleNamespace(packed=result.packed, scale_bytes=result.scale_bytes,
                          global_scale=stored)
    whole, findings = observe(raw, padded, convention="reciprocal")
    assert not findings and whole.stored_global_scale == stored
    assert diagnose(padded, whole).ok
    cut = crop(whole, case.shape)
    assert cut.codes.shape == case.shape and cut.stored_global_scale == stored
    assert np.array_equal(cut.packed, whole.packed[:3, :24])
    diagnosis = diagnose(case, cut)
    assert diagnosis.ok, "\n".join(diagnosis.render(case))
