"""Formats: E2M1 codes (NVFP4-E2M1-*), E4M3 scale bytes (NVFP4-E4M3-*), storage layouts
(NVFP4-PACK-*) and dequantization (NVFP4-DEQ-1), each through the backend."""

from __future__ import annotations

import numpy as np
import pytest

from hscale.judge.builders import DTYPES, F16, F32, L, exact, group_at, step, tie_code
from hscale.judge.cases import Case
from hscale.judge.independent import GROUP, MAGNITUDES, MIDPOINTS, SCALE_VALUES

# (byte, s_g): normal and subnormal bytes, the ladder's top, power-of-two and 3-bit s_g.
SCALES = [(0x38, 1.0), (0x3D, 2.0 ** -6), (0x01, 1.0), (0x05, 0.75), (0x7E, 2.0 ** -10),
          (0x69, 1.375 * 2.0 ** -12)]
METHODS = ["rtn", "scale-only", "hscale"]


def _layer(groups, dtype=F32) -> np.ndarray:
    return exact(np.concatenate([np.asarray(g, dtype=np.float64)[None, :] for g in groups]), dtype)


@pytest.mark.clause("NVFP4-E2M1-1")
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("byte,sg", SCALES, ids=[f"byte{b:02X}-sg{s!r}" for b, s in SCALES])
def test_every_code_of_the_table(checker, byte, sg, method):
    """Row of every E2M1 magnitude, both signs, at an exactly known scale: codes 0x0..0xF."""
    s = L(byte) * sg
    w = np.array(list(MAGNITUDES) + [-m for m in MAGNITUDES]) * s
    weight = exact(w[None, :])
    h = np.ones(GROUP)
    case = Case(weight, h, method=method, global_scale=sg, title="E2M1 code table")
    result = checker.check(case)
    checker.expect("NVFP4-E2M1-1", "codes of the magnitudes 0, 0.5, ..., 6, -0, -0.5, ..., -6",
                   np.arange(16, dtype=np.uint8)[None, :], result.codes, case, "elements")
    checker.expect("NVFP4-INIT-1", "scale byte", np.array([[byte]], np.uint8), result.scale_bytes,
                   case)


@pytest.mark.clause("NVFP4-E2M1-2")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("byte,sg", SCALES[:4], ids=[f"byte{b:02X}-sg{s!r}" for b, s in SCALES[:4]])
def test_ties_go_to_even_and_neighbours_round_to_nearest(checker, byte, sg, dtype):
    """Each E2M1 midpoint exactly (ties to even) and one ulp either side, in every input dtype."""
    checker.require_dtype(dtype)
    if dtype == F16 and L(byte) * sg * 6 < 2.0 ** -14:
        pytest.skip("construction not exact in float16 (below its normal range)")
    rows, expected = [], []
    s = L(byte) * sg
    for mid in MIDPOINTS:
        tie = exact(mid * s, dtype)
        below, above = step(np.array(tie), -1), step(np.array(tie), +1)
        vals = [6 * s, float(tie), float(below), float(above), -float(tie), -float(below),
                -float(above)]
        rows.append(vals + [0.0] * (GROUP - len(vals)))
        k = list(MIDPOINTS).index(mid)
        t = tie_code(mid)
        expected.append([7, t, k, k + 1, 8 | t, 8 | k, 8 | (k + 1)] + [0] * (GROUP - 7))
    weight = _layer(rows, dtype)
    case = Case(weight, method="rtn", global_scale=sg, title="E2M1 ties")
    result = checker.check(case)
    checker.expect("NVFP4-E2M1-2", "codes at E2M1 midpoints (tie, -1 ulp, +1 ulp)",
                   np.array(expected, np.uint8), result.codes, case, "elements")


