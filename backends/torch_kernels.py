"""The hot steps of quantization in torch, float64, bit-identical to ``hscale.reference``:
the objective of every group at every candidate scale (HSCALE-OBJ-1 with the E2M1 rounding of
NVFP4-E2M1-2 inside), and the final element encoding (NVFP4-E2M1-2, -3), as eager in-place ops
on reusable buffers; ``torch_walk`` is the same arithmetic as one pure function of a whole block
for ``torch.compile``. Nothing here imports torch at module load.

Exactness, all in float64:

* ``x = |w| / s`` is rounded, but it never crosses or lands on an E2M1 midpoint or on a grid
  point it does not equal. ``|w|`` has at most 24 significant bits, ``s = s_g * ladder[c]`` at
  most 28, and a midpoint or grid point ``m`` at most 3, so ``|w| - m*s`` is either 0 or at least
  one unit of the coarser of the two last places, which is a relative distance of more than
  2^-29 from ``m*s``. The float64 quotient is within 2^-53 (relative) of the exact one, and
  rounding is monotone, so ``fl(x) > m`` iff ``|w|/s > m``, ``fl(x) == m`` iff ``|w|/s == m``.
  Rounding ``fl(x)`` on the E2M1 grid therefore gives the code of the exact quotient, which is
  what the reference's division-free threshold form computes.
* The E2M1 rounding of ``x`` (after ``min(x, 6)``, the saturation) is the classic "add a magic
  constant and subtract it": with ``T = clamp(x, 1, 6)`` and ``C = 2^51 * T`` (exact), the unit
  in the last place of ``C`` is 0.5 for x < 2, 1 for 2 <= x < 4 and 2 for x >= 4, which is the
  E2M1 grid spacing there; ``fl(x + C) - C`` is ``x`` rounded to that spacing, ties to even, and
  the subtraction is exact. The sum stays in C's binade because x is never within 2^-29 of 2 or 4
  without being equal (above). A tie (x exactly a midpoint) has ``T`` with at most 3 significant
  bits, so ``C`` is an even multiple of the spacing and "ties to even" in the addition is "ties to
  the even E2M1 code" (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). (``alpha=2^51``
  in ``add_``/``sub_`` multiplies exactly, so a fused multiply-add there changes nothing.)
* ``d = |w| - q*s``: ``q*s`` is exact (2 x 28 significant bits), so ``addcmul`` (which may or may
  not fuse the multiply into the add) rounds once, exactly like the reference's separate multiply
  and subtract, and ``|w| - |q|s`` is ``-(w - q s)`` when w < 0 (rounding is sign-symmetric), so
  ``d*d`` is the same number. ``d*d`` and ``h*(d*d)`` are separate multiplies (two roundings, as in
  the reference), and ``E`` is summed by adjacent pairs level by level in the same tree
  ``((e0+e1)+(e2+e3))+...``. torch's CPU and CUDA elementwise kernels are one operation per
  call, so nothing else can be contracted.
* E contains no NaN: h >= 0 is finite, d is finite; E may be +inf (h near the float64 maximum).
* Subnormal float64 intermediates (tiny h times a tiny d*d) are computed exactly as long as torch
  is not told to flush denormals (``torch.set_flush_denormal(True)`` would break exactness).
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

from hscale.reference.constants import GROUP_SIZE as GROUP


MAGIC = float(2 ** 51)  # C = 2^51 * clamp(x, 1, 6): ulp(C) is the E2M1 spacing at x
EXPONENT_BITS = 0x7FF0 << 48  # of a float64: sign and mantissa cleared, 2^floor(log2 T) left


def as_tensor(torch, array: np.ndarray):
    """A torch view of a float32 / float16 / ml_dtypes.bfloat16 / float64 numpy array (no copy
    when it is contiguous). A view with a negative stride is copied: numpy calls a reversed
    single row contiguous, torch.from_numpy refuses it."""
    array = np.ascontiguousarray(array)
    if any(stride < 0 for stride in array.strides):
        array = array.copy(order="C")
    with warnings.catch_warnings():  # a read-only array: the kernels only ever read their inputs
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        if array.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(array)


def signed_dtype(torch, float_dtype):
    """The signed integer dtype of the width of ``float_dtype``: its sign bit is the integer's."""
    return {torch.float32: torch.int32, torch.float16: torch.int16,
            torch.bfloat16: torch.int16, torch.float64: torch.int64}[float_dtype]


