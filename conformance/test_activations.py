"""The activation kind: a run-time activation quantizer judged under the recipe it declares
(docs/spec.md section 8). Generated tensors where the recipes split, zero groups and signed
zeros, a static scale below the run-time amax, tiny groups, non-finite values, the scale
layouts with their padding, the input dtypes and the global scale, static and dynamic."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hscale.conformance.activation_strategies import ACTIVATION_DTYPES, activation_cases
from hscale.judge.boundaries import boundary_cases
from hscale.judge.activations import ActivationCase
from hscale.judge.builders import BF16, F16, F32

#: Each recipe and the clauses of its bytes and codes (a test of one recipe skips, saying so,
#: for a backend that declares another).
RECIPES = [pytest.param("fast-math", marks=pytest.mark.clause("NVFP4-ACT-2", "NVFP4-ACT-3"),
                        id="fast-math"),
           pytest.param("exact", marks=pytest.mark.clause("NVFP4-ACT-6"), id="exact"),
           pytest.param("torchao", marks=pytest.mark.clause("NVFP4-ACT-7"), id="torchao")]


def _dtypes(checker):
    """The strategies' dtypes the backend takes (its first declared one if none)."""
    taken = [d for d in ACTIVATION_DTYPES if checker.domain.accepts_dtype(d)]
    return taken or checker.domain.numpy_dtypes[:1]


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-8")
@pytest.mark.parametrize("recipe", RECIPES)
@given(data=st.data())
def test_generated_tensors(activation_checker, recipe, data):
    """Generated tensors (conformance/activation_strategies.py): group maxima on E4M3
    midpoints of the block scale, elements on E2M1 midpoints, tiny, saturating and zero groups,
    signed zeros; judged under the declared recipe."""
    activation_checker.require_recipe(recipe)
    dynamic = "dynamic" in activation_checker.domain.modes
    if "static" not in activation_checker.domain.modes:
        dynamic = True
    case = data.draw(activation_cases(_dtypes(activation_checker), dynamic=dynamic), label="case")
    if case.global_scale is not None and "static" not in activation_checker.domain.modes:
        case = ActivationCase(case.x, None, title=case.title)
    activation_checker.check(case, rounding=True)


def _static(checker):
    checker.require_mode("static")


DTYPES = [pytest.param(F32, id="float32"), pytest.param(F16, id="float16"),
          pytest.param(BF16, id="bfloat16")]


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-1", "NVFP4-ACT-2", "NVFP4-ACT-3", "NVFP4-ACT-6",
                    "NVFP4-ACT-7")
@pytest.mark.parametrize("dtype", DTYPES)
def test_products_a_few_fp32_ulps_from_every_boundary(activation_checker, dtype):
    """Block scales and encode products a few fp32 ulps either side of every E4M3 and E2M1
    midpoint, in each declared dtype (hscale.judge.boundaries): inputs of few bits
    and a constructed global scale g = 1 + i 2^-23, one tensor per i. A reciprocal within the
    one ulp PTX states passes (NVFP4-ACT-5); one further off moves a byte or a code across a
    boundary that no admissible reciprocal moves, which generated data, one ulp of bfloat16
    (2^-8) from a boundary, cannot show; so does a static g not used as given (NVFP4-ACT-1),
    which moves every product."""
    activation_checker.require_dtype(dtype)
    _static(activation_checker)
    for case in boundary_cases(dtype):
        activation_checker.check(case)


@pytest.mark.clause("NVFP4-ACT-8")
@pytest.mark.parametrize("g", [1.0, 37.25, 2688 / 3.7])
def test_zero_groups_and_signed_zeros(activation_checker, g):
    """Groups of +0.0, of -0.0 and of both; -0.0 and negatives that round to 0 among non-zero
    values: the byte of a zero group is the recipe's, and every code keeps the sign bit of x."""
    _static(activation_checker)
    g = np.float32(g)
    s = 1.0 / float(g)  # the scale of a group whose maximum is 6 / g
    x = np.zeros((3, 48))
    x[0, 16:32] = -0.0
    x[1, :16] = [0.0, -0.0] * 8
    x[2, :16] = np.array([6, -0.0, -0.1, 0.0, -0.2, 0.1, -0.24, 1, -1, 2, -3, 4, -6, 0.25, -0.25,
                          -0.26]) * s
    x[2, 16:32] = -0.0
    x[2, 17] = 1e-3 * s
    case = ActivationCase(x.astype(np.float32), g, title="zero groups and signed zeros")
    activation_checker.check(case, rounding=True)


@pytest.mark.clause("NVFP4-ACT-8")
@pytest.mark.parametrize("factor", [1.001, 1.04, 1.5, 10.0, 1000.0])
def test_a_static_scale_below_the_run_time_amax_saturates(activation_checker, factor):
    """A W4A4 checkpoint's static scale calibrated on an amax below the one met at run time:
    the block scale passes 448 and must saturate to 0x7E (never the NaN byte 0x7F, which a
    cast through float8 gives at 464 and above), its codes at +-6."""
    _static(activation_checker)
    calibrated = 100.0
    g = np.float32(2688 / calibrated)
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (4, 64)) * calibrated
    x[:, ::16] = calibrated * factor * np.array([1, -1, 1, -1])[:, None]
    case = ActivationCase(x.astype(np.float32), g, title=f"amax {factor} x the calibrated one")
    activation_checker.check(case, rounding=True)


