"""Every mistake gets a clean answer: random bad inputs thrown at ``quantize`` of the reference and
of every backend that can run here, each call required to raise a ValueError or TypeError that
names the bad argument and cites its clause (NVFP4-IN-1 .. -5, NVFP4-GS-2), and never another
exception, a hang or a result. Unusual but valid inputs (views of any layout, memmaps, numpy
scalars, windows wider than the ladder) must be accepted, with the reference's result.

CI runs a few hundred examples; ``HSCALE_FUZZ_EXAMPLES=10000`` runs the ten thousand that
docs/conformance.md records (each example against every backend)."""

from __future__ import annotations

import math
import os
import re
import signal
from collections import Counter
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hscale.backends import get
from hscale.reference import quantize as reference_quantize

EXAMPLES = int(os.environ.get("HSCALE_FUZZ_EXAMPLES", "300"))
SECONDS_PER_CALL = 20  # far above any rejection; a call past it is a hang

CLAUSE = {"weight": "NVFP4-IN-1", "hessian_diag": "NVFP4-IN-2", "K": "NVFP4-IN-3",
          "U": "NVFP4-IN-3", "global_scale": "NVFP4-IN-4", "scale_ceiling": "NVFP4-IN-4",
          "method": "NVFP4-IN-5", "init": "NVFP4-IN-5"}


def _implementations():
    found = [("reference", reference_quantize)]
    for name in ("torch", "torch-cuda", "cupy", "hscale.backends.cupy_backend:create_host_harness"):
        backend = get(name)
        if backend.available()[0]:
            found.append((backend.name, backend.quantize))
    return found


IMPLEMENTATIONS = _implementations()
TALLY: Counter = Counter()  # outcome -> calls
BAD_ARGUMENTS: Counter = Counter()  # which argument was bad -> examples


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"no answer within {SECONDS_PER_CALL} s")


