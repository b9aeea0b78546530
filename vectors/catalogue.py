"""The level-0 case catalogue: named edge cases, each citing the spec clauses it exercises.

Every case is defined by its inputs alone (weights in their native dtype, h, the parameters and
an optional caller-supplied global scale); the outputs are whatever the reference computes.
Most hand-built cases supply ``s_g = 1`` so that a scale byte's effective scale is just its
E4M3 value and the arithmetic can be followed by hand; a group whose largest magnitude is
``6 * e4m3(c)`` then has baseline byte c exactly (NVFP4-INIT-1).

Cases that need a construction (exact objective ties, evaluation-order traps, 4over6 ties) use
groups found by a search once and frozen here as hex, so the catalogue never depends on a
search; ``tests/vectors/test_vectors.py`` re-checks each such property against the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hscale.judge.builders import BF16, F16, F32, exact
from hscale.judge.cases import Case, CaseError
from hscale.reference import E2M1_MIDPOINTS, SCALE_BYTE_VALUES, compute_global_scale
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier

from . import hexio
from .minilm import load_minilm_slices
from .rand import CaseRandom
from .ties import load_tie_table

DEFAULT_SEED = 20240601
#: The committed level-0 set (``hscale vectors generate --out vectors/level0``), as installed.
LEVEL0_DIR = Path(__file__).resolve().parent / "level0"

ONE = np.float32(1.0)
MIDPOINTS = E2M1_MIDPOINTS


# ------------------------------------------------------------------------------------------
# Small helpers
# ------------------------------------------------------------------------------------------

def scale_value(byte: int) -> float:
    """E4M3 value of a scale byte (the effective scale when s_g = 1)."""
    return float(SCALE_BYTE_VALUES[byte])


def ulp_step(values: np.ndarray, step: int) -> np.ndarray:
    """Each value moved ``step`` units in the last place of its own dtype, away from zero for
    step > 0 and toward zero for step < 0 (sign-magnitude: the bits of |x| +- 1)."""
    values = np.asarray(values)
    raw = hexio.bits(values).astype(np.int64)
    moved = (raw + step) if step else raw
    return moved.astype(hexio.bits(values).dtype).view(values.dtype)


def signed_pattern(byte: int, dtype=F32) -> np.ndarray:
    """A 16-element group with baseline byte ``byte`` at s_g = 1 and one element of every
    E2M1 region: maximum 6 * e4m3(byte)."""
    pattern = (6.0, -5.5, 4.75, -3.25, 2.875, -2.125, 1.625, -1.375,
               0.875, -0.625, 0.375, -0.125, 0.3125, -1.0625, 2.25, -0.0)
    return (np.array(pattern) * scale_value(byte)).astype(dtype)


def random_h(rnd: CaseRandom, n: int, low_exp: int = -8, high_exp: int = 8) -> np.ndarray:
    return rnd.log_uniform((n,), low_exp, high_exp)


def random_weight(rnd: CaseRandom, shape, dtype=F32, kind: str = "normal",
                  scale: float = 0.05) -> np.ndarray:
    if kind == "normal":
        values = rnd.normalish(shape) * scale
    elif kind == "heavy":
        values = rnd.heavy(shape) * scale
    else:
        raise ValueError(kind)
    return values.astype(dtype)


# ------------------------------------------------------------------------------------------
# The catalogue
# ------------------------------------------------------------------------------------------

def level0_cases(seed: int = DEFAULT_SEED) -> list[Case]:
    """Every level-0 case, in catalogue order (IDs unique)."""
    cases: list[Case] = []
    for section in SECTIONS:
        cases.extend(section(seed))
    seen = set()
    for case in cases:
        if case.id in seen:
            raise CaseError(f"duplicate case id {case.id}")
        seen.add(case.id)
    return cases


def _e2m1(seed):
    cases = []
    bytes_ = (0x38, 0x4D, 0x01, 0x7E)  # 1.0, 6.5, 2^-9 (subnormal), 448
    rows = [np.array([6, 0, .5, 1, 1.5, 2, 3, 4, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])
            * scale_value(b) for b in bytes_]
    cases.append(Case(
        id="e2m1-all-codes", method="rtn", global_scale=ONE,
        title="every E2M1 value, exactly, at scale bytes 0x38, 0x4d, 0x01 (subnormal), 0x7e",
        clauses=("NVFP4-E2M1-1", "NVFP4-E2M1-3", "NVFP4-E4M3-1", "NVFP4-INIT-1",
                 "NVFP4-PACK-1", "NVFP4-PACK-2", "NVFP4-DEQ-1", "NVFP4-GS-3"),
        weight=exact(rows)))

    bytes_ = (0x38, 0x3B, 0x01, 0x7E)
    mids = [np.array((6,) + MIDPOINTS + tuple(-m for m in MIDPOINTS) + (0,)) * scale_value(b)
            for b in bytes_]
    mids = exact(mids)
    cases.append(Case(
        id="e2m1-midpoint-ties", method="rtn", global_scale=ONE,
        title="|w|/s exactly on every E2M1 midpoint, both signs: ties go to the even code "
              "(0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4)",
        clauses=("NVFP4-E2M1-2", "NVFP4-E2M1-3", "NVFP4-GS-3"),
        weight=mids))
    # element 0 (the group maximum) and 15 (zero) stay; the 14 midpoints move by one ulp.
    below = mids.copy()
    below[:, 1:15] = ulp_step(mids[:, 1:15], -1)
    above = mids.copy()
    above[:, 1:15] = ulp_step(mids[:, 1:15], +1)
    cases.append(Case(
        id="e2m1-midpoint-minus-ulp", method="rtn", global_scale=ONE,
        title="every E2M1 midpoint moved one fp32 ulp toward zero: rounds down",
        clauses=("NVFP4-E2M1-2", "NVFP4-GS-3"), weight=below))
    cases.append(Case(
        id="e2m1-midpoint-plus-ulp", method="rtn", global_scale=ONE,
        title="every E2M1 midpoint moved one fp32 ulp away from zero: rounds up",
        clauses=("NVFP4-E2M1-2", "NVFP4-GS-3"), weight=above))

    for dtype, tag in ((BF16, "bf16"), (F16, "fp16")):
        bytes_ = (0x38, 0x3B, 0x01)
        base = [np.array((6,) + MIDPOINTS + tuple(-m for m in MIDPOINTS) + (0,))
                * scale_value(b) for b in bytes_]
        base = exact(base, dtype)
        rows = [base]
        for step in (-1, +1):
            moved = base.copy()
            moved[:, 1:15] = ulp_step(base[:, 1:15], step)
            rows.append(moved)
        cases.append(Case(
            id=f"e2m1-midpoints-{tag}", method="rtn", global_scale=ONE,
            title=f"{tag} weights: E2M1 midpoints exactly (rows 0-2), one {tag} ulp below "
                  f"(rows 3-5) and above (rows 6-8), at scale bytes 0x38, 0x3b, 0x01",
            clauses=("NVFP4-E2M1-2", "NVFP4-IN-1", "NVFP4-GS-3"),
            weight=np.concatenate(rows, axis=0)))

    # A global scale that is not a power of two: no midpoint is an fp32 number any more, so
    # the weights are the fp32 neighbours just below and just above each exact threshold.
    for sg_hex, tag in (("3dcccccd", "0p1"), ("3eaaaaab", "third")):
        sg = hexio.scalar_from_hex(sg_hex)
        rows = []
        for byte in (0x38, 0x3B, 0x10, 0x05):
            s = float(sg) * scale_value(byte)  # exact
            row = [np.float32(6.0 * s)]
            for m in MIDPOINTS:
                t = m * s  # exact threshold
                near = np.float32(t)
                lo = near if float(near) < t else np.nextafter(near, np.float32(0))
                hi = near if float(near) > t else np.nextafter(near, np.float32(np.inf))
                row += [lo, hi]
            row.append(np.float32(0))
            rows.append(np.array(row, dtype=np.float32))
        cases.append(Case(
            id=f"e2m1-thresholds-sg-{tag}", method="rtn", global_scale=np.float32(sg),
            title=f"s_g = fp32 0x{sg_hex}: the fp32 weights just below and just above each "
                  "exact E2M1 threshold mid * s (catches a reciprocal multiply)",
            clauses=("NVFP4-E2M1-2", "NVFP4-GS-3", "NVFP4-INIT-1"),
            weight=np.stack(rows)))

    sat = np.array([
        [3000.0, 2688.0, 2689.0, 2240.0, float(np.nextafter(np.float32(2240), np.float32(3e3))),
         float(np.nextafter(np.float32(2240), np.float32(0))), -3000.0, 1.0e6, -2688.0, 5000.0,
         448.0, -2241.0, 0.0, -1.0e5, 2.0 ** 20, -0.0],
        [float(np.finfo(np.float32).max), -3.0e38, 1.0e38, 2.0 ** 100, -2.0 ** 64, 2688.0,
         2240.0, 2239.0, 1.0, -1.0, 0.5, 1.0e30, -1.0e20, 3.0e38, 0.0, 2.0 ** 127]])
    cases.append(Case(
        id="e2m1-saturation", method="rtn", global_scale=ONE,
        title="group maxima far above 6 * 448 * s_g: the byte saturates at 0x7e (448) and "
              "every |w|/s above 5 gives magnitude 6 (5 itself ties to 4)",
        clauses=("NVFP4-E2M1-2", "NVFP4-E4M3-2", "NVFP4-INIT-1", "NVFP4-GS-3"),
        weight=sat.astype(np.float32)))

    tiny = float(np.finfo(np.float32).smallest_subnormal)
    signed = np.array([
        [6.0, -0.0, 0.0, -tiny, tiny, -0.1, -0.25, float(-np.nextafter(np.float32(.25), 1)),
         -1e-30, 1e-30, -0.0, -0.24, 0.25, -0.75, -6.0, -0.0],
        [-6.0, -0.0, -0.0, -0.0, -tiny, -1e-20, -0.2, -0.0, -0.0, -0.125, -1e-3, -0.0,
         -2.0 ** -126, -0.0, -0.0, -0.0]])
    cases.append(Case(
        id="e2m1-signed-zeros", method="rtn", global_scale=ONE,
        title="-0.0 and small negatives give code 0x8 (sign bit of w kept, magnitude 0); "
              "+0.0 and small positives give 0x0",
        clauses=("NVFP4-E2M1-3", "NVFP4-E2M1-2", "NVFP4-GS-3"),
        weight=signed.astype(np.float32)))
    return cases


def _e4m3(seed):
    cases = []
    rows = np.stack([signed_pattern(b) for b in range(1, 127)])
    cases.append(Case(
        id="e4m3-every-ladder-byte", method="rtn", global_scale=ONE,
        title="row r has baseline byte r + 1: all 126 ladder bytes 0x01..0x7e, decoded by the "
              "dequantization",
        clauses=("NVFP4-E4M3-1", "NVFP4-E4M3-3", "NVFP4-INIT-1", "NVFP4-DEQ-1",
                 "NVFP4-E2M1-2", "NVFP4-GS-3"),
        weight=rows))

    # amax / 6 exactly on the midpoint between bytes c and c + 1 (and 448 / "480")
    pairs = ((0x00, 0x01), (0x01, 0x02), (0x02, 0x03), (0x07, 0x08), (0x38, 0x39),
             (0x39, 0x3A), (0x3F, 0x40), (0x7D, 0x7E))
    mid_rows = []
    for lo, hi in pairs:
        midpoint = (scale_value(lo) + scale_value(hi)) / 2
        row = signed_pattern(max(lo, 1)).astype(np.float64) / 4  # small filler values
        row[0] = 6 * midpoint
        mid_rows.append(row)
    row = signed_pattern(0x7E).astype(np.float64) / 4
    row[0] = 6 * 464.0  # midpoint between 448 and 480 (not finite in e4m3fn)
    mid_rows.append(row)
    mids = exact(mid_rows)
    title = ("group maximum / (6 s_g) on an E4M3 rounding midpoint: 2^-10 (rounds to 0, "
             "raised to 0x01), subnormal ties, the subnormal/normal edge, normal ties, the "
             "binade edge 1.9375, 432 and 464 (satfinite -> 0x7e)")
    cases.append(Case(id="e4m3-amax-midpoints", method="rtn", global_scale=ONE, title=title,
                      clauses=("NVFP4-E4M3-2", "NVFP4-INIT-1", "NVFP4-GS-3"), weight=mids))
    for step, tag in ((-1, "minus"), (+1, "plus")):
        moved = mids.copy()
        moved[:, 0] = ulp_step(mids[:, 0], step)
        cases.append(Case(
            id=f"e4m3-amax-midpoints-{tag}-ulp", method="rtn", global_scale=ONE,
            title=f"the same group maxima one fp32 ulp {'below' if step < 0 else 'above'}: "
                  f"the baseline byte rounds {'down' if step < 0 else 'up'}",
            clauses=("NVFP4-E4M3-2", "NVFP4-INIT-1", "NVFP4-GS-3"), weight=moved))

    rnd = CaseRandom(seed, "e4m3-subnormal-scales")
    rows = []
    for byte in (1, 2, 3, 5, 7, 8, 9):
        row = (rnd.uniform((16,)) * 2 - 1) * 6 * scale_value(byte)
        row[0] = 6 * scale_value(byte)
        rows.append(row)
    cases.append(Case(
        id="e4m3-subnormal-scales", global_scale=ONE,
        hessian_diag=random_h(rnd, 16),
        title="baseline bytes 0x01..0x09 (subnormal scales and the first normals), searched: "
              "the window is clipped at byte 1",
        clauses=("NVFP4-E4M3-1", "NVFP4-E4M3-3", "HSCALE-WIN-1", "HSCALE-ARGMIN-1",
                 "NVFP4-GS-3"),
        weight=np.array(rows).astype(np.float32)))

    tiny = float(np.finfo(np.float32).smallest_subnormal)
    rows = np.array([
        [2.0 ** -12, -2.0 ** -13, 2.0 ** -14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2.0 ** -20],
        [tiny, -tiny, 2 * tiny, 3 * tiny, 0, -0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2.0 ** -140],
        [6 * 2.0 ** -10, 2.0 ** -11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -2.0 ** -10]])
    cases.append(Case(
        id="init-min-byte", method="rtn", global_scale=ONE,
        title="non-zero groups whose baseline rounds to byte 0x00 get 0x01 (the group is "
              "not a zero group; its codes may all be magnitude 0)",
        clauses=("NVFP4-INIT-1", "NVFP4-E4M3-2", "NVFP4-ZERO-1", "NVFP4-GS-3"),
        weight=exact(rows)))
    return cases


def _global_scale(seed):
    cases = []
    rnd = CaseRandom(seed, "gs-computed")
    cases.append(Case(
        id="gs-computed", method="rtn",
        title="s_g = fp32_rne(amax / (6 * 448)) of a random tensor",
        clauses=("NVFP4-GS-1", "NVFP4-INIT-1"),
        weight=random_weight(rnd, (2, 32))))
    trap = hexio.scalar_from_hex("3f452a65")
    row = np.array([trap, 0.5, -0.25, 0.125, 0.7, -0.7, 0.3, -0.1, 0.01, 0.2, -0.6, 0.45,
                    0.05, -0.33, 0.6, -0.0], dtype=np.float32)
    cases.append(Case(
        id="gs-division-trap", method="rtn",
        title="amax = fp32 0x3f452a65: fp32(amax * fp32(1/2688)) and fp32(fp32(amax/6)/448) "
              "both differ from the correctly rounded amax / 2688",
        clauses=("NVFP4-GS-1",), weight=row[None, :]))
    rows = np.array([[2.0 ** -130, -2.0 ** -131, 2.0 ** -140, 0] + [0] * 12,
                     [-2.0 ** -133, 0, 0, 0] + [2.0 ** -149] * 12])
    cases.append(Case(
        id="gs-tiny-amax-raised", method="rtn",
        title="amax / 2688 below 2^-126 (fp32 subnormal weights): s_g is raised to 2^-126",
        clauses=("NVFP4-GS-2", "NVFP4-INIT-1"), weight=exact(rows)))
    zeros = np.zeros((2, 32), dtype=np.float32)
    zeros[0, 3] = zeros[1, 17] = zeros[1, 30] = np.float32(-0.0)
    cases.append(Case(
        id="gs-zero-tensor", method="rtn",
        title="an all-zero tensor: s_g = 1.0, every group a zero group (byte 0x00, sign codes)",
        clauses=("NVFP4-GS-2", "NVFP4-ZERO-1", "NVFP4-E2M1-3"), weight=zeros))
    big = np.array([[np.finfo(np.float32).max, -1e38, 3e37, 1.0, -2.0 ** 120, 0, 0, 0,
                     0, 0, 0, 0, 0, 0, 0, 1e30]], dtype=np.float32)
    cases.append(Case(
        id="gs-fp32-max", method="rtn",
        title="amax = the largest fp32: s_g = fp32_rne(3.4028235e38 / 2688)",
        clauses=("NVFP4-GS-1", "NVFP4-E4M3-2", "NVFP4-DEQ-1"), weight=big))
    rnd = CaseRandom(seed, "gs-supplied")
    cases.append(Case(
        id="gs-supplied-saturating", method="rtn", global_scale=np.float32(2.0 ** -20),
        title="a supplied s_g = 2^-20 far too small: every baseline byte saturates at 0x7e and "
              "most codes at magnitude 6",
        clauses=("NVFP4-GS-3", "NVFP4-E4M3-2", "NVFP4-E2M1-2"),
        weight=random_weight(rnd, (2, 32))))
    cases.append(Case(
        id="gs-supplied-underflow", method="rtn", global_scale=np.float32(2.0 ** 40),
        title="a supplied s_g = 2^40 far too large: every baseline rounds to 0x00 and is "
              "raised to 0x01, all magnitudes 0",
        clauses=("NVFP4-GS-3", "NVFP4-INIT-1"),
        weight=random_weight(rnd, (2, 32))))
    cases.append(Case(
        id="gs-supplied-odd", method="rtn", global_scale=np.float32(hexio.scalar_from_hex("3a8b4391")),
        title="a supplied s_g that is not a power of two (fp32 0x3a8b4391) used unchanged",
        clauses=("NVFP4-GS-3", "NVFP4-INIT-1", "NVFP4-E2M1-2"),
        weight=random_weight(rnd, (2, 32))))

    cases += _reciprocal_global_scale()

    sg = np.float32(hexio.scalar_from_hex("00800001"))  # (1 + 2^-23) * 2^-126
    unit = 2.0 ** -135
    row = np.array([6, 4, 3, 2, 1.5, 1, 0.5, -0.5, -1, -6, 0.25, 0.75, 5, -3, 2.5, 0]) * unit
    cases.append(Case(
        id="deq-subnormal-rounding", method="rtn", global_scale=sg,
        title="s_g = (1 + 2^-23) 2^-126, byte 0x01: dequantized values are fp32 subnormals "
              "whose low bits are rounded off (round to nearest even)",
        clauses=("NVFP4-DEQ-1", "NVFP4-GS-3", "NVFP4-INIT-1"), weight=exact(row[None, :])))
    return cases


#: Tensor maxima (fp32 bits) for the two NVFP4-GS-4 cases: s_g = fp32(amax / 2688) of the
#: first reads back from its stored reciprocal; the second's does not (the first fp32 above 1.0
#: for which it does not, found once by stepping up from 1.0; tests/vectors/test_vectors.py re-checks).
GS4_READS_BACK_AMAX = "3f400000"  # 0.75
GS4_ONE_ULP_OFF_AMAX = "3f800008"  # 1.00000095


def _reciprocal_global_scale():
    """NVFP4-GS-4: a writer that stores s_g as its reciprocal computes s_g (GS-1), stores
    r = fp32(1/s_g) and quantizes with fp32(1/r), the s_g a reader derives (supplied here,
    GS-3). Where s_g has no reciprocal that reads back as itself, that is one ulp off s_g, and
    an element exactly on an E2M1 midpoint under one of the two scales is coded differently
    under the other: quantizing with s_g itself while storing r is caught."""
    cases = []
    for case_id, amax_hex in (("gs4-reciprocal-reads-back", GS4_READS_BACK_AMAX),
                              ("gs4-reciprocal-one-ulp-off", GS4_ONE_ULP_OFF_AMAX)):
        amax = hexio.scalar_from_hex(amax_hex)
        computed = compute_global_scale(float(amax))  # NVFP4-GS-1, C = 448
        stored = reciprocal_from_multiplier(computed)
        derived = multiplier_from_reciprocal(stored)
        # row 0: the group maximum at byte 0x38 (e4m3 1.0) under either scale, and one element
        # exactly on the midpoint 0.25 under each scale; row 1: the tensor maximum
        row0 = [6 * float(derived), 0.25 * float(derived), -0.25 * float(derived),
                0.25 * float(computed), -0.25 * float(computed), 0.5 * float(derived),
                -1.0 * float(derived), 4.0 * float(derived)] + [0.0] * 8
        row1 = [float(amax), -0.5 * float(amax), 0.125 * float(amax)] + [0.0] * 13
        weight = np.array([row0, row1])
        weight[0, 0] = float(np.float32(weight[0, 0]))  # 6 * s_g rounded: its byte is 0x38
        same = bool(derived == computed)
        cases.append(Case(
            id=case_id, method="rtn", global_scale=np.float32(derived),
            title=("a tensor stored with a reciprocal global scale: s_g = fp32(amax / 2688) = "
                   f"0x{hexio.scalar_word(computed)}, stored r = fp32(1/s_g) = "
                   f"0x{hexio.scalar_word(stored)}, quantized with fp32(1/r) = "
                   f"0x{hexio.scalar_word(derived)}" + (" (= s_g: it reads back)" if same else
                                                     ", one ulp off s_g: no fp32 r has "
                                                     "fp32(1/r) = s_g")),
            clauses=("NVFP4-GS-4", "NVFP4-GS-3", "NVFP4-GS-1", "NVFP4-E2M1-2"),
            weight=exact(weight, F32),
            notes=("the writer's chain of NVFP4-GS-4: s_g from the weights (NVFP4-GS-1), "
                   "r = fp32(1/s_g) stored (expected.global_scale_reciprocal), the tensor "
                   "quantized with fp32(1/r), supplied here as inputs.global_scale "
                   "(NVFP4-GS-3); expected.global_scale is that multiplier",)))
    return cases


def _zero_groups(seed):
    cases = []
    rnd = CaseRandom(seed, "zero-groups")
    weight = random_weight(rnd, (2, 64))
    weight[0, 0:16] = 0
    weight[0, 32:48] = -0.0
    weight[1, 16:32] = np.where(rnd.signs((16,)) < 0, -0.0, 0.0)
    weight[1, 48:64] = 0
    weight[1, 50] = np.float32(1e-3)  # the only non-zero element of its group
    h = random_h(rnd, 64)
    for method, init in (("hscale", "maxabs"), ("rtn", "maxabs"), ("scale-only", "maxabs"),
                         ("hscale", "4over6")):
        cases.append(Case(
            id=f"zero-groups-{method}-{init}", method=method, init=init,
            hessian_diag=h if method == "hscale" else None,
            title="zero groups (+0.0, -0.0, mixed signs) beside non-zero ones: byte 0x00, "
                  "sign-only codes, delta 0, no search",
            clauses=("NVFP4-ZERO-1", "NVFP4-E2M1-3", "HSCALE-METHOD-1", "NVFP4-GS-1"),
            weight=weight))
    return cases


def _groups(seed):
    cases = []
    rows = np.array([[v] * 16 for v in (1.0, -0.3, 0.7, 5e-3, 1000.0, -2.0 ** -140, 0.1,
                                         448 * 6.0)])
    weight = rows.reshape(2, 64).astype(np.float32)
    rnd = CaseRandom(seed, "constant-groups")
    h = random_h(rnd, 64)
    for method in ("scale-only", "hscale"):
        cases.append(Case(
            id=f"constant-groups-{method}", method=method,
            hessian_diag=h if method == "hscale" else None,
            title="constant groups (all 16 elements equal): the search favours a byte that "
                  "represents the value exactly",
            clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "HSCALE-METHOD-1", "NVFP4-GS-1"),
            weight=weight))
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    wide = np.array([
        [1e30, 1e-30, -1e30, 1e10, -1e-10, 1, 0, 3e29, -2e29, 7e28, 1e20, -1e25, 5e29, 1,
         -1, 0],
        [1.0, tiny, -tiny, 2.0 ** -126, 1e-38, -1e-45, 0.5, 0, 0.75, 1e-20, 0.3, -0.9, 1e-7,
         0.01, -0.02, 0.6]])
    for method in ("scale-only", "hscale"):
        cases.append(Case(
            id=f"huge-dynamic-range-{method}", method=method,
            hessian_diag=np.ones(16) if method == "hscale" else None,
            title="groups spanning 60 orders of magnitude and fp32 subnormals beside normals",
            clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-E2M1-2", "NVFP4-GS-1"),
            weight=wide.astype(np.float32)))
    return cases


def _ties(seed):
    """Exact objective ties from the frozen tie table (s_g = 1, K = 16, U = 6)."""
    table = load_tie_table()
    cases = []
    groups = (
        ("argmin-tie-keeps-baseline", ((-1, 0), (0, 1), (-9, 0), (0, 6)),
         "E(0) ties with E(-1), E(+1), E(-9), E(+6) at the minimum: the baseline is kept"),
        ("argmin-tie-larger-scale", ((-1, 1), (-2, 2), (-3, 3), (-6, 6)),
         "E(-k) == E(+k) at the minimum: the larger scale (+k) wins"),
        ("argmin-tie-smaller-move", ((-1, 2), (-2, 1), (1, -9), (-5, 6)),
         "ties between moves of different sizes: the smaller move wins"),
    )
    for case_id, pairs, title in groups:
        for index, pair in enumerate(pairs):
            a, b = sorted(pair)
            c0, group, h = table[(a, b)]
            cases.append(Case(
                id=f"{case_id}-{index}", global_scale=ONE, hessian_diag=h,
                title=f"{title}: shifts {a:+d} and {b:+d} tie exactly (c0 = 0x{c0:02x})",
                clauses=("HSCALE-ARGMIN-1", "HSCALE-OBJ-1", "HSCALE-WIN-1", "NVFP4-GS-3"),
                weight=group[None, :]))
    # Clipped duplicates: c0 = 3, shifts -2 .. -9 all give byte 1, which is the best byte.
    unit = scale_value(1)
    group = np.zeros(16)
    group[0] = 6 * scale_value(3)
    group[1:4] = (1.5 * unit, -3 * unit, 0.5 * unit)
    h = np.zeros(16)
    h[1:4] = 1.0
    cases.append(Case(
        id="argmin-clipped-duplicates-low", global_scale=ONE, hessian_diag=h,
        title="c0 = 0x03: shifts -2 .. -9 are all clipped to byte 0x01, the best byte; the "
              "first of them in priority order (-2) is the one reported",
        clauses=("HSCALE-WIN-1", "HSCALE-ARGMIN-1", "NVFP4-GS-3"), weight=exact(group[None, :])))
    group = np.zeros(16)
    group[0] = 6 * scale_value(0x7C)
    group[1:3] = (448.0 * 3, -448.0 * 1.5)
    h = np.zeros(16)
    h[1:3] = 1.0
    cases.append(Case(
        id="argmin-clipped-duplicates-high", global_scale=ONE, hessian_diag=h,
        title="c0 = 0x7c: shifts +2 .. +6 are all clipped to byte 0x7e (448), the best byte; "
              "+2 is reported",
        clauses=("HSCALE-WIN-1", "HSCALE-ARGMIN-1", "NVFP4-GS-3"), weight=exact(group[None, :])))
    group = signed_pattern(0x38)
    cases.append(Case(
        id="argmin-all-equal-h-zero", global_scale=ONE, hessian_diag=np.zeros(16),
        title="h = 0 everywhere: every candidate's objective is 0, the baseline is kept",
        clauses=("HSCALE-ARGMIN-1", "HSCALE-OBJ-1", "NVFP4-GS-3"), weight=group[None, :]))
    return cases


# Groups on which an evaluation of the objective in another order than HSCALE-OBJ-1 picks a
# different byte (found by a search, frozen; s_g = 1): (id, c0, weights fp32, h float64, what).
ORDER_TRAPS = (
    ("obj-trap-sequential-sum", 0x41,
     "41580000 c0990000 c10b8000 c0220000 bf900000 3fd80000 40c60000 40100000 be900000 "
     "407c0000 c07c0000 41148000 c0900000 412b0000 c12b0000 40a20000",
     "3ff5555555555555 3fb999999999999a 4017333333333333 400199999999999a 3ff5555555555555 "
     "3fd5555555555555 3fe6666666666666 3fe6666666666666 3ff6666666666666 3ff199999999999a "
     "3fb999999999999a 400199999999999a 4017333333333333 4007333333333333 3fd3333333333333 "
     "3fd3333333333333",
     "a left-to-right sum of the 16 terms instead of the pairwise tree picks another byte"),
    ("obj-trap-fused-multiply-add", 0x34,
     "40900000 40790000 3e100000 00000000 00000000 00000000 3fbf636f 00000000 3f0258a1 "
     "3fd0233d 3efb1db2 00000000 00000000 00000000 00000000 3f8b2289",
     "0000000000000000 3f87dc98e22419e1 3ff2a45770ac3438 0000000000000000 0000000000000000 "
     "0000000000000000 3f50de8e637db501 0000000000000000 3f3aa0654da09fb8 3f46222b7870de32 "
     "3f3d6bf313d4e8f6 0000000000000000 0000000000000000 0000000000000000 0000000000000000 "
     "3f3faff77c604eb3",
     "accumulating E = fma(h_j, d_j * d_j, E) picks another byte"),
    ("obj-trap-product-order", 0x30,
     "40400000 40330000 3d800000 00000000 3b9889aa 00000000 3e89542e 3f6f0708 00000000 "
     "3f14e830 3f990fde 00000000 3ef17846 3ed583d1 3efe1ce5 00000000",
     "0000000000000000 3f54c76adeb3c2b0 40056da635a960c5 0000000000000000 3f2be5ad0a671825 "
     "0000000000000000 3f5e357450c842af 3f56099350bbee0c 0000000000000000 3f4691fbcd283e53 "
     "3f4e9d0499e75df6 0000000000000000 3f169b760de88c36 3f5bcebc97370017 3f4ea0c0b6c50465 "
     "0000000000000000",
     "computing (h_j * d_j) * d_j instead of h_j * (d_j * d_j) picks another byte"),
    ("obj-trap-fp32-arithmetic", 0x32,
     "40700000 404a8000 3df00000 00000000 00000000 3f692aee 00000000 00000000 3fb38d9b "
     "3fabd8ab 3fb8f090 00000000 3fb17cfe 00000000 00000000 3f6755dd",
     "0000000000000000 3f84dcdf62a31a96 3feabafe3660fa10 0000000000000000 0000000000000000 "
     "3f16ef43c5506363 0000000000000000 0000000000000000 3f31477dde2342c9 3f4394efcd337905 "
     "3f22c3d5b868eac3 0000000000000000 3f2912719e1382a5 0000000000000000 0000000000000000 "
     "3f487b55d13fd2a9",
     "evaluating the objective in fp32 instead of float64 picks another byte"),
)


def _objective(seed):
    cases = []
    for case_id, c0, w_hex, h_hex, what in ORDER_TRAPS:
        cases.append(Case(
            id=case_id, global_scale=ONE, hessian_diag=hexio.from_row_text(h_hex, "float64"),
            title=f"near-tie (baseline 0x{c0:02x}): {what}",
            clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-GS-3"),
            weight=hexio.from_row_text(w_hex, "float32")[None, :]))
    rnd = CaseRandom(seed, "h-zeros")
    h = random_h(rnd, 48)
    h[0:16] = 0.0
    h[16:32:2] = 0.0
    h[33] = -0.0
    h[40] = 0.0
    cases.append(Case(
        id="h-zeros", hessian_diag=h,
        title="h with zeros: a group whose h is all zero keeps its baseline (every objective "
              "0); zeros on half a group and a -0.0 entry (allowed: not negative)",
        clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-IN-2"),
        weight=random_weight(rnd, (4, 48))))
    rnd = CaseRandom(seed, "h-huge-spread")
    cases.append(Case(
        id="h-huge-spread", hessian_diag=random_h(rnd, 64, -900, 900),
        title="h spread over 2^-900 .. 2^900 (540 decades)",
        clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1"),
        weight=random_weight(rnd, (4, 64))))
    rnd = CaseRandom(seed, "h-overflow")
    weight = random_weight(rnd, (4, 32), scale=100.0)
    h = random_h(rnd, 32)
    h[[1, 5, 17, 18]] = 1.5e308
    cases.append(Case(
        id="h-overflow-to-inf", hessian_diag=h,
        title="h near the float64 maximum: h_j * d_j^2 overflows to +inf for some candidates; "
              "inf is a valid objective value (never NaN: h and d are finite) and compares "
              "as the largest",
        clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1"), weight=weight,
        notes=("float64 overflow to +inf follows IEEE 754; equal infinities tie",)))
    rnd = CaseRandom(seed, "h-subnormal")
    h = np.array([5e-324, 1e-310, 2.2e-308, 1e-300] * 8)
    cases.append(Case(
        id="h-subnormal", hessian_diag=h,
        title="h in the float64 subnormal range: products underflow gradually (no flush to "
              "zero), many objectives become exactly equal",
        clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1"),
        weight=random_weight(rnd, (4, 32), scale=1e-3)))
    return cases


def _init_4over6(seed):
    cases = []
    tie = np.array([6.0, 2.125, 1.125, -4.3125, -4.0625, -0.4375, 1.75, 5.25, 5.4375, -5.3125,
                    -0.6875, -5.8125, 2.5, 0.8125, -4.3125, -0.6875])
    four = np.array([4.0, 3.0, 2.0, 1.0, -3.0, -2.0, 4.0, 0.5, -1.0, 3.0, 2.0, -4.0, 1.0, 0.0,
                     2.0, 3.0]) * 1.5
    six = np.array([6.0, 4.0, -4.0, 1.0, -1.0, 0.5, 1.0, 4.0, 0.5, -0.5, 2.0, 1.0, -4.0, 4.0,
                    1.0, 0.5])
    only_max = np.zeros(16)
    only_max[5] = -6.0
    rows = exact(np.stack([tie, four, six, only_max]))
    for method, ceiling in (("rtn", 448.0), ("rtn", 256.0), ("hscale", 256.0)):
        tag = f"{method}-C{ceiling:g}"
        cases.append(Case(
            id=f"init-4over6-{tag}", method=method, init="4over6", scale_ceiling=ceiling,
            global_scale=ONE, hessian_diag=np.ones(16) if method == "hscale" else None,
            title="4over6 baseline: row 0 an exact tie of the unweighted errors (6 kept), "
                  "row 1 mapping the maximum to 4 is better, row 2 mapping it to 6 is better, "
                  "row 3 a lone maximum (both exact: a tie, 6 kept)",
            clauses=("NVFP4-INIT-2", "NVFP4-GS-3") + (("HSCALE-METHOD-1",) if method == "hscale"
                                                      else ()),
            weight=rows))
    rnd = CaseRandom(seed, "init-4over6-random")
    weight = random_weight(rnd, (4, 64))
    h = random_h(rnd, 64)
    for method in ("rtn", "hscale"):
        cases.append(Case(
            id=f"init-4over6-random-{method}", method=method, init="4over6", scale_ceiling=256.0,
            hessian_diag=h if method == "hscale" else None,
            title="4over6 on a random tensor with its own convention C = 256 (s_g computed)",
            clauses=("NVFP4-INIT-2", "NVFP4-GS-1", "HSCALE-METHOD-1"), weight=weight))
    cases.append(Case(
        id="ceiling-256-maxabs", method="hscale", scale_ceiling=256.0, hessian_diag=h,
        title="max-abs baseline with scale ceiling C = 256 (s_g = fp32(amax / 1536))",
        clauses=("NVFP4-GS-1", "NVFP4-INIT-1", "HSCALE-ARGMIN-1"), weight=weight))
    return cases


def _methods_and_windows(seed):
    cases = []
    rnd = CaseRandom(seed, "random-normal")
    weight = random_weight(rnd, (8, 128))
    h = random_h(rnd, 128)
    for method in ("rtn", "scale-only", "hscale"):
        cases.append(Case(
            id=f"random-normal-{method}", method=method,
            hessian_diag=h if method == "hscale" else None,
            title=f"a seeded random 8x128 fp32 tensor, method {method} (same weights for the "
                  "three methods; h for hscale only)",
            clauses=("HSCALE-METHOD-1", "NVFP4-GS-1", "NVFP4-INIT-1", "HSCALE-WIN-1",
                     "HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-PACK-1", "NVFP4-PACK-2",
                     "NVFP4-PACK-3", "NVFP4-DEQ-1"),
            weight=weight))
    rnd = CaseRandom(seed, "windows")
    weight = random_weight(rnd, (4, 64), kind="heavy", scale=0.01)
    h = random_h(rnd, 64)
    for K, U in ((1, 0), (2, 1), (2, 0), (8, 3), (16, 0), (16, 15), (32, 6), (64, 40)):
        cases.append(Case(
            id=f"window-K{K}-U{U}", K=K, U=U, hessian_diag=h,
            title=f"window K = {K}, U = {U} (D = {K - 1 - U}) on a heavy-tailed random tensor"
                  + (" (K = 1: no search, equal to rtn)" if K == 1 else ""),
            clauses=("HSCALE-WIN-1", "HSCALE-ARGMIN-1", "NVFP4-IN-3"), weight=weight))
    return cases


def _dtypes_and_random(seed):
    cases = []
    for dtype, tag in ((BF16, "bf16"), (F16, "fp16")):
        rnd = CaseRandom(seed, f"random-{tag}")
        weight = random_weight(rnd, (4, 64), dtype=dtype)
        h = random_h(rnd, 64)
        for method in ("rtn", "hscale"):
            cases.append(Case(
                id=f"random-{tag}-{method}", method=method,
                hessian_diag=h if method == "hscale" else None,
                title=f"a seeded random {tag} tensor (converted exactly), method {method}",
                clauses=("NVFP4-IN-1", "NVFP4-GS-1", "HSCALE-METHOD-1", "HSCALE-ARGMIN-1"),
                weight=weight))
    rnd = CaseRandom(seed, "fp16-subnormal")
    weight = (random_weight(rnd, (2, 32), scale=1e-6)).astype(F16)
    cases.append(Case(
        id="fp16-subnormal-weights", hessian_diag=random_h(rnd, 32),
        title="fp16 weights in the fp16 subnormal range (below 2^-14)",
        clauses=("NVFP4-IN-1", "NVFP4-GS-1", "HSCALE-ARGMIN-1"), weight=weight))
    rnd = CaseRandom(seed, "random-heavy")
    cases.append(Case(
        id="random-heavy-tail", hessian_diag=random_h(rnd, 64, -20, 20),
        title="a heavy-tailed random tensor (outlier groups) with h spread over 2^-20 .. 2^20",
        clauses=("HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-GS-1"),
        weight=random_weight(rnd, (4, 64), kind="heavy", scale=0.02)))
    rnd = CaseRandom(seed, "swizzle")
    weight = random_weight(rnd, (129, 80), dtype=BF16)
    weight[5] = 0
    weight[128, 16:32] = 0
    cases.append(Case(
        id="swizzle-129x80", method="rtn",
        title="129 x 80 (scale bytes 129 x 5): the 128x4 swizzled layout spans 2 x 2 tiles, "
              "zero padded",
        clauses=("NVFP4-PACK-2", "NVFP4-PACK-3", "NVFP4-PACK-1", "NVFP4-ZERO-1"),
        weight=weight))
    return cases


def _minilm(seed):
    cases = []
    for entry in load_minilm_slices():
        (r0, r1), (c0, c1) = entry["rows"], entry["cols"]
        short = entry["layer"].replace("encoder.layer.", "L").replace(".", "-")
        cases.append(Case(
            id=f"minilm-{short}-r{r0}-{r1}-c{c0}-{c1}", hessian_diag=entry["hessian_diag"],
            global_scale=entry["global_scale"],
            title=f"all-MiniLM-L6-v2 {entry['layer']} rows {r0}..{r1 - 1}, columns "
                  f"{c0}..{c1 - 1}, with its calibrated h and its layer's s_g",
            clauses=("HSCALE-CAL-1", "HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-GS-3"),
            weight=entry["weight"],
            provenance=f"layer {entry['layer']} {entry['layer_shape']}, rows {r0}:{r1}, columns "
                       f"{c0}:{c1}, h from {entry['tokens']} calibration tokens; "
                       f"{entry['source']}; global_scale = s_g of the whole layer (C = 448)"))
    return cases


def _block_hessian(seed):
    """hscale-block (HSCALE-BLOCK-1): exact data where the block choice differs from the
    diagonal one, a seeded random layer with the blocks of a random X^T X, and a block whose
    products overflow to +inf and -inf (E NaN, counted as +inf)."""
    cases = []
    rnd = CaseRandom(seed, "block-exact")
    weight = rnd.integers(-32, 32, (4, 32)) / 8.0
    weight[:, ::16] = 6.0
    blocks = rnd.integers(-4, 4, (2, 16, 16)).astype(np.float64)
    blocks = blocks + blocks.transpose(0, 2, 1)
    blocks[:, np.arange(16), np.arange(16)] = rnd.integers(0, 64, (2, 16))
    cases.append(Case(
        id="block-exact", method="hscale-block", hessian_diag=blocks, global_scale=ONE,
        title="hscale-block on weights in multiples of 1/8 with symmetric integer blocks (every "
              "fp64 operation exact, s_g = 1, c0 = 0x38)",
        clauses=("HSCALE-BLOCK-1", "HSCALE-METHOD-1", "HSCALE-ARGMIN-1"),
        weight=weight.astype(np.float32)))
    rnd = CaseRandom(seed, "block-random")
    weight = random_weight(rnd, (8, 64))
    # integers times powers of two: X^T X is exact whatever the order of its sums
    x = rnd.integers(-8, 8, (96, 64)) * np.ldexp(1.0, rnd.integers(-4, 4, (64,)))
    gram = x.T @ x
    cases.append(Case(
        id="block-random", method="hscale-block",
        hessian_diag=np.ascontiguousarray(
            gram.reshape(4, 16, 4, 16)[np.arange(4), :, np.arange(4), :]),
        title="hscale-block on a seeded random 8x64 fp32 tensor with the diagonal blocks of a "
              "random X^T X (uneven channel scales)",
        clauses=("HSCALE-BLOCK-1", "HSCALE-METHOD-1", "NVFP4-IN-6"), weight=weight))
    group = np.zeros(16, dtype=np.float32)
    group[0], group[2] = 6.0, 5.0
    nan_blocks = np.zeros((1, 16, 16))
    nan_blocks[0, 0, 0] = 1.0
    nan_blocks[0, 2, 2] = np.finfo(np.float64).max
    nan_blocks[0, 2, 3] = nan_blocks[0, 3, 2] = -np.finfo(np.float64).max
    cases.append(Case(
        id="block-nan-objective", method="hscale-block", hessian_diag=nan_blocks,
        global_scale=ONE,
        title="w = (6, 0, 5, 0, ...): candidates with |d_2| > 1 have E = NaN (inf - inf), which "
              "counts as +inf; byte 0x3A (s = 1.25, d_2 = 0) wins",
        clauses=("HSCALE-BLOCK-1",), weight=group[None]))
    return cases


def _errors(seed):
    good = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    h = np.ones(16)
    cases = []

    def err(case_id, clause, title, weight=good, **kwargs):
        kwargs.setdefault("hessian_diag", h if weight is good else None)
        cases.append(Case(id=case_id, title=title, clauses=(clause,), weight=weight,
                          expect_error=clause, **kwargs))

    nan = good.copy()
    nan[1, 3] = np.nan
    err("err-weight-nan", "NVFP4-IN-1", "a NaN weight at [1, 3]", nan, hessian_diag=h)
    inf = good.copy()
    inf[0, 5] = -np.inf
    err("err-weight-inf", "NVFP4-IN-1", "a -inf weight at [0, 5]", inf, hessian_diag=h)
    bnan = good.astype(BF16)
    bnan[0, 15] = np.nan
    err("err-weight-bf16-nan", "NVFP4-IN-1", "a bf16 NaN weight at [0, 15]", bnan,
        hessian_diag=h)
    err("err-weight-cols", "NVFP4-IN-1", "n = 24 columns, not a multiple of 16",
        np.zeros((2, 24), dtype=np.float32), method="rtn")
    err("err-weight-float64", "NVFP4-IN-1", "float64 weights (not an accepted dtype)",
        good.astype(np.float64), hessian_diag=h)
    err("err-weight-int32", "NVFP4-IN-1", "int32 weights (not an accepted dtype)",
        np.ones((2, 16), dtype=np.int32), hessian_diag=h)
    err("err-weight-1d", "NVFP4-IN-1", "a 1-D weight of 16 elements", good[0].copy(),
        hessian_diag=h)
    err("err-weight-empty", "NVFP4-IN-1", "an empty (0 x 16) weight",
        np.zeros((0, 16), dtype=np.float32), hessian_diag=h)
    bad = h.copy()
    bad[5] = -1.0
    err("err-h-negative", "NVFP4-IN-2", "hessian_diag[5] = -1", hessian_diag=bad)
    bad = h.copy()
    bad[7] = np.nan
    err("err-h-nan", "NVFP4-IN-2", "hessian_diag[7] = NaN", hessian_diag=bad)
    bad = h.copy()
    bad[0] = np.inf
    err("err-h-inf", "NVFP4-IN-2", "hessian_diag[0] = +inf", hessian_diag=bad)
    err("err-h-length", "NVFP4-IN-2", "hessian_diag of 15 entries for 16 columns",
        hessian_diag=np.ones(15))
    err("err-h-missing", "NVFP4-IN-2", "method hscale without hessian_diag",
        hessian_diag=None)
    blocks = np.eye(16)[None]
    bad_blocks = blocks.copy()
    bad_blocks[0, 3, 4] = np.nan
    err("err-blocks-missing", "NVFP4-IN-6", "method hscale-block without the blocks",
        method="hscale-block", hessian_diag=None)
    err("err-blocks-diagonal", "NVFP4-IN-6", "method hscale-block given a diagonal (16,) "
        "instead of the (1, 16, 16) blocks", method="hscale-block", hessian_diag=h)
    err("err-blocks-nan", "NVFP4-IN-6", "hessian_blocks[0, 3, 4] = NaN",
        method="hscale-block", hessian_diag=bad_blocks)
    err("err-K-zero", "NVFP4-IN-3", "K = 0", K=0, U=0)
    err("err-U-negative", "NVFP4-IN-3", "U = -1", U=-1)
    err("err-U-equals-K", "NVFP4-IN-3", "U = K = 16 (D = -1)", K=16, U=16)
    err("err-K-fraction", "NVFP4-IN-3", "K = 1.5, not an integer", K=1.5)
    err("err-K-bool", "NVFP4-IN-3", "K = true, a boolean is not an integer here", K=True)
    for value, tag in ((np.float32(0.0), "zero"), (np.float32(-1.0), "negative"),
                       (np.float32(np.nan), "nan"), (np.float32(np.inf), "inf"),
                       (np.float32(2.0 ** -130), "subnormal"), (0.1, "not-fp32")):
        err(f"err-global-scale-{tag}", "NVFP4-IN-4",
            f"a supplied global_scale that is {tag.replace('-', ' ')} (stored hex: "
            f"{'fp32' if isinstance(value, np.float32) else 'float64'})", global_scale=value)
    for value, tag in ((0.0, "zero"), (449.0, "above-448"), (float("nan"), "nan"),
                       (-256.0, "negative")):
        err(f"err-scale-ceiling-{tag}", "NVFP4-IN-4", f"scale_ceiling = {value}",
            scale_ceiling=value)
    err("err-global-scale-overflow", "NVFP4-IN-4",
        "a supplied global_scale = 2^118: 6 * 448 * s_g overflows fp32 on dequantization",
        global_scale=np.float32(2.0 ** 118))
    huge = np.array([[np.finfo(np.float32).max] + [0.0] * 15], dtype=np.float32)
    err("err-computed-global-scale-overflow", "NVFP4-GS-2",
        "amax = fp32 max with scale_ceiling = 0.01: the computed s_g would let dequantized "
        "values overflow fp32", huge, method="rtn", scale_ceiling=0.01)
    err("err-method", "NVFP4-IN-5", "method = 'gptq' (not one of rtn, scale-only, hscale)",
        method="gptq")
    err("err-init", "NVFP4-IN-5", "init = 'minmax' (not one of maxabs, 4over6)",
        init="minmax")
    return cases


def _gptq(seed):
    rnd = CaseRandom(seed, "gptq-diagonal")
    weight = random_weight(rnd, (4, 64))
    h = random_h(rnd, 64)
    h[[3, 20, 21, 40]] = 0.0  # H_jj = 0 channels: unit diagonal before damping, weights kept
    return [Case(
        id="gptq-diagonal-hessian", hessian_diag=h, pipeline="gptq-diagonal",
        title="the GPTQ-like pipeline with a diagonal H = diag(h) (some H_jj = 0): no error is "
              "pushed, so the result equals hscale with h exactly (the only bit-exact GPTQ case)",
        clauses=("HSCALE-GPTQ-1", "HSCALE-ARGMIN-1", "NVFP4-GS-1"), weight=weight,
        notes=("inputs.pipeline = gptq-diagonal: run gptq_quantize(weight, diag(hessian_diag)); "
               "the outputs are those of quantize(weight, hessian_diag)",))]


SECTIONS = (_e2m1, _e4m3, _global_scale, _zero_groups, _groups, _ties, _objective,
            _init_4over6, _methods_and_windows, _block_hessian, _dtypes_and_random, _minilm,
            _gptq, _errors)


#: Clauses of docs/spec.md with no level-0 case, and why (docs/vectors.md's clause table).
NO_VECTOR_CASE = {
    clause: ("a checkpoint's file layout (tensor names and dtypes, config keys), not a "
             "quantizer's inputs and outputs: every number a checkpoint holds (packed codes, "
             "scale bytes, s_g and its reciprocal r) is in the vectors; the layouts are tested "
             "by tests/quantize/test_quantize_model.py and tests/checkpoints/test_check.py (`hscale check`)")
    for clause in ("NVFP4-CKPT-1", "NVFP4-CKPT-2")}
NO_VECTOR_CASE["NVFP4-ACT-4"] = (
    "the decoded activation follows from the scale bytes and codes the act_* sets hold "
    "(NVFP4-DEQ-1's rule); tested by tests/reference/test_activation_quantization.py")
NO_VECTOR_CASE["NVFP4-ACT-9"] = (
    "a group holding a NaN or an infinity has no specified result, so no expected output to "
    "store; the suite feeds such groups and judges the others (conformance/test_activations.py)")
NO_VECTOR_CASE["NVFP4-GGUF-1"] = (
    "a file layout (llama.cpp's 64-weight blocks and .scale tensor), not a quantizer's inputs "
    "and outputs; tested against gguf's own dequantizer by tests/checkpoints/test_gguf.py")
NO_VECTOR_CASE["NVFP4-CKPT-3"] = (
    "which Linears of a model share one s_g is a model-level rule of the checkpoint writer; "
    "for one tensor a shared s_g is a supplied global scale (NVFP4-GS-3, covered); tested by "
    "tests/quantize/test_quantize_model.py")
NO_VECTOR_CASE["NVFP4-CKPT-4"] = (
    "a W4A4 checkpoint's file layout (the input scale's tensor name, dtype and convention, the "
    "config keys), not a quantizer's inputs and outputs; tested by tests/quantize/test_w4a4.py against "
    "the installed compressed-tensors and ModelOpt and by `hscale check`")
NO_VECTOR_CASE["HSCALE-CAL-2"] = (
    "a calibration statistic of a model (each Linear's input amax over the calibration tokens) "
    "and the fp32 chain from it to the activation scale: tested by tests/quantize/test_w4a4.py against "
    "independent hooks and a Fraction evaluation of the chain on all 2^23 significands")
NO_VECTOR_CASE["HSCALE-CAL-3"] = (
    "h read from a model's importance-matrix file (llama.cpp's in_sum2 and counts), not a "
    "quantizer's inputs and outputs: the h it gives is an h like any other, which the vectors "
    "feed; tested by tests/calibration/test_imatrix.py against a file written by llama.cpp's llama-imatrix")
NO_VECTOR_CASE["NVFP4-CKPT-5"] = (
    "a file container (the safetensors header, its offsets and the shard index), not a "
    "quantizer's inputs and outputs; tested by tests/checkpoints/test_checkpoint_validation.py and the "
    "checkpoint fuzzer (tests/checkpoints/test_checkpoint_fuzz.py) through `hscale check`")
NO_VECTOR_CASE["NVFP4-CKPT-6"] = (
    "a checkpoint against its own config (the architecture's Linears, shapes and counts), not a "
    "quantizer's inputs and outputs; tested by tests/checkpoints/test_checkpoint_validation.py and the "
    "checkpoint fuzzer through `hscale check`")
NO_VECTOR_CASE["NVFP4-GGUF-2"] = (
    "a file container (the GGUF header, its strings, types and offsets), not a quantizer's "
    "inputs and outputs; tested by tests/checkpoints/test_checkpoint_validation.py and the checkpoint "
    "fuzzer through `hscale check`")


def clause_index(cases) -> dict[str, list[str]]:
    """clause ID -> IDs of the cases that exercise it."""
    index: dict[str, list[str]] = {}
    for case in cases:
        for clause in case.clauses:
            index.setdefault(clause, []).append(case.id)
    return dict(sorted(index.items()))
