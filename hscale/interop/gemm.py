"""The real GEMM paths through the gemm kind of the suite, for ``hscale interop`` and the GEMM
section of docs/interop.md.

For each GEMM adapter of ``hscale.backends.interop`` whose library runs here:

1. the suite's GEMM tests (``-k test_gemm``: the hand-worked products, the Hypothesis GEMMs,
   every level-0 GEMM vector case) under the model the adapter declares, in a subprocess as a
   vendor runs it, wall time recorded;
2. the same level-0 GEMM vectors judged in-process under the spec's own model (fp32, the global
   scales on the fp32 accumulator): how many output elements differ from the spec's result at
   all, how many lie outside the fp32 model's interval and the clause each breaks, and the
   first of each clause in hex.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import PREFIX, library_cells, suite_argv


@dataclass(frozen=True)
class GemmPath:
    label: str
    spec: str      # module:factory under hscale.backends.interop
    library: str   # the pip distribution
    calls: str


GEMM_PATHS = (
    GemmPath("ggml (llama.cpp) matmul, CPU", "ggml_gemm:create", "llama-cpp-python",
             "ggml_mul(ggml_mul_mat(W nvfp4, X f32), W.scale), one thread: X to Q8_0 "
             "(quantize_row_q8_0), ggml_vec_dot_nvfp4_q8_0"),
    GemmPath("torchao NVFP4Tensor mm (W4A4, dequantized)", "torchao_gemm:create", "torchao",
             "torch.mm(NVFP4Tensor, NVFP4Tensor.t()): nvfp4_mm dequantizes both "
             "(NVFP4Tensor.dequantize), torch.mm in bfloat16"),
    GemmPath("torchao NVFP4Tensor linear (weight-only)", "torchao_gemm:create_weight_only",
             "torchao", "F.linear(bfloat16 x, NVFP4Tensor): nvfp4_linear dequantizes the weight, "
             "F.linear"),
    GemmPath("ModelOpt fake-quant GEMM (W4A4)", "modelopt_gemm:create", "nvidia-modelopt",
             "NVFP4QTensor.dequantize of both operands, F.linear in bfloat16"),
)
#: The GPU GEMMs written against their libraries' APIs, and why they are not measured here.
GPU_GEMMS = (
    ("cuBLASLt block-scaled NVFP4 GEMM (torch.nn.functional.scaled_mm)",
     "gpu_gemms:create_torch_scaled_mm"),
    ("FlashInfer mm_fp4 (CUTLASS backend)", "gpu_gemms:create_flashinfer"),
    ("vLLM cutlass_scaled_fp4_mm", "gpu_gemms:create_vllm_cutlass"),
)
GPU_REASON = ("FP4 tensor cores need an NVIDIA GPU of compute capability 10.x or 12.x "
              "(Blackwell); none here (the adapter's available() says so), and the lent GPU "
              "machine is Hopper (9.0) without network to install flashinfer or vllm")


def run_gemm_suite(spec: str, work: Path) -> dict:
    """The suite's GEMM tests on the adapter, in a subprocess: its certificate and wall time."""
    report = work / "gemm.json"
    cmd = suite_argv(spec, "gemm", report)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=3600,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    seconds = time.perf_counter() - start
    if not report.is_file():
        return {"error": (done.stdout + done.stderr)[-2000:], "seconds": seconds}
    cert = json.loads(report.read_text())
    gemm = cert["kinds"].get("gemm", {})
    return {"verdict": gemm.get("verdict", cert["verdict"]), "tests": gemm.get("tests", {}),
            "seconds": round(seconds, 1), "declarations": gemm.get("declarations", {}),
            "outputs": gemm.get("outputs", {}), "clauses": gemm.get("clauses", {})}


