"""Input validation (NVFP4-IN-1 .. NVFP4-IN-5), the input contract: every bad input raises
ValueError or TypeError (for this project's backends, and any under --strict-errors, naming the
argument, the first offending index where there is one, and the clause). The bad inputs of the
golden vectors (vectors/level0/errors.json) run as conformance/test_vectors.py; these are the
others.

Each bad input is built in the backend's own input dtype, and comes with its control: the same
call with the bad input repaired, which the backend must accept, so that a rejection for some
other reason (a dtype it does not take, say) is not credited to the clause. Whether a Python
list or another array-like is accepted as the weight is the implementation's business, not the
spec's: it is recorded, never judged."""

from __future__ import annotations

import numpy as np
import pytest

ROWS, COLS = 2, 32


def shape_for(checker) -> tuple[int, int]:
    """At least 2 x 32, in multiples of the backend's declared shape multiples."""
    want_r, want_c = checker.domain.shape_multiple
    return -(-ROWS // want_r) * want_r, -(-COLS // want_c) * want_c


def good_w(dtype, shape=(ROWS, COLS)) -> np.ndarray:
    """A valid weight, exact in every input dtype (multiples of 1/8 below 8)."""
    return (np.arange(shape[0] * shape[1]).reshape(shape) % 61 / 8).astype(dtype)


def _w(dtype, bad=None, at=(1, 5), shape=(ROWS, COLS)):
    w = good_w(dtype, shape)
    if bad is not None:
        w[at] = bad
    return w


def q(weight=None, h=None, **kw):
    return lambda b: b.quantize(weight, h, **kw)


def _cases(dtype, shape) -> dict:
    """name -> (bad call, control call, first offending index), every weight in ``dtype``."""
    f16 = np.float16
    rows, cols = shape

    def nan_every_ninth():
        w = good_w(dtype, shape)
        w[np.arange(rows * cols).reshape(shape) % 9 == 4] = np.nan
        return w

    good = good_w(dtype, shape)
    reversed_nan = _w(dtype, np.nan, (0, 3), shape)[::-1]
    return {
        "3-D": (q(weight=good.reshape(1, rows, cols), method="rtn"),
                q(weight=good, method="rtn"), None),
        "inf": (q(weight=_w(dtype, np.inf, (0, 17), shape), method="rtn"),
                q(weight=good, method="rtn"), (0, 17)),
        "-inf-hscale": (q(weight=_w(dtype, -np.inf, (1, 31), shape), h=np.ones(cols)),
                        q(weight=good, h=np.ones(cols)), (1, 31)),
        "inf-fp16": (q(weight=_w(f16, np.inf, (1, 0), shape), method="rtn"),
                     q(weight=good_w(f16, shape), method="rtn"), (1, 0)),
        "first-of-two": (q(weight=nan_every_ninth(), method="rtn"),
                         q(weight=good, method="rtn"), (0, 4)),
        # a masked array's mask would be ignored, NaN under it included; numpy.matrix redefines
        # indexing: both refused whatever their values (NVFP4-IN-1)
        "masked": (q(weight=np.ma.masked_array(good, mask=good > 1), method="rtn"),
                   q(weight=good, method="rtn"), None),
        "masked-nan": (q(weight=np.ma.masked_invalid(_w(dtype, np.nan, shape=shape)),
                       method="rtn"),
                       q(weight=good, method="rtn"), None),
        "matrix": (q(weight=np.asmatrix(good), method="rtn"), q(weight=good, method="rtn"),
                   None),
        # the first NaN in the view's own row-major order
        "nan-in-reversed-view": (q(weight=reversed_nan, method="rtn"),
                                 q(weight=good[::-1], method="rtn"), (rows - 1, 3)),
    }


WEIGHT_CASES = ("3-D", "inf", "-inf-hscale", "inf-fp16", "first-of-two", "masked",
                "masked-nan", "matrix", "nan-in-reversed-view")


@pytest.mark.clause("NVFP4-IN-1")
@pytest.mark.parametrize("name", WEIGHT_CASES)
# numpy.matrix itself warns that it is deprecated; the case is built on purpose.
@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_bad_weight(checker, name):
    if name == "inf-fp16":
        checker.require_dtype(np.float16)
    if name == "-inf-hscale":
        checker.require("hscale")
    call, control, index = _cases(checker.dtypes[0], shape_for(checker))[name]
    checker.expect_rejection("NVFP4-IN-1", "weight", index, call, f"weight: {name}", control)


@pytest.mark.clause("NVFP4-IN-1")
def test_array_like_weight_is_the_implementations_business(checker):
    """A nested list in place of the weight array: accepting it (as most libraries do, through
    their tensor constructor) or refusing it is up to the implementation. Recorded in the
    certificate's input contract, not judged."""
    weight = good_w(checker.dtypes[0], shape_for(checker))
    try:
        checker.backend.quantize(weight.tolist(), method="rtn")
    except (ValueError, TypeError) as exc:
        checker.note_contract("NVFP4-IN-1", "weight: a nested Python list", False,
                              f"{type(exc).__name__}: {exc}")
    else:
        checker.note_contract("NVFP4-IN-1", "weight: a nested Python list", True)


H_CASES = {
    "2-D": (np.ones((1, COLS)), None, "NVFP4-IN-2"),
    "negative-first": (np.where(np.arange(COLS) >= 20, -1.0, 1.0), (20,), "NVFP4-IN-2"),
    "complex": (np.ones(COLS, complex), None, "NVFP4-IN-2"),
    "strings": (np.array(["1"] * COLS), None, "NVFP4-IN-2"),
}


@pytest.mark.clause("NVFP4-IN-2")
@pytest.mark.parametrize("name", list(H_CASES))
def test_bad_hessian_diag(checker, name):
    checker.require("hscale")
    h, index, clause = H_CASES[name]
    w = good_w(checker.dtypes[0], shape_for(checker))
    h = np.resize(h, h.shape[:-1] + (w.shape[1],)) if h.ndim else h
    checker.expect_rejection(clause, "hessian_diag", index, q(weight=w, h=h),
                             f"hessian_diag: {name}", q(weight=w, h=np.ones(w.shape[1])))


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
    w = good_w(checker.dtypes[0], shape_for(checker))
    h = np.ones(w.shape[1])
    checker.expect_rejection("NVFP4-IN-3", arg, None, q(weight=w, h=h, method=method, **kw),
                             f"{arg}: {name}", q(weight=w, h=h, method=method))


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
#: The repaired value of each argument: a caller's s_g of 0.5, the default ceiling.
GOOD_SCALES = {"global_scale": dict(global_scale=0.5), "scale_ceiling": {}}


@pytest.mark.clause("NVFP4-IN-4")
@pytest.mark.parametrize("name", list(SCALE_CASES))
def test_bad_scales(checker, name):
    kw, arg = SCALE_CASES[name]
    w = good_w(checker.dtypes[0], shape_for(checker))
    checker.expect_rejection("NVFP4-IN-4", arg, None, q(weight=w, method="rtn", **kw),
                             f"{arg}: {name}", q(weight=w, method="rtn", **GOOD_SCALES[arg]))


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
    w = good_w(checker.dtypes[0], shape_for(checker))
    checker.expect_rejection("NVFP4-IN-5", arg, None, q(weight=w, **kw), f"{arg}: {name}",
                             q(weight=w, method="rtn"))


@pytest.mark.clause("NVFP4-GS-2")
@pytest.mark.parametrize("ceiling", [1.0, 7.0, 1e-300, 5e-324])
def test_computed_global_scale_that_would_overflow_is_rejected(checker, ceiling):
    """amax near the fp32 maximum with a small scale ceiling: fp32(6 * 448 * s_g) would be
    infinite, so the tensor is rejected (NVFP4-GS-2). The control is the same weight with the
    default ceiling, which is valid: a backend that rejects both rejected something else."""
    dtype = checker.dtypes[0]
    if np.dtype(dtype) == np.float16:
        pytest.skip("float16 cannot hold a weight near the fp32 maximum")
    w = good_w(dtype, shape_for(checker))
    w[1, 3] = 3e38
    checker.expect_rejection("NVFP4-GS-2", "scale_ceiling", None,
                             q(weight=w, method="rtn", scale_ceiling=ceiling),
                             f"scale_ceiling {ceiling!r} with amax 3e38",
                             q(weight=w, method="rtn"))
