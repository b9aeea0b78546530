"""The rht kind's algebraic judge (NVFP4-RHT-4, docs/spec.md section 12): the GEMM of the
kernel's two rotated, quantized operands against the unrotated product, whatever transform the
kernel applies.

The kernel quantizes both operands of ``wgrad = dY^T X``; their GEMM, as a conforming fp32 GEMM
may return it (the GEMM kind's admissible interval, NVFP4-GEMM-7 with the fp32 model), must
come within the quantization bound of ``hscale.reference.rht_gemm`` of ``dY^T X`` (exactly,
for the identity probe). A transform that is orthogonal passes, whichever it is (another sign
vector, another order of H16's rows or columns); one that is not (a missing 1/4, one entry of
the matrix with the wrong sign) fails where the probe or the operands show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from hscale.reference.accumulation import admissible
from hscale.reference.gemm import Nvfp4Tensor
from hscale.reference.rht_gemm import quantization_bound, unrotated_product

from .activation_domain import ObservedActivations
from .findings import Finding, Findings


@dataclass(frozen=True)
class RhtGemmCase:
    """The two operands of a wgrad GEMM, (tokens, out) and (tokens, in), bfloat16; ``probe``:
    the identity probe (judged exactly)."""
    dy: np.ndarray
    x: np.ndarray
    id: str = ""
    title: str = ""
    probe: bool = False

    def describe(self) -> str:
        return (f"wgrad case {self.id or '(generated)'} ({self.title or 'rht gemm'}), dY "
                f"{np.shape(self.dy)}, X {np.shape(self.x)}")

    def sources(self, axis: str) -> tuple[np.ndarray, np.ndarray]:
        """The tensors the kernel transforms: ``dY^T`` and ``X^T`` column-wise, else dY, X."""
        dy, x = np.asarray(self.dy), np.asarray(self.x)
        return (dy.T, x.T) if axis == "columnwise" else (dy, x)


def _operand(observed: ObservedActivations) -> Nvfp4Tensor:
    """The kernel's result as a GEMM operand: its decode multiplier ``fp32(1/g)`` the global
    scale (NVFP4-GEMM-1)."""
    return Nvfp4Tensor(observed.codes, observed.scale_bytes, observed.multiplier)


def diagnose_rht_gemm(case: RhtGemmCase, observed_dy: ObservedActivations,
                      observed_x: ObservedActivations, profile: str, axis: str,
                      max_findings: int = 4) -> Findings:
    """NVFP4-RHT-4: the rotated GEMM of the kernel's quantizations of dY and X against the
    unrotated ``dY^T X``."""
    diagnosis = Findings()
    a_source, b_source = case.sources(axis)
    a, b = _operand(observed_dy), _operand(observed_x)
    try:
        interval = admissible(a, b, "float32", "fp32")
    except ValueError as error:  # a scale byte that is no NVFP4 scale, a global scale not normal
        diagnosis.findings.append(Finding("NVFP4-RHT-4", f"the quantized operands are no NVFP4 "
                                          f"operands of a GEMM: {error}"))
        return diagnosis
    bound = np.zeros(interval.low.shape) if case.probe else quantization_bound(a, b, profile)
    product = unrotated_product(a_source, b_source)
    where = "exactly (the identity probe)" if case.probe else "within the quantization bound"
    approximate = np.array([[float(v) for v in row] for row in product])
    margin = 2.0 ** -40 * (np.abs(approximate) + bound + np.abs(interval.low)
                           + np.abs(interval.high))
    clear = (interval.low - bound + margin <= approximate) & \
        (approximate <= interval.high + bound - margin)  # inside in float64 with room to spare
    outside = 0
    for i, j in ((int(i), int(j)) for i, j in zip(*np.nonzero(~clear))):
        p, e = product[i][j], Fraction(float(bound[i, j]))
        low, high = Fraction(float(interval.low[i, j])), Fraction(float(interval.high[i, j]))
        if low - e <= p <= high + e:
            continue
        outside += 1
        if outside <= max_findings:
            diagnosis.findings.append(Finding(
                "NVFP4-RHT-4", f"the GEMM of the rotated operands does not give the unrotated "
                f"product {where}: (dY^T X)[{i}, {j}] = {float(p)!r}, the fp32 GEMM of the "
                f"kernel's operands {float(low)!r} .. {float(high)!r} (NVFP4-GEMM-7), the bound "
                f"{float(e)!r}: the transform is not orthogonal", kind="gemm",
                expected=repr(float(p)), observed=f"{float(low)!r}..{float(high)!r}",
                output=(i, j)))
    if outside > max_findings:
        diagnosis.findings.append(Finding("NVFP4-RHT-4", f"{outside - max_findings} more output "
                                          "elements outside", kind="gemm"))
    return diagnosis
