"""The transform preserves the wgrad GEMM (spec clause NVFP4-RHT-4, docs/spec.md section 12).

``T`` is orthogonal, so rotating both operands of ``wgrad = dY^T X`` along the same blocks of
16 tokens changes nothing in real arithmetic: ``(dY^T T)(X^T T)^T = dY^T T T^T X = dY^T X``.
A kernel is judged on this whatever transform it applies: the GEMM of its two quantized
operands, as a conforming fp32 GEMM may return it (NVFP4-GEMM-4 .. -7, ``accumulation``), must
lie within the quantization bound below of the unrotated product, and within nothing of it for
the identity probe, whose rotated quantization is exact for every transform of the Hadamard
class.

- ``identity_probe``: ``c I`` with ``c / 4 = 2688 / 1024``: every transformed value of a
  Hadamard-class transform (entries +-1/4) is +-2.625, exact in bfloat16, quantized exactly
  (byte 0x7E, code +-6, g = 1024, multiplier 2^-10).
- ``element_bounds``: per element of a kernel's quantized tensor, how far the transformed value
  it quantized may lie from what the codes decode to, if the codes and bytes were rounded by
  the recipe at the kernel's own scales.
- ``quantization_bound``: from those, the most the product of the decoded operands may differ
  from the product of the exact transformed values.
- ``unrotated_product``: ``A B^T`` of the tensors the kernel transforms, exactly.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np

from .constants import GROUP_SIZE
from .dequantize import dequantize
from .e2m1 import E2M1_VALUES
from .e4m3 import SCALE_BYTE_VALUES
from .float_formats import exact_parts

#: The identity probe's value: c / 4 = 2.625 = 2688 / 1024, so g = 1024 and 1/g = 2^-10 exactly.
PROBE_VALUE = 10.5
#: NVFP4-RHT-4: the most a recipe's rounding of v * g / s may lie from the code's magnitude, in
#: units of the scale, below code 6: half the wider gap beside it (0, 0.5 .. 1.5: 1/4; 2, 3:
#: 1/2; 4: 1).
HALF_GAPS = {0.0: 0.25, 0.5: 0.25, 1.0: 0.25, 1.5: 0.25, 2.0: 0.5, 3.0: 0.5, 4.0: 1.0}
#: The next E4M3 value above each scale byte's (0x7E: 448 + its spacing 32).
NEXT_SCALE_VALUES = np.append(SCALE_BYTE_VALUES[1:], 480.0)
#: The relative rounding of the transformed values before quantization, by profile
#: (NVFP4-RHT-2: bfloat16 2^-9, fp32 2^-24), rounded up, with the fp32 steps of the recipe.
PROFILE_SLACK = {"exact": 2.0 ** -8, "fast-math": 2.0 ** -16}
#: The recipe's fp32 arithmetic (the scaled value, the reciprocals, the decode), relative.
ARITHMETIC_SLACK = 2.0 ** -16


def identity_probe(blocks: int = 1) -> np.ndarray:
    """NVFP4-RHT-4: ``c I`` (16 blocks x 16 blocks tokens and features), bfloat16."""
    return (np.eye(16 * blocks) * PROBE_VALUE).astype(ml_dtypes.bfloat16)


def element_bounds(codes, scale_bytes, multiplier, profile: str) -> np.ndarray:
    """float64 (rows, n): for each element, a bound on ``|y - decoded|``, ``y`` the exact
    transformed value, if the kernel rounded ``y`` by the profile and then by the recipe at the
    byte and global scale it returns (``multiplier`` its decode multiplier ``1 / g``). Code
    magnitude ``m`` at scale ``s`` (E4M3 value), global scale ``g``: ``w(m) s / g`` with ``w`` ``HALF_GAPS`` below 6; at 6, ``max(1, 6 (s+ - s) / s)``
    (``s+`` the next E4M3 value: a block whose amax would round the byte up is not this
    byte's); at byte 0x00 every value is below ``6 s+ / g``; then the profile's rounding of
    ``y`` (relative) and the recipe's fp32 steps."""
    codes = np.asarray(codes).astype(np.intp)
    scale_bytes = np.asarray(scale_bytes).astype(np.intp)
    magnitude = np.abs(E2M1_VALUES[codes])
    s = np.repeat(SCALE_BYTE_VALUES[scale_bytes], GROUP_SIZE, axis=1)
    s_next = np.repeat(NEXT_SCALE_VALUES[scale_bytes], GROUP_SIZE, axis=1)
    half_gap = np.vectorize(lambda m: HALF_GAPS.get(float(m), 1.0))(magnitude)
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.where(s > 0, np.maximum(1.0, 6.0 * (s_next - s) / np.where(s > 0, s, 1.0)), 0)
    in_scale = np.where(magnitude == 6.0, top, half_gap) * s
    in_scale = np.where(s == 0, 6.0 * s_next, in_scale)  # NVFP4-RHT-4: byte 0x00
    rounding = in_scale * float(multiplier) * (1 + ARITHMETIC_SLACK)
    decoded = np.abs(dequantize(codes, scale_bytes, multiplier))
    return rounding + PROFILE_SLACK[profile] * (decoded.astype(np.float64) + rounding)


def quantization_bound(a, b, profile: str) -> np.ndarray:
    """float64 (rows of a, rows of b), ``a`` and ``b`` NVFP4 operands (their global scale the
    decode multiplier): ``sum_k e_a |b~| + (|a~| + e_a) e_b``, a bound on
    ``|a~ b~^T - y_a y_b^T|`` (``~`` decoded, ``e`` the element bounds), rounded up."""
    def decoded_and_bound(t):  # t.global_scale: the decode multiplier (NVFP4-GEMM-1)
        decoded = np.abs(dequantize(t.codes, t.scale_bytes, t.global_scale)).astype(np.float64)
        return decoded, element_bounds(t.codes, t.scale_bytes, t.global_scale, profile)

    a_decoded, a_bound = decoded_and_bound(a)
    b_decoded, b_bound = decoded_and_bound(b)
    total = a_bound @ b_decoded.T + (a_decoded + a_bound) @ b_bound.T
    return total * (1 + 2.0 ** -30)  # float64 sums of positive terms: far below this


def _exact_integers(x) -> tuple[np.ndarray, int]:
    """``x`` (finite floats) as Python integers times ``2^exponent``, one exponent."""
    values = np.asarray(x).astype(np.float64)
    parts = [exact_parts(v) for v in values.ravel()]
    low = min((e for n, e in parts if n), default=0)
    integers = [n << (e - low) if n else 0 for n, e in parts]
    return np.array(integers, dtype=object).reshape(values.shape), low


def unrotated_product(a_source, b_source) -> list[list[Fraction]]:
    """NVFP4-RHT-4: ``A B^T`` exactly, ``A`` and ``B`` the tensors the kernel transforms
    (``dY^T`` and ``X^T`` column-wise), both (rows, tokens)."""
    a, a_exponent = _exact_integers(a_source)
    b, b_exponent = _exact_integers(b_source)
    numerators = a.dot(b.T)
    unit = Fraction(2) ** (a_exponent + b_exponent)
    return [[Fraction(int(v)) * unit for v in row] for row in numerators]
