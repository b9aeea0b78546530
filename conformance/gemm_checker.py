"""How a suite test runs one GEMM case on a kernel of the gemm kind and judges it.

Every GEMM test builds a :class:`~hscale.judge.cases.GemmCase` and hands it to
:meth:`GemmChecker.check`, which

1. skips, with a reason, when the backend does not declare what the case needs: the gemm kind,
   the first operand (NVFP4, or activations of a dtype, or Q8_0 blocks), the output dtype;
2. brings the case into the declared domain (``GemmDomain``): shapes padded to the declared
   multiples with zero rows and zero blocks (which add no term) and the result cropped back;
3. runs ``backend.gemm(a, b, out_dtype=...)`` with the operands as a kernel receives them
   (packed codes, scale bytes in the declared layout, the global scale); an exception on valid
   input fails the test as an error, citing no clause;
4. reads the result (``observe_gemm``) and judges it under the declared accumulation model
   (``judge_gemm``), failing with the findings, each naming its clause.
"""

from __future__ import annotations

import numpy as np
import pytest

from hscale.conformance.checker import GemmTally, fail_citing, fail_raised
from hscale.judge.cases import GemmCase
from hscale.judge.findings import Finding
from hscale.judge.gemm import GemmDomain, gemm_arguments, judge_gemm, observe_gemm


def declares_gemm(backend) -> bool:
    """Whether the backend declares the gemm kind (``kinds``; absent means weight only)."""
    return "gemm" in frozenset(getattr(backend, "kinds", None) or {"weight"})


class GemmChecker:
    def __init__(self, backend, label: str, tally: GemmTally | None = None, test: str = "",
                 domain: GemmDomain | None = None):
        self.backend = backend
        self.label = label
        self.tally = tally if tally is not None else GemmTally()
        self.test = test
        if not declares_gemm(backend):
            pytest.skip(f"backend {label!r} does not declare the gemm kind (its kinds: "
                        f"{', '.join(sorted(getattr(backend, 'kinds', None) or {'weight'}))})")
        if domain is None:
            try:
                domain = GemmDomain.of(backend, f"backend {label!r}")
            except ValueError as exc:
                pytest.fail(f"{exc} (the gemm kind's declarations, docs/backends.md)",
                            pytrace=False)
        self.domain = domain
        self.model = self.domain.model
        self.last_observed = None

    @classmethod
    def for_test(cls, request, backend, entry, state) -> "GemmChecker":
        """The checker of one suite test (``hscale.judge.kinds``: the gemm kind's fixture; its
        domain built once, when the backend was loaded)."""
        return cls(backend, entry.id, entry.tally_of("gemm"), test=request.node.nodeid,
                   domain=entry.declared.domains.get("gemm"))

    def fail(self, clause: str, text: str, case: GemmCase | None = None, output=None):
        """A spec-speaking failure for a test's own check (a value worked by hand), citing
        ``clause`` at the ``output`` element (i, j)."""
        finding = Finding(clause, text, output=output)
        where = f" on {case.describe()}" if case is not None else ""
        fail_citing(f"backend {self.label!r}{where}\n  {finding.render()}", [finding])

    # -- what the backend declares ----------------------------------------------------------
    def require(self, activations: str = "nvfp4", out_dtype: str | None = None):
        """Skip a test of a first operand or output dtype the backend does not declare."""
        if activations not in self.domain.activations:
            pytest.skip(f"backend {self.label!r} takes {'/'.join(self.domain.activations)} "
                        f"as the GEMM's first operand, not {activations}")
        if out_dtype is not None and out_dtype not in self.domain.out_dtypes:
            pytest.skip(f"backend {self.label!r} outputs {'/'.join(self.domain.out_dtypes)}, "
                        f"not {out_dtype}")

    @property
    def out_dtypes(self) -> tuple[str, ...]:
        return self.domain.out_dtypes

    def out_dtype(self, preferred: str = "float32") -> str:
        """``preferred`` if the backend outputs it, else the first output dtype it declares."""
        return preferred if preferred in self.domain.out_dtypes else self.domain.out_dtypes[0]

    def in_domain(self, case: GemmCase) -> GemmCase:
        """The case as the backend can take it (``GemmDomain.in_domain``); a test about a
        first operand or an output dtype it does not declare skips, saying why."""
        adapted, done = self.domain.in_domain(case)
        if adapted is None:
            pytest.skip(f"backend {self.label!r} {done[0]}")
        for how in done:
            self.tally.adaptations[how] += 1
        return adapted

    def run(self, case: GemmCase) -> tuple[GemmCase, np.ndarray]:
        """``(the case as run, the result as float64)``, structure checked."""
        run_case = self.in_domain(case)
        a, b = gemm_arguments(run_case, self.domain)
        try:
            raw = self.backend.gemm(a, b, out_dtype=run_case.out_dtype)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, run_case, error)
        observed, findings = observe_gemm(raw, run_case)
        if findings:
            fail_citing(self._header(run_case) + "\n" +
                        "\n".join("  " + f.render() for f in findings), findings)
        self.last_observed = observed
        return run_case, observed

    def check(self, case: GemmCase) -> np.ndarray:
        """Run and judge ``case``; returns the result (float64 values of the output dtype),
        cropped to the case's own shape."""
        run_case, observed = self.run(case)
        diagnosis = judge_gemm(run_case, observed, self.model, self.domain)
        self.tally.checks += 1
        self.tally.elements += diagnosis.elements
        self.tally.exact += diagnosis.exact
        self.tally.not_judged.update(diagnosis.not_judged)
        if diagnosis.vacuous:
            self.tally.vacuous += diagnosis.vacuous
            k = run_case.shape[2]
            self.tally.vacuous_k = min(self.tally.vacuous_k or k, k)
        if not diagnosis.ok:
            fail_citing("\n".join([self._header(run_case)] + diagnosis.render()),
                        diagnosis.findings)
        m, n, _ = case.shape
        return observed[:m, :n]

    def _header(self, case: GemmCase) -> str:
        return (f"backend {self.label!r} does not conform (gemm, {self.model.describe()}) on "
                f"{case.describe()}")
