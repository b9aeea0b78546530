"""ggml's NVFP4 matmul on the CPU (llama.cpp) behind the gemm kind: the weight-only GEMM of
NVFP4-GEMM-8, NVFP4 weights times activations that ggml quantizes to Q8_0.

Library functions called, through ctypes, from the llama.cpp that llama-cpp-python installs
(``llama_cpp/lib``; 0.3.36 ships ggml 0.25.3): the graph llama.cpp builds for an NVFP4 Linear,
``ggml_mul(ggml_mul_mat(W, X), W.scale)`` -- ``ggml_init``, ``ggml_new_tensor_2d`` (W of type
``GGML_TYPE_NVFP4`` holding the file's 36-byte blocks, X ``GGML_TYPE_F32``),
``ggml_new_tensor_1d`` (the ``.scale``, F32 ``[1]``, NVFP4-GGUF-1), ``ggml_mul_mat``,
``ggml_mul``, ``ggml_new_graph``, ``ggml_build_forward_expand`` (``libggml-base.so``) and
``ggml_graph_compute_with_ctx`` with one thread (``libggml-cpu.so``). On the CPU ggml multiplies
NVFP4 rows by Q8_0 rows (``type_traits_cpu[GGML_TYPE_NVFP4].vec_dot_type``): ``ggml_mul_mat``
quantizes X to Q8_0 itself (``quantize_row_q8_0``) and ``ggml_vec_dot_nvfp4_q8_0`` sums, per
16-element sub-block, the integer products of the doubled E2M1 values and the int8 values,
then multiplies by ``fp32(ue4m3 * 0.5 * d_q8)`` into fp32 accumulators (AVX2: eight lanes with
fused multiply-adds, then a horizontal sum).

So the adapter declares activations ``q8_0`` (the suite feeds float32 activations that a Q8_0
block holds exactly, so ggml's own quantization keeps them), the fp32 accumulation model with
the global scale on the accumulator (NVFP4-GEMM-4, -4), float32 output, K a multiple of 64 (a
GGUF block). Its arithmetic is the blocked form of NVFP4-GEMM-8: every product is exact, the
fp32 additions round.
"""

from __future__ import annotations

import ctypes

import numpy as np

from hscale.backends.interop import common
from hscale.backends.interop.ggml_nvfp4 import LIBRARY, library_path
from hscale.reference.gguf_blocks import BLOCK, to_gguf_blocks

CPU_LIBRARY = "libggml-cpu.so"
GGML_TYPE_F32 = 0
GGML_TYPE_NVFP4 = 40  # ggml/include/ggml.h
FUNCTIONS = ("ggml_init", "ggml_free", "ggml_new_tensor_1d", "ggml_new_tensor_2d",
             "ggml_get_data", "ggml_nbytes", "ggml_mul_mat", "ggml_mul", "ggml_new_graph",
             "ggml_build_forward_expand", "ggml_tensor_overhead", "ggml_graph_overhead")


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


