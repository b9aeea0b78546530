"""The ``cupy`` backend: one fused CUDA kernel, one thread per 16-element group, that does the
4over6 choice, the H-Scale candidate search and the final encoding in exact float64.

Host side (shared with the torch backends through ``hscale.backends._common``): validation,
s_g, the range-fitting initial bytes and the window's priority order all come from
``hscale.reference``; the result is built by the reference's packing and ``QuantizedWeight``.

The kernel source (``KERNEL_SOURCE``) is written once for two compilers:

* NVRTC (through ``cupy.RawKernel``): every rounding operation of the objective is an explicit
  ``__dmul_rn`` / ``__dadd_rn`` / ``__dsub_rn`` intrinsic, which the compiler never contracts into
  a fused multiply-add;
* a host C compiler, with ``-DHSCALE_HOST_HARNESS``: the intrinsics become plain ``*``, ``+``,
  ``-`` and the file must be compiled with ``-ffp-contract=off`` (x86-64 doubles are SSE2, no
  excess precision). ``host_harness_library()`` builds it with gcc and ``tests/test_backends_smoke.py``
  checks the kernel logic against the reference on machines without a GPU.

What the kernel computes is the reference's text, clause by clause: the E2M1 code of |w| by the
division-free threshold form (``|w| > m*s`` for an even lower code, ``>=`` for an odd one,
``m*s`` exact), ``d = |w| - q*s`` (``q*s`` exact; ``|w| - |q|s`` is ``-(w - qs)`` for w < 0, the same
``d*d``), ``e = h*(d*d)`` (``e = d*d`` for h = 1), the balanced pairwise sum, and a strict-less
argmin over the candidates in priority order.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile

import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES
from hscale.backends import _common as common
from hscale.reference import SCALE_BYTE_VALUES, priority_order
from hscale.reference.initial_scale import range_fitting_byte

GROUP = 16
THREADS_PER_BLOCK = 128

KERNEL_SOURCE = r"""
// H-Scale NVFP4 group kernel. See hscale/backends/cupy_backend.py for the exactness argument.
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
#define HS_FIRST_BYTE 1
#define HS_LAST_BYTE 126

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

HS_FN int hs_clip_byte(int c) {
    return c < HS_FIRST_BYTE ? HS_FIRST_BYTE : (c > HS_LAST_BYTE ? HS_LAST_BYTE : c);
}

// One group. w: 16 floats; h: 16 doubles or null (h = 1); ladder: value of bytes 0..126;
// c6: max-abs byte (NVFP4-INIT-1); c4: the 4over6 byte at 4, or -1 for max-abs init;
// prio: the K shifts in priority order (0, +1, -1, ...); search: 0 for rtn.
HS_FN void hs_quantize_group(const float* w, const double* h, const double* ladder, double sg,
                             int c6, int c4, const int* prio, int K, int search,
                             unsigned char* codes, unsigned char* chosen,
                             unsigned char* initial) {
    double aw[HS_GROUP];
    unsigned char sign[HS_GROUP];
    double amax = 0.0;
    for (int j = 0; j < HS_GROUP; ++j) {
        double v = (double)w[j];  // exact
        sign[j] = (unsigned char)((hs_float_bits(w[j]) >> 31) << 3);  // NVFP4-E2M1-3
        aw[j] = fabs(v);  // |w|
        amax = aw[j] > amax ? aw[j] : amax;
    }
    if (amax == 0.0) {  // NVFP4-ZERO-1: byte 0x00, sign-only codes, no search
        for (int j = 0; j < HS_GROUP; ++j) codes[j] = sign[j];
        *chosen = 0;
        *initial = 0;
        return;
    }
    int c0 = c6;
    if (c4 >= 0) {  // NVFP4-INIT-2: unweighted error, a tie keeps 6
        double e6 = hs_group_error(aw, 0, HS_MUL(sg, ladder[c6]));
        double e4 = hs_group_error(aw, 0, HS_MUL(sg, ladder[c4]));
        if (e4 < e6) c0 = c4;
    }
    int best = c0;
    if (search) {  // HSCALE-WIN-1, HSCALE-ARGMIN-1
        double best_e = hs_group_error(aw, h, HS_MUL(sg, ladder[c0]));
        for (int r = 1; r < K; ++r) {
            int c = hs_clip_byte(c0 + prio[r]);
            if (c == best) continue;  // a clipped duplicate of the incumbent cannot win
            double e = hs_group_error(aw, h, HS_MUL(sg, ladder[c]));
            if (e < best_e) { best_e = e; best = c; }
        }
    }
    double t[7];
    hs_thresholds(HS_MUL(sg, ladder[best]), t);
    for (int j = 0; j < HS_GROUP; ++j)
        codes[j] = (unsigned char)(sign[j] | hs_magnitude_code(aw[j], t));
    *chosen = (unsigned char)best;
    *initial = (unsigned char)c0;
}

