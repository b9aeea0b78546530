"""PyTorch's own dequantize-then-matmul behind the gemm kind: the weight-only path that the
Python libraries' fake-quantized Linears and the engines' emulation modes run on GPUs without
FP4 tensor cores (Hopper, Ampere) and on CPUs. No FP4 library is involved: the NVFP4 weight is
dequantized with its global scale folded in (code value times E4M3 value in fp32, exact, times
s_g, rounded once to fp32, NVFP4-DEQ-1, then to bfloat16: two roundings) and multiplied by
bfloat16 activations with ``torch.nn.functional.linear`` on the backend's device.

On a CUDA device that GEMM is cuBLAS's, and PyTorch lets cuBLAS reduce split-K partial sums in
reduced precision by default (``torch.backends.cuda.matmul.allow_bf16_reduced_precision_
reduction = True``): ``create`` runs PyTorch's default, ``create_fp32_reduction`` turns the
flag off for the call. Both declare the fp32 model with the global scale folded into bfloat16
elements after at most two roundings; whether cuBLAS's reduced-precision reduction stays within
it is what the suite measures (docs/interop.md). On the CPU the flag changes nothing.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference import E2M1_VALUES, SCALE_BYTE_VALUES
from hscale.reference.constants import GROUP_SIZE

MODEL = {"accumulator": "float32", "global_scales": "elements", "element_dtype": "bfloat16",
         "element_roundings": 2}


class TorchDequantGemm:
    kinds = frozenset({"gemm"})
    gemm_model = MODEL
    gemm_out_dtypes = ("bfloat16",)
    gemm_activations = ("bfloat16",)
    gemm_scale_layout = "row-major"

    def __init__(self, reduced_precision_reduction: bool = True):
        self.reduced = reduced_precision_reduction
        self.name = ("torch-dequant-linear" if reduced_precision_reduction
                     else "torch-dequant-linear-fp32-reduction")

    @property
    def device(self) -> str:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def version(self) -> str:
        import torch
        where = (torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU")
        return f"{common.dist_version()} on {where}"

    def available(self):
        return common.module_status("torch")

    def gemm(self, a, b, *, out_dtype="bfloat16"):
        import ml_dtypes
        import torch

        if out_dtype != "bfloat16":
            raise ValueError(f"out_dtype {out_dtype!r}: this path computes in bfloat16")
        device = self.device
        codes = np.empty((b.rows, b.cols), np.uint8)
        codes[:, 0::2], codes[:, 1::2] = b.packed & 0xF, b.packed >> 4
        values = (E2M1_VALUES[codes] * np.repeat(SCALE_BYTE_VALUES[b.scale_bytes], GROUP_SIZE,
                                                  axis=1)).astype(np.float32)  # exact
        weight = torch.from_numpy(values).to(device) * torch.tensor(
            float(b.global_scale), dtype=torch.float32, device=device)  # NVFP4-DEQ-1, one rounding
        weight = weight.to(torch.bfloat16)
        x = common.torch_weight(np.asarray(a), accepts=("bfloat16",)).to(device)
        flags = torch.backends.cuda.matmul
        previous = flags.allow_bf16_reduced_precision_reduction
        flags.allow_bf16_reduced_precision_reduction = self.reduced
        try:
            out = torch.nn.functional.linear(x, weight)
        finally:
            flags.allow_bf16_reduced_precision_reduction = previous
        out = out.detach().to(torch.bfloat16).cpu().contiguous()
        return out.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()


def create():
    """F.linear of bfloat16 activations and the dequantized bfloat16 weight, PyTorch's default
    (on CUDA: cuBLAS may reduce split-K partial sums in reduced precision)."""
    return TorchDequantGemm(reduced_precision_reduction=True)


def create_fp32_reduction():
    """The same with allow_bf16_reduced_precision_reduction off for the call."""
    return TorchDequantGemm(reduced_precision_reduction=False)