def spec_differences(backend) -> dict:
    """The level-0 GEMM vectors on the backend (each in its declared domain), judged under the
    spec's own model: elements differing from the spec's result, and outside its interval."""
    from hscale.judge.gemm import GemmDomain, gemm_arguments, judge_gemm, observe_gemm, out_hex
    from hscale.vectors.gemm_files import stored_cases

    domain = GemmDomain.of(backend)
    counts, clauses, examples, skipped = Counter(), Counter(), {}, Counter()
    for case_id, case in stored_cases().items():
        if case.out_dtype not in domain.out_dtypes:
            case = case.with_(out_dtype=domain.out_dtypes[0])
        run_case, why = domain.in_domain(case)
        if run_case is None:
            skipped[why[0]] += 1
            continue
        a, b = gemm_arguments(run_case, domain)
        observed, findings = observe_gemm(backend.gemm(a, b, out_dtype=run_case.out_dtype),
                                          run_case)
        if findings:
            clauses[findings[0].clause] += 1
            continue
        m, n, _ = case.shape
        reference = run_case.reference_outputs.astype(np.float64)[:m, :n]
        mine = observed[:m, :n]
        counts["elements"] += m * n
        counts["differing"] += int(
            ((mine != reference) & ~(np.isnan(mine) & np.isnan(reference))).sum())
        diagnosis = judge_gemm(run_case, observed, "fp32", domain)
        for finding in diagnosis.findings:
            clauses[finding.clause] += 1
            if finding.clause not in examples:
                i, j = finding.output
                examples[finding.clause] = {
                    "case": case_id, "element": [i, j], "out_dtype": run_case.out_dtype,
                    "spec": out_hex(float(reference[i, j]), run_case.out_dtype),
                    "observed": out_hex(float(mine[i, j]), run_case.out_dtype),
                    "finding": finding.render()}
        for clause, more in diagnosis.unlisted.items():
            clauses[clause] += more
    return {"counts": dict(counts), "outside_fp32": dict(clauses), "examples": examples,
            "skipped": dict(skipped)}


def measure_gemm(path: GemmPath, out=sys.stdout) -> dict:
    from hscale.backends import load
    from hscale.backends.interop.common import dist_version

    entry = {"label": path.label, "adapter": PREFIX + path.spec, "calls": path.calls,
             "version": dist_version(path.library), "kind": "gemm",
             "environment": f"Python {platform.python_version()}, {platform.machine()}",
             "date": datetime.date.today().isoformat()}
    backend = load(PREFIX + path.spec)
    ok, reason = backend.available()
    if not ok:
        entry["not_run"] = reason
        return entry
    print(f"[{path.label}] the suite's GEMM tests ...", file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="hscale-interop-gemm-") as work:
        entry["suite"] = run_gemm_suite(path.spec, Path(work))
    print(f"[{path.label}] {entry['suite'].get('verdict')} ({entry['suite']['seconds']} s); the "
          "GEMM vectors under the spec's fp32 model ...", file=out, flush=True)
    entry["spec_model"] = spec_differences(backend)
    return entry