@pytest.mark.clause("NVFP4-E2M1-2", "NVFP4-E4M3-2", "NVFP4-GS-3")
@pytest.mark.parametrize("method", METHODS)
def test_elements_saturate_at_six(checker, method):
    """With a caller's small s_g the group maxima exceed 448 * 6 * s_g: the byte saturates to
    0x7E and every element above 6 * s (and at or above 5 * s, unless rounding to 4) gets 6."""
    sg = 2.0 ** -8
    s = 448 * sg
    vals = np.array([5, 5.5, 6, 6.5, 7, 100, 1e4, 5e4, 4.75, 0.1, -5, -1e4, -6, 3.5, 2.5, 1.0]) * s
    weight = exact(vals[None, :].astype(np.float32).astype(np.float64))
    case = Case(weight, np.ones(GROUP), method=method, global_scale=sg, title="saturation")
    result = checker.check(case)
    if method == "rtn":
        checker.expect("NVFP4-E4M3-2", "saturated scale byte", np.array([[0x7E]], np.uint8),
                       result.scale_bytes, case)
        checker.expect("NVFP4-E2M1-2", "saturated codes",
                       np.array([[6, 7, 7, 7, 7, 7, 7, 7, 6, 0, 14, 15, 15, 6, 4, 2]], np.uint8),
                       result.codes, case, "elements")


@pytest.mark.clause("NVFP4-E2M1-3")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("method", METHODS)
def test_sign_bit_comes_from_w(checker, dtype, method):
    """-0.0 and small negatives that round to magnitude 0 keep the sign bit (0x8)."""
    checker.require_dtype(dtype)
    s = 1.0
    vals = [6.0, -0.0, 0.0, -0.1, 0.1, -0.25, 0.25, -0.2, -1.0, 1.0, -6.0, -0.0, -0.0, 0.0, -0.1, 0.2]
    weight = exact(np.array(vals)[None, :].astype(dtype).astype(np.float64), dtype)
    case = Case(weight, np.ones(GROUP), method=method, global_scale=s / L(0x38),
                title="signs of zero-magnitude codes")
    result = checker.check(case)
    if method == "rtn":
        checker.expect("NVFP4-E2M1-3", "codes (sign bit of w, magnitude 0 for |w| <= 0.25 s)",
                       np.array([[7, 8, 0, 8, 0, 8, 0, 8, 10, 2, 15, 8, 8, 0, 8, 0]], np.uint8),
                       result.codes, case, "elements")


@pytest.mark.clause("NVFP4-E4M3-1", "NVFP4-E4M3-3", "NVFP4-INIT-1")
@pytest.mark.parametrize("sg", [2.0 ** -6, 0.75, 1.0])
def test_every_ladder_byte_is_reachable_and_decodes(checker, sg):
    """Row c-1 has its group maximum at 6 * e4m3(c) * s_g, c = 0x01..0x7E: rtn gives byte c,
    and the dequantized maximum is 6 * e4m3(c) * s_g (the byte decodes as E4M3). The other
    elements sit 1/32 (relative) above and below the E2M1 midpoints at that scale, so a kernel
    that decodes a byte as another value (a neighbour's, 1/8 away or more) codes them otherwise."""
    near = [1.0, -0.5, 3.0] + [m * f * (-1) ** k for k, (m, f) in enumerate(
        [(m, 33 / 32) for m in MIDPOINTS] + [(m, 31 / 32) for m in MIDPOINTS[:5]])]
    rows = [group_at(c, sg, near) for c in range(1, 127)]
    weight = _layer(rows)
    case = Case(weight, method="rtn", global_scale=sg, title="every ladder byte")
    result = checker.check(case)
    checker.expect("NVFP4-E4M3-3", "scale bytes 0x01..0x7E", np.arange(1, 127, dtype=np.uint8)[:, None],
                   result.scale_bytes, case)
    deq = np.asarray(result.dequantize())
    checker.expect("NVFP4-E4M3-1", "dequantized group maxima 6 * e4m3(c) * s_g",
                   exact(6 * SCALE_VALUES[1:127] * sg)[:, None].astype(np.float32), deq[:, :1],
                   case, "flat")


@pytest.mark.clause("NVFP4-E4M3-2", "NVFP4-INIT-1")
@pytest.mark.parametrize("dtype", [F32, F16], ids=lambda d: d.name)
def test_group_maxima_on_e4m3_midpoints(checker, dtype):
    """amax_g / (6 s_g) exactly on the midpoint of every pair of adjacent ladder values (ties to
    the even byte), one ulp below (the lower byte) and one above (the upper byte)."""
    checker.require_dtype(dtype)
    sg = 2.0 ** -4 if dtype == F32 else 2.0 ** -3
    rows, expected = [], []
    for c in range(1, 126):
        mid = (L(c) + L(c + 1)) / 2
        tie = exact(6 * mid * sg, dtype)
        for amax, want in ((tie, c if c % 2 == 0 else c + 1), (step(np.array(tie), -1), c),
                           (step(np.array(tie), +1), c + 1)):
            if dtype == F16 and float(amax) < 2.0 ** -14:
                continue  # subnormal float16: the ulp step is not a relative one
            rows.append([float(amax)] + [0.0] * (GROUP - 1))
            expected.append(want)
    weight = _layer(rows, dtype)
    case = Case(weight, method="rtn", global_scale=sg, title="E4M3 midpoints")
    result = checker.check(case)
    checker.expect("NVFP4-E4M3-2", "initial bytes at E4M3 midpoints (tie, -1 ulp, +1 ulp)",
                   np.array(expected, np.uint8)[:, None], result.scale_bytes, case)


