"""How a suite test runs one case on the backend under test and judges it.

Every test builds a :class:`~hscale.judge.cases.Case` and hands it to
:meth:`Checker.check`, which

1. skips, with a reason naming the capability, when the backend does not declare the method or
   the init the case needs;
2. runs the backend (an exception on valid input is a failure citing the test's clauses);
3. turns its result into the one result record (``diagnose.observe``: any object with scale
   bytes, a global scale in the backend's declared convention and packed codes or codes);
4. judges it with the one diagnoser (``diagnose.diagnose``) under the session's profile, and
   fails with the diagnoser's findings.

Bad input: :meth:`Checker.expect_rejection`. Every backend must reject it with ValueError or
TypeError; this project's own backends (and any backend under ``--strict-errors``) must also
name the argument, the first offending index and the clause.
"""

from __future__ import annotations

import re
import traceback
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

from hscale.judge.cases import Case
from hscale.judge.diagnose import GROUP, diagnose, observe
from hscale.judge.profiles import EXACT

#: Modules whose backends speak this project's error messages (NVFP4-IN-*).
OWN_BACKEND_MODULES = ("hscale.backends.", "hscale.conformance.mutants", "conformance.mutants")


@dataclass
class Tally:
    """Per-backend counts that go into the report."""

    allowance_uses: Counter = field(default_factory=Counter)
    tolerance_uses: int = 0
    checks: int = 0
    groups: int = 0


def is_reference_backend(backend) -> bool:
    """The built-in numpy backend *is* the reference: comparing the two proves nothing, so its
    results are certified by the independent statement of the spec instead."""
    return type(backend).__module__ == "hscale.backends.numpy_backend"


def is_own_backend(backend) -> bool:
    return type(backend).__module__.startswith(OWN_BACKEND_MODULES)


