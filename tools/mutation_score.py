"""The conformance suite's power, measured: every mutant kernel of the catalogue
(tests/helpers/mutant_kernels/catalogue.py: graded families for every clause of every kind)
certified by ``hscale conform`` under the declaration its fault breaks, clause by clause, at the
default Hypothesis budget; the mutation score, the smallest fault each clause's tests detect, and
the table of docs/conformance.md ("What a certificate means"), rewritten in place.

    nice -n 19 python tools/mutation_score.py                    # everything (about an hour)
    python tools/mutation_score.py --select rcp-six --no-docs    # the mutants whose id has it
    python tools/mutation_score.py --python /tmp/venv/bin/python --results /tmp/wheel.json \\
        --no-docs                                                # against another install

Each mutant runs in ``hscale conform --backend mutant_kernels.catalogue:<id> --clause <its
clause>`` (a control: its kind's whole suite; weight kernels with ``--quick``: the full models
take an hour a kernel) with its
declaration's options, from a directory outside the repository, the kernels on PYTHONPATH
(they import nothing of the kit), with Hypothesis' ``ci`` profile less its shrink phase
(``mutant_kernels.profile``: the same examples, the same detections). Killed: its certificate
says "does not conform"; named: the clause is among the broken ones. Controls (a fault the spec
admits) must conform.

A maintainer script, not a command: it measures the kit with kernels that live in its tests,
and rewrites a file of the repository (as tools/vectors_maintain.py does); a vendor certifies
its own kernel with ``hscale conform``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
HELPERS = REPOSITORY / "tests" / "helpers"
RESULTS = REPOSITORY / "docs" / "conformance-mutation.json"
DOC = REPOSITORY / "docs" / "conformance.md"
BEGIN, END = "<!-- mutation-table:begin", "<!-- mutation-table:end -->"
PROFILE = ["-p", "mutant_kernels.profile", "--hypothesis-profile", "mutation-ci"]
#: Mutants per ``hscale conform`` session (one session's imports and collection are shared).
CHUNK = {"weight": 6, "activation": 10, "gemm": 10, "stochastic": 10, "rht": 10, "tile": 10}
#: What the suite cannot see through a kernel's output, and why (the table's last section).
UNSEEN = {
    "NVFP4-DEQ-1": "weight: the dequantized values are the judges' own product of the codes, "
                   "the bytes and s_g a result returns; a kernel's own dequantize() is not "
                   "called, so no fault of it can show",
    "HSCALE-GPTQ-1": "weight: GPTQ's error feedback is the pipeline's (hscale quantize "
                     "--pipeline gptq), not a quantize call's; the suite checks the backend's "
                     "group step, whose faults the other clauses' families cover",
    "HSCALE-CAL-1": "weight: h is an input of the quantize call; calibration is judged where "
                    "hscale calibrate runs, with a tolerance",
    "NVFP4-ACT-4": "activation: no kernel returns the decoded activation; it follows from the "
                   "bytes and codes NVFP4-ACT-2/-3/-6/-7 judge",
    "NVFP4-ACT-5": "activation: the clause that says how the recipes are judged; its faults "
                   "(a reciprocal beyond the ulp PTX states) are NVFP4-ACT-2's and -3's "
                   "families",
    "NVFP4-GEMM-7": "gemm: the judgement itself (the admissible interval); every GEMM mutant "
                    "is judged by it and named for the clause its fault breaks",
    "NVFP4-E4M3-3": "weight: only the window's clipping to the ladder can show (ladder-ends); "
                    "bytes off the ladder are NVFP4-E4M3-2's saturation",
}


def catalogue():
    sys.path.insert(0, str(HELPERS))
    from mutant_kernels.catalogue import MUTANTS
    return MUTANTS


def sessions(mutants) -> list[tuple[tuple, list]]:
    """(kind, clause, args) -> chunks of mutants run in one session."""
    groups = defaultdict(list)
    for mutant in mutants:  # a control runs its kind's whole suite: no false refusal anywhere
        clause = mutant.clause if mutant.breaks else None
        groups[(mutant.kind, clause, tuple(mutant.args))].append(mutant)
    out = []
    for key, members in groups.items():
        size = CHUNK[key[0]]
        out += [(key, members[k:k + size]) for k in range(0, len(members), size)]
    # the mutants that break a contract first, the cheapest kinds first, the controls (each a
    # kind's whole suite) last: a sweep cut short has measured the most mutants it could
    cost = {"gemm": 0, "tile": 0, "rht": 0, "stochastic": 0, "activation": 1, "weight": 2}
    return sorted(out, key=lambda item: (item[0][1] is None, cost[item[0][0]]))


def run_session(python: str, work: Path, key, members, timeout: int) -> dict:
    kind, clause, args = key
    where = work / f"{kind}-{clause or 'all'}-{members[0].ident}"
    where.mkdir(parents=True, exist_ok=True)
    command = [python, "-m", "hscale", "conform", *(["--clause", clause] if clause else []),
               *args, "--certificate", str(where / "{backend}.json")]
    for mutant in members:
        command += ["--backend", f"mutant_kernels.catalogue:{mutant.ident}"]
    if kind == "weight":
        command.append("--quick")
    command += ["--", *PROFILE]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        str(HELPERS), os.environ.get("PYTHONPATH")])))
    env.pop("CI", None)
    start = time.time()
    try:
        done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True,
                              timeout=timeout)
        code, tail = done.returncode, (done.stdout + done.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        code, tail = None, "timed out"
    seconds = time.time() - start
    results = {}
    for mutant in members:
        path = where / f"{mutant.ident}.json"
        if not path.exists():
            results[mutant.ident] = {"verdict": "no certificate", "exit": code, "output": tail}
            continue
        cert = json.loads(path.read_text())
        broken = cert["verdicts"]["clauses_broken"]
        errors = sorted(cert.get("errors_on_valid_input", {}))
        results[mutant.ident] = {
            "verdict": cert["verdict"], "clauses_broken": broken,
            "named": clause in broken, "errors_on_valid_input": errors,
            "seconds": round(seconds / len(members), 1)}
    return results


def measure(mutants, python: str, workers: int, timeout: int, save=None) -> dict:
    """Every mutant's result; ``save(results)`` after each session (a sweep cut short keeps
    what it measured)."""
    plan = sessions(mutants)
    results = {}
    with tempfile.TemporaryDirectory(prefix="hscale-mutation-") as scratch, \
            ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_session, python, Path(scratch), key, members, timeout)
                   for key, members in plan]
        for k, future in enumerate(futures, 1):
            results.update(future.result())
            print(f"  session {k} of {len(futures)} done ({len(results)} mutants)", flush=True)
            if save is not None:
                save(results)
    return results


def installed(python: str) -> dict:
    done = subprocess.run([python, "-c", "import hscale, sys; print(hscale.__version__); "
                           "print(hscale.__file__); print(sys.version.split()[0])"],
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    version, location, py = (done.stdout.split("\n") + ["", "", ""])[:3]
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True, cwd=REPOSITORY).stdout.strip()
    return {"hscale": version, "location": location, "python": py,
            "commit": commit or "unknown"}


def cpu_seconds() -> float:
    """The CPU time (user + system) of the finished ``hscale conform`` sessions."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------

