"""How a suite test runs one case on the backend under test and judges it.

Every test builds a :class:`~hscale.judge.cases.Case` and hands it to
:meth:`Checker.check`, which

1. skips, with a reason naming the capability, when the backend does not declare the method or
   the init the case needs;
2. brings the case into the backend's declared domain (``hscale.judge.domain``): another input
   dtype (exactly, or rounded for the data sets, whose expected outputs are then recomputed),
   shapes padded to its multiples (and the result cropped back); a construction that cannot
   be expressed there skips with the reason;
3. runs the backend (an exception on valid input fails the test as an error, citing no clause:
   nothing was judged);
4. turns its result into the one result record (``diagnose.observe``: any object with scale
   bytes in the declared layout, a global scale in the declared convention, and packed codes or
   codes);
5. judges it with the one diagnoser (``diagnose.diagnose``) under the session's profile, and
   fails with the diagnoser's findings, each naming the allowance that would excuse it.

Bad input: :meth:`Checker.expect_rejection`, the input contract. A rejection (ValueError or
TypeError) is credited only when the same call with the bad input repaired (``control``) is
accepted: a backend that rejects both rejected something else. What the backend does with each
bad input is recorded for the certificate; it fails the test only under ``--strict-inputs``,
or for this project's own backends, which must also name the argument, the first offending
index and the clause (as any backend must under ``--strict-errors``).
"""

from __future__ import annotations

import re
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from hscale.conformance.certificate import RAISED_ON_VALID_INPUT
from hscale.judge.cases import Case
from hscale.judge.diagnose import (GROUP, diagnose, excusing_allowances,
                                  name_excusing_allowances, observe)
from hscale.judge.findings import Finding
from hscale.judge.domain import Domain, is_weight_dtype
from hscale.judge.independent import nearest_reciprocal_read_back
from hscale.judge.profiles import EXACT
from hscale.reference import QuantizedWeight

#: Modules whose backends speak this project's error messages (NVFP4-IN-*): the built-in
#: backends and the mutants, not the adapters of real libraries (hscale.backends.interop), which
#: are judged as any third party is.
OWN_BACKEND_MODULES = ("hscale.backends.", "hscale.conformance.mutants", "conformance.mutants")
THIRD_PARTY_MODULES = ("hscale.backends.interop.",)


class CitedFailure(pytest.fail.Exception):
    """A test's failure with the findings it cites, as records: the plugin hands them to the
    certificate (``findings_of``), which counts the failure against their clauses; the message
    is only for people."""

    def __init__(self, message: str, findings):
        super().__init__(msg=message, pytrace=False)
        self.findings = tuple(findings)


def fail_citing(message: str, findings) -> None:
    """Fail the test with ``message``, citing ``findings`` (Finding records)."""
    raise CitedFailure(message, findings)


def findings_of(error: BaseException | None) -> list[Finding]:
    """The findings a failed test's exception carries: its own, those of the exceptions it
    groups (a Hypothesis test with several distinct failures), and of its cause."""
    found, seen, stack = [], set(), [error]
    while stack:
        current = stack.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        found.extend(getattr(current, "findings", ()))
        stack.extend(getattr(current, "exceptions", ()) or ())
        stack.append(current.__cause__)
    return found


def fail_raised(label: str, case, error: Exception) -> None:
    """Fail the test: the backend raised on a valid input (an error, not a finding), with the
    case and where it raised."""
    where = traceback.extract_tb(error.__traceback__)[-1]
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    failure = pytest.fail.Exception(
        f"backend {label!r} {RAISED_ON_VALID_INPUT} (an error, not a finding: nothing was "
        f"judged)\n  case: {case.describe()}\n  {text}\n  (at {where.filename}:{where.lineno})",
        pytrace=False)
    raise failure from None  # the message says it all: no chained traceback of the error


