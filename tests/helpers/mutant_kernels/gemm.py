"""A block-scaled GEMM (docs/spec.md section 10) written without the kit: the fp32 kernel of
tests/helpers/gemm_kernels.py (blocks summed in fp32, the global scales on the accumulator,
scale bytes swizzled) with every fault of the mutation harness as a switch:
``GemmKernel(fault, grade, first, out)`` declares the spec's fp32 model, the first operand
``first`` (nvfp4 or an activation dtype) and the output dtype ``out``. ``fault=None``: none, it
conforms.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from gemm_kernels import E2M1, E4M3, GROUP, Fp32Blocks, to_output, unpack, unswizzle

def round_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """fp32 values rounded to ``bits`` significant bits, to nearest even (an accumulator of
    that width)."""
    values = np.asarray(values, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.abs(values)))
    quantum = np.where(np.isfinite(exponent), 2.0 ** (exponent - bits + 1), 1.0)
    return np.where(values == 0, values, np.round(values / quantum) * quantum).astype(np.float32)


class GemmKernel(Fp32Blocks):
    version = "mutant-gemm 1.0"

    def __init__(self, name="mutant-gemm", fault=None, grade=0, first="nvfp4", out="float32"):
        self.name, self.fault, self.grade = name, fault, grade
        self.gemm_activations = (first,)
        self.gemm_out_dtypes = (out,)
        self.swizzle = {"layout-exchanged": "exchanged", "layout-linear": "linear"}.get(fault,
                                                                                       "right")

    def has(self, fault: str) -> bool:
        return self.fault == fault

    # -- NVFP4-GEMM-2: the operands as read -----------------------------------------------------
    def decode(self, operand, role="b"):
        codes = unpack(np.asarray(operand.packed),
                       self.has("nibbles-both") or self.has(f"nibbles-{role}"))
        scale_bytes = unswizzle(operand.scale_bytes, operand.rows, operand.cols // GROUP,
                                self.swizzle)
        scales = E4M3[scale_bytes]
        blocks = scales.shape[1]
        if self.has("neighbour-block-scale") and role == self.grade and blocks > 1:
            scales = scales[:, np.minimum(np.arange(blocks) + 1, blocks - 1)]
        if self.has("split-k-slice0") and blocks % self.grade == 0 and blocks > self.grade:
            scales = scales[:, np.arange(blocks) % (blocks // self.grade)]
        if self.has("band-scales") and role == "a" and scales.shape[0] > 128:
            rows = np.arange(scales.shape[0])
            scales = scales[np.where(rows >= 128, rows - 128, rows)]
        values = E2M1[codes]
        if self.has("neighbour-block-codes") and role == "b" and blocks > 1:
            order = np.minimum(np.arange(blocks) + 1, blocks - 1)
            values = values.reshape(values.shape[0], blocks, GROUP)[:, order].reshape(
                values.shape)
        return values, scales

    # -- NVFP4-GEMM-3, -4: products and sums ---------------------------------------------------
    def block_values(self, a, b):
        if isinstance(a, np.ndarray) and self.fault in ("activations-rounded",):
            a = a.astype(np.float32).astype(
                ml_dtypes.bfloat16 if self.grade == "bfloat16" else np.float16)
        return super().block_values(a, b)

    def scale_product(self, a_scales, b_scales):
        product = np.outer(a_scales, b_scales)
        if self.has("scale-product-fp16"):  # sA sB formed in fp16: inf above 65504
            with np.errstate(over="ignore"):
                return product.astype(np.float16).astype(np.float32)
        if self.has("scale-product-bits"):  # sA sB kept to grade significant bits
            return round_bits(product, self.grade)
        return product

    def accumulate(self, blocks):
        if self.has("accumulator-bits"):  # the running sum kept to ``grade`` significant bits
            acc = np.zeros_like(blocks[0], dtype=np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                for block in blocks:
                    acc = round_bits(acc.astype(np.float64) + block.astype(np.float64),
                                     self.grade)
            return acc
        if self.has("accumulator-fp16"):
            acc = np.zeros_like(blocks[0], dtype=np.float16)
            with np.errstate(over="ignore", invalid="ignore"):
                for block in blocks:
                    acc = (acc.astype(np.float64) + block.astype(np.float64)).astype(np.float16)
            return acc.astype(np.float32)
        if self.has("dropped-block"):  # one K block left out (the last of every grade-th)
            blocks = blocks[:-1] if len(blocks) > 1 else blocks
        return super().accumulate(blocks)

    # -- NVFP4-GEMM-5, -6: the global scales and the output -------------------------------------
    def scaled(self, acc, g_a, g_b, out_dtype):
        with np.errstate(over="ignore", invalid="ignore"):
            if self.has("alpha-bits"):  # alpha = gA gB kept to grade bits
                alpha = round_bits(np.float32(g_a) * np.float32(g_b), self.grade)
                return to_output((acc * alpha).astype(np.float32), out_dtype)
            if self.has("late-scale"):  # the sum to the output dtype first, then the scales
                y = to_output(acc, out_dtype).astype(np.float32)
                alpha = to_output(np.array([np.float32(g_a) * np.float32(g_b)], np.float32),
                                  out_dtype).astype(np.float32)[0]
                return to_output(y * alpha, out_dtype)
            if self.has("scales-dropped"):  # gB applied, gA left out
                return to_output((acc * np.float32(g_b)).astype(np.float32), out_dtype)
            d32 = (acc * np.float32(np.float32(g_a) * np.float32(g_b))).astype(np.float32)
            if self.has("output-truncated"):
                return to_output(d32, out_dtype, truncate=True)
            if self.has("output-through-fp16") and out_dtype == "bfloat16":
                return d32.astype(np.float16).astype(np.float32).astype(ml_dtypes.bfloat16)
            if self.has("output-saturates") and out_dtype == "float16":
                return np.clip(d32, -65504, 65504).astype(np.float16)
            if self.has("output-nan-zero"):
                out = to_output(d32, out_dtype)
                return np.where(out == 0, np.nan, out).astype(out.dtype)
            return to_output(d32, out_dtype)

    def gemm(self, a, b, *, out_dtype="float32"):
        if self.has("elements-early"):  # the global scales folded into bf16 / fp16 elements
            dtype = ml_dtypes.bfloat16 if self.grade == "bfloat16" else np.float16

            def elements(operand):
                values, scales = self.decode(operand)
                full = values * np.repeat(scales, GROUP, axis=1) * np.float32(operand.global_scale)
                return full.astype(np.float32).astype(dtype).astype(np.float32)
            x = a.astype(np.float32) if isinstance(a, np.ndarray) else elements(a)
            return to_output((x @ elements(b).T).astype(np.float32), out_dtype)
        return super().gemm(a, b, out_dtype=out_dtype)


def create():
    return GemmKernel()
