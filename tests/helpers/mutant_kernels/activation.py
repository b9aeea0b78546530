"""A run-time activation quantizer of each recipe (docs/spec.md section 8), written from the
docs without the kit, with every fault of the mutation harness as a switch:
``ActivationKernel(recipe, fault, grade, dtype)``. The formats (E4M3 and E2M1 roundings, the
packing, the 128x4 layout) are the vendor kernels' own (tests/helpers/activation_kernels.py);
the recipes' arithmetic is here, one fp32 operation at a time, so that a fault replaces one of
them. ``fault=None``: the recipe itself, which conforms under its declaration.
"""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np

from activation_kernels import (E4M3_TINY, E4M3_TOP, FP32_MAX, ONE, SIX, e2m1_codes, e4m3_bytes,
                                e4m3_values, groups, pack, swizzle_128x4)

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def far(v, k: int, up: bool) -> np.ndarray:
    """The k-th fp32 value above (``up``) or below 1/v (k = 1: the neighbour, within the one ulp
    PTX states for rcp.approx; k = 2: one fp32 value further)."""
    v = np.asarray(v, np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        nearest = (ONE / v).astype(np.float32)
        exact = 1.0 / v.astype(np.float64)
    toward = np.float32(np.inf) if up else np.float32(0)
    first = np.where((nearest.astype(np.float64) >= exact) if up else
                     (nearest.astype(np.float64) <= exact), nearest,
                     np.nextafter(nearest, toward)).astype(np.float32)
    for _ in range(k - 1):
        first = np.nextafter(first, toward)
    return first


def swizzle_8x4(scale_bytes: np.ndarray) -> np.ndarray:
    """FlashInfer's 8x4 layout (NVFP4-ACT-10): offset ((r // 8) ceil(n / 64) + k // 4) 32 +
    (r % 8) 4 + k % 4, rows padded to 8, columns to 4, padding 0."""
    rows, cols = scale_bytes.shape
    r, k = np.indices((rows, cols))
    offset = ((r // 8) * -(-cols // 4) + k // 4) * 32 + (r % 8) * 4 + k % 4
    out = np.zeros(-(-rows // 8) * 8 * -(-cols // 4) * 4, np.uint8)
    out[offset] = scale_bytes
    return out


class ActivationKernel:
    version = "mutant-activation 1.0"
    kinds = frozenset({"activation"})

    def __init__(self, name="mutant-activation", recipe="fast-math", fault=None, grade=0,
                 dtype="bfloat16", layout="swizzled-128x4", modes=("static",)):
        self.name, self.fault, self.grade = name, fault, grade
        self.activation_recipe = recipe
        self.activation_dtypes = (dtype,)
        self.activation_scale_layout = layout
        self.activation_global_scale = modes
        if recipe == "torchao":
            self.activation_scale_convention = "multiplier"

    def available(self):
        return True, ""

    def has(self, fault: str) -> bool:
        return self.fault == fault

    # -- the reciprocals of fast-math (NVFP4-ACT-5: either neighbour of the exact one) ----------
    def rcp(self, v, which: str) -> np.ndarray:
        if self.has(f"rcp-{which}-up"):
            return far(v, self.grade, True)
        if self.has(f"rcp-{which}-down"):
            return far(v, self.grade, False)
        return far(v, 1, which != "g")  # within the stated error: the neighbours

    def divide(self, a, b):
        """An IEEE fp32 division (the exact and torchao recipes); ``division-as-reciprocal``:
        a * fp32(1/b) off by ``grade`` fp32 values."""
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if self.has("division-as-reciprocal"):
                return (np.float32(a) * far(b, self.grade, True)).astype(np.float32)
            return (np.asarray(a, np.float32) / np.asarray(b, np.float32)).astype(np.float32)

    # -- NVFP4-ACT-1: the global scale ---------------------------------------------------------
    def scales(self, x32, given):
        if given is None:
            amax = np.abs(x32).max()
            if self.activation_recipe == "torchao":
                a = ONE if amax == 0 else self.divide(amax, np.float32(2688))
                g = ONE / a
            else:
                g = ONE if amax == 0 else self.divide(np.float32(2688), amax)
                if self.has("dynamic-ulps"):
                    g = np.float32(g * np.float32(1 + self.grade * 2.0 ** -23))
                a = ONE / g
            return np.float32(g), np.float32(a), np.float32(a if self.activation_recipe ==
                                                            "torchao" else g)
        given = np.float32(given)
        if self.has("static-ulps"):  # NVFP4-ACT-1: a static scale not used unchanged
            given = np.float32(given * np.float32(1 + self.grade * 2.0 ** -23))
        if self.activation_recipe == "torchao":
            return ONE / given, given, None
        return given, ONE / given, None

    # -- bytes and codes ----------------------------------------------------------------------
    def saturated(self, sf):
        if self.has("no-saturation"):
            return sf  # cast to float8 without satfinite: NaN from 464 up
        return np.minimum(sf, E4M3_TOP)

    def block_bytes(self, amax, g, a):
        with np.errstate(over="ignore", invalid="ignore"):
            if self.activation_recipe == "fast-math":
                sf = g * (amax * self.rcp(SIX, "six"))
            elif self.activation_recipe == "exact":
                sf = amax * (g * self.divide(ONE, SIX))
            else:
                sf = np.clip(self.divide(self.divide(amax, SIX), a),
                             np.float32(0) if self.has("no-torchao-floor") else E4M3_TINY,
                             E4M3_TOP)
            if self.has("sf-ulps"):  # the block scale off by k fp32 ulps before rounding
                sf = (sf * np.float32(1 + self.grade * 2.0 ** -23)).astype(np.float32)
            byte = e4m3_bytes(self.saturated(sf))
        if self.has("byte-truncated"):
            above = e4m3_values(byte) > sf
            byte = np.where(above & (byte > 0), byte - 1, byte).astype(np.uint8)
        if self.has("byte-floor"):  # the weight rule's 0x01 floor applied to activations
            byte = np.where((amax > 0) & (byte == 0), 1, byte).astype(np.uint8)
        if self.has("zero-group-byte"):
            byte = np.where(amax == 0, 0x38, byte).astype(np.uint8)
        if self.has("wrong-way-fraction"):
            flat = np.arange(byte.size).reshape(byte.shape)
            picked = (flat * 2654435761 % 2 ** 32) < 2 ** 32 / self.grade
            value = e4m3_values(byte)
            other = np.where(sf > value, byte.astype(np.int64) + 1, byte.astype(np.int64) - 1)
            byte = np.where(picked & (amax > 0) & (sf != value) & (sf < 448),
                            np.clip(other, 0, 0x7E), byte).astype(np.uint8)
        return byte

    def encode_factor(self, byte, g, a):
        s = e4m3_values(byte)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.activation_recipe == "fast-math":
                return np.where(s != 0, self.rcp(s * self.rcp(g, "g"), "output"), np.float32(0))
            if self.activation_recipe == "exact":
                decode = self.divide(ONE, g)
                return np.minimum(self.divide(ONE, s * decode), FP32_MAX)
            return self.divide(self.divide(ONE, a), s)

    def quantize_activations(self, x, global_scale=None):
        dtype = DTYPES[self.activation_dtypes[0]]
        if not isinstance(x, np.ndarray) or x.dtype != dtype:
            raise TypeError(f"x must be a numpy array of {np.dtype(dtype).name}")
        if x.ndim != 2 or x.shape[1] % 16:
            raise ValueError("x must be (tokens, n), n a multiple of 16")
        if self.has("input-through-float16") and dtype != np.float16:
            x = x.astype(np.float16)  # NVFP4-ACT-11: the input narrowed first
        x32 = x.astype(np.float32)
        g, a, reported = self.scales(x32, global_scale)
        grouped = groups(x32)
        if self.has("nan-spreads"):  # NVFP4-ACT-9: a row's amax taken over every group
            amax = np.repeat(np.abs(grouped).max(axis=(1, 2))[:, None], grouped.shape[1], 1)
        else:
            amax = np.abs(grouped).max(axis=2)
        byte = self.block_bytes(amax, g, a)
        o = self.encode_factor(byte, g, a)
        with np.errstate(over="ignore", invalid="ignore"):
            products = grouped * o[:, :, None]
            if self.activation_recipe == "torchao":
                products = np.clip(products, -SIX, SIX)
        codes = e2m1_codes(products.reshape(x32.shape), self.has("ties-away"),
                           not self.has("sign-lost"))
        result = SimpleNamespace(packed=pack(codes), scale_bytes=self.layout(byte))
        if reported is not None or "dynamic" in self.activation_global_scale:
            result.global_scale = reported if reported is not None else (
                a if self.activation_recipe == "torchao" else g)
        return result

    def layout(self, byte):
        if self.activation_scale_layout == "row-major":
            return byte
        if self.activation_scale_layout == "swizzled-8x4":
            out = swizzle_8x4(byte)
        else:
            out = swizzle_128x4(byte, self.has("swizzle-exchanged"))
        if self.has("dirty-padding"):
            mask = np.ones(byte.shape, np.uint8)
            marked = swizzle_8x4(mask) if self.activation_scale_layout == "swizzled-8x4" \
                else swizzle_128x4(mask)
            out = np.where(marked == 0, 0x7F, out).astype(np.uint8)
        return out


def create():
    return ActivationKernel()
