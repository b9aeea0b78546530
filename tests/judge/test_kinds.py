"""The one table of kinds (hscale.judge.kinds): what a backend declares, what each kind judges,
and how the suite and the certificate follow it."""

from __future__ import annotations

import pytest

from hscale.judge.clauses import clause_ids
from hscale.judge.kinds import (JUDGED_ELSEWHERE, KINDS, declared_kinds, kind_of_clause,
                                kind_of_test)
from helpers.paths import REPO_ROOT
from helpers.selftest import collected_clause_markers


@pytest.mark.clause("SUITE-KINDS-1")
def test_every_clause_belongs_to_one_kind_or_is_judged_on_checkpoints():
    for clause in clause_ids():
        owners = [k.name for k in KINDS.values() if k.judges(clause)]
        assert len(owners) <= 1, f"{clause} belongs to the kinds {owners}"
        if not owners:
            assert clause in JUDGED_ELSEWHERE, (f"{clause} belongs to no kind and is not judged "
                                                "elsewhere: no run could ever judge it")
    for kind in KINDS.values():
        assert kind.clauses(), f"the kind {kind.name!r} judges no clause of docs/spec.md"
        assert kind.description and kind.methods


@pytest.mark.clause("SUITE-KINDS-1")
def test_every_suite_test_judges_one_kind(tmp_path):
    markers = collected_clause_markers(tmp_path, "--backend", "numpy")
    assert markers
    kinds = {}
    for nodeid, clauses in markers.items():
        kinds[nodeid] = kind_of_test(clauses)  # raises when a test spans kinds
        assert kinds[nodeid] is not None, f"{nodeid} names no clause of any kind: {clauses}"
    assert set(kinds.values()) <= set(KINDS)


class _Weight:
    name, version, capabilities = "w", "w 1", frozenset({"rtn"})

    def available(self):
        return True, ""

    def quantize(self, *args, **kwargs):
        raise AssertionError("not called")


@pytest.mark.clause("SUITE-KINDS-1")
def test_a_backend_without_kinds_is_a_weight_quantizer():
    declared = declared_kinds(_Weight(), "w")
    assert declared.kinds == frozenset({"weight"})
    assert declared.declarations == {"weight": {"capabilities": ["rtn"]}}


@pytest.mark.clause("SUITE-KINDS-1")
@pytest.mark.parametrize("attributes, needle", [
    (dict(kinds=frozenset({"matmul"})), "kinds: unknown ['matmul']"),
    (dict(kinds="weight"), "kinds = 'weight': a non-empty set"),
    (dict(kinds=frozenset()), "a non-empty set"),
    (dict(capabilities=frozenset({"gptq"})), "capabilities: unknown ['gptq']"),
    (dict(kinds=frozenset({"weight", "activation"})),
     "declares the kind 'activation' but has no quantize_activations()"),
    (dict(kinds=frozenset({"activation"}), quantize_activations=lambda *a: None),
     "declares no 'activation_recipe'"),
    (dict(kinds=frozenset({"activation"}), quantize_activations=lambda *a: None,
          activation_recipe="fastest"), "activation_recipe = 'fastest'; one of fast-math"),
])
def test_a_bad_declaration_is_named(attributes, needle):
    backend = type("Declares", (_Weight,), attributes)()
    with pytest.raises(ValueError, match=None) as raised:
        declared_kinds(backend, "--backend x")
    assert needle in str(raised.value), str(raised.value)


@pytest.mark.clause("SUITE-KINDS-1")
def test_a_certificate_lists_the_kinds_declared_and_their_clauses(numpy_one_clause_run):
    """A weight quantizer's certificate (the numpy backend, a one-clause run) names its kind,
    its declaration and its verdict; the clauses of the kinds it does not declare are not
    applicable, saying why; the summary says the same."""
    done, cert = numpy_one_clause_run
    assert cert["kinds_declared"] == ["weight", "gemm"]  # the numpy backend has a GEMM too
    weight = cert["kinds"]["weight"]
    assert weight["verdict"] == "conforms"
    assert weight["declarations"]["capabilities"] == sorted(
        ["rtn", "scale-only", "hscale", "hscale-block", "4over6"])
    assert weight["clauses"]["NVFP4-E2M1-1"] == "pass"
    assert set(weight["clauses"]) == set(KINDS["weight"].clauses())
    for kind in set(KINDS) - set(cert["kinds_declared"]):
        for clause in KINDS[kind].clauses():
            row = cert["clauses"][clause]
            assert row["status"] == "not applicable", (clause, row)
            assert row["reason"] == f"the backend does not declare the kind {kind!r}", row
    assert "  kind weight (capabilities 4over6, hscale, hscale-block, rtn, scale-only): " \
           "CONFORMS" in done.stdout, done.stdout[-3000:]


