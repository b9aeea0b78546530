"""One conformance core: the suite and ``hscale vectors check`` report a planted error with the
same findings, word for word, and ``--clause ID`` runs exactly the tests and vector cases of that
clause. Both run the installed suite as a user does (``pytest --pyargs hscale.conformance``), in
a subprocess started outside the repository."""

from __future__ import annotations

import io
import re
import subprocess

import pytest

from hscale.conformance import mutants
from hscale.judge.cases import Rejection
from hscale.vectors import load_vectors
from hscale.cli import main as hscale_main
from hscale.vectors import LEVEL0_DIR as DEFAULT_LEVEL0_DIR
from helpers.selftest import collected_clause_markers, suite_command

# Keeps the first candidate in window order on an exact tie (HSCALE-ARGMIN-1 says: the first
# in priority order 0, +1, -1, ...): the argmin-tie-* vectors catch it.
MUTANT = "first_candidate_tie"
FINDING = re.compile(r"^\s+(\[[A-Z0-9-]+\] .*)$")


def run_suite(tmp_path, *args) -> subprocess.CompletedProcess:
    # No short summary: under CI=true pytest repeats each full failure text there.
    cmd = suite_command("--certificate", str(tmp_path / "report.json"), "-rN", *args)
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def findings_by_case(text: str, header: re.Pattern) -> dict[str, list[str]]:
    """{case id: its finding lines} from a report in which each case's block starts with a line
    matched by ``header`` (group 1: the case id)."""
    found: dict[str, list[str]] = {}
    case = None
    for line in text.splitlines():
        opened = header.search(line)
        if opened:
            case = opened.group(1)
            continue
        finding = FINDING.match(line)
        if finding and case is not None:
            found.setdefault(case, []).append(finding.group(1))
    return found


def test_a_planted_error_reads_the_same_in_the_suite_and_in_vectors_check(tmp_path):
    # The suite on the mutant, the argmin-tie vector cases only.
    suite = run_suite(tmp_path, "--backend", f"hscale.conformance.mutants:{MUTANT}", "-k",
                      "test_vectors and argmin-tie")
    assert suite.returncode == 1, suite.stdout[-3000:] + suite.stderr[-2000:]
    in_suite = findings_by_case(suite.stdout, re.compile(r"does not conform .* on (\S+):"))

    # The same mutant's results written as a third party writes them, judged by vectors check.
    backend = getattr(mutants, MUTANT)()
    lines = []
    for case_id, (_, case) in load_vectors(DEFAULT_LEVEL0_DIR).items():
        if isinstance(case.expected, Rejection):
            continue
        (weight, h), options = case.call_args()
        result = backend.quantize(weight, h, **options)
        rows, cols = weight.shape
        for r in range(rows):
            for i in range(cols // 16):
                lines.append(f"{case_id} {r} {i} {int(result.scale_bytes[r, i]):02x} "
                             f"{result.packed[r, i * 8:(i + 1) * 8].tobytes().hex()}")
    observed = tmp_path / "observed.txt"
    observed.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    from contextlib import redirect_stdout
    with redirect_stdout(out):
        status = hscale_main(["vectors", "check", str(DEFAULT_LEVEL0_DIR), "--observed",
                              str(observed), "--errors", "1000"])
    assert status == 1, out.getvalue()[-2000:]
    in_check = findings_by_case(out.getvalue(), re.compile(r"^(\S+) r\d+ g\d+ "))
    in_check = {case: found for case, found in in_check.items() if case.startswith("argmin-tie")}

    assert in_suite, suite.stdout[-3000:]
    assert in_suite == in_check, (in_suite, in_check)
    assert all(f.startswith("[HSCALE-ARGMIN-1]") for found in in_suite.values() for f in found)


def collected(tmp_path, *args) -> set[str]:
    done = run_suite(tmp_path, "--backend", "numpy", "--collect-only", *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_clause_selects_exactly_the_tests_and_vector_cases_of_that_clause(tmp_path):
    """Every test carrying the clause (its marker, or a vector case's own clauses) and nothing
    else; the markers are read from a second collection that prints them."""
    clause = "HSCALE-ARGMIN-1"
    selected = collected(tmp_path, "--clause", clause)
    everything = collected(tmp_path)
    marked = _marked_with(tmp_path, clause)
    assert selected == marked, (sorted(selected - marked)[:5], sorted(marked - selected)[:5])
    vector_ids = {i for i, (_, c) in load_vectors(DEFAULT_LEVEL0_DIR).items()
                  if clause in c.clauses}
    in_selection = {re.search(r"test_vectors\[numpy-(.+)\]$", t).group(1) for t in selected
                    if "test_vectors[" in t}
    assert in_selection == vector_ids and len(vector_ids) >= 10
    assert len(selected) < len(everything)


def _marked_with(tmp_path, clause) -> set[str]:
    """Node ids of the collected tests whose clause markers include ``clause``."""
    markers = collected_clause_markers(tmp_path, "--backend", "numpy")
    return {nodeid for nodeid, ids in markers.items() if clause in ids}