@pytest.mark.clause("NVFP4-E4M3-2", "NVFP4-INIT-1")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_maxima_near_e4m3_midpoints_with_a_full_precision_global_scale(checker, seed):
    """s_g with a full 24-bit significand: 6 * s_g * midpoint is not an fp32 value, so the fp32
    amax nearest to it gives an exact quotient within about 2^-24 of the midpoint. The spec
    rounds that exact quotient; a quotient divided in fp32 can land on the midpoint and round to
    even instead (the fp32-scale-rounding divergence)."""
    from hscale.judge.independent import range_byte
    rng = np.random.default_rng(seed)
    sg = float(np.float32((1 + rng.integers(1, 2 ** 23) / 2 ** 23) * 2.0 ** -8))
    rows = []
    for c in range(1, 126):
        near = np.float32(6 * sg * (L(c) + L(c + 1)) / 2)
        for amax in (near, step(np.array(near), -1), step(np.array(near), 1)):
            rows.append([float(amax)] + [0.0] * (GROUP - 1))
    weight = np.array(rows, dtype=np.float32)
    case = Case(weight, method="rtn", global_scale=sg, title="E4M3 near-midpoints, full s_g")
    result = checker.check(case)
    want = range_byte(weight[:, 0].astype(np.float64), sg, 6.0).astype(np.uint8)[:, None]
    checker.expect("NVFP4-INIT-1", "initial bytes of the exact quotients", want,
                   result.scale_bytes, case)


@pytest.mark.clause("NVFP4-INIT-1", "NVFP4-E2M1-2", "NVFP4-E4M3-2")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_quotients_a_few_fp32_ulps_from_every_boundary(checker, dtype):
    """Group maxima and elements of at most 7 bits, exact in every dtype, with a caller's
    s_g = 1 + i 2^-23 (i = -8 .. 8): the exact quotients amax_g / (6 s_g) and |w| / s land a few
    fp32 ulps either side of every E4M3 and E2M1 midpoint (hscale.judge.boundaries), in each
    declared dtype. A quotient formed in fp32, or by a reciprocal a few ulps off, crosses a
    boundary the exact one does not; data one ulp of bfloat16 (2^-8) from a boundary cannot
    show it, and the full-precision-s_g test above holds float32 weights only."""
    from hscale.judge.boundaries import weight_boundary_cases
    checker.require_dtype(dtype)
    for case in weight_boundary_cases(dtype):
        checker.check(case)


@pytest.mark.clause("NVFP4-E4M3-2", "NVFP4-INIT-1")
def test_quotients_above_448_saturate_and_tiny_ones_get_0x01(checker):
    sg = 2.0 ** -12
    quotients = [448, 449, 463.9, 464, 464.1, 480, 1e3, 1e6, 2.0 ** -10, 2.0 ** -11, 1e-6]
    rows = [[6 * q * sg] + [0.0] * (GROUP - 1) for q in quotients]
    weight = np.array(rows, dtype=np.float32)
    case = Case(weight, method="rtn", global_scale=sg, title="E4M3 satfinite and 0x01 floor")
    result = checker.check(case)
    checker.expect("NVFP4-E4M3-2", "initial bytes (saturation to 0x7E; 0x01 floor of NVFP4-INIT-1)",
                   np.array([[0x7E]] * 8 + [[0x01]] * 3, np.uint8), result.scale_bytes, case)


