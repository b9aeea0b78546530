"""The golden vectors inside the suite: every level-0 case (vectors/level0, the files hardware
teams consume) runs on every backend, the way Python's decimal tests run the same decTest data
against both implementations. Each case's clause markers come from the case itself, so
``pytest conformance --clause ID`` selects the vector cases of a clause too.

An output case is judged by the diagnoser against the outputs stored in the vector file; in a
backend that declares other input dtypes it runs rounded into them, judged against the
reference's outputs for the rounded weights. An error case is part of the input contract: its
bad input (in the backend's own dtype and shape multiples, unless the dtype or the shape is
what is bad) must be rejected, and the same call with the bad input repaired accepted."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.cases import Rejection
from hscale.judge.domain import is_weight_dtype
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, GROUP_SIZE
from hscale.vectors import LEVEL0_DIR, load_vectors

LEVEL0 = load_vectors(LEVEL0_DIR)
#: Clauses whose bad inputs need a search to be read at all.
SEARCH_ARGUMENTS = {"NVFP4-IN-2": "hscale", "NVFP4-IN-3": "scale-only",
                    "NVFP4-IN-6": "hscale-block"}


def _param(case_id):
    case = LEVEL0[case_id][1]
    return pytest.param(case_id, marks=pytest.mark.clause(*case.clauses), id=case_id)


@pytest.mark.parametrize("case_id", [_param(i) for i in LEVEL0])
def test_vectors(checker, case_id):
    file_name, case = LEVEL0[case_id]
    if isinstance(case.expected, Rejection):
        _expect_rejected(checker, case_id, case)
        return
    checker.check(case, rounding=True)


def _expect_rejected(checker, case_id, case):
    clause = case.expect_error
    message = case.expected.message  # the reference's (with_ below recomputes expectations)
    if clause in SEARCH_ARGUMENTS:
        checker.require(SEARCH_ARGUMENTS[clause]
                        if SEARCH_ARGUMENTS[clause] in checker.capabilities else "hscale")
        method = case.method if case.method in checker.capabilities else \
            SEARCH_ARGUMENTS[clause]
        case = case.with_(method=method)
    elif clause != "NVFP4-IN-5" and case.method not in checker.capabilities:
        case = case.with_(method="rtn", hessian_diag=None)  # the bad input is not the method
    bad = _in_domain(checker, case)
    control = _in_domain(checker, repaired(case))
    # What the reference's message names: the argument, and the first bad index if any.
    named = re.match(r"(\w+)(?:\[([\d, ]+)\])?", message)
    index = None if named.group(2) is None else tuple(int(i) for i in named.group(2).split(","))
    checker.expect_rejection(clause, named.group(1), index, _call(bad),
                             f"case {case_id} ({case.title})", _call(control))


def _call(case):
    (weight, h), options = case.call_args()
    return lambda backend: backend.quantize(weight, h, **options)


def _in_domain(checker, case):
    """The case in the backend's input dtype and shape multiples, unless its dtype or its shape
    is the bad input (NaN and infinities survive the conversion)."""
    weight = np.asarray(case.weight)
    if not is_weight_dtype(weight.dtype) or weight.ndim != 2 \
            or weight.size == 0 or weight.shape[1] % GROUP_SIZE:
        return case
    if not checker.domain.accepts_dtype(weight.dtype):
        # Rounded, finite values saturating at the target's largest (fp32's maximum would
        # become a bfloat16 infinity: another bad input); NaN and infinities kept.
        target = checker.dtypes[0]
        top = float(ml_dtypes.finfo(target).max)
        wide = weight.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            weight = np.where(np.isfinite(wide), np.clip(wide, -top, top), wide).astype(target)
    weight, h = checker.domain.pad_weight(weight, case.hessian_diag)
    return case.with_(weight=weight, hessian_diag=h, expected=case.expected)


def repaired(case):
    """The same call with the rule the case breaks repaired: what a backend must accept."""
    clause = case.expect_error
    weight = np.asarray(case.weight)
    h = case.hessian_diag
    changes = {}
    if clause == "NVFP4-IN-1":
        if weight.ndim == 1:
            weight = weight.reshape(1, -1)
        if weight.size == 0:
            weight = np.ones((1, GROUP_SIZE))
        if weight.shape[1] % GROUP_SIZE:
            weight = weight[:, : weight.shape[1] // GROUP_SIZE * GROUP_SIZE] \
                if weight.shape[1] >= GROUP_SIZE else np.ones((weight.shape[0], GROUP_SIZE))
        weight = np.nan_to_num(weight.astype(np.float64), nan=0.0, posinf=1.0, neginf=-1.0)
        given = np.asarray(case.weight).dtype
        weight = weight.astype(given if is_weight_dtype(given) else np.float32)
    if case.method == "hscale-block":  # NVFP4-IN-6: the (n/16, 16, 16) blocks
        if clause == "NVFP4-IN-6" or np.shape(h) != (weight.shape[1] // GROUP_SIZE, 16, 16):
            h = np.broadcast_to(np.eye(GROUP_SIZE), (weight.shape[1] // GROUP_SIZE, 16, 16))
    elif h is not None or clause == "NVFP4-IN-2":
        if clause == "NVFP4-IN-2" or np.shape(h) != (weight.shape[1],):
            h = np.ones(weight.shape[1])
    if clause == "NVFP4-IN-3":
        changes.update(K=DEFAULT_K, U=DEFAULT_U)
    if clause in ("NVFP4-IN-4", "NVFP4-GS-2"):
        changes.update(global_scale=None, scale_ceiling=DEFAULT_SCALE_CEILING)
    if clause == "NVFP4-IN-5":
        changes.update(method="rtn", init="maxabs")
    return case.with_(weight=weight, hessian_diag=h, expect_error=None, **changes)
