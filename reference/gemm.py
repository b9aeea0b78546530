"""The block-scaled NVFP4 GEMM (spec section 10): the exact product of two NVFP4 tensors, or of
activations and an NVFP4 weight, and the rounding of a result to the output dtype.

    D[i, j] = gA * gB * sum_b sA[i, b] * sB[j, b] * sum_{k in block b} a[i, k] * b[j, k]

The operands are NVFP4 tensors as the weight quantizer produces them (any object with
``codes`` (rows, K), ``scale_bytes`` (rows, K/16) row-major and ``global_scale``, such as
``QuantizedWeight``); for the weight-only GEMM (NVFP4-GEMM-8) the first operand is an array of
activations (M, K) in float32, float16 or bfloat16. Nothing here rounds: the sum is kept as an
integer times a power of two (NVFP4-GEMM-3 says which), and ``accumulation.py`` says what a
kernel may return for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

from .constants import GROUP_SIZE, LADDER_LAST_BYTE
from .e2m1 import E2M1_VALUES
from .e4m3 import SCALE_BYTE_VALUES
from .float_formats import FLOAT32, float_format
from .packing import pack_codes, unpack_codes

#: NVFP4-GEMM-3: a decoded element a * s is an integer multiple of 2^-10 (E2M1 values are
#: multiples of 1/2, E4M3 values of 2^-9), and a term a * b * sA * sB of 2^-20.
ELEMENT_UNIT_EXPONENT = -10
TERM_UNIT_EXPONENT = 2 * ELEMENT_UNIT_EXPONENT
#: 2a for each code 0x0..0xF (the doubled E2M1 value is an integer, -12..12).
DOUBLED_CODE_VALUES = (2 * E2M1_VALUES).astype(np.int64)
#: s * 2^9 for each scale byte 0x00..0x7E (the E4M3 value in units of 2^-9, 0..229376).
SCALE_BYTE_UNITS = np.array([int(Fraction(float(v)) * 2 ** 9) for v in SCALE_BYTE_VALUES],
                            dtype=np.int64)
#: The activation dtypes of the weight-only GEMM (NVFP4-GEMM-8).
ACTIVATION_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
#: The valuation of a sum with no non-zero term (it is exactly 0 under any model).
NO_TERMS = 1 << 20


@dataclass(frozen=True)
class ExactSum:
    """``S[i, j] = numerators[i, j] * 2^exponent`` exactly: the sum of the K terms
    ``t_k = a[i, k] * sA[i, k // 16] * b[j, k] * sB[j, k // 16]`` before the global scales
    (NVFP4-GEMM-1; for the weight-only GEMM ``t_k = x[i, k] * b[j, k] * sB[j, k // 16]``,
    NVFP4-GEMM-8). ``magnitudes[i, j] * 2^exponent`` is ``sum_k |t_k|``, the quantity the error
    bound of NVFP4-GEMM-4 is stated in; ``valuations[i, j]`` is the exponent of the largest
    power of two dividing every non-zero term (``NO_TERMS`` when every term is zero), which
    NVFP4-GEMM-7's exactness condition reads. Integer arrays are int64 where the values fit,
    else Python integers (dtype object)."""

    numerators: np.ndarray
    magnitudes: np.ndarray
    exponent: int
    valuations: np.ndarray
    terms: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.numerators.shape

    def value(self, i: int, j: int) -> Fraction:
        """S[i, j] as an exact rational."""
        return Fraction(int(self.numerators[i, j])) * Fraction(2) ** self.exponent

    def magnitude(self, i: int, j: int) -> Fraction:
        return Fraction(int(self.magnitudes[i, j])) * Fraction(2) ** self.exponent


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-1 / -7: the operands
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Nvfp4Tensor:
    """An NVFP4 tensor as stored: ``codes`` uint8 (rows, K), ``scale_bytes`` uint8 (rows, K/16)
    row-major (NVFP4-PACK-2), ``global_scale`` np.float32, the multiplier (NVFP4-GS-1). A GEMM
    reads these three from its operands (a ``QuantizedWeight`` has them too)."""

    codes: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32

    @classmethod
    def from_packed(cls, packed, scale_bytes, global_scale) -> "Nvfp4Tensor":
        """From packed codes (rows, K/2), element 2k in the low nibble (NVFP4-PACK-1)."""
        return cls(unpack_codes(np.asarray(packed, dtype=np.uint8)),
                   np.asarray(scale_bytes, dtype=np.uint8), np.float32(global_scale))

    @property
    def packed(self) -> np.ndarray:
        return pack_codes(self.codes)

    def rows(self, start: int, stop: int) -> "Nvfp4Tensor":
        return Nvfp4Tensor(self.codes[start:stop], self.scale_bytes[start:stop],
                           self.global_scale)


def check_nvfp4_operand(operand, name: str) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """``(codes, scale_bytes, global_scale)`` of an NVFP4 operand, checked (NVFP4-GEMM-1):
    codes uint8 0x0..0xF (rows, K), K a multiple of 16, scale bytes 0x00..0x7E (rows, K/16),
    the global scale a positive normal fp32 multiplier. ValueError naming the operand."""
    missing = [a for a in ("codes", "scale_bytes", "global_scale") if not hasattr(operand, a)]
    if missing:
        raise ValueError(f"{name}: an NVFP4 operand has codes, scale_bytes and global_scale; "
                         f"{type(operand).__name__} lacks {', '.join(missing)} "
                         "(spec NVFP4-GEMM-1)")
    codes = np.asarray(operand.codes)
    scale_bytes = np.asarray(operand.scale_bytes)
    if codes.ndim != 2 or codes.shape[1] % GROUP_SIZE or codes.dtype != np.uint8:
        raise ValueError(f"{name}.codes: uint8 (rows, K) with K a multiple of {GROUP_SIZE}, "
                         f"got {codes.dtype} {codes.shape} (spec NVFP4-GEMM-1)")
    if codes.size and int(codes.max()) > 0xF:
        index = [int(v) for v in np.argwhere(codes > 0xF)[0]]
        raise ValueError(f"{name}.codes{index}: 0x{int(codes[tuple(index)]):X} is not a 4-bit "
                         "code (spec NVFP4-GEMM-1)")
    want = (codes.shape[0], codes.shape[1] // GROUP_SIZE)
    if scale_bytes.shape != want or scale_bytes.dtype != np.uint8:
        raise ValueError(f"{name}.scale_bytes: uint8 {want} row-major, got {scale_bytes.dtype} "
                         f"{scale_bytes.shape} (spec NVFP4-GEMM-1)")
    if scale_bytes.size and int(scale_bytes.max()) > LADDER_LAST_BYTE:
        index = [int(v) for v in np.argwhere(scale_bytes > LADDER_LAST_BYTE)[0]]
        raise ValueError(f"{name}.scale_bytes{index}: 0x{int(scale_bytes[tuple(index)]):02X} is "
                         "not a scale byte 0x00..0x7E (a sign bit or NaN; spec NVFP4-GEMM-1)")
    global_scale = np.float32(operand.global_scale)
    if not (np.isfinite(global_scale) and global_scale >= np.float32(FLOAT32.smallest_normal)
            and float(global_scale) == float(operand.global_scale)):
        raise ValueError(f"{name}.global_scale: {float(operand.global_scale)!r} is not a "
                         "positive normal fp32 multiplier (spec NVFP4-GEMM-1)")
    return codes, scale_bytes, global_scale


def check_activations(x, name: str = "a") -> np.ndarray:
    """The activations of a weight-only GEMM, checked (NVFP4-GEMM-8): a 2-D numpy array of
    float32, float16 or bfloat16, every element finite."""
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"{name}: activations are a 2-D numpy array of float32, float16 or "
                         f"bfloat16, got {getattr(x, 'dtype', type(x).__name__)} "
                         f"{getattr(x, 'shape', '')} (spec NVFP4-GEMM-8)")
    finite = np.isfinite(x.astype(np.float64))
    if not finite.all():
        index = [int(v) for v in np.argwhere(~finite)[0]]
        raise ValueError(f"{name}{index}: {float(x[tuple(index)])!r} is not finite "
                         "(spec NVFP4-GEMM-8)")
    return x


def is_nvfp4(operand) -> bool:
    """An NVFP4 operand (codes, scale bytes, global scale), not an activation array."""
    return not isinstance(operand, np.ndarray)


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-3: every decoded element and every term is an integer multiple of a power of two
# ------------------------------------------------------------------------------------------

def decoded_units(codes: np.ndarray, scale_bytes: np.ndarray) -> np.ndarray:
    """int64 (rows, K): each decoded element ``a * s`` in units of 2^-10, that is
    ``(2a) * (s * 2^9)`` (NVFP4-GEMM-3: |a s| <= 6 * 448 = 2688, so at most 2^22 units)."""
    scale_per_element = np.repeat(SCALE_BYTE_UNITS[scale_bytes.astype(np.intp)], GROUP_SIZE,
                                  axis=1)
    return DOUBLED_CODE_VALUES[codes.astype(np.intp)] * scale_per_element


def _valuations(units: np.ndarray) -> np.ndarray:
    """The 2-adic valuation of each int64 (NO_TERMS for 0)."""
    lowest = np.bitwise_and(units, -units)
    safe = np.where(units == 0, 1, lowest).astype(np.float64)  # powers of two: exact
    return np.where(units == 0, NO_TERMS, np.log2(safe).astype(np.int64))


def _activation_units(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(integer significands, exponents) with ``x = significand * 2^exponent`` exactly (each
    activation dtype has at most 24 significant bits; the trailing zeros every significand
    shares are dropped, so a bfloat16 value keeps its 8 bits and the sums stay in int64)."""
    fraction, exponent = np.frexp(x.astype(np.float64))
    significands = np.ldexp(fraction, 24).astype(np.int64)
    exponents = exponent.astype(np.int64) - 24
    nonzero = significands != 0
    if nonzero.any():
        common = int(_valuations(significands[nonzero]).min())
        significands, exponents = significands >> common, exponents + common
    return significands, exponents


def exact_sum(a, b) -> ExactSum:
    """The exact sums S of ``a @ b^T`` before the global scales (NVFP4-GEMM-1), ``a`` an NVFP4
    operand (M, K) or activations (NVFP4-GEMM-8), ``b`` an NVFP4 operand (N, K)."""
    b_codes, b_bytes, _ = check_nvfp4_operand(b, "b")
    b_units = decoded_units(b_codes, b_bytes)
    if is_nvfp4(a):
        a_codes, a_bytes, _ = check_nvfp4_operand(a, "a")
        a_units, a_valuation, exponent = decoded_units(a_codes, a_bytes), None, \
            2 * ELEMENT_UNIT_EXPONENT
    else:
        x = check_activations(a)
        significands, exponents = _activation_units(x)
        nonzero = significands != 0
        base = int(exponents[nonzero].min()) if nonzero.any() else 0
        shifts = np.where(nonzero, exponents - base, 0)
        a_valuation = np.where(nonzero, _valuations(significands) + exponents, NO_TERMS)
        # (ELEMENT_UNIT_EXPONENT is the b side's: a term is x * (b s), b s in 2^-10 units)
        # int64 holds every sum when sum_k |x_k| * max |b s| (in units) stays below 2^61 (a
        # float64 estimate, far from the edge of int64's 2^63)
        row_sums = (np.abs(significands).astype(np.float64) * np.exp2(shifts)).sum(axis=1)
        wide = float(row_sums.max(initial=0)) * float(np.abs(b_units).max(initial=0)) >= 2.0 ** 61
        if wide:  # Python integers: the activations span too many binades for int64
            a_units = np.vectorize(lambda m, s: int(m) << int(s), otypes=[object])(
                significands, shifts)
        else:
            a_units = significands << shifts
        exponent = base + ELEMENT_UNIT_EXPONENT
    if a_units.shape[1] != b_units.shape[1]:
        raise ValueError(f"a and b: K differs ({a_units.shape[1]} and {b_units.shape[1]}): "
                         "the GEMM contracts the columns of both (spec NVFP4-GEMM-1)")
    numerators = a_units @ b_units.T if a_units.dtype != object else \
        a_units.dot(b_units.T.astype(object))
    magnitudes = np.abs(a_units) @ np.abs(b_units).T if a_units.dtype != object else \
        np.abs(a_units).dot(np.abs(b_units).T.astype(object))
    b_valuation = _shifted(_valuations(b_units), ELEMENT_UNIT_EXPONENT)
    if a_valuation is None:
        a_valuation = _shifted(_valuations(a_units), ELEMENT_UNIT_EXPONENT)
    valuations = _term_valuations(a_valuation, b_valuation)
    return ExactSum(numerators, magnitudes, exponent, valuations, int(a_units.shape[1]))


def _shifted(valuations: np.ndarray, by: int) -> np.ndarray:
    return np.where(valuations >= NO_TERMS, NO_TERMS, valuations + by)


def _term_valuations(a_valuation: np.ndarray, b_valuation: np.ndarray) -> np.ndarray:
    """(M, N): the least valuation of the non-zero terms a_k * b_k of each output element (a
    term's valuation is the sum of its factors'), NO_TERMS where every term is zero. Rows are
    taken a few at a time, so the (rows, N, K) temporary stays small."""
    rows, cols = a_valuation.shape[0], b_valuation.shape[0]
    out = np.empty((rows, cols), dtype=np.int64)
    step = max(1, (1 << 22) // max(1, cols * a_valuation.shape[1]))
    b_zero = b_valuation >= NO_TERMS
    for start in range(0, rows, step):
        a_part = a_valuation[start:start + step]
        terms = a_part[:, None, :] + b_valuation[None, :, :]
        zero = (a_part >= NO_TERMS)[:, None, :] | b_zero[None, :, :]
        out[start:start + step] = np.where(zero, NO_TERMS, terms).min(axis=2, initial=NO_TERMS)
    return out


# ------------------------------------------------------------------------------------------
# NVFP4-GEMM-6: the output dtype
# ------------------------------------------------------------------------------------------

def round_to_output(values: np.ndarray, out_dtype) -> np.ndarray:
    """float64 values (exact) rounded to the output dtype, IEEE round-to-nearest-even with
    overflow to infinity (NVFP4-GEMM-6), as an array of that dtype."""
    fmt = float_format(out_dtype)
    flat = [fmt.round_float(float(v)) for v in np.asarray(values, dtype=np.float64).ravel()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(values)).astype(fmt.dtype)