@dataclass
class Tally:
    """Per-backend, per-kind counts that go into the certificate: the common ones (summed over
    the kinds into the certificate's top level) and, through ``section()``, the kind's own part
    of its certificate section (``hscale.judge.kinds``: each row names its tally)."""

    allowance_uses: Counter = field(default_factory=Counter)
    allowances_needed: Counter = field(default_factory=Counter)  # findings each would excuse
    tolerance_uses: int = 0
    checks: int = 0
    groups: int = 0
    adaptations: Counter = field(default_factory=Counter)  # how cases entered the domain
    contract: list = field(default_factory=list)  # one entry per bad input tried

    def section(self) -> dict:
        """What the kind's certificate section adds to its verdict and clauses (none here)."""
        return {}

    @classmethod
    def merged(cls, tallies) -> "Tally":
        """The common counts of several kinds' tallies, summed (the certificate's top level)."""
        total = cls()
        for tally in tallies:
            total.allowance_uses.update(tally.allowance_uses)
            total.allowances_needed.update(tally.allowances_needed)
            total.tolerance_uses += tally.tolerance_uses
            total.checks += tally.checks
            total.groups += tally.groups
            total.adaptations.update(tally.adaptations)
            total.contract.extend(tally.contract)
        return total


@dataclass
class GemmTally(Tally):
    """The gemm kind's counts: output elements judged, bit for bit or by interval."""

    elements: int = 0  # output elements judged
    exact: int = 0  # of them, with one admissible value (judged bit for bit)
    not_judged: Counter = field(default_factory=Counter)  # reason -> elements
    vacuous: int = 0  # judged by a bound that admits anything within sum |t_k| of S
    # the smallest K of a GEMM where it did (0: none); two workers' values meet at the smaller
    vacuous_k: int = field(default=0, metadata={"merge": lambda a, b: min(a or b, b or a)})

    def as_json(self) -> dict:
        return {"gemms": self.checks, "output_elements_judged": self.elements,
                "of_them_with_one_admissible_value": self.exact,
                "of_them_with_a_vacuous_bound": self.vacuous,
                "not_judged": dict(self.not_judged), "adaptations": dict(self.adaptations)}

    def vacuous_note(self) -> str:
        """What the verdict of a model whose bound said nothing useful must say ('' if none)."""
        if not self.vacuous:
            return ""
        return (f"{self.vacuous} output elements judged only by a vacuous bound (the declared "
                f"accumulator's (1 + u)^d - 1 >= 1 from K = {self.vacuous_k} here: anything "
                "within sum |t_k| of S is admitted, NVFP4-GEMM-4)")

    def describe(self) -> str:
        text = (f"{self.checks} GEMMs, {self.elements} output elements judged ({self.exact} "
                "with one admissible value, bit for bit)")
        if self.vacuous:
            text += f"; {self.vacuous_note()}"
        if self.not_judged:
            text += "; not judged: " + "; ".join(f"{n} ({reason})"
                                                 for reason, n in self.not_judged.items())
        return text

    def section(self) -> dict:
        section = {"outputs": self.as_json(), "outputs_text": self.describe()}
        if self.vacuous:  # the verdict says what it could not tell (issue 39)
            section["verdict_note"] = self.vacuous_note()
        return section


def is_reference_backend(backend) -> bool:
    """The built-in numpy backend *is* the reference: comparing the two proves nothing, so its
    results are certified by the independent statement of the spec instead."""
    return type(backend).__module__ == "hscale.backends.numpy_backend"


def is_own_backend(backend) -> bool:
    module = type(backend).__module__
    return module.startswith(OWN_BACKEND_MODULES) and not module.startswith(THIRD_PARTY_MODULES)


