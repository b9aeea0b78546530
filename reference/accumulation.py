"""What a GEMM kernel may return for the exact sums of ``gemm.py`` (spec section 10): the
accumulation model it declares (NVFP4-GEMM-4), where it applies the global scales
(NVFP4-GEMM-5), its output dtype (NVFP4-GEMM-6), and from these the admissible interval of
every output element, a single value where every partial sum is exact (NVFP4-GEMM-7).

The interval is computed from the exact sum: the bound of NVFP4-GEMM-4 around it, tightened to
values of the accumulator's format, carried through the global scales by every evaluation order
the clause admits (each step is monotone, so the ends of the interval go to the ends), and
rounded to the output dtype.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from .float_formats import FLOAT32, FloatFormat, exact_parts, float_format
from .gemm import (ELEMENT_UNIT_EXPONENT, NO_TERMS, ExactSum, check_nvfp4_operand,
                   decoded_units, exact_sum, is_nvfp4)

ROUNDINGS = ("nearest", "faithful")
#: NVFP4-GEMM-5: where the two global scales are applied.
PLACEMENTS = ("accumulator", "output", "elements")
#: Bits of the bound's factor kept (it is rounded up to a multiple of 2^-BOUND_BITS).
BOUND_BITS = 96


@dataclass(frozen=True)
class GemmModel:
    """The accumulation model a GEMM kernel declares (NVFP4-GEMM-4, -4).

    ``accumulator``: the format every product and sum of the accumulation is rounded in
    (float32, float16, bfloat16); ``rounding``: ``nearest`` (IEEE round-to-nearest-even) or
    ``faithful`` (either neighbour: truncating adders); ``global_scales``: ``accumulator`` (the
    spec's: on the accumulated sum, in fp32), ``output`` (after the sum is rounded to the output
    dtype, in the output dtype) or ``elements`` (folded into each dequantized element before the
    matmul); for ``elements``, ``element_dtype`` is the dtype the dequantized elements are held
    in and ``element_roundings`` the most roundings between the exact element and that value.
    """

    accumulator: str = "float32"
    rounding: str = "nearest"
    global_scales: str = "accumulator"
    element_dtype: str | None = None
    element_roundings: int = 0

    def __post_init__(self):
        fmt = float_format(self.accumulator)  # ValueError naming the choices
        object.__setattr__(self, "accumulator", fmt.name)
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding {self.rounding!r}: one of {', '.join(ROUNDINGS)} "
                             "(spec NVFP4-GEMM-4)")
        if self.global_scales not in PLACEMENTS:
            raise ValueError(f"global_scales {self.global_scales!r}: one of "
                             f"{', '.join(PLACEMENTS)} (spec NVFP4-GEMM-5)")
        if self.global_scales == "elements":
            if self.element_dtype is None:
                raise ValueError("global_scales 'elements' needs element_dtype, the dtype the "
                                 "dequantized elements are held in (spec NVFP4-GEMM-5)")
            object.__setattr__(self, "element_dtype", float_format(self.element_dtype).name)
            if isinstance(self.element_roundings, bool) or not isinstance(
                    self.element_roundings, int) or self.element_roundings < 1:
                raise ValueError(f"element_roundings {self.element_roundings!r}: a whole "
                                 "number >= 1, the roundings from the exact element to the "
                                 "value the matmul reads (spec NVFP4-GEMM-5)")
        elif self.element_dtype is not None or self.element_roundings:
            raise ValueError("element_dtype and element_roundings apply to global_scales "
                             "'elements' only (spec NVFP4-GEMM-5)")

    @classmethod
    def parse(cls, value) -> "GemmModel":
        """A model from a preset name (``fp32``, ``fp16-faithful``, ...), a mapping of the
        fields, or a model; ValueError naming what is wrong."""
        if isinstance(value, GemmModel):
            return value
        if isinstance(value, str):
            if value not in PRESETS:
                raise ValueError(f"accumulation model {value!r}: a preset ("
                                 f"{', '.join(PRESETS)}) or a mapping of "
                                 f"{', '.join(cls.__dataclass_fields__)}")
            return PRESETS[value]
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"accumulation model: unknown fields {sorted(unknown)}; known: "
                                 f"{', '.join(cls.__dataclass_fields__)}")
            return cls(**value)
        raise ValueError(f"accumulation model {value!r}: a preset name, a mapping or a "
                         "GemmModel")

    @property
    def format(self) -> FloatFormat:
        return float_format(self.accumulator)

    @property
    def element_format(self) -> FloatFormat | None:
        return float_format(self.element_dtype) if self.element_dtype else None

    @property
    def narrow(self) -> bool:
        return self.format is not FLOAT32

    def unit_roundoff(self) -> Fraction:
        """u of NVFP4-GEMM-4: the accumulator's 2^-p (2^(1-p) when faithful)."""
        return self.format.unit_roundoff(self.rounding)

    def element_unit_roundoff(self) -> Fraction:
        """u_E of NVFP4-GEMM-5: the element dtype's 2^-p (0 without the elements placement)."""
        if self.element_format is None:
            return Fraction(0)
        return self.element_format.unit_roundoff("nearest")

    def describe(self) -> str:
        fmt = self.format
        text = (f"{fmt.short} accumulator ({'round to nearest' if self.rounding == 'nearest' else 'faithful rounding'}, "
                f"any order{'' if not self.narrow else ', element products'})")
        if self.global_scales == "accumulator":
            return text + "; global scales on the fp32 accumulator"
        if self.global_scales == "output":
            return text + "; global scales after rounding to the output dtype, in it"
        return (text + f"; global scales folded into {self.element_format.short} elements "
                f"(at most {self.element_roundings} rounding"
                f"{'s' if self.element_roundings > 1 else ''} each)")

    def as_json(self) -> dict:
        fields = asdict(self)
        if self.global_scales != "elements":
            del fields["element_dtype"], fields["element_roundings"]
        return fields


