"""The ``cupy`` backend: the whole per-group pipeline as one CUDA kernel, one thread per
16-element group, in exact float64.

``FusedQuantizer`` is ``hscale.reference.Quantizer`` with its block loop replaced by one launch
of ``hs_quantize_kernel`` over every group of the layer. Validation, the global scale's rounding
(NVFP4-GS-1, from the tensor's amax taken on the device by ``hs_amax_kernel``) and the window
table (HSCALE-WIN-1 and the priority order of HSCALE-ARGMIN-1) are the reference's own steps;
the kernel takes the window table as data. Per group the kernel does, in the reference's order:

    amax_g, zero group                 NVFP4-ZERO-1
    initial byte (max-abs or 4over6)   NVFP4-INIT-1, NVFP4-INIT-2 (E4M3 rounding NVFP4-E4M3-2)
    the window in priority order       HSCALE-WIN-1 .. HSCALE-ARGMIN-1 (HSCALE-OBJ-1 objective)
    codes at the chosen byte, packed   NVFP4-E2M1-2, NVFP4-E2M1-3, NVFP4-PACK-1

Two ways in:

* ``quantize(weight, h, ...)``: the reference's signature and result (numpy in, numpy out);
* ``quantize_on_device(weight, h, ...)``: a CuPy array (or any ``__cuda_array_interface__``
  object, a torch CUDA tensor for instance) of float32 or float16 in, a ``DeviceResult`` of
  CuPy arrays out, nothing copied to the host but one scalar (the amax). This is what a model
  quantizer on a GPU uses, and what ``hscale.gpu_bench`` times.

Exactness (the same bits as the reference, checked by the conformance suite):

* no float32 arithmetic: the weights are read as bit patterns, |w| is the pattern without its
  sign bit (non-negative floats order as their patterns, so amax_g and the zero test are integer
  operations), its float64 value is built from significand and exponent, and the sign bit of a
  code is the pattern's (NVFP4-E2M1-3, -0.0 too). CuPy compiles every kernel with
  ``-ftz=true`` (``cupy/cuda/compiler.py``, whatever the caller passes), which flushes float32
  subnormals to zero in float32 instructions: a kernel that touched float32 arithmetic would
  take a group of subnormal weights for a zero group (seen on an H100, conformance vectors
  init-min-byte, gs-tiny-amax-raised, deq-subnormal-rounding). float64 is never flushed.
  float16 weights are widened by bits too (``hs_f16_to_f32_bits``), bfloat16 by a shift;
* thresholds ``t_k = m_k * s`` of the E2M1 midpoints m_k (3 significant bits) times the
  effective scale s (at most 28) are exact in float64; ``|w| > t_k`` for an even lower code and
  ``|w| >= t_k`` for an odd one is the reference's tie rule (NVFP4-E2M1-2);
* ``d = |w| - q*s`` as one fused multiply-add: ``q*s`` is exact (2 x 28 bits), so the fused
  and the separate forms round once at the same place; ``|w| - |q|s = -(w - qs)`` for w < 0, the
  same ``d*d``; ``d*d`` and ``h*(d*d)`` are separate roundings and E is the balanced pairwise
  sum ``((e0+e1)+(e2+e3))+...`` of HSCALE-OBJ-1, all as explicit ``__dmul_rn`` / ``__dadd_rn``
  intrinsics, which the compiler never contracts;
* the E4M3 byte of ``amax_g / (top * s_g)`` (NVFP4-INIT-1): ``top * s_g`` is exact, the
  quotient is an IEEE (correctly rounded) division, then ``frexp`` / ``ldexp`` (exact) and
  ``rint`` (round half to even) as in ``hscale.reference.e4m3.encode_e4m3``;
* the search keeps a candidate only when its objective is strictly smaller, scanning the
  window's distinct bytes in priority order: a clipped duplicate has the objective of its first
  occurrence, which the running minimum already does not exceed, so dropping duplicates changes
  no choice (HSCALE-ARGMIN-1).

The kernel source is written once for two compilers: NVRTC (through CuPy), and a host C compiler
with ``-DHSCALE_HOST_HARNESS`` (``-ffp-contract=off``; x86-64 doubles are SSE2, no excess
precision), where the intrinsics become plain operators and ``fma``. ``HostRuntime`` runs the
same ``FusedQuantizer`` with the kernels built by gcc, so the tests check the kernel logic
against the reference on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES
from hscale.reference import SCALE_BYTE_VALUES, Options, QuantizedWeight, Quantizer
from hscale.reference import compute_global_scale, reported_delta, unpack_codes, validation
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, GROUP_SIZE
from hscale.reference.e4m3 import LADDER_LAST_BYTE

GROUP = GROUP_SIZE
THREADS_PER_BLOCK = 128  # 64 to 512 were within 10% of each other on an H100

KERNEL_SOURCE = r"""
// H-Scale NVFP4: one group per thread. See hscale/backends/cupy_backend.py for the exactness
// argument of every step. No float32 arithmetic anywhere: weights are read as their bit patterns
// (CuPy compiles every kernel with -ftz=true, which would flush float32 subnormals to zero).
#ifdef HSCALE_HOST_HARNESS
#include <math.h>
#include <string.h>
#define HS_FN static inline
#define HS_MUL(a, b) ((a) * (b))
#define HS_ADD(a, b) ((a) + (b))
#define HS_DIV(a, b) ((a) / (b))
#define HS_FMA(a, b, c) fma((a), (b), (c))
#else
#define HS_FN __device__ __forceinline__
#define HS_MUL(a, b) __dmul_rn((a), (b))
#define HS_ADD(a, b) __dadd_rn((a), (b))
#define HS_DIV(a, b) __ddiv_rn((a), (b))
#define HS_FMA(a, b, c) __fma_rn((a), (b), (c))
#endif