def render_gemm(results: dict) -> list[str]:
    """The GEMM section of docs/interop.md from ``results["gemm"]``."""
    lines = ["## GEMMs", "",
             "Each real GEMM path behind an adapter of the gemm kind (docs/spec.md section 10): "
             "the suite's GEMM tests under the accumulation model the adapter declares (what "
             "the library does), then the level-0 GEMM vectors under the spec's own model "
             "(fp32 accumulation, the global scales on the fp32 accumulator): how many outputs "
             "differ from the spec's result, how many lie outside the fp32 model's interval "
             "and the clause each breaks. Run again with `python tools/interop_docs.py "
             "--gemm`.", "",
             "| path | adapter | version | calls | declared model | verdict under it | outputs "
             "judged (bit for bit) | level-0 GEMM vectors: differ from the spec / outside its "
             "fp32 model |",
             "|---|---|---|---|---|---|---|---|"]
    entries = [results[p.label] for p in GEMM_PATHS if p.label in results]
    for e in entries:
        if "suite" not in e:
            lines.append(f"{library_cells(e)} | not run: {e.get('not_run', '')} | | |")
            continue
        suite, spec = e["suite"], e["spec_model"]
        model = suite["declarations"].get("gemm_model", {}).get("description", "?")
        tests = suite.get("tests", {})
        outputs = suite.get("outputs", {})
        counts = spec["counts"]
        outside = ", ".join(f"{c} {n}" for c, n in sorted(spec["outside_fp32"].items())) \
            or "none"
        lines.append(
            f"{library_cells(e)} {model} | "
            f"**{suite['verdict']}** ({tests.get('passed', 0)} passed, {tests.get('failed', 0)} "
            f"failed, {tests.get('skipped', 0)} skipped; {suite['seconds']:.0f} s) | "
            f"{outputs.get('output_elements_judged', 0):,} "
            f"({outputs.get('of_them_with_one_admissible_value', 0):,}) | "
            f"{counts.get('differing', 0)} of "
            f"{counts.get('elements', 0)} / {outside} |")
    for e in entries:
        examples = e.get("spec_model", {}).get("examples", {})
        if not examples:
            continue
        lines += ["", f"{e['label']} ({e['version']}; {e['environment']}, {e['date']}): under "
                  "the spec's fp32 model, the first output of each clause it breaks (the "
                  "output's bits; the spec's result; the finding):", "", "```"]
        for clause, ex in sorted(examples.items()):
            lines += [f"{clause}: case {ex['case']} element {tuple(ex['element'])} "
                      f"({ex['out_dtype']}): spec {ex['spec']}, observed {ex['observed']}",
                      f"  {ex['finding'][:600]}"]
        lines.append("```")
    lines += render_gemm_gpu(results.get("gpu", {}))
    lines += ["", "Not run here (adapters written against the real APIs, "
              "`hscale.backends.interop.gpu_gemms`): " + "; ".join(
                  f"{name} (`{spec}`)" for name, spec in GPU_GEMMS) + f": {GPU_REASON}.", ""]
    return lines


def render_gemm_gpu(measured: dict) -> list[str]:
    """cuBLAS's GEMMs of dequantized NVFP4 operands on a lent GPU (``results["gemm"]["gpu"]``,
    from tools/gemm_gpu_checks.py): each row outside / differing / outputs."""
    if not measured:
        return []
    first = next(iter(measured.values()))
    lines = ["", f"cuBLAS on a lent {first['device']} (PyTorch {first['torch']}), the GEMM a "
             "dequantize-then-matmul path ends in, on random NVFP4 elements (`python "
             "tools/gemm_gpu_checks.py run DIR` there, `record DIR` here; "
             "docs/gpu/h200-gemm/): outputs outside the fp32 model's interval "
             "(NVFP4-GEMM-4; one output ulp added for a bfloat16 or float16 output), outputs "
             "differing from the exact sum at all, outputs. None of these is an NVFP4 kernel "
             "(the H200 is Hopper, compute capability 9.0, without FP4 tensor cores): they "
             "say how far cuBLAS's own accumulation stays inside the bound a kernel declaring "
             "the fp32 model is held to.", "",
             "| GEMM (M x N x K) | outside the fp32 model | differ from the exact sum | "
             "outputs |", "|---|---|---|---|"]
    for _, rows in sorted(measured.items()):
        for key, value in rows.items():
            if key in ("device", "torch"):
                continue
            outside, differing, outputs = value
            lines.append(f"| {key} | {outside:,} | {differing:,} | {outputs:,} |")
    lines += ["", "An NVFP4 element has at most 5 significant bits (2 of E2M1 times 4 of E4M3), "
              "so TF32's 11-bit significands hold NVFP4 x NVFP4 operands exactly and TF32 "
              "changes nothing there (the exactly summable 64 x 64 x 64 GEMM is bit-exact with "
              "TF32 on or off). fp32 activations are rounded to TF32 before they multiply: an "
              "error of up to 2^-11 of each product, beyond the fp32 model's bound "
              "((1 + 2^-24)^d - 1) sum|t| when K is short (64) and hidden under it when K is "
              "long (the bound grows with d, the errors of random signs partly cancel). A kernel "
              "declaring the fp32 model while multiplying in TF32 is caught by short "
              "reductions, which the suite's generated GEMMs include."]
    return lines
