"""cuBLAS's GEMMs on the dequantized NVFP4 operands of section 10, measured on a lent NVIDIA GPU
against the bound of the fp32 accumulation model (NVFP4-GEMM-4): the figures docs/interop.md
quotes (docs/gpu/h200-gemm/*.json).

    python tools/gemm_gpu_checks.py run DIR      # DIR/bf16_reduction.json, DIR/tf32_fp16.json
    python tools/gemm_gpu_checks.py record DIR   # DIR/*.json into docs/interop-results.json
    python tools/interop_docs.py --render        # docs/interop.md with them

Each entry is [outside, differing, outputs]: the outputs farther from the exact sum S than the
fp32 model's bound (plus one output ulp for a bfloat16 or float16 output), the outputs not
equal to S at all, and the outputs. bf16_reduction.json: bfloat16 dequantize-then-linear with
cuBLAS's reduced-precision split-K reduction on and off; tf32_fp16.json: fp32 GEMMs of NVFP4
elements (and of fp32 activations times NVFP4 elements) with TF32 on and off, and float16
GEMMs with the fp16 reduction on and off.

Imports nothing of the kit (a lent machine receives the main checkout, so the script travels
as it is). The exact sums are float64 matmuls of operands whose products are exact in float64
(bfloat16, float16 or NVFP4 elements, or float32 activations times NVFP4 elements: at most 30
bits), each sum off by at most K 2^-53 sum|t|, far below the fp32 bound ((1 + 2^-24)^d - 1)
sum|t| it is compared with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

E2M1 = [0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6]


def nvfp4_elements(torch, rows, k, low, high):
    """Random E2M1 values times E4M3 scales of 4 bits, 2^[low, high): NVFP4 elements."""
    e2 = torch.tensor(E2M1, dtype=torch.float64)
    codes = torch.randint(0, 16, (rows, k))
    scales = (2.0 ** torch.randint(low, high, (rows, k // 16)).double()
              * torch.randint(8, 16, (rows, k // 16)).double() / 8).repeat_interleave(16, 1)
    return e2[codes] * scales


def judged(torch, observed, exact, magnitudes, roundings, output_ulp_bits=None):
    """[outside the fp32 bound (plus one output ulp for a narrow output), differing, outputs]."""
    bound = ((1 + 2.0 ** -24) ** roundings - 1) * magnitudes
    if output_ulp_bits is not None:
        bound = bound + 2.0 ** (torch.floor(torch.log2(exact.abs().clamp(min=2.0 ** -126)))
                                - output_ulp_bits)
    return [int(((observed - exact).abs() > bound).sum()), int((observed != exact).sum()),
            observed.numel()]


def bf16(torch) -> dict:
    torch.manual_seed(0)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for reduced in (True, False):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
        for m, k in ((1, 4096), (8, 4096), (1, 16384), (8, 16384), (1, 65536), (8, 65536),
                     (1, 262144)):
            w = (nvfp4_elements(torch, 256, k, -3, 3) * 2.0 ** -9).to(torch.bfloat16)
            x = (torch.randint(-127, 128, (m, k)).double() * 2.0 ** torch.randint(
                -12, 1, (m, k // 32)).double().repeat_interleave(32, 1)).to(torch.bfloat16)
            d = torch.nn.functional.linear(x.cuda(), w.cuda()).double().cpu()
            s, a = x.double() @ w.double().T, x.double().abs() @ w.double().abs().T
            out[f"bf16 reduced={reduced} {m}x256x{k}"] = judged(torch, d, s, a, k - 1, 7)
    return out


def tf32(torch) -> dict:
    torch.manual_seed(1)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for allow in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = allow
        for m, n, k, low, high in ((64, 64, 4096, -9, 9), (8, 256, 65536, -9, 9),
                                   (64, 64, 64, -2, 1)):
            a, b = nvfp4_elements(torch, m, k, low, high), nvfp4_elements(torch, n, k, low, high)
            d = (a.float().cuda() @ b.float().cuda().T).double().cpu()
            out[f"nvfp4 x nvfp4 tf32={allow} {m}x{n}x{k}"] = judged(
                torch, d, a @ b.T, a.abs() @ b.abs().T, k - 1)
            x = torch.randn(m, k, dtype=torch.float64).float().double()
            d = (x.float().cuda() @ b.float().cuda().T).double().cpu()
            # each product of a float32 by an NVFP4 element is rounded to fp32 too: K + 1
            out[f"fp32 x nvfp4 tf32={allow} {m}x{n}x{k}"] = judged(
                torch, d, x @ b.T, x.abs() @ b.abs().T, k + 1)
    torch.backends.cuda.matmul.allow_tf32 = False
    for reduced in (True, False):
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = reduced
        for m, k in ((1, 16384), (8, 65536)):
            a, b = nvfp4_elements(torch, m, k, -6, -2), nvfp4_elements(torch, 256, k, -6, -2)
            d = torch.nn.functional.linear(a.half().cuda(), b.half().cuda()).double().cpu()
            out[f"fp16 reduced={reduced} {m}x256x{k}"] = judged(
                torch, d, a @ b.T, a.abs() @ b.abs().T, k - 1, 10)
    return out


def record(directory: Path) -> None:
    docs = Path(__file__).resolve().parent.parent / "docs"
    results_path = docs / "interop-results.json"
    results = json.loads(results_path.read_text())
    results.setdefault("gemm", {})["gpu"] = {path.stem: json.loads(path.read_text())
                                             for path in sorted(Path(directory).glob("*.json"))}
    results_path.write_text(json.dumps(results, indent=1) + "\n")  # as hscale interop writes


if __name__ == "__main__":
    command, target = sys.argv[1], Path(sys.argv[2])
    if command == "record":
        record(target)
    else:
        import torch
        target.mkdir(parents=True, exist_ok=True)
        for name, measure in (("bf16_reduction", bf16), ("tf32_fp16", tf32)):
            (target / f"{name}.json").write_text(json.dumps(measure(torch), indent=1) + "\n")
