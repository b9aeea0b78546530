"""The level-0 activation cases (docs/vectors.md, "Activation sets"): the hand-worked cases of
docs/spec.md section 8 where the recipes give different bytes and codes, saturation under a
static scale below the run-time amax, zero groups and signed zeros, subnormal block scales,
E4M3 and E2M1 boundaries, the layouts' padding, every input dtype and the dynamic scale.

Every value is constructed exactly in its dtype (``hscale.judge.builders.exact`` refuses a
construction that is not); the random cases draw from the seeded ``CaseRandom``.
"""

from __future__ import annotations

import numpy as np

from hscale.judge.activations import ActivationCase
from hscale.judge.builders import BF16, F16, F32, exact
from hscale.reference.constants import E2M1_MIDPOINTS, GROUP_SIZE
from hscale.reference.e4m3 import E4M3_VALUES

from .rand import CaseRandom

RECIPE_CLAUSES = ("NVFP4-ACT-2", "NVFP4-ACT-3", "NVFP4-ACT-6", "NVFP4-ACT-7")


def _case(x, g, ident, title, clauses, *notes) -> ActivationCase:
    return ActivationCase(x, None if g is None else np.float32(g), ident, title, tuple(clauses),
                          tuple(notes))


def _groups(*groups, dtype=F32, rounded: bool = False) -> np.ndarray:
    """One token per group: each group's values padded with zeros to 16, exact in ``dtype``
    (or, ``rounded``, rounded into it: data rather than a construction)."""
    rows = np.zeros((len(groups), GROUP_SIZE))
    for r, values in enumerate(groups):
        rows[r, :len(values)] = values
    return rows.astype(dtype) if rounded else exact(rows, dtype)


def _hand_worked():
    yield _case(_groups([15 * 2.0 ** -9]), 5.0, "act-recipes-association",
                "fast-math ties to 0x0C, exact rounds above the midpoint to 0x0D",
                ("NVFP4-ACT-5",) + RECIPE_CLAUSES,
                "g = 5, amax_g = 15 * 2^-9: fp32(amax_g * fp32(1/6)) = 5 * 2^-10 exactly, times 5 "
                "is the midpoint of 0x0C and 0x0D (a tie: 0x0C); exact: fp32(5 * fp32(1/6)) = "
                "13981014 * 2^-24, times amax_g rounds to 13107201 * 2^-29, above it: 0x0D")
    yield _case(_groups([3 * 2.0 ** -9]), 3.0, "act-recipes-reciprocal-error",
                "fast-math admits 0x01 and 0x02, exact 0x02, torchao clamps to 0x08",
                ("NVFP4-ACT-5",) + RECIPE_CLAUSES,
                "g = 3, amax_g = 3 * 2^-9: with rcp(6) = fp32(1/6) the block scale is the midpoint "
                "3 * 2^-10 of 0x01 and 0x02 (0x02); with its lower neighbour, within PTX's one "
                "ulp, just below it (0x01)")
    yield _case(_groups([1.0, 0.125]), 3.0, "act-recipes-code-tie",
                "0.125 * o is the tie 0.75 for o = 6, below it for o = 6 - 2^-21",
                ("NVFP4-ACT-5",) + RECIPE_CLAUSES,
                "byte 0x30 (0.5) everywhere; fast-math admits codes 0x2 and 0x1 for element 1, "
                "exact and torchao give 0x2")
    yield _case(_groups([6.0, 2.5, -2.5, 0.25, -0.25, 0.75, 1.25, 1.75, 3.5, 5.0]), 1.0,
                "act-recipes-exact-reciprocal-ties",
                "g = 1, byte 0x38: every reciprocal is exact, every tie goes to even",
                ("NVFP4-ACT-5",) + RECIPE_CLAUSES,
                "rcp(1) = 1 exactly (powers of two are exact), so no approximation moves a tie: "
                "ties away from zero are not fast-math")
    yield _case(_groups([1e-4, -2e-4, 0.0, -0.0, 3e-5], rounded=True), 1.0, "act-underflow-to-zero-byte",
                "a block scale below 2^-10: byte 0x00 (fast-math, exact), 0x08 (torchao)",
                ("NVFP4-ACT-8",) + RECIPE_CLAUSES,
                "fast-math codes x * 0 (vLLM) or x * inf (TensorRT-LLM, FlashInfer); exact "
                "x * FLT_MAX; torchao x * 64")


def _special():
    x = np.zeros((4, 32))
    x[1, :16] = -0.0
    x[2, ::2] = -0.0
    x[3, :16] = np.array([6, -0.0, -0.1, 0.0, -0.2, 0.1, -0.24, 1, -1, 2, -3, 4, -6, 0.25, -0.25,
                          -0.26])
    x[3, 17] = -0.0
    yield _case(x.astype(F32), 1.0, "act-zero-groups-and-signed-zeros",
                "groups of +0.0, -0.0 and both; -0.0 and negatives rounding to 0 among values",
                ("NVFP4-ACT-8",) + RECIPE_CLAUSES,
                "every code keeps the sign bit of x: -0.0 and -0.1 give 0x8 (TransformerEngine's "
                "and FlashInfer's bitwise tests expect it)")
    calibrated = 100.0
    maxima = [calibrated * f for f in (1.0, 1.001, 1.04, 1.5, 10.0, 1000.0)]
    x = np.zeros((len(maxima), 32))
    for r, top in enumerate(maxima):
        x[r, :4] = [top, -top * 0.9, top / 7, -top / 3]
        x[r, 16:20] = [top * 0.5, -top, 1.0, -1.0]
    yield _case(x.astype(F32), np.float32(2688 / calibrated), "act-static-scale-below-amax",
                "a static scale calibrated for amax 100, met with up to 1000 x that",
                ("NVFP4-ACT-8",) + RECIPE_CLAUSES,
                "block scales above 448 saturate to 0x7E (never 0x7F) and codes to +-6; a "
                "reference casting through torch's float8 on a GPU writes 0x7F from 470 up")