def outcome(call):
    """('result', value) | ('rejected', exception) | ('other', exception) | ('hang', text)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_CALL)
    try:
        return "result", call()
    except Hang as exc:
        return "hang", str(exc)
    except (ValueError, TypeError) as exc:
        return "rejected", exc
    except Exception as exc:  # noqa: BLE001 - exactly what the test is looking for
        return "other", exc
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the bad inputs --------------------------------------------------------------------------

FLOAT_DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)
WRONG_WEIGHT_DTYPES = (np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_,
                       np.complex64, np.complex128, np.longdouble, ml_dtypes.float8_e4m3fn,
                       ml_dtypes.float4_e2m1fn, "U4", "O", "datetime64[s]")
NOT_REAL = [True, False, np.True_, np.False_, "1.0", np.str_("0.5"), b"0.5", np.bytes_(b"0.5"),
            0.5 + 1j, np.complex128(0.5 + 1j), np.datetime64("2020"), np.timedelta64(1, "s"),
            None, [0.5], (0.5,), {"v": 0.5}, np.array(0.5), object()]


def _views(draw, array):
    """``array`` as one of several layouts (same values, other strides)."""
    kind = draw(st.sampled_from(["plain", "reversed rows", "reversed columns", "fortran",
                                 "strided"]))
    if kind == "reversed rows":
        return array[::-1].copy()[::-1]
    if kind == "reversed columns":
        return array[:, ::-1].copy()[:, ::-1]
    if kind == "fortran":
        return np.asfortranarray(array)
    if kind == "strided":
        wide = np.zeros((array.shape[0], 2 * array.shape[1]), dtype=array.dtype)
        wide[:, ::2] = array
        return wide[:, ::2]
    return array


@st.composite
def bad_weight(draw, weight):
    kind = draw(st.sampled_from(["type", "dtype", "shape", "non-finite", "masked", "matrix",
                                 "torch"]))
    if kind == "type":
        return draw(st.sampled_from([weight.tolist(), tuple(map(tuple, weight.tolist())), None,
                                     3.0, "weight", memoryview(weight.tobytes()),
                                     weight.tobytes(), {"weight": weight}]))
    if kind == "dtype":
        dtype = draw(st.sampled_from(WRONG_WEIGHT_DTYPES))
        with np.errstate(all="ignore"):
            return weight.astype(dtype) if dtype != "datetime64[s]" else \
                np.zeros(weight.shape, dtype=dtype)
    if kind == "shape":
        rows, cols = weight.shape
        shape = draw(st.sampled_from([(), (cols,), (1, rows, cols), (rows, cols, 1, 1),
                                      (0, cols), (rows, 0), (0, 0),
                                      (rows, cols + draw(st.integers(1, 15))),
                                      (rows, draw(st.integers(1, 15)))]))
        return np.zeros(shape, dtype=draw(st.sampled_from(FLOAT_DTYPES)))
    if kind == "non-finite":
        bad = weight.astype(draw(st.sampled_from(FLOAT_DTYPES)))
        for _ in range(draw(st.integers(1, 3))):
            r = draw(st.integers(0, bad.shape[0] - 1))
            c = draw(st.integers(0, bad.shape[1] - 1))
            bad[r, c] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        return _views(draw, bad)
    if kind == "masked":
        masked = np.ma.masked_invalid(weight.copy())
        if draw(st.booleans()):
            masked.data[0, 0] = np.nan  # NaN hidden under the mask
            masked[0, 0] = np.ma.masked
        return masked
    if kind == "matrix":
        return np.asmatrix(weight)
    torch = pytest.importorskip("torch")
    return torch.from_numpy(weight)


@st.composite
def bad_hessian(draw, cols):
    kind = draw(st.sampled_from(["missing", "length", "shape", "non-finite", "negative",
                                 "dtype", "masked", "unreadable"]))
    h = np.full(cols, 0.5)
    if kind == "missing":
        return None
    if kind == "length":
        return np.ones(draw(st.sampled_from([0, 1, cols - 1, cols + 1, 2 * cols])))
    if kind == "shape":
        return np.ones(draw(st.sampled_from([(1, cols), (cols, 1), (), (2, cols)])))
    if kind in ("non-finite", "negative"):
        j = draw(st.integers(0, cols - 1))
        h[j] = (draw(st.sampled_from([np.nan, np.inf, -np.inf])) if kind == "non-finite"
                else -draw(st.sampled_from([1e-300, 1.0, 1e300])))
        return h
    if kind == "dtype":
        return draw(st.sampled_from([h.astype(complex), h.astype(str), np.array([10 ** 400] * cols, dtype=object),
                                     np.full(cols, np.longdouble(1) / 3), np.ones(cols, bool),
                                     np.array([2 ** 62 + 1] * cols, np.int64)]))
    if kind == "masked":
        return np.ma.masked_array(h, mask=np.arange(cols) == 0)
    return object()


NOT_A_FINITE_REAL = st.sampled_from(NOT_REAL + [10 ** 400, -10 ** 400])
# global_scale=None is valid (s_g is then computed, NVFP4-GS-1)
NOT_A_GIVEN_SCALE = st.sampled_from([v for v in NOT_REAL if v is not None]
                                    + [10 ** 400, -10 ** 400])


@st.composite
def bad_call(draw):
    """(weight, h, options, the bad argument's name) with exactly one bad argument."""
    rows, cols = draw(st.integers(1, 3)), 16 * draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    weight = (rng.standard_normal((rows, cols)) + 0.1).astype(np.float32)
    h = rng.uniform(0.0, 2.0, cols)
    options = dict(method=draw(st.sampled_from(["rtn", "scale-only", "hscale"])),
                   init=draw(st.sampled_from(["maxabs", "4over6"])))
    which = draw(st.sampled_from(list(CLAUSE)))
    if which == "weight":
        weight = draw(bad_weight(weight))
    elif which == "hessian_diag":
        options["method"] = "hscale"  # the only method that reads h
        h = draw(bad_hessian(cols))
    elif which == "K":
        options["K"] = draw(st.one_of(st.sampled_from(NOT_REAL + [16.0, np.float64(16.0), 1.5]),
                                      st.integers(-10 ** 30, 0)))
        options["U"] = 0
    elif which == "U":
        K = draw(st.integers(1, 40))
        options["K"] = K
        options["U"] = draw(st.one_of(st.sampled_from(NOT_REAL + [2.0, np.float32(3)]),
                                      st.integers(-10 ** 30, -1), st.integers(K, K + 10 ** 30)))
    elif which == "global_scale":
        options["global_scale"] = draw(st.one_of(
            st.sampled_from([0.0, -1.0, -0.0, math.nan, math.inf, -math.inf, 0.1, 1e-40,
                             float(np.float32(1e36)), Fraction(1, 3), np.float64(0.1)]),
            NOT_A_GIVEN_SCALE))
    elif which == "scale_ceiling":
        options["scale_ceiling"] = draw(st.one_of(
            st.sampled_from([0.0, -448.0, 448.5, 449, math.nan, math.inf, 1e300,
                             5e-324, 1e-300]),  # the tiny ones: s_g overflows (NVFP4-GS-2)
            NOT_A_FINITE_REAL))
        options["global_scale"] = None  # so that the ceiling is what sets s_g
    else:
        options[which] = draw(st.sampled_from(
            [None, "", "HSCALE", " rtn", "rtn ", "gptq", "minmax", "max-abs", b"rtn", 0, 1.0,
             np.array(["rtn", "hscale"]), ["rtn"], ("hscale",), np.str_("4over")]))
    return weight, h, options, which


NUMPY_SCALAR_REPR = re.compile(r"np\.(float|u?int|bool|complex|str_|bytes_|datetime64|"
                               r"timedelta64)\d*_?\(")


def expected_text(which, weight):
    """Patterns the message must contain: the argument's name, its clause, and for a
    non-finite weight the first bad index (row-major, in the array as given)."""
    clauses = [CLAUSE[which]] + (["NVFP4-GS-2"] if which == "scale_ceiling" else [])
    patterns = [rf"(?<!\w){re.escape(which)}(?!\w)", "spec (" + "|".join(clauses) + ")"]
    if (which == "weight" and type(weight) is np.ndarray and weight.ndim == 2
            and weight.dtype in FLOAT_DTYPES):
        bad = np.argwhere(~np.isfinite(weight.astype(np.float32)))
        if len(bad):
            patterns.append(re.escape(f"weight[{bad[0][0]}, {bad[0][1]}]"))
    return patterns


@settings(max_examples=EXAMPLES, deadline=None, derandomize=bool(os.environ.get("CI")),
          database=None, suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.data_too_large])
