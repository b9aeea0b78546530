"""Two NVFP4 quantizers written as a vendor would write them: from docs/spec.md and
docs/backends.md alone, with numpy and ml_dtypes, importing nothing of hscale. The suite judges
them as it judges any third party (tests/judge/test_vendor_certificates.py).

- ``ExactRTN``: RTN with the spec's exact arithmetic (rational global scale, fp64 quotients that
  the spec shows are exact enough, ties to even); its errors are plain ``ValueError("bad ...")``
  and it takes array-likes (a nested list) as numpy would. It should conform under ``exact``.
- ``Bf16Kernel``: what a GPU kernel does, on the CPU: bfloat16 weights only, rows a multiple of
  128 and columns of 64, scale bytes in the swizzled 128x4 layout, the global scale stored as its
  reciprocal, and fp32 arithmetic throughout (the group scale as ``amax * fp32(1/6) * r``, the
  codes from ``|w| * fp32(1/s)``). It should conform under ``faithful`` with the allowances that
  arithmetic needs: fp32-scale-rounding, reciprocal-multiply and supplied-reciprocal.
- ``EnginesBf16Kernel``: the engines' own recipe applied to a weight (the fast-math recipe of
  activations: the reciprocal 2688 / amax computed directly and stored, no 0x01 floor), fp32
  with flush-to-zero, 448 built in; it declares the magnitudes its arithmetic takes, and
  conforms under ``faithful`` with the allowances one run under ``exact`` lists.
- Three broken variants of the kernel, each with one realistic slip: the 32-row blocks and
  the 4-row-block index exchanged in the swizzle; E2M1 ties rounded away from zero; the
  reciprocal computed in the weight's own dtype.
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import ml_dtypes
import numpy as np

GROUP = 16
E4M3_TOP = 448.0
#: Magnitudes of E2M1 codes 0..7, and the midpoints between neighbours (NVFP4-E2M1-1/-2).
E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
FP32_MIN_NORMAL = 2.0 ** -126


def _e4m3_value(byte: int) -> float:
    """Decode a positive E4M3 (e4m3fn) byte from its bits: exponent bias 7, subnormals below."""
    exponent, mantissa = byte >> 3, byte & 7
    if exponent == 0:
        return mantissa / 8 * 2.0 ** -6
    return (1 + mantissa / 8) * 2.0 ** (exponent - 7)


#: Every non-negative finite E4M3 value, by byte (0x00 .. 0x7E), and the midpoints between
#: neighbours (each exact in fp64: at most 5 significant bits).
E4M3_VALUES = np.array([_e4m3_value(b) for b in range(0x7F)])
E4M3_MIDPOINTS = (E4M3_VALUES[:-1] + E4M3_VALUES[1:]) / 2


def e4m3_byte(x: np.ndarray) -> np.ndarray:
    """Round reals ``x >= 0`` (fp64) to the nearest E4M3 byte, ties to the even byte,
    saturating at 0x7E: count the midpoints below ``x``."""
    below = np.searchsorted(E4M3_MIDPOINTS, x, side="left")  # midpoints strictly below x
    on_midpoint = (below < E4M3_MIDPOINTS.size) & (
        x == E4M3_MIDPOINTS[np.minimum(below, E4M3_MIDPOINTS.size - 1)])
    return np.where(on_midpoint & (below % 2 == 1), below + 1, below).astype(np.uint8)


def e2m1_magnitude(q: np.ndarray, ties_away: bool = False) -> np.ndarray:
    """Magnitude codes 0..7 of ``q = |w| / s``: ties to the even code, unless ``ties_away``."""
    code = np.zeros(q.shape, np.uint8)
    for k, mid in enumerate(E2M1_MIDPOINTS):
        code += (q >= mid) if (k % 2 == 1 or ties_away) else (q > mid)
    return code


def pack(codes: np.ndarray) -> np.ndarray:
    """Two codes per byte, element 2i in the low nibble (NVFP4-PACK-1)."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def signs(weight: np.ndarray) -> np.ndarray:
    return np.where(np.signbit(weight), 0x8, 0x0).astype(np.uint8)


def _real(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, Fraction, np.integer, np.floating)):
        raise ValueError(f"bad {name}")
    return float(value)


def _checked_global_scale(global_scale) -> np.float32:
    value = _real(global_scale, "global_scale")
    if not (np.isfinite(value) and value >= FP32_MIN_NORMAL) or float(np.float32(value)) != value:
        raise ValueError("bad global_scale")
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(6 * E4M3_TOP) * np.float32(value)):
            raise ValueError("bad global_scale")
    return np.float32(value)


