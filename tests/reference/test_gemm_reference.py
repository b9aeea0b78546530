"""The block-scaled GEMM's reference (spec section 10) checked by routes that do not go through
it: the facts of NVFP4-GEMM-3 by enumeration with ``fractions.Fraction`` and ml_dtypes' own
decoders; the bound of NVFP4-GEMM-4 against every summation order of small cases and against
simulated fp32, fp16, bf16 and truncating accumulators; the exactness condition of
NVFP4-GEMM-7; the output rounding of NVFP4-GEMM-6 against a Fraction rounding written here and
numpy's single-rounding casts."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.cases import GemmCase
from hscale.judge.gemm import q8_0_exact
from hscale.judge.gemm_builders import (block_values_pair, from_values, nvfp4,
                                        q8_0_activations, random_nvfp4)
from hscale.reference.accumulation import GemmModel, admissible, bound_factor
from hscale.reference.float_formats import BFLOAT16, FLOAT16, FLOAT32, FORMATS

# -- independent decoders: ml_dtypes' own tables ------------------------------------------
E2M1 = [Fraction(float(v)) for v in
        np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)]
E4M3 = [Fraction(float(v)) for v in
        np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)]


def odd_part(value: Fraction) -> int:
    n = abs(value.numerator)
    while n and n % 2 == 0:
        n //= 2
    return n


def is_multiple(value: Fraction, power: int) -> bool:
    return (value / Fraction(2) ** power).denominator == 1


def exact_in(value: Fraction, dtype) -> bool:
    """Whether numpy / ml_dtypes hold ``value`` exactly in ``dtype`` (a cast and back)."""
    as_float = float(value)
    if Fraction(as_float) != value:
        return False
    with np.errstate(over="ignore"):
        back = np.array(as_float).astype(dtype).astype(np.float64)
    return bool(np.isfinite(back)) and Fraction(float(back)) == value


def fraction_round(value: Fraction, p: int, emin: int, emax: int,
                   mode: str = "nearest") -> float:
    """IEEE rounding of an exact rational into a format with p bits, to nearest (ties to even)
    or toward zero (written here from the definition, independently of
    hscale.reference.float_formats)."""
    if value == 0:
        return 0.0
    sign = -1 if value < 0 else 1
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    while Fraction(2) ** exponent > magnitude:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    quantum = Fraction(2) ** (max(exponent, emin) - p + 1)
    steps = magnitude / quantum
    rounded = math.floor(steps)
    if mode == "nearest" and (steps - rounded > Fraction(1, 2)
                              or (steps - rounded == Fraction(1, 2) and rounded % 2)):
        rounded += 1
    result = rounded * quantum
    largest = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    if result > largest:
        return sign * (math.inf if mode == "nearest" else float(largest))
    return sign * float(result)


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-3: what is exact
# ------------------------------------------------------------------------------------------

@pytest.mark.clause("NVFP4-GEMM-3")
def test_code_products_are_quarters_of_at_most_4_bits():
    products = [x * y for x in E2M1 for y in E2M1]
    assert len(products) == 256
    assert all(is_multiple(p, -2) and abs(p) <= 36 and odd_part(p) <= 9 for p in products)
    assert max(abs(p) for p in products) == 36 and max(odd_part(p) for p in products) == 9
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        assert all(exact_in(p, dtype) for p in products)


@pytest.mark.clause("NVFP4-GEMM-3")
def test_scale_products_every_byte_pair():
    """All 127 x 127 products of scale bytes 0x00..0x7E: multiples of 2^-18 with at most 8
    significant bits, at most 448^2, exact in fp32 and bf16, in fp16 exactly those <= 65504."""
    units = np.array([int(s * 2 ** 9) for s in E4M3], dtype=np.int64)  # exact: s in 2^-9 steps
    assert all(Fraction(int(u), 2 ** 9) == s for u, s in zip(units, E4M3))
    products = np.outer(units, units)  # in units of 2^-18
    assert products.max() == 448 ** 2 * 2 ** 18
    nonzero = products[products > 0]
    odd = nonzero // np.bitwise_and(nonzero, -nonzero)
    assert odd.max() == 225  # 15 * 15: 8 bits
    values = products.astype(np.float64) * 2.0 ** -18  # exact: at most 8 significant bits
    for dtype in (np.float32, ml_dtypes.bfloat16):
        assert np.array_equal(values.astype(dtype).astype(np.float64), values)
    with np.errstate(over="ignore"):
        fp16 = values.astype(np.float16).astype(np.float64)
    assert np.array_equal(fp16 == values, values <= 65504)
    assert int((values > 65504).sum()) > 0  # some do overflow fp16: the table's condition


@pytest.mark.clause("NVFP4-GEMM-3")
def test_dequantized_elements_and_terms():
    """Every code times every scale byte: multiples of 2^-10, at most 2688, 6 bits, exact in all
    three formats; every term (code product times scale product) at most 11 bits (2025 is the
    largest odd part), at most 7225344, exact in fp16 exactly when <= 65504 and in bf16 exactly
    when its odd part is below 2^8."""
    elements = [x * s for x in E2M1 for s in E4M3]
    assert all(is_multiple(e, -10) and abs(e) <= 2688 and odd_part(e) <= 45 for e in elements)
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        assert all(exact_in(e, dtype) for e in set(elements))
    code_products = sorted({abs(x * y) for x in E2M1 for y in E2M1} - {0})
    scale_products = sorted({a * b for a in E4M3 for b in E4M3} - {0})
    odd_max, magnitude_max = 0, 0
    for p in code_products:
        for s in scale_products[::7] + scale_products[-40:]:  # a spread, and the largest
            t = p * s
            odd_max, magnitude_max = max(odd_max, odd_part(t)), max(magnitude_max, t)
            assert is_multiple(t, -20)
            assert exact_in(t, np.float32)
            assert exact_in(t, np.float16) == (t <= 65504)
            assert exact_in(t, ml_dtypes.bfloat16) == (odd_part(t) < 256)
    assert odd_max <= 2025 < 2 ** 11
    assert magnitude_max == 36 * 448 ** 2 == 7225344
    assert odd_part(Fraction(9, 4) * Fraction(15, 8) ** 2) == 2025  # 1.5 * 1.5 * 1.875^2


@pytest.mark.clause("NVFP4-GEMM-3")
def test_block_partial_sums():
    """A block's partial sums are quarters of magnitude at most 576 (12 bits): 512.25 (4P =
    2049) is one, exact in fp32, not in fp16; the largest block value 448^2 * 576 is exact in
    fp32."""
    p = 14 * Fraction(36) + Fraction(6) + Fraction(9, 4)  # 16 products of E2M1 values
    assert p == Fraction(2049, 4) and (4 * p).numerator.bit_length() == 12
    assert exact_in(p, np.float32) and not exact_in(p, np.float16)
    assert exact_in(Fraction(448) ** 2 * 576, np.float32)
    # every partial sum of 16 products: at most 16 * 36
    assert 16 * max(abs(x * y) for x in E2M1 for y in E2M1) == 576


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-6: rounding into a format
# ------------------------------------------------------------------------------------------

@pytest.mark.clause("NVFP4-GEMM-6")
@pytest.mark.parametrize("name", list(FORMATS))
def test_exact_rounding_matches_an_independent_rounding(name):
    fmt = FORMATS[name]
    rng = np.random.default_rng(5)
    values = [Fraction(int(n)) * Fraction(2) ** int(e) for n, e in zip(
        rng.integers(-2 ** 40, 2 ** 40, 400), rng.integers(-60, 60, 400))]
    spacing = Fraction(2) ** (fmt.emin - fmt.p + 1)
    largest = Fraction(fmt.largest)
    # ties, the overflow threshold, subnormal ties
    values += [Fraction(257), Fraction(259), Fraction(2049), largest + largest / 2 ** (fmt.p + 1),
               largest + largest / 2 ** (fmt.p + 2), -largest * 2, spacing / 2, spacing * 3 / 2,
               Fraction(1) + Fraction(1, 2 ** fmt.p)]
    for value in values:
        want = fraction_round(value, fmt.p, fmt.emin, fmt.emax)
        numerator, denominator = value.numerator, value.denominator
        got = fmt.round(numerator, -(denominator.bit_length() - 1))
        assert got == want or (math.isinf(got) and math.isinf(want) and got == want), (value, got,
                                                                                     want)


@pytest.mark.clause("NVFP4-GEMM-6")
def test_numpy_casts_round_once_and_ml_dtypes_bfloat16_twice():
    """numpy's float64 -> float32 and -> float16 casts round once (they agree with the exact
    rounding); ml_dtypes' float64 -> bfloat16 goes through float32 and can round twice: 1 +
    2^-8 + 2^-30 is 1 + 2^-7 rounded once, 1.0 in ml_dtypes. The kit rounds exactly."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal(2000) * np.exp2(rng.integers(-30, 30, 2000))
    for fmt, dtype in ((FLOAT32, np.float32), (FLOAT16, np.float16)):
        with np.errstate(over="ignore"):
            cast = x.astype(dtype).astype(np.float64)
        assert np.array_equal(cast, [fmt.round_float(v) for v in x])
    tricky = 1 + 2.0 ** -8 + 2.0 ** -30
    assert BFLOAT16.round_float(tricky) == 1 + 2.0 ** -7
    assert float(np.array(tricky).astype(ml_dtypes.bfloat16)) == 1.0


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-1: the exact sum
# ------------------------------------------------------------------------------------------