@given(call=bad_call())
def test_every_bad_input_gets_a_clean_rejection(call):
    weight, h, options, which = call
    BAD_ARGUMENTS[which] += 1
    for name, quantize in IMPLEMENTATIONS:
        kind, value = outcome(lambda: quantize(weight, h, **options))
        TALLY[kind] += 1
        context = f"{name}: bad {which}, options {options!r}"
        assert kind != "result", f"{context}: accepted, returned a result"
        assert kind != "hang", f"{context}: {value}"
        assert kind == "rejected", f"{context}: {type(value).__name__}: {value}"
        message = str(value)
        for pattern in expected_text(which, weight):
            assert re.search(pattern, message), f"{context}: {message!r} lacks /{pattern}/"
        assert not NUMPY_SCALAR_REPR.search(message), f"{context}: a numpy repr in {message!r}"


def test_tally():
    """Runs after the fuzz test (file order): what it threw, for the record (``-s`` shows it)."""
    total = sum(TALLY.values())
    print(f"\nfuzz: {total} calls on {len(IMPLEMENTATIONS)} implementations "
          f"({', '.join(n for n, _ in IMPLEMENTATIONS)}): {dict(TALLY)}; examples by bad "
          f"argument: {dict(sorted(BAD_ARGUMENTS.items()))}")
    assert total == 0 or set(TALLY) == {"rejected"}, dict(TALLY)


