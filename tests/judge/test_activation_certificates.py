"""What a vendor of a run-time activation quantizer gets from `hscale conform`: kernels written
in tests/helpers/activation_kernels.py without the kit, one per recipe of the field, certified through
the installed suite from outside the repository (the runs are tests/helpers/selftest.py's).

- each conforms under the recipe it implements and declares, the certificate naming the kind
  and the recipe;
- each declaring another recipe does not conform, naming that recipe's clause;
- each slip of the fast-math kernel (ties away from zero, no saturation, a truncated scale,
  the sign of a zero lost, a wrong swizzle) does not conform, naming its clause;
- one adapter of two kinds (weight and activation) gets one certificate with both;
- a bfloat16 kernel whose reciprocals sit at the far end of the one ulp PTX states conforms,
  and one whose rcp(6) is two ulps low does not (issue 39: it conformed, generated data being
  2^-8 from a boundary in bfloat16)."""

from __future__ import annotations

import json

import pytest

from helpers.selftest import (ACTIVATION_RECIPES, ACTIVATION_SLIPS, RECIPE_CLAUSES,
                              RECIPROCAL_BOUND, certificate_of, other_recipe_factory, summary)


@pytest.mark.selftest
@pytest.mark.clause("SUITE-KINDS-1", "NVFP4-ACT-5")
@pytest.mark.parametrize("recipe", list(ACTIVATION_RECIPES))
def test_an_independent_kernel_conforms_under_its_recipe(selftest_runs, recipe):
    run, cert = certificate_of(selftest_runs, "activation-recipes", ACTIVATION_RECIPES[recipe][1])
    assert cert["verdict"] == "conforms", f"{summary(cert)}\n{run.output[-4000:]}"
    assert cert["kinds_declared"] == ["activation"]
    part = cert["kinds"]["activation"]
    assert part["verdict"] == "conforms"
    assert part["declarations"]["activation_recipe"] == recipe
    own = {c for c in RECIPE_CLAUSES[recipe] if c != "NVFP4-ACT-8"}
    others = {c for r, cs in RECIPE_CLAUSES.items() if r != recipe for c in cs} - own \
        - {"NVFP4-ACT-8"}
    for clause in own:
        assert part["clauses"][clause] == "pass", (clause, part["clauses"])
    for clause in others:  # the other recipes' clauses: not applicable, saying why
        row = cert["clauses"][clause]
        assert row["status"] == "not applicable" and f"declares the recipe {recipe!r}" in \
            row["reason"], (clause, row)
    judged = {c for c, status in part["clauses"].items() if status == "pass"}
    assert {"NVFP4-ACT-1", "NVFP4-ACT-8", "NVFP4-ACT-10", "NVFP4-ACT-11"} <= judged, judged
    # the weight kind is not declared: its clauses are not applicable, its tests skipped
    assert cert["clauses"]["NVFP4-E2M1-2"]["status"] == "not applicable"
    assert "kind activation (activation_recipe " + recipe in run.output


@pytest.mark.extended
@pytest.mark.selftest
@pytest.mark.parametrize("implemented, declared", [
    pytest.param(i, d, id=f"{i}-declared-{d}", marks=pytest.mark.clause(*RECIPE_CLAUSES[d]))
    for i in ACTIVATION_RECIPES for d in ACTIVATION_RECIPES if i != d])
def test_a_kernel_fails_the_other_recipes_naming_their_clause(selftest_runs, implemented,
                                                              declared):
    backend_id = f"{ACTIVATION_RECIPES[implemented][1]}-as-{declared}"
    run, cert = certificate_of(selftest_runs, "activation-other-recipes", backend_id)
    assert cert["verdict"] == "does not conform", summary(cert)
    broken = set(cert["verdicts"]["clauses_broken"])
    assert broken & set(RECIPE_CLAUSES[declared]), (
        f"{other_recipe_factory(implemented, declared)}: broken {sorted(broken)}, expected one "
        f"of {RECIPE_CLAUSES[declared]}")


@pytest.mark.extended
@pytest.mark.selftest
@pytest.mark.parametrize("slip", [pytest.param(name, marks=pytest.mark.clause(clause), id=name)
                                  for name, (_, clause) in ACTIVATION_SLIPS.items()])