class Checker:
    def __init__(self, backend, label: str, profile: str = EXACT, allowances=(),
                 tally: Tally | None = None, clauses=(), strict_errors: bool | None = None):
        self.backend = backend
        self.label = label
        self.profile = profile
        self.allowances = frozenset(allowances)
        self.tally = tally if tally is not None else Tally()
        self.clauses = tuple(clauses)
        self.capabilities = frozenset(getattr(backend, "capabilities", ()))
        self.convention = getattr(backend, "global_scale_convention", "multiplier")
        self.strict_errors = is_own_backend(backend) if strict_errors is None else strict_errors

    # -- capabilities -------------------------------------------------------------------------
    def supports(self, method: str = "rtn", init: str = "maxabs") -> bool:
        return method in self.capabilities and (init == "maxabs" or init in self.capabilities)

    def require(self, *capabilities: str):
        for cap in capabilities:
            if cap != "maxabs" and cap not in self.capabilities:
                pytest.skip(f"backend {self.label!r} does not declare capability {cap!r} "
                            f"(it declares {', '.join(sorted(self.capabilities)) or 'none'})")

    def methods(self) -> list[str]:
        return [m for m in ("rtn", "scale-only", "hscale") if m in self.capabilities]

    def inits(self) -> list[str]:
        return ["maxabs"] + (["4over6"] if "4over6" in self.capabilities else [])

    # -- running ------------------------------------------------------------------------------
    def quantize(self, case: Case):
        """The backend's result for ``case`` as the one result record (structure checked)."""
        self.require(case.method, case.init)
        args, kwargs = case.call_args()
        try:
            raw = self.backend.quantize(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - any exception on valid input is a finding
            cited = " ".join(f"[{c}]" for c in self.clauses) or "[HSCALE-METHOD-1]"
            where = traceback.extract_tb(error.__traceback__)[-1]
            text = "".join(traceback.format_exception_only(type(error), error)).strip()
            pytest.fail(f"backend {self.label!r} raised on valid input {cited}\n"
                        f"  case: {case.describe()}\n  {text}\n  (at {where.filename}:"
                        f"{where.lineno})", pytrace=False)
        observed, findings = observe(raw, case, self.convention)
        if findings:
            pytest.fail(self._header(case) + "\n" +
                        "\n".join("  " + f.render() for f in findings), pytrace=False)
        return observed

    def check(self, case: Case, result=None, independent_check: bool | None = None):
        """Run (unless ``result`` is given) and judge one case; returns the result record."""
        observed = self.quantize(case) if result is None else result
        self.tally.checks += 1
        self.tally.groups += int(np.prod(case.shape)) // GROUP
        profile, check_independently = self.profile, independent_check
        if is_reference_backend(self.backend) and profile == EXACT:
            check_independently = True  # the tautology guard, see is_reference_backend
        diagnosis = diagnose(case, observed, profile=profile, allowances=self.allowances,
                             independent_check=check_independently)
        self.tally.allowance_uses.update(diagnosis.allowance_uses)
        self.tally.tolerance_uses += diagnosis.tolerance_uses
        if not diagnosis.ok:
            pytest.fail("\n".join([self._header(case)] + diagnosis.render(case)), pytrace=False)
        return observed

    def _header(self, case: Case) -> str:
        return (f"backend {self.label!r} does not conform (profile {self.profile}) on "
                f"{case.describe()}")

    def reported_delta(self, result) -> np.ndarray:
        """The result's delta (int8 (m, n/16)); a test about the reported shift skips for an
        implementation that does not report it."""
        if result.delta is None:
            pytest.skip(f"backend {self.label!r} does not report its initial bytes (delta), "
                        "which this test is about")
        return np.asarray(result.delta)

    # -- bad input ----------------------------------------------------------------------------
    def expect_rejection(self, clause: str, argument: str, index, call, what: str = ""):
        """``call(backend)`` must raise ValueError or TypeError; under strict errors its
        message names ``argument``, ``index`` (the first offending one, or None) and
        ``clause``."""
        try:
            call(self.backend)
        except (ValueError, TypeError) as exc:
            text = str(exc)
            if not self.strict_errors:
                return
            missing = []
            if argument not in text:
                missing.append(f"the argument name {argument!r}")
            if clause not in text:
                missing.append(f"the clause {clause}")
            if index is not None and not re.search(_index_re(index), text):
                missing.append(f"the first offending index {list(index)}")
            if missing:
                self.fail(clause, f"{type(exc).__name__} raised, but its message does not name "
                          f"{' and '.join(missing)}: {text!r}")
            return
        except Exception as exc:  # noqa: BLE001
            self.fail(clause, f"{what or 'bad ' + argument}: expected a ValueError or TypeError "
                      f"naming {argument!r}, got {type(exc).__name__}: {exc}")
        self.fail(clause, f"{what or 'bad ' + argument} accepted: the spec rejects it")

    # -- hand-written expectations ------------------------------------------------------------
    def expect(self, clause: str, what: str, expected, observed, case: Case | None = None,
               layout: str = "groups"):
        """A hand-written expectation of the spec (a table value, a byte, a code).

        Under ``exact`` it must hold bit for bit. Under the other profiles the diagnoser run by
        :meth:`check` is what decides (a faithful result may differ from the hand value within
        its allowances), so the expectation is not asserted. ``layout``: ``groups`` (indices
        (r, i)), ``elements`` (indices (r, col) -> group (r, col // 16) element j) or ``flat``.
        """
        if self.profile != EXACT:
            return
        expected = np.asarray(expected)
        observed = np.asarray(observed)
        if expected.shape == observed.shape and np.array_equal(expected, observed):
            if expected.dtype.kind != "f" or np.array_equal(np.signbit(expected), np.signbit(observed)):
                return
        if expected.shape != observed.shape:
            self.fail(clause, f"{what}: shape expected {expected.shape} observed {observed.shape}",
                      case)
        diff = np.argwhere((expected != observed)
                           | ((np.signbit(expected) != np.signbit(observed))
                              if expected.dtype.kind == "f" else False))
        lines = []
        for idx in diff[:5]:
            idx = tuple(int(v) for v in idx)
            e, o = expected[idx], observed[idx]
            if layout == "groups" and len(idx) == 2:
                where = f"group (r={idx[0]}, i={idx[1]})"
            elif layout == "elements" and len(idx) == 2:
                where = f"group (r={idx[0]}, i={idx[1] // GROUP}) element j={idx[1] % GROUP}"
            else:
                where = f"index {idx}"
            lines.append(f"{where}: expected {_hexval(e)} observed {_hexval(o)}")
        more = f"\n  ... and {len(diff) - 5} more" if len(diff) > 5 else ""
        self.fail(clause, f"{what}:\n    " + "\n    ".join(lines) + more, case)

    def fail(self, clause: str, text: str, case: Case | None = None):
        """A spec-speaking failure for checks made outside ``check`` (properties, layouts)."""
        where = f" on {case.describe()}" if case is not None else ""
        pytest.fail(f"backend {self.label!r} does not conform (profile {self.profile}){where}\n"
                    f"  [{clause}] {text}", pytrace=False)


def _index_re(index) -> str:
    inner = r"\s*,\s*".join(str(i) for i in index)
    return r"[\[\(]\s*" + inner + r"\s*,?\s*[\]\)]"


def _hexval(v) -> str:
    v = np.asarray(v)
    if v.dtype == np.int8:
        return f"{int(v):+d}"
    if v.dtype.kind in "iu":
        return f"0x{int(v):02X}"
    if v.dtype == np.float32:
        return f"{float(v)!r} (0x{int(v.view(np.uint32)):08X})"
    return f"{float(v)!r} ({float(v).hex()})"
