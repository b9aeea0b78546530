"""How a suite test runs one activation case on the backend under test and judges it (the
activation kind).

:meth:`ActivationChecker.check`

1. skips, with the reason, a test about a recipe or a global-scale mode the backend does not
   declare;
2. brings the case into the backend's declared dtypes (exactly for a construction, rounded for
   the generated data, which is then judged as rounded) and hands the global scale over in the
   declared convention (g, or a = 1/g: the suite's scales read back, so both mean one scale);
3. runs ``backend.quantize_activations(x, global_scale)`` (an exception on valid input fails
   the test as an error, citing no clause);
4. reads the result as declared (``hscale.judge.activation_domain``) and judges it under the
   declared recipe (``hscale.judge.activations``), failing with the findings.
"""

from __future__ import annotations

import numpy as np
import pytest

from hscale.conformance.checker import Tally, fail_citing, fail_raised
from hscale.judge.activation_domain import ActivationDomain, observe_activations
from hscale.judge.activations import ActivationCase, diagnose_activations
from hscale.judge.builders import exact
from hscale.judge.cases import CaseError
from hscale.reference.constants import GROUP_SIZE


class ActivationChecker:
    def __init__(self, backend, label: str, domain: ActivationDomain, tally: Tally | None = None,
                 test: str = ""):
        self.backend = backend
        self.label = label
        self.domain = domain
        self.tally = tally if tally is not None else Tally()
        self.test = test

    @classmethod
    def for_test(cls, request, backend, entry, state) -> "ActivationChecker":
        """The checker of one suite test (``hscale.judge.kinds``: the activation kind's
        fixture; its domain built once, from the checked declarations)."""
        return cls(backend, entry.id, entry.declared.domains["activation"],
                   entry.tally_of("activation"), test=request.node.nodeid)

    @property
    def recipe(self) -> str:
        return self.domain.recipe

    # -- what the backend declares ------------------------------------------------------------
    def require_recipe(self, recipe: str):
        if self.domain.recipe != recipe:
            pytest.skip(f"backend {self.label!r} declares the recipe {self.domain.recipe!r}; "
                        f"this test judges the recipe {recipe!r}")

    def require_mode(self, mode: str):
        if mode not in self.domain.modes:
            pytest.skip(f"backend {self.label!r} does not declare the {mode} global scale (it "
                        f"declares {', '.join(self.domain.modes)})")

    def require_dtype(self, dtype):
        if not self.domain.accepts_dtype(dtype):
            pytest.skip(f"outside the declared domain: backend {self.label!r} takes "
                        f"{'/'.join(self.domain.dtypes)}, not {np.dtype(dtype).name}")

    def in_domain(self, case: ActivationCase, rounding: bool = False) -> ActivationCase:
        """The case in a dtype the backend takes: unchanged, converted exactly, or (data, not a
        construction) rounded; a construction no declared dtype holds skips."""
        x = np.asarray(case.x)
        if self.domain.accepts_dtype(x.dtype):
            return case
        for dtype in self.domain.numpy_dtypes:
            try:
                converted = exact(x.astype(np.float64), dtype)
            except CaseError:
                continue
            self.tally.adaptations[f"converted exactly to {np.dtype(dtype).name}"] += 1
            return ActivationCase(converted, case.global_scale, case.id, case.title,
                                  case.clauses, case.notes)
        if not rounding:
            pytest.skip(f"outside the declared domain: this construction is exact in "
                        f"{x.dtype.name}, not in {'/'.join(self.domain.dtypes)} "
                        f"(backend {self.label!r})")
        dtype = self.domain.numpy_dtypes[0]
        import ml_dtypes
        top = float(ml_dtypes.finfo(dtype).max)
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = np.where(np.isfinite(x), np.clip(x.astype(np.float64), -top, top),
                               x.astype(np.float64)).astype(dtype)
        self.tally.adaptations[f"rounded to {np.dtype(dtype).name}"] += 1
        return ActivationCase(rounded, case.global_scale, case.id, case.title, case.clauses,
                              case.notes)

    # -- running ------------------------------------------------------------------------------
    def call(self, case: ActivationCase):
        """The backend's raw result for ``case`` (already in its domain)."""
        given = None if case.global_scale is None else self.domain.given_scale(case.global_scale)
        return self.backend.quantize_activations(case.x, given)

    def run(self, case: ActivationCase, rounding: bool = False):
        """``(the case as run, its result read)``."""
        if case.global_scale is None:
            self.require_mode("dynamic")
        else:
            self.require_mode("static")
        case = self.in_domain(case, rounding)
        try:
            raw = self.call(case)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, case, error)
        observed, findings = observe_activations(raw, case.shape, self.domain)
        if findings:
            fail_citing(self._header(case) + "\n"
                        + "\n".join("  " + f.render() for f in findings), findings)
        return case, observed

    def check(self, case: ActivationCase, rounding: bool = False):
        """Run and judge one case under the declared recipe; returns what the backend
        produced, read."""
        case, observed = self.run(case, rounding)
        self.tally.checks += 1
        self.tally.groups += int(np.prod(case.shape)) // GROUP_SIZE
        diagnosis = diagnose_activations(case, observed, self.domain.recipe)
        if not diagnosis.ok:
            fail_citing("\n".join([self._header(case)] + diagnosis.render(case)),
                        diagnosis.findings)
        return observed

    def _header(self, case: ActivationCase) -> str:
        return (f"backend {self.label!r} does not conform (activation recipe "
                f"{self.domain.recipe}) on {case.describe()}")
