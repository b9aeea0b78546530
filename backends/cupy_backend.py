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

The kernel source (``cupy_kernel.cu``) is written once for two compilers: NVRTC (through CuPy),
and a host C compiler with ``-DHSCALE_HOST_HARNESS`` (``-ffp-contract=off``; x86-64 doubles are
SSE2, no excess precision), where the intrinsics become plain operators and ``fma``. ``HostRuntime`` runs the
same ``FusedQuantizer`` with the kernels built by gcc, so the tests check the kernel logic
against the reference on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import importlib.resources
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES
from hscale.reference import (SCALE_BYTE_VALUES, GroupObjectives, Options, QuantizedWeight,
                              Quantizer)
from hscale.reference import compute_global_scale, reported_delta, unpack_codes, validation
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, GROUP_SIZE
from hscale.reference.e4m3 import LADDER_LAST_BYTE

GROUP = GROUP_SIZE
THREADS_PER_BLOCK = 128  # 64 to 512 were within 10% of each other on an H100

#: The kernels' source (backends/cupy_kernel.cu, shipped in the wheel beside this module):
#: a CUDA file a compiler and an editor understand, read from the installed package.
KERNEL_FILE = "cupy_kernel.cu"
KERNEL_SOURCE = importlib.resources.files("hscale.backends").joinpath(KERNEL_FILE).read_text(
    encoding="utf-8")
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
    uint8 (m, n) or None when not asked for; ``global_scale`` the dequantization multiplier;
    ``objectives`` a ``GroupObjectives`` of device arrays where the run was asked for them (the
    torch backends; this kernel does not compute them)."""

    packed: object
    scale_bytes: object
    initial_bytes: object
    codes: object
    global_scale: np.float32
    options: Options
    objectives: GroupObjectives | None = None

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
                               initial_bytes=initial, objectives=self._host_objectives(runtime))

    def _host_objectives(self, runtime) -> GroupObjectives | None:
        scored = self.objectives
        if scored is None:
            return None
        return GroupObjectives(runtime.to_host(scored.squared), None if scored.weighted is None
                               else runtime.to_host(scored.weighted))


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