#define HS_GROUP 16
#define HS_LAST_BYTE 126   // 0x7E, the ladder's largest byte (NVFP4-E4M3-3)
#define HS_SIGN_BITS 0x80000000u

// The exact float64 value of a finite float32 magnitude given by its bits: the 24-bit
// significand (implicit bit included for normals) times 2^(exponent - 150).
HS_FN double hs_magnitude_value(unsigned int bits) {
    int exponent = (int)(bits >> 23);
    unsigned int significand = bits & 0x7fffffu;
    if (exponent) significand |= 0x800000u; else exponent = 1;  // subnormal: 0.m * 2^-126
    return ldexp((double)significand, exponent - 150);  // exact
}

// The float32 bit pattern of a float16 one (IEEE binary16), exactly: float16 subnormals are
// float32 normals; Inf and NaN stay Inf and NaN (the amax pass rejects them).
HS_FN unsigned int hs_f16_to_f32_bits(unsigned int f16_bits) {
    unsigned int sign = (f16_bits & 0x8000u) << 16;
    int exponent = (int)((f16_bits >> 10) & 0x1fu);
    unsigned int mantissa = f16_bits & 0x3ffu;
    if (exponent == 0x1f) return sign | 0x7f800000u | (mantissa << 13);
    if (exponent == 0) {
        if (mantissa == 0) return sign;
        exponent = 1;
        while (!(mantissa & 0x400u)) { mantissa <<= 1; --exponent; }  // normalise
        mantissa &= 0x3ffu;
    }
    return sign | ((unsigned int)(exponent + 112) << 23) | (mantissa << 13);  // bias 15 -> 127
}

// The 7 E2M1 rounding thresholds m_k * s for the midpoints m = .25 .75 1.25 1.75 2.5 3.5 5
// (NVFP4-E2M1-2), exact in float64.
HS_FN void hs_make_thresholds(double s, double* t) {
    t[0] = HS_MUL(0.25, s); t[1] = HS_MUL(0.75, s); t[2] = HS_MUL(1.25, s);
    t[3] = HS_MUL(1.75, s); t[4] = HS_MUL(2.5, s); t[5] = HS_MUL(3.5, s); t[6] = HS_MUL(5.0, s);
}

// Magnitude code 0..7 of |w|: the number of thresholds it passes; a tie above an even code
// stays (>), above an odd one moves up (>=).
HS_FN int hs_magnitude_code(double a, const double* t) {
    return (a > t[0]) + (a >= t[1]) + (a > t[2]) + (a >= t[3])
         + (a > t[4]) + (a >= t[5]) + (a > t[6]);
}

// Twice the E2M1 magnitude, 2q in {0, 1, 2, 3, 4, 6, 8, 12}: the grid steps 0.5 0.5 0.5 0.5 1 1 2
// summed over the thresholds passed (so no table lookup by code).
HS_FN int hs_twice_magnitude(double a, const double* t) {
    return (a > t[0]) + (a >= t[1]) + (a > t[2]) + (a >= t[3])
         + 2 * ((a > t[4]) + (a >= t[5])) + 4 * (a > t[6]);
}

