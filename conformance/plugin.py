"""The conformance suite's pytest plugin, registered through the ``pytest11`` entry point
``hscale.conformance.plugin`` (pyproject.toml), so that an installed kit runs from anywhere:

    pytest --pyargs hscale.conformance --backend mypkg.adapter:create --certificate cert.json
    hscale conform --backend mypkg.adapter:create --certificate cert.json      (the same)

Options (docs/conformance.md):

--backend NAME            built-in (numpy, torch, torch-cuda, cupy) or package.module:factory;
                          repeatable; default: every built-in that can run here (the others are
                          left out, one line says which and why). A backend
                          named here must be able to run, or the session stops with its reason
                          (unless --allow-unavailable)
--allow-unavailable       let a named backend that cannot run here skip instead
--profile exact|faithful|format
                          exact: bit-identical to hscale.reference; faithful: certificate with
                          allowances; format: the format clauses only (own scale rules)
--allow NAME              an allowance of the faithful / format profile (repeatable)
--clause ID               run only the tests and vector cases of this clause (repeatable)
--kind NAME               run only the tests of this kind (weight, gemm, activation, ...;
                          repeatable); a backend's tests of a kind it does not declare are
                          deselected in every run
--strict-inputs           the input contract (which bad inputs are rejected) decides the
                          verdict too; by default it is reported beside the numerics verdict
--strict-errors           require every backend's rejections to name the argument, the index
                          and the clause (always required of this project's own backends)
--certificate PATH        the certificate, JSON (default ./reports/conformance-<backend>.json;
                          '{backend}' in PATH is replaced by the backend id);
                          --conformance-report is the same option
--hypothesis-profile      Hypothesis' own option: dev, ci (derandomized), thorough

The plugin is loaded into every pytest session of an environment where the kit is installed,
but it acts only in a session that runs the suite (``--backend`` given, or the suite's
directory among the session's arguments); elsewhere it only registers its options.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from hscale.conformance import certificate as cert
from hscale.conformance import parallel
from hscale.conformance.checker import Tally, findings_of
from hscale.judge.activations import judged_under
from hscale.judge.clauses import clause_ids, is_known
from hscale.judge.domain import Domain
from hscale.judge.kinds import (DEFAULT_KINDS, JUDGED_ELSEWHERE, KINDS, Declared, declared_kinds,
                                kind_of_test, resolve)
from hscale.judge.options import suite_options
from hscale.judge.profiles import check_profile, check_profile_applies

SUITE_DIR = Path(__file__).resolve().parent

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
    declared: Declared = field(default_factory=lambda: Declared(DEFAULT_KINDS, {}))
    #: kind -> the counts its checker keeps (the class its row of hscale.judge.kinds names)
    tallies: dict = field(default_factory=dict)
    report: dict | None = None  # the certificate, once written
    report_path: str = ""

    @property
    def version(self) -> str:
        try:
            return str(self.backend.version) if self.backend is not None else "-"
        except Exception as exc:  # noqa: BLE001
            return f"<version raised {exc!r}>"

    @property
    def domain(self) -> Domain:
        """The weight kind's declared domain (the certificate's ``domain``); the default domain
        of a backend that is no weight quantizer."""
        return self.declared.domains.get("weight") or Domain()

    def tally_of(self, kind: str) -> Tally:
        """The counts of ``kind``'s checker on this backend, made on first use."""
        if kind not in self.tallies:
            self.tallies[kind] = resolve(KINDS[kind].tally)()
        return self.tallies[kind]


@dataclass
class SuiteState:
    backends: dict[str, BackendEntry]
    profile: str
    allowances: tuple[str, ...]
    report_option: str | None
    strict_inputs: bool
    hypothesis_profile: str
    hypothesis_seed: object
    command: str
    outcomes: dict = field(default_factory=dict)  # nodeid -> (outcome, longrepr text)
    cited: dict = field(default_factory=dict)  # nodeid -> the Finding records its failure cites
    items: dict = field(default_factory=dict)  # nodeid -> (backend id or None, clauses)
    started: float = field(default_factory=time.time)
    finished: int = 0  # tests of the suite finished so far (for the progress lines)
    last_progress: float = field(default_factory=time.time)
    suite_started: float | None = None  # when the first of the suite's tests started
    left_out: dict = field(default_factory=dict)  # built-ins a run without --backend left out