@pytest.mark.clause("NVFP4-E4M3-3", "HSCALE-WIN-1")
@pytest.mark.parametrize("method", ["scale-only", "hscale"])
def test_searched_bytes_stay_on_the_ladder(checker, method):
    """Groups with every initial byte, searched with random h: every chosen byte is 0x01..0x7E."""
    rng = np.random.default_rng(7)
    sg = 2.0 ** -5
    rows = []
    for c in range(1, 127):
        g = group_at(c, sg, list(rng.choice(MAGNITUDES, 15) * rng.uniform(0.3, 1.0, 15)))
        rows.append(g * np.where(rng.random(GROUP) < 0.5, -1, 1))
    weight = np.array(rows, dtype=np.float32)
    h = rng.choice([0.0, 1.0, 1e-3, 1e3], GROUP)
    case = Case(weight, h, method=method, global_scale=sg, title="ladder bytes only")
    result = checker.check(case)
    bytes_ = np.asarray(result.scale_bytes)
    if not ((bytes_ >= 1) & (bytes_ <= 0x7E)).all():
        r, i = np.argwhere((bytes_ < 1) | (bytes_ > 0x7E))[0]
        checker.fail("NVFP4-E4M3-3", f"group (r={r}, i={i}): scale byte 0x{bytes_[r, i]:02X} is "
                     "not on the ladder 0x01..0x7E", case)


# -- NVFP4-PACK-* and NVFP4-DEQ-1 ---------------------------------------------------------------

def _random_layer(rng, rows, cols, dtype=F32):
    w = rng.standard_normal((rows, cols)) * rng.choice([1e-3, 1.0, 30.0], (rows, 1))
    w[rng.random((rows, cols)) < 0.05] = 0.0
    return w.astype(dtype)


@pytest.mark.clause("NVFP4-PACK-1")
@pytest.mark.parametrize("shape", [(1, 16), (3, 48), (17, 256)])
def test_packed_nibbles(checker, shape):
    rng = np.random.default_rng(11)
    weight = _random_layer(rng, *shape)
    case = Case(weight, rng.random(shape[1]), title="packing")
    result = checker.check(case)
    codes = np.asarray(result.codes)
    want = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    packed = np.asarray(result.packed)
    if packed.shape != want.shape or not np.array_equal(packed, want):
        bad = np.argwhere(packed != want)[0] if packed.shape == want.shape else None
        checker.fail("NVFP4-PACK-1", "packed bytes are not code[2i] | code[2i+1] << 4"
                     + (f": byte {tuple(int(v) for v in bad)} expected 0x{want[tuple(bad)]:02X} "
                        f"observed 0x{packed[tuple(bad)]:02X}" if bad is not None else
                        f": shape {packed.shape}, expected {want.shape}"), case)


@pytest.mark.clause("NVFP4-PACK-2")
@pytest.mark.parametrize("rows,groups", [(1, 1), (5, 3), (130, 2)])
def test_scale_bytes_are_row_major(checker, rows, groups):
    """Group (r, i) has maximum 6 * e4m3(c) * s_g with c unique to (r, i): byte [r, i] must be c."""
    case, want = unique_byte_case(rows, groups)
    result = checker.check(case)
    checker.expect("NVFP4-PACK-2", "scale byte [r, i] of group (r, i)", want, result.scale_bytes,
                   case)


def unique_byte_case(rows: int, groups: int, first_byte: int = 0x01) -> tuple:
    """(case, bytes): group (r, i) has maximum 6 * e4m3(c) * s_g with c (from ``first_byte``
    up) nearly unique to (r, i), so its byte is c under every rule the spec allows, and where
    each byte lands in a layout is unambiguous."""
    sg = 2.0 ** -7
    span = 0x7E - first_byte + 1
    want = (first_byte + (np.arange(rows * groups) * 37) % span).reshape(rows, groups)
    w = np.zeros((rows, groups * GROUP))
    for r in range(rows):
        for i in range(groups):
            w[r, GROUP * i: GROUP * (i + 1)] = group_at(int(want[r, i]), sg, [1.0, 0.5])
    case = Case(exact(w), method="rtn", global_scale=sg, title="a byte unique to each group")
    return case, want.astype(np.uint8)