@pytest.mark.parametrize("recipe", RECIPES)
def test_tiny_groups_get_subnormal_scales_or_the_recipes_floor(activation_checker, recipe):
    """Groups whose block scale is an E4M3 subnormal, or rounds to zero: no 0x01 floor in the
    fast-math and exact recipes (byte 0x00, the group decodes to zeros), torchao's clamp to
    0x08."""
    activation_checker.require_recipe(recipe)
    _static(activation_checker)
    g = np.float32(1.0)
    maxima = [2.0 ** -9 * 6 * k for k in (0.2, 0.5, 0.75, 1, 1.5, 2, 3.5, 7, 7.5, 8)]
    x = np.zeros((len(maxima), 32))
    rng = np.random.default_rng(3)
    for r, top in enumerate(maxima):
        x[r, :16] = rng.uniform(-1, 1, 16) * top
        x[r, 0] = top
        x[r, 16:] = rng.uniform(-1, 1, 16) * top * 1e-3
    case = ActivationCase(x.astype(np.float32), g, title="tiny groups")
    activation_checker.check(case, rounding=True)


@pytest.mark.clause("NVFP4-ACT-9")
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_leave_the_other_groups_alone(activation_checker, bad):
    """A NaN or an infinity in a group: that group's result is not specified, but every other
    group must be exactly what it is without it (or the kernel may refuse the tensor with a
    ValueError or TypeError)."""
    _static(activation_checker)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 64)) * 3).astype(np.float32)
    x[1, 20] = bad
    x[3, 0] = bad
    case = ActivationCase(x, np.float32(2688 / 12.0), title=f"a {bad!r} in two groups")
    case = activation_checker.in_domain(case, rounding=True)
    try:
        activation_checker.call(case)
    except (ValueError, TypeError):
        return  # refusing non-finite input is allowed (NVFP4-ACT-9)
    except Exception:  # noqa: BLE001 - judged (and reported) by check below
        pass
    activation_checker.check(case)


SHAPES = [(1, 16), (3, 48), (8, 64), (9, 80), (33, 16), (129, 80), (130, 272)]


@pytest.mark.clause("NVFP4-ACT-10")
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_scale_layout_with_padding(activation_checker, shape):
    """Shapes whose token count is not a multiple of the layout's rows (128 or 8) and whose
    scale columns are not a multiple of 4: the bytes in the declared layout, the padding
    0x00."""
    _static(activation_checker)
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-3, 3, (shape[0], 1)))).astype(np.float32)
    case = ActivationCase(x, np.float32(2688 / float(np.abs(x).max())),
                          title=f"{shape[0]}x{shape[1]}")
    activation_checker.check(case, rounding=True)


@pytest.mark.clause("NVFP4-ACT-11")
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["float32", "float16", "bfloat16"])
def test_each_declared_input_dtype(activation_checker, dtype):
    """Each input dtype the backend declares, with values exact in it (bfloat16's and
    float16's subnormals and largest values included), and tensors across the dtype's own range
    with a global scale that keeps their groups off saturation."""
    activation_checker.require_dtype(dtype)
    _static(activation_checker)
    info = ml_dtypes.finfo(dtype)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 64)).astype(dtype).astype(np.float64)
    x[1] *= float(info.smallest_subnormal) * 64
    x[2, :16] = float(info.max) / 2 ** rng.integers(0, 4, 16)
    x[3] *= 1e3
    case = ActivationCase(x.astype(dtype), np.float32(1.0), title=f"{np.dtype(dtype).name} input")
    activation_checker.check(case)
    # the dtype's own range with a global scale that does not saturate it: values beyond
    # float16's (a kernel narrowing bfloat16 or float32 to float16 first turns them infinite)
    # and below its subnormals (it flushes them)
    for top in (2.0 ** 40, 2.0 ** -30, float(info.max) / 4):
        if not float(info.smallest_subnormal) < top <= float(info.max) / 4:
            continue  # outside this dtype (float16 holds neither 2^40 nor 2^-30)
        wide = (rng.standard_normal((4, 32)) * top / 4).astype(dtype)
        g = np.float32(2688 / float(np.abs(wide.astype(np.float32)).max()))
        if not (np.isfinite(g) and g > 0 and np.isfinite(np.float32(1) / g)):
            continue
        activation_checker.check(ActivationCase(wide, g, title=f"{np.dtype(dtype).name} input "
                                                               f"near {top:g}"))


@pytest.mark.clause("NVFP4-ACT-1")
@pytest.mark.parametrize("g", [1.0, 0.5, 2688 / 3.7, 2688 / 0.013, 2.0 ** 100, 2.0 ** -100])
def test_a_static_global_scale_is_used_as_given(activation_checker, g):
    """The static scale g (or its reciprocal, as the backend declares) is used unchanged; a
    kernel that reports its global scale reports the one given."""
    _static(activation_checker)
    g = np.float32(g)
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((3, 32)) * 6 / float(g) * 300).astype(np.float32)
    if not np.isfinite(x).all() or not np.abs(x).max() > 0:
        pytest.skip("the scale puts these values outside float32")
    activation_checker.check(ActivationCase(x, g, title="static g"), rounding=True)


@pytest.mark.clause("NVFP4-ACT-1")
@pytest.mark.parametrize("kind", ["random", "all-zero", "one-element", "huge", "tiny"])
def test_a_dynamic_global_scale_is_computed_from_the_tensor(activation_checker, kind):
    """The dynamic mode: g = fp32(2688 / amax_t) (fast-math, exact) or a = fp32(amax_t / 2688)
    (torchao), reported with the result; an all-zero tensor gets g = a = 1."""
    activation_checker.require_mode("dynamic")
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 48))
    if kind == "all-zero":
        x[:] = 0.0
        x[1, 3] = -0.0
    elif kind == "one-element":
        x[:] = 0.0
        x[2, 17] = -0.7
    elif kind == "huge":
        x *= 1e30
    elif kind == "tiny":
        x *= 1e-30
    case = ActivationCase(x.astype(np.float32), None, title=f"dynamic, {kind}")
    activation_checker.check(case, rounding=True)
