"""The suite has teeth: each mutant backend (conformance/mutants.py) fails with a message that
cites the clause it breaks; the faithful profile accepts exactly the divergences its
allowances name; the unmutated pipeline passes.

All runs happen once per session, in subprocesses, two at a time, on the quick subset of the
suite (conformance/selftest.py). They are self-tests: they run in sessions that include the
numpy backend (the default) or with ``--self-tests on``."""

from __future__ import annotations

import pytest

from hscale.conformance.selftest import ALLOWED, EXACT_EXPECT, summary


def _ident(mutant: str) -> str:
    return "mutant-" + mutant.replace("_", "-")


@pytest.fixture(scope="session")
def mutant_runs(selftest_runs):
    return selftest_runs


def _report(runs, run_name, mutant):
    if run_name == "exact" and _ident(mutant) not in runs["exact"].reports:
        run_name = "exact-2"
    run = runs[run_name]
    report = run.reports.get(_ident(mutant))
    assert report is not None, (f"run {run_name!r} wrote no report for {mutant} (exit code "
                                f"{run.returncode}):\n{run.output[-3000:]}")
    return report


def _failed(report) -> int:
    return sum(report[key].get(outcome, 0) for key in ("tests", "independent_tests")
               for outcome in ("failed", "error"))


@pytest.mark.selftest
@pytest.mark.clause("SUITE-MUTANTS-1")
@pytest.mark.parametrize("profile", ["exact", "faithful"])
def test_unmutated_pipeline_passes(mutant_runs, profile):
    report = _report(mutant_runs, profile, "identity")
    assert _failed(report) == 0 and report["tests"].get("passed", 0) > 50, summary(report)


@pytest.mark.selftest
@pytest.mark.parametrize("mutant", [pytest.param(m, marks=pytest.mark.clause(c))
                                    for m, c in EXACT_EXPECT.items()])
def test_mutant_fails_exact_citing_its_clause(mutant_runs, mutant):
    clause = EXACT_EXPECT[mutant]
    report = _report(mutant_runs, "exact", mutant)
    assert _failed(report) > 0, f"mutant {mutant} passed the exact profile: {summary(report)}"
    assert clause in report["violations"], (
        f"mutant {mutant} failed, but no failure message cites [{clause}]: {summary(report)}")


@pytest.mark.selftest
@pytest.mark.parametrize("mutant,allowance,clause,other",
                         [pytest.param(*a, marks=pytest.mark.clause(a[2])) for a in ALLOWED],
                         ids=[a[1] for a in ALLOWED])
def test_faithful_rejects_the_divergence_without_its_allowance(mutant_runs, mutant, allowance,
                                                               clause, other):
    report = _report(mutant_runs, "faithful", mutant)
    assert _failed(report) > 0, f"{mutant} passed faithful without --allow {allowance}"
    assert clause in report["violations"], summary(report)


@pytest.mark.selftest
@pytest.mark.parametrize("mutant,allowance,clause,other",
                         [pytest.param(*a, marks=pytest.mark.clause(a[2])) for a in ALLOWED],
                         ids=[a[1] for a in ALLOWED])
def test_faithful_accepts_exactly_what_the_allowance_names(mutant_runs, mutant, allowance,
                                                           clause, other):
    run = f"faithful-{allowance}"
    report = _report(mutant_runs, run, mutant)
    assert _failed(report) == 0, (f"{mutant} fails faithful even with --allow {allowance}: "
                                  f"{summary(report)}\n{mutant_runs[run].output[-4000:]}")
    assert report["allowances"] == [allowance], report["allowances"]
    assert report["allowance_uses"].get(allowance, 0) > 0, (
        f"the allowance {allowance} was never counted: {summary(report)}")
    unrelated = _report(mutant_runs, run, other)
    assert _failed(unrelated) > 0, (f"--allow {allowance} also excused {other}, a divergence it "
                                    f"does not name: {summary(unrelated)}")