// HSCALE-OBJ-1: E = pairwise_sum(h * (d * d)), d = |w| - q*s; h null means h = 1 (1 * x = x).
HS_FN double hs_group_error(const double* aw, const double* h, double s) {
    double t[7];
    hs_make_thresholds(s, t);
    const double s_over_2 = HS_MUL(0.5, s);  // exact
    double e[HS_GROUP];
#ifndef HSCALE_HOST_HARNESS
#pragma unroll
#endif
    for (int j = 0; j < HS_GROUP; ++j) {
        double q2 = (double)hs_twice_magnitude(aw[j], t);
        double d = HS_FMA(-q2, s_over_2, aw[j]);  // |w| - q*s, q*s = 2q * s/2 exact: one rounding
        double dd = HS_MUL(d, d);
        e[j] = h ? HS_MUL(h[j], dd) : dd;
    }
#ifndef HSCALE_HOST_HARNESS
#pragma unroll
#endif
    for (int step = 1; step < HS_GROUP; step *= 2)
        for (int j = 0; j < HS_GROUP; j += 2 * step)
            e[j] = HS_ADD(e[j], e[j + step]);  // ((e0+e1)+(e2+e3))+...
    return e[0];
}

// NVFP4-E4M3-2: the E4M3 byte of a finite v >= 0, to nearest, ties to even, saturating at 0x7E.
HS_FN int hs_e4m3_byte(double v) {
    int binary_exponent;
    frexp(v, &binary_exponent);  // v = f * 2^binary_exponent, f in [0.5, 1)
    int quantum_exponent = (v < 0.015625 ? -6 : binary_exponent - 1) - 3;  // subnormals: 2^-9
    double steps = ldexp(v, -quantum_exponent);  // exact
    int byte = 8 * (quantum_exponent + 9) + (int)rint(steps);  // rint: half to even
    return byte < HS_LAST_BYTE ? byte : HS_LAST_BYTE;
}

// NVFP4-INIT-1: the byte mapping amax_g onto top; a non-zero group gets at least 0x01.
HS_FN int hs_range_byte(double amax, double sg, double top) {
    int byte = hs_e4m3_byte(HS_DIV(amax, HS_MUL(top, sg)));  // top * s_g exact
    return byte > 1 ? byte : 1;
}

// One group from its 16 weights (float32 bit patterns) to its bytes and codes.
// scales[c] = s_g * e4m3(c), exact; window: 127 rows of k bytes, row c the distinct candidates
// around initial byte c in priority order (the first is c itself), window_len[c] of them;
// h null: the objective with h = 1.
HS_FN void hs_quantize_group(const unsigned int* w, const double* h, const double* scales,
                             double sg, int init_4over6, int search,
                             const unsigned char* window, const unsigned char* window_len, int k,
                             unsigned char* chosen, unsigned char* initial, unsigned char* codes) {
    double aw[HS_GROUP];
    unsigned int amax_bits = 0;  // non-negative floats order as their bit patterns
    for (int j = 0; j < HS_GROUP; ++j) {
        unsigned int magnitude = w[j] & ~HS_SIGN_BITS;
        aw[j] = hs_magnitude_value(magnitude);
        amax_bits = magnitude > amax_bits ? magnitude : amax_bits;
    }
    if (amax_bits == 0) {  // NVFP4-ZERO-1: byte 0x00, only the signs, no search
        *chosen = 0;
        *initial = 0;
        for (int j = 0; j < HS_GROUP; ++j) codes[j] = (unsigned char)((w[j] >> 31) << 3);
        return;
    }
    double amax = hs_magnitude_value(amax_bits);
    int c0 = hs_range_byte(amax, sg, 6.0);  // NVFP4-INIT-1
    if (init_4over6) {  // NVFP4-INIT-2: the byte at 4 only when strictly better (unweighted)
        int c4 = hs_range_byte(amax, sg, 4.0);
        if (hs_group_error(aw, 0, scales[c4]) < hs_group_error(aw, 0, scales[c0])) c0 = c4;
    }
    int best = c0;
    if (search) {  // HSCALE-WIN-1 .. HSCALE-ARGMIN-1
        const unsigned char* row = window + (long long)c0 * k;
        int n = window_len[c0];
        double best_e = hs_group_error(aw, h, scales[best]);
        for (int r = 1; r < n; ++r) {
            int c = row[r];
            double e = hs_group_error(aw, h, scales[c]);
            if (e < best_e) { best_e = e; best = c; }
        }
    }
    *chosen = (unsigned char)best;
    *initial = (unsigned char)c0;
    double t[7];  // NVFP4-E2M1-2, -3: the codes at the chosen byte
    hs_make_thresholds(scales[best], t);
    for (int j = 0; j < HS_GROUP; ++j)
        codes[j] = (unsigned char)(((w[j] >> 31) << 3) | hs_magnitude_code(aw[j], t));
}

