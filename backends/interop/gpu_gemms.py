"""The block-scaled NVFP4 GEMMs of GPU libraries behind the gemm kind (W4A4, FP4 tensor cores).

They need an NVIDIA GPU of compute capability 10.x or 12.x (Blackwell: the FP4 MMA,
``mma ... kind::mxf4nvf4.block_scale``); on any other machine, this one included (no GPU), and
on Hopper (9.0), ``available()`` says so and the suite skips. Each adapter calls the library's
production entry point, written against its source:

=============================  ==============================================================
module:factory                 library call
=============================  ==============================================================
create_torch_scaled_mm         ``torch.nn.functional.scaled_mm(a, b.t(), [sA, gA],
                               [BlockWise1x16, TensorWise], [sB, gB], [BlockWise1x16,
                               TensorWise], swizzle_a=[SWIZZLE_32_4_4, NO_SWIZZLE], ...,
                               output_dtype=...)`` (cuBLASLt's block-scaled GEMM; torch 2.10
                               and later; the two-level NVFP4 sample of torch's own
                               ``sample_inputs_scaled_mm_v2``)
create_flashinfer              ``flashinfer.mm_fp4(a, b.T, sA, sB.T, alpha, out_dtype,
                               backend="cutlass")`` (flashinfer/gemm, ``mm_fp4``; also
                               ``cudnn`` and ``trtllm`` backends)
create_vllm_cutlass            ``vllm._custom_ops.cutlass_scaled_fp4_mm(a, b, sA, sB, alpha,
                               out_dtype)`` (csrc/quantization/fp4/nvfp4_scaled_mm_kernels.cu)
=============================  ==============================================================

Every one takes packed codes (element 2k in the low nibble) for both operands, both operands'
E4M3 scale bytes in the 128x4 swizzled layout (NVFP4-PACK-3), and, for FlashInfer and vLLM, the
product of the two global scales as ``alpha`` (an fp32 tensor: ``fp32(gA gB)``, NVFP4-GEMM-5),
applied to the fp32 accumulator in the epilogue. They declare the fp32 accumulation model
(PTX documents the block-scale MMA's accumulator as f32; its internal width is not documented,
which is what a run would measure), bfloat16 and float16 outputs, and K a multiple of 32.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common

BLACKWELL = (10, 0)
REASON = ("needs an NVIDIA GPU with FP4 tensor cores (compute capability 10.x or 12.x, "
          "Blackwell)")


def _gpu_status(*modules: str) -> tuple[bool, str]:
    ok, reason = common.module_status("torch", *modules)
    if not ok:
        return False, reason
    import torch

    if not torch.cuda.is_available():
        return False, f"{REASON}; torch {torch.__version__} sees no CUDA device here"
    capability = torch.cuda.get_device_capability()
    if capability < BLACKWELL:
        return False, (f"{REASON}; this device, {torch.cuda.get_device_name()}, is compute "
                       f"capability {capability[0]}.{capability[1]}")
    return True, ""


def _packed(torch, operand):
    return torch.from_numpy(np.ascontiguousarray(operand.packed, dtype=np.uint8)).cuda()


def _scales(torch, operand):
    """The swizzled buffer as the libraries hold it: (rows padded to 128, scale columns padded
    to 4), float8_e4m3fn, on the GPU."""
    rows = -(-operand.rows // 128) * 128
    cols = -(-(operand.cols // 16) // 4) * 4
    flat = np.ascontiguousarray(operand.scale_bytes, dtype=np.uint8).reshape(rows, cols)
    return torch.from_numpy(flat).cuda().view(torch.float8_e4m3fn)


def _to_numpy(torch, tensor) -> np.ndarray:
    import ml_dtypes

    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return tensor.numpy().copy()


class _GpuGemm:
    kinds = frozenset({"gemm"})
    gemm_model = "fp32"
    gemm_out_dtypes = ("bfloat16", "float16")
    gemm_activations = ("nvfp4",)
    gemm_scale_layout = "swizzled-128x4"
    gemm_shape_multiple = (1, 1, 32)
    modules: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        return common.dist_version(*self.distributions)

    def available(self):
        return _gpu_status(*self.modules)

    def gemm(self, a, b, *, out_dtype="bfloat16"):
        import torch

        if out_dtype not in self.gemm_out_dtypes:
            raise ValueError(f"out_dtype {out_dtype!r}: one of {', '.join(self.gemm_out_dtypes)}")
        alpha = np.float32(np.float32(a.global_scale) * np.float32(b.global_scale))
        return _to_numpy(torch, self._call(torch, a, b, alpha, getattr(torch, out_dtype)))


class TorchScaledMm(_GpuGemm):
    name = "torch-scaled-mm-nvfp4"
    modules = ("torch.nn.functional",)
    distributions = ()
    gemm_out_dtypes = ("bfloat16", "float16", "float32")

    def _call(self, torch, a, b, alpha, out_dtype):
        from torch.nn.functional import ScalingType, SwizzleType, scaled_mm

        mat_a = _packed(torch, a).view(torch.float4_e2m1fn_x2)
        mat_b = _packed(torch, b).view(torch.float4_e2m1fn_x2).t()  # (K/2, N), column-major
        g_a = torch.tensor([float(a.global_scale)], dtype=torch.float32, device="cuda")
        g_b = torch.tensor([float(b.global_scale)], dtype=torch.float32, device="cuda")
        recipe = [ScalingType.BlockWise1x16, ScalingType.TensorWise]
        swizzle = [SwizzleType.SWIZZLE_32_4_4, SwizzleType.NO_SWIZZLE]
        return scaled_mm(mat_a, mat_b, [_scales(torch, a).reshape(-1), g_a], recipe,
                         [_scales(torch, b).reshape(-1), g_b], recipe, swizzle_a=swizzle,
                         swizzle_b=swizzle, output_dtype=out_dtype)


class FlashinferMmFp4(_GpuGemm):
    name = "flashinfer-mm-fp4"
    modules = ("flashinfer",)
    distributions = ("flashinfer-python",)

    def __init__(self, backend: str = "cutlass"):
        self.backend = backend
        self.name = f"flashinfer-mm-fp4-{backend}"

    def _call(self, torch, a, b, alpha, out_dtype):
        from flashinfer import mm_fp4

        return mm_fp4(_packed(torch, a), _packed(torch, b).T, _scales(torch, a),
                      _scales(torch, b).T, torch.tensor(float(alpha), device="cuda"), out_dtype,
                      backend=self.backend)


class VllmCutlassFp4(_GpuGemm):
    name = "vllm-cutlass-scaled-fp4-mm"
    modules = ("vllm._custom_ops",)
    distributions = ("vllm",)

    def _call(self, torch, a, b, alpha, out_dtype):
        from vllm import _custom_ops as ops

        return ops.cutlass_scaled_fp4_mm(_packed(torch, a), _packed(torch, b), _scales(torch, a),
                                         _scales(torch, b),
                                         torch.tensor(float(alpha), device="cuda"), out_dtype)


def create_torch_scaled_mm():
    """cuBLASLt's block-scaled NVFP4 GEMM through torch.nn.functional.scaled_mm (SM100)."""
    return TorchScaledMm()


def create_flashinfer():
    """FlashInfer's mm_fp4 with its CUTLASS backend (SM100)."""
    return FlashinferMmFp4("cutlass")


def create_vllm_cutlass():
    """vLLM's cutlass_scaled_fp4_mm (SM100)."""
    return VllmCutlassFp4()