def fraction_product(case: GemmCase, i: int, j: int) -> Fraction:
    """S[i, j] from ml_dtypes' decoders and Fractions."""
    b = case.b
    total = Fraction(0)
    for k in range(b.codes.shape[1]):
        if case.weight_only:
            x = Fraction(float(np.asarray(case.a[i, k], dtype=np.float64)))
        else:
            x = E2M1[case.a.codes[i, k]] * E4M3[case.a.scale_bytes[i, k // 16]]
        total += x * E2M1[b.codes[j, k]] * E4M3[b.scale_bytes[j, k // 16]]
    return total


@pytest.mark.clause("NVFP4-GEMM-1", "NVFP4-GEMM-8")
def test_exact_sums_match_fractions():
    rng = np.random.default_rng(1)
    cases = [GemmCase(random_nvfp4(rng, 3, 48), random_nvfp4(rng, 4, 48))]
    wide = (rng.standard_normal((2, 48)) * np.exp2(rng.integers(-120, 100, (2, 48))))
    for x in (rng.standard_normal((2, 48)).astype(np.float32),
              rng.standard_normal((2, 48)).astype(ml_dtypes.bfloat16), wide.astype(np.float32)):
        cases.append(GemmCase(x, random_nvfp4(rng, 3, 48)))
    for case in cases:
        m, n, _ = case.shape
        for i in range(m):
            for j in range(n):
                assert case.exact.value(i, j) == fraction_product(case, i, j)


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-4: the bound, against simulated accumulators and every order
# ------------------------------------------------------------------------------------------

def terms(case: GemmCase, i: int, j: int) -> list[Fraction]:
    b = case.b
    return [E2M1[case.a.codes[i, k]] * E4M3[case.a.scale_bytes[i, k // 16]]
            * E2M1[b.codes[j, k]] * E4M3[b.scale_bytes[j, k // 16]]
            for k in range(b.codes.shape[1])]


def _round(fmt_name: str, mode: str):
    fmt = FORMATS[fmt_name]
    return lambda value: Fraction(fraction_round(value, fmt.p, fmt.emin, fmt.emax, mode))


def tree_sum(values: list[Fraction], rounding, rng) -> Fraction:
    """Sum by a random binary tree, every addition rounded."""
    values = list(values)
    while len(values) > 1:
        i, j = sorted(rng.choice(len(values), 2, replace=False))
        b, a = values.pop(j), values.pop(i)
        values.append(rounding(a + b))
    return values[0]


@pytest.mark.clause("NVFP4-GEMM-4")
@pytest.mark.parametrize("model,mode", [("fp32", "nearest"), ("fp32-faithful", "toward-zero"),
                                        ("fp16", "nearest"), ("bf16", "nearest")])
def test_every_simulated_order_lies_within_the_bound(model, mode):
    """Random trees of rounded additions (after one rounded product per term in the narrower
    formats), 25 per element, on products whose sums cancel: each result lies in the
    accumulator interval of the model (NVFP4-GEMM-4)."""
    gemm_model = GemmModel.parse(model)
    rng = np.random.default_rng(3)
    a = random_nvfp4(rng, 2, 64, byte_low=0x20, byte_high=0x3C)
    b = random_nvfp4(rng, 2, 64, byte_low=0x20, byte_high=0x3C)
    case = GemmCase(a, b)
    allowed = admissible(a, b, "float32", gemm_model)
    rounding = _round(gemm_model.accumulator, mode)
    worst = Fraction(0)
    for i in range(2):
        for j in range(2):
            ts = terms(case, i, j)
            if gemm_model.narrow:
                ts = [rounding(t) for t in ts]
            lo, hi = Fraction(allowed.accumulator_low[i, j]), Fraction(allowed.accumulator_high[i, j])
            exact = case.exact.value(i, j)
            for _ in range(25):
                s = tree_sum(ts, rounding, rng)
                assert lo <= s <= hi, (model, i, j, float(s), float(lo), float(hi))
                worst = max(worst, abs(s - exact))
    bound = max(allowed.bound.ravel())
    assert worst <= bound


@pytest.mark.clause("NVFP4-GEMM-4")
def test_every_order_of_four_blocks():
    """Block values 2^24, 1, 1, -2^24: the orders and groupings of the three fp32 additions
    give 0 (both ones absorbed by 2^24), 1 (one absorbed, one kept by -2^24 + 1) or 2; each
    within the fp32 model's interval around the exact 2."""
    a, b = block_values_pair([2 ** 24, 1, 1, -2 ** 24])
    allowed = admissible(a, b, "float32", "fp32")
    blocks = [Fraction(2 ** 24), Fraction(1), Fraction(1), Fraction(-2 ** 24)]
    rounding = _round("float32", "nearest")
    results = set()

    def all_trees(values):
        if len(values) == 1:
            yield values[0]
            return
        for i, j in itertools.combinations(range(len(values)), 2):
            rest = [v for k, v in enumerate(values) if k not in (i, j)]
            yield from all_trees(rest + [rounding(values[i] + values[j])])
    for perm in itertools.permutations(blocks):
        results.update(all_trees(list(perm)))
    assert results == {Fraction(0), Fraction(1), Fraction(2)}
    assert all(allowed.accumulator_low[0, 0] <= r <= allowed.accumulator_high[0, 0]
               for r in results)


@pytest.mark.clause("NVFP4-GEMM-4")
def test_the_bound_factor_and_the_figures_the_spec_quotes():
    fp32, fp16 = GemmModel.parse("fp32"), GemmModel.parse("fp16")
    k = 4096
    factor = bound_factor(fp32, k - 1)
    exact = (1 + Fraction(1, 2 ** 24)) ** (k - 1) - 1
    assert exact <= factor <= exact + Fraction(1, 2 ** 90)
    gamma = (k - 1) * Fraction(1, 2 ** 24) / (1 - (k - 1) * Fraction(1, 2 ** 24))
    assert factor <= gamma  # (1 + u)^d - 1 <= gamma_d
    assert abs(float(factor) - 2.44e-4) < 0.01e-4
    assert abs(float(bound_factor(fp16, 64)) - 0.032) < 0.0005
    assert bound_factor(fp16, 1419) < 1 < bound_factor(fp16, 1420)


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-7: exactly summable inputs
# ------------------------------------------------------------------------------------------

@pytest.mark.clause("NVFP4-GEMM-7")
def test_exactly_summable_inputs_give_one_value_in_every_order():
    """Sums whose terms' magnitudes add up to at most 2^(p+q): every order gives S, and the
    interval is the one value (fp32 and, with small sums, fp16)."""
    rng = np.random.default_rng(9)
    for _ in range(12):
        a = random_nvfp4(rng, 1, 64, byte_low=0x30, byte_high=0x40)
        b = random_nvfp4(rng, 1, 64, byte_low=0x30, byte_high=0x40)
        case = GemmCase(a, b)
        ts = terms(case, 0, 0)
        if not any(ts):
            continue
        # 2^q, the largest power of two dividing every term
        quantum = Fraction(1, max(t.denominator for t in ts if t)) if any(ts) else Fraction(1)
        while all((t / (2 * quantum)).denominator == 1 for t in ts):
            quantum *= 2
        for model in ("fp32", "fp16"):
            allowed = admissible(a, b, "float32", model)
            fmt = GemmModel.parse(model).format
            summable = sum(abs(t) for t in ts) <= 2 ** fmt.p * quantum
            if model == "fp16":
                summable &= all(abs(t) <= 65504 for t in ts)
            assert bool(allowed.exact[0, 0]) == summable, (model, float(sum(abs(t) for t in ts)),
                                                           quantum)
            if allowed.exact[0, 0]:
                rounding = _round(fmt.name, "nearest")
                for _ in range(6):
                    assert tree_sum([rounding(t) for t in ts], rounding, rng) == sum(ts)
                assert allowed.accumulator_low[0, 0] == allowed.accumulator_high[0, 0] \
                    == float(sum(ts))


@pytest.mark.clause("NVFP4-GEMM-7", "NVFP4-GEMM-5")
def test_the_global_scale_step_is_judged_exactly():
    """S = 257, gA gB = 3, bfloat16 out: fp32 gives 771, which bfloat16 rounds to 772 (the one
    admissible value); torchao's order (257 -> 256 in bfloat16, times 3) gives 768, admissible
    only under the 'output' placement."""
    a, b = block_values_pair([257])
    a3 = nvfp4(a.codes, a.scale_bytes, 3.0)
    spec = admissible(a3, b, "bfloat16", "fp32")
    late = admissible(a3, b, "bfloat16", {"global_scales": "output"})
    assert spec.low[0, 0] == spec.high[0, 0] == 772.0
    assert late.low[0, 0] == late.high[0, 0] == 768.0


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-8: the weight-only GEMM
# ------------------------------------------------------------------------------------------

def ggml_q8_0(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_0_ref, restated: per 32, d = amax / 127, q = round(x / d),
    stored d as fp16; the decoded values d * q."""
    blocks = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = np.round(blocks * inv[:, None]).astype(np.int8)  # roundf: ties away, none occur here
    return (q.astype(np.float32) * d.astype(np.float16).astype(np.float32)[:, None]).reshape(x.shape)


@pytest.mark.clause("NVFP4-GEMM-8")
def test_q8_0_activations_survive_ggml_quantization():
    rng = np.random.default_rng(4)
    x = q8_0_activations(rng, 4, 128)
    assert q8_0_exact(x)
    assert np.array_equal(ggml_q8_0(x), x)
    assert not q8_0_exact(rng.standard_normal((4, 128)).astype(np.float32))


@pytest.mark.clause("NVFP4-GEMM-8", "NVFP4-GEMM-4")
def test_weight_only_roundings_and_the_range_it_judges():
    """bf16 and Q8_0 activations make exact terms (d = K - 1); fp32 activations take two
    multiplications (d = K + 1); activations below 2^-116 may round a subnormal product in fp32
    and such elements are not judged."""
    rng = np.random.default_rng(8)
    b = random_nvfp4(rng, 2, 64)
    bf16 = rng.standard_normal((2, 64)).astype(ml_dtypes.bfloat16)
    assert admissible(bf16, b, "float32", "fp32").roundings == 63
    assert admissible(q8_0_activations(rng, 2, 64), b, "float32", "fp32").roundings == 63
    fp32 = rng.standard_normal((2, 64)).astype(np.float32)
    assert admissible(fp32, b, "float32", "fp32").roundings == 65
    tiny = (fp32 * np.float32(2.0 ** -120)).astype(np.float32)
    allowed = admissible(tiny, b, "float32", "fp32")
    assert not allowed.judged.any() and "subnormal" in allowed.reason[0, 0]
    x = np.ones((1, 16), np.float32)
    single = from_values(np.full((1, 16), 1.5), 0x38)
    assert admissible(x, single, "float32", "fp32").low[0, 0] == 24.0
