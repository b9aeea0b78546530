"""The GEMM of the torch backends (spec section 10), in torch on the backend's device.

Each operand is dequantized without its global scale: an E2M1 value times its block's E4M3
value is exact in fp32 (NVFP4-GEMM-3), as activations of float32, bfloat16 and float16 are. The
product is one fp32 ``torch.matmul`` (its summation order is the BLAS library's, TF32 off: any
order is admitted by the fp32 model, NVFP4-GEMM-4), then ``fp32(fp32(gA gB) * S)`` and the
output dtype's round-to-nearest-even (NVFP4-GEMM-5, -5).
"""

from __future__ import annotations

import numpy as np

from hscale.reference import E2M1_VALUES, SCALE_BYTE_VALUES
from hscale.reference.constants import GROUP_SIZE

from .gemm import read_operand

OUT_DTYPES = ("float32", "bfloat16", "float16")


def _dequantized(torch, operand, device):
    """fp32 (rows, K): codes times their block's scale, exact; activations widened exactly."""
    if isinstance(operand, np.ndarray):
        if operand.dtype.name == "bfloat16":
            tensor = torch.from_numpy(operand.view(np.int16).copy()).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(np.ascontiguousarray(operand))
        return tensor.to(device=device, dtype=torch.float32)
    values = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    scales = torch.tensor(SCALE_BYTE_VALUES, dtype=torch.float32, device=device)
    codes = torch.from_numpy(operand.codes.astype(np.int64)).to(device)
    scale_bytes = torch.from_numpy(operand.scale_bytes.astype(np.int64)).to(device)
    return values[codes] * scales[scale_bytes].repeat_interleave(GROUP_SIZE, dim=1)


def gemm(torch, device: str, a, b, out_dtype: str = "float32") -> np.ndarray:
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype {out_dtype!r}: one of {', '.join(OUT_DTYPES)} "
                         "(spec NVFP4-GEMM-6)")
    a, b = read_operand(a), read_operand(b)
    g_a = np.float32(1.0) if isinstance(a, np.ndarray) else np.float32(a.global_scale)
    alpha = float(np.float32(g_a * np.float32(b.global_scale)))  # fp32(gA gB), NVFP4-GEMM-5
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 or bf16 passes
    try:
        s = torch.matmul(_dequantized(torch, a, device), _dequantized(torch, b, device).T)
    finally:
        torch.set_float32_matmul_precision(previous)
    d32 = s * torch.tensor(alpha, dtype=torch.float32, device=device)
    out = d32.to(getattr(torch, out_dtype)).cpu()
    if out_dtype == "bfloat16":
        import ml_dtypes
        return out.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return out.numpy()