// NVFP4-PACK-1: element 2i in the low nibble of byte i, as two little-endian 32-bit words.
HS_FN void hs_pack_group(const unsigned char* codes, unsigned int* words) {
    words[0] = 0;
    words[1] = 0;
    for (int j = 0; j < 8; ++j) {
        words[0] |= (unsigned int)codes[j] << (4 * j);
        words[1] |= (unsigned int)codes[8 + j] << (4 * j);
    }
}

// |x| of a float32 as bits, NaN counted as +Inf (either is rejected).
HS_FN unsigned int hs_amax_bits(unsigned int bits) {
    unsigned int u = bits & ~HS_SIGN_BITS;
    return u > 0x7f800000u ? 0x7f800000u : u;
}

#ifdef HSCALE_HOST_HARNESS
void hs_quantize_host(long long G, long long group_cols, const unsigned int* w, const double* h,
                      const double* scales, double sg, int init_4over6, int search,
                      const unsigned char* window, const unsigned char* window_len, int k,
                      unsigned char* chosen, unsigned char* initial, unsigned char* packed,
                      unsigned char* codes) {
    for (long long g = 0; g < G; ++g) {
        unsigned char cv[HS_GROUP];
        unsigned int words[2];
        hs_quantize_group(w + g * HS_GROUP, h ? h + (g % group_cols) * HS_GROUP : 0, scales, sg,
                          init_4over6, search, window, window_len, k, chosen + g, initial + g, cv);
        hs_pack_group(cv, words);
        memcpy(packed + 8 * g, words, 8);  // x86-64 is little-endian, like the GPU
        if (codes) memcpy(codes + HS_GROUP * g, cv, HS_GROUP);
    }
}
void hs_amax_host(long long n, const unsigned int* w, unsigned int* result) {
    unsigned int m = 0;
    for (long long i = 0; i < n; ++i) { unsigned int u = hs_amax_bits(w[i]); m = u > m ? u : m; }
    *result = m;
}
void hs_widen_f16_host(long long n, const unsigned short* in, unsigned int* out) {
    for (long long i = 0; i < n; ++i) out[i] = hs_f16_to_f32_bits(in[i]);
}
#else
extern "C" __global__ void hs_quantize_kernel(
        long long G, long long group_cols, const unsigned int* __restrict__ w,
        const double* __restrict__ h, const double* __restrict__ scales, double sg,
        int init_4over6, int search, const unsigned char* __restrict__ window,
        const unsigned char* __restrict__ window_len, int k, unsigned char* __restrict__ chosen,
        unsigned char* __restrict__ initial, unsigned char* __restrict__ packed,
        unsigned char* __restrict__ codes) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G) return;
    unsigned int wv[HS_GROUP];
    const uint4* w4 = reinterpret_cast<const uint4*>(w) + 4 * g;  // 64-byte aligned groups
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        uint4 v = w4[q];
        wv[4 * q] = v.x; wv[4 * q + 1] = v.y; wv[4 * q + 2] = v.z; wv[4 * q + 3] = v.w;
    }
    double hv[HS_GROUP];
    if (h) {
        const double2* h2 = reinterpret_cast<const double2*>(h + (g % group_cols) * HS_GROUP);
#pragma unroll
        for (int q = 0; q < 8; ++q) { double2 v = h2[q]; hv[2 * q] = v.x; hv[2 * q + 1] = v.y; }
    }
    unsigned char cv[HS_GROUP];
    unsigned char best, c0;
    hs_quantize_group(wv, h ? hv : 0, scales, sg, init_4over6, search, window, window_len, k,
                      &best, &c0, cv);
    chosen[g] = best;
    initial[g] = c0;
    unsigned int words[2];
    hs_pack_group(cv, words);
    reinterpret_cast<uint2*>(packed)[g] = make_uint2(words[0], words[1]);
    if (codes) {
        uint4 c;
        c.x = cv[0] | (cv[1] << 8) | (cv[2] << 16) | ((unsigned int)cv[3] << 24);
        c.y = cv[4] | (cv[5] << 8) | (cv[6] << 16) | ((unsigned int)cv[7] << 24);
        c.z = cv[8] | (cv[9] << 8) | (cv[10] << 16) | ((unsigned int)cv[11] << 24);
        c.w = cv[12] | (cv[13] << 8) | (cv[14] << 16) | ((unsigned int)cv[15] << 24);
        reinterpret_cast<uint4*>(codes)[g] = c;
    }
}

