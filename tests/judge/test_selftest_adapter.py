"""A third-party adapter given as ``module:factory`` runs the installed suite from outside the
repository: the adapter of docs/backends.md is copied into a temporary directory, put on
PYTHONPATH and tested in a subprocess. Also: a backend that declares fewer capabilities gets
skips, not failures; bad command lines are usage errors, not tracebacks."""

from __future__ import annotations

import subprocess

import pytest

from helpers.selftest import suite_command, summary


@pytest.fixture(scope="session")
def adapter_runs(selftest_runs):
    return selftest_runs


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_third_party_adapter_passes(adapter_runs):
    run = adapter_runs["adapter"]
    assert "myadapter" in run.reports, f"no report (exit {run.returncode}):\n{run.output[-3000:]}"
    report = run.reports["myadapter"]
    assert run.returncode == 0, f"{summary(report)}\n{run.output[-3000:]}"
    assert report["tests"].get("passed", 0) > 100, summary(report)
    assert report["backend"]["version"].startswith("myadapter 1.0"), report["backend"]
    assert report["verdict"] == "conforms", summary(report)


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_missing_capabilities_skip_with_a_reason(adapter_runs):
    run = adapter_runs["rtnonly"]
    report = run.reports.get("rtnonly")
    assert report is not None, run.output[-3000:]
    assert run.returncode == 0, f"{summary(report)}\n{run.output[-3000:]}"
    reasons = " ".join(report["skip_reasons"])
    assert "does not declare capability 'hscale'" in reasons, report["skip_reasons"]
    assert report["tests"].get("passed", 0) > 20, summary(report)


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1", "NVFP4-GS-1")
def test_a_kernel_with_448_built_in_gets_an_exact_certificate(adapter_runs):
    """The docs' adapter declaring ``scale_ceilings = (448.0,)`` and refusing any other C: the
    suite never calls it with another (a case with s_g given runs at 448, C changing nothing),
    and the exact oracle judges a case at the ceiling it ran (issue 39: NVFP4-GS-1 "expected
    1.0 (oracle) observed 0.5714286", and errors on valid input at C = 256)."""
    run = adapter_runs["only448"]
    report = run.reports.get("only448")
    assert report is not None, run.output[-3000:]
    assert run.returncode == 0 and report["verdict"] == "conforms", (
        f"{summary(report)}\n{run.output[-4000:]}")
    outcomes = report["test_outcomes"]
    assert any("test_exact_oracle" in t and o == "passed" for t, o in outcomes.items()), outcomes
    assert any("s_g given: C changes nothing" in how for how in report["adaptations"]), \
        report["adaptations"]


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_a_plain_third_party_passes_exact_when_its_numbers_are_right(adapter_runs):
    """An adapter as real libraries are: its rejections plain ValueError("bad input"), its
    results only packed codes, scale bytes and a reciprocal global scale."""
    run = adapter_runs["plain"]
    report = run.reports.get("plain")
    assert report is not None, run.output[-3000:]
    assert report["tests"].get("failed", 0) == 0 and report["tests"].get("error", 0) == 0, (
        f"{summary(report)}\n{run.output[-4000:]}")
    assert report["tests"].get("passed", 0) > 300, summary(report)
    assert report["verdict"] == "conforms", summary(report)


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1", "NVFP4-ZERO-1")
def test_a_plain_third_party_fails_with_the_right_clause_when_they_are_not(adapter_runs):
    run = adapter_runs["plain"]
    report = run.reports.get("plain-wrong")
    assert report is not None, run.output[-3000:]
    assert report["tests"].get("failed", 0) > 0, summary(report)
    assert set(report["violations"]) == {"NVFP4-ZERO-1"}, summary(report)
    assert report["verdict"] == "does not conform", summary(report)
    assert report["verdicts"]["clauses_broken"] == ["NVFP4-ZERO-1"], summary(report)


BAD_COMMAND_LINES = {
    "no-such-module": (["--backend", "no_such_module_xyz:create"], "cannot import module"),
    "not-a-spec": (["--backend", "myadapter"], "package.module:factory"),
    "no-such-factory": (["--backend", "hscale.backends:no_such_factory"], "has no"),
    "allow-under-exact": (["--backend", "numpy", "--allow", "negative-zero"], "faithful"),
    "unknown-allowance": (["--backend", "numpy", "--profile", "faithful", "--allow", "bogus"],
                          "unknown allowance"),
}


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1")
@pytest.mark.parametrize("name", list(BAD_COMMAND_LINES))
def test_bad_command_lines_are_usage_errors(name, tmp_path):
    args, words = BAD_COMMAND_LINES[name]
    proc = subprocess.run(suite_command("--collect-only", *args), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, f"exit code {proc.returncode}, expected 4 (usage error):\n{out}"
    assert words in out, f"the usage error does not say {words!r}:\n{out}"
    assert "Traceback" not in out, f"a traceback instead of a usage error:\n{out}"
