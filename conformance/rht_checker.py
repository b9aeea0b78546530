"""How a suite test runs one case on a kernel of the rht kind and judges it (docs/spec.md
section 12): ``backend.quantize_rht(x)`` on the case's input in a dtype the kernel takes, its
result read (``hscale.judge.rht.observe_rht``) and judged bit for bit under the declared sign
mask, profile and axis (``diagnose_rht``), failing with the findings, each naming its clause."""

from __future__ import annotations

import numpy as np

from hscale.conformance.checker import Tally, fail_citing, fail_raised
from hscale.judge.rht import RhtCase, RhtDomain, diagnose_rht, observe_rht


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
        rows, n = np.shape(case.x)
        return (n, rows) if self.domain.axis == "columnwise" else (rows, n)

    def check(self, case: RhtCase):
        try:
            raw = self.backend.quantize_rht(case.x)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, case, error)
        observed, findings = observe_rht(raw, self.shape_of(case))
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
