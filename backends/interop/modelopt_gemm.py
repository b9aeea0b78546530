"""NVIDIA ModelOpt's NVFP4 dequantize-then-matmul (its fake-quantized GEMM) behind the gemm
kind, W4A4 on the CPU.

Library path called: ``modelopt.torch.quantization.qtensor.nvfp4_tensor.NVFP4QTensor(shape,
torch.bfloat16, packed).dequantize(torch.bfloat16, scale=<float8_e4m3fn block scales>,
double_scale=<fp32 global scale>, block_sizes={-1: 16})`` for each operand (the decoder behind
ModelOpt's exported checkpoints and its ``QTensorWrapper`` weights), then
``torch.nn.functional.linear(a, b)``, the matmul a fake-quantized Linear runs.

``dequantize`` computes ``fp32(e4m3 * double_scale)`` per block, times the E2M1 value in fp32,
``.to(bfloat16)``: the global scale folded into each element after three roundings, the last to
bfloat16 (NVFP4-GEMM-5's ``elements`` placement); torch's CPU matmul of bfloat16 operands
accumulates in fp32 and rounds the output to bfloat16. The adapter declares that model.
"""

from __future__ import annotations

import warnings

import numpy as np

from hscale.backends.interop import common

LIBRARY_MODULE = "modelopt.torch.quantization.qtensor.nvfp4_tensor"
MODEL = {"accumulator": "float32", "global_scales": "elements", "element_dtype": "bfloat16",
         "element_roundings": 3}


def _dequantized(operand):
    import torch
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    packed = torch.from_numpy(np.ascontiguousarray(operand.packed, dtype=np.uint8))
    scale = torch.from_numpy(np.ascontiguousarray(operand.scale_bytes, dtype=np.uint8)).view(
        torch.float8_e4m3fn)
    qtensor = NVFP4QTensor(torch.Size((operand.rows, operand.cols)), torch.bfloat16, packed)
    return qtensor.dequantize(torch.bfloat16, scale=scale,
                              double_scale=torch.tensor(float(operand.global_scale)),
                              block_sizes={-1: 16})


class ModeloptGemm:
    name = "modelopt-nvfp4-fake-quant-gemm"
    kinds = frozenset({"gemm"})
    gemm_model = MODEL
    gemm_out_dtypes = ("bfloat16",)
    gemm_activations = ("nvfp4",)
    gemm_scale_layout = "row-major"

    @property
    def version(self) -> str:
        return common.dist_version("nvidia-modelopt")

    def available(self):
        return common.module_status(LIBRARY_MODULE, quiet=True)

    def gemm(self, a, b, *, out_dtype="bfloat16"):
        import ml_dtypes
        import torch

        if out_dtype != "bfloat16":
            raise ValueError(f"out_dtype {out_dtype!r}: this path computes in bfloat16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "transformers X is not tested with modelopt"
            out = torch.nn.functional.linear(_dequantized(a), _dequantized(b))
        out = out.detach().to(torch.bfloat16).contiguous()
        return out.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()


def create():
    """ModelOpt's NVFP4QTensor.dequantize of both operands, then F.linear (bfloat16)."""
    return ModeloptGemm()
