"""What a vendor gets from `hscale conform`: kernels written in tests/helpers/vendor_kernels.py without
the reference, certified through the installed suite from outside the repository (the runs are
tests/helpers/selftest.py's, started together once per session).

- an exact RTN whose adapter raises plain errors and takes array-likes: "conforms" under exact;
- a bfloat16-only kernel with swizzled scale bytes, a reciprocal global scale and fp32
  arithmetic: "conforms" under faithful with the three allowances its arithmetic needs, judged
  on bfloat16 data, full models included; under exact, "does not conform", each finding naming
  the allowance that would excuse it;
- the same kernel with one slip each (the swizzle, the E2M1 tie rule, the reciprocal): "does not
  conform", naming the clause."""

from __future__ import annotations

import re

import pytest

from helpers.selftest import (BF16_ALLOWANCES, BF16_SLIPS, ENGINES_ALLOWANCES, certificate_of,
                              conforming_certificate, summary)


def full_model_outcomes(cert) -> dict:
    """{test id: outcome} of a certificate's full-model tests (a vendor's full run has them)."""
    return {n: o for n, o in cert["test_outcomes"].items() if "test_full_model[" in n}


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_an_independent_exact_rtn_conforms_under_exact(selftest_runs):
    _, cert = conforming_certificate(selftest_runs, "vendor-exact-rtn", "vendor-exact-rtn")
    assert cert["profile"] == "exact" and cert["allowance_uses"] == {}, summary(cert)
    # the array-like weight it takes is its business: recorded, not judged
    lists = [item for item in cert["input_contract"]["items"] if "list" in item["input"]]
    assert lists and all(not item["judged"] and item["outcome"] == "accepted" for item in lists)


@pytest.mark.selftest
@pytest.mark.extended  # the vendor's full run; the quick one above is the default tier's
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_an_independent_exact_rtn_conforms_under_exact_on_the_full_models(selftest_runs):
    _, cert = conforming_certificate(selftest_runs, "vendor-exact-rtn-full", "vendor-exact-rtn")
    # judged on all three dtypes and the full models, not only on the quick subset
    full = full_model_outcomes(cert)
    rtn = {n: o for n, o in full.items() if re.search(r"-(minilm|tiny-decoder)-rtn-", n)}
    assert len(rtn) == 6 and set(rtn.values()) == {"passed"}, rtn


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1", "NVFP4-PACK-3", "NVFP4-GS-4")
def test_a_bf16_swizzled_reciprocal_kernel_conforms_under_faithful(selftest_runs):
    _, cert = conforming_certificate(selftest_runs, "vendor-bf16", "vendor-bf16-kernel")
    assert cert["domain"] == {"input_dtypes": ["bfloat16"], "shape_multiple": [128, 64],
                              "scale_layout": "swizzled-128x4",
                              "global_scale_convention": "reciprocal"}, cert["domain"]
    assert set(cert["allowance_uses"]) == set(BF16_ALLOWANCES), cert["allowance_uses"]
    statuses = {c: row["status"] for c, row in cert["clauses"].items()}
    assert statuses["NVFP4-PACK-3"] == "pass" and statuses["NVFP4-E2M1-2"] == "allowed", statuses
    assert not any(o in ("failed", "error") for o in cert["test_outcomes"].values())
    assert cert["hypothesis"]["profile"] == "ci" and cert["hypothesis"]["derandomize"]
    # the command that reproduces it is the vendor's own, not the pytest line behind it
    command = cert["command"]
    assert command.startswith("hscale conform --backend vendor_kernels:bf16_kernel "), command
    assert "--profile faithful --allow fp32-scale-rounding" in command, command


@pytest.mark.selftest
@pytest.mark.extended  # the vendor's full run; the quick one above is the default tier's
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_a_bf16_swizzled_reciprocal_kernel_conforms_on_the_full_models(selftest_runs):
    _, cert = conforming_certificate(selftest_runs, "vendor-bf16-full", "vendor-bf16-kernel")
    # the full models ran, on bfloat16 weights; float32 and float16 are outside its domain
    full = full_model_outcomes(cert)
    ran = {n for n, o in full.items() if o == "passed"}
    assert any("minilm-rtn-bfloat16" in n for n in ran), full
    assert all(n.endswith("bfloat16]") for n in ran), ran

