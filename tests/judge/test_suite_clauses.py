"""The suite covers the spec: every clause of docs/spec.md has at least one test or vector case,
every test names its clauses, no test names a clause the spec does not have, and the spec's
table of allowances (section 7) is the suite's. These are the kit's own checks: they run in the
repository's test run, never in a vendor's run of the installed suite."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hscale.judge.clauses import (CLAUSE_RE, SUITE_PREFIX, clause_ids, registry,
                                        spec_text)
from hscale.judge.profiles import ALLOWANCES
from hscale.vectors.catalogue import level0_cases
from helpers.paths import REPO_ROOT, TEST_ROOMS, TESTS
from helpers.selftest import collected_clause_markers

#: Where tests live: the installed suite, and every room of tests/.
TEST_DIRS = (REPO_ROOT / "conformance", TESTS)


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
    for path in sorted(p for d in TEST_DIRS for p in d.rglob("test_*.py")):
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
        found[str(path.relative_to(REPO_ROOT))] = ids
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
def test_every_collected_test_has_a_clause_marker(tmp_path):
    """Every test of the installed suite, as collected for a backend (parametrizations and all),
    carries a clause marker."""
    items = collected_clause_markers(tmp_path, "--backend", "numpy")
    assert len(items) > 300, f"only {len(items)} tests collected"
    bare = sorted(nodeid for nodeid, clauses in items.items() if not clauses)
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


#: What each spec version defines: its clause IDs and its allowances (section 7). Adding or
#: removing either is at least a MINOR change (docs/spec.md, "How the version changes"): bump
#: hscale.SPEC_VERSION and the version the spec states, and add the new version's row here.
SPEC_1_0_CLAUSES = (
    "NVFP4-E2M1-1", "NVFP4-E2M1-2", "NVFP4-E2M1-3", "NVFP4-E4M3-1", "NVFP4-E4M3-2",
    "NVFP4-E4M3-3", "NVFP4-GS-1", "NVFP4-GS-2", "NVFP4-GS-3", "NVFP4-GS-4", "NVFP4-INIT-1",
    "NVFP4-INIT-2", "NVFP4-ZERO-1", "HSCALE-WIN-1", "HSCALE-OBJ-1", "HSCALE-ARGMIN-1",
    "HSCALE-METHOD-1", "HSCALE-CAL-1", "HSCALE-GPTQ-1", "NVFP4-PACK-1", "NVFP4-PACK-2",
    "NVFP4-PACK-3", "NVFP4-DEQ-1", "NVFP4-CKPT-1", "NVFP4-CKPT-2", "NVFP4-CKPT-3",
    "NVFP4-IN-1", "NVFP4-IN-2", "NVFP4-IN-3", "NVFP4-IN-4", "NVFP4-IN-5")
SPEC_1_0_ALLOWANCES = (
    "zero-group-byte", "negative-zero", "fp32-scale-rounding", "reciprocal-multiply",
    "no-subnormal-scales", "reciprocal-global-scale", "low-precision-global-scale",
    "underflow-zero-group")
SPEC_CONTENTS = {
    "1.0": {"clauses": set(SPEC_1_0_CLAUSES), "allowances": set(SPEC_1_0_ALLOWANCES)},
    # 1.1: a caller's s_g stored as a reciprocal (NVFP4-GS-4's last paragraph)
    "1.1": {"clauses": set(SPEC_1_0_CLAUSES),
            "allowances": set(SPEC_1_0_ALLOWANCES) | {"supplied-reciprocal"}},
    # 1.2: the engines' run-time activation profile (section 8) and GGUF NVFP4 (section 9)
    "1.2": {"clauses": set(SPEC_1_0_CLAUSES) | {"NVFP4-ACT-1", "NVFP4-ACT-2", "NVFP4-ACT-3",
                                                "NVFP4-ACT-4", "NVFP4-GGUF-1"},
            "allowances": set(SPEC_1_0_ALLOWANCES) | {"supplied-reciprocal"}},
    # 1.3: the block-Hessian method hscale-block (HSCALE-BLOCK-1, its input NVFP4-IN-6)
    "1.3": {"clauses": set(SPEC_1_0_CLAUSES) | {"NVFP4-ACT-1", "NVFP4-ACT-2", "NVFP4-ACT-3",
                                                "NVFP4-ACT-4", "NVFP4-GGUF-1", "HSCALE-BLOCK-1",
                                                "NVFP4-IN-6"},
            "allowances": set(SPEC_1_0_ALLOWANCES) | {"supplied-reciprocal"}},
    # 1.4: W4A4 activation scales: calibration (HSCALE-CAL-2) and layout (NVFP4-CKPT-4)
    "1.4": {"clauses": set(SPEC_1_0_CLAUSES) | {"NVFP4-ACT-1", "NVFP4-ACT-2", "NVFP4-ACT-3",
                                                "NVFP4-ACT-4", "NVFP4-GGUF-1", "HSCALE-BLOCK-1",
                                                "NVFP4-IN-6", "HSCALE-CAL-2", "NVFP4-CKPT-4"},
            "allowances": set(SPEC_1_0_ALLOWANCES) | {"supplied-reciprocal"}},
    # 1.5: the run-time activation quantizer as a judged kind, its recipes (NVFP4-ACT-5 ..
    # -11), the block-scaled GEMM (section 10, NVFP4-GEMM-1 .. -8), the containers a checkpoint
    # reader validates (NVFP4-CKPT-5, NVFP4-GGUF-2) and a checkpoint against its own config
    # (NVFP4-CKPT-6), h from a llama.cpp importance matrix (HSCALE-CAL-3)
    "1.5": {"clauses": set(SPEC_1_0_CLAUSES) | {"NVFP4-ACT-1", "NVFP4-ACT-2", "NVFP4-ACT-3",
                                                "NVFP4-ACT-4", "NVFP4-GGUF-1", "HSCALE-BLOCK-1",
                                                "NVFP4-IN-6", "HSCALE-CAL-2", "NVFP4-CKPT-4",
                                                "NVFP4-CKPT-5", "NVFP4-CKPT-6", "NVFP4-GGUF-2",
                                                "HSCALE-CAL-3"}
            | {f"NVFP4-ACT-{k}" for k in range(5, 12)}
            | {f"NVFP4-GEMM-{k}" for k in range(1, 9)},
            "allowances": set(SPEC_1_0_ALLOWANCES) | {"supplied-reciprocal"}},
}
# 1.6: the training quantizers: stochastic rounding (section 11), the random Hadamard
# transform (section 12), 2D block scaling (section 13)
SPEC_CONTENTS["1.6"] = {
    "clauses": SPEC_CONTENTS["1.5"]["clauses"] | {f"NVFP4-SR-{k}" for k in range(1, 7)}
    | {f"NVFP4-RHT-{k}" for k in range(1, 5)} | {"NVFP4-2D-1", "NVFP4-2D-2"},
    "allowances": SPEC_CONTENTS["1.5"]["allowances"]}


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_the_spec_states_the_kits_version_and_its_contents_match_it():
    import hscale
    stated = re.search(r"^Spec version \*\*([0-9]+\.[0-9]+)\*\*", spec_text(), re.M)
    assert stated, "docs/spec.md no longer states its version in its first paragraph"
    assert stated.group(1) == hscale.SPEC_VERSION, (
        f"docs/spec.md says version {stated.group(1)}, hscale.SPEC_VERSION is "
        f"{hscale.SPEC_VERSION}")
    contents = SPEC_CONTENTS.get(hscale.SPEC_VERSION)
    assert contents is not None, f"no row for spec version {hscale.SPEC_VERSION} here"
    now = {"clauses": set(clause_ids()), "allowances": set(ALLOWANCES)}
    for part in now:
        assert now[part] == contents[part], (
            f"spec {hscale.SPEC_VERSION}: {part} added {sorted(now[part] - contents[part])}, "
            f"removed {sorted(contents[part] - now[part])}: a change of clauses or allowances "
            "needs a new version (docs/spec.md, How the version changes)")


@pytest.mark.clause("SUITE-CLAUSES-1")
def test_every_clause_keeps_a_default_tier_test(request):
    """The README's test command (the default tier, what CI runs) judges every clause of the
    spec: a clause whose only tests went behind an opt-in marker (tests/conftest.py) is lost to
    CI. Judged on this session's own selection, so it needs the whole default tier collected;
    tools/clause_map.py prints the map from any checkout."""
    items = request.session.items
    paths = [Path(str(item.path)) for item in items]
    folders = {p.relative_to(REPO_ROOT).parts[:2] for p in paths if p.is_relative_to(REPO_ROOT)}
    whole = (("conformance", ) in {f[:1] for f in folders}
             and {("tests", room) for room in TEST_ROOMS} <= folders
             and not request.config.getoption("-m") and not request.config.getoption("-k"))
    if not whole:
        pytest.skip("needs the whole default tier in this session (the README's test command; "
                    "tools/clause_map.py --check from any checkout)")
    judged = {c for item in items for m in item.iter_markers("clause") for c in m.args}
    missing = [c for c in clause_ids() if c not in judged]
    assert not missing, (f"clauses of docs/spec.md no default-tier test judges: {missing} "
                         "(tools/clause_map.py shows where their tests went)")
