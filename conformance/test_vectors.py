"""The golden vectors inside the suite: every level-0 case (vectors/level0, the files hardware
teams consume) runs on every backend, the way Python's decimal tests run the same decTest data
against both implementations. Each case's clause markers come from the case itself, so
``pytest conformance --clause ID`` selects the vector cases of a clause too.

An output case is judged by the diagnoser against the outputs stored in the vector file; an
error case must be rejected (citing its clause, for this project's backends)."""

from __future__ import annotations

import re

import pytest

from hscale.judge.cases import Rejection
from hscale.vectors import load_vectors
from hscale.vectors import LEVEL0_DIR as DEFAULT_LEVEL0_DIR

LEVEL0 = load_vectors(DEFAULT_LEVEL0_DIR)


def _param(case_id):
    case = LEVEL0[case_id][1]
    return pytest.param(case_id, marks=pytest.mark.clause(*case.clauses), id=case_id)


@pytest.mark.parametrize("case_id", [_param(i) for i in LEVEL0])
def test_vectors(checker, case_id):
    file_name, case = LEVEL0[case_id]
    if isinstance(case.expected, Rejection):
        checker.require(case.method if case.method in checker.capabilities else "rtn")
        # What the reference's message names: the argument, and the first bad index if any.
        named = re.match(r"(\w+)(?:\[([\d, ]+)\])?", case.expected.message)
        index = None if named.group(2) is None else tuple(int(i) for i in
                                                          named.group(2).split(","))
        (weight, h), options = case.call_args()
        checker.expect_rejection(case.expect_error, named.group(1), index,
                                 lambda backend: backend.quantize(weight, h, **options),
                                 f"case {case_id} ({case.title})")
        return
    checker.check(case)
