"""Exact constructions of GEMM operands for the hand-written tests and the golden vectors:
NVFP4 tensors from the values they hold, and activations a Q8_0 block holds exactly."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np

from hscale.reference import E2M1_VALUES, SCALE_BYTE_VALUES
from hscale.reference.constants import GROUP_SIZE

from .cases import CaseError
from hscale.reference.gemm import Nvfp4Tensor

from .gemm import Q8_0_BLOCK

#: Code of each E2M1 value (the positive code for +0.0, 0x8 for -0.0).
_CODE_OF = {float(v): c for c, v in enumerate(E2M1_VALUES) if c != 0x8}


def nvfp4(codes, scale_bytes, global_scale=1.0) -> Nvfp4Tensor:
    """An NVFP4 tensor from its codes (rows, K) and row-major scale bytes (rows, K/16)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    scale_bytes = np.ascontiguousarray(np.broadcast_to(
        np.asarray(scale_bytes, dtype=np.uint8), (codes.shape[0], codes.shape[1] // GROUP_SIZE)))
    global_scale = np.float32(global_scale)
    if float(global_scale) != float(np.float64(global_scale)):
        raise CaseError(f"global scale {global_scale!r} is not an fp32 value")
    return Nvfp4Tensor(codes, scale_bytes.copy(), global_scale)


def codes_of(values) -> np.ndarray:
    """The E2M1 codes of exact E2M1 values (``-0.0`` gives 0x8); CaseError for any other."""
    values = np.asarray(values, dtype=np.float64)
    codes = np.zeros(values.shape, np.uint8)
    for index, value in np.ndenumerate(values):
        if float(value) not in _CODE_OF:
            raise CaseError(f"construction: {float(value)!r} at {list(index)} is not an E2M1 "
                            "value")
        codes[index] = 0x8 if value == 0 and np.signbit(value) else _CODE_OF[float(value)]
    return codes


def from_values(values, scale_bytes, global_scale=1.0) -> Nvfp4Tensor:
    """An NVFP4 tensor whose element (r, k) is ``values[r, k] * e4m3(scale byte of its
    block)``: ``values`` are the E2M1 values themselves (rows, K)."""
    return nvfp4(codes_of(values), scale_bytes, global_scale)


def uniform(rows: int, cols: int, value: float, scale_byte: int, global_scale=1.0) -> Nvfp4Tensor:
    """Every element the E2M1 ``value``, every block the same scale byte."""
    return from_values(np.full((rows, cols), value), scale_byte, global_scale)


def scale_value(byte: int) -> float:
    return float(SCALE_BYTE_VALUES[byte])


def random_nvfp4(rng: np.random.Generator, rows: int, cols: int, byte_low: int = 0x01,
                 byte_high: int = 0x7E, global_scale=1.0, zero_fraction: float = 0.0
                 ) -> Nvfp4Tensor:
    """Random codes (every one of the 16) and scale bytes in [byte_low, byte_high]."""
    codes = rng.integers(0, 16, size=(rows, cols), dtype=np.uint8)
    if zero_fraction:
        codes[rng.random((rows, cols)) < zero_fraction] = 0
    scale_bytes = rng.integers(byte_low, byte_high + 1, size=(rows, cols // GROUP_SIZE),
                               dtype=np.uint8)
    return nvfp4(codes, scale_bytes, global_scale)


def q8_0_activations(rng: np.random.Generator, rows: int, cols: int, low_exp: int = -10,
                     high_exp: int = 2, power_of_two: bool = False) -> np.ndarray:
    """float32 activations that ggml's Q8_0 quantizer keeps exactly: each block of 32 is an
    fp16 scale D (a power of two times a few-bit significand; a power of two alone with
    ``power_of_two``, so that bfloat16 and float16 hold the values exactly too) times int8
    values in [-127, 127], one of them +-127 (so ggml's ``amax / 127`` is D itself)."""
    blocks = rows * cols // Q8_0_BLOCK
    q = rng.integers(-127, 128, size=(blocks, Q8_0_BLOCK))
    q[np.arange(blocks), rng.integers(0, Q8_0_BLOCK, size=blocks)] = \
        rng.choice((-127, 127), size=blocks)
    mantissa = 1.0 if power_of_two else rng.integers(8, 16, size=blocks) / 8.0
    scale = mantissa * np.exp2(rng.integers(low_exp, high_exp + 1, size=blocks))
    scale = scale.astype(np.float16).astype(np.float64)
    return (q * scale[:, None]).reshape(rows, cols).astype(np.float32)


def activations(values, dtype="float32") -> np.ndarray:
    """``values`` in ``dtype`` (float32, float16, bfloat16), refusing any that would round."""
    target = {"float32": np.float32, "float16": np.float16,
              "bfloat16": ml_dtypes.bfloat16}[dtype]
    values = np.asarray(values, dtype=np.float64)
    out = values.astype(target)
    if not np.array_equal(out.astype(np.float64), values):
        raise CaseError(f"construction: activations not exact in {dtype}")
    return out


# ------------------------------------------------------------------------------------------
# A dot product with chosen block values: the order-sensitive and cancellation cases
# ------------------------------------------------------------------------------------------

#: Each magnitude of a product of two E2M1 values, with one pair of values giving it.
_PRODUCTS = sorted({abs(x * y): (x, y) for x in E2M1_VALUES[:8] for y in E2M1_VALUES[:8]
                    if x * y}.items(), reverse=True)
_LADDER_BYTES = tuple(range(0x01, 0x7F))


def _block_pairs(value: Fraction) -> tuple[list[float], list[float]] | None:
    """Up to 16 pairs (a, b) of E2M1 values whose products sum to ``value`` (a multiple of
    1/4, |value| <= 576), greedily from the largest product; None when 16 do not suffice."""
    remaining, sign = abs(value), (1 if value >= 0 else -1)
    a_values, b_values = [], []
    for product, (x, y) in _PRODUCTS:
        while remaining >= Fraction(product) and len(a_values) < GROUP_SIZE:
            remaining -= Fraction(product)
            a_values.append(sign * float(x))
            b_values.append(float(y))
    if remaining:
        return None
    pad = GROUP_SIZE - len(a_values)
    return a_values + [0.0] * pad, b_values + [0.0] * pad


def block_values_pair(values, prefer=(0x38,)) -> tuple[Nvfp4Tensor, Nvfp4Tensor]:
    """One row of A and one of B (K = 16 * len(values)) whose block b contributes exactly
    ``sA sB P_b = values[b]`` (exact rationals or floats): scale bytes are tried from
    ``prefer`` first, then over the ladder, until P = value / (sA sB) is a sum of at most 16
    E2M1 products. CaseError when no pair of scale bytes does."""
    a_rows, b_rows, a_bytes, b_bytes = [], [], [], []
    order = list(prefer) + [b for b in _LADDER_BYTES if b not in prefer]
    for value in values:
        value = Fraction(value)
        found = None
        if value == 0:
            found = ([0.0] * GROUP_SIZE, [0.0] * GROUP_SIZE), 0x38, 0x38
        for byte_a in order:
            if found:
                break
            for byte_b in order:
                p = value / (Fraction(scale_value(byte_a)) * Fraction(scale_value(byte_b)))
                if (p * 4).denominator != 1 or abs(p) > 576:
                    continue
                pairs = _block_pairs(p)
                if pairs:
                    found = pairs, byte_a, byte_b
                    break
        if not found:
            raise CaseError(f"construction: no scale bytes give a block value {value}")
        (a_vals, b_vals), byte_a, byte_b = found
        a_rows += a_vals
        b_rows += b_vals
        a_bytes.append(byte_a)
        b_bytes.append(byte_b)
    return (from_values([a_rows], [a_bytes]), from_values([b_rows], [b_bytes]))
