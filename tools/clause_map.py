"""For each clause of docs/spec.md, the tests of each tier that judge it: the default tier (what
the README's test command and CI run) and the opt-in tiers (``pytest -m extended``, ``fuzz``,
``table``). No clause may be left without a default-tier test.

    python tools/clause_map.py                     # the table, from a collection of the checkout
    python tools/clause_map.py --json map.json     # keep the map (for a later --compare)
    python tools/clause_map.py --compare old.json  # before / after: per clause, default tests
    python tools/clause_map.py --check             # exit 1 if a clause has no default test

The map comes from ``pytest --collect-only --clause-map`` (tests/conftest.py), run in a
subprocess over the whole repository as the README's test command selects it; a test counts
for every clause its ``pytest.mark.clause`` markers name (the golden-vector cases of the suite
carry their cases' clauses). Tests that skip at run time (a CUDA backend on a machine without a
GPU) are not known at collection: the conformance suite's certificates say which clauses a run
judged.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


#: For a checkout older than ``--clause-map`` (the "before" of a comparison): a plugin that
#: writes the same map, the opt-in markers given in CLAUSE_MAP_TIERS.
FALLBACK_PLUGIN = """
import json, os

def pytest_collection_finish(session):
    tiers = os.environ["CLAUSE_MAP_TIERS"].split(",")
    out = {}
    for item in session.items:
        tier = next((t for t in tiers if t in item.keywords), "default")
        out[item.nodeid] = {"clauses": sorted({c for m in item.iter_markers("clause")
                                               for c in m.args}),
                            "tier": tier, "selected": True}
    with open(os.environ["CLAUSE_MAP_OUT"], "w") as f:
        json.dump(out, f)
"""


def collect(repo: Path) -> dict:
    """{node id: {"clauses", "tier", "selected"}} of the README's selection in ``repo``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "map.json"
        command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                   "no:cacheprovider"]
        done = subprocess.run(command + ["--clause-map", str(out)], cwd=repo,
                              capture_output=True, text=True)
        if "unrecognized arguments: --clause-map" in done.stderr:
            (Path(tmp) / "clause_map_fallback.py").write_text(FALLBACK_PLUGIN)
            env = dict(os.environ, CLAUSE_MAP_OUT=str(out), CLAUSE_MAP_TIERS=",".join(
                older_opt_in_markers(repo)), PYTHONPATH=tmp)
            done = subprocess.run(command + ["-p", "clause_map_fallback"], cwd=repo, env=env,
                                  capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            sys.exit(f"clause_map: collection failed (exit {done.returncode}):\n"
                     f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
        return json.loads(out.read_text())


def older_opt_in_markers(repo: Path) -> list[str]:
    """The opt-in markers of an older checkout: its tests/conftest.py's OPT_IN_MARKERS, and
    ``fuzz`` (whose test skipped itself unless asked for)."""
    tree = ast.parse((repo / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(getattr(t, "id", "") == "OPT_IN_MARKERS" for t in node.targets)):
            return [k.value for k in node.value.keys] + ["fuzz"]
    return ["fuzz"]


def by_clause(entries: dict) -> dict[str, dict[str, list[str]]]:
    """clause -> tier -> node ids."""
    table: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for nodeid, entry in entries.items():
        for clause in entry["clauses"]:
            table[clause][entry["tier"]].append(nodeid)
    return table


def spec_clauses() -> list[str]:
    sys.path.insert(0, str(REPO))
    from hscale.judge.clauses import clause_ids
    return list(clause_ids())


def render(clauses: list[str], table: dict, before: dict | None) -> list[str]:
    tiers = sorted({tier for row in table.values() for tier in row} - {"default"})
    head = "| clause | default tier |" + "".join(f" {t} |" for t in tiers)
    head += " default before |" if before is not None else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for clause in clauses:
        row = table.get(clause, {})
        cells = [str(len(row.get("default", [])))] + [str(len(row.get(t, []))) for t in tiers]
        if before is not None:
            cells.append(str(len(before.get(clause, {}).get("default", []))))
        lines.append(f"| {clause} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to collect")
    parser.add_argument("--json", type=Path, help="write the map (node id -> clauses, tier)")
    parser.add_argument("--compare", type=Path, help="an earlier --json map: show its counts")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a spec clause has no default-tier test")
    args = parser.parse_args(argv)
    entries = collect(args.repo)
    if args.json:
        args.json.write_text(json.dumps(entries, indent=0, sort_keys=True))
    table = by_clause(entries)
    before = by_clause(json.loads(args.compare.read_text())) if args.compare else None
    clauses = spec_clauses()
    print("\n".join(render(clauses, table, before)))
    bare = [c for c in clauses if not table.get(c, {}).get("default")]
    lost = [c for c in clauses if before is not None and before.get(c, {}).get("default")
            and not table.get(c, {}).get("default")]
    default = sum(1 for e in entries.values() if e["tier"] == "default")
    print(f"\n{len(clauses)} clauses; {sum(1 for c in clauses if c not in bare)} judged by the "
          f"default tier ({default} tests); without a default-tier test: "
          f"{', '.join(bare) or 'none'}" + (f"; lost since the earlier map: {', '.join(lost)}"
                                            if before is not None else ""))
    return 1 if args.check and (bare or lost) else 0


if __name__ == "__main__":
    sys.exit(main())
