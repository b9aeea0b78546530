"""Each allowance of the faithful profile excuses its own divergence and no other, judged in this
process on every output case of the level-0 golden vectors: the mutant that diverges so
(conformance/mutants.py) passes with the allowance and counts its uses, fails without it citing
the clause the allowance relaxes, and another mutant still fails with it.

The same three facts are asserted of certificates by tests/judge/test_selftest_mutants.py, whose
faithful-<allowance> runs certify each mutant with the whole installed suite in a subprocess
(about 40 CPU seconds a run): those are in the extended tier, this is the default tier's."""

from __future__ import annotations

import functools

import pytest

from hscale.conformance import mutants
from hscale.conformance.checker import Checker
from hscale.judge.cases import Rejection
from hscale.judge.profiles import ALLOWANCES, FAITHFUL
from hscale.vectors import LEVEL0_DIR, load_vectors

from helpers.selftest import ALLOWED


@functools.cache
def output_cases() -> tuple:
    """The weight kind's level-0 cases with an output (the rejections are the input contract's,
    which no allowance touches)."""
    return tuple(case for _, case in load_vectors(LEVEL0_DIR).values()
                 if not isinstance(case.expected, Rejection))


def judged(mutant: str, allowances: set) -> tuple[list[str], Checker]:
    """The failure messages of the mutant's run over the output cases under faithful with
    ``allowances``, and the checker (its tally counts the allowances used)."""
    checker = Checker(getattr(mutants, mutant)(), mutant, FAITHFUL, allowances)
    failures = []
    for case in output_cases():
        if not checker.supports(case.method, case.init):
            continue
        try:
            checker.check(case, rounding=True)
        except pytest.fail.Exception as failure:
            failures.append(str(failure))
    return failures, checker


@pytest.mark.parametrize("mutant,allowance,clause,other",
                         [pytest.param(*row, marks=pytest.mark.clause(row[2]), id=row[1])
                          for row in ALLOWED])
def test_an_allowance_excuses_its_divergence_and_no_other(mutant, allowance, clause, other):
    failures, checker = judged(mutant, {allowance})
    assert not failures, f"{mutant} fails faithful with --allow {allowance}:\n{failures[0]}"
    assert checker.tally.allowance_uses[allowance] > 0, (
        f"{mutant} passed with --allow {allowance} but the allowance was never used: its "
        f"divergence does not show on the level-0 cases, and this test proves nothing")

    without, _ = judged(mutant, set())
    assert without, f"{mutant} passes faithful without --allow {allowance}"
    relaxed = ALLOWANCES[allowance].clause
    assert any(f"[{c}]" in text for text in without for c in (clause, relaxed)), (
        f"{mutant} failed without --allow {allowance}, citing neither [{clause}] nor "
        f"[{relaxed}]:\n{without[0]}")

    unrelated, _ = judged(other, {allowance})
    assert unrelated, f"--allow {allowance} also excused {other}, a divergence it does not name"
