"""The activation recipes (docs/spec.md section 8, NVFP4-ACT-2 .. -8) on the spec's
hand-worked cases, derived again with ``fractions.Fraction`` (every fp32 operation the exact
rational rounded to the nearest fp32, ties to even; E4M3 and E2M1 by nearest-value search of
their tables), against the reference (``hscale.reference.quantize_activations``) and the judge
(what the fast-math recipe admits, NVFP4-ACT-5)."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from hscale.judge.activation_domain import ObservedActivations
from hscale.judge.activations import ActivationCase, diagnose_activations
from hscale.reference.activations import quantize_activations

E2M1 = [F(v) for v in ("0", "1/2", "1", "3/2", "2", "3", "4", "6")]


def _e4m3(byte: int) -> F:
    e, m = byte >> 3, byte & 7
    return F(m, 512) if e == 0 else F(8 + m, 8) * F(2) ** (e - 7)


E4M3 = [_e4m3(b) for b in range(127)]
INF = float("inf")


def f32(x: F) -> F:
    """Round a rational to the nearest fp32 (ties to even), subnormals included."""
    if x == 0:
        return F(0)
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if F(2) ** e > x:
        e -= 1
    quantum = F(2) ** (max(e, -126) - 23)
    n, rem = divmod(x, quantum)
    n = int(n) + (1 if rem * 2 > quantum or (rem * 2 == quantum and int(n) % 2) else 0)
    return sign * n * quantum


def nearest(x: F, table: list[F]) -> int:
    """Index of the nearest table value, a tie to the even index, saturating at the top."""
    if x >= table[-1]:
        return len(table) - 1
    return min(range(len(table)), key=lambda i: (abs(table[i] - x), i % 2))


def code(p: F, negative: bool) -> int:
    return (0x8 if negative else 0) | nearest(abs(p), E2M1)


R6 = F(11184811, 2 ** 26)  # fp32(1/6)
R6_BELOW = F(11184810, 2 ** 26)  # its lower neighbour


def fast_math_byte(amax: F, g: F, r6: F = R6) -> int:
    return nearest(f32(g * f32(amax * r6)), E4M3)


def exact_byte(amax: F, g: F) -> int:
    return nearest(min(f32(amax * f32(g * f32(F(1) / 6))), F(448)), E4M3)


def torchao_byte(amax: F, a: F) -> int:
    return nearest(min(max(f32(f32(amax / 6) / a), F(1, 64)), F(448)), E4M3)


def _run(x: np.ndarray, g: float, recipe: str):
    return quantize_activations(np.asarray(x, np.float32), np.float32(g), recipe=recipe)


def _admits(x, g, recipe, scale_bytes, codes) -> bool:
    case = ActivationCase(np.asarray(x, np.float32), np.float32(g))
    observed = ObservedActivations(np.asarray(codes, np.uint8),
                                   np.asarray(scale_bytes, np.uint8), None, None)
    return diagnose_activations(case, observed, recipe).ok


def _group(maximum: float, *others: float) -> np.ndarray:
    x = np.zeros((1, 16), np.float32)
    x[0, :1 + len(others)] = (maximum,) + others
    return x


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-2", "NVFP4-ACT-6", "NVFP4-ACT-7")
def test_the_association_case():
    """g = 5, amax_g = 15 * 2^-9: fast-math lands on the midpoint of 0x0C and 0x0D (a tie,
    0x0C), exact 2^-29 above it (0x0D), torchao on it (0x0C)."""
    amax, g = F(15, 2 ** 9), F(5)
    assert f32(amax * R6) == F(5, 2 ** 10) and g * F(5, 2 ** 10) == (E4M3[0x0C] + E4M3[0x0D]) / 2
    assert fast_math_byte(amax, g) == fast_math_byte(amax, g, R6_BELOW) == 0x0C
    assert f32(g * R6) == F(13981014, 2 ** 24)
    assert f32(amax * F(13981014, 2 ** 24)) == F(13107201, 2 ** 29)
    assert exact_byte(amax, g) == 0x0D
    a = f32(F(1, 5))
    assert torchao_byte(amax, a) == 0x0C
    x = _group(float(amax))
    for recipe, byte in (("fast-math", 0x0C), ("exact", 0x0D), ("torchao", 0x0C)):
        assert _run(x, 5.0, recipe).scale_bytes[0, 0] == byte, recipe
    exact = _run(x, 5.0, "exact")
    assert not _admits(x, 5.0, "fast-math", exact.scale_bytes, exact.codes)
    fast = _run(x, 5.0, "fast-math")
    assert not _admits(x, 5.0, "exact", fast.scale_bytes, fast.codes)


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-2", "NVFP4-ACT-6", "NVFP4-ACT-7")
def test_the_reciprocal_error_case():
    """g = 3, amax_g = 3 * 2^-9: fp32(1/6) gives the midpoint 3 * 2^-10 exactly (0x02, a tie),
    its lower neighbour (within PTX's one ulp) lands below it (0x01): fast-math admits both;
    exact gives 0x02, torchao clamps to 0x08."""
    amax, g = F(3, 2 ** 9), F(3)
    assert f32(amax * R6) == F(1, 2 ** 10)
    assert f32(amax * R6_BELOW) == F(2 ** 24 - 1, 2 ** 34)
    assert fast_math_byte(amax, g) == 0x02 and fast_math_byte(amax, g, R6_BELOW) == 0x01
    assert exact_byte(amax, g) == 0x02
    assert torchao_byte(amax, f32(F(1, 3))) == 0x08
    x = _group(float(amax))
    for recipe, byte in (("fast-math", 0x02), ("exact", 0x02), ("torchao", 0x08)):
        assert _run(x, 3.0, recipe).scale_bytes[0, 0] == byte, recipe
    ref = _run(x, 3.0, "fast-math")
    lower = ref.scale_bytes.copy()
    lower[0, 0] = 0x01
    o = f32(1 / f32(E4M3[0x01] * f32(F(1, 3))))
    codes_at_lower = np.zeros((1, 16), np.uint8)
    codes_at_lower[0, 0] = code(f32(amax * o), False)
    assert _admits(x, 3.0, "fast-math", lower, codes_at_lower)
    assert not _admits(x, 3.0, "exact", lower, codes_at_lower)


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-3", "NVFP4-ACT-6", "NVFP4-ACT-7")
def test_the_code_case():
    """g = 3, group [1, 0.125]: byte 0x30 (0.5) in every recipe; 0.125 * o is the tie 0.75
    (code 0x2) for o = 6, the correctly rounded reciprocal of 0.16666667, and below it (0x1)
    for its lower neighbour: fast-math admits both, exact and torchao give 0x2."""
    g = F(3)
    assert fast_math_byte(F(1), g) == exact_byte(F(1), g) == 0x30
    denominator = f32(E4M3[0x30] * f32(1 / g))
    assert denominator == F(11184811, 2 ** 26)
    o = f32(1 / denominator)
    assert o == 6 and code(f32(F(1, 8) * o), False) == 0x2
    o_below = F(12582911, 2 ** 21)  # 6 - 2^-21, the lower neighbour of 6 (within one ulp)
    assert abs(o_below - 1 / denominator) < F(1, 2 ** 21)
    assert code(f32(F(1, 8) * o_below), False) == 0x1
    x = _group(1.0, 0.125)
    for recipe in ("fast-math", "exact", "torchao"):
        q = _run(x, 3.0, recipe)
        assert q.scale_bytes[0, 0] == 0x30 and q.codes[0, 1] == 0x2, recipe
    q = _run(x, 3.0, "fast-math")
    moved = q.codes.copy()
    moved[0, 1] = 0x1
    assert _admits(x, 3.0, "fast-math", q.scale_bytes, moved)
    assert not _admits(x, 3.0, "exact", q.scale_bytes, moved)


@pytest.mark.clause("NVFP4-ACT-3", "NVFP4-ACT-5")
def test_an_exact_reciprocal_pins_a_tie_to_even():
    """g = 1, group [6, 2.5]: byte 0x38, rcp(1) = 1 exactly, so 2.5 is a tie that goes to 0x4:
    ties away from zero (0x5) are not fast-math."""
    assert fast_math_byte(F(6), F(1)) == 0x38
    x = _group(6.0, 2.5)
    q = _run(x, 1.0, "fast-math")
    assert q.codes[0, :2].tolist() == [0x7, 0x4]
    away = q.codes.copy()
    away[0, 1] = 0x5
    assert not _admits(x, 1.0, "fast-math", q.scale_bytes, away)


@pytest.mark.clause("NVFP4-ACT-8", "NVFP4-ACT-2", "NVFP4-ACT-6", "NVFP4-ACT-7")
def test_the_underflow_and_zero_group_cases():
    """g = 1, [1e-4, -2e-4, 0, -0.0]: SF below 2^-10, byte 0x00 in fast-math (codes times 0, or
    times inf) and exact (codes times FLT_MAX), 0x08 in torchao (codes from x * 64); a group of
    zeros: 0x00, 0x00, 0x08, signed zeros everywhere."""
    x = np.zeros((2, 16), np.float32)
    x[0, :4] = [1e-4, -2e-4, 0.0, -0.0]
    x[1, 3] = -0.0
    fast, exact, torchao = (_run(x, 1.0, r) for r in ("fast-math", "exact", "torchao"))
    assert fast.scale_bytes[:, 0].tolist() == [0x00, 0x00]
    assert fast.codes[0, :4].tolist() == [0x0, 0x8, 0x0, 0x8]
    assert exact.scale_bytes[:, 0].tolist() == [0x00, 0x00]
    assert exact.codes[0, :4].tolist() == [0x7, 0xF, 0x0, 0x8]
    assert torchao.scale_bytes[:, 0].tolist() == [0x08, 0x08]
    assert torchao.codes[0, :4].tolist() == [0x0, 0x8, 0x0, 0x8]
    for q in (fast, exact, torchao):
        assert q.codes[1, 3] == 0x8 and not q.codes[1, :3].any()
    sixes = fast.codes.copy()
    sixes[0, :2] = [0x7, 0xF]  # TensorRT-LLM / FlashInfer: times rcp(0) = inf
    assert _admits(x, 1.0, "fast-math", fast.scale_bytes, sixes)
    assert not _admits(x, 1.0, "exact", fast.scale_bytes, fast.codes)


@pytest.mark.clause("NVFP4-ACT-8")
def test_a_static_scale_below_the_run_time_amax_saturates_in_every_recipe():
    """g = 1 calibrated for amax 2688, met with 3000: SF = 500 > 448 gives 0x7E (never 0x7F)
    and code 6; the fp32 arithmetic of each recipe, derived with fractions."""
    x = _group(3000.0, -2900.0, 448.0 * 6 * 1.001)
    for recipe in ("fast-math", "exact", "torchao"):
        q = _run(x, 1.0, recipe)
        assert q.scale_bytes[0, 0] == 0x7E and q.codes[0, :3].tolist() == [0x7, 0xF, 0x7], recipe
    nan_byte = np.array([[0x7F]], np.uint8)
    assert not _admits(x, 1.0, "fast-math", nan_byte, _run(x, 1.0, "fast-math").codes)
