"""A run that selects part of the suite says so: the clauses none of whose tests ran are "not
judged" (not "not applicable", which is about the backend), listed in the verdict's parts, and
the summary line says "a partial run"."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_clause_selected_run_is_a_partial_certificate(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hscale", "conform", "--backend", "numpy", "--quick",
         "--clause", "NVFP4-E2M1-1", "--certificate", str(tmp_path / "cert.json")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    cert = json.loads((tmp_path / "cert.json").read_text())
    statuses = {c: row["status"] for c, row in cert["clauses"].items()}
    assert statuses["NVFP4-E2M1-1"] == "pass"
    assert statuses["HSCALE-ARGMIN-1"] == "not judged", cert["clauses"]["HSCALE-ARGMIN-1"]
    assert statuses["NVFP4-CKPT-1"] == "not applicable"  # judged elsewhere, whatever is selected
    assert "HSCALE-ARGMIN-1" in cert["verdicts"]["clauses_not_judged"]
    assert "NVFP4-E2M1-1" not in cert["verdicts"]["clauses_not_judged"]
    assert "(a partial run: " in done.stdout, done.stdout[-2000:]
