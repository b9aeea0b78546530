"""torchao's NVFP4 matmul on the CPU behind the gemm kind.

Library path called: ``torchao.prototype.mx_formats.nvfp4_tensor.NVFP4Tensor`` built from the
operands' own bytes (``NVFP4Tensor(qdata, scale, block_size=16, orig_dtype,
per_tensor_scale=...)``: packed codes with element 2k in the low nibble, E4M3 block scales
row-major, the global scale as ``per_tensor_scale``, a multiplier), then the tensor
subclass's own dispatch:

- ``create``: W4A4, ``torch.mm(A, B.t())`` of two NVFP4Tensors. Without activation-quantization
  settings on the weight torchao's ``nvfp4_mm`` dequantizes both operands
  (``NVFP4Tensor.dequantize``) and multiplies them with ``torch.mm``: the path that runs on the
  CPU (its block-scaled ``torch._scaled_mm`` path needs an SM100 GPU);
- ``create_weight_only``: ``torch.nn.functional.linear(x, W)`` with an NVFP4Tensor weight and no
  activation quantization: torchao's ``nvfp4_linear`` dequantizes the weight and calls
  ``F.linear``.

``NVFP4Tensor.dequantize`` folds the global scale into every element: ``fp32(per_tensor_scale *
e4m3)`` (``get_hp_scales``), times the E2M1 value in fp32, ``.to(orig_dtype)``: three roundings,
the last to bfloat16 (NVFP4-GEMM-5's ``elements`` placement). torch's CPU matmul then multiplies
bfloat16 elements (exact products in fp32) and accumulates in fp32 before rounding the output to
bfloat16. The adapter declares exactly that: the fp32 model with the global scales folded into
bfloat16 elements after at most 3 roundings, bfloat16 operands and output.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common

LIBRARY_MODULE = "torchao.prototype.mx_formats.nvfp4_tensor"
MODEL = {"accumulator": "float32", "global_scales": "elements", "element_dtype": "bfloat16",
         "element_roundings": 3}


def _nvfp4_tensor(operand, orig_dtype):
    import torch
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

    qdata = torch.from_numpy(np.ascontiguousarray(operand.packed, dtype=np.uint8))
    scale = torch.from_numpy(np.ascontiguousarray(operand.scale_bytes, dtype=np.uint8)).view(
        torch.float8_e4m3fn)
    per_tensor_scale = torch.tensor(float(operand.global_scale), dtype=torch.float32)
    return NVFP4Tensor(qdata, scale, 16, orig_dtype, per_tensor_scale=per_tensor_scale,
                       is_swizzled_scales=False)


class TorchaoGemm:
    kinds = frozenset({"gemm"})
    gemm_model = MODEL
    gemm_out_dtypes = ("bfloat16",)
    gemm_scale_layout = "row-major"

    def __init__(self, weight_only: bool = False):
        self.weight_only = weight_only
        self.name = "torchao-nvfp4-linear" if weight_only else "torchao-nvfp4-mm"
        self.gemm_activations = ("bfloat16",) if weight_only else ("nvfp4",)

    @property
    def version(self) -> str:
        return common.dist_version("torchao")

    def available(self):
        return common.module_status(LIBRARY_MODULE)

    def gemm(self, a, b, *, out_dtype="bfloat16"):
        import ml_dtypes
        import torch

        if out_dtype != "bfloat16":
            raise ValueError(f"out_dtype {out_dtype!r}: this path computes in bfloat16")
        weight = _nvfp4_tensor(b, torch.bfloat16)
        if self.weight_only:
            x = common.torch_weight(np.asarray(a), accepts=("bfloat16",))
            out = torch.nn.functional.linear(x, weight)
        else:
            out = torch.mm(_nvfp4_tensor(a, torch.bfloat16), weight.t())
        out = out.detach().to(torch.bfloat16).contiguous()
        return out.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()


def create():
    """torchao W4A4 on the CPU: torch.mm of two NVFP4Tensors (dequantize both, then mm)."""
    return TorchaoGemm(weight_only=False)


def create_weight_only():
    """torchao weight-only: F.linear(bfloat16 x, NVFP4Tensor weight)."""
    return TorchaoGemm(weight_only=True)
