"""The ``cupy`` backend: the reference pipeline with its hot steps as CUDA kernels, one thread
per 16-element group, in exact float64.

``CupyQuantizer`` is ``hscale.reference.Quantizer`` with three steps replaced:

- ``candidate_objectives``: the objective of each group at each of its candidate bytes
  (``hs_objectives_kernel``; the 4over6 initial byte is then chosen by the reference's rule);
- ``search``: the window of each initial byte scanned in priority order, keeping a candidate
  only when its objective is strictly smaller (``hs_search_kernel``: the objective and the
  first minimum fused, so no objective leaves the device);
- ``encode``: the codes at the chosen bytes (``hs_encode_kernel``).

Validation, the global scale, zero groups, the initial bytes, the window table and the result
are the reference's own steps.

The kernel source (``KERNEL_SOURCE``) is written once for two compilers:

* NVRTC (through ``cupy.RawKernel``): every rounding operation of the objective is an explicit
  ``__dmul_rn`` / ``__dadd_rn`` / ``__dsub_rn`` intrinsic, which the compiler never contracts into
  a fused multiply-add;
* a host C compiler, with ``-DHSCALE_HOST_HARNESS``: the intrinsics become plain ``*``, ``+``,
  ``-`` and the file must be compiled with ``-ffp-contract=off`` (x86-64 doubles are SSE2, no
  excess precision). ``quantize_with_host_harness`` runs the same ``CupyQuantizer`` with the
  kernels compiled by gcc, so tests check the kernel logic against the reference on machines
  without a GPU.

What the kernels compute is the reference's text, clause by clause: the E2M1 code of |w| by the
division-free threshold form (``|w| > m*s`` for an even lower code, ``>=`` for an odd one, ``m*s``
exact), ``d = |w| - q*s`` (``q*s`` exact; ``|w| - |q|s`` is ``-(w - qs)`` for w < 0, the same
``d*d``), ``e = h*(d*d)`` (``e = d*d`` for h = 1), the balanced pairwise sum, and a strict-less
scan over the candidates in priority order.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile

import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES
from hscale.reference import SCALE_BYTE_VALUES, Quantizer

GROUP = 16
THREADS_PER_BLOCK = 128

KERNEL_SOURCE = r"""
// H-Scale NVFP4 group kernels. See hscale/backends/cupy_backend.py for the exactness argument.
#ifdef HSCALE_HOST_HARNESS
#include <math.h>
#include <stdint.h>
#include <string.h>
#define HS_FN static inline
#define HS_MUL(a, b) ((a) * (b))
#define HS_ADD(a, b) ((a) + (b))
#define HS_SUB(a, b) ((a) - (b))
static inline unsigned int hs_float_bits(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
#else
#define HS_FN __device__ __forceinline__
#define HS_MUL(a, b) __dmul_rn((a), (b))
#define HS_ADD(a, b) __dadd_rn((a), (b))
#define HS_SUB(a, b) __dsub_rn((a), (b))
#define hs_float_bits(f) __float_as_uint(f)
#endif

#define HS_GROUP 16

// E2M1 magnitudes of codes 0..7 and the 7 rounding midpoints (NVFP4-E2M1-1, -2).
#ifdef HSCALE_HOST_HARNESS
static const double HS_E2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
static const double HS_MID[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
#else
__constant__ double HS_E2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
__constant__ double HS_MID[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
#endif

// Magnitude code 0..7 of |w| for the effective scale s, by the threshold form: thresholds
// t[k] = HS_MID[k] * s are exact; a tie above an even code stays (>), above an odd one moves up.
HS_FN int hs_magnitude_code(double aw, const double* t) {
    return (aw > t[0]) + (aw >= t[1]) + (aw > t[2]) + (aw >= t[3])
         + (aw > t[4]) + (aw >= t[5]) + (aw > t[6]);
}

HS_FN void hs_thresholds(double s, double* t) {
    for (int k = 0; k < 7; ++k) t[k] = HS_MUL(HS_MID[k], s);  // exact: 3 x 28 bits
}

// HSCALE-OBJ-1: E = pairwise_sum(h * (d * d)), d = |w| - q*s; h == 0 (null) means h = 1.
HS_FN double hs_group_error(const double* aw, const double* h, double s) {
    double t[7];
    double e[HS_GROUP];
    hs_thresholds(s, t);
    for (int j = 0; j < HS_GROUP; ++j) {
        double qs = HS_MUL(HS_E2M1[hs_magnitude_code(aw[j], t)], s);  // exact
        double d = HS_SUB(aw[j], qs);
        double dd = HS_MUL(d, d);
        e[j] = h ? HS_MUL(h[j], dd) : dd;
    }
    for (int step = 1; step < HS_GROUP; step *= 2)
        for (int j = 0; j < HS_GROUP; j += 2 * step)
            e[j] = HS_ADD(e[j], e[j + step]);  // ((e0+e1)+(e2+e3))+...
    return e[0];
}

HS_FN void hs_abs(const float* w, double* aw) {
    for (int j = 0; j < HS_GROUP; ++j) aw[j] = fabs((double)w[j]);  // exact
}

// The objective at each of k candidate bytes; scales[c] = s_g * e4m3(c), exact.
HS_FN void hs_objectives_group(const float* w, const double* h, const double* scales,
                               const unsigned char* candidates, int k, double* errors) {
    double aw[HS_GROUP];
    hs_abs(w, aw);
    for (int r = 0; r < k; ++r) errors[r] = hs_group_error(aw, h, scales[candidates[r]]);
}

// HSCALE-WIN-1 .. HSCALE-ARGMIN-1: the window (a row of the window table, in priority order)
// scanned keeping a candidate only when strictly smaller; a clipped duplicate of the
// incumbent has its objective and cannot win.
HS_FN unsigned char hs_search_group(const float* w, const double* h, const double* scales,
                                    const unsigned char* window, int K) {
    double aw[HS_GROUP];
    hs_abs(w, aw);
    unsigned char best = window[0];
    double best_e = hs_group_error(aw, h, scales[best]);
    for (int r = 1; r < K; ++r) {
        unsigned char c = window[r];
        if (c == best) continue;
        double e = hs_group_error(aw, h, scales[c]);
        if (e < best_e) { best_e = e; best = c; }
    }
    return best;
}

// NVFP4-E2M1-2, -3: the codes at the effective scale s.
HS_FN void hs_encode_group(const float* w, double s, unsigned char* codes) {
    double t[7];
    hs_thresholds(s, t);
    for (int j = 0; j < HS_GROUP; ++j) {
        unsigned char sign = (unsigned char)((hs_float_bits(w[j]) >> 31) << 3);
        codes[j] = (unsigned char)(sign | hs_magnitude_code(fabs((double)w[j]), t));
    }
}

// h of group g: h_groups rows of 16 (a row's pattern, or one row per group); null: h = 1.
#define HS_H(h, g, h_groups) ((h) ? (h) + ((g) % (h_groups)) * HS_GROUP : 0)

#ifdef HSCALE_HOST_HARNESS
// The same group functions looped on the host: for testing the kernel logic without a GPU.
void hs_objectives_host(long long G, long long h_groups, const float* w, const double* h,
                        const double* scales, const unsigned char* candidates, int k,
                        double* errors) {
    for (long long g = 0; g < G; ++g)
        hs_objectives_group(w + g * HS_GROUP, HS_H(h, g, h_groups), scales, candidates + g * k,
                            k, errors + g * k);
}
void hs_search_host(long long G, long long h_groups, const float* w, const double* h,
                    const double* scales, const unsigned char* table, int K,
                    const unsigned char* initial, unsigned char* chosen) {
    for (long long g = 0; g < G; ++g)
        chosen[g] = hs_search_group(w + g * HS_GROUP, HS_H(h, g, h_groups), scales,
                                    table + (long long)initial[g] * K, K);
}
void hs_encode_host(long long G, const float* w, const double* scale, unsigned char* codes) {
    for (long long g = 0; g < G; ++g) hs_encode_group(w + g * HS_GROUP, scale[g], codes + g * HS_GROUP);
}
#else
HS_FN void hs_load_group(const float* w, long long g, float* out) {
    const float4* w4 = reinterpret_cast<const float4*>(w + g * HS_GROUP);  // 64-byte aligned
    for (int k = 0; k < 4; ++k) {
        float4 v = w4[k];
        out[4 * k] = v.x; out[4 * k + 1] = v.y; out[4 * k + 2] = v.z; out[4 * k + 3] = v.w;
    }
}

extern "C" __global__ void hs_objectives_kernel(
        long long G, long long h_groups, const float* __restrict__ w,
        const double* __restrict__ h, const double* __restrict__ scales,
        const unsigned char* __restrict__ candidates, int k, double* __restrict__ errors) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G) return;
    float wv[HS_GROUP];
    hs_load_group(w, g, wv);
    hs_objectives_group(wv, HS_H(h, g, h_groups), scales, candidates + g * k, k, errors + g * k);
}

extern "C" __global__ void hs_search_kernel(
        long long G, long long h_groups, const float* __restrict__ w,
        const double* __restrict__ h, const double* __restrict__ scales,
        const unsigned char* __restrict__ table, int K, const unsigned char* __restrict__ initial,
        unsigned char* __restrict__ chosen) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G) return;
    float wv[HS_GROUP];
    hs_load_group(w, g, wv);
    chosen[g] = hs_search_group(wv, HS_H(h, g, h_groups), scales,
                                table + (long long)initial[g] * K, K);
}

