"""How a suite test runs one case on a kernel of the stochastic kind and judges it
(docs/spec.md section 11).

:meth:`StochasticChecker.check` hands the kernel the case's values (or activations and global
scale) and its random words, reads what it returns (``hscale.judge.stochastic``) and judges it
bit for bit under the declared scaling and routing, failing with the findings, each naming its
clause. A kernel whose random stream is hidden is judged by :meth:`acceptance` (NVFP4-SR-6)
instead; a test of bits given skips for it, and the acceptance test for a kernel that takes the
bits (it is judged bit for bit, which says more).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from hscale.conformance.checker import Tally, fail_citing, fail_raised
from hscale.judge.stochastic import (StochasticCase, StochasticDomain, acceptance_values,
                                     diagnose_stochastic, every_byte_words, exhaustion_findings,
                                     judge_hidden, observe_stochastic)


@dataclass
class SRTally(Tally):
    """The stochastic kind's counts: elements judged bit for bit, values swept over all 256
    bytes, acceptance tests run."""

    elements: int = 0
    exhausted: int = 0
    acceptance_calls: int = 0

    def describe(self) -> str:
        return (f"{self.elements} elements judged bit for bit, {self.exhausted} values rounded "
                f"with each of the 256 bytes, {self.acceptance_calls} acceptance-test calls")

    def section(self) -> dict:
        return {"outputs": {"elements_bitwise": self.elements, "values_exhausted": self.exhausted,
                            "acceptance_calls": self.acceptance_calls},
                "outputs_text": self.describe()}


class StochasticChecker:
    def __init__(self, backend, label: str, domain: StochasticDomain, tally: SRTally | None = None,
                 test: str = ""):
        self.backend = backend
        self.label = label
        self.domain = domain
        self.tally = tally if tally is not None else SRTally()
        self.test = test

    @classmethod
    def for_test(cls, request, backend, entry, state) -> "StochasticChecker":
        return cls(backend, entry.id, entry.declared.domains["stochastic"],
                   entry.tally_of("stochastic"), test=request.node.nodeid)

    # -- what the kernel declares -----------------------------------------------------------
    def require_given(self):
        if self.domain.random_bits != "given":
            pytest.skip(f"backend {self.label!r} hides its random stream: judged by the "
                        "acceptance test (NVFP4-SR-6), not bit for bit")

    def require_hidden(self):
        if self.domain.random_bits != "hidden":
            pytest.skip(f"backend {self.label!r} takes the random bits: judged bit for bit, "
                        "which the acceptance test of a hidden stream only approximates")

    def require_scaling(self, *scalings: str):
        if self.domain.scaling not in scalings:
            pytest.skip(f"backend {self.label!r} declares the scaling {self.domain.scaling!r}; "
                        f"this test is of {' or '.join(scalings)}")

    # -- running ------------------------------------------------------------------------------
    def call(self, case: StochasticCase, seed=None):
        try:
            if seed is None:
                return self.backend.quantize_stochastic(case.x, case.global_scale,
                                                        random_bits=case.words)
            return self.backend.quantize_stochastic(case.x, case.global_scale, seed=seed)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, case, error)

    def run(self, case: StochasticCase, seed=None):
        observed, findings = observe_stochastic(self.call(case, seed), case.shape,
                                                self.domain.scaling)
        if findings:
            fail_citing(self._header(case) + "\n"
                        + "\n".join("  " + f.render() for f in findings), findings)
        return observed

    def check(self, case: StochasticCase):
        """Run ``case`` with its random words and judge every element bit for bit."""
        self.require_given()
        observed = self.run(case)
        self.tally.checks += 1
        diagnosis = diagnose_stochastic(case, observed, self.domain)
        self.tally.elements += diagnosis.elements
        if not diagnosis.ok:
            fail_citing("\n".join([self._header(case)] + diagnosis.render()),
                        diagnosis.findings)
        return observed

    def exhaust(self, values: np.ndarray, title: str):
        """NVFP4-SR-5: ``values`` rounded with each of the 256 words ``b * 0x01010101``."""
        self.require_given()
        self.require_scaling("none")
        codes = []
        for words in every_byte_words(values.shape):
            case = StochasticCase(values, words, None, title=title)
            codes.append(self.run(case).codes)
        self.tally.exhausted += values.size
        findings = exhaustion_findings(values, codes)
        if findings:
            fail_citing(f"backend {self.label!r} is biased ({title})\n"
                        + "\n".join("  " + f.render() for f in findings[:6]), findings)

    def acceptance(self, seeds=(1, 2)):
        """NVFP4-SR-6 on two calls with two seeds."""
        self.require_hidden()
        self.require_scaling("none")
        values = acceptance_values()
        first, second = (self.run(StochasticCase(values, None, None, title="acceptance test"),
                                  seed=seed).codes for seed in seeds)
        self.tally.acceptance_calls += 2
        findings = judge_hidden(first, second)
        if findings:
            fail_citing(f"backend {self.label!r} fails the acceptance test of a hidden stream "
                        f"(seeds {seeds})\n" + "\n".join("  " + f.render() for f in findings),
                        findings)

    def _header(self, case: StochasticCase) -> str:
        return (f"backend {self.label!r} does not conform (stochastic, {self.domain.describe()}) "
                f"on {case.describe()}")