class Checker:
    def __init__(self, backend, label: str, profile: str = EXACT, allowances=(),
                 tally: Tally | None = None, clauses=(), strict_errors: bool | None = None,
                 domain: Domain | None = None, strict_inputs: bool = False, test: str = "",
                 in_hypothesis: bool = False):
        self.backend = backend
        self.label = label
        self.profile = profile
        self.allowances = frozenset(allowances)
        self.tally = tally if tally is not None else Tally()
        self.clauses = tuple(clauses)
        self.capabilities = frozenset(getattr(backend, "capabilities", ()))
        self.domain = domain if domain is not None else Domain.of(backend, label)
        self.convention = self.domain.global_scale_convention
        self.strict_errors = is_own_backend(backend) if strict_errors is None else strict_errors
        self.strict_inputs = strict_inputs
        self.test = test
        self.in_hypothesis = in_hypothesis  # a Hypothesis test: out-of-domain draws are rejected
        self.deferred: list[tuple[str, list]] = []  # (message, findings) kept for the end
        self.needed: Counter = Counter()  # allowances this test's findings need
        self.raw = None  # what the backend returned for the last case, as returned
        self.last_case = None  # the last case as the backend received it (in its domain)
        self.last_observed = None  # its result record, whole (before cropping)

    @classmethod
    def for_test(cls, request, backend, entry, state) -> "Checker":
        """The checker of one suite test (``hscale.judge.kinds``: the weight kind's fixture)."""
        marker_ids = [c for m in request.node.iter_markers("clause") for c in m.args]
        strict = True if request.config.getoption("strict_errors") else None
        return cls(backend, entry.id, state.profile, state.allowances, entry.tally_of("weight"),
                   marker_ids, strict_errors=strict, domain=entry.declared.domains["weight"],
                   strict_inputs=state.strict_inputs, test=request.node.nodeid,
                   in_hypothesis=bool(getattr(request.function, "is_hypothesis_test", False)))

    # -- capabilities and the domain ----------------------------------------------------------
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

    @property
    def dtypes(self) -> list[np.dtype]:
        """The input dtypes the backend declares, its preferred first."""
        return self.domain.dtypes

    def require_dtype(self, dtype):
        """Skip a test about one input dtype the backend does not declare."""
        if not self.domain.accepts_dtype(dtype):
            pytest.skip(f"outside the declared domain: backend {self.label!r} takes "
                        f"{'/'.join(self.domain.input_dtypes)}, not {np.dtype(dtype).name}")

    def in_domain(self, case: Case, rounding: bool = False) -> Case:
        """``case`` as the backend can take it (see the module docstring)."""
        weight = np.asarray(case.weight)
        if weight.ndim != 2 or not (weight.dtype.kind == "f" or is_weight_dtype(weight.dtype)):
            return case
        hows = []
        ceilings = self.domain.scale_ceilings
        if ceilings is not None and case.global_scale is not None and \
                float(case.scale_ceiling) not in ceilings:
            # with s_g given, C enters nothing (NVFP4-GS-3): the kernel gets its own ceiling
            case = case.with_(scale_ceiling=ceilings[0])
            hows.append(f"scale ceiling set to {ceilings[0]:g} (s_g given: C changes nothing)")
        if ceilings is not None and case.global_scale is None and \
                float(case.scale_ceiling) not in ceilings:
            if not (rounding or self.in_hypothesis):  # a construction, not data
                self.leave_out(f"outside the declared domain: backend {self.label!r} takes the "
                               f"scale ceiling {'/'.join(f'{c:g}' for c in ceilings)} only, this "
                               f"construction needs C = {float(case.scale_ceiling):g}",
                               "another scale ceiling")
            case = case.with_(scale_ceiling=ceilings[0])
            hows.append(f"scale ceiling set to {ceilings[0]:g}")
        converted, how = self.domain.weight_in_domain(weight, rounding)
        if converted is None:
            self.leave_out(f"outside the declared domain: this construction is exact in "
                           f"{weight.dtype.name}, not in {'/'.join(self.domain.input_dtypes)} "
                           f"(backend {self.label!r})", "not exact in the declared dtypes")
        why = self.domain.outside_magnitudes(converted, case.global_scale, case.scale_ceiling)
        if why:
            self.leave_out(f"outside the declared domain: {why}",
                           "s_g outside the declared range" if why.startswith("s_g") else
                           "a group maximum below the declared minimum")
        hows += [how] if how else []
        h = case.hessian_diag
        if any(self.domain.padding(converted.shape)):
            converted, h = self.domain.pad_weight(converted, h)
            hows.append(f"padded to multiples of {self.domain.shape_multiple[0]} x "
                        f"{self.domain.shape_multiple[1]}")
        if not hows:
            return case
        self.tally.adaptations["; ".join(hows)] += 1
        return case.with_(weight=converted, hessian_diag=h,
                          title=f"{case.title or case.id} ({'; '.join(hows)})")

    def leave_out(self, reason: str, what: str):
        """A case outside the declared domain: skipped with the reason, or, drawn by
        Hypothesis, rejected (another example is drawn) and counted in the certificate under
        ``what``."""
        if self.in_hypothesis:
            import hypothesis
            self.tally.adaptations[f"generated, outside the declared domain: {what}"] += 1
            hypothesis.reject()
        pytest.skip(reason)

    # -- running ------------------------------------------------------------------------------
    def run(self, case: Case, rounding: bool = False):
        """``(the case as run, the backend's result as the one result record)``."""
        self.require(case.method, case.init)
        case = self.in_domain(case, rounding)
        args, kwargs = case.call_args()
        try:
            raw = self.backend.quantize(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - any exception on valid input fails the test
            fail_raised(self.label, case, error)
        self.raw, self.last_case = raw, case
        observed, findings = observe(raw, case, self.convention, self.domain.scale_layout)
        if findings:
            fail_citing(self._header(case) + "\n" +
                        "\n".join("  " + f.render() for f in findings), findings)
        self.last_observed = observed
        return case, observed

    def quantize(self, case: Case, rounding: bool = False):
        """The backend's result for ``case`` as the one result record (structure checked),
        cropped back to the case's own shape."""
        _, observed = self.run(case, rounding)
        return crop(observed, case.shape)

    def check(self, case: Case, result=None, independent_check: bool | None = None,
              rounding: bool = False):
        """Run (unless ``result`` is given) and judge one case; returns the result record,
        cropped to the case's shape. ``rounding``: a data-set case (not a construction) may be
        rounded into the backend's input dtype."""
        if result is None:
            case_run, observed = self.run(case, rounding)
        else:
            case_run, observed = case, result
        self.tally.checks += 1
        self.tally.groups += int(np.prod(case_run.shape)) // GROUP
        profile, check_independently = self.profile, independent_check
        if is_reference_backend(self.backend) and profile == EXACT:
            check_independently = True  # the tautology guard, see is_reference_backend
        diagnosis = diagnose(case_run, observed, profile=profile, allowances=self.allowances,
                             independent_check=check_independently, name_allowances=True)
        self.tally.allowance_uses.update(diagnosis.allowance_uses)
        self.tally.tolerance_uses += diagnosis.tolerance_uses
        if not diagnosis.ok:
            self.fail_or_defer("\n".join([self._header(case_run)] + diagnosis.render(case_run)),
                               diagnosis.excused_by, diagnosis.findings)
        return crop(observed, case.shape)

    def fail_or_defer(self, message: str, excused_by, findings=()):
        """Fail the test with ``message``; or, in a Hypothesis test whose every finding one more
        allowance (or the faithful profile) would excuse, keep drawing examples: the allowances
        every example needs are counted, and the test fails when it ends, with all of them
        (``deferred_report``). So one run names every allowance a kernel needs, where
        Hypothesis alone stops at a test's first failure. ``excused_by``: per finding, what
        would excuse it (``hscale.judge.diagnose.excusing_allowances``; None: unknown);
        ``findings``: the records the failure cites."""
        needed = [names[0] for names in (excused_by or ()) if names]
        self.tally.allowances_needed.update(needed)
        self.needed.update(needed)
        if self.in_hypothesis and excused_by and all(excused_by):
            self.deferred.append((message, list(findings)))
            return
        fail_citing(message, findings)

    def deferred_report(self) -> tuple[str, list] | None:
        """``(message, findings)``: the failure of a test whose examples were kept drawing
        (None: none deferred)."""
        if not self.deferred:
            return None
        needed = ", ".join(f"{name} ({n})" for name, n in self.needed.most_common())
        more = len(self.deferred) - 1
        message, findings = self.deferred[0]
        return (message + (f"\n  ... and {more} more generated examples" if more else "")
                + f"\n  every example of this test together needs: {needed}", findings)

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

    # -- bad input: the input contract --------------------------------------------------------
    def expect_rejection(self, clause: str, argument: str, index, call, what: str = "",
                         control=None):
        """``call(backend)`` must raise ValueError or TypeError, and ``control(backend)`` (the
        same call with the bad input repaired) must not: only then is the rejection the one the
        test is about. Under strict errors the message names ``argument``, ``index`` (the first
        offending one, or None) and ``clause``. The outcome goes into the certificate's input
        contract; a bad input accepted, or rejected for another reason, fails the test only
        under ``--strict-inputs`` or strict errors, else it is recorded (pytest shows xfail)."""
        what = what or f"bad {argument}"
        record = {"test": self.test, "clause": clause, "input": what, "judged": True}
        try:
            call(self.backend)
        except (ValueError, TypeError) as exc:
            text = f"{type(exc).__name__}: {exc}"
            if control is not None:
                try:
                    control(self.backend)
                except Exception as other:  # noqa: BLE001 - the control's failure is the finding
                    record.update(outcome="rejected for another reason",
                                  detail=f"{text}; the same call with the bad input repaired is "
                                         f"rejected too: {type(other).__name__}: {other}")
                    return self._contract(record, clause)
            if self.strict_errors:
                missing = []
                if argument not in str(exc):
                    missing.append(f"the argument name {argument!r}")
                if clause not in str(exc):
                    missing.append(f"the clause {clause}")
                if index is not None and not re.search(_index_re(index), str(exc)):
                    missing.append(f"the first offending index {list(index)}")
                if missing:
                    self.fail(clause, f"{type(exc).__name__} raised, but its message does not "
                              f"name {' and '.join(missing)}: {str(exc)!r}")
            record.update(outcome="rejected", detail=text)
            self.tally.contract.append(record)
            return
        except Exception as exc:  # noqa: BLE001
            record.update(outcome="rejected with the wrong error type",
                          detail=f"expected ValueError or TypeError naming {argument!r}, got "
                                 f"{type(exc).__name__}: {exc}")
            return self._contract(record, clause)
        record.update(outcome="accepted", detail="the spec rejects it")
        return self._contract(record, clause)

    def _contract(self, record: dict, clause: str):
        """A bad input not rejected as the spec says: recorded; fails under strict inputs."""
        self.tally.contract.append(record)
        message = f"input contract: {record['input']}: {record['outcome']} ({record['detail']})"
        if self.strict_inputs or self.strict_errors:
            self.fail(clause, message)
        pytest.xfail(message + "; reported in the certificate, judged with --strict-inputs")

    def note_contract(self, clause: str, what: str, accepted: bool, detail: str = ""):
        """An input whose acceptance the spec leaves to the implementation (an array-like in
        place of an array): recorded, never judged."""
        self.tally.contract.append({"test": self.test, "clause": clause, "input": what,
                                    "judged": False,
                                    "outcome": "accepted" if accepted else "rejected",
                                    "detail": detail})

    # -- hand-written expectations ------------------------------------------------------------
    def own_global_scale(self, spec_global_scale: float, case: Case) -> float:
        """The s_g a conforming result of this backend reads back as, when the spec's is
        ``spec_global_scale``: the same, unless the backend stores its own s_g as the reciprocal
        (NVFP4-GS-4: it quantizes with fp32(1/r), r = fp32(1/s_g))."""
        if self.convention != "reciprocal" or case.global_scale is not None:
            return spec_global_scale
        return nearest_reciprocal_read_back(spec_global_scale)

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

    def fail(self, clause: str, text: str, case: Case | None = None, observed=None,
             group=None):
        """A spec-speaking failure for checks made outside ``check`` (properties, layouts,
        the oracle). Given the result ``observed`` (for ``case``, at its shape) and the
        ``group`` (r, i) the failure is about, it names the allowance that would excuse it,
        and a Hypothesis test keeps drawing (``fail_or_defer``)."""
        where = f" on {case.describe()}" if case is not None else ""
        excused_by = None
        finding = Finding(clause, text, group)
        if observed is not None and case is not None:
            excused_by = excusing_allowances(case, observed, [finding], self.profile,
                                             self.allowances)
            finding = name_excusing_allowances(case, observed, [finding], self.profile,
                                               self.allowances, excused_by)[0]
        self.fail_or_defer(f"backend {self.label!r} does not conform (profile {self.profile})"
                           f"{where}\n  [{clause}] {finding.text}", excused_by, [finding])


def crop(observed: QuantizedWeight, shape) -> QuantizedWeight:
    """A result record cut back to ``shape`` (a case padded into the backend's domain)."""
    rows, cols = shape
    if observed.codes.shape == (rows, cols):
        return observed
    groups = cols // GROUP

    def cut(array, width):
        return None if array is None else np.ascontiguousarray(array[:rows, :width])

    # Every field cut or kept, the stored reciprocal global scale included: a cropped record
    # is diagnosed as the whole one is.
    return replace(observed, codes=cut(observed.codes, cols), packed=cut(observed.packed, cols // 2),
                   scale_bytes=cut(observed.scale_bytes, groups),
                   delta=cut(observed.delta, groups),
                   initial_bytes=cut(observed.initial_bytes, groups))


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
