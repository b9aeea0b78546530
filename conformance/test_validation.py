"""Input validation (NVFP4-IN-1 .. NVFP4-IN-5): every bad input raises ValueError naming the
argument, the first offending index (where there is one) and the clause. The bad inputs of the
golden vectors (vectors/level0/errors.json: NaN and Inf weights, wrong dtypes and shapes, bad h,
K, U, scales, method and init) run as conformance/test_vectors.py; these are the others."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

GOOD_W = np.arange(2 * 32, dtype=np.float32).reshape(2, 32) / 7
GOOD_H = np.ones(32)


def _w(dtype=np.float32, bad=None, at=(1, 5)):
    w = GOOD_W.astype(dtype)
    if bad is not None:
        w[at] = bad
    return w


def _h(bad=None, at=7, n=32):
    h = np.ones(n)
    if bad is not None:
        h[at] = bad
    return h


def _run(checker, clause, argname, index, call):
    """``call`` must be rejected: ValueError or TypeError, whose message (for this project's
    backends, or under --strict-errors) names ``argname``, ``clause`` and ``index``."""
    checker.expect_rejection(clause, argname, index, call)


def q(weight=None, h=None, **kw):
    weight = GOOD_W if weight is None else weight
    return lambda b: b.quantize(weight, h, **kw)


WEIGHT_CASES = {
    "list": (q(weight=[[0.0] * 16]), None),
    "3-D": (q(weight=np.ones((1, 2, 32), np.float32), method="rtn"), None),
    "inf": (q(weight=_w(bad=np.inf, at=(0, 17)), method="rtn"), (0, 17)),
    "-inf-hscale": (q(weight=_w(bad=-np.inf, at=(1, 31)), h=GOOD_H), (1, 31)),
    "inf-fp16": (q(weight=_w(np.float16, np.inf, (1, 0)), method="rtn"), (1, 0)),
    "first-of-two": (q(weight=np.where(np.arange(64).reshape(2, 32) % 9 == 4, np.nan, 1.0)
                       .astype(np.float32), method="rtn"), (0, 4)),
    # a masked array's mask would be ignored, NaN under it included; numpy.matrix redefines
    # indexing: both refused whatever their values (NVFP4-IN-1)
    "masked": (q(weight=np.ma.masked_array(GOOD_W, mask=GOOD_W > 1), method="rtn"), None),
    "masked-nan": (q(weight=np.ma.masked_invalid(_w(bad=np.nan)), method="rtn"), None),
    "matrix": (q(weight=np.asmatrix(GOOD_W), method="rtn"), None),
    # the first NaN in the view's own row-major order
    "nan-in-reversed-view": (q(weight=_w(bad=np.nan, at=(0, 3))[::-1], method="rtn"), (1, 3)),
}


@pytest.mark.clause("NVFP4-IN-1")
@pytest.mark.parametrize("name", list(WEIGHT_CASES))
def test_bad_weight(checker, name):
    call, index = WEIGHT_CASES[name]
    _run(checker, "NVFP4-IN-1", "weight", index, call)


H_CASES = {
    "2-D": (q(h=np.ones((1, 32))), None, "NVFP4-IN-2"),
    "negative-first": (q(h=np.where(np.arange(32) >= 20, -1.0, 1.0)), (20,), "NVFP4-IN-2"),
    "complex": (q(h=np.ones(32, complex)), None, "NVFP4-IN-2"),
    "strings": (q(h=np.array(["1"] * 32)), None, "NVFP4-IN-2"),
}


@pytest.mark.clause("NVFP4-IN-2")
@pytest.mark.parametrize("name", list(H_CASES))
def test_bad_hessian_diag(checker, name):
    checker.require("hscale")
    call, index, clause = H_CASES[name]
    _run(checker, clause, "hessian_diag", index, call)


WINDOW_CASES = {  # K = 0, U = -1, U = K = 16, K = 1.5 and K = True are golden vector cases
    "K=-1": (dict(K=-1, U=0), "K"), "U=K=4": (dict(K=4, U=4), "U"),
    "U='3'": (dict(U="3"), "U"), "U=2.0": (dict(U=2.0), "U"),
}


@pytest.mark.clause("NVFP4-IN-3")
@pytest.mark.parametrize("name", list(WINDOW_CASES))
@pytest.mark.parametrize("method", ["scale-only", "hscale"])
def test_bad_window(checker, name, method):
    checker.require(method)
    kw, arg = WINDOW_CASES[name]
    _run(checker, "NVFP4-IN-3", arg, None, q(h=GOOD_H, method=method, **kw))


SCALE_CASES = {
    "sg=True": (dict(global_scale=True), "global_scale"),
    "sg-string": (dict(global_scale="1.0"), "global_scale"),
    "sg-overflows": (dict(global_scale=float(np.float32(1e36))), "global_scale"),
    "C=inf": (dict(scale_ceiling=float("inf")), "scale_ceiling"),
    "C-string": (dict(scale_ceiling="448"), "scale_ceiling"),
    # numpy scalars that float() would take, or half-take, but are not real numbers
    "sg=np.True_": (dict(global_scale=np.True_), "global_scale"),
    "sg=np.str_": (dict(global_scale=np.str_("0.5")), "global_scale"),
    "sg=np.bytes_": (dict(global_scale=np.bytes_(b"0.5")), "global_scale"),
    "sg-complex": (dict(global_scale=np.complex128(0.5 + 1j)), "global_scale"),
    "sg-datetime64": (dict(global_scale=np.datetime64("2020")), "global_scale"),
    "sg=10**400": (dict(global_scale=10 ** 400), "global_scale"),
    "C-complex": (dict(scale_ceiling=np.complex128(448 + 1j)), "scale_ceiling"),
    "C=10**400": (dict(scale_ceiling=10 ** 400), "scale_ceiling"),
}


@pytest.mark.clause("NVFP4-IN-4")
@pytest.mark.parametrize("name", list(SCALE_CASES))
def test_bad_scales(checker, name):
    kw, arg = SCALE_CASES[name]
    _run(checker, "NVFP4-IN-4", arg, None, q(method="rtn", **kw))


CHOICE_CASES = {
    "method=HSCALE": (dict(method="HSCALE"), "method"),
    "method=None": (dict(method=None), "method"),
    "init=None": (dict(method="rtn", init=None), "init"),
    "init=4over6 ": (dict(method="rtn", init="4over6 "), "init"),
    "method=array": (dict(method=np.array(["rtn", "hscale"])), "method"),
    "init=bytes": (dict(method="rtn", init=b"maxabs"), "init"),
}


@pytest.mark.clause("NVFP4-IN-5")
@pytest.mark.parametrize("name", list(CHOICE_CASES))
def test_bad_method_or_init(checker, name):
    kw, arg = CHOICE_CASES[name]
    _run(checker, "NVFP4-IN-5", arg, None, q(**kw))


@pytest.mark.clause("NVFP4-GS-2")
@pytest.mark.parametrize("ceiling", [1.0, 7.0, 1e-300, 5e-324])
def test_computed_global_scale_that_would_overflow_is_rejected(checker, ceiling):
    """amax near the fp32 maximum with a small scale ceiling: fp32(6 * 448 * s_g) would be
    infinite, so the tensor is rejected (NVFP4-GS-2)."""
    w = GOOD_W.copy()
    w[1, 3] = 3e38
    _run(checker, "NVFP4-GS-2", "scale_ceiling", None, q(weight=w, method="rtn",
                                                          scale_ceiling=ceiling))
