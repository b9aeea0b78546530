"""A quantizer after the 16 x 16 random Hadamard transform (docs/spec.md section 12), written
from the docs without the kit, with every fault of the mutation harness as a switch:
``RhtKernel(name, fault, grade, mask)``. The transform is a float64 matrix product (exact here:
16 terms of bfloat16 values), rounded to bfloat16 by ml_dtypes, quantized by the exact recipe
(the vendor kernel of tests/helpers/activation_kernels.py) with the dynamic global scale of the
transformed amax. A fault is graded by the blocks it reaches (1 in ``grade`` blocks of 16) or
by which sign of the vector it flips. ``fault=None``: the transform itself, which conforms
under its declaration (any declared mask).
"""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np

from activation_kernels import Exact

from .stochastic import chosen

TE_MASK = 0xD7E8


def hadamard16() -> np.ndarray:
    h = np.array([[1.0]])
    while h.shape[0] < 16:
        h = np.vstack([np.hstack([h, h]), np.hstack([h, -h])])
    return h


def transform(blocks: np.ndarray, mask: int) -> np.ndarray:
    return blocks @ matrix(mask)


def matrix(mask: int, fault=None, grade=0) -> np.ndarray:
    """``diag(s) H16 / 4``, or its faults of NVFP4-RHT-4: ``entry-flipped`` (entry (3, grade)
    with the wrong sign: not orthogonal), ``no-quarter`` (the 1/4 left out), ``quarter-ulp``
    (1/4 one fp32 ulp high), ``column-swapped`` (columns 0 and grade exchanged: orthogonal)."""
    signs = np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])
    quarter = {"no-quarter": 1.0, "quarter-ulp": 0.25 * (1 + 2.0 ** -23)}.get(fault, 0.25)
    m = signs[:, None] * hadamard16() * quarter
    if fault == "entry-flipped":
        m[3, grade] = -m[3, grade]
    if fault == "column-swapped":
        m[:, [0, grade]] = m[:, [grade, 0]]
    return m


class RhtKernel:
    version = "mutant-rht 1.0"
    kinds = frozenset({"rht"})
    rht_profile = "exact"
    rht_axis = "columnwise"

    def __init__(self, name="mutant-rht", fault=None, grade=1, mask=TE_MASK, padding="refuse"):
        self.name, self.fault, self.grade = name, fault, grade
        self.rht_sign_mask = mask
        self.rht_padding = padding  # "zeros": pads the tokens to a multiple of 16

    def available(self):
        return True, ""

    def quantize_rht(self, x):
        x = np.asarray(x)
        source = (x if self.fault == "rowwise" else x.T).astype(np.float64)
        if self.rht_padding == "zeros" or self.fault == "pads-silently":  # declared refuse
            mode = "edge" if self.fault == "pads-clamped" else "constant"  # the last token
            source = np.pad(source, ((0, 0), (0, -source.shape[1] % 16)), mode=mode)
        elif source.shape[1] % 16:
            raise ValueError(f"x: {source.shape[1]} tokens, not a multiple of 16")
        rows, n = source.shape
        blocks = source.reshape(rows, n // 16, 16)
        mask = self.rht_sign_mask
        if self.fault == "sign-flipped":  # sign s_grade of the vector flipped
            mask ^= 1 << self.grade
        elif self.fault == "plain":  # no sign vector, declared TE's
            mask = 0
        exact = blocks @ matrix(mask, self.fault, self.grade)
        if self.fault == "signs-on-some-blocks":  # the mask's sign 0 lost on 1 in k blocks
            exact = np.where(chosen(exact.shape[:2], self.grade)[:, :, None],
                             transform(blocks, mask ^ 1), exact)
        if self.fault == "sequency-order":  # the rows of H16 in sequency (Walsh) order
            h = hadamard16()
            order = np.argsort([np.count_nonzero(np.diff(row)) for row in h])
            signs = np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])
            exact = blocks @ (signs[:, None] * h[order] / 4)
        rounded = exact.astype(ml_dtypes.bfloat16).astype(np.float64)
        if self.fault == "no-bf16":  # the fp32 products kept on 1 in k blocks
            kept = exact.astype(np.float32).astype(np.float64)
            rounded = np.where(chosen(exact.shape[:2], self.grade)[:, :, None], kept, rounded)
        if self.fault == "bf16-truncated":  # rounded toward zero to bfloat16 on 1 in k blocks
            f32 = exact.astype(np.float32)
            cut = (f32.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
            rounded = np.where(chosen(exact.shape[:2], self.grade)[:, :, None],
                               cut.astype(np.float64), rounded)
        y = rounded.reshape(rows, n).astype(np.float32)
        g = None
        if self.fault == "amax-before":  # the global amax of the input, not the transformed
            g = np.float32(448 * 6) / np.float32(np.abs(np.asarray(x, np.float32)).max())
        elif self.fault == "amax-unrounded":  # the amax of the fp32 transform, before bf16
            amax = np.float32(np.abs(exact.astype(np.float32)).max())
            g = np.float32(448 * 6) / amax
        result = Exact().quantize_activations(y, g)
        return SimpleNamespace(codes=result.codes, scale_bytes=result.scale_bytes,
                               global_scale=result.global_scale)
