"""The rht kind's algebraic judge (hscale.judge.rht_gemm, NVFP4-RHT-4) on the independent
kernels of tests/helpers/rht_kernels.py: the GEMM of two rotated operands against the
unrotated product. It refuses transforms that are not orthogonal (one entry of the matrix with
the wrong sign, the 1/4 left out) naming the clause, and admits, by design, orthogonal ones
other than the declared (a sign of the vector flipped, two columns exchanged); a 1/4 one ulp
high is below its bounds and is refused bit for bit at a bfloat16 tie. Its quantization bound
holds against the exact transformed values computed here with float64 (exact: 16 bfloat16
terms)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.rht import RhtCase, RhtDomain, diagnose_rht, observe_rht
from hscale.judge.rht_gemm import RhtGemmCase, diagnose_rht_gemm
from hscale.reference.dequantize import dequantize
from hscale.reference.rht_gemm import PROBE_VALUE, element_bounds, identity_probe

from helpers.rht_kernels import Rht, hadamard16


def _bf16(a) -> np.ndarray:
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


RNG = np.random.default_rng(11)
X = _bf16(RNG.standard_normal((32, 32)) * np.exp(RNG.standard_normal((32, 1))))
DY = _bf16(RNG.standard_normal((32, 16)))
CASES = {"probe": RhtGemmCase(identity_probe(2), identity_probe(2), "probe", probe=True),
         "dy-x": RhtGemmCase(DY, X, "dy-x"), "x-x": RhtGemmCase(X, X, "x-x")}


def _observed(kernel, x):
    observed, unreadable = observe_rht(kernel.quantize_rht(x), (x.shape[1], x.shape[0]))
    assert not unreadable
    return observed


def _cited(kernel, case) -> list[str]:
    findings = diagnose_rht_gemm(case, _observed(kernel, case.dy), _observed(kernel, case.x),
                                 "exact", "columnwise").findings
    return [f.clause for f in findings]


@pytest.mark.clause("NVFP4-RHT-4")
@pytest.mark.parametrize("fault", [None, "signs", "column-swapped", "quarter-ulp"])
def test_orthogonal_transforms_keep_the_gemm(fault):
    """The declared transform and, by design, orthogonal others (a sign of the vector flipped,
    two columns exchanged; a 1/4 one ulp high, below the bounds): admitted on the probe and on
    the Gram operands (the tightest of the cases)."""
    for name in ("probe", "x-x"):
        assert _cited(Rht(fault=fault), CASES[name]) == [], (fault, name)


@pytest.mark.clause("NVFP4-RHT-4")
@pytest.mark.parametrize("fault, refused_by", [("entry-flipped", {"probe"}),
                                               ("no-quarter", {"probe", "dy-x", "x-x"})])
def test_a_transform_that_is_not_orthogonal_is_refused(fault, refused_by):
    """One entry with the wrong sign shows in the probe only (c^2/8 off the diagonal, hidden
    in the operands' bound); the 1/4 left out everywhere (16 times the product)."""
    refused = {name for name, case in CASES.items() if _cited(Rht(fault=fault), case)}
    assert refused == refused_by, fault
    assert set(_cited(Rht(fault=fault), CASES["probe"])) == {"NVFP4-RHT-4"}


@pytest.mark.clause("NVFP4-RHT-4")
def test_the_probe_is_quantized_exactly():
    """Every transformed probe value is +-c/4 = 2.625: byte 0x7E, code 6 or 0xE, g = 1024."""
    observed = _observed(Rht(), identity_probe(1))
    assert np.float32(observed.global_scale) == 1024 and PROBE_VALUE / 4 == 2688 / 1024
    assert (observed.scale_bytes == 0x7E).all() and set(np.unique(observed.codes)) == {7, 15}


@pytest.mark.clause("NVFP4-RHT-4")
@pytest.mark.parametrize("mask", [0xD7E8, 0])
def test_the_element_bound_holds_against_the_exact_transform(mask):
    """|decoded - y| <= e for every element, y the exact transform (float64 here)."""
    signs = np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])
    y = (X.T.astype(np.float64).reshape(32, 2, 16) @ (signs[:, None] * hadamard16() / 4))
    observed = _observed(Rht(mask), X)
    multiplier = np.float32(1) / np.float32(observed.global_scale)
    bound = element_bounds(observed.codes, observed.scale_bytes, multiplier, "exact")
    value = dequantize(observed.codes, observed.scale_bytes, multiplier).astype(np.float64)
    error = np.abs(value - y.reshape(32, 32))
    assert (error <= bound).all() and (error > 0).any()


@pytest.mark.clause("NVFP4-RHT-2")
def test_a_quarter_one_ulp_high_is_refused_bit_for_bit_at_a_tie():
    """Below the algebraic check's bounds, but (1 + 2^-8) / 4 (a bfloat16 tie) now rounds up."""
    ties = np.zeros((16, 16), np.float32)
    ties[0], ties[1] = 1.0, 2.0 ** -8
    x = _bf16(ties)
    observed = _observed(Rht(fault="quarter-ulp"), x)
    assert not diagnose_rht(RhtCase(x), observed, RhtDomain()).ok
