"""The rht kind's judge (hscale.judge.rht) on independent kernels (tests/helpers/rht_kernels.py,
importing nothing of the kit), and its reference against independent routes: the transform by a
float64 matrix product and ml_dtypes' bfloat16 rounding, TE's sign vector by hand, the matrix
orthogonal. Each fault of the issue is refused naming its clause."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.rht import RhtCase, RhtDomain, diagnose_rht, observe_rht
from hscale.reference.hadamard import TE_SIGN_MASK, rotate, sign_vector, signed_hadamard

from helpers.rht_kernels import FAULTS, Rht, hadamard16


def _x(shape=(32, 48), seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp(rng.standard_normal((shape[0], 1)))
    return x.astype(ml_dtypes.bfloat16)


@pytest.mark.clause("NVFP4-RHT-1")
def test_te_sign_vector_and_the_matrix_by_hand():
    """TransformerEngine's hard-coded signs (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1,
    -1, -1) are the mask 0xD7E8; H16 is Sylvester's; T = diag(s) H / 4 is orthogonal."""
    te = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
    assert sign_vector(TE_SIGN_MASK).tolist() == te
    assert np.array_equal(signed_hadamard(0), hadamard16())
    t = signed_hadamard(TE_SIGN_MASK) / 4
    assert np.array_equal(t @ t.T, np.eye(16))


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2")
@pytest.mark.parametrize("mask", [TE_SIGN_MASK, 0])
def test_the_exact_transform_is_a_float64_product_rounded_by_ml_dtypes(mask):
    """Bfloat16 inputs within 2^40 of each other: the float64 product is exact, so its
    bfloat16 rounding (ml_dtypes, to nearest even) is the exact sum rounded once."""
    x = _x((16, 64))
    t = signed_hadamard(mask).astype(np.float64) / 4
    mine = (x.astype(np.float64).reshape(16, 4, 16) @ t).reshape(16, 64)
    assert np.array_equal(rotate(x, mask).astype(np.float32),
                          mine.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert np.array_equal(rotate(x, mask, "fast-math"), mine.astype(np.float32))


def _cited(kernel, x=None) -> set[str]:
    x = _x() if x is None else x
    case = RhtCase(x, "rht")
    observed, unreadable = observe_rht(kernel.quantize_rht(x), (x.shape[1], x.shape[0]))
    if unreadable:
        return {f.clause for f in unreadable}
    return {f.clause for f in diagnose_rht(case, observed, RhtDomain()).findings}


FAULT_CLAUSES = {"signs": "NVFP4-RHT-1", "plain": "NVFP4-RHT-1", "no-bf16": "NVFP4-RHT-2",
                 "amax-before": "NVFP4-RHT-3", "rowwise": "NVFP4-RHT-1"}


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")
@pytest.mark.parametrize("fault", (None,) + FAULTS)
@pytest.mark.parametrize("seed", [1, 2])
def test_each_fault_is_refused_naming_its_clause(fault, seed):
    x = _x((48, 48), seed)  # square, so that a transform of the wrong axis has the shape
    cited = _cited(Rht(fault=fault), x)
    assert cited == (set() if fault is None else {FAULT_CLAUSES[fault]}), (fault, cited)


@pytest.mark.clause("NVFP4-RHT-1")
def test_a_plain_kernel_conforms_when_it_declares_so():
    x = _x()
    case = RhtCase(x)
    observed, _ = observe_rht(Rht(0).quantize_rht(x), (48, 32))
    assert diagnose_rht(case, observed, RhtDomain(mask=0)).ok
    assert {f.clause for f in diagnose_rht(case, observed, RhtDomain()).findings} == \
        {"NVFP4-RHT-1"}


@pytest.mark.clause("NVFP4-RHT-1")
@pytest.mark.parametrize("bit", [1, 5, 15])
def test_any_one_sign_flipped_is_named_as_the_sign_vector(bit):
    """A kernel whose vector differs from the declared one in sign ``bit`` (implemented with
    that mask, judged under TE's): the finding names NVFP4-RHT-1 and the mask it used, not the
    recipe's arithmetic (NVFP4-RHT-3)."""
    x = _x()
    used = TE_SIGN_MASK ^ (1 << bit)
    observed, _ = observe_rht(Rht(used).quantize_rht(x), (48, 32))
    findings = diagnose_rht(RhtCase(x), observed, RhtDomain()).findings
    assert [f.clause for f in findings] == ["NVFP4-RHT-1"]
    assert f"the sign mask 0x{used:04X}, not the declared 0xD7E8" in findings[0].text