PRESETS = {
    "fp32": GemmModel(),
    "fp32-faithful": GemmModel(rounding="faithful"),
    "fp16": GemmModel(accumulator="float16"),
    "fp16-faithful": GemmModel(accumulator="float16", rounding="faithful"),
    "bf16": GemmModel(accumulator="bfloat16"),
    "bf16-faithful": GemmModel(accumulator="bfloat16", rounding="faithful"),
}


# ------------------------------------------------------------------------------------------
# The operands, as far as the bound needs them
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OperandProfile:
    """What NVFP4-GEMM-4 reads of one operand's elements as the matmul multiplies them: the
    largest odd part of a non-zero element's significand (its bits bound a product's),
    the exponent of its lowest set bit, the least and largest non-zero magnitudes of each row
    (0 where a row is all zero), and the roundings of a folded element (NVFP4-GEMM-5)."""

    max_odd: int
    lowest_bit: int
    smallest: np.ndarray  # (rows,) float64
    largest: np.ndarray  # (rows,) float64
    folded_roundings: int = 0


def _odd_parts(units: np.ndarray) -> tuple[int, int]:
    """(largest odd part, least valuation) of the non-zero integers ``units``."""
    values = np.abs(units[units != 0]).astype(np.int64)
    if values.size == 0:
        return 0, NO_TERMS
    lowest = np.bitwise_and(values, -values)
    return int((values // lowest).max()), int(np.log2(lowest.astype(np.float64)).min())


def _row_extremes(magnitudes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nonzero = magnitudes != 0
    smallest = np.where(nonzero, magnitudes, np.inf).min(axis=1, initial=np.inf)
    return np.where(np.isinf(smallest), 0.0, smallest), magnitudes.max(axis=1, initial=0.0)


def global_factor(a, b, model: GemmModel) -> tuple[int, int]:
    """``(m, e)``: the accumulator holds ``m * 2^e * S`` -- ``gA gB S`` under the elements
    placement (the global scales folded into the elements), ``S`` otherwise."""
    if model.global_scales != "elements":
        return 1, 0
    g_a = exact_parts(float(np.float32(a.global_scale))) if is_nvfp4(a) else (1, 0)
    g_b = exact_parts(float(np.float32(b.global_scale)))
    return g_a[0] * g_b[0], g_a[1] + g_b[1]


def operand_profile(operand, model: GemmModel) -> OperandProfile:
    """The profile of ``operand`` (NVFP4, with its global scale folded in under the elements
    placement, or activations)."""
    if not is_nvfp4(operand):
        x = np.asarray(operand).astype(np.float64)
        fraction, exponent = np.frexp(x)
        significands = np.ldexp(fraction, 24).astype(np.int64)
        max_odd, lowest = _odd_parts(significands)
        if lowest < NO_TERMS:
            lowest = int((_valuation_of(significands) + exponent - 24)[significands != 0].min())
        return OperandProfile(max_odd, lowest, *_row_extremes(np.abs(x)))
    codes, scale_bytes, global_scale = check_nvfp4_operand(operand, "operand")
    units = decoded_units(codes, scale_bytes)
    magnitudes = np.abs(units).astype(np.float64) * 2.0 ** ELEMENT_UNIT_EXPONENT
    max_odd, lowest = _odd_parts(units)
    lowest = lowest + ELEMENT_UNIT_EXPONENT if lowest < NO_TERMS else lowest
    if model.global_scales != "elements":
        return OperandProfile(max_odd, lowest, *_row_extremes(magnitudes))
    g_numerator, g_exponent = exact_parts(float(global_scale))
    g_odd, g_low = _odd_parts(np.array([g_numerator]))
    smallest, largest = _row_extremes(magnitudes * float(global_scale))
    fmt = model.element_format
    odd = max_odd * g_odd
    exact = (odd.bit_length() <= min(fmt.p, FLOAT32.p)
             and largest.max(initial=0) <= fmt.largest
             and smallest[smallest > 0].min(initial=np.inf) >= fmt.smallest_normal)
    return OperandProfile(odd, lowest + g_low + g_exponent, smallest, largest,
                          0 if exact else model.element_roundings)


def _valuation_of(values: np.ndarray) -> np.ndarray:
    lowest = np.bitwise_and(values, -values)
    return np.log2(np.where(values == 0, 1, lowest).astype(np.float64)).astype(np.int64)


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-4: roundings on a path, and the bound
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Accumulation:
    """How a model accumulates one GEMM: ``roundings`` (d of NVFP4-GEMM-4, the most roundings
    in the accumulator's format on the path from a term to the sum), ``element_roundings`` (r
    of NVFP4-GEMM-5, those of the folded elements of both operands), ``products_exact`` (every
    multiplication the model admits is exact in the accumulator), and per output element
    whether an inexact intermediate may be subnormal (``underflow``: outside the bound, not
    judged)."""

    roundings: int
    products_exact: bool
    underflow: np.ndarray  # (M, N) bool
    element_roundings: int = 0


def accumulation(a, b, model: GemmModel) -> Accumulation:
    """d and the exactness of the products for the operands ``a``, ``b`` under ``model``."""
    fmt = model.format
    pa, pb = operand_profile(a, model), operand_profile(b, model)
    largest = np.outer(pa.largest, pb.largest)
    smallest = np.outer(pa.smallest, pb.smallest)
    both_nvfp4 = is_nvfp4(a) and is_nvfp4(b)
    forms = both_nvfp4 or model.global_scales == "elements"  # one product of two elements
    # an activation may first meet part of a decoded element (x * b or x * sB, NVFP4-GEMM-8):
    # such a partial product lies between |x| * 2^-10 and |x| * 2688, its lowest bit no lower
    # than x's - 10
    low = smallest if forms else np.outer(pa.smallest, np.where(pb.smallest > 0, 2.0 ** -10, 0))
    high = largest.max(initial=0.0) * (1.0 if forms else 2688.0)
    lowest_bit = pa.lowest_bit + (pb.lowest_bit if forms else ELEMENT_UNIT_EXPONENT)
    products_exact = bool((pa.max_odd * pb.max_odd).bit_length() <= fmt.p
                          and high <= fmt.largest
                          and lowest_bit >= fmt.emin - fmt.p + 1
                          and not pa.folded_roundings and not pb.folded_roundings)
    multiplications = 0
    if not products_exact:
        # fp32 admits any form, so an activation meets its code and its scale in two
        # multiplications; otherwise a term is one product of two dequantized elements
        multiplications = 1 if forms or model.narrow else 2
    # an activation not exact in a narrower F is converted to it: one more rounding
    conversions = int(not is_nvfp4(a) and model.narrow and not (
        pa.max_odd.bit_length() <= fmt.p and pa.largest.max(initial=0.0) <= fmt.largest
        and pa.lowest_bit >= fmt.emin - fmt.p + 1))
    if conversions:
        products_exact, multiplications = False, 1
    roundings = (int(np.shape(a)[1] if not is_nvfp4(a) else a.codes.shape[1]) - 1
                 + multiplications + conversions)
    # a product below the smallest normal is inexact only if it need not be a multiple of the
    # subnormal spacing (never for NVFP4 x NVFP4: every term is a multiple of 2^-20)
    subnormal_loss = not products_exact and lowest_bit < fmt.emin - fmt.p + 1
    underflow = np.full(largest.shape, subnormal_loss) & (low > 0) & (low < fmt.smallest_normal)
    if model.global_scales == "elements":
        for profile, axis in ((pa, 1), (pb, 0)):
            if profile.folded_roundings:
                tiny = (profile.smallest > 0) & (
                    profile.smallest < model.element_format.smallest_normal)
                underflow |= np.expand_dims(tiny, axis)
    return Accumulation(roundings, products_exact, underflow,
                        pa.folded_roundings + pb.folded_roundings)


def bound_factor(model: GemmModel, roundings: int, element_roundings: int = 0) -> Fraction:
    """``(1 + u)^d (1 + u_E)^r - 1`` of NVFP4-GEMM-4 and -5, rounded up to a multiple of
    2^-BOUND_BITS."""
    exact = ((1 + model.unit_roundoff()) ** roundings
             * (1 + model.element_unit_roundoff()) ** element_roundings - 1)
    return Fraction(math.ceil(exact * 2 ** BOUND_BITS), 2 ** BOUND_BITS)


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-7: the admissible interval of every output element
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Admissible:
    """Per output element (M, N): ``low`` and ``high`` (float64 holding values of the output
    dtype, infinities included): the kernel's output must lie between them (NVFP4-GEMM-7);
    ``exact``: every partial sum of every admitted evaluation is exact, so the accumulator
    holds S itself (``low == high`` unless a global-scale product rounds); ``judged``: False
    where an intermediate may leave the bound's range (subnormal inexact, or overflow of a
    narrow accumulator), with ``reason``; ``accumulator_low`` / ``_high``: the interval of the
    accumulator itself (values of its format); ``bound``: the error bound of NVFP4-GEMM-4,
    float64 rounded up."""

    low: np.ndarray
    high: np.ndarray
    exact: np.ndarray
    judged: np.ndarray
    reason: np.ndarray
    accumulator_low: np.ndarray
    accumulator_high: np.ndarray
    bound: np.ndarray
    model: GemmModel
    out_dtype: str
    roundings: int


def admissible(a, b, out_dtype, model, product: ExactSum | None = None) -> Admissible:
    """The admissible interval of every element of ``a @ b^T`` (NVFP4-GEMM-7)."""
    model = GemmModel.parse(model)
    out = float_format(out_dtype)
    product = product if product is not None else exact_sum(a, b)
    fmt = model.format
    plan = accumulation(a, b, model)
    factor = bound_factor(model, plan.roundings, plan.element_roundings)
    g_a = float(np.float32(a.global_scale)) if is_nvfp4(a) else 1.0
    g_b = float(np.float32(b.global_scale))
    multiplier, shift = global_factor(a, b, model)
    exponent = product.exponent + shift
    scaled_valuation = shift + int(_valuation_of(np.array([multiplier]))[0])
    rows, cols = product.shape
    shape = (rows, cols)
    low, high = np.empty(shape), np.empty(shape)
    acc_low, acc_high, bound = np.empty(shape), np.empty(shape), np.empty(shape)
    exact = np.zeros(shape, bool)
    judged = np.ones(shape, bool)
    reason = np.full(shape, "", dtype=object)
    for i in range(rows):
        for j in range(cols):
            one = accumulator_interval(
                int(product.numerators[i, j]) * multiplier,
                int(product.magnitudes[i, j]) * multiplier, exponent,
                int(product.valuations[i, j]) + scaled_valuation, fmt, factor,
                plan.products_exact)
            exact[i, j], bound[i, j] = one.exact, one.bound
            acc_low[i, j], acc_high[i, j] = one.low, one.high
            if plan.underflow[i, j] and not one.exact:
                judged[i, j] = False
                reason[i, j] = (f"an inexact product may be subnormal in {fmt.short}: the "
                                "bound of NVFP4-GEMM-4 holds without underflow")
            if one.overflow:
                judged[i, j] = False
                reason[i, j] = (f"the {fmt.short} accumulator may overflow: "
                                "(1 + u)^d * sum |t| exceeds its largest finite value")
            low[i, j], high[i, j] = _apply_global_scales(one.low, one.high, g_a, g_b, model, out)
    return Admissible(low, high, exact, judged, reason, acc_low, acc_high, bound, model,
                      out.name, plan.roundings)


@dataclass(frozen=True)
class AccumulatorInterval:
    """What a model admits for one accumulated sum: ``low`` / ``high`` (values of the
    accumulator's format), ``exact`` (every partial sum exact: the sum itself), ``bound`` (the
    error bound, float64), ``overflow`` (an intermediate may overflow: outside the model)."""

    low: float
    high: float
    exact: bool
    bound: float
    overflow: bool


def accumulator_interval(numerator: int, magnitude: int, exponent: int, valuation: int,
                         fmt: FloatFormat, factor: Fraction, products_exact: bool
                         ) -> AccumulatorInterval:
    """The interval of the accumulated value of a sum ``numerator * 2^exponent`` whose terms'
    magnitudes add up to ``magnitude * 2^exponent`` and are all multiples of ``2^valuation``
    (NO_TERMS: every term zero), in ``fmt`` with the bound factor ``(1 + u)^d - 1``
    (NVFP4-GEMM-4, -7)."""
    # NVFP4-GEMM-7: every partial sum is a multiple of the terms' quantum q and at most
    # sum |t| <= 2^p q, so it is exact (and so is every product, when products_exact)
    summable = magnitude == 0 or (
        products_exact and valuation < NO_TERMS
        and magnitude <= 1 << (fmt.p + valuation - exponent)
        and fmt.represents(magnitude, exponent))
    error = 0 if summable else -(-magnitude * factor.numerator // factor.denominator)
    overflow = fmt.round(magnitude + error, exponent, "up") > fmt.largest
    # NVFP4-GEMM-7: the accumulated value is a value of F within the bound
    low = fmt.round(numerator - error, exponent, "up")
    high = fmt.round(numerator + error, exponent, "down")
    if math.isinf(low) or math.isinf(high) or low > high:
        low, high = (fmt.round(numerator - error, exponent, "down"),
                     fmt.round(numerator + error, exponent, "up"))
    return AccumulatorInterval(low, high, summable,
                               math.ldexp(float(error), exponent) if error else 0.0, overflow)


def _placements(g_a: float, g_b: float, model: GemmModel, out: FloatFormat) -> list:
    """Every evaluation from the accumulator to the output the declared placement admits
    (NVFP4-GEMM-5, -5), the spec's first; each is monotone non-decreasing in the accumulator."""
    def f32(v):
        return FLOAT32.round_float(v)

    if model.global_scales == "elements":
        return [lambda x: out.round_float(x)]
    if model.global_scales == "output":
        alpha_out = out.round_float(f32(g_a * g_b))
        return [lambda x: out.round_float(out.round_float(x) * alpha_out)]
    alpha = f32(g_a * g_b)  # the exact product of two fp32 values, rounded once
    return [lambda x: out.round_float(f32(alpha * x)),
            lambda x: out.round_float(f32(f32(g_a * x) * g_b)),
            lambda x: out.round_float(f32(f32(g_b * x) * g_a)),
            lambda x: out.round_float(alpha * x)]  # fused: one rounding, to the output


def _apply_global_scales(lo: float, hi: float, g_a: float, g_b: float, model: GemmModel,
                         out: FloatFormat) -> tuple[float, float]:
    """The output interval from the accumulator's: each evaluation at each end."""
    evaluations = _placements(g_a, g_b, model, out)
    return min(f(lo) for f in evaluations), max(f(hi) for f in evaluations)


def reference_output(a, b, out_dtype, model="fp32",
                     product: ExactSum | None = None) -> np.ndarray:
    """One admissible result under ``model`` (default fp32 with the global scales on the
    accumulator, what the kit's own GEMM returns): the exact sum rounded once to the
    accumulator's format (a fused adder admitted by every model), then the first evaluation of
    the declared placement (NVFP4-GEMM-5) and the output rounding (NVFP4-GEMM-6)."""
    model = GemmModel.parse(model)
    out = float_format(out_dtype)
    product = product if product is not None else exact_sum(a, b)
    g_a = float(np.float32(a.global_scale)) if is_nvfp4(a) else 1.0
    g_b = float(np.float32(b.global_scale))
    multiplier, shift = global_factor(a, b, model)
    values = np.empty(product.shape)
    for (i, j), numerator in np.ndenumerate(product.numerators):
        s = model.format.round(int(numerator) * multiplier, product.exponent + shift)
        values[i, j] = _placements(g_a, g_b, model, out)[0](s)
    return values.astype(out.dtype)