STATE_KEY = pytest.StashKey[SuiteState]()


def pytest_addoption(parser):
    group = parser.getgroup("hscale-conformance", "H-Scale NVFP4 conformance")
    for option in suite_options():  # hscale conform declares the same (hscale.judge.options)
        group.addoption(option.flag, *option.aliases, **option.settings)


def suite_requested(config) -> bool:
    """Whether this session runs the suite: a backend is named, or an argument is the suite's
    directory (or inside it), or ``--pyargs hscale.conformance``."""
    if config.getoption("backend"):
        return True
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        name = str(arg).split("::")[0]
        if name.startswith("hscale.conformance"):
            return True
        path = Path(name) if Path(name).is_absolute() else base / name
        try:
            path = path.resolve()
        except OSError:
            continue
        if path == SUITE_DIR or SUITE_DIR in path.parents:
            return True
    return False


def _load_backends(config) -> dict[str, BackendEntry]:
    from hscale.backends import load

    given = config.getoption("backend")
    explicit = given is not None
    specs = list(dict.fromkeys(given)) if explicit else list(BUILTIN_NAMES)
    entries: dict[str, BackendEntry] = {}
    for spec in specs:
        try:
            backend = load(spec)
            missing = [a for a in ("name", "version", "available") if not hasattr(backend, a)]
            if missing:
                raise ValueError(f"backend {spec!r}: object lacks {', '.join(missing)} (see "
                                 "docs/backends.md for the protocol)")
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
        try:  # every declared kind's declarations and domain, built once and checked
            declared = declared_kinds(backend, f"--backend {spec}")
        except ValueError as exc:
            raise pytest.UsageError(f"{exc} (the declared kinds and domain, docs/backends.md)") \
                from None
        try:
            ok, reason = backend.available()
        except Exception as exc:  # noqa: BLE001
            ok, reason = False, f"available() raised {type(exc).__name__}: {exc}"
        ident = spec if spec in BUILTIN_NAMES else str(getattr(backend, "name", spec))
        if ident in entries or not re.fullmatch(r"[\w.+-]+", ident):
            ident = re.sub(r"[^\w.+-]", "_", spec)
        entries[ident] = BackendEntry(spec, ident, backend, bool(ok), str(reason or ""), explicit,
                                      declared)
    return entries


def _command(config) -> str:
    """The command that reproduces the run: ``hscale conform``'s own line where it started the
    session (its plugin carries it), else the pytest arguments as given."""
    for plugin in config.pluginmanager.get_plugins():
        command = getattr(plugin, "reproduce_command", None)
        if isinstance(command, str):
            return command
    return shlex.join(["pytest", *config.invocation_params.args])