class _Ggml:
    """The functions of libggml-base and libggml-cpu, typed."""

    def __init__(self):
        base_path = library_path()
        base = ctypes.CDLL(str(base_path), mode=ctypes.RTLD_GLOBAL)
        cpu = ctypes.CDLL(str(base_path.with_name(CPU_LIBRARY)), mode=ctypes.RTLD_GLOBAL)
        p, i64, size = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
        signatures = {
            "ggml_init": (p, [_InitParams]), "ggml_free": (None, [p]),
            "ggml_new_tensor_1d": (p, [p, ctypes.c_int, i64]),
            "ggml_new_tensor_2d": (p, [p, ctypes.c_int, i64, i64]),
            "ggml_get_data": (p, [p]), "ggml_nbytes": (size, [p]),
            "ggml_mul_mat": (p, [p, p, p]), "ggml_mul": (p, [p, p, p]),
            "ggml_new_graph": (p, [p]), "ggml_build_forward_expand": (None, [p, p]),
            "ggml_tensor_overhead": (size, []), "ggml_graph_overhead": (size, [])}
        for name, (restype, argtypes) in signatures.items():
            function = getattr(base, name)
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name, function)
        self.ggml_cpu_init = cpu.ggml_cpu_init
        self.ggml_cpu_init.restype, self.ggml_cpu_init.argtypes = None, []
        compute = cpu.ggml_graph_compute_with_ctx
        compute.restype, compute.argtypes = ctypes.c_int, [p, p, ctypes.c_int]
        self.ggml_graph_compute_with_ctx = compute
        self.ggml_cpu_init()

    def write(self, tensor, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        if self.ggml_nbytes(tensor) != data.nbytes:
            raise RuntimeError(f"ggml tensor of {self.ggml_nbytes(tensor)} bytes, "
                               f"{data.nbytes} given")
        ctypes.memmove(self.ggml_get_data(tensor), data.ctypes.data, data.nbytes)

    def read(self, tensor, shape) -> np.ndarray:
        out = np.empty(shape, np.float32)
        ctypes.memmove(out.ctypes.data, self.ggml_get_data(tensor), out.nbytes)
        return out


_LIBRARY: _Ggml | None = None


def _library() -> _Ggml:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = _Ggml()
    return _LIBRARY


class GgmlGemm:
    name = "ggml-nvfp4-gemm"
    kinds = frozenset({"gemm"})
    gemm_model = "fp32"
    gemm_out_dtypes = ("float32",)
    gemm_activations = ("q8_0",)
    gemm_scale_layout = "row-major"
    gemm_shape_multiple = (1, 1, BLOCK)

    @property
    def version(self) -> str:
        return common.dist_version("llama-cpp-python")

    def available(self):
        if library_path() is None:
            return False, (f"llama-cpp-python is not installed (its llama_cpp/lib/{LIBRARY} and "
                           f"{CPU_LIBRARY} hold ggml)")
        try:
            _library()
        except (OSError, AttributeError) as exc:
            return False, f"cannot load ggml from {library_path().parent}: {exc}"
        return True, ""

    def gemm(self, a, b, *, out_dtype="float32"):
        if out_dtype != "float32":
            raise ValueError(f"out_dtype {out_dtype!r}: ggml's matmul outputs float32")
        x = np.ascontiguousarray(a, dtype=np.float32)
        blocks = to_gguf_blocks(np.asarray(b.packed, np.uint8), np.asarray(b.scale_bytes, np.uint8))
        rows_w, k = b.rows, b.cols
        rows_x = x.shape[0]
        ggml = _library()
        memory = (4 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead() + blocks.nbytes
                  + x.nbytes + 8 * rows_x * rows_w + 2 * x.nbytes + (1 << 20))
        context = ggml.ggml_init(_InitParams(memory, None, False))
        if not context:
            raise RuntimeError("ggml_init failed")
        try:
            weight = ggml.ggml_new_tensor_2d(context, GGML_TYPE_NVFP4, k, rows_w)
            activations = ggml.ggml_new_tensor_2d(context, GGML_TYPE_F32, k, rows_x)
            scale = ggml.ggml_new_tensor_1d(context, GGML_TYPE_F32, 1)
            ggml.write(weight, blocks)
            ggml.write(activations, x)
            ggml.write(scale, np.array([b.global_scale], np.float32))
            out = ggml.ggml_mul(context, ggml.ggml_mul_mat(context, weight, activations), scale)
            graph = ggml.ggml_new_graph(context)
            ggml.ggml_build_forward_expand(graph, out)
            status = ggml.ggml_graph_compute_with_ctx(context, graph, 1)
            if status != 0:
                raise RuntimeError(f"ggml_graph_compute_with_ctx returned status {status}")
            return ggml.read(out, (rows_x, rows_w))
        finally:
            ggml.ggml_free(context)


def create():
    """ggml's ggml_mul(ggml_mul_mat(W nvfp4, X f32), W.scale) on the CPU: weight-only, Q8_0."""
    return GgmlGemm()
