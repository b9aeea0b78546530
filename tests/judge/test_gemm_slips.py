"""Which clause a GEMM's wrong outputs are named for (hscale.judge.gemm_slips, NVFP4-GEMM-7's
last sentence), on the two slips issue 39 found misnamed:

- the global scales folded into bfloat16 elements before an fp32 matmul (torchao's
  weight-only path) while the spec's placement is declared: a lossy early global scale,
  NVFP4-GEMM-5, which the fp16 accumulation model also admits at small K and so named first;
- an fp16 accumulator that overflows to +inf on the positive terms and -inf on the negative
  ones returns NaN: NVFP4-GEMM-4's accumulator, not "not the product of these operands"."""

from __future__ import annotations

import numpy as np

from helpers.gemm_kernels import ScalesInBf16Elements
from hscale.judge.cases import GemmCase
from hscale.judge.gemm import GemmDomain, gemm_arguments, judge_gemm
from hscale.judge.gemm_builders import from_values, random_nvfp4


def test_a_lossy_early_global_scale_is_named_nvfp4_gemm_5():
    rng = np.random.default_rng(39)
    case = GemmCase(random_nvfp4(rng, 3, 16, global_scale=0.0123),
                    random_nvfp4(rng, 4, 16, global_scale=0.00075), title="random K = 16")
    a, b = gemm_arguments(case, GemmDomain("fp32", scale_layout="swizzled-128x4"))
    kernel = ScalesInBf16Elements()
    observed = kernel.gemm(a, b).astype(np.float64)
    diagnosis = judge_gemm(case, observed, "fp32")
    assert diagnosis.findings, "the bfloat16 elements must be outside the fp32 model"
    for finding in diagnosis.findings:
        assert finding.clause == "NVFP4-GEMM-5", finding.render()
        assert "folded into bf16 elements" in finding.render(), finding.render()


def test_an_fp16_accumulators_nan_is_its_overflow():
    top = 0x7E  # 448: a block's value is 16 * 36 * 448^2, far beyond fp16's 65504
    a = from_values(np.full((1, 32), 6.0), top)
    b = from_values(np.array([[6.0] * 16 + [-6.0] * 16]), top)
    case = GemmCase(a, b, title="+inf then -inf in fp16")
    diagnosis = judge_gemm(case, np.array([[np.nan]]), "fp32")
    (finding,) = diagnosis.findings
    assert finding.clause == "NVFP4-GEMM-4", finding.render()
    assert "the fp16 accumulation model" in finding.render(), finding.render()
    # a NaN where only one sign can overflow is not an overflow's: not the product
    one_sign = GemmCase(a, from_values(np.array([[6.0] * 16 + [0.5] * 16]), top))
    (finding,) = judge_gemm(one_sign, np.array([[np.nan]]), "fp32").findings
    assert finding.clause == "NVFP4-GEMM-1", finding.render()