def pytest_configure(config):
    config.addinivalue_line("markers", "clause(*ids): the docs/spec.md clause IDs a test checks")
    config.addinivalue_line("markers", "slow: full-model and large sweeps (run by default)")
    if not suite_requested(config):
        return
    if config.getoption("hypothesis_profile", None) is None:
        # A certificate is reproducible: "ci" (derandomized) whenever a backend is named, a
        # certificate asked for, or CI runs; "dev" only for a bare run in a checkout.
        settings.load_profile("ci" if os.environ.get("CI") or config.getoption("backend")
                              or config.getoption("conformance_report") else "dev")
    profile = config.getoption("profile")
    allowances = tuple(dict.fromkeys(config.getoption("allow")))
    try:
        check_profile(profile, allowances)
    except ValueError as exc:
        raise pytest.UsageError(f"--profile {profile} --allow {' '.join(allowances)}: {exc}") \
            from None
    for name in config.getoption("kind"):
        if name not in KINDS:
            raise pytest.UsageError(f"--kind {name}: the suite certifies the kinds "
                                    f"{', '.join(KINDS)}")
    for ident in config.getoption("clause"):
        if not is_known(ident):
            raise pytest.UsageError(f"--clause {ident}: docs/spec.md defines no such clause; "
                                    f"known: {', '.join(clause_ids())}")
    backends = _load_backends(config)
    try:
        check_profile_applies(profile, allowances, {ident: entry.declared.kinds
                                                    for ident, entry in backends.items()})
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if explicit_unavailable := [e for e in backends.values()
                                if e.explicit and not e.available]:
        if not config.getoption("allow_unavailable"):
            entry = explicit_unavailable[0]
            raise pytest.UsageError(
                f"--backend {entry.spec}: cannot run here: {entry.reason} (a backend named on "
                "the command line must run; --allow-unavailable lets it skip instead)")
    left_out = {}
    if not config.getoption("backend"):
        # A run without --backend judges the built-ins that can run here; the others are left
        # out (no test of theirs is collected), and the header says which and why.
        left_out = {ident: entry.reason for ident, entry in backends.items() if not entry.available}
        backends = {ident: entry for ident, entry in backends.items() if entry.available}
    config.stash[STATE_KEY] = SuiteState(
        backends=backends, profile=profile, allowances=allowances, left_out=left_out,
        report_option=config.getoption("conformance_report"),
        strict_inputs=config.getoption("strict_inputs"),
        hypothesis_profile=settings._current_profile or "default",
        hypothesis_seed=config.getoption("hypothesis_seed", None), command=_command(config))


def _state(config) -> SuiteState | None:
    return config.stash.get(STATE_KEY, None)


def left_out_line(left_out: dict) -> str:
    """One line: the built-in backends a run without --backend left out, each with its
    reason."""
    return ("conformance backends left out (cannot run here; name one with --backend "
            "--allow-unavailable to see its tests skip): "
            + "; ".join(f"{ident}: {reason}" for ident, reason in left_out.items()))


def pytest_report_header(config):
    st = _state(config)
    if st is None:
        return None
    s = settings()
    lines = []
    for e in st.backends.values():
        avail = "available" if e.available else f"UNAVAILABLE ({e.reason})"
        kinds = "; ".join(f"kind {k}: {e.declared.describe(k) or '-'}"
                          for k in e.declared.ordered())
        lines.append(f"conformance backend {e.id} [{e.spec}]: version {e.version}; {kinds}; "
                     f"{e.domain.describe()}; {avail}")
    if st.left_out:
        lines.append(left_out_line(st.left_out))
    lines.append(f"conformance profile: {st.profile}; allowances: "
                 f"{', '.join(st.allowances) or 'none'}; input contract: "
                 f"{'decides the verdict' if st.strict_inputs else 'reported'}")
    lines.append(f"hypothesis profile {st.hypothesis_profile}: max_examples={s.max_examples}, "
                 f"derandomize={s.derandomize}, deadline={s.deadline}, "
                 f"phases={','.join(p.name for p in s.phases)}")
    return lines


# ------------------------------------------------------------------------------------------
# Collection: clause bookkeeping
# ------------------------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    st = _state(config)
    if st is None:
        return
    chosen_kinds = set(config.getoption("kind"))
    undeclared, other_kind = [], []
    for item in items:
        if SUITE_DIR not in Path(str(item.path)).resolve().parents:
            continue
        clauses = [c for m in item.iter_markers("clause") for c in m.args]
        backend_id = getattr(getattr(item, "callspec", None), "params", {}).get("backend_id")
        try:
            kind = kind_of_test(clauses)
        except ValueError as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        entry = st.backends.get(backend_id)
        if chosen_kinds and kind not in chosen_kinds:
            other_kind.append(item)  # --kind: another kind's test
            continue
        if kind is not None and entry is not None and kind not in entry.declared.kinds:
            # a test of a kind the backend does not declare: deselected, not skipped (its
            # clauses are "not applicable" in the certificate, saying why)
            undeclared.append(item)
            continue
        if kind == "activation" and entry is not None:
            clauses = judged_under(
                entry.declared.declarations["activation"]["activation_recipe"], clauses)
        st.items[item.nodeid] = (backend_id, clauses)
    wanted = set(config.getoption("clause"))
    if wanted:  # the suite's tests of every kind name it, or it is a usage error
        def names(item):
            return {c for m in item.iter_markers("clause") for c in m.args}
        named = {c for item in items if item not in other_kind for c in names(item)}
        for clause in sorted(wanted - named):
            where = JUDGED_ELSEWHERE.get(clause, "no test of the suite names it")
            st.items.clear()  # a usage error: no certificate
            raise pytest.UsageError(f"--clause {clause}: no test of the suite judges it ({where})")
        other_kind += [item for item in items if not wanted & names(item)]
    _deselect(config, items, set(undeclared) | set(other_kind))


