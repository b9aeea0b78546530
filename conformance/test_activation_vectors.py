"""The activation golden vectors inside the suite: every level-0 activation case (the act_*
sets of vectors/level0, docs/vectors.md) runs on every activation backend, judged against the
stored result of the recipe it declares (and, for fast-math, every result a reciprocal within
one ulp admits). Each case's clause markers come from the case, so ``--clause ID`` selects the
vector cases of a clause too."""

from __future__ import annotations

import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors

LEVEL0 = open_vectors(LEVEL0_DIR).family_cases
ACTIVATION_CASES = {case_id: entry for case_id, entry in LEVEL0.items()
                    if entry[0].startswith("act_")}


def _param(case_id):
    case = ACTIVATION_CASES[case_id][1]
    return pytest.param(case_id, marks=pytest.mark.clause(*case.clauses), id=case_id)


@pytest.mark.parametrize("case_id", [_param(i) for i in ACTIVATION_CASES])
def test_activation_vectors(activation_checker, case_id):
    _, case = ACTIVATION_CASES[case_id]
    activation_checker.check(case, rounding=True)
