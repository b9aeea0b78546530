"""How a suite test runs one case on a kernel of the rht kind and judges it (docs/spec.md
section 12): ``backend.quantize_rht(x)`` on the case's input in a dtype the kernel takes, its
result read (``hscale.judge.rht.observe_rht``) and judged bit for bit under the declared sign
mask, profile and axis (``diagnose_rht``), failing with the findings, each naming its clause;
``check_gemm``: both operands of a wgrad GEMM quantized and their GEMM judged against the
unrotated product (``hscale.judge.rht_gemm``, NVFP4-RHT-4)."""

from __future__ import annotations

import numpy as np

from hscale.conformance.checker import Tally, fail_citing, fail_raised
from hscale.judge.findings import Finding
from hscale.judge.rht import RhtCase, RhtDomain, diagnose_rht, observe_rht
from hscale.judge.rht_gemm import RhtGemmCase, diagnose_rht_gemm


class RhtChecker:
    def __init__(self, backend, label: str, domain: RhtDomain, tally: Tally | None = None,
                 test: str = ""):
        self.backend = backend
        self.label = label
        self.domain = domain
        self.tally = tally if tally is not None else Tally()
        self.test = test

    @classmethod
    def for_test(cls, request, backend, entry, state) -> "RhtChecker":
        return cls(backend, entry.id, entry.declared.domains["rht"], entry.tally_of("rht"),
                   test=request.node.nodeid)

    def shape_of(self, case: RhtCase) -> tuple[int, int]:
        """The transformed tensor's shape, its last axis padded under ``rht_padding = zeros``."""
        rows, n = np.shape(case.x)
        rows, n = (n, rows) if self.domain.axis == "columnwise" else (rows, n)
        return rows, n + (-n % 16 if self.domain.padding == "zeros" else 0)

    def check_refused(self, case: RhtCase):
        """NVFP4-RHT-1: a kernel declaring ``rht_padding = refuse`` raises on a transformed
        axis that is not a multiple of 16."""
        try:
            self.backend.quantize_rht(case.x)
        except Exception:  # noqa: BLE001 - refused, as declared
            self.tally.checks += 1
            return
        finding = Finding("NVFP4-RHT-1", f"the kernel returned a result for a transformed axis "
                          f"of {self.shape_of(case)[1]} (not a multiple of 16); it declares "
                          "rht_padding = refuse")
        fail_citing(f"backend {self.label!r} does not conform (rht, {self.domain.describe()}) "
                    f"on {case.describe()}\n  {finding.render()}", [finding])

    def _observed(self, case, x):
        try:
            raw = self.backend.quantize_rht(x)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, case, error)
        return observe_rht(raw, self.shape_of(RhtCase(x)))

    def check_gemm(self, case: RhtGemmCase):
        """NVFP4-RHT-4: dY and X quantized by the kernel, their GEMM against dY^T X."""
        header = (f"backend {self.label!r} does not conform (rht, {self.domain.describe()}) on "
                  f"{case.describe()}")
        operands = []
        for x in (case.dy, case.x):
            observed, findings = self._observed(case, x)
            if findings:
                fail_citing(header + "\n" + "\n".join("  " + f.render() for f in findings),
                            findings)
            operands.append(observed)
        self.tally.checks += 1
        self.tally.groups += sum(int(np.size(x)) // 16 for x in (case.dy, case.x))
        diagnosis = diagnose_rht_gemm(case, *operands, self.domain.profile, self.domain.axis)
        if not diagnosis.ok:
            fail_citing("\n".join([header] + diagnosis.render()), diagnosis.findings)

    def check(self, case: RhtCase):
        observed, findings = self._observed(case, case.x)
        header = (f"backend {self.label!r} does not conform (rht, {self.domain.describe()}) on "
                  f"{case.describe()}")
        if findings:
            fail_citing(header + "\n" + "\n".join("  " + f.render() for f in findings), findings)
        self.tally.checks += 1
        self.tally.groups += int(np.prod(self.shape_of(case))) // 16
        diagnosis = diagnose_rht(case, observed, self.domain)
        if not diagnosis.ok:
            fail_citing("\n".join([header] + diagnosis.render()), diagnosis.findings)
        return observed
