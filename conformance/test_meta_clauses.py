"""The suite covers the spec: every clause ID of docs/spec.md has at least one test, every
test names its clauses, and no test names a clause the spec does not have."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .clauses import CLAUSE_RE, SUITE_PREFIX, read_spec_clauses
from .conftest import STATE_KEY

HERE = Path(__file__).parent


def _literal_strings(node, constants) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Starred) and isinstance(node.value, ast.Name):
        return constants.get(node.value.id, [])
    return []


def clause_markers_in_source() -> dict[str, set[str]]:
    """{test file: clause IDs its ``pytest.mark.clause(...)`` markers name}, read statically, so
    the answer does not depend on which tests this session selected."""
    found: dict[str, set[str]] = {}
    for path in sorted(HERE.glob("test_*.py")):
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
        found[path.name] = ids
    return found


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_every_spec_clause_has_a_test():
    spec_ids, source = read_spec_clauses()
    assert spec_ids, f"no clause IDs found in {source}"
    covered = set().union(*clause_markers_in_source().values())
    missing = [c for c in spec_ids if c not in covered]
    assert not missing, (f"clauses of {source} without a conformance test: {', '.join(missing)} "
                         "(add @pytest.mark.clause(ID) to a test that checks each)")


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_markers_name_only_spec_clauses():
    spec_ids, source = read_spec_clauses()
    unknown = {}
    for name, ids in clause_markers_in_source().items():
        bad = sorted(c for c in ids if c not in spec_ids and not c.startswith(SUITE_PREFIX))
        if bad:
            unknown[name] = bad
    assert not unknown, f"markers name clauses that {source} does not define: {unknown}"
    for name, ids in clause_markers_in_source().items():
        for c in ids:
            assert c.startswith(SUITE_PREFIX) or CLAUSE_RE.fullmatch(c), f"{name}: bad ID {c!r}"


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_every_collected_test_has_a_clause_marker(request):
    items = request.config.stash[STATE_KEY].items
    bare = sorted(nodeid for nodeid, (_, clauses) in items.items() if not clauses)
    assert not bare, f"tests without @pytest.mark.clause: {bare[:10]}"
