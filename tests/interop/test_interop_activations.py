"""The run-time activation quantizers behind ``hscale.backends.interop`` (``*_activations``),
pinned on hand-built groups where the field's recipes (docs/spec.md section 8) give different
bytes: what each library returned, in hex, once observed; which recipe it matches there; and
the clause the judge of the recipe it declares cites where it matches none. A change in a
library's numerics fails here. Every test skips, with the adapter's reason, where its library
is not installed (the ``interop`` extra); the CUDA adapters (vLLM, FlashInfer) say why they
cannot run on this machine. docs/interop.md's section on them is the stored measurement
(docs/interop-results.json) rendered.

The groups (one token, 16 elements; ``g`` the static global scale as the quantization
multiplier, handed to each library in the convention it declares):

- ``reciprocal``: float32 ``[0x3BC00000 (0.005859375), 0 ...]``, g = 3: the fast-math recipe's
  ``amax * rcp(6) * g`` lands on byte 0x02 (code 6), torchao's ``(amax / 6) / a`` with
  a = fp32(1/3) on 0x08 (code 2);
- ``underflow``: float32 ``[1e-4, -2e-4, 0, -0.0, 3e-5, 0 ...]``, g = 1: the block scale
  rounds to E4M3 zero; fast-math gives byte 0x00 and zeros keeping each element's sign, exact
  byte 0x00 and the codes of ``x * FLT_MAX`` (6 for every non-zero element), torchao byte 0x08
  (its scale clamped at 2^-6) and signed zeros;
- ``exact-byte``: bfloat16 group (r=5, i=2) of the level-0 case act-layout-padding-129x48,
  g = 0x42E9BD38: the exact recipe's correctly rounded ``amax / 6 * g`` is byte 0x5B, the
  others' 0x5A;
- ``fast-math-byte``: bfloat16 group (r=17, i=0) of the same case: fast-math and torchao give
  byte 0x58, compressed-tensors 0x59 (it divides ``amax_g / 6`` in the input's dtype,
  bfloat16, before multiplying by g: 0.87109375 / 6 is 0.145508 in bfloat16, 0.1451823 in
  fp32, and g times them 17.005 and 16.967, either side of the E4M3 midpoint 17).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.backends import load
from hscale.judge.activation_domain import ActivationDomain, observe_activations
from hscale.judge.activations import ActivationCase, diagnose_activations
from hscale.judge.kinds import declared_kinds
from hscale.reference.activations import quantize_activations

from helpers.paths import REPO_ROOT

PREFIX = "hscale.backends.interop."


def _f32(*bits):
    return np.array([bits], dtype=np.uint32).view(np.float32)


def _bf16(*bits):
    return np.array([bits], dtype=np.uint16).view(ml_dtypes.bfloat16)


#: name -> (x (1, 16), g)
GROUPS = {
    "reciprocal": (_f32(0x3BC00000, *[0] * 15), np.float32(3)),
    "underflow": (_f32(0x38D1B717, 0xB951B717, 0, 0x80000000, 0x37FBA882, *[0] * 11),
                  np.float32(1)),
    "exact-byte": (_bf16(0x3F65, 0x3EAE, 0xBE7B, 0x3F4B, 0x3DDA, 0x3DD3, 0xBF8A, 0xBD52, 0xBD5A,
                         0xBF5D, 0x3EDE, 0xBF0E, 0xBE3C, 0xBF26, 0xBE06, 0x3E57),
                   np.array(0x42E9BD38, np.uint32).view(np.float32)),
    "fast-math-byte": (_bf16(0x3EFD, 0xBBDB, 0xBF00, 0x3EBF, 0xBDC3, 0x3EA2, 0x3C9B, 0xBED5,
                             0x3F06, 0xBEE8, 0xBE30, 0x3E23, 0xBF5F, 0xBD92, 0xBC97, 0xBD00),
                       np.array(0x42E9BD38, np.uint32).view(np.float32)),
}

#: Each recipe's answer for each group, "byte codes" in hex (the reference's, pinned here so
#: that a reference change shows too).
RECIPES = {
    "reciprocal": {"fast-math": "02 6000000000000000", "exact": "02 6000000000000000",
                   "torchao": "08 2000000000000000"},
    "underflow": {"fast-math": "00 0808000000000000", "exact": "00 7F08700000000000",
                  "torchao": "08 0808000000000000"},
    "exact-byte": {"fast-math": "5A 74B611F99F5DAEA2", "exact": "5B 64B611F99E4DAD92",
                   "torchao": "5A 74B611F99F5DAEA2"},
    "fast-math-byte": {"fast-math": "58 68E5940D6DB2F988", "exact": "58 68E5940D6DB2F988",
                       "torchao": "58 68E5940D6DB2F988"},
}


def _hex(scale_byte, codes) -> str:
    return f"{int(scale_byte):02X} " + "".join(f"{int(c):X}" for c in codes)


def _adapter(factory):
    backend = load(PREFIX + factory)
    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"{backend.name} not available here: {reason}")
    return backend, ActivationDomain.of(
        declared_kinds(backend, factory).declarations["activation"])


def _observe(backend, domain, name):
    """``(hex of the group as the library quantized it, clauses its recipe's judge cites)``."""
    x, g = GROUPS[name]
    if not domain.accepts_dtype(x.dtype):
        x = x.astype(domain.numpy_dtypes[0])
    raw = backend.quantize_activations(x, domain.given_scale(g))
    observed, structure = observe_activations(raw, x.shape, domain)
    assert observed is not None, structure
    case = ActivationCase(x, g, id=name, title=name)
    clauses = sorted({f.clause for f in diagnose_activations(case, observed,
                                                            domain.recipe).findings})
    return _hex(observed.scale_bytes[0, 0], observed.codes[0]), clauses


def test_the_recipes_answers_are_pinned():
    for name, (x, g) in GROUPS.items():
        for recipe, want in RECIPES[name].items():
            q = quantize_activations(x, g, recipe=recipe)
            assert _hex(q.scale_bytes[0, 0], q.codes[0]) == want, (name, recipe)


def test_torchao_is_its_recipe():
    """torchao (``NVFP4Tensor.to_nvfp4``) gives the torchao recipe's bytes on every group,
    the reciprocal group included where the fast-math recipe differs."""
    backend, domain = _adapter("torchao_activations:create")
    assert domain.recipe == "torchao" and domain.layout == "swizzled-128x4"
    for name in GROUPS:
        assert _observe(backend, domain, name) == (RECIPES[name]["torchao"], []), name


def test_torchao_dynamic_all_zero_tensor_gives_nan_scale_bytes():
    """With no static scale, torchao derives a = amax / 2688 = 0 for an all-zero tensor and
    divides by it: every scale byte is 0xFF (NaN), where NVFP4-ACT-1 takes g = a = 1 and
    NVFP4-ACT-8 gives 0x00. The suite's act-dynamic-all-zero case reports it."""
    backend, domain = _adapter("torchao_activations:create")
    x = np.zeros((2, 32), np.float32)
    observed, structure = observe_activations(backend.quantize_activations(x, None), x.shape,
                                              domain)
    assert observed is not None, structure
    assert observed.scale_bytes.tolist() == [[0xFF, 0xFF], [0xFF, 0xFF]]
    clauses = {f.clause for f in diagnose_activations(
        ActivationCase(x, None, id="zero", title="all zero"), observed, "torchao").findings}
    assert {"NVFP4-ACT-1", "NVFP4-ACT-8"} <= clauses, clauses


def test_modelopt_floors_the_scale_byte_and_loses_the_sign_of_zero():
    """ModelOpt (``NVFP4QTensor.quantize``, declared exact) gives byte 0x01 where the block scale
    rounds to zero (NVFP4-ACT-6: 0x00), zeros there and the code 0x0 for -0.0 (NVFP4-ACT-8),
    and byte 0x5A on the exact-byte group (NVFP4-ACT-6: 0x5B); it matches the exact recipe on
    the other groups."""
    backend, domain = _adapter("modelopt_activations:create")
    assert domain.recipe == "exact"
    assert _observe(backend, domain, "underflow") == ("01 0800000000000000",
                                                      ["NVFP4-ACT-6", "NVFP4-ACT-8"])
    assert _observe(backend, domain, "exact-byte") == ("5A 74B611F99F5DAEA2", ["NVFP4-ACT-6"])
    for name in ("reciprocal", "fast-math-byte"):
        assert _observe(backend, domain, name) == (RECIPES[name]["exact"], []), name


def test_compressed_tensors_rounds_the_block_scale_first():
    """compressed-tensors (declared fast-math) gives byte 0x59 on the fast-math-byte group
    where every recipe gives 0x58 (NVFP4-ACT-2), byte 0x20 (its scale's floor, as for weights,
    NVFP4-ACT-2) and an unsigned zero for -0.0 (NVFP4-ACT-8) on the underflow group, and the
    fast-math recipe's bytes on the others."""
    backend, domain = _adapter("compressed_tensors_activations:create")
    assert domain.recipe == "fast-math"
    got = {name: _observe(backend, domain, name) for name in GROUPS}
    assert got["fast-math-byte"] == ("59 58D4940D5DA2F988", ["NVFP4-ACT-2"]), got
    assert got["underflow"] == ("20 0800000000000000", ["NVFP4-ACT-2", "NVFP4-ACT-8"]), got
    for name in ("reciprocal", "exact-byte"):
        assert got[name] == (RECIPES[name]["fast-math"], []), (name, got)


@pytest.mark.parametrize("factory", ["gpu_activations:create_vllm",
                                     "gpu_activations:create_flashinfer"])
def test_the_cuda_quantizers_say_why_they_cannot_run(factory):
    """vLLM's and FlashInfer's NVFP4 quantize kernels need their CUDA wheels and a Blackwell
    GPU; where either is missing the adapter says which, and the suite skips it."""
    backend = load(PREFIX + factory)
    ok, reason = backend.available()
    if ok:
        pytest.skip(f"{backend.name} runs here")
    assert "Blackwell" in reason or "compute capability" in reason, reason


def test_the_docs_section_is_the_measurement():
    """docs/interop.md's "Activation quantizers" section is what ``hscale interop
    --activations`` renders from docs/interop-results.json: a row per library run (its
    declared recipe and verdict), the CUDA ones listed as not run with their reason."""
    import json

    from hscale.interop.activations import ACTIVATION_ADAPTERS, render_section
    docs = REPO_ROOT / "docs"
    results = json.loads((docs / "interop-results.json").read_text())
    section = "\n".join(render_section(results))
    assert section and section in (docs / "interop.md").read_text()
    measured = results["activations"]
    for adapter in ACTIVATION_ADAPTERS:
        entry = measured[adapter.label]
        if "suite" in entry:
            assert f"| {adapter.label} | `{adapter.spec}` |" in section
            assert f"| `{entry['declared']}` | {entry['suite']['verdict']}" in section
        else:
            assert f"- {adapter.label} (`{adapter.spec}`" in section and entry["not_run"]
    assert {e for e in measured if "suite" in measured[e]} == {"torchao", "ModelOpt",
                                                               "compressed-tensors"}


def test_where_no_library_runs_the_section_says_so():
    """``hscale interop --activations`` where no activation library is installed (a fresh
    environment): no empty table, each adapter listed with its reason."""
    from hscale.interop.activations import render_section
    section = "\n".join(render_section({"activations": {
        "vLLM": {"label": "vLLM", "adapter": "gpu_activations:create_vllm",
                 "version": "vllm not installed", "not_run": "cannot import vllm._custom_ops"}}}))
    assert "No activation quantizer could run here." in section
    assert "| library |" not in section and "```" not in section
    assert "- vLLM (`gpu_activations:create_vllm`, vllm not installed): cannot import" in section