# -- unusual but valid inputs ------------------------------------------------------------------

def _fields(result):
    return [result.codes, result.packed, result.scale_bytes, result.delta, result.initial_bytes,
            np.float32(result.global_scale)]


@pytest.mark.parametrize("name,quantize", IMPLEMENTATIONS, ids=[n for n, _ in IMPLEMENTATIONS])
def test_valid_inputs_of_every_layout_and_type_are_accepted(name, quantize, tmp_path):
    rng = np.random.default_rng(7)
    weight = (rng.standard_normal((5, 48)) * 0.05).astype(np.float32)
    h = rng.uniform(0, 3, 48)
    expected = reference_quantize(weight, h)
    memmap = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.float32,
                                       shape=weight.shape)
    memmap[:] = weight
    read_only = weight.copy()
    read_only.flags.writeable = False
    layouts = {"reversed rows": weight[::-1].copy()[::-1], "fortran": np.asfortranarray(weight),
               "reversed columns": weight[:, ::-1].copy()[:, ::-1], "memmap": memmap,
               "read-only": read_only, "single reversed row": weight[:1][::-1]}
    for layout, view in layouts.items():
        got = quantize(view, h)
        want = expected if view.shape == weight.shape else reference_quantize(weight[:1], h)
        for a, b in zip(_fields(want), _fields(got)):
            assert np.array_equal(a, b), f"{name}: {layout}"
    scalars = [dict(K=np.int64(16), U=np.uint8(6)), dict(global_scale=np.float32(2.0 ** -6)),
               dict(global_scale=Fraction(1, 64)), dict(scale_ceiling=np.float16(256)),
               dict(scale_ceiling=256), dict(method=np.str_("hscale"))]
    plain = [dict(K=16, U=6), dict(global_scale=2.0 ** -6), dict(global_scale=2.0 ** -6),
             dict(scale_ceiling=256.0), dict(scale_ceiling=256.0), dict(method="hscale")]
    for given_options, same in zip(scalars, plain):
        for a, b in zip(_fields(reference_quantize(weight, h, **same)),
                        _fields(quantize(weight, h, **given_options))):
            assert np.array_equal(a, b), f"{name}: {given_options}"


@pytest.mark.parametrize("name,quantize", IMPLEMENTATIONS, ids=[n for n, _ in IMPLEMENTATIONS])
def test_windows_wider_than_the_ladder_answer_in_bounded_time(name, quantize):
    """HSCALE-WIN-1: any K; shifts beyond 125 each way search nothing new, so the answer is
    the window's with D and U limited to 125, computed here by hand. The group sits at the
    bottom of the ladder (c0 = 0x01) with h on its tiny element only: an earlier backend's
    int16 window wrapped around there (K = 32767, U = 32766: D = 0, yet delta -55)."""
    group = np.zeros((1, 16), np.float32)
    group[0, 0], group[0, 1] = 6.0, 2.0 ** -10
    h = np.zeros(16)
    h[1] = 1.0
    rng = np.random.default_rng(3)
    spread = (rng.standard_normal((4, 32)) * 10.0 ** rng.integers(-8, 8, (4, 32))
              ).astype(np.float32)
    h_spread = rng.uniform(0, 1, 32)
    for K, U in ((32767, 32766), (10 ** 9, 5), (10 ** 9, 10 ** 9 - 1), (2 ** 70, 2 ** 69)):
        D = K - 1 - U
        limited = dict(K=min(D, 125) + min(U, 125) + 1, U=min(U, 125))
        for w, hd, extra in ((group, h, dict(global_scale=1.0)), (spread, h_spread, {})):
            kind, got = outcome(lambda: quantize(w, hd, K=K, U=U, **extra))
            assert kind == "result", (name, K, U, kind, got)
            want = reference_quantize(w, hd, **limited, **extra)
            for a, b in zip(_fields(want)[:3], _fields(got)[:3]):
                assert np.array_equal(a, b), (name, K, U)
            if D == 0:
                assert (got.delta >= 0).all(), (name, K, U, got.delta)