@pytest.mark.clause("NVFP4-PACK-3")
@pytest.mark.parametrize("rows,groups", [(1, 1), (3, 5), (128, 4), (130, 9), (257, 3)])
def test_swizzled_scale_layout(checker, rows, groups):
    """The 128x4 layout of block-scaled GEMMs, judged on the backend's own bytes: those it
    returns when it declares that layout, or those its result's ``swizzled_scale_bytes()``
    gives; each must be the spec's layout (stated by the judging library as tile reshapes,
    ``hscale.judge.domain.swizzle``) of its row-major bytes, padding 0x00. A backend with
    neither has no swizzled layout to judge."""
    case, _ = unique_byte_case(rows, groups, first_byte=0x08)
    if checker.domain.scale_layout == "swizzled-128x4":
        # The layout first, against the spec's bytes of the run (padding included): every
        # group's byte is unique and exact, so where each one landed says how it was laid out.
        case_run, _ = checker.run(case)
        row_major = np.asarray(case_run.expected_outputs().scale_bytes)
        got, source = np.asarray(checker.raw.scale_bytes), "the returned scale bytes"
        _judge_layout(checker, case, row_major, got, source)
        checker.check(case)  # and the numerics
        return
    checker.check(case)
    row_major = np.asarray(checker.last_observed.scale_bytes)  # the whole run, padding included
    if callable(getattr(checker.raw, "swizzled_scale_bytes", None)):
        got, source = np.asarray(checker.raw.swizzled_scale_bytes()), "swizzled_scale_bytes()"
    else:
        pytest.skip(f"not applicable: backend {checker.label!r} declares row-major scale bytes "
                    "and its result offers no swizzled layout")
    _judge_layout(checker, case, row_major, got, source)


def _judge_layout(checker, case, row_major, got, source):
    """``got`` must be the 128x4 layout of the row-major bytes ``row_major`` (NVFP4-PACK-3)."""
    from hscale.judge.domain import swizzle
    want = swizzle(row_major)
    got = got.reshape(-1)
    if got.size != want.size:
        checker.fail("NVFP4-PACK-3", f"{source}: {got.size} bytes, the 128x4 layout of "
                     f"{row_major.shape[0]} x {row_major.shape[1]} scale bytes has {want.size}",
                     case)
    wrong = np.flatnonzero(got != want)
    if wrong.size:
        offset = int(wrong[0])
        place = _group_at_offset(row_major.shape, offset)
        holds = f"group {place}'s byte 0x{int(want[offset]):02X}" if place else "padding 0x00"
        found = np.argwhere(row_major == got[offset]) if got[offset] else []
        came = f" (the byte of group {tuple(int(v) for v in found[0])})" if len(found) else ""
        checker.fail("NVFP4-PACK-3", f"{source}: {wrong.size} of {want.size} bytes out of "
                     f"place; offset {offset} holds 0x{int(got[offset]):02X}{came}, the layout "
                     f"puts {holds} there (offset(r, k) = ((r // 128) * ceil(n / 64) + k // 4) "
                     "* 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + k % 4)", case)


def _group_at_offset(shape, offset: int):
    """The (r, k) whose scale byte the 128x4 layout puts at ``offset``, or None (padding): a
    buffer marked at that offset alone, read back by the layout's inverse."""
    from hscale.judge.domain import swizzled_shape, unswizzle
    rows, cols = shape
    padded_rows, padded_cols = swizzled_shape(rows, cols)
    marked = np.zeros(padded_rows * padded_cols, np.uint8)
    marked[offset] = 1
    row_major, _ = unswizzle(marked, rows, cols)
    hit = np.argwhere(row_major)
    return tuple(int(v) for v in hit[0]) if len(hit) else None


@pytest.mark.clause("NVFP4-DEQ-1")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("method", ["rtn", "hscale"])
def test_dequantize(checker, dtype, method):
    checker.require_dtype(dtype)
    rng = np.random.default_rng(5)
    weight = _random_layer(rng, 9, 64, dtype)
    case = Case(weight, rng.random(64) * 10, method=method, title="dequantize")
    result = checker.check(case)
    codes = np.asarray(result.codes)
    values = MAGNITUDES[codes & 7] * np.where(codes & 8, -1.0, 1.0)
    scale = SCALE_VALUES[np.asarray(result.scale_bytes)] * float(result.global_scale)
    want = (values * np.repeat(scale, GROUP, axis=1)).astype(np.float32)
    got = np.asarray(result.dequantize())
    if got.dtype != np.float32 or got.shape != want.shape or not np.array_equal(
            got.view(np.uint32), want.view(np.uint32)):
        checker.fail("NVFP4-DEQ-1", "dequantize() is not fp32(q * e4m3(c) * s_g) of the result's "
                     f"own codes and bytes (dtype {got.dtype}, shape {got.shape})", case)