// max |w| over n float32 bit patterns (n a multiple of 4), NaN and Inf as +Inf, into *result
// (set to 0 first).
extern "C" __global__ void hs_amax_kernel(long long n, const unsigned int* __restrict__ w,
                                          unsigned int* __restrict__ result) {
    unsigned int m = 0;
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4;
         i += (long long)gridDim.x * blockDim.x) {
        uint4 v = w4[i];
        m = max(m, max(max(hs_amax_bits(v.x), hs_amax_bits(v.y)),
                       max(hs_amax_bits(v.z), hs_amax_bits(v.w))));
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if ((threadIdx.x & 31) == 0) atomicMax(result, m);
}

extern "C" __global__ void hs_widen_f16_kernel(long long n, const unsigned short* __restrict__ in,
                                               unsigned int* __restrict__ out) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = hs_f16_to_f32_bits(in[i]);
}
#endif
"""
KERNELS = ("hs_quantize", "hs_amax", "hs_widen_f16")


def _import_cupy():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"cupy is not importable ({type(exc).__name__}: {exc})"
    return cupy, ""


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


class CupyBackend:
    """H-Scale NVFP4 quantization with one fused CUDA kernel (cuda device 0)."""

    name = "cupy"
    capabilities = CAPABILITIES - {"hscale-block"}  # HSCALE-BLOCK-1 is not in the kernel

    def __init__(self):
        self._runtime = None

    @property
    def version(self) -> str:
        cupy, _ = _import_cupy()
        lib = f"cupy {cupy.__version__}" if cupy is not None else "cupy not installed"
        return f"hscale.backends.cupy_backend {__version__}, {lib}"

    def available(self):
        cupy, why = _import_cupy()
        if cupy is None:
            return False, f"cupy backend needs a CUDA device: {why}"
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # no driver, no device
            return False, (f"cupy backend needs a CUDA device: "
                           f"{type(exc).__name__}: {exc}")
        if count < 1:
            return False, "cupy backend needs a CUDA device: cupy sees 0 devices"
        try:
            driver = cupy.cuda.runtime.driverGetVersion()
            runtime = cupy.cuda.runtime.runtimeGetVersion()
        except Exception as exc:  # noqa: BLE001
            return False, f"cupy backend: cannot read the CUDA versions: {exc}"
        if driver // 1000 < runtime // 1000:
            return False, (f"cupy backend: this CuPy is built for CUDA {_cuda_version(runtime)} "
                           f"but the driver supports CUDA {_cuda_version(driver)}; install the "
                           f"CuPy wheel of the driver's CUDA major version "
                           f"(pip install cupy-cuda{driver // 1000}x, or the project extra "
                           f"'cuda{driver // 1000}')")
        return True, ""

    def runtime(self) -> "CudaRuntime":
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"backend 'cupy' is not available: {why}")
        if self._runtime is None:
            self._runtime = CudaRuntime()
        return self._runtime

    def quantize(self, weight, hessian_diag=None, **options):
        return FusedQuantizer(self.runtime()).quantize(weight, hessian_diag, **options)

    def quantize_on_device(self, weight, hessian_diag=None, **options) -> "DeviceResult":
        """``quantize`` for a weight already on the GPU (see the module docstring)."""
        return FusedQuantizer(self.runtime()).quantize_on_device(weight, hessian_diag, **options)


@dataclass(frozen=True, eq=False)
class DeviceResult:
    """What ``hs_quantize_kernel`` wrote, as arrays of the runtime (CuPy arrays on a GPU):
    ``packed`` uint8 (m, n/2), ``scale_bytes`` and ``initial_bytes`` uint8 (m, n/16), ``codes``
    uint8 (m, n) or None when not asked for; ``global_scale`` the dequantization multiplier."""

    packed: object
    scale_bytes: object
    initial_bytes: object
    codes: object
    global_scale: np.float32
    options: Options

    def to_host(self, runtime) -> QuantizedWeight:
        """The reference's result record, on the host (delta by the reference's rule)."""
        scale_bytes = runtime.to_host(self.scale_bytes)
        initial = runtime.to_host(self.initial_bytes)
        packed = runtime.to_host(self.packed)
        codes = unpack_codes(packed) if self.codes is None else runtime.to_host(self.codes)
        o = self.options
        return QuantizedWeight(codes=codes, packed=packed, scale_bytes=scale_bytes,
                               global_scale=self.global_scale,
                               delta=reported_delta(scale_bytes, initial), method=o.method,
                               init=o.init, K=o.K, U=o.U, scale_ceiling=o.scale_ceiling,
                               initial_bytes=initial)


class FusedQuantizer(Quantizer):
    """The reference pipeline with every per-group step in ``hs_quantize_kernel``, on a runtime
    that launches it (``CudaRuntime``, or ``HostRuntime`` for tests)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None) -> QuantizedWeight:
        weight, h, options, given_scale = self.validate(weight, hessian_diag, method, init, K, U,
                                                        scale_ceiling, global_scale)
        device_weight = self.runtime.upload_weight(weight)
        result = self.run(device_weight, h, options, given_scale, codes=True)
        return result.to_host(self.runtime)

    def quantize_on_device(self, weight, hessian_diag=None, *, method="hscale", init="maxabs",
                           K=DEFAULT_K, U=DEFAULT_U,
                           scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None,
                           codes=False) -> DeviceResult:
        """The arguments checked as the reference checks them (NVFP4-IN-1 .. -5, in its order),
        the weight's values on the device; ``codes=True`` also keeps the unpacked codes."""
        method = validation.check_choice("method", method, validation.METHODS)
        init = validation.check_choice("init", init, validation.INITS)
        device_weight = self.runtime.device_weight(weight)  # NVFP4-IN-1: dtype and shape
        K, U = validation.check_window(K, U)
        scale_ceiling = validation.check_scale_ceiling(scale_ceiling)
        h = validation.check_method_hessian(_host(hessian_diag), method, device_weight.shape[1])
        if global_scale is not None:
            global_scale = validation.check_global_scale(global_scale)
        return self.run(device_weight, h, Options(method, init, K, U, scale_ceiling),
                        global_scale, codes=codes, check_finite=True)

    def run(self, weight, h, options: Options, given_scale, *, codes: bool,
            check_finite: bool = False) -> DeviceResult:
        """Every group of ``weight`` (m, n), float32 bit patterns on the runtime, through the
        kernel."""
        rt = self.runtime
        rows, cols = weight.shape
        if check_finite or given_scale is None:
            amax = rt.amax(weight)
            if not np.isfinite(amax):  # NVFP4-IN-1: the reference names the first bad index
                validation.check_weight_finite(rt.to_host(weight).view(np.float32))
                raise AssertionError("hs_amax_kernel saw a non-finite weight that numpy did not")
        s_g = (given_scale if given_scale is not None
               else compute_global_scale(amax, options.scale_ceiling))  # NVFP4-GS-1, -2
        window, window_len, k = self.windows(options.K, options.U)
        G = rows * (cols // GROUP)
        chosen = rt.empty((rows, cols // GROUP), np.uint8)
        initial = rt.empty((rows, cols // GROUP), np.uint8)
        packed = rt.empty((rows, cols // 2), np.uint8)
        code_array = rt.empty((rows, cols), np.uint8) if codes else None
        weighted = options.method == "hscale"  # HSCALE-METHOD-1: scale-only searches with h = 1
        rt.launch("hs_quantize", G, np.int64(G), np.int64(cols // GROUP), weight,
                  rt.to_device(h) if weighted else None,
                  rt.to_device(SCALE_BYTE_VALUES * float(s_g)), np.float64(s_g),
                  np.int32(options.init == "4over6"), np.int32(options.method != "rtn"),
                  window, window_len, np.int32(k),
                  chosen, initial, packed, code_array)
        return DeviceResult(packed, chosen, initial, code_array, np.float32(s_g), options)

    def windows(self, K: int, U: int):
        """(window rows, row lengths, k) on the runtime, made once per (K, U) from the
        reference's window table (``distinct_windows``)."""
        cached = self.runtime.windows.get((K, U))
        if cached is None:
            table, counts = distinct_windows(self.window_table(K, U))
            cached = (self.runtime.to_device(table), self.runtime.to_device(counts),
                      table.shape[1])
            self.runtime.windows[(K, U)] = cached
        return cached


def distinct_windows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window table (127, k) in priority order with each row's repeated bytes (the clipped
    ends) dropped, left-aligned, and the number kept per row. A repeat scores exactly as its
    first occurrence, so it never replaces the running minimum (HSCALE-ARGMIN-1)."""
    distinct = np.zeros_like(table)
    counts = np.zeros(table.shape[0], np.uint8)
    for c, row in enumerate(table):
        _, first = np.unique(row, return_index=True)
        kept = row[np.sort(first)]
        distinct[c, :kept.size] = kept
        counts[c] = kept.size
    return np.ascontiguousarray(distinct), counts


def _host(h):
    """h for the reference's validation: a device array is copied to the host (n values)."""
    if h is None or isinstance(h, np.ndarray):
        return h
    if hasattr(h, "__cuda_array_interface__"):
        import cupy
        return cupy.asnumpy(cupy.asarray(h))
    return h


class CudaRuntime:
    """The kernels on CUDA device 0, through CuPy."""

    def __init__(self):
        import cupy
        self.cupy = cupy
        # --fmad=false: belt and braces, every float64 operation is an explicit intrinsic.
        # (CuPy appends -ftz=true to any options: the kernels do no float32 arithmetic.)
        module = cupy.RawModule(code=KERNEL_SOURCE, options=("--std=c++14", "--fmad=false"))
        self.kernels = {name: module.get_function(f"{name}_kernel") for name in KERNELS}
        self.threads_per_block = THREADS_PER_BLOCK
        self.windows = {}  # (K, U) -> window arrays on the device
        device = cupy.cuda.Device()
        self.amax_blocks = 8 * device.attributes["MultiProcessorCount"]

    def upload_weight(self, weight: np.ndarray):
        """A validated numpy weight as float32 on the device, widened there exactly and by
        bits (float16 by ``hs_widen_f16``, bfloat16 as the top half of a float32)."""
        return self.widen(self.cupy.asarray(np.ascontiguousarray(weight).view(
            np.uint16 if weight.dtype.itemsize == 2 else np.uint32)), weight.dtype)

    def device_weight(self, weight):
        """A device weight as contiguous float32 bits, its dtype and shape checked
        (NVFP4-IN-1; bfloat16 has no CuPy dtype, so it comes from the host or as float32)."""
        cp = self.cupy
        if not (isinstance(weight, cp.ndarray) or hasattr(weight, "__cuda_array_interface__")):
            raise ValueError(f"weight: expected a CUDA array (cupy, or with "
                             f"__cuda_array_interface__), got {type(weight).__name__}; "
                             "numpy weights go to quantize() (spec NVFP4-IN-1)")
        weight = cp.asarray(weight)
        validation.check_weight_layout(np.dtype(weight.dtype), weight.shape)
        return self.widen(cp.ascontiguousarray(weight).view(
            cp.uint16 if weight.dtype.itemsize == 2 else cp.uint32), np.dtype(weight.dtype))

    def widen(self, bits, dtype):
        """float32 bit patterns (uint32, the shape of ``bits``) of weights of ``dtype`` given
        as their own bit patterns."""
        cp = self.cupy
        if dtype == np.float32:
            return bits
        if dtype == ml_dtypes.bfloat16:
            return bits.astype(cp.uint32) << 16  # integer work: exact
        out = cp.empty(bits.shape, cp.uint32)
        self.kernels["hs_widen_f16"]((self.amax_blocks,), (256,),
                                     (np.int64(bits.size), bits, out))
        return out

    def amax(self, weight) -> float:
        """max |w| of a float32 device array (+inf if any element is NaN or Inf)."""
        cp = self.cupy
        result = cp.zeros(1, cp.uint32)
        self.kernels["hs_amax"]((self.amax_blocks,), (256,), (np.int64(weight.size), weight,
                                                               result))
        return float(result.get().view(np.float32)[0])  # bits of a finite float or +Inf

    def to_device(self, array):
        return self.cupy.asarray(array)

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype=dtype)

    def to_host(self, array):
        return self.cupy.asnumpy(array)

    def launch(self, name, groups, *args):
        blocks = (groups + self.threads_per_block - 1) // self.threads_per_block
        if blocks:
            self.kernels[name]((blocks,), (self.threads_per_block,), args)


class HostRuntime:
    """The same kernels compiled for the host with gcc (``-DHSCALE_HOST_HARNESS``): for testing
    the kernel logic on machines without a GPU."""

    def __init__(self, library):
        self.library = library
        self.windows = {}

    def upload_weight(self, weight):
        if weight.dtype == np.float16:  # by the kernel source's own widening
            bits = np.ascontiguousarray(weight).view(np.uint16)
            out = np.empty(bits.shape, np.uint32)
            self.library.hs_widen_f16_host(bits.size, bits.ctypes.data, out.ctypes.data)
            return out
        if weight.dtype == ml_dtypes.bfloat16:
            return np.ascontiguousarray(weight).view(np.uint16).astype(np.uint32) << 16
        return np.ascontiguousarray(weight).view(np.uint32)

    def device_weight(self, weight):
        validation.check_weight_layout(np.asarray(weight).dtype, np.shape(weight))
        return self.upload_weight(weight)

    def amax(self, weight) -> float:
        result = np.zeros(1, np.uint32)
        self.library.hs_amax_host(weight.size, weight.ctypes.data, result.ctypes.data)
        return float(result.view(np.float32)[0])

    def to_device(self, array):
        return np.ascontiguousarray(array)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def to_host(self, array):
        return array

    def launch(self, name, groups, *args):
        converted = [None if a is None else a.ctypes.data if isinstance(a, np.ndarray)
                     else a.item() for a in args]
        getattr(self.library, f"{name}_host")(*converted)


_HARNESS = {}


def host_harness_library(cc: str = "gcc"):
    """Build (once) ``KERNEL_SOURCE`` with ``-DHSCALE_HOST_HARNESS`` as a shared library and
    return it (ctypes), or raise ``RuntimeError`` if no C compiler works."""
    if cc in _HARNESS:
        return _HARNESS[cc]
    build = tempfile.mkdtemp(prefix="hscale_cupy_harness_")
    src = os.path.join(build, "hscale_kernel.c")
    lib = os.path.join(build, "hscale_kernel.so")
    with open(src, "w") as f:
        f.write(KERNEL_SOURCE)
    cmd = [cc, "-O2", "-std=c99", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared",
           "-DHSCALE_HOST_HARNESS", "-o", lib, src, "-lm"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        dll = ctypes.CDLL(lib)  # loaded: the files are no longer needed
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise RuntimeError(f"cannot build the host harness with {cc}: {detail}") from exc
    finally:
        shutil.rmtree(build, ignore_errors=True)
    p, i64, i32, f64 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_double
    dll.hs_quantize_host.argtypes = [i64, i64, p, p, p, f64, i32, i32, p, p, i32, p, p, p, p]
    dll.hs_amax_host.argtypes = [i64, p, p]
    dll.hs_widen_f16_host.argtypes = [i64, p, p]
    for name in KERNELS:
        getattr(dll, f"{name}_host").restype = None
    _HARNESS[cc] = dll
    return dll


def quantize_with_host_harness(weight, hessian_diag=None, **options):
    """``quantize`` by ``FusedQuantizer`` with the kernels compiled for the host (slow, single
    thread): everything the GPU backend runs except NVRTC and the device."""
    runtime = HostRuntime(host_harness_library())
    return FusedQuantizer(runtime).quantize(weight, hessian_diag, **options)


def create():
    return CupyBackend()



class HostHarnessBackend:
    """The cupy backend's kernels compiled for the host, behind the backend protocol: the
    conformance suite runs the GPU backend's logic on machines without a GPU
    (``pytest conformance --backend hscale.backends.cupy_backend:create_host_harness``)."""

    name = "cupy-host-harness"
    capabilities = CAPABILITIES - {"hscale-block"}  # HSCALE-BLOCK-1 is not in the kernel

    @property
    def version(self) -> str:
        return (f"hscale.backends.cupy_backend {__version__}, kernels built by gcc "
                "(-DHSCALE_HOST_HARNESS)")

    def available(self):
        try:
            host_harness_library()
        except RuntimeError as exc:
            return False, str(exc)
        return True, ""

    def quantize(self, weight, hessian_diag=None, **options):
        return quantize_with_host_harness(weight, hessian_diag, **options)


def create_host_harness():
    return HostHarnessBackend()

assert LADDER_LAST_BYTE == 0x7E == len(SCALE_BYTE_VALUES) - 1  # the kernel's HS_LAST_BYTE