extern "C" __global__ void hs_encode_kernel(
        long long G, const float* __restrict__ w, const double* __restrict__ scale,
        unsigned char* __restrict__ codes) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G) return;
    float wv[HS_GROUP];
    hs_load_group(w, g, wv);
    unsigned char cv[HS_GROUP];
    hs_encode_group(wv, scale[g], cv);
    uint4 packed;  // the 16 codes of the group, one 16-byte store
    packed.x = cv[0] | (cv[1] << 8) | (cv[2] << 16) | ((unsigned int)cv[3] << 24);
    packed.y = cv[4] | (cv[5] << 8) | (cv[6] << 16) | ((unsigned int)cv[7] << 24);
    packed.z = cv[8] | (cv[9] << 8) | (cv[10] << 16) | ((unsigned int)cv[11] << 24);
    packed.w = cv[12] | (cv[13] << 8) | (cv[14] << 16) | ((unsigned int)cv[15] << 24);
    reinterpret_cast<uint4*>(codes)[g] = packed;
}
#endif
"""
KERNELS = ("hs_objectives", "hs_search", "hs_encode")


def _import_cupy():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"cupy is not importable ({type(exc).__name__}: {exc})"
    return cupy, ""


class CupyBackend:
    """H-Scale NVFP4 quantization with CUDA kernels (cuda device 0)."""

    name = "cupy"
    capabilities = CAPABILITIES

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
        return True, ""

    def quantize(self, weight, hessian_diag=None, **options):
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"backend 'cupy' is not available: {why}")
        if self._runtime is None:
            self._runtime = CudaRuntime()
        return CupyQuantizer(self._runtime).quantize(weight, hessian_diag, **options)


class CupyQuantizer(Quantizer):
    """The reference pipeline with the kernels of ``KERNEL_SOURCE`` as its hot steps, on a
    runtime that launches them (``CudaRuntime``, or ``HostRuntime`` for tests)."""

    block_groups = 1 << 22  # a GPU wants large launches; the host harness does not mind

    def __init__(self, runtime):
        self.runtime = runtime
        self.scale_table = None

    def load_groups(self, block_weight: np.ndarray) -> np.ndarray:
        """The block's groups as float32 (an exact widening of float16 and bfloat16)."""
        rows, cols = block_weight.shape
        return block_weight.astype(np.float32).reshape(rows, cols // GROUP, GROUP)

    def _scales(self, s_g):
        if self.scale_table is None:  # s_g * e4m3(c) for bytes 0..126, exact in float64
            self.scale_table = self.runtime.to_device(SCALE_BYTE_VALUES * float(s_g))
        return self.scale_table

    def _groups(self, groups):
        return self.runtime.to_device(np.ascontiguousarray(np.reshape(groups, (-1, GROUP)),
                                                           np.float32))

    def _h(self, h, groups):
        """(device h, h_groups): rows of 16 indexed by group g modulo h_groups; None for h = 1."""
        if h is None or (np.ndim(h) == 1 and np.all(np.asarray(h) == 1)):
            return None, 1
        h = np.asarray(h, dtype=np.float64)
        if h.ndim == 2 and np.ndim(groups) == 3 and h.shape[0] == np.shape(groups)[1]:
            return self.runtime.to_device(h), h.shape[0]  # a row's pattern, repeating
        full = np.broadcast_to(h, np.shape(groups)).reshape(-1, GROUP)
        return self.runtime.to_device(full), full.shape[0]

    def candidate_objectives(self, groups, h, candidates, s_g) -> np.ndarray:
        k = candidates.shape[-1]
        w = self._groups(groups)
        G = int(np.prod(candidates.shape[:-1]))
        h_dev, h_groups = self._h(h, groups)
        errors = self.runtime.empty((G, k), np.float64)
        self.runtime.launch("hs_objectives", G, np.int64(G), np.int64(h_groups), w, h_dev,
                            self._scales(s_g),
                            self.runtime.to_device(np.ascontiguousarray(candidates, np.uint8)),
                            np.int32(k), errors)
        return self.runtime.to_host(errors).reshape(candidates.shape)

    def search(self, groups, h, initial, s_g, context) -> np.ndarray:
        table = context["window"]
        G = int(np.prod(np.shape(initial)))
        h_dev, h_groups = self._h(h, groups)
        chosen = self.runtime.empty((G,), np.uint8)
        self.runtime.launch("hs_search", G, np.int64(G), np.int64(h_groups), self._groups(groups),
                            h_dev, self._scales(s_g),
                            self.runtime.to_device(np.ascontiguousarray(table, np.uint8)),
                            np.int32(table.shape[1]),
                            self.runtime.to_device(np.ascontiguousarray(initial, np.uint8)),
                            chosen)
        return self.runtime.to_host(chosen).reshape(np.shape(initial))

    def encode(self, groups, scale) -> np.ndarray:
        G = int(np.prod(np.shape(groups)[:-1]))
        scale = np.ascontiguousarray(np.broadcast_to(scale, np.shape(groups)[:-1] + (1,))
                                     .reshape(-1), np.float64)
        codes = self.runtime.empty((G, GROUP), np.uint8)
        self.runtime.launch("hs_encode", G, np.int64(G), self._groups(groups),
                            self.runtime.to_device(scale), codes)
        return self.runtime.to_host(codes).reshape(np.shape(groups))


class CudaRuntime:
    """The kernels on CUDA device 0, through CuPy."""

    def __init__(self):
        import cupy
        self.cupy = cupy
        module = cupy.RawModule(code=KERNEL_SOURCE, options=("--std=c++14",))
        self.kernels = {name: module.get_function(f"{name}_kernel") for name in KERNELS}

    def to_device(self, array):
        return self.cupy.asarray(array)

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype=dtype)

    def to_host(self, array):
        return self.cupy.asnumpy(array)

    def launch(self, name, groups, *args):
        blocks = (groups + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        if blocks:
            self.kernels[name]((blocks,), (THREADS_PER_BLOCK,), args)


class HostRuntime:
    """The same kernels compiled for the host with gcc (``-DHSCALE_HOST_HARNESS``): for testing
    the kernel logic on machines without a GPU."""

    def __init__(self, library):
        self.library = library

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
           "-DHSCALE_HOST_HARNESS", "-o", lib, src]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise RuntimeError(f"cannot build the host harness with {cc}: {detail}") from exc
    dll = ctypes.CDLL(lib)
    p, i64, i32 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int
    dll.hs_objectives_host.argtypes = [i64, i64, p, p, p, p, i32, p]
    dll.hs_search_host.argtypes = [i64, i64, p, p, p, p, i32, p, p]
    dll.hs_encode_host.argtypes = [i64, p, p, p]
    for name in KERNELS:
        getattr(dll, f"{name}_host").restype = None
    _HARNESS[cc] = dll
    return dll


def quantize_with_host_harness(weight, hessian_diag=None, **options):
    """``quantize`` by ``CupyQuantizer`` with the kernels compiled for the host (slow, single
    thread): everything the GPU backend runs except NVRTC and the device."""
    return CupyQuantizer(HostRuntime(host_harness_library())).quantize(weight, hessian_diag,
                                                                       **options)


def create():
    return CupyBackend()
