"""The real GEMM paths behind the gemm kind (hscale.backends.interop: ggml_gemm, torchao_gemm,
modelopt_gemm, gpu_gemms), judged in-process on cases of the suite and the golden vectors: each
conforms under the model it declares, and what it does differently from the spec's own model
is named; the GPU GEMMs say why they cannot run here. docs/interop.md's GEMM section is rendered
from docs/interop-results.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hscale.backends import load
from hscale.judge.cases import GemmCase
from hscale.judge.gemm import GemmDomain, gemm_arguments, judge_gemm, observe_gemm
from hscale.judge.gemm_builders import q8_0_activations, random_nvfp4
from hscale.vectors.gemm_files import stored_cases

from helpers.paths import REPO_ROOT

PREFIX = "hscale.backends.interop."
VECTORS = stored_cases()
DOCS = REPO_ROOT / "docs"


def _backend(spec: str):
    backend = load(PREFIX + spec)
    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"{spec}: {reason}")
    return backend


def _run(backend, case: GemmCase, model=None):
    """The backend's output for the case in its declared domain, judged under ``model``
    (default: what it declares)."""
    domain = GemmDomain.of(backend)
    if case.out_dtype not in domain.out_dtypes:
        case = case.with_(out_dtype=domain.out_dtypes[0])
    run_case, why = domain.in_domain(case)
    assert run_case is not None, why
    a, b = gemm_arguments(run_case, domain)
    observed, findings = observe_gemm(backend.gemm(a, b, out_dtype=run_case.out_dtype), run_case)
    assert not findings, findings
    return run_case, observed, judge_gemm(run_case, observed, model or domain.model, domain)


@pytest.mark.clause("NVFP4-GEMM-8", "NVFP4-GEMM-4")
def test_ggml_matmul_conforms_under_fp32_and_is_exact_where_every_sum_is():
    """llama.cpp's CPU graph (ggml_mul_mat of an NVFP4 weight and Q8_0 activations, then the
    .scale): within the fp32 model on random weight-only GEMMs up to K = 4096, and bit for bit
    on the exactly summable weight-only vector."""
    backend = _backend("ggml_gemm:create")
    rng = np.random.default_rng(11)
    for k in (64, 512, 4096):
        case = GemmCase(q8_0_activations(rng, 3, k), random_nvfp4(rng, 5, k,
                                                                  global_scale=np.float32(0.02)))
        _, _, diagnosis = _run(backend, case)
        assert diagnosis.ok, "\n".join(diagnosis.render())
    run_case, observed, diagnosis = _run(backend, VECTORS["gemm-weight-only-exact"])
    assert diagnosis.ok and diagnosis.exact == 4
    assert np.array_equal(observed, run_case.reference_outputs.astype(np.float64))


@pytest.mark.clause("NVFP4-GEMM-5", "NVFP4-GEMM-8")
@pytest.mark.parametrize("spec", ["torchao_gemm:create", "torchao_gemm:create_weight_only",
                                  "modelopt_gemm:create"])
def test_dequantize_then_matmul_paths_conform_under_the_elements_placement(spec):
    """torchao's and ModelOpt's paths fold the global scale into bfloat16 elements: they
    conform under that declared placement on the golden vectors; judged as if they declared
    the spec's own model, the first vector they miss says which placements explain it."""
    backend = _backend(spec)
    misses = []
    for case in VECTORS.values():
        domain = GemmDomain.of(backend)
        if domain.in_domain(case.with_(out_dtype="bfloat16"))[0] is None:
            continue
        _, _, diagnosis = _run(backend, case)
        assert diagnosis.ok, f"{case.id}\n" + "\n".join(diagnosis.render())
        misses += _run(backend, case, model="fp32")[2].findings
    assert misses, "the elements placement should show on the vectors under the fp32 model"
    assert all(f.clause in ("NVFP4-GEMM-4", "NVFP4-GEMM-5") for f in misses)
    assert any("folded into bf16 elements" in f.text for f in misses), misses[0].text


@pytest.mark.parametrize("factory", ["create_torch_scaled_mm", "create_flashinfer",
                                     "create_vllm_cutlass"])
def test_the_blackwell_gemms_say_why_they_cannot_run_here(factory):
    backend = load(PREFIX + "gpu_gemms:" + factory)
    ok, reason = backend.available()
    if ok:
        pytest.skip("a Blackwell GPU is here: the suite itself judges this adapter")
    assert "Blackwell" in reason or "cannot import" in reason, reason
    domain = GemmDomain.of(backend)
    assert domain.scale_layout == "swizzled-128x4" and domain.model.accumulator == "float32"


def test_the_gemm_section_of_interop_md_is_rendered_from_the_results():
    from hscale.interop.gemm import render_gemm
    results = json.loads((DOCS / "interop-results.json").read_text())
    section = "\n".join(render_gemm(results.get("gemm", {})))
    assert section.strip() in (DOCS / "interop.md").read_text()
    for label in ("ggml (llama.cpp) matmul, CPU", "torchao NVFP4Tensor mm (W4A4, dequantized)",
                  "ModelOpt fake-quant GEMM (W4A4)"):
        entry = results["gemm"][label]
        assert entry["suite"]["verdict"] == "conforms", (label, entry["suite"])
