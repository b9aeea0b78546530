"""The gemm kind on a lent NVIDIA GPU (a maintainer's measurement; docs/interop.md and
docs/gpu/ quote it):

    python tools/gemm_gpu_measure.py OUT_DIR

1. the suite's GEMM tests on ``torch-cuda`` (cuBLAS's fp32 GEMM of the exactly dequantized
   operands, TF32 off) and on PyTorch's dequantize-then-matmul in bfloat16
   (``torch_dequant_gemm``: cuBLAS with and without ``allow_bf16_reduced_precision_reduction``),
   certificates in OUT_DIR;
2. long weight-only GEMMs (M = 1 and 8, N = 256, K up to 65536) on the bfloat16 path, judged in
   process under its declared model: the split-K reductions cuBLAS chooses for such shapes are
   where a reduced-precision reduction would show;
3. what the Blackwell GEMM adapters say on this GPU (``available()``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np


def suite(backend: str, out: Path) -> dict:
    name = backend.rsplit(":", 1)[-1].replace(".", "-")
    cert = out / f"gemm-{name}.json"
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "hscale.conformance",
                           "-q", "-p", "no:cacheprovider", "-k", "test_gemm", "--backend",
                           backend, "--hypothesis-profile", "ci", "--certificate", str(cert)],
                          capture_output=True, text=True)
    (out / f"gemm-{name}.log").write_text(done.stdout[-20000:] + done.stderr[-5000:])
    if not cert.is_file():
        return {"error": done.stdout[-2000:] + done.stderr[-2000:]}
    report = json.loads(cert.read_text())
    gemm = report["kinds"]["gemm"]
    return {"verdict": gemm["verdict"], "tests": gemm["tests"], "outputs": gemm["outputs_text"],
            "clauses_broken": gemm["clauses_broken"], "seconds": round(time.time() - start, 1),
            "version": report["backend"]["version"]}


def long_weight_only(out: Path) -> dict:
    from hscale.backends import load
    from hscale.judge.cases import GemmCase
    from hscale.judge.gemm import GemmDomain, gemm_arguments, judge_gemm, observe_gemm
    from hscale.judge.gemm_builders import q8_0_activations, random_nvfp4

    results = {}
    for spec in ("torch_dequant_gemm:create", "torch_dequant_gemm:create_fp32_reduction"):
        backend = load("hscale.backends.interop." + spec)
        domain = GemmDomain.of(backend)
        rows = []
        for m, k in ((1, 4096), (8, 4096), (1, 16384), (8, 16384), (1, 65536), (8, 65536)):
            local = np.random.default_rng([m, k])
            x = q8_0_activations(local, m, k, -12, 0, power_of_two=True).astype(
                ml_dtypes.bfloat16)
            b = random_nvfp4(local, 256, k, 0x30, 0x48, np.float32(2.0 ** -9))
            case = GemmCase(x, b, "bfloat16", title=f"M={m} N=256 K={k}")
            a_, b_ = gemm_arguments(case, domain)
            start = time.time()
            observed, findings = observe_gemm(backend.gemm(a_, b_, out_dtype="bfloat16"), case)
            gemm_s = time.time() - start
            diagnosis = judge_gemm(case, observed, domain.model, domain)
            bad = Counter(f.clause for f in diagnosis.findings) + diagnosis.unlisted
            reference = case.reference_outputs.astype(np.float64)
            rows.append({"M": m, "N": 256, "K": k, "elements": int(observed.size),
                         "judged": diagnosis.elements, "outside": dict(bad),
                         "differ_from_spec_result": int((observed != reference).sum()),
                         "first_finding": diagnosis.findings[0].render()[:600]
                         if diagnosis.findings else "", "gemm_s": round(gemm_s, 3)})
            print(spec, rows[-1]["M"], rows[-1]["K"], rows[-1]["outside"], flush=True)
        results[spec] = rows
    return results


def blackwell_adapters() -> dict:
    from hscale.backends import load
    out = {}
    for factory in ("create_torch_scaled_mm", "create_flashinfer", "create_vllm_cutlass"):
        backend = load("hscale.backends.interop.gpu_gemms:" + factory)
        out[backend.name] = list(backend.available())
    return out


def main(out_dir: str) -> int:
    import torch
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "capability": list(torch.cuda.get_device_capability())
              if torch.cuda.is_available() else None,
              "torch": torch.__version__, "cuda": torch.version.cuda}
    print(report, flush=True)
    report["blackwell_adapters"] = blackwell_adapters()
    report["suite"] = {}
    for backend in ("torch-cuda", "hscale.backends.interop.torch_dequant_gemm:create",
                    "hscale.backends.interop.torch_dequant_gemm:create_fp32_reduction"):
        report["suite"][backend] = suite(backend, out)
        print(backend, report["suite"][backend].get("verdict"), flush=True)
        (out / "gemm_gpu.json").write_text(json.dumps(report, indent=1))
    report["long_weight_only"] = long_weight_only(out)
    (out / "gemm_gpu.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gemm-gpu-out"))