class Buffers:
    """Reusable float64 work buffers of one thread, grown as needed."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.arrays = {}

    def get(self, name, numel, dtype=None):
        dtype = dtype or self.torch.float64
        b = self.arrays.get(name)
        if b is None or b.numel() < numel or b.dtype != dtype:
            b = self.arrays[name] = self.torch.empty(numel, dtype=dtype, device=self.device)
        return b[:numel]


def eager_objectives(torch, aw_t, scale, h_t, buffers: Buffers, wide: bool = False):
    """E (G, k) for the groups ``aw_t`` = |w|^T (16, G) float64 at the effective scales
    ``scale`` (G, k), weighted by ``h_t`` (16, G) or unweighted (None: h = 1, and 1 * (d*d) is
    d*d). Work layout (16, G, k): the element index outermost, so that the pairwise sum adds
    whole contiguous (G, k) planes and E comes out (G, k) contiguous.

    ``wide``: |w| has up to 53 significant bits (GPTQ's error-compensated weights), not 24.
    Then x can come within 2^-49 of 2 or 4 without equalling it, and ``x + 2^51 T`` would carry
    into the next binade. So the magic constant is taken from T's binade alone,
    ``C = 1.5 * 2^51 * 2^floor(log2 T)`` (T with its mantissa bits cleared): ``C + x`` then stays
    in C's binade for every x of T's binade, its spacing is the E2M1 spacing there, and C is an
    even multiple of it (ties to the even code, as above). The binade of fl(x) is that of |w|/s
    (rounding is monotone; 2 and 4 are floats). The division itself needs no 24-bit bound: with
    ``m*s`` exact in float64 (3 x 28 bits), ``fl(|w|/s) == m`` only when ``|w| == m*s``. A quotient
    that rounds to m is within ``s * ulp(m) / 2`` of ``m*s``; a float ``|w| != m*s`` is at least
    ulp(m*s) from it, which is more (ulp(m*s) / 2 just below a power of two, where the quotient
    at that distance is itself a float, not m). tests/backends/test_gptq_backends.py counts both facts on
    inputs built to break them."""
    x = squared_residuals(torch, aw_t, scale, buffers, wide)
    if h_t is not None:
        x.mul_(h_t.unsqueeze(2))  # h*(d*d)
    return group_sums(torch, x, buffers.get("t", x.numel()).view(x.shape)[0])


def eager_objectives_weighted(torch, aw_t, scale, weightings, buffers: Buffers,
                              wide: bool = False) -> list:
    """``eager_objectives`` of the same groups and scales under each of ``weightings`` (each
    an ``h_t`` or None), the rounding and the residuals computed once: each E (G, k) a new
    tensor, bit for bit what ``eager_objectives`` gives for that weighting (the same
    products, the same sums in the same order)."""
    d2 = squared_residuals(torch, aw_t, scale, buffers, wide)
    out = []
    for count, h_t in enumerate(weightings):
        last = count == len(weightings) - 1
        y = d2 if last else buffers.get("y", d2.numel()).view(d2.shape)
        if h_t is not None:
            torch.mul(d2, h_t.unsqueeze(2), out=y)  # h*(d*d)
        elif not last:
            y.copy_(d2)
        out.append(group_sums(torch, y, torch.empty(d2.shape[1:], dtype=d2.dtype,
                                                    device=d2.device)))
    return out


def squared_residuals(torch, aw_t, scale, buffers: Buffers, wide: bool = False):
    """(16, G, k) ``d*d``, ``d = |w| - q*s`` with q the E2M1 rounding of ``|w|/s``, in the
    thread's buffer ``x`` (``eager_objectives`` says why each step is exact)."""
    G, k = scale.shape
    n = GROUP * G * k
    aw_b = aw_t.unsqueeze(2)  # (16, G, 1)
    scale_b = scale.unsqueeze(0)  # (1, G, k)
    x = buffers.get("x", n).view(GROUP, G, k)
    t = buffers.get("t", n).view(GROUP, G, k)

    torch.div(aw_b, scale_b, out=x)  # x = |w|/s, decisions exact (module docstring)
    x.clamp_max_(6.0)  # saturation: without it x >= 7 would round past 6
    torch.clamp_min(x, 1.0, out=t)  # T = clamp(x, 1, 6)
    if wide:
        t.view(torch.int64).bitwise_and_(EXPONENT_BITS)  # 2^floor(log2 T)
        t.mul_(1.5 * MAGIC)  # C, exact
        x.add_(t).sub_(t)  # q: x rounded to its binade's E2M1 spacing, ties to even
    else:
        x.add_(t, alpha=MAGIC)  # fl(x + 2^51 T): rounds x to the E2M1 spacing, ties to even
        x.sub_(t, alpha=MAGIC)  # exact: x is now q, the E2M1 magnitude
    torch.addcmul(aw_b, x, scale_b, value=-1.0, out=x)  # d = |w| - q*s, q*s exact
    return x.mul_(x)  # d*d


def group_sums(torch, x, out):
    """E (G, k) of the (16, G, k) terms ``x`` (summed in place) into ``out``: the balanced
    pairwise sum over the element axis, adjacent pairs level by level: x[2j] += x[2j+1];
    x[4j] += x[4j+2]; x[8j] += x[8j+4]; E = x[0] + x[8] (HSCALE-OBJ-1's order)."""
    x[0::2].add_(x[1::2])
    x[0::4].add_(x[2::4])
    x[0::8].add_(x[4::8])
    return torch.add(x[0], x[8], out=out)


def eager_encode(torch, w, scale, buffers: Buffers):
    """E2M1 codes (G, 16) uint8 of the groups ``w`` (G, 16, own dtype) at ``scale`` (G,)."""
    G = w.shape[0]
    x = buffers.get("ex", GROUP * G).view(G, GROUP)
    t = buffers.get("et", GROUP * G).view(G, GROUP)
    x.copy_(w).abs_()  # |w|, widened exactly
    x.div_(scale.unsqueeze(1))
    x.clamp_max_(6.0)
    torch.clamp_min(x, 1.0, out=t)
    x.add_(t, alpha=MAGIC)
    x.sub_(t, alpha=MAGIC)  # q in {0, .5, 1, 1.5, 2, 3, 4, 6}, exactly as in the search
    # magnitude code = min(q, 2) + min(q, 5): 2q on 0..2, q + 2 at 3 and 4, 7 at 6.
    torch.clamp_max(x, 2.0, out=t)
    x.clamp_max_(5.0).add_(t)
    codes = buffers.get("codes", GROUP * G, torch.uint8).view(G, GROUP)
    codes.copy_(x)  # exact small integers 0..7
    # NVFP4-E2M1-3: bit 3 is the sign bit of w (-0.0 too): the integer view is negative.
    negative = torch.lt(w.view(signed_dtype(torch, w.dtype)), 0).view(torch.uint8)
    return codes.bitwise_or_(negative.mul_(8))


def block_objectives(torch, w, values, scale, blocks):
    """``E = dw^T B dw`` (HSCALE-BLOCK-1) of groups ``w`` (..., 16) float64 with code values
    ``values`` (..., 16) at effective scales ``scale`` (...), blocks (..., 16, 16) broadcast
    against them: the reference's order of operations as elementwise IEEE float64 ops (no
    matmul, whose summation order is not specified), so the bits are the reference's."""
    d = w - values * scale.unsqueeze(-1)  # HSCALE-OBJ-1: p_j exact, one rounding
    level = blocks * d.unsqueeze(-2)  # a_jk = B_jk d_k
    while level.shape[-1] > 1:  # t_j: adjacent pairs over k
        level = level[..., 0::2] + level[..., 1::2]
    level = d * level[..., 0]  # e_j = d_j t_j
    while level.shape[-1] > 1:  # E: adjacent pairs over j
        level = level[..., 0::2] + level[..., 1::2]
    total = level[..., 0]
    return torch.where(torch.isnan(total), torch.full_like(total, float("inf")), total)