def _boundaries():
    tiny = [2.0 ** -9 * 6 * k for k in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 3.5, 4.5, 7, 7.5, 8)]
    yield _case(_groups(*[[t, -t / 2, t / 3] for t in tiny], rounded=True), 1.0,
                "act-subnormal-block-scales",
                "block scales in the E4M3 subnormal range and at its ties",
                RECIPE_CLAUSES,
                "fast-math and exact give the subnormal bytes 0x01..0x07 (no 0x01 floor, 0x00 "
                "below 2^-10); torchao clamps them to 0x08")
    mids = (E4M3_VALUES[1:127] + E4M3_VALUES[:126]) / 2
    rows = []
    for mid in mids[::5]:
        top = float(np.float32(6 * mid))
        lo, hi = np.nextafter(np.float32(top), np.float32(0)), np.nextafter(np.float32(top),
                                                                            np.float32(np.inf))
        rows.append([top, float(lo), float(hi)])
    x = np.zeros((len(rows) * 3, GROUP_SIZE))
    for k, (top, lo, hi) in enumerate(rows):
        x[3 * k, 0], x[3 * k + 1, 0], x[3 * k + 2, 0] = top, lo, hi
    yield _case(exact(x, F32), 1.0, "act-e4m3-midpoints",
                "group maxima at 6 m (and one ulp either side) for E4M3 midpoints m",
                RECIPE_CLAUSES, "g = 1: the block scale amax_g * rcp(6) lands on or near m")
    values = []
    for mid in E2M1_MIDPOINTS:
        values += [mid, -mid]
    yield _case(_groups([6.0] + values[:15], [6.0] + values[14:],
                        [4.0] + [v * 2 / 3 for v in values[:15]], rounded=True), 1.0, "act-e2m1-midpoints", "elements on every E2M1 midpoint of a power-of-two "
                "scale, and of the scale 2/3", RECIPE_CLAUSES,
                "where the scale is a power of two the reciprocals are exact and the ties go to "
                "even in every recipe")


def _layouts(seed: int):
    for tokens, n in ((9, 80), (129, 48)):
        ident = f"act-layout-padding-{tokens}x{n}"
        rnd = CaseRandom(seed, ident)
        x = (rnd.normalish((tokens, n)) * rnd.log_uniform((tokens, 1), -3, 3)).astype(BF16)
        amax = float(np.max(np.abs(x.astype(np.float64))))
        yield _case(x, np.float32(2688 / amax), ident,
                    f"{tokens} tokens, {n // GROUP_SIZE} scale columns: padding in both layouts",
                    ("NVFP4-ACT-10",) + RECIPE_CLAUSES,
                    "swizzled_128x4 pads rows to 128 and columns to 4, swizzled_8x4 rows to 8 "
                    "and columns to 4; every padding byte is 0x00")


def _dtypes_and_dynamic(seed: int):
    for dtype, name in ((BF16, "bf16"), (F16, "fp16"), (F32, "fp32")):
        ident = f"act-random-{name}"
        x = (CaseRandom(seed, ident).normalish((4, 64)) * 3).astype(dtype)
        yield _case(x, np.float32(2688 / 10.0), ident,
                    f"{name} activations, a calibrated static scale",
                    ("NVFP4-ACT-11",) + RECIPE_CLAUSES)
    x = (CaseRandom(seed, "act-dynamic-scale").normalish((4, 48)) * 0.3).astype(F32)
    yield _case(x, None, "act-dynamic-scale", "the scale computed from the tensor",
                ("NVFP4-ACT-1",) + RECIPE_CLAUSES,
                "g = fp32(2688 / amax_t) (fast-math, exact), a = fp32(amax_t / 2688) (torchao)")
    yield _case(np.zeros((2, 32), F32), None, "act-dynamic-all-zero",
                "an all-zero tensor, dynamic: g = a = 1", ("NVFP4-ACT-1", "NVFP4-ACT-8"),
                "TransformerEngine's Python reference gives g = FLT_MAX here and torchao 0.18 "
                "divides by zero (NaN scale bytes 0xFF)")


def level0_cases(seed: int) -> list[ActivationCase]:
    """Every level-0 activation case (IDs unique)."""
    cases = [*_hand_worked(), *_special(), *_boundaries(), *_layouts(seed),
             *_dtypes_and_dynamic(seed)]
    assert len({c.id for c in cases}) == len(cases), "duplicate activation case id"
    return cases