def _checked_ceiling(scale_ceiling) -> float:
    value = _real(scale_ceiling, "scale_ceiling")
    if not 0 < value <= E4M3_TOP:
        raise ValueError("bad scale_ceiling")
    return value


def _checked_options(method, init, capabilities):
    if not isinstance(method, str) or method not in capabilities:
        raise ValueError("bad method")
    if not isinstance(init, str) or init != "maxabs":
        raise ValueError("bad init")


def _checked_bf16_tiles(weight) -> np.ndarray:
    """The bf16 kernels' input check: a finite 2-D bfloat16 array of whole 128 x 64 tiles, as
    float32."""
    if not isinstance(weight, np.ndarray) or weight.dtype != ml_dtypes.bfloat16:
        raise TypeError("weight must be a bfloat16 numpy array")
    if weight.ndim != 2 or weight.shape[0] % 128 or weight.shape[1] % 64 or not weight.size:
        raise ValueError("weight must be 2-D with rows a multiple of 128, columns of 64")
    w = weight.astype(np.float32)
    if not np.isfinite(w).all():
        raise ValueError("weight has NaN or Inf")
    return w


def _fp32_nearest(exact: Fraction) -> np.float32:
    """fp32 round-to-nearest-even of an exact positive rational."""
    with np.errstate(over="ignore"):  # an overflow is the caller's check (_too_large)
        guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf))]

    def key(c):
        return abs(Fraction(float(c)) - exact), int(np.float32(c).view(np.uint32)) & 1
    return np.float32(min(candidates, key=key))


def _too_large(global_scale: np.float32) -> bool:
    with np.errstate(over="ignore"):
        return not np.isfinite(np.float32(6 * E4M3_TOP) * global_scale)