def test_each_slip_of_the_fast_math_kernel_fails_naming_its_clause(selftest_runs, slip):
    backend_id, clause = ACTIVATION_SLIPS[slip]
    run, cert = certificate_of(selftest_runs, "activation-slips", backend_id)
    assert cert["verdict"] == "does not conform", summary(cert)
    assert clause in cert["verdicts"]["clauses_broken"], summary(cert)
    assert cert["clauses"][clause]["status"] == "fail", cert["clauses"][clause]


@pytest.mark.selftest
@pytest.mark.clause("SUITE-ADAPTER-1", "NVFP4-ACT-5")
def test_the_activation_adapter_of_the_docs_conforms(selftest_runs):
    """docs/backends.md's activation adapter, copied out of the docs into a directory outside
    the repository and certified with `hscale conform` (quick)."""
    run, cert = certificate_of(selftest_runs, "activation-adapter", "myactivations")
    assert cert["verdict"] == "conforms" and run.returncode == 0, (
        f"{summary(cert)}\n{run.output[-4000:]}")
    assert cert["kinds"]["activation"]["declarations"]["activation_recipe"] == "fast-math"
    # nothing of the certificate points at a file of the repository that the wheel lacks
    assert "tests/" not in json.dumps(cert), [c for c, row in cert["clauses"].items()
                                              if "tests/" in json.dumps(row)]
    # the golden-vector cases name every recipe's clauses; passing them under fast-math leaves
    # the other recipes' clauses not applicable, saying why
    for clause in ("NVFP4-ACT-6", "NVFP4-ACT-7"):
        row = cert["clauses"][clause]
        assert row["status"] == "not applicable" and "declares the recipe 'fast-math'" in \
            row["reason"], (clause, row)


@pytest.mark.extended
@pytest.mark.selftest
@pytest.mark.clause("SUITE-KINDS-1")
def test_one_adapter_of_two_kinds_gets_one_certificate_with_both(selftest_runs):
    """The docs' weight adapter and activation adapter behind one adapter declaring both kinds,
    `hscale conform --clause NVFP4-E2M1-1 --clause NVFP4-ACT-2`: the certificate lists both
    kinds, each its declarations, clause statuses and verdict; the summary prints a line per
    kind; no input-contract result is claimed for bad inputs the run did not feed."""
    run, cert = certificate_of(selftest_runs, "two-kinds", "two-kinds")
    assert run.returncode == 0 and cert["verdict"] == "conforms", (
        f"{summary(cert)}\n{run.output[-4000:]}")
    assert cert["kinds_declared"] == ["weight", "activation"]
    weight, activation = cert["kinds"]["weight"], cert["kinds"]["activation"]
    assert weight["clauses"]["NVFP4-E2M1-1"] == "pass" and weight["verdict"] == "conforms"
    assert activation["clauses"]["NVFP4-ACT-2"] == "pass" and activation["verdict"] == "conforms"
    assert activation["declarations"]["activation_recipe"] == "fast-math"
    assert "rtn" in weight["declarations"]["capabilities"]
    assert weight["clauses"]["NVFP4-IN-1"] == "not judged", weight["clauses"]
    assert cert["verdicts"]["input_contract"] == "no bad input was fed in this run: not judged"
    for kind in ("weight", "activation"):
        assert f"  kind {kind} (" in run.output, run.output[-3000:]


@pytest.mark.selftest
@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-2")
@pytest.mark.parametrize("factory", list(RECIPROCAL_BOUND))
def test_the_reciprocal_bound_is_where_the_verdict_turns(selftest_runs, factory):
    """Fast-math kernels of bfloat16 and float16 input: every reciprocal the fp32 value below
    the exact one (at the bound NVFP4-ACT-5 states) conforms; rcp(6) two fp32 values below 1/6
    is refused, naming NVFP4-ACT-2, by the products a few fp32 ulps from every E4M3 midpoint
    (of either narrow dtype: the kernel declares both)."""
    backend_id, clause = RECIPROCAL_BOUND[factory]
    run, cert = certificate_of(selftest_runs, "activation-reciprocal-bound", backend_id)
    if clause is None:
        assert cert["verdict"] == "conforms", f"{summary(cert)}\n{run.output[-4000:]}"
        assert cert["kinds"]["activation"]["clauses"]["NVFP4-ACT-5"] == "pass"
    else:
        assert cert["verdict"] == "does not conform", summary(cert)
        assert clause in cert["verdicts"]["clauses_broken"], summary(cert)
        first = cert["clauses"][clause]["first_failure"]
        assert "act-boundaries-bfloat16" in first or "act-boundaries-float16" in first, first