@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1")
def test_under_exact_the_bf16_kernel_is_told_which_allowances_it_needs(selftest_runs):
    run, cert = certificate_of(selftest_runs, "vendor-bf16-exact", "vendor-bf16-kernel")
    assert cert["verdict"] == "does not conform" and run.returncode == 1, summary(cert)
    texts = " ".join(row.get("first_failure", "") for row in cert["clauses"].values())
    for allowance in ("fp32-scale-rounding", "reciprocal-multiply"):
        assert f"the allowance {allowance}" in texts or f"or {allowance}" in texts, (
            f"no failure names {allowance}:\n{texts[:4000]}")


@pytest.mark.selftest
@pytest.mark.parametrize("slip", [pytest.param(name, marks=pytest.mark.clause(clause), id=name)
                                  for name, (_, clause) in BF16_SLIPS.items()])
def test_each_slip_of_the_bf16_kernel_does_not_conform_naming_its_clause(selftest_runs, slip):
    backend_id, clause = BF16_SLIPS[slip]
    run, cert = certificate_of(selftest_runs, "vendor-bf16-slips", backend_id)
    assert run.returncode == 1, run.output[-3000:]
    assert cert["verdict"] == "does not conform", summary(cert)
    assert clause in cert["verdicts"]["clauses_broken"], summary(cert)
    assert cert["clauses"][clause]["status"] == "fail", cert["clauses"][clause]


@pytest.mark.extended
@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1", "NVFP4-INIT-1", "NVFP4-E2M1-2")
def test_one_run_names_every_allowance_the_engines_weight_recipe_needs(selftest_runs):
    """The engines' own weight recipe (fp32, flush-to-zero, no 0x01 floor, the reciprocal
    2688 / amax stored), run once under exact: it does not conform, and the certificate and the
    summary list every allowance its findings need, generated examples included (a generated
    test keeps drawing past findings an allowance excuses), with the command to rerun."""
    run, cert = certificate_of(selftest_runs, "vendor-engines-exact", "vendor-engines-bf16-kernel")
    assert cert["verdict"] == "does not conform" and run.returncode == 1, summary(cert)
    assert set(cert["allowances_needed"]) == set(ENGINES_ALLOWANCES), cert["allowances_needed"]
    assert "rerun with: --profile faithful" in run.output, run.output[-3000:]
    # the oracle's finding about the missing 0x01 floor names its allowance too
    texts = " ".join(row.get("first_failure", "") for row in cert["clauses"].values())
    assert "the allowance underflow-zero-group would excuse this" in texts, texts[:3000]


@pytest.mark.extended
@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1", "NVFP4-GS-1", "NVFP4-GS-2")
def test_the_engines_weight_recipe_conforms_under_faithful_with_them_and_its_domain(
        selftest_runs):
    """With exactly those allowances and its declared domain (448 built in; the s_g and group
    maxima its flush-to-zero arithmetic takes, and why) it conforms; the same kernel declaring
    every magnitude does not: its degenerate corners (2688 / amax overflowing, flushed products)
    are findings, not silent passes."""
    run, cert = certificate_of(selftest_runs, "vendor-engines-faithful",
                             "vendor-engines-bf16-kernel")
    assert cert["verdict"] == "conforms", f"{summary(cert)}\n{run.output[-4000:]}"
    assert set(cert["allowance_uses"]) <= set(ENGINES_ALLOWANCES), cert["allowance_uses"]
    assert cert["domain"]["scale_ceilings"] == [448.0]
    assert "flush-to-zero" in cert["domain"]["magnitude_reason"]
    # the cases beyond its magnitudes are left out saying why: constructions skipped with the
    # domain's reason, generated draws redrawn and counted (which draws a run makes depends on
    # the Hypothesis profile, so either record will do)
    left_out = {k: n for k, n in {**cert["adaptations"], **cert["skip_reasons"]}.items()
                if "outside the declared" in k and ("flush-to-zero" in k or "range" in k)}
    assert left_out, (cert["adaptations"], cert["skip_reasons"])
    _, bare = certificate_of(selftest_runs, "vendor-engines-faithful",
                           "vendor-engines-bf16-kernel-no-domain")
    assert bare["verdict"] == "does not conform", summary(bare)
