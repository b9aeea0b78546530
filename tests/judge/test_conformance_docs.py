"""docs/conformance.md's certificate example is a certificate of this kit: every field a
certificate has and none it lacks, the spec version of this kit, the clause count of its spec;
and a certificate names nothing outside the wheel (no test file of the repository)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

import hscale
from hscale.conformance import certificate
from hscale.conformance.checker import Tally
from hscale.judge.clauses import clause_ids
from hscale.judge.domain import Domain
from hscale.judge.kinds import Declared

from helpers.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "conformance.md"


def _example() -> dict:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"## The certificate\n.*?```json\n(.*?)```", text, re.S)
    assert block, "docs/conformance.md has no JSON certificate example under 'The certificate'"
    return json.loads(block.group(1))


def _built() -> dict:
    """A certificate as the suite builds it (one passed test of one clause)."""
    items = {"test_formats.py::test_x[b]": ("b", ["NVFP4-E2M1-1"])}
    outcomes = {"test_formats.py::test_x[b]": ("passed", "")}
    return certificate.build(
        backend={"id": "b", "spec": "m:f", "version": "1", "name": "b", "capabilities": ["rtn"],
                 "available": True, "reason": ""},
        declared=Declared(frozenset({"weight"}), {"weight": {"capabilities": ["rtn"]}}),
        domain=Domain(), tally=Tally(), items=items, outcomes=outcomes, profile="exact",
        allowances=(), strict_inputs=False, hypothesis={"profile": "ci"}, command="c",
        duration_s=1.0)


@pytest.mark.clause("SUITE-CERTIFICATE-1")
def test_the_docs_example_has_every_field_of_a_certificate_and_no_other():
    example, built = _example(), _built()
    assert list(example) == list(built), (sorted(set(example) ^ set(built)))
    assert set(example["kinds"]["weight"]) == set(built["kinds"]["weight"])
    assert set(example["verdicts"]) == set(built["verdicts"])


@pytest.mark.clause("SUITE-CERTIFICATE-1")
def test_the_docs_example_is_of_this_spec_version():
    example = _example()
    assert example["spec"]["version"] == hscale.SPEC_VERSION
    assert example["spec"]["clauses"] == len(clause_ids())


@pytest.mark.clause("SUITE-CERTIFICATE-1")
def test_a_clause_every_test_of_which_fed_a_bad_input_is_the_input_contract():
    """A clause (not of section 5) whose every selected test recorded an input-contract outcome
    (xfail): its status says so; the certificate is written (it once raised an IndexError)."""
    items = {f"test_validation.py::t[b-{k}]": ("b", ["NVFP4-GS-2", "NVFP4-IN-4"]) for k in (1, 2)}
    outcomes = {node: ("xfailed", "accepted") for node in items}
    rows = certificate.clause_statuses(items, outcomes, "b", Counter())
    assert rows["NVFP4-GS-2"]["status"] == "input contract", rows["NVFP4-GS-2"]
    assert rows["NVFP4-IN-4"]["status"] == "input contract"


@pytest.mark.clause("SUITE-CERTIFICATE-1")
def test_a_run_that_fed_no_bad_input_claims_nothing_about_the_contract():
    built = _built()
    assert built["verdicts"]["input_contract"] == "no bad input was fed in this run: not judged"
    lines = certificate.render_summary(built)
    assert any("no bad input was fed in this run" in line for line in lines), lines
