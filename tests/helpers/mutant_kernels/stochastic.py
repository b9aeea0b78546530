"""A stochastic-rounding quantizer (docs/spec.md section 11), written from the docs without the
kit, with every fault of the mutation harness as a switch: ``StochasticKernel(name, fault,
grade, ...)``. The carry rule, the specials and the byte routings are the vendor kernel's own
(tests/helpers/stochastic_kernels.py: integer arithmetic on the fp32 bits, its faults
``nearest``, ``fmaf-nearest``, ``dropped-carry``, ``biased-byte``, ...); here a fault is graded
by applying it to 1 in ``grade`` elements (a hash of the element's place picks them, so no
cell or byte slot of a structured case is spared by its period), to some bytes of the word, or
to one kind of special. ``fault=None``: the rule itself, which conforms under its declaration.

A scaling kernel (``scaling="exact"``) scales by the exact recipe (NVFP4-ACT-6, the vendor
arithmetic of tests/helpers/activation_kernels.py) and rounds the products stochastically; its
faults reach the scale byte (NVFP4-SR-1).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from activation_kernels import E4M3_TOP, FP32_MAX, ONE, SIX, e4m3_bytes, e4m3_values
from stochastic_kernels import REVERSED, codes, routed_bytes


def chosen(shape, grade: int, salt: int = 0) -> np.ndarray:
    """A boolean mask of about 1 in ``grade`` places of ``shape`` (all for grade 1), picked by
    a multiplicative hash of the flat index."""
    index = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)
    mixed = ((index + np.uint64(salt)) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return (mixed >> np.uint64(12)) % np.uint64(max(grade, 1)) == 0


def exact_recipe(x32: np.ndarray, g) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NVFP4-ACT-6 with the global scale given: (scale bytes, fp32 products, the fp32 SF)."""
    g = np.float32(g)
    rows, n = x32.shape
    blocks = x32.reshape(rows, n // 16, 16)
    amax = np.abs(blocks).max(axis=2)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        sf = amax * (g * (ONE / SIX))
        scale_bytes = e4m3_bytes(np.minimum(sf, E4M3_TOP))
        o = np.minimum(ONE / (e4m3_values(scale_bytes) * (ONE / g)), FP32_MAX)
        products = (blocks * o[:, :, None]).reshape(rows, n).astype(np.float32)
    return scale_bytes, products, sf


class StochasticKernel:
    version = "mutant-stochastic 1.0"
    kinds = frozenset({"stochastic"})

    def __init__(self, name="mutant-stochastic", fault=None, grade=1, routing="straight",
                 declared=None, random_bits="given", scaling="none"):
        self.name, self.fault, self.grade = name, fault, grade
        self.routing = routing
        self.sr_routing = declared or routing
        self.sr_random_bits = random_bits
        self.sr_scaling = scaling

    def available(self):
        return True, ""

    # -- the bytes each element receives -----------------------------------------------------
    def _bytes(self, words) -> np.ndarray:
        words = np.asarray(words, np.uint32)
        if self.fault == "slots-exchanged":  # bytes 1 and 2 of 1 in grade words exchanged
            swapped = ((words & np.uint32(0xFF0000FF)) | ((words >> 8) & np.uint32(0xFF00))
                       | ((words << 8) & np.uint32(0xFF0000)))
            words = np.where(chosen(words.shape, self.grade), swapped, words).astype(np.uint32)
        out = routed_bytes(words, self.routing)
        if self.fault == "unreversed":  # sm103a's bytes without the bit reversal of slots 1, 3
            undone = REVERSED[out]
            out[:, 1::4], out[:, 3::4] = undone[:, 1::4], undone[:, 3::4]
        if self.fault == "slot-repeated":  # element 4k+3 takes element 4k+2's byte
            out[:, 3::4] = out[:, 2::4]
        return out

    def quantize_stochastic(self, x, global_scale=None, random_bits=None, seed=None):
        x = np.asarray(x, np.float32)
        if self.sr_random_bits == "hidden":
            rows, n = x.shape
            stream = 7 if self.fault == "seed-ignored" else seed
            rng = np.random.Generator(np.random.PCG64(stream))
            random_bits = rng.integers(0, 2 ** 32, (rows, n // 4), dtype=np.uint32)
        if random_bits is None:
            raise ValueError("random_bits: this kernel takes the random bits")
        scale_bytes = None
        values = x
        if self.sr_scaling != "none":
            scale_bytes, values, sf = exact_recipe(x, global_scale)
            if self.fault == "byte-stochastic":  # the byte rounded by a coin of the bits
                coin = (np.asarray(random_bits, np.uint32)[:, ::4] & 0xFF) >= 128
                near = e4m3_values(scale_bytes)
                moved = np.where(coin & (near < sf) & (scale_bytes < 0x7E), scale_bytes + 1,
                                 np.where(~coin & (near > sf) & (scale_bytes > 1),
                                          scale_bytes - 1, scale_bytes))
                scale_bytes = np.where(chosen(scale_bytes.shape, self.grade), moved,
                                       scale_bytes).astype(np.uint8)
                g = np.float32(global_scale)
                with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                    o = np.minimum(ONE / (e4m3_values(scale_bytes) * (ONE / g)), FP32_MAX)
                rows, n = x.shape
                values = (x.reshape(rows, n // 16, 16) * o[:, :, None]).reshape(rows, n)
                values = values.astype(np.float32)
        bytes_ = self._bytes(random_bits)
        right = codes(values, bytes_)
        out = right
        if self.fault in ("nearest", "fmaf-nearest", "dropped-carry", "biased-byte",
                          "always-down", "nan-not-saturated"):
            out = np.where(chosen(values.shape, self.grade), codes(values, bytes_, self.fault),
                           right)
        elif self.fault == "zero":
            out = np.zeros_like(right)
        elif self.fault == "zero-sign-exact":  # -0.0 written as +0
            out = np.where((values == 0) & np.signbit(values), 0, right)
        elif self.fault == "zero-sign-rounded":  # a negative that rounds to 0 written as +0
            out = np.where((values != 0) & (right == 8) & chosen(values.shape, self.grade), 0,
                           right)
        elif self.fault == "inf-not-saturated":  # +-Inf as NaN's +6: the sign lost
            out = np.where(np.isinf(values), 7, right)
        elif self.fault == "big-random":  # |v| >= 6 (finite) rounded down to 4 when r < 128
            big = np.isfinite(values) & (np.abs(values) >= 6) & (bytes_ < 128)
            out = np.where(big, (right & 8) | 6, right)
        out = np.asarray(out, np.uint8)
        if scale_bytes is None:
            return {"codes": out}
        return SimpleNamespace(codes=out, scale_bytes=scale_bytes)
