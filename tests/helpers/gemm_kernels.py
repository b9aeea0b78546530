"""Block-scaled NVFP4 GEMMs written as a vendor would write them: from docs/spec.md section 10
and docs/backends.md alone, with numpy and ml_dtypes, importing nothing of hscale. The suite
judges them as any third party (tests/judge/test_gemm_certificates.py).

Three kernels, each conforming under the accumulation model it declares:

- ``fp32_blocks``: the tensor-core way on the CPU. Scale bytes in the swizzled 128x4 layout;
  each 16-element block's code products summed in fp32 (exact), times fp32(sA * sB) (exact),
  the block values added in fp32 in a scrambled order, ``fp32(fp32(gA gB) * acc)``, the output
  cast. Also takes bfloat16 activations (weight-only). Declares ``fp32``.
- ``fp16_gemv``: CUTLASS's FP4 GEMV example's way: every element dequantized to fp16, each
  product rounded to fp16, accumulated in fp16 left to right. Declares ``fp16``.
- ``late_scale``: torchao's way: the fp32 sum rounded to bfloat16 first, then multiplied by
  ``bf16(fp32(gA gB))`` in bfloat16. Declares the ``output`` placement of the global scales.

And ``fp32_blocks`` with one slip each (each declares what ``fp32_blocks`` declares):
``fp16_accumulation`` (the running sum kept in fp16), ``wrong_swizzle`` (a tile's 32-row blocks
and 4-row-block index exchanged), ``scale_read_linear`` (the swizzled buffer read as row-major),
``nibble_flipped`` (element 2k taken from the high nibble), ``scale_after_bf16`` (torchao's order
while declaring the spec's), ``output_truncated`` (the output cast toward zero),
``crossed_scales`` (A's block scales used for both operands), ``scales_in_bf16_elements`` (the
global scales folded into bfloat16 elements, torchao's weight-only way, while declaring the
spec's placement).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

GROUP = 16
#: E2M1 values of codes 0x0..0xF (bit 3 the sign).
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def _e4m3(byte: int) -> float:
    """A non-negative E4M3 (e4m3fn) byte from its bits: bias 7, subnormals below 2^-6."""
    exponent, mantissa = byte >> 3, byte & 7
    if exponent == 0:
        return mantissa / 8 * 2.0 ** -6
    return (1 + mantissa / 8) * 2.0 ** (exponent - 7)


E4M3 = np.array([_e4m3(b) for b in range(0x7F)])


def unpack(packed: np.ndarray, flipped: bool = False) -> np.ndarray:
    """Codes from bytes: element 2k in the low nibble (the other way round when flipped)."""
    low, high = packed & 0x0F, packed >> 4
    codes = np.empty((packed.shape[0], 2 * packed.shape[1]), np.uint8)
    codes[:, 0::2], codes[:, 1::2] = (high, low) if flipped else (low, high)
    return codes


def unswizzle(buffer: np.ndarray, rows: int, cols: int, how: str = "right") -> np.ndarray:
    """Scale byte (r, k) of a 128x4-tiled buffer: offset ((r // 128) * ceil(cols / 4) + k // 4)
    * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + k % 4; ``exchanged`` swaps the two row
    indices of a tile, ``linear`` reads the buffer as if it were row-major."""
    r = np.arange(rows)[:, None]
    k = np.arange(cols)[None, :]
    if how == "linear":
        offsets = r * cols + k
    else:
        inner = (r % 32) * 16 + ((r % 128) // 32) * 4
        if how == "exchanged":
            inner = (r % 32) * 4 + ((r % 128) // 32) * 16
        offsets = ((r // 128) * -(-cols // 4) + k // 4) * 512 + inner + k % 4
    flat = np.asarray(buffer, dtype=np.uint8).reshape(-1)
    return flat[np.minimum(offsets, flat.size - 1)]


def to_output(d32: np.ndarray, out_dtype: str, truncate: bool = False) -> np.ndarray:
    """fp32 values to the output dtype, round to nearest even (from fp32 both casts round
    once), or toward zero."""
    d32 = d32.astype(np.float32)
    if out_dtype == "float32":
        return d32
    if out_dtype == "bfloat16":
        if truncate:  # drop the low 16 bits of the fp32 pattern
            return (d32.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(
                ml_dtypes.bfloat16)
        return d32.astype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore"):
        out = d32.astype(np.float16)
    if truncate:
        over = np.abs(out.astype(np.float64)) > np.abs(d32.astype(np.float64))
        out[over] = np.nextafter(out[over], np.float16(0))
    return out


class Fp32Blocks:
    name = "gemm-fp32-blocks"
    version = "gemm-fp32-blocks 1.0"
    kinds = frozenset({"gemm"})
    gemm_model = "fp32"
    gemm_out_dtypes = ("float32", "bfloat16", "float16")
    gemm_activations = ("nvfp4", "bfloat16")
    gemm_scale_layout = "swizzled-128x4"

    swizzle = "right"
    flipped = False

    def available(self):
        return True, ""

    def decode(self, operand, role: str = "b"):
        """(values of the codes, per-block scales) of an operand (``role``: "a" or "b")."""
        codes = unpack(np.asarray(operand.packed), self.flipped)
        scale_bytes = unswizzle(operand.scale_bytes, operand.rows, operand.cols // GROUP,
                                self.swizzle)
        return E2M1[codes], E4M3[scale_bytes]

    def block_values(self, a, b) -> list[np.ndarray]:
        """For each block, fp32 (M, N): sA sB times the block's code-product sum, both exact."""
        b_values, b_scales = self.decode(b)
        if isinstance(a, np.ndarray):  # weight-only: activations times the decoded weight
            x = a.astype(np.float32)
            return [(x[:, k:k + GROUP] @ (b_values[:, k:k + GROUP]
                                          * b_scales[:, k // GROUP, None]).T).astype(np.float32)
                    for k in range(0, x.shape[1], GROUP)]
        a_values, a_scales = self.decode(a, "a")
        blocks = []
        for i in range(a_values.shape[1] // GROUP):
            part = slice(GROUP * i, GROUP * (i + 1))
            p = (a_values[:, part] @ b_values[:, part].T).astype(np.float32)  # exact: quarters
            s = self.scale_product(a_scales[:, i], self.other_scales(a_scales, b_scales)[:, i])
            blocks.append((p * s.astype(np.float32)).astype(np.float32))
        return blocks

    def scale_product(self, a_scales, b_scales):
        """sA sB of one block, (M, N): exact in fp32 (NVFP4-GEMM-3)."""
        return np.outer(a_scales, b_scales)

    def other_scales(self, a_scales, b_scales):
        return b_scales

    def accumulate(self, blocks: list[np.ndarray]) -> np.ndarray:
        """fp32 additions in a scrambled order (any order is the fp32 model's)."""
        order = np.random.default_rng(len(blocks)).permutation(len(blocks))
        acc = np.zeros_like(blocks[0], dtype=np.float32)
        for i in order:
            acc = (acc + blocks[i]).astype(np.float32)
        return acc

    def scaled(self, acc, g_a, g_b, out_dtype):
        alpha = np.float32(np.float32(g_a) * np.float32(g_b))
        return to_output((acc * alpha).astype(np.float32), out_dtype)

    def gemm(self, a, b, *, out_dtype="float32"):
        g_a = np.float32(1.0) if isinstance(a, np.ndarray) else np.float32(a.global_scale)
        acc = self.accumulate(self.block_values(a, b))
        return self.scaled(acc, g_a, np.float32(b.global_scale), out_dtype)


class Fp16Gemv:
    """Every element dequantized to fp16 (exact), each product and every running sum rounded
    to fp16 (float64 holds them exactly, numpy's float64 -> float16 cast rounds once)."""

    name = "gemm-fp16-gemv"
    version = "gemm-fp16-gemv 1.0"
    kinds = frozenset({"gemm"})
    gemm_model = "fp16"
    gemm_out_dtypes = ("float32", "float16")
    gemm_activations = ("nvfp4",)
    gemm_scale_layout = "row-major"

    def available(self):
        return True, ""

    def gemm(self, a, b, *, out_dtype="float32"):
        def elements(operand):
            codes = unpack(np.asarray(operand.packed))
            scales = np.repeat(E4M3[np.asarray(operand.scale_bytes)], GROUP, axis=1)
            return (E2M1[codes] * scales).astype(np.float16)

        x, w = elements(a).astype(np.float64), elements(b).astype(np.float64)
        acc = np.zeros((x.shape[0], w.shape[0]), np.float16)
        with np.errstate(over="ignore", invalid="ignore"):
            for k in range(x.shape[1]):
                product = np.outer(x[:, k], w[:, k]).astype(np.float16)
                acc = (acc.astype(np.float64) + product.astype(np.float64)).astype(np.float16)
            alpha = np.float32(np.float32(a.global_scale) * np.float32(b.global_scale))
            return to_output((acc.astype(np.float32) * alpha).astype(np.float32), out_dtype)


class LateScale(Fp32Blocks):
    name = "gemm-late-scale"
    version = "gemm-late-scale 1.0"
    gemm_model = {"global_scales": "output"}
    gemm_out_dtypes = ("bfloat16",)
    gemm_activations = ("nvfp4",)

    def scaled(self, acc, g_a, g_b, out_dtype):
        """The sum rounded to the output dtype, times fp32(gA gB) rounded to it, rounded to it
        (a product of two bfloat16 or float16 values is exact in fp32)."""
        y = to_output(acc, out_dtype)
        alpha = to_output(np.array([np.float32(g_a) * np.float32(g_b)], np.float32), out_dtype)
        return to_output(y.astype(np.float32) * alpha.astype(np.float32)[0], out_dtype)


# -- fp32_blocks with one slip -------------------------------------------------------------

class Fp16Accumulation(Fp32Blocks):
    name = "gemm-slip-fp16-accumulation"

    def accumulate(self, blocks):
        acc = np.zeros_like(blocks[0], dtype=np.float16)
        with np.errstate(over="ignore", invalid="ignore"):
            for block in blocks:
                acc = (acc.astype(np.float64) + block.astype(np.float64)).astype(np.float16)
        return acc.astype(np.float32)


class WrongSwizzle(Fp32Blocks):
    name = "gemm-slip-wrong-swizzle"
    swizzle = "exchanged"


class ScaleReadLinear(Fp32Blocks):
    name = "gemm-slip-scale-read-linear"
    swizzle = "linear"


class NibbleFlipped(Fp32Blocks):
    name = "gemm-slip-nibble-flipped"
    flipped = True


class ScaleAfterBf16(Fp32Blocks):
    name = "gemm-slip-scale-after-bf16"
    scaled = LateScale.scaled


class OutputTruncated(Fp32Blocks):
    name = "gemm-slip-output-truncated"

    def scaled(self, acc, g_a, g_b, out_dtype):
        alpha = np.float32(np.float32(g_a) * np.float32(g_b))
        return to_output((acc * alpha).astype(np.float32), out_dtype, truncate=True)


class CrossedScales(Fp32Blocks):
    name = "gemm-slip-crossed-scales"

    def other_scales(self, a_scales, b_scales):
        return a_scales[:1].repeat(b_scales.shape[0], axis=0) if a_scales.shape[1] else b_scales


class ScalesInBf16Elements(Fp32Blocks):
    """torchao's weight-only way while declaring the spec's placement: every element
    dequantized with its global scale folded in and rounded to bfloat16 (lossy), the products
    summed in fp32 (NVFP4-GEMM-5)."""
    name = "gemm-slip-scales-in-bf16-elements"

    def gemm(self, a, b, *, out_dtype="float32"):
        def elements(operand):
            values, scales = self.decode(operand)
            full = values * np.repeat(scales, GROUP, axis=1) * np.float32(operand.global_scale)
            return full.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)

        x = a.astype(np.float32) if isinstance(a, np.ndarray) else elements(a)
        return to_output((x @ elements(b).T).astype(np.float32), out_dtype)


# -- fp32_blocks with a slip of its scale bookkeeping (vectors/level0/gemm_bookkeeping.json) ----

#: E4M3 values by byte, 0x7F (NaN) included: what a kernel reading stale bytes multiplies by.
E4M3_WITH_NAN = np.append(E4M3, np.nan)


class SplitKSlice0Scales(Fp32Blocks):
    """CUTLASS #3615: K split into ``slices`` slices, every slice applying slice 0's scales."""
    name = "gemm-slip-split-k-slice0-scales"
    slices = 2

    def decode(self, operand, role="b"):
        values, scales = super().decode(operand, role)
        blocks = scales.shape[1]
        if blocks % self.slices == 0 and blocks > self.slices:
            scales = scales[:, np.arange(blocks) % (blocks // self.slices)]
        return values, scales


class LaterWaveEarlierAScales(Fp32Blocks):
    """CUTLASS #3596: the rows of each later 128-row M wave use the previous wave's A scales."""
    name = "gemm-slip-later-wave-earlier-a-scales"

    def decode(self, operand, role="b"):
        values, scales = super().decode(operand, role)
        if role == "a" and scales.shape[0] > 128:
            rows = np.arange(scales.shape[0])
            scales = scales[np.where(rows >= 128, rows - 128, rows)]
        return values, scales


class PaddedK(Fp32Blocks):
    """vLLM #48898: K rounded up to a multiple of ``multiple`` (32: CUTLASS's alignment), the
    blocks beyond K given zero codes and the scale bytes the 128x4 layout's padding holds
    (stale memory: 0x7F is NaN)."""
    name = "gemm-slip-padded-k32"
    multiple = 32

    def decode(self, operand, role="b"):
        values, _ = super().decode(operand, role)
        cols = -(-operand.cols // self.multiple) * self.multiple
        scale_bytes = unswizzle(operand.scale_bytes, operand.rows, cols // GROUP, self.swizzle)
        values = np.pad(values, ((0, 0), (0, cols - operand.cols)))
        return values, E4M3_WITH_NAN[scale_bytes]


class WholeMmaSteps(PaddedK):
    """FlashInfer #4090: K taken in whole MMA steps of 64, a small K's missing blocks read from
    the 128x4 layout's padding."""
    name = "gemm-slip-whole-mma-steps"
    multiple = 64


def fp32_blocks():
    return Fp32Blocks()


def fp16_gemv():
    return Fp16Gemv()


def late_scale():
    return LateScale()


def fp16_accumulation():
    return Fp16Accumulation()


def wrong_swizzle():
    return WrongSwizzle()


def scale_read_linear():
    return ScaleReadLinear()


def nibble_flipped():
    return NibbleFlipped()


def scale_after_bf16():
    return ScaleAfterBf16()


def output_truncated():
    return OutputTruncated()


def crossed_scales():
    return CrossedScales()


def scales_in_bf16_elements():
    return ScalesInBf16Elements()


def split_k_slice0_scales():
    return SplitKSlice0Scales()


def later_wave_earlier_a_scales():
    return LaterWaveEarlierAScales()


def padded_k32():
    return PaddedK()


def whole_mma_steps():
    return WholeMmaSteps()
