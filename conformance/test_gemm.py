"""The block-scaled GEMM (spec section 10, NVFP4-GEMM-*), through a backend of the gemm kind:
hand-worked products whose every partial sum is exact (one admissible result, judged bit for
bit, and checked against values worked here from the E2M1 and E4M3 tables), sums whose result
depends on the order, the global scales, the output rounding, the layouts, and random products
judged against the interval of the backend's declared accumulation model. A backend that does
not declare the gemm kind skips each test, saying so."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hscale.judge.cases import GemmCase
from hscale.judge.gemm_builders import (activations, block_values_pair, from_values, nvfp4,
                                        q8_0_activations, random_nvfp4)

#: The E2M1 values of codes 0x0..0xF and the E4M3 values of a few bytes, written out here
#: (NVFP4-E2M1-1, NVFP4-E4M3-1), so the expected results are worked independently of the kit.
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
E4M3 = {0x01: 2.0 ** -9, 0x07: 7 * 2.0 ** -9, 0x08: 2.0 ** -6, 0x38: 1.0, 0x3C: 1.5,
        0x48: 4.0, 0x55: 13.0, 0x7E: 448.0}
OUT_DTYPES = ["float32", "bfloat16", "float16"]
_NUMPY_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def expect_exact(gemm_checker, case: GemmCase, expected, clause: str):
    """Where the declared model admits one result (every partial sum exact), the result is the
    value worked by hand: ``expected`` (exact rationals or floats, each exact in fp32, before
    the output rounding, which numpy's and ml_dtypes' casts from fp32 do here: each rounds
    once)."""
    observed = gemm_checker.check(case)
    allowed = case.admissible(gemm_checker.model)
    one_value = allowed.exact & allowed.judged & (allowed.low == allowed.high)
    target = np.asarray([[float(v) for v in row] for row in expected], dtype=np.float64)
    exact = np.array([[Fraction(float(v)) == Fraction(v) for v in row] for row in expected])
    assert (exact & (target.astype(np.float32) == target))[one_value].all(), \
        "a hand value with one admissible result is exact in fp32 (it is the exact sum)"
    with np.errstate(over="ignore"):
        want = target.astype(np.float32).astype(_NUMPY_DTYPES[case.out_dtype]).astype(np.float64)
    differs = one_value & (observed != want)
    if differs.any():
        i, j = (int(v) for v in np.argwhere(differs)[0])
        gemm_checker.fail(clause, f"worked by hand {want[i, j]!r}, observed "
                          f"{observed[i, j]!r} (every partial sum is exact: one admissible "
                          "result)", case, output=(i, j))
    return observed


def _diagonal(sums):
    """A and B whose row k gives S[k, k] = sums[k] exactly: one block each, or the blocks of
    a list of block values (the others padded with zero blocks)."""
    sums = [s if isinstance(s, list) else [s] for s in sums]
    width = max(len(s) for s in sums)
    rows = [block_values_pair(s + [0] * (width - len(s))) for s in sums]
    return tuple(nvfp4(np.concatenate([r[side].codes for r in rows]),
                       np.concatenate([r[side].scale_bytes for r in rows])) for side in (0, 1))


@pytest.mark.clause("NVFP4-GEMM-1", "NVFP4-GEMM-3")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_every_code_product(gemm_checker, out_dtype):
    """Row r of A and of B hold code r sixteen times: D[i, j] = 16 a_i b_j, all 256 E2M1
    products (NVFP4-GEMM-3: each exact, as are their sums)."""
    gemm_checker.require(out_dtype=out_dtype)
    codes = np.repeat(np.arange(16, dtype=np.uint8)[:, None], 16, axis=1)
    a = nvfp4(codes, 0x38)
    case = GemmCase(a, a, out_dtype, title="every E2M1 x E2M1 product")
    expect_exact(gemm_checker, case, [[16 * x * y for y in E2M1] for x in E2M1], "NVFP4-GEMM-3")


@pytest.mark.clause("NVFP4-GEMM-1")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_each_block_has_its_own_scales(gemm_checker, out_dtype):
    """Four blocks with different scale bytes in A and B (normal, subnormal, the top): each
    block's code sums meet the product of its own two scales (NVFP4-GEMM-1)."""
    gemm_checker.require(out_dtype=out_dtype)
    a_bytes, b_bytes = [0x38, 0x07, 0x48, 0x55], [0x3C, 0x01, 0x08, 0x38]
    values = np.tile([1.0, -0.5, 2.0, 0.0, 1.5, -3.0, 0.5, 4.0], 8)[None, :]  # K = 64
    a = from_values(values, [a_bytes])
    b_rows = np.stack([np.roll(values[0], s) for s in (0, 3)])
    b = from_values(b_rows, [b_bytes, b_bytes])
    case = GemmCase(a, b, out_dtype, title="per-block scales")
    expected = [[sum(Fraction(values[0, k]) * Fraction(b_rows[j, k])
                     * Fraction(E4M3[a_bytes[k // 16]]) * Fraction(E4M3[b_bytes[k // 16]])
                     for k in range(64)) for j in range(2)]]
    expect_exact(gemm_checker, case, expected, "NVFP4-GEMM-1")


@pytest.mark.clause("NVFP4-GEMM-3", "NVFP4-GEMM-6")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_largest_magnitudes(gemm_checker, out_dtype):
    """Every code +-6 at scale 448: each block value 448^2 * 576 = 115605504 (NVFP4-GEMM-3's
    largest, exact in fp32); four blocks 441 * 2^20, which bfloat16 rounds to 440 * 2^20 (a
    tie, to even) and float16 overflows to +-inf (NVFP4-GEMM-6)."""
    gemm_checker.require(out_dtype=out_dtype)
    a = nvfp4(np.full((2, 64), 0x7, np.uint8), 0x7E)
    b = nvfp4(np.stack([np.full(64, 0x7, np.uint8), np.full(64, 0xF, np.uint8)]), 0x7E)
    case = GemmCase(a, b, out_dtype, title="the largest terms")
    big = 448.0 ** 2 * 576 * 4  # 441 * 2^20
    observed = expect_exact(gemm_checker, case, [[big, -big], [big, -big]], "NVFP4-GEMM-6")
    hand = {"float32": big, "bfloat16": 440 * 2.0 ** 20, "float16": np.inf}[out_dtype]
    if case.admissible(gemm_checker.model).exact.all() and not (
            observed[0, 0] == hand and observed[0, 1] == -hand):
        gemm_checker.fail("NVFP4-GEMM-6", f"441 * 2^20 in {out_dtype} is {hand!r} (worked by "
                          f"hand), observed {observed[0, 0]!r}", case, output=(0, 0))


@pytest.mark.clause("NVFP4-GEMM-3")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_subnormal_scale_products(gemm_checker, out_dtype):
    """Subnormal scale bytes on both sides: products down to 2^-18, terms down to 2^-20,
    all exact (NVFP4-GEMM-3); 2^-16 and smaller outputs are subnormal in float16 (exact
    there too when a multiple of 2^-24)."""
    gemm_checker.require(out_dtype=out_dtype)
    a = from_values(np.full((2, 16), 0.5), [[0x01], [0x07]])
    b = from_values(np.stack([np.full(16, 0.5), np.full(16, -6.0)]), [[0x01], [0x7E]])
    case = GemmCase(a, b, out_dtype, title="subnormal scale products")
    expected = [[16 * Fraction(0.5) * Fraction(y) * Fraction(E4M3[ba]) * Fraction(E4M3[bb])
                 for y, bb in ((0.5, 0x01), (-6.0, 0x7E))] for ba in (0x01, 0x07)]
    expect_exact(gemm_checker, case, expected, "NVFP4-GEMM-3")


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-7")
def test_cancellation_is_exact_in_fp32(gemm_checker):
    """Two blocks of +-115605504 that cancel to 12 * 448^2 = 2408448: every partial sum is a
    multiple of 2^14 below 2^38, so exact in fp32 in any order (NVFP4-GEMM-7)."""
    gemm_checker.require()
    a, b = block_values_pair([448 ** 2 * 576, -448 ** 2 * 564], prefer=(0x7E,))
    case = GemmCase(a, b, gemm_checker.out_dtype(), title="exact cancellation")
    expect_exact(gemm_checker, case, [[12 * 448 ** 2]], "NVFP4-GEMM-7")


@pytest.mark.clause("NVFP4-GEMM-4")
def test_an_order_sensitive_sum(gemm_checker):
    """Block values 2^24, 1, 1, -2^24: summed left to right in fp32 the ones are lost (0),
    in other orders they are kept (2); both are within the bound of the fp32 model, and the
    backend's result must lie in the interval of its declared model (NVFP4-GEMM-4)."""
    gemm_checker.require()
    a, b = block_values_pair([2 ** 24, 1, 1, -2 ** 24])
    gemm_checker.check(GemmCase(a, b, gemm_checker.out_dtype(),
                                title="order-sensitive block values"))


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-7")
def test_a_sum_exact_in_fp32_but_not_in_fp16(gemm_checker):
    """2048 + 1 = 2049 (12 bits): exact in an fp32 accumulator in any order, not in fp16's
    11 bits: a kernel declaring fp32 must return 2049 (an fp16 accumulator gives 2048)."""
    gemm_checker.require()
    a, b = block_values_pair([2048, 1])
    case = GemmCase(a, b, gemm_checker.out_dtype(), title="2049: exact in fp32, not in fp16")
    expect_exact(gemm_checker, case, [[2049]], "NVFP4-GEMM-4")


@pytest.mark.clause("NVFP4-GEMM-5")
@pytest.mark.parametrize("g_a,g_b", [(3.0, 1.0), (0.75, 2.0 ** -3), (1 / 3, 0.1)],
                         ids=["3x1", "0.75x2^-3", "third-x-tenth"])
def test_global_scales_on_the_accumulator(gemm_checker, g_a, g_b):
    """S = 257 exactly (9 bits); D = bf16(fp32(gA gB) * 257): with gA gB = 3, 771 rounds to
    772 in bfloat16, where rounding 257 to bfloat16 first (256) and then scaling gives 768
    (NVFP4-GEMM-5: the global scales multiply the fp32 accumulator, not the output)."""
    gemm_checker.require(out_dtype="bfloat16")
    a, b = block_values_pair([257])
    case = GemmCase(nvfp4(a.codes, a.scale_bytes, np.float32(g_a)),
                    nvfp4(b.codes, b.scale_bytes, np.float32(g_b)), "bfloat16",
                    title=f"global scales {g_a!r} x {g_b!r} on S = 257")
    observed = gemm_checker.check(case)
    if (g_a, g_b) == (3.0, 1.0) and case.admissible(gemm_checker.model).exact[0, 0] and not (
            observed[0, 0] == 772.0 or gemm_checker.model.global_scales != "accumulator"):
        gemm_checker.fail("NVFP4-GEMM-5", "worked by hand: bf16(3 * 257 = 771) = 772, observed "
                          f"{observed[0, 0]!r}", case, output=(0, 0))


@pytest.mark.clause("NVFP4-GEMM-6")
@pytest.mark.parametrize("out_dtype,sums,hand", [
    ("bfloat16", [257, 259, -257, 255], [256, 260, -256, 255]),
    ("float16", [2049, 2051, 4095, -2049], [2048, 2052, 4096, -2048]),
])
def test_output_ties_go_to_even(gemm_checker, out_dtype, sums, hand):
    """Exact sums on ties of the output dtype round to the even neighbour (NVFP4-GEMM-6)."""
    gemm_checker.require(out_dtype=out_dtype)
    a, b = _diagonal(sums)
    case = GemmCase(a, b, out_dtype, title=f"{out_dtype} ties")
    observed = gemm_checker.check(case)
    allowed = case.admissible(gemm_checker.model)
    for k, want in enumerate(hand):
        if allowed.exact[k, k] and allowed.low[k, k] == allowed.high[k, k] \
                and observed[k, k] != want:
            gemm_checker.fail("NVFP4-GEMM-6", f"{sums[k]} rounds to {want} in {out_dtype} (ties "
                              f"to even), observed {observed[k, k]!r}", case, output=(k, k))


#: Per output dtype: exact sums (block values) whose 24th significant bit decides the output's
#: rounding, a tie of the output dtype plus or minus its smallest part (257 + 2^-15 rounds up
#: to 258 in bfloat16, where 257 is a tie to 256; in float16, 256.125 + 2^-15 up to 256.25 and
#: 256.375 - 2^-15 down to 256.25, where the ties go to 256 and 256.5; 2^23 + 1 and
#: -2^23 + 3 need 24 bits in float32), with the result worked by hand. The smallest block is
#: 2^-18 * 8 (scale bytes 0x01): its terms' quantum 2^-15 makes every partial sum of an fp32
#: accumulator exact (NVFP4-GEMM-7), so the result is one value.
LAST_BIT_SUMS = {"bfloat16": ([[257, Fraction(1, 2 ** 15)], [-257, -Fraction(1, 2 ** 15)]],
                              [258.0, -258.0]),
                 "float16": ([[Fraction(2049, 8), Fraction(1, 2 ** 15)],
                              [Fraction(2051, 8), -Fraction(1, 2 ** 15)]], [256.25, 256.25]),
                 "float32": ([[2 ** 23, 1], [-2 ** 23, 3]], [2 ** 23 + 1.0, -2 ** 23 + 3.0])}


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-7")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_the_accumulators_last_bit_decides_the_output(gemm_checker, out_dtype):
    """Exactly summable sums that need all 24 bits of an fp32 accumulator and sit just off a
    tie of the output dtype (LAST_BIT_SUMS): an accumulator of fewer bits loses the last bit
    and the output rounds the other way (a narrow output does not hide it here)."""
    gemm_checker.require(out_dtype=out_dtype)
    sums, hand = LAST_BIT_SUMS[out_dtype]
    a, b = _diagonal(sums)
    case = GemmCase(a, b, out_dtype, title=f"24-bit sums, {out_dtype}")
    observed = gemm_checker.check(case)
    allowed = case.admissible(gemm_checker.model)
    for k, want in enumerate(hand):  # the diagonal: S[k, k] is the k-th sum
        if allowed.exact[k, k] and allowed.low[k, k] == allowed.high[k, k]:
            assert observed[k, k] == want, (
                f"[NVFP4-GEMM-4] output element (i={k}, j={k}): the exact sum "
                f"{float(sum(Fraction(v) for v in sums[k]))!r} is {want!r} in {out_dtype}, "
                f"observed {observed[k, k]!r}")


@pytest.mark.clause("NVFP4-GEMM-5")
@pytest.mark.parametrize("out_dtype,total,hand", [("bfloat16", 257, 258.0),
                                                  ("float16", 2049, 2050.0),
                                                  ("float32", 2 ** 23 + 1, 2.0 ** 23 + 2)])
def test_a_global_scale_of_24_bits_decides_the_output(gemm_checker, out_dtype, total, hand):
    """alpha = fp32(gA gB) = 1 + 2^-23, 24 bits, on an exact sum at a tie of the output dtype:
    fp32(alpha * S) is just above the tie and rounds up (bfloat16 258, float16 2050; in fp32,
    (2^23 + 1)(1 + 2^-23) rounds to 2^23 + 2); alpha kept to fewer bits is 1, and the tie goes
    to even (NVFP4-GEMM-5: the global scales in fp32). A kernel declaring another placement of
    the global scales (torchao's on the output) is judged by that placement's interval."""
    gemm_checker.require(out_dtype=out_dtype)
    a, b = block_values_pair([total] if total < 2 ** 20 else [2 ** 23, 1])
    case = GemmCase(nvfp4(a.codes, a.scale_bytes, np.float32(1 + 2.0 ** -23)),
                    nvfp4(b.codes, b.scale_bytes, np.float32(1.0)), out_dtype,
                    title=f"a 24-bit alpha on S = {total}, {out_dtype}")
    if gemm_checker.model.global_scales != "accumulator":
        gemm_checker.check(case)
        return
    expect_exact(gemm_checker, case, [[hand]], "NVFP4-GEMM-5")


@pytest.mark.clause("NVFP4-GEMM-3")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scale_products_beyond_float16_with_small_global_scales(gemm_checker, out_dtype):
    """Scale bytes 0x7E (448) on both sides: sA sB = 200704, beyond float16's range but exact in
    fp32 (NVFP4-GEMM-3), with global scales 2^-12 and 2^-10 that bring the output back into
    every output dtype: 448^2 * (6 * 0.5 - 1 * 1) * 2^-22 = 0.0957..., exactly."""
    gemm_checker.require(out_dtype=out_dtype)
    a = from_values(np.array([[6.0, 1.0] + [0.0] * 14]), 0x7E, np.float32(2.0 ** -12))
    b = from_values(np.array([[0.5, -1.0] + [0.0] * 14]), 0x7E, np.float32(2.0 ** -10))
    expect_exact(gemm_checker, GemmCase(a, b, out_dtype, title="sA sB = 448^2"),
                 [[Fraction(448 ** 2 * 2, 2 ** 22)]], "NVFP4-GEMM-3")


@pytest.mark.clause("NVFP4-GEMM-6")
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_a_zero_sum_is_a_zero(gemm_checker, out_dtype):
    """Sums that cancel to zero exactly: the output is +0 or -0 (NVFP4-GEMM-6: the sign of a
    zero is not specified), never NaN."""
    gemm_checker.require(out_dtype=out_dtype)
    a, b = _diagonal([[3, -3], [0], [448, -448, 0.25, -0.25]])
    case = GemmCase(a, b, out_dtype, title="zero sums")
    observed = gemm_checker.check(case)
    for k in range(3):
        assert observed[k, k] == 0, (f"[NVFP4-GEMM-6] output element (i={k}, j={k}): the sum "
                                     f"is 0 exactly, observed {observed[k, k]!r}")


@pytest.mark.clause("NVFP4-GEMM-6")
def test_float16_output_overflows_to_infinity(gemm_checker):
    """65520 is float16's largest value plus half an ulp: it rounds (ties to even) to +inf;
    65519 to 65504 (NVFP4-GEMM-6)."""
    gemm_checker.require(out_dtype="float16")
    a, b = _diagonal([65520, [65536, -17], -65520])  # 65519 is prime: two blocks
    case = GemmCase(a, b, "float16", title="float16 overflow")
    observed = gemm_checker.check(case)
    allowed = case.admissible(gemm_checker.model)
    for k, want in enumerate((np.inf, 65504.0, -np.inf)):
        if allowed.exact[k, k] and observed[k, k] != want:
            gemm_checker.fail("NVFP4-GEMM-6", f"expected {want!r}, observed {observed[k, k]!r}",
                              case, output=(k, k))


@pytest.mark.clause("NVFP4-GEMM-2")
def test_the_nibble_order_of_both_operands(gemm_checker):
    """Even elements 1.0 and odd elements 6.0 (and the reverse in B): reading a packed byte's
    nibbles the other way round changes every product (NVFP4-GEMM-2, NVFP4-PACK-1's order)."""
    gemm_checker.require()
    a = from_values(np.tile([1.0, 6.0], 16)[None, :], 0x38)
    b = from_values(np.stack([np.tile([6.0, 1.0], 16), np.tile([0.5, -2.0], 16)]), 0x38)
    case = GemmCase(a, b, gemm_checker.out_dtype(), title="nibble order")
    expect_exact(gemm_checker, case, [[16 * (6 + 6), 16 * (0.5 - 12)]], "NVFP4-GEMM-2")


@pytest.mark.clause("NVFP4-GEMM-2")
def test_scale_bytes_of_rows_past_128_and_padded_columns(gemm_checker):
    """130 rows of A (two 128-row tiles), 5 scale columns (padded to 8): every row and block
    its own scale byte, so a wrong layout of the scale bytes changes the result
    (NVFP4-GEMM-2: NVFP4-PACK-3's layout or the row-major one, as the backend declares)."""
    gemm_checker.require()
    rng = np.random.default_rng(31)
    a = random_nvfp4(rng, 130, 80, byte_low=0x30, byte_high=0x48)
    b = random_nvfp4(rng, 3, 80, byte_low=0x30, byte_high=0x48)
    gemm_checker.check(GemmCase(a, b, gemm_checker.out_dtype(),
                                title="130 rows, 5 scale columns"))


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-7")
@pytest.mark.parametrize("k", [16, 256, 4096])
def test_random_products_within_the_declared_bound(gemm_checker, k):
    """Random codes and scale bytes over the whole ladder, K up to 4096, judged against the
    interval of the declared accumulation model (NVFP4-GEMM-4, -6)."""
    gemm_checker.require()
    rng = np.random.default_rng(k)
    for out_dtype in gemm_checker.out_dtypes:
        a = random_nvfp4(rng, 3, k, global_scale=np.float32(0.0123))
        b = random_nvfp4(rng, 4, k, byte_high=0x60, global_scale=np.float32(7.5e-4))
        gemm_checker.check(GemmCase(a, b, out_dtype, title=f"random K = {k}"))


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-7")
@pytest.mark.parametrize("k", [2048, 8192])
def test_long_sums_of_small_terms(gemm_checker, k):
    """Long sums whose terms are small (scale bytes 0x01 .. 0x20): a narrow accumulator does
    not overflow, and for fp16 the bound of NVFP4-GEMM-4 is vacuous from K of about 1,420
    ((1 + u)^d - 1 >= 1): judged all the same, and the certificate's verdict says so."""
    gemm_checker.require()
    rng = np.random.default_rng(k + 1)
    a = random_nvfp4(rng, 2, k, byte_high=0x20)
    b = random_nvfp4(rng, 3, k, byte_high=0x20, global_scale=np.float32(0.75))
    gemm_checker.check(GemmCase(a, b, gemm_checker.out_dtype(), title=f"long sum, K = {k}"))


@pytest.mark.clause("NVFP4-GEMM-8")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "q8_0"])
def test_weight_only(gemm_checker, dtype):
    """Activations times an NVFP4 weight (NVFP4-GEMM-8): bfloat16 and float16 activations
    make exact terms, float32 ones do not; Q8_0 blocks as ggml quantizes them (float32 values
    a Q8_0 block holds exactly: run by a kernel of either)."""
    if dtype != "q8_0":
        gemm_checker.require(activations=dtype)
    rng = np.random.default_rng(7)
    b = random_nvfp4(rng, 5, 128, global_scale=np.float32(0.02))
    if dtype == "q8_0":
        x = q8_0_activations(rng, 3, 128)
    else:
        x = activations(rng.standard_normal((3, 128)).astype(np.float32).astype(
            {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
             "float32": np.float32}[dtype]).astype(np.float64), dtype)
    for out_dtype in gemm_checker.out_dtypes:
        gemm_checker.check(GemmCase(x, b, out_dtype, title=f"{dtype} activations"))


@pytest.mark.clause("NVFP4-GEMM-8", "NVFP4-GEMM-7")
def test_weight_only_exact_sums(gemm_checker):
    """Small integer activations times an NVFP4 weight: every partial sum exact in fp32, one
    admissible result, worked here (NVFP4-GEMM-8)."""
    dtype = next((d for d in ("bfloat16", "float16", "float32")
                  if d in gemm_checker.domain.activations), None)
    if dtype is None:
        gemm_checker.require(activations="bfloat16")
    x_values = np.arange(-8, 8, dtype=np.float64).reshape(1, 16).repeat(2, axis=0) * [[1], [0.5]]
    x = activations(np.tile(x_values, (1, 2)), dtype)
    b = from_values(np.tile([6.0, -1.5, 0.5, 4.0], 8)[None, :], [[0x3C, 0x07]])
    case = GemmCase(x, b, gemm_checker.out_dtype(), title="weight-only, exact")
    expected = [[sum(Fraction(float(x[i, k])) * Fraction(float(np.tile([6.0, -1.5, 0.5, 4.0], 8)[k]))
                     * Fraction(E4M3[(0x3C, 0x07)[k // 16]]) for k in range(32))] for i in range(2)]
    expect_exact(gemm_checker, case, expected, "NVFP4-GEMM-8")


# ------------------------------------------------------------------------------------------
# Random products (Hypothesis)
# ------------------------------------------------------------------------------------------

@st.composite
def gemm_cases(draw, out_dtypes):
    """A random GEMM: shapes, codes (with runs of zeros), scale bytes from a drawn window of
    the ladder (subnormal and top bytes included), global scales a power of two, a few-bit or a
    random fp32 value."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    m, n = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    k = 16 * draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    low = draw(st.integers(0x01, 0x7E))
    high = min(0x7E, low + draw(st.sampled_from([0, 4, 16, 126])))
    scales = [draw(st.sampled_from(["one", "pow2", "few-bits", "random"])) for _ in range(2)]

    def global_scale(kind):
        if kind == "one":
            return np.float32(1.0)
        if kind == "pow2":
            return np.float32(2.0 ** int(rng.integers(-20, 4)))
        if kind == "few-bits":
            return np.float32(int(rng.integers(1, 16)) * 2.0 ** int(rng.integers(-20, 0)))
        return np.float32(rng.uniform(1e-6, 1e-2))

    zeros = draw(st.sampled_from([0.0, 0.0, 0.5]))
    a = random_nvfp4(rng, m, k, low, high, global_scale(scales[0]), zeros)
    b = random_nvfp4(rng, n, k, low, high, global_scale(scales[1]), zeros)
    return GemmCase(a, b, draw(st.sampled_from(out_dtypes)), title=f"hypothesis seed {seed}")


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-5", "NVFP4-GEMM-7")
def test_random_gemms(gemm_checker):
    """Random GEMMs judged against the declared model's interval (bit for bit where every
    partial sum is exact)."""
    gemm_checker.require()

    @given(gemm_cases(gemm_checker.out_dtypes))
    def run(case):
        gemm_checker.check(case)

    run()


# ------------------------------------------------------------------------------------------
# The GEMM golden vectors (vectors/level0/gemm_*), as hardware teams get them
# ------------------------------------------------------------------------------------------

def _gemm_vectors():
    from hscale.vectors.gemm_files import stored_cases
    return stored_cases()


GEMM_VECTORS = _gemm_vectors()


@pytest.mark.parametrize("case_id", [pytest.param(i, marks=pytest.mark.clause(*c.clauses), id=i)
                                     for i, c in GEMM_VECTORS.items()])
def test_gemm_vectors(gemm_checker, case_id):
    """Every level-0 GEMM vector case: judged against the interval of the declared model (the
    case's own output dtype where the backend produces it, else one it does)."""
    case = GEMM_VECTORS[case_id]
    if case.out_dtype not in gemm_checker.out_dtypes:
        case = case.with_(out_dtype=gemm_checker.out_dtype())
    gemm_checker.check(case)


@st.composite
def weight_only_cases(draw, out_dtypes):
    """A random weight-only GEMM whose activations bfloat16, float16 and ggml's Q8_0 all hold
    exactly (int8 values times a power of two per block of 32), so every weight-only kernel
    can take them; K a multiple of 64."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    m, n, k = draw(st.integers(1, 4)), draw(st.integers(1, 4)), 64 * draw(st.integers(1, 4))
    low = draw(st.integers(0x01, 0x7E))
    high = min(0x7E, low + draw(st.sampled_from([0, 8, 126])))
    x = q8_0_activations(rng, m, k, -12, 0, power_of_two=True)
    b = random_nvfp4(rng, n, k, low, high, np.float32(2.0 ** int(rng.integers(-12, 2))))
    return GemmCase(x, b, draw(st.sampled_from(out_dtypes)), title=f"weight-only seed {seed}")


@pytest.mark.clause("NVFP4-GEMM-8", "NVFP4-GEMM-7")
def test_random_weight_only_gemms(gemm_checker):
    """Random weight-only GEMMs judged against the declared model's interval."""
    if not set(gemm_checker.domain.activations) - {"nvfp4"}:
        gemm_checker.require(activations="float32")  # skips: no weight-only first operand

    @given(weight_only_cases(gemm_checker.out_dtypes))
    def run(case):
        gemm_checker.check(case)

    run()