def _deselect(config, items: list, unwanted: set) -> None:
    """Take ``unwanted`` out of the session, reported as deselected."""
    if unwanted:
        config.hook.pytest_deselected(items=[item for item in items if item in unwanted])
        items[:] = [item for item in items if item not in unwanted]


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test whose checker kept drawing past findings that allowances would excuse
    (``Checker.fail_or_defer``) fails now, at its end, naming every allowance it needed. A test
    that met several faults (Hypothesis' exception group) fails with their messages, not a
    traceback (``hscale.conformance.failures``)."""
    try:
        result = yield
    except BaseExceptionGroup as group:
        from hscale.conformance.failures import one_message
        # from None: pytest would print the group as the context of the failure
        raise pytest.fail.Exception(one_message(group), pytrace=False) from None
    checker = pyfuncitem.funcargs.get("checker")
    report = checker.deferred_report() if checker is not None else None
    if report:
        from hscale.conformance.checker import fail_citing
        fail_citing(*report)
    return result


#: The running session's suite state and terminal reporter (set at session start), for the
#: per-test hooks below.
_CURRENT: dict = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the findings its failure cites, as records
    (``hscale_findings``: their JSON form), for the certificate."""
    report = yield
    if call.excinfo is not None and _CURRENT.get("state") is not None:
        findings = findings_of(call.excinfo.value)
        if findings:
            report.hscale_findings = [f.as_json() for f in findings]
    return report


def pytest_runtest_logreport(report):
    st = _CURRENT.get("state")
    if st is None or report.nodeid not in st.items or _CURRENT.get("controller"):
        return
    previous = st.outcomes.get(report.nodeid)
    if report.failed:
        outcome = "failed" if report.when == "call" else "error"
        st.outcomes[report.nodeid] = (outcome, report.longreprtext)
        st.cited[report.nodeid] = list(getattr(report, "hscale_findings", ()))
    elif report.skipped and hasattr(report, "wasxfail"):
        st.outcomes[report.nodeid] = ("xfailed", str(report.wasxfail))
    elif report.skipped and previous is None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        st.outcomes[report.nodeid] = ("skipped", reason.removeprefix("Skipped: "))
    elif report.passed and report.when == "call" and previous is None:
        st.outcomes[report.nodeid] = ("passed", "")


#: Seconds between the progress lines of a long run (done, total, an estimate of what is left).
PROGRESS_EVERY_S = 30.0


#: Suite tests finished before an estimate of what is left is given (the first are not typical).
PROGRESS_MIN_FINISHED = 20


def pytest_runtest_logstart(nodeid, location):
    st = _CURRENT.get("state")
    if st is not None and st.suite_started is None and nodeid in st.items:
        # the rate counts from the suite's first test, not from the session's start (in a
        # checkout's own run other tests come first)
        st.suite_started = time.time()


def pytest_runtest_logfinish(nodeid, location):
    st = _CURRENT.get("state")
    if st is None or nodeid not in st.items:
        return
    st.finished += 1
    now = time.time()
    if (now - st.last_progress < PROGRESS_EVERY_S or st.finished >= len(st.items)
            or st.finished < PROGRESS_MIN_FINISHED):
        return
    st.last_progress = now
    reporter = _CURRENT.get("reporter")
    if reporter is None:
        return
    elapsed = now - (st.suite_started or st.started)
    left = elapsed / st.finished * (len(st.items) - st.finished)
    reporter.write_line(f"  conformance: {st.finished} of {len(st.items)} tests in "
                        f"{elapsed:.0f} s, about {left:.0f} s left")


def pytest_sessionstart(session):
    st = _state(session.config)
    if st is not None:
        _CURRENT["state"] = st
        _CURRENT["controller"] = parallel.is_controller(session.config)
        _CURRENT["reporter"] = session.config.pluginmanager.get_plugin("terminalreporter")


def _report_paths(config, st: SuiteState) -> dict[str, Path]:
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
            out[ident] = Path(config.invocation_params.dir) / "reports" / f"conformance-{safe}.json"
    return out


def build_report(st: SuiteState, entry: BackendEntry) -> dict:
    """The certificate of one backend (built by ``hscale.conformance.certificate``)."""
    s = settings()
    return cert.build(
        backend={"id": entry.id, "spec": entry.spec, "version": entry.version,
                 "name": getattr(entry.backend, "name", None),
                 "capabilities": sorted(getattr(entry.backend, "capabilities", ())),
                 "device": _device(entry.backend),
                 "available": entry.available, "reason": entry.reason},
        declared=entry.declared, domain=entry.domain,
        tally=Tally.merged(entry.tallies.values()), kind_tallies=entry.tallies, items=st.items,
        outcomes=st.outcomes, cited=st.cited, profile=st.profile, allowances=st.allowances,
        strict_inputs=st.strict_inputs,
        hypothesis={"profile": st.hypothesis_profile, "max_examples": s.max_examples,
                    "derandomize": s.derandomize,
                    "seed": None if st.hypothesis_seed is None else str(st.hypothesis_seed)},
        command=st.command, duration_s=time.time() - st.started)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker finished: its share of the run joins the controller's record."""
    st = _state(node.config)
    record = getattr(node, "workeroutput", {}).get(parallel.WORKER_RECORD)
    if st is not None and record is not None:
        parallel.merge_record(record, st.items, st.outcomes, st.cited,
                              {ident: entry.tallies for ident, entry in st.backends.items()})


def _device(backend) -> str | None:
    """The device a backend says it runs on (its optional ``device`` attribute), as text."""
    try:
        device = getattr(backend, "device", None)
        return None if device is None or callable(device) else str(device)
    except Exception as exc:  # noqa: BLE001 - a broken property is reported, not raised
        return f"<device raised {exc!r}>"


def pytest_sessionfinish(session, exitstatus):
    st = _CURRENT.pop("state", None)
    _CURRENT.pop("reporter", None)
    _CURRENT.pop("controller", None)
    if st is None or not st.items or session.config.option.collectonly:
        return
    if parallel.is_worker(session.config):  # the controller writes the certificates
        session.config.workeroutput[parallel.WORKER_RECORD] = parallel.worker_record(
            st.items, st.outcomes, st.cited,
            {ident: entry.tallies for ident, entry in st.backends.items()})
        return
    from hscale.files import write_json
    for ident, path in _report_paths(session.config, st).items():
        report = build_report(st, st.backends[ident])
        st.backends[ident].report = report
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, report, argument="--certificate")
        st.backends[ident].report_path = str(path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    st = _state(config)
    if st is None:
        return
    if st.left_out:
        terminalreporter.write_line(left_out_line(st.left_out))
    for ident, e in st.backends.items():
        report = e.report
        if report is None:
            continue
        # asked for, and judged nothing: one line each (hscale conform then exits 1)
        for clause, why in cert.clauses_not_judged(report, config.getoption("clause")).items():
            terminalreporter.write_line(f"--clause {clause}: nothing judged on backend "
                                        f"{ident!r}: {why}")
        for line in cert.render_summary(report):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"  certificate: {e.report_path}")
        # one line for the most common reason a test skipped (the certificate lists them all;
        # the tests of a kind the backend does not declare are deselected, not skipped)
        reasons = list(report["skip_reasons"].items())
        if reasons and report["backend"]["available"]:
            reason, n = reasons[0]
            terminalreporter.write_line(f"  most common skip reason ({n}): {reason}")
