"""The suite covers the spec: every clause of docs/spec.md has at least one test or vector case,
every test names its clauses, no test names a clause the spec does not have, and the spec's
table of allowances (section 7) is the suite's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hscale.judge.clauses import (CLAUSE_RE, SUITE_PREFIX, clause_ids, registry,
                                        spec_text)
from hscale.judge.profiles import ALLOWANCES
from hscale.vectors.catalogue import level0_cases

from .conftest import STATE_KEY

HERE = Path(__file__).parent
TEST_DIRS = (HERE, HERE.parent / "tests")


def _literal_strings(node, constants) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Starred) and isinstance(node.value, ast.Name):
        return constants.get(node.value.id, [])
    return []


def clause_markers_in_source() -> dict[str, set[str]]:
    """{test file: clause IDs its ``pytest.mark.clause(...)`` markers name}, read statically from
    conformance/ and tests/, so the answer does not depend on which tests this session selected."""
    found: dict[str, set[str]] = {}
    for path in sorted(p for d in TEST_DIRS for p in d.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {}
        for node in tree.body:  # module-level tuples of clause IDs, used as *CLAUSES
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)):
                values = [e.value for e in node.value.elts
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        constants[target.id] = values
        ids: set[str] = set()
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "clause"):
                for arg in node.args:
                    ids.update(_literal_strings(arg, constants))
        found[f"{path.parent.name}/{path.name}"] = ids
    return found


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_every_spec_clause_has_a_test():
    covered = set().union(*clause_markers_in_source().values())
    covered |= {c for case in level0_cases() for c in case.clauses}  # conformance/test_vectors.py
    missing = [c for c in clause_ids() if c not in covered]
    assert not missing, (f"clauses of docs/spec.md without a test or vector case: "
                         f"{', '.join(missing)} (add @pytest.mark.clause(ID) to a test that "
                         "checks each)")


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_markers_name_only_spec_clauses():
    spec_ids = set(clause_ids())
    unknown = {}
    for name, ids in clause_markers_in_source().items():
        bad = sorted(c for c in ids if c not in spec_ids and not c.startswith(SUITE_PREFIX))
        if bad:
            unknown[name] = bad
    assert not unknown, f"markers name clauses that docs/spec.md does not define: {unknown}"
    for name, ids in clause_markers_in_source().items():
        for c in ids:
            assert c.startswith(SUITE_PREFIX) or CLAUSE_RE.fullmatch(c), f"{name}: bad ID {c!r}"


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_every_collected_test_has_a_clause_marker(request):
    items = request.config.stash[STATE_KEY].items
    bare = sorted(nodeid for nodeid, (_, clauses) in items.items() if not clauses)
    assert not bare, f"tests without @pytest.mark.clause: {bare[:10]}"


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_the_registry_reads_every_clause_heading():
    """Every clause ID the spec mentions is defined by a heading of its own (no orphan IDs)."""
    mentioned = set(CLAUSE_RE.findall(spec_text()))
    assert mentioned == set(registry()), sorted(mentioned ^ set(registry()))


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_allowances_are_the_spec_table():
    """The allowances of the faithful profile are exactly those of docs/spec.md section 7."""
    section = spec_text().split("## 7.")[1]
    in_spec = set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M))
    assert in_spec == set(ALLOWANCES), sorted(in_spec ^ set(ALLOWANCES))