#ifdef HSCALE_HOST_HARNESS
// The same group function looped on the host: for testing the kernel logic without a GPU.
void hscale_nvfp4_host(long long ngroups, long long groups_per_row, const float* w,
                       const double* h, const double* ladder, double sg,
                       const unsigned char* c6, const unsigned char* c4, const int* prio,
                       int K, int search, unsigned char* codes, unsigned char* chosen,
                       unsigned char* initial) {
    for (long long g = 0; g < ngroups; ++g) {
        const double* hg = h ? h + (g % groups_per_row) * HS_GROUP : 0;
        hs_quantize_group(w + g * HS_GROUP, hg, ladder, sg, c6[g], c4 ? (int)c4[g] : -1,
                          prio, K, search, codes + g * HS_GROUP, chosen + g, initial + g);
    }
}
#else
extern "C" __global__ void hscale_nvfp4_kernel(
        long long ngroups, long long groups_per_row, const float* __restrict__ w,
        const double* __restrict__ h, const double* __restrict__ ladder, double sg,
        const unsigned char* __restrict__ c6, const unsigned char* __restrict__ c4,
        const int* __restrict__ prio, int K, int search, unsigned char* __restrict__ codes,
        unsigned char* __restrict__ chosen, unsigned char* __restrict__ initial) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= ngroups) return;
    float wv[HS_GROUP];
    const float4* w4 = reinterpret_cast<const float4*>(w + g * HS_GROUP);  // 64-byte aligned
    for (int k = 0; k < 4; ++k) {
        float4 v = w4[k];
        wv[4 * k] = v.x; wv[4 * k + 1] = v.y; wv[4 * k + 2] = v.z; wv[4 * k + 3] = v.w;
    }
    const double* hg = h ? h + (g % groups_per_row) * HS_GROUP : 0;
    unsigned char cv[HS_GROUP];
    hs_quantize_group(wv, hg, ladder, sg, c6[g], c4 ? (int)c4[g] : -1, prio, K, search,
                      cv, chosen + g, initial + g);
    uint4 packed;  // the 16 codes of the group, one 16-byte store
    packed.x = cv[0] | (cv[1] << 8) | (cv[2] << 16) | ((unsigned int)cv[3] << 24);
    packed.y = cv[4] | (cv[5] << 8) | (cv[6] << 16) | ((unsigned int)cv[7] << 24);
    packed.z = cv[8] | (cv[9] << 8) | (cv[10] << 16) | ((unsigned int)cv[11] << 24);
    packed.w = cv[12] | (cv[13] << 8) | (cv[14] << 16) | ((unsigned int)cv[15] << 24);
    reinterpret_cast<uint4*>(codes)[g] = packed;
}
#endif
"""


def _import_cupy():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"cupy is not importable ({type(exc).__name__}: {exc})"
    return cupy, ""


class CupyBackend:
    """H-Scale NVFP4 quantization with one fused CUDA kernel (cuda device 0)."""

    name = "cupy"
    capabilities = CAPABILITIES

    def __init__(self):
        self._kernel = None

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

    def kernel(self):
        if self._kernel is None:
            import cupy
            self._kernel = cupy.RawKernel(KERNEL_SOURCE, "hscale_nvfp4_kernel",
                                          options=("--std=c++14",))
        return self._kernel

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"backend 'cupy' is not available: {why}")
        import cupy as cp
        req = common.validate(weight, hessian_diag, method, init, K, U, scale_ceiling,
                              global_scale)
        rows, cols = req.weight.shape
        ng = cols // GROUP
        G = rows * ng
        w = cp.asarray(np.ascontiguousarray(req.weight, dtype=np.float32))  # exact
        group_amax = cp.abs(w.reshape(G, GROUP)).max(axis=1)
        amax_host = cp.asnumpy(group_amax).astype(np.float64)
        inputs = _host_inputs(req, amax_host)
        codes = cp.empty((G, GROUP), dtype=cp.uint8)
        chosen = cp.empty(G, dtype=cp.uint8)
        initial = cp.empty(G, dtype=cp.uint8)
        h = cp.asarray(req.h) if inputs["use_h"] else None
        c4 = cp.asarray(inputs["c4"]) if inputs["c4"] is not None else None
        args = (np.int64(G), np.int64(ng), w, h, cp.asarray(SCALE_BYTE_VALUES),
                np.float64(inputs["sg"]), cp.asarray(inputs["c6"]), c4,
                cp.asarray(inputs["prio"]), np.int32(req.K), np.int32(inputs["search"]),
                codes, chosen, initial)
        blocks = (G + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        self.kernel()((blocks,), (THREADS_PER_BLOCK,), args)
        return common.finish(req, cp.asnumpy(codes).reshape(rows, cols),
                             cp.asnumpy(chosen).reshape(rows, ng),
                             cp.asnumpy(initial).reshape(rows, ng), inputs["global_scale"])


def _host_inputs(req: common.Request, amax_host: np.ndarray) -> dict:
    """Everything the kernel needs besides the weights, computed by the reference."""
    global_scale = common.global_scale_for(req, amax_host.max())
    c6 = range_fitting_byte(amax_host, global_scale, 6.0)
    c4 = (range_fitting_byte(amax_host, global_scale, 4.0) if req.init == "4over6"
          else None)
    return {
        "global_scale": global_scale,
        "sg": float(global_scale),
        "c6": np.ascontiguousarray(c6, dtype=np.uint8),
        "c4": None if c4 is None else np.ascontiguousarray(c4, dtype=np.uint8),
        "prio": np.asarray(priority_order(req.K, req.U), dtype=np.int32),
        "search": int(req.method != "rtn"),
        "use_h": req.method == "hscale",
    }


# -- the kernel's logic on the host, for tests ----------------------------------------------

_HARNESS = None


def host_harness_library(cc: str = "gcc"):
    """Build (once) ``KERNEL_SOURCE`` with ``-DHSCALE_HOST_HARNESS`` as a shared library and return
    it (ctypes), or raise ``RuntimeError`` if no C compiler works."""
    global _HARNESS
    if _HARNESS is not None:
        return _HARNESS
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
    p = ctypes.c_void_p
    dll.hscale_nvfp4_host.argtypes = [ctypes.c_longlong, ctypes.c_longlong, p, p, p,
                                      ctypes.c_double, p, p, p, ctypes.c_int, ctypes.c_int,
                                      p, p, p]
    dll.hscale_nvfp4_host.restype = None
    _HARNESS = dll
    return dll


def quantize_with_host_harness(weight, hessian_diag=None, *, method="hscale", init="maxabs",
                               K=16, U=6, scale_ceiling=448.0, global_scale=None):
    """``quantize`` with the CUDA kernel's group function compiled for the host (slow, single
    thread): the same host-side steps as ``CupyBackend.quantize``, for testing the kernel."""
    dll = host_harness_library()
    req = common.validate(weight, hessian_diag, method, init, K, U, scale_ceiling,
                          global_scale)
    rows, cols = req.weight.shape
    ng = cols // GROUP
    G = rows * ng
    w = np.ascontiguousarray(req.weight, dtype=np.float32)
    amax_host = np.abs(w.reshape(G, GROUP)).max(axis=1).astype(np.float64)
    inputs = _host_inputs(req, amax_host)
    codes = np.empty((G, GROUP), dtype=np.uint8)
    chosen = np.empty(G, dtype=np.uint8)
    initial = np.empty(G, dtype=np.uint8)
    h = np.ascontiguousarray(req.h, dtype=np.float64) if inputs["use_h"] else None
    ladder = SCALE_BYTE_VALUES
    c6, c4, prio = inputs["c6"], inputs["c4"], inputs["prio"]

    def ptr(a):
        return None if a is None else a.ctypes.data

    dll.hscale_nvfp4_host(G, ng, ptr(w), ptr(h), ptr(ladder), inputs["sg"], ptr(c6), ptr(c4),
                          ptr(prio), req.K, inputs["search"], ptr(codes), ptr(chosen),
                          ptr(initial))
    return common.finish(req, codes.reshape(rows, cols), chosen.reshape(rows, ng),
                         initial.reshape(rows, ng), inputs["global_scale"])


def create():
    return CupyBackend()
