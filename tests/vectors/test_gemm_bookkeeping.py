"""The scale-bookkeeping GEMM vectors (vectors/level0/gemm_bookkeeping.json, built by
hscale.vectors.gemm_bookkeeping): what they are, checked from their stored operands, and what
they catch: the field's bookkeeping slips (tests/helpers/gemm_kernels.py, an fp32 GEMM written
without the kit), each refused naming NVFP4-GEMM-2 and the slip, where the same kernel without
the slip returns every output bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import gemm_kernels
from helpers.paths import REPO_ROOT
from hscale.judge.gemm import GemmDomain, gemm_arguments, judge_gemm

SET = REPO_ROOT / "vectors" / "level0" / "gemm_bookkeeping.json"
#: factory -> (what the finding says, the cases that must show it)
SLIPS = {
    "split_k_slice0_scales": ("every slice applying slice 0's scale bytes",
                              ["gemm-bookkeeping-k8192"]),
    "later_wave_earlier_a_scales": ("reading the previous band's A scale bytes",
                                    ["gemm-bookkeeping-k8192", "gemm-bookkeeping-tp2-rank1",
                                     "gemm-bookkeeping-k32"]),
    "padded_k32": ("padding (stale bytes) read as the scale bytes of blocks beyond K",
                   ["gemm-bookkeeping-tp2-rank0", "gemm-bookkeeping-k16",
                    "gemm-bookkeeping-k48"]),
    "whole_mma_steps": ("padding (stale bytes) read as the scale bytes of blocks beyond K",
                        ["gemm-bookkeeping-k16", "gemm-bookkeeping-k32",
                         "gemm-bookkeeping-tp2-rank1"]),
}


@pytest.fixture(scope="module")
def cases():
    from hscale.vectors.gemm_files import stored_cases
    return {i: c for i, c in stored_cases().items() if i.startswith("gemm-bookkeeping-")}


def _run(kernel, case):
    domain = GemmDomain("fp32", scale_layout="swizzled-128x4")
    a, b = gemm_arguments(case, domain)
    with np.errstate(invalid="ignore", over="ignore"):
        observed = kernel.gemm(a, b, out_dtype=case.out_dtype)
    return judge_gemm(case, observed.astype(np.float64), "fp32", domain)


def test_the_set_is_what_the_issue_asks_for(cases):
    shapes = {case_id: case.shape for case_id, case in cases.items()}
    assert any(m >= 512 and k >= 8192 for m, _, k in shapes.values()), shapes
    assert {16, 32} <= {k for _, _, k in shapes.values()}, shapes
    assert any(k % 32 for _, _, k in shapes.values() if k > 64), shapes  # a TP shard's K
    for case_id, case in cases.items():
        a, b = case.a, case.b
        assert a.padding_byte == b.padding_byte == 0x7F, case_id
        for operand in (a, b):  # powers of two from 2^-2 to 2^2: E4M3 bytes 0x28 .. 0x48
            assert set(np.unique(operand.scale_bytes)) <= {0x28, 0x30, 0x38, 0x40, 0x48}
        blocks = a.scale_bytes.shape[1]
        if blocks > 1:  # each K block its own scale: neighbours differ
            assert (a.scale_bytes[:, 1:] != a.scale_bytes[:, :-1]).all(), case_id
        if a.scale_bytes.shape[0] > 128:  # each 128-row band its own scales
            assert (a.scale_bytes[128] != a.scale_bytes[0]).any(), case_id
        allowed = case.admissible("fp32")  # exactly summable: one admissible value each
        assert allowed.exact.all() and (allowed.low == allowed.high).all(), case_id
    assert SET.stat().st_size < 700_000


def test_the_same_kernel_without_a_slip_returns_every_output_bit_for_bit(cases):
    for case_id, case in cases.items():
        diagnosis = _run(gemm_kernels.Fp32Blocks(), case)
        assert diagnosis.ok and diagnosis.exact == diagnosis.elements, (case_id,
                                                                        diagnosis.render())


@pytest.mark.parametrize("factory", list(SLIPS))
def test_each_bookkeeping_slip_is_refused_naming_nvfp4_gemm_2(cases, factory):
    said, where = SLIPS[factory]
    kernel = getattr(gemm_kernels, factory)()
    for case_id in where:
        diagnosis = _run(kernel, cases[case_id])
        assert diagnosis.findings, f"{factory} passed {case_id}"
        for finding in diagnosis.findings:
            assert finding.clause == "NVFP4-GEMM-2" and said in finding.render(), (
                case_id, finding.render())