class ExactRTN:
    """RTN exactly as the spec states it, written without the reference."""

    name = "vendor-exact-rtn"
    version = "vendor-exact-rtn 1.0"
    capabilities = frozenset({"rtn"})

    def available(self):
        return True, ""

    def quantize(self, weight, hessian_diag=None, *, method="rtn", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        _checked_options(method, init, self.capabilities)
        w = np.asarray(weight)  # array-likes welcome
        if w.dtype == np.float64:  # a nested list of floats: fine if it is float32 data
            if not np.array_equal(w.astype(np.float32).astype(np.float64), w, equal_nan=True):
                raise ValueError("bad weight")
            w = w.astype(np.float32)
        if w.dtype not in (np.float32, np.float16, ml_dtypes.bfloat16):
            raise ValueError("bad weight")
        if w.ndim != 2 or w.size == 0 or w.shape[1] % GROUP:
            raise ValueError("bad weight")
        w = w.astype(np.float64)  # exact: at most 24 significant bits
        if not np.isfinite(w).all():
            raise ValueError("bad weight")
        ceiling = _checked_ceiling(scale_ceiling)
        if global_scale is not None:
            s_g = _checked_global_scale(global_scale)
        else:
            amax = float(np.abs(w).max())
            s_g = np.float32(1.0) if amax == 0 else max(
                _fp32_nearest(Fraction(amax) / (6 * Fraction(ceiling))),
                np.float32(FP32_MIN_NORMAL))
            if _too_large(s_g):
                raise ValueError("bad weight: its global scale overflows")
        rows, cols = w.shape
        groups = np.abs(w).reshape(rows, cols // GROUP, GROUP)
        amax_g = groups.max(axis=2)
        byte = e4m3_byte(amax_g / (6 * float(s_g)))  # an exact-enough fp64 quotient
        byte = np.where((amax_g > 0) & (byte == 0), 1, byte).astype(np.uint8)
        scale = E4M3_VALUES[byte] * float(s_g)  # exact in fp64
        live = scale > 0
        q = groups / np.where(live, scale, 1.0)[:, :, None]
        codes = e2m1_magnitude(q).reshape(rows, cols) | signs(w)
        return SimpleNamespace(packed=pack(codes), scale_bytes=byte,
                               global_scale=np.float32(s_g))


# -- the GPU-style kernel ------------------------------------------------------------------------

def swizzle_offsets(rows: int, scale_cols: int, blocks_exchanged: bool = False) -> np.ndarray:
    """Offset of scale byte (r, k) in the 128x4 layout, by the formula of NVFP4-PACK-3."""
    r = np.arange(rows)[:, None]
    k = np.arange(scale_cols)[None, :]
    tiles_across = -(-scale_cols // 4)
    inner_row, row_block = r % 32, (r % 128) // 32
    if blocks_exchanged:  # the slip: the two row indices of a tile in each other's place
        inner = inner_row * 4 + row_block * 16
    else:
        inner = inner_row * 16 + row_block * 4
    return ((r // 128) * tiles_across + k // 4) * 512 + inner + k % 4


class Bf16Kernel:
    """A bf16 GPU-style NVFP4 RTN kernel: fp32 arithmetic, swizzled scales, reciprocal s_g."""

    name = "vendor-bf16-kernel"
    version = "vendor-bf16-kernel 2.3"
    capabilities = frozenset({"rtn"})
    input_dtypes = ("bfloat16",)
    shape_multiple = (128, 64)
    scale_layout = "swizzled-128x4"
    global_scale_convention = "reciprocal"

    ties_away = False
    blocks_exchanged = False
    reciprocal_in_weight_dtype = False

    def available(self):
        return True, ""

    def quantize(self, weight, hessian_diag=None, *, method="rtn", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        _checked_options(method, init, self.capabilities)
        w = _checked_bf16_tiles(weight)
        ceiling = _checked_ceiling(scale_ceiling)
        one = np.float32(1)
        if global_scale is None:
            amax = np.abs(w).max()
            divisor = 6 * ceiling
            if amax == 0:
                s_g = one
            else:
                s_g = (amax / np.float32(divisor) if float(np.float32(divisor)) == divisor
                       else np.float32(float(amax) / divisor))
                s_g = max(s_g, np.float32(FP32_MIN_NORMAL))
            if _too_large(s_g):
                raise ValueError("weight too large for NVFP4")
            stored = one / s_g
            if self.reciprocal_in_weight_dtype and amax != 0:
                # the slip: r as the weights' dtype computes it, then quantizing with s_g
                stored = np.float32(ml_dtypes.bfloat16(np.float32(divisor) / amax))
            else:
                s_g = one / stored  # what the stored r means is what it quantizes with (GS-4)
        else:
            stored = one / _checked_global_scale(global_scale)
            s_g = one / stored
        reciprocal = one / s_g
        rows, cols = w.shape
        groups = np.abs(w).reshape(rows, cols // GROUP, GROUP)
        amax_g = groups.max(axis=2)
        # Weights times the reciprocal first: |w| * r lies in [0, 6 C], far from fp32's
        # subnormals, whatever the weights' own range.
        with np.errstate(over="ignore"):
            quotient = amax_g * reciprocal * np.float32(1 / 6)
            byte = np.minimum(quotient, np.float32(E4M3_TOP)).astype(ml_dtypes.float8_e4m3fn)
        byte = byte.view(np.uint8)
        byte = np.where((amax_g > 0) & (byte == 0), 1, byte).astype(np.uint8)
        block_scale = E4M3_VALUES[byte].astype(np.float32)
        block_inverse = np.where(byte > 0, one / np.where(byte > 0, block_scale, one),
                                 np.float32(0))
        q = (groups * reciprocal * block_inverse[:, :, None]).astype(np.float32)
        codes = e2m1_magnitude(q, self.ties_away).reshape(rows, cols) | signs(w)
        offsets = swizzle_offsets(rows, cols // GROUP, self.blocks_exchanged)
        swizzled = np.zeros(-(-rows // 128) * 128 * -(-(cols // GROUP) // 4) * 4, np.uint8)
        swizzled[offsets] = byte
        return SimpleNamespace(packed=pack(codes), scale_bytes=swizzled,
                               global_scale=np.float32(stored))


# -- the engines' own recipe for weights ----------------------------------------------------------

def flush(values: np.ndarray) -> np.ndarray:
    """Flush-to-zero: fp32 subnormals become zeros of the same sign (PTX ``.ftz``)."""
    values = np.asarray(values, np.float32)
    return np.where(np.abs(values) < np.float32(FP32_MIN_NORMAL), values * np.float32(0), values)


def rcp(values: np.ndarray) -> np.ndarray:
    """``rcp.approx.ftz.f32``, read as the correctly rounded reciprocal with its flushes: a
    subnormal operand gives +inf, a subnormal result 0."""
    with np.errstate(divide="ignore", over="ignore"):
        return flush(np.float32(1) / flush(values))


class EnginesBf16Kernel:
    """What the engines run to quantize a weight on the GPU (TensorRT-LLM's and FlashInfer's
    ``fp4_quantize(w, global_sf)``, vLLM's ``scaled_fp4_quant``, with the global scale the
    caller computes as ``(448 * 6) / amax`` in fp32): the fast-math recipe of activations applied
    to a weight. The reciprocal ``r = 2688 / amax`` is computed directly and stored, the block
    scale is ``r * (amax_g * rcp(6))`` with no 0x01 floor, the codes come from
    ``w * rcp(e4m3(c) * rcp(r))``, fp32 with flush-to-zero throughout; 448 is built in. The same
    interface as ``Bf16Kernel``: bfloat16, 128 x 64 multiples, swizzled scale bytes."""

    name = "vendor-engines-bf16-kernel"
    version = "vendor-engines-bf16-kernel 1.0"
    capabilities = frozenset({"rtn"})
    input_dtypes = ("bfloat16",)
    shape_multiple = (128, 64)
    scale_layout = "swizzled-128x4"
    global_scale_convention = "reciprocal"
    scale_ceilings = (448.0,)  # 2688 = 6 * 448 is built in
    # fp32 with flush-to-zero: 2688 / amax overflows below amax 7.9e-36, e4m3(c) * s_g flushes to
    # zero below 2^-126 (so s_g from 2^-117 up, the smallest byte being 2^-9), and
    # amax_g * rcp(6) flushes to zero below 6 * 2^-126
    global_scale_range = (2.0 ** -117, 2.0 ** 126)
    group_amax_min = 6 * 2.0 ** -126
    magnitude_reason = ("fp32 arithmetic with flush-to-zero: smaller scales and group maxima "
                        "flush intermediate products to zero, and 2688 / amax overflows")

    def available(self):
        return True, ""

    def quantize(self, weight, hessian_diag=None, *, method="rtn", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        _checked_options(method, init, self.capabilities)
        w = _checked_bf16_tiles(weight)
        one = np.float32(1)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if global_scale is None:
                amax = np.abs(w).max()
                r = one if amax == 0 else np.float32(448 * 6) / amax  # 448 built in
            else:
                r = one / _checked_global_scale(global_scale)
            rows, cols = w.shape
            groups = w.reshape(rows, cols // GROUP, GROUP)
            amax_g = np.abs(groups).max(axis=2)
            block_scale = flush(r * flush(amax_g * rcp(np.float32(6))))
            byte = np.minimum(block_scale, np.float32(E4M3_TOP)).astype(ml_dtypes.float8_e4m3fn)
            byte = byte.view(np.uint8)
            s = E4M3_VALUES[byte].astype(np.float32)
            o = np.where(byte > 0, rcp(flush(s * rcp(r))), np.float32(0))
            q = flush(groups * o[:, :, None])
        codes = e2m1_magnitude(np.abs(q)).reshape(rows, cols) | signs(w)
        offsets = swizzle_offsets(rows, cols // GROUP)
        swizzled = np.zeros(-(-rows // 128) * 128 * -(-(cols // GROUP) // 4) * 4, np.uint8)
        swizzled[offsets] = byte
        return SimpleNamespace(packed=pack(codes), scale_bytes=swizzled,
                               global_scale=np.float32(r))


class EnginesWithoutDomain(EnginesBf16Kernel):
    """The same kernel declaring every magnitude: its degenerate corners are then judged."""

    name = "vendor-engines-bf16-kernel-no-domain"
    global_scale_range = (2.0 ** -126, float(np.finfo(np.float32).max))
    group_amax_min = 0.0
    magnitude_reason = ""


class WrongSwizzle(Bf16Kernel):
    name = "vendor-bf16-wrong-swizzle"
    blocks_exchanged = True


class TiesAway(Bf16Kernel):
    name = "vendor-bf16-ties-away"
    ties_away = True


class Bf16Reciprocal(Bf16Kernel):
    name = "vendor-bf16-reciprocal-in-bf16"
    reciprocal_in_weight_dtype = True


def exact_rtn():
    return ExactRTN()


def bf16_kernel():
    return Bf16Kernel()


def wrong_swizzle():
    return WrongSwizzle()


def ties_away():
    return TiesAway()


def bf16_reciprocal():
    return Bf16Reciprocal()


def engines_bf16_kernel():
    return EnginesBf16Kernel()


def engines_without_domain():
    return EnginesWithoutDomain()
