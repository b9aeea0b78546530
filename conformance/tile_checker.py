"""How a suite test runs one case on a kernel of the tile kind (docs/spec.md section 13):
``backend.quantize_2d(w)`` judged bit for bit (``hscale.judge.tiles.diagnose_2d``), and, with
:meth:`TileChecker.check_transpose`, its result for ``W^T`` against its own for ``W``
transposed (NVFP4-2D-2)."""

from __future__ import annotations

import numpy as np

from hscale.conformance.checker import Tally, fail_citing, fail_raised
from hscale.judge.tiles import TileCase, diagnose_2d, observe_2d, transpose_findings


class TileChecker:
    def __init__(self, backend, label: str, tally: Tally | None = None, test: str = ""):
        self.backend = backend
        self.label = label
        self.tally = tally if tally is not None else Tally()
        self.test = test

    @classmethod
    def for_test(cls, request, backend, entry, state) -> "TileChecker":
        return cls(backend, entry.id, entry.tally_of("tile"), test=request.node.nodeid)

    def _header(self, case: TileCase) -> str:
        return f"backend {self.label!r} does not conform (tile, 16 x 16) on {case.describe()}"

    def run(self, case: TileCase):
        try:
            raw = self.backend.quantize_2d(case.w)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, case, error)
        observed, findings = observe_2d(raw, np.shape(case.w))
        if findings:
            fail_citing(self._header(case) + "\n"
                        + "\n".join("  " + f.render() for f in findings), findings)
        return observed

    def check(self, case: TileCase):
        observed = self.run(case)
        self.tally.checks += 1
        self.tally.groups += int(np.prod(np.shape(case.w))) // 16
        diagnosis = diagnose_2d(case, observed)
        if not diagnosis.ok:
            fail_citing("\n".join([self._header(case)] + diagnosis.render()),
                        diagnosis.findings)
        return observed

    def check_transpose(self, case: TileCase):
        of_w = self.run(case)
        flipped = TileCase(np.ascontiguousarray(np.asarray(case.w).T), case.id + "-T",
                           f"{case.title}, transposed")
        of_wt = self.run(flipped)
        findings = transpose_findings(of_w, of_wt)
        if findings:
            fail_citing(self._header(case) + " and its transpose\n"
                        + "\n".join("  " + f.render() for f in findings), findings)