@pytest.mark.clause("SUITE-KINDS-1")
def test_kind_of_a_clause_and_of_a_test():
    assert kind_of_clause("NVFP4-E2M1-2") == "weight"
    assert kind_of_clause("HSCALE-OBJ-1") == "weight"
    assert kind_of_clause("NVFP4-ACT-2") == "activation"
    assert kind_of_clause("NVFP4-CKPT-1") is None
    assert kind_of_test(["NVFP4-ACT-1", "NVFP4-ACT-2"]) == "activation"
    with pytest.raises(ValueError, match="a suite test judges one kind"):
        kind_of_test(["NVFP4-ACT-1", "NVFP4-E2M1-2"])


@pytest.mark.clause("SUITE-KINDS-1")
def test_the_docs_table_of_kinds_is_the_table():
    """docs/backends.md's table of kinds has one row per kind of KINDS, with its methods and
    declarations."""
    text = (REPO_ROOT / "docs" / "backends.md").read_text()
    table = text[text.index("<!-- kinds-table -->"):].split("\n\n")[0]
    rows = {line.split("|")[1].strip(" `"): line for line in table.splitlines()[3:]}
    assert set(rows) == set(KINDS), rows.keys()
    for kind in KINDS.values():
        row = rows[kind.name]
        for method in kind.methods:
            assert f"`{method}`" in row, (kind.name, method)
        for declaration in kind.declarations:
            assert f"`{declaration.attribute}`" in row, (kind.name, declaration.attribute)
        for prefix in kind.clause_prefixes:
            assert f"`{prefix}*`" in row, (kind.name, prefix)


@pytest.mark.clause("SUITE-KINDS-1")
def test_every_name_a_row_gives_resolves():
    """Each row names its checker (with ``for_test``), its tally (with ``section``), its
    fixture and its vector family (with the family's members): the kind owns them."""
    from hscale.judge.kinds import resolve
    fixtures = [kind.fixture for kind in KINDS.values()]
    assert len(set(fixtures)) == len(fixtures) and all(fixtures), fixtures
    for kind in KINDS.values():
        assert callable(resolve(kind.checker).for_test), kind.name
        assert isinstance(resolve(kind.tally)().section(), dict), kind.name
        family = resolve(kind.family)
        for member in ("FORMAT_NAME", "SET_PREFIX", "CHOICE", "level0_cases", "read_case",
                       "render_files", "verify_document", "case_from_json",
                       "expect_lines", "check_lines", "explain"):
            assert hasattr(family, member), (kind.name, member)


@pytest.mark.clause("SUITE-KINDS-1")
def test_the_domain_of_each_declared_kind_is_built_once_with_the_declarations():
    """declared_kinds builds each declared kind's domain (the weight domain from the backend's
    attributes); a bad domain declaration is a ValueError at load, naming it."""
    from hscale.judge.domain import Domain
    declared = declared_kinds(_Weight(), "w")
    assert declared.domains == {"weight": Domain()}
    bad = type("Declares", (_Weight,), {"shape_multiple": (3, 5)})()
    with pytest.raises(ValueError, match="shape_multiple"):
        declared_kinds(bad, "--backend x")


@pytest.mark.clause("SUITE-KINDS-1")
def test_tests_of_undeclared_kinds_are_deselected_not_skipped(tmp_path):
    """The numpy backend declares weight and gemm: its activation tests are not collected (so
    no skip), its tests of the kinds it declares are; --kind picks one kind's tests."""
    markers = collected_clause_markers(tmp_path, "--backend", "numpy")
    kinds = {kind_of_test(clauses) for clauses in markers.values()}
    assert kinds == {"weight", "gemm"}, kinds
    only = collected_clause_markers(tmp_path, "--backend", "numpy", "--kind", "gemm")
    assert only and {kind_of_test(clauses) for clauses in only.values()} == {"gemm"}
    assert set(only) < set(markers)
