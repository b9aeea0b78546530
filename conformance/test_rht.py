"""The rht kind (docs/spec.md section 12): the kernel's quantization after the 16 x 16
Hadamard transform, judged bit for bit under its declared sign mask, profile and axis: outliers
that the transform spreads, padded shapes (a multiple of 16 on the transformed axis only), tokens
of mixed magnitudes, generated tensors; and algebraically (NVFP4-RHT-4), the GEMM of two rotated
operands against the unrotated product, whatever orthogonal transform the kernel applies."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hscale.judge.rht import RhtCase
from hscale.judge.rht_gemm import RhtGemmCase
from hscale.reference.rht_gemm import identity_probe


def _bf16(a) -> np.ndarray:
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")
@pytest.mark.parametrize("shape", [(16, 16), (32, 48), (48, 16)])
def test_one_outlier_per_block(rht_checker, shape):
    """An outlier in each block of 16 tokens: the transform spreads it over the block."""
    x = np.full(shape, 0.5, np.float32)
    x[::16, :] = 40.0
    rht_checker.check(RhtCase(_bf16(x), title=f"outliers {shape}"))


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")
def test_a_row_of_zeros_and_signed_values(rht_checker):
    x = np.zeros((32, 32), np.float32)
    x[:, 16:] = np.arange(-8, 8, 0.5)[:, None] * np.linspace(-1, 1, 16)[None]
    rht_checker.check(RhtCase(_bf16(x), title="zeros and signs"))


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")
@settings(max_examples=30)  # each example is an exact transform of up to 48 x 48 elements
@given(data=st.data())
def test_generated_tensors(rht_checker, data):
    blocks = data.draw(st.integers(1, 3))
    cols = 16 * data.draw(st.integers(1, 3))
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16 * blocks, cols)) * np.exp(2 * rng.standard_normal((16 * blocks, 1)))
    rht_checker.check(RhtCase(_bf16(x), title=f"generated, seed {seed}"))


@pytest.mark.clause("NVFP4-RHT-4")
def test_the_identity_probe_keeps_the_wgrad_gemm(rht_checker):
    """The kernel's transform is orthogonal: the GEMM of its rotated identity probe (exact in
    NVFP4 for every Hadamard-class transform) is c^2 I exactly."""
    probe = identity_probe(2)
    rht_checker.check_gemm(RhtGemmCase(probe, probe, "rht-probe", "identity probe",
                                       probe=True))


@pytest.mark.clause("NVFP4-RHT-4")
@pytest.mark.parametrize("same", [False, True], ids=["dy-x", "x-x"])
def test_the_rotated_wgrad_gemm_is_the_unrotated_one(rht_checker, same):
    """dY and X rotated and quantized by the kernel: their GEMM within the quantization bound
    of dY^T X (X^T X: a Gram matrix, whose diagonal shows a scale fault)."""
    rng = np.random.default_rng(7)
    x = _bf16(rng.standard_normal((32, 32)) * np.exp(rng.standard_normal((32, 1))))
    dy = x if same else _bf16(rng.standard_normal((32, 32)))  # a row-wise kernel: same n
    rht_checker.check_gemm(RhtGemmCase(dy, x, "rht-wgrad", "wgrad operands"))


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-3")
@pytest.mark.parametrize("tokens", [20, 40])
def test_a_token_count_not_a_multiple_of_16(rht_checker, tokens):
    """Refused, or padded with zero tokens to the next multiple of 16 and transformed and
    quantized as the padded tensor, as the kernel declares (rht_padding)."""
    rng = np.random.default_rng(tokens)
    case = RhtCase(_bf16(rng.standard_normal((tokens, 32))), title=f"{tokens} tokens")
    if rht_checker.domain.padding == "refuse":
        rht_checker.check_refused(case)
    else:
        rht_checker.check(case)
