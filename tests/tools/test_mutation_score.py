"""tools/mutation_score.py, the measure of the suite's power (docs/conformance.md, "What a
certificate means"), kept honest in the default tier: its catalogue covers every clause a
kernel's output can break (the others are listed with why not), and a handful of its mutants
run end to end through hscale conform: the killed are killed naming their clause, the control
conforms. The whole sweep (641 mutants, about 25 minutes) is the tool's own run."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

TOOL = REPO_ROOT / "tools" / "mutation_score.py"


def _tool():
    spec = importlib.util.spec_from_file_location("mutation_score", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_catalogue_covers_every_clause_a_kernel_can_break():
    from hscale.judge.kinds import KINDS
    tool = _tool()
    MUTANTS = tool.catalogue()  # noqa: N806 - the catalogue's table
    breaking = [m for m in MUTANTS.values() if m.breaks]
    assert len(breaking) >= 500, len(breaking)
    covered = {(m.kind, m.clause) for m in breaking}
    for kind in KINDS.values():
        for clause in kind.clauses():
            assert (kind.name, clause) in covered or clause in tool.UNSEEN, (kind.name, clause)
    assert not covered & {(k.name, c) for k in KINDS.values() for c in tool.UNSEEN
                          if c in k.clauses() and c != "NVFP4-E4M3-3"}
    for mutant in MUTANTS.values():
        assert re.fullmatch(r"[\w.+-]+", mutant.ident), mutant.ident
        assert mutant.breaks or mutant.why, mutant.ident  # a control says why it must pass
    families = {}
    for mutant in breaking:  # a family's grades are listed smallest first, each once
        families.setdefault((mutant.clause, mutant.family, mutant.dtype), []).append(mutant)
    assert max(len(v) for v in families.values()) >= 7


@pytest.mark.extended  # four hscale conform sessions, about 16 s; the sweep is the tool's run
def test_a_handful_of_mutants_end_to_end(tmp_path):
    ids = ["a-fast-math-rcp-six-down-2-bf16", "a-fast-math-rcp-six-down-1-bf16",
           "g-split-k-slice0-2-nvfp4-f32", "s-dropped-carry-256-straight-f32"]
    results = tmp_path / "results.json"
    done = subprocess.run([sys.executable, str(TOOL), "--ids", ",".join(ids), "--results",
                           str(results), "--no-docs"], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stored = json.loads(results.read_text())
    got = stored["results"]
    assert got[ids[0]]["verdict"] == "does not conform" and got[ids[0]]["named"], got[ids[0]]
    assert got[ids[1]]["verdict"] == "conforms", got[ids[1]]
    assert got[ids[2]]["verdict"] == "does not conform" and got[ids[2]]["named"], got[ids[2]]
    assert got[ids[3]]["verdict"] == "does not conform" and got[ids[3]]["named"], got[ids[3]]
    assert stored["score"]["score"] == 1.0 and stored["score"]["controls_refused"] == []
    assert "score 3/3" in done.stdout


def test_the_report_names_every_survivor_and_refused_control():
    tool = _tool()
    MUTANTS = tool.catalogue()  # noqa: N806
    chosen = [MUTANTS[i] for i in ("w-tie-flip-3-f32", "w-tie-flip-4-f32", "w-None-0-f32")]
    results = {"w-tie-flip-3-f32": {"verdict": "does not conform", "named": True},
               "w-tie-flip-4-f32": {"verdict": "conforms"},
               "w-None-0-f32": {"verdict": "does not conform"}}
    text = tool.markdown(chosen, results, {"hscale": "x", "python": "3"})
    assert "**1 of 2** mutants that break a stated contract killed (50.0%)" in text
    assert "- `w-tie-flip-4-f32` (NVFP4-E2M1-2," in text
    assert "Controls refused (false refusals): `w-None-0-f32`." in text
    assert ("- NVFP4-E2M1-2, the quantizer without a fault (`w-None-0-f32`): the spec's "
            "arithmetic: it must conform") in text
    assert "midpoint 3 (of midpoint 3 .. midpoint 4; 1/2)" in text


def test_a_sweep_cut_short_keeps_what_it_measured(tmp_path, monkeypatch):
    """Sessions run the mutants that break a contract first (GEMM, activation, weight: the
    cheapest first) and the controls last; the results file is written after every session
    and says from which commit, by which command, in how much wall and CPU time; a table from
    fewer mutants than the catalogue says it is partial. (The sessions are stubbed: each
    mutant killed, each control conforming.)"""
    tool = _tool()
    MUTANTS = tool.catalogue()  # noqa: N806
    ids = ["w-None-0-f32", "w-tie-flip-3-f32", "g-None-0-nvfp4-f32",
           "a-fast-math-rcp-six-down-2-bf16", "g-split-k-slice0-2-nvfp4-f32"]
    order = [members[0].ident for _, members in tool.sessions([MUTANTS[i] for i in ids])]
    assert order == ["g-split-k-slice0-2-nvfp4-f32", "a-fast-math-rcp-six-down-2-bf16",
                     "w-tie-flip-3-f32", "g-None-0-nvfp4-f32", "w-None-0-f32"]

    def session(python, work, key, members, timeout):
        return {m.ident: {"verdict": "does not conform" if m.breaks else "conforms",
                          "named": m.breaks} for m in members}

    snapshots, measure = [], tool.measure

    def recording(mutants, python, workers, timeout, save=None):
        def saved(so_far):
            out = save(so_far)
            snapshots.append(json.loads(results.read_text()))
            return out
        return measure(mutants, python, workers, timeout, saved)

    monkeypatch.setattr(tool, "measure", recording)
    monkeypatch.setattr(tool, "run_session", session)
    results = tmp_path / "results.json"
    assert tool.main(["--ids", ",".join(ids), "--results", str(results), "--no-docs",
                      "--workers", "1"]) == 0
    assert [len(snap["results"]) for snap in snapshots] == [1, 2, 3, 4, 5]
    assert snapshots[0]["meta"]["command"].startswith("python tools/mutation_score.py --ids")
    stored = json.loads(results.read_text())
    assert len(stored["results"]) == 5 and stored["score"]["score"] == 1.0
    meta = stored["meta"]
    assert meta["catalogue"] == len(MUTANTS) and meta["commit"]
    assert meta["seconds"] >= 0 and meta["cpu_seconds"] >= 0
    text = tool.markdown([MUTANTS[i] for i in ids], stored["results"], meta)
    assert f"Measured from commit `{meta['commit']}`" in text
    assert f"by `{meta['command']}`" in text
    assert f"**A partial sweep**: 5 of the catalogue's {len(MUTANTS)} mutants" in text


def test_a_partial_run_records_its_kinds_beside_the_full_sweep(tmp_path, monkeypatch):
    """A run of some kinds (--select, comma-separated; a kind's name selects that kind only)
    merges its results into the stored ones, keeps the full sweep's commit and command, and
    records its own kinds, commit and command as an update that the table states. (Sessions
    stubbed.)"""
    tool = _tool()
    MUTANTS = tool.catalogue()  # noqa: N806
    monkeypatch.setattr(tool, "run_session", lambda python, work, key, members, timeout: {
        m.ident: {"verdict": "does not conform" if m.breaks else "conforms", "named": m.breaks}
        for m in members})
    results = tmp_path / "results.json"
    full = {"commit": "0000001", "command": "python tools/mutation_score.py", "hscale": "x",
            "location": "/x", "python": "3", "seconds": 10, "cpu_seconds": 9,
            "catalogue": 548}
    results.write_text(json.dumps({"meta": full, "results": {
        "w-tie-flip-3-f32": {"verdict": "does not conform", "named": True}}}))
    assert tool.main(["--select", "tile,rht", "--results", str(results), "--no-docs",
                      "--workers", "1"]) == 0
    stored = json.loads(results.read_text())
    chosen = {i for i, m in MUTANTS.items() if m.kind in ("tile", "rht")}
    assert set(stored["results"]) == chosen | {"w-tie-flip-3-f32"}
    meta = stored["meta"]
    assert (meta["commit"], meta["command"], meta["seconds"]) == ("0000001", full["command"], 10)
    assert meta["catalogue"] == len(MUTANTS)
    [update] = meta["updates"]
    assert update["kinds"] == ["rht", "tile"] and update["mutants"] == len(chosen)
    assert update["command"] == "python tools/mutation_score.py --select tile,rht --results " \
        f"{results} --no-docs --workers 1"
    text = tool.markdown([MUTANTS[i] for i in stored["results"]], stored["results"], meta)
    assert (f"Then the {len(chosen)} mutants of the kinds rht, tile measured from commit "
            f"`{update['commit']}`") in text