def score(mutants, results) -> dict:
    breaking = [m for m in mutants if m.breaks and m.ident in results]
    killed = [m for m in breaking if results[m.ident]["verdict"] == "does not conform"]
    named = [m for m in killed if results[m.ident].get("named")]
    controls = [m for m in mutants if not m.breaks and m.ident in results]
    refused = [m for m in controls if results[m.ident]["verdict"] != "conforms"]
    return {"mutants": len(breaking) + len(controls), "breaking": len(breaking),
            "killed": len(killed), "named": len(named),
            "score": round(len(killed) / len(breaking), 4) if breaking else None,
            "controls": len(controls), "controls_refused": [m.ident for m in refused],
            "survivors": [m.ident for m in breaking if m not in killed]}


def rows(mutants, results) -> list[dict]:
    """Per clause, kind and dtype: the mutants, the killed, and per family the smallest
    grade detected (families list their grades smallest first)."""
    table = defaultdict(list)
    for mutant in mutants:
        if mutant.breaks and mutant.ident in results:
            table[(mutant.kind, mutant.clause, mutant.dtype)].append(mutant)
    out = []
    for (kind, clause, dtype), members in sorted(table.items(),
                                                 key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        families = defaultdict(list)
        for mutant in members:
            families[mutant.family].append(mutant)
        smallest = []
        for family, graded in families.items():
            hits = [m for m in graded if results[m.ident]["verdict"] == "does not conform"]
            if len(graded) == 1:
                smallest.append(f"{family}: {'caught' if hits else 'NOT caught'}")
                continue
            first = hits[0].size if hits else "none"
            smallest.append(f"{family}: {first} (of {graded[0].size} .. {graded[-1].size}; "
                            f"{len(hits)}/{len(graded)})")
        killed = sum(results[m.ident]["verdict"] == "does not conform" for m in members)
        named = sum(bool(results[m.ident].get("named")) for m in members)
        out.append({"kind": kind, "clause": clause, "dtype": dtype, "mutants": len(members),
                    "killed": killed, "named": named, "smallest": smallest})
    return out


def markdown(mutants, results, meta) -> str:
    summary = score(mutants, results)
    lines = [f"{BEGIN} (generated by `python tools/mutation_score.py`) -->", "",
             f"Mutation score: **{summary['killed']} of {summary['breaking']}** mutants that "
             f"break a stated contract killed ({100 * summary['score']:.1f}%), "
             f"{summary['named']} of them naming the clause their fault breaks; "
             f"{summary['controls'] - len(summary['controls_refused'])} of "
             f"{summary['controls']} controls (faults the spec admits) conform. "
             f"{summary['mutants']} mutants in all, measured with hscale {meta['hscale']} "
             f"(Python {meta['python']}), Hypothesis' `ci` budget (200 derandomized examples "
             f"a test), each mutant's clause selected with `--clause`, the weight kind with "
             f"`--quick`.", "", *_provenance(meta, len(mutants)), "",
             "| clause | kind | input dtype | mutants | killed | named | smallest fault "
             "detected, per family (smallest of the grades tried; grades caught) |",
             "|---|---|---|---:|---:|---:|---|"]
    for row in rows(mutants, results):
        lines.append(f"| {row['clause']} | {row['kind']} | {row['dtype']} | {row['mutants']} "
                     f"| {row['killed']} | {row['named']} | {'; '.join(row['smallest'])} |")
    lines += ["", "Survivors (mutants that break a stated contract and conformed), each with "
              "why:", ""]
    by_id = {m.ident: m for m in mutants}
    for ident in summary["survivors"]:
        lines.append(f"- `{ident}` ({by_id[ident].clause}, {by_id[ident].family}, "
                     f"{by_id[ident].size}): {by_id[ident].why or 'no reason recorded'}")
    if not summary["survivors"]:
        lines.append("- none")
    lines += ["", "Controls refused (false refusals): "
              + (", ".join(f"`{i}`" for i in summary["controls_refused"]) or "none") + ".", "",
              "The controls, kernels whose fault the spec admits (or that no output can show), "
              "each with why:", ""]
    controls = defaultdict(list)
    for mutant in mutants:
        if not mutant.breaks and mutant.ident in results:
            controls[(mutant.clause, mutant.family, mutant.why)].append(mutant.ident)
    lines += [f"- {clause}, {family} ({', '.join(f'`{i}`' for i in idents)}): {why}"
              for (clause, family, why), idents in controls.items()]
    lines += ["",
              "What no kernel's output shows (no mutant can be killed there), and why:", ""]
    lines += [f"- {clause}: {why}" for clause, why in UNSEEN.items()]
    lines += ["", END]
    return "\n".join(lines)


def _provenance(meta, measured: int) -> list[str]:
    """Where the figures come from: the kit measured (its commit and install), the command,
    its wall and CPU time, and whether the sweep is complete."""
    if "command" not in meta:
        return []
    lines = [f"Measured from commit `{meta.get('commit', 'unknown')}`, the kit installed at "
             f"`{meta['location']}`, by `{meta['command']}`: {meta['seconds']} s wall, "
             f"{meta['cpu_seconds']} s CPU (the `hscale conform` sessions, user + system)."]
    for update in meta.get("updates", []):
        lines.append(f"Then the {update['mutants']} mutants of the kinds "
                     f"{', '.join(update['kinds'])} measured from commit `{update['commit']}` "
                     f"(hscale {update['hscale']}) by `{update['command']}`: "
                     f"{update['seconds']} s wall, {update['cpu_seconds']} s CPU; their results "
                     f"replace any earlier ones.")
    total = meta.get("catalogue")
    if total and measured < total:
        lines.append(f"**A partial sweep**: {measured} of the catalogue's {total} mutants "
                     f"measured (the run was cut short); the figures above count those only.")
    return lines


def write_docs(text: str, path: Path = DOC) -> None:
    doc = path.read_text(encoding="utf-8")
    start, stop = doc.index(BEGIN), doc.index(END) + len(END)
    path.write_text(doc[:start] + text + doc[stop:], encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose installed kit runs hscale conform")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--select", default=None,
                        help="only the mutants of this kind, or of this clause, or whose id "
                             "contains this, or the controls ('controls'); several, "
                             "comma-separated")
    parser.add_argument("--ids", default=None,
                        help="only these mutants (comma-separated ids)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true",
                        help="leave docs/conformance.md alone")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the table from --results without running anything")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per session")
    args = parser.parse_args(argv)
    every = catalogue()
    wanted = None if args.select is None else args.select.split(",")
    kinds = {m.kind for m in every.values()}
    chosen = [m for m in every.values() if wanted is None or any(
        w == m.kind if w in kinds else  # a kind's name selects that kind only
        w in m.ident or w == m.clause or w == "controls" and not m.breaks for w in wanted)]
    if args.ids:
        wanted = args.ids.split(",")
        unknown = [i for i in wanted if i not in every]
        if unknown:
            parser.error(f"--ids: no mutant {', '.join(unknown)}")
        chosen = [every[i] for i in wanted]
    if args.report_only:
        stored = json.loads(args.results.read_text())
        results, meta = stored["results"], stored["meta"]
    else:
        meta = installed(args.python)
        meta["command"] = shlex.join(["python", "tools/mutation_score.py",
                                      *(argv if argv is not None else sys.argv[1:])])
        meta["catalogue"] = len(every)
        print(f"{len(chosen)} mutants, hscale {meta['hscale']} at {meta['location']}",
              flush=True)
        start = time.time()
        partial = bool(args.select or args.ids)
        stored = (json.loads(args.results.read_text())
                  if partial and args.results.exists() else None)

        def save(measured: dict) -> tuple[dict, dict]:
            now = {**meta, "seconds": round(time.time() - start),
                   "cpu_seconds": round(cpu_seconds())}
            merged = measured
            if stored is not None:  # a partial run updates the stored results and says so
                merged = {**stored["results"], **measured}
                update = {k: now[k] for k in ("commit", "hscale", "command", "seconds",
                                              "cpu_seconds")}
                update["kinds"] = sorted({m.kind for m in chosen})
                update["mutants"] = len(chosen)
                now = {**stored["meta"], "catalogue": len(every),
                       "updates": [*stored["meta"].get("updates", []), update]}
            args.results.write_text(json.dumps({"meta": now, "score": score(
                [every[i] for i in merged if i in every], merged), "results": merged},
                indent=1, sort_keys=True) + "\n")
            return merged, now

        results, meta = save(measure(chosen, args.python, args.workers, args.timeout, save))
    measured = [m for m in every.values() if m.ident in results]  # the catalogue's order
    summary = score(measured, results)
    print(f"score {summary['killed']}/{summary['breaking']} ({summary['score']}); survivors "
          f"{summary['survivors']}; controls refused {summary['controls_refused']}")
    if not args.no_docs:
        write_docs(markdown(measured, results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
