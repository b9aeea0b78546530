"""A run that selects part of the suite says so: the clauses none of whose tests ran are "not
judged" (not "not applicable", which is about the backend), listed in the verdict's parts, and
the summary line says "a partial run"."""

from __future__ import annotations


def test_a_clause_selected_run_is_a_partial_certificate(numpy_one_clause_run):
    done, cert = numpy_one_clause_run  # hscale conform --backend numpy --quick --clause E2M1-1
    statuses = {c: row["status"] for c, row in cert["clauses"].items()}
    assert statuses["NVFP4-E2M1-1"] == "pass"
    assert statuses["HSCALE-ARGMIN-1"] == "not judged", cert["clauses"]["HSCALE-ARGMIN-1"]
    assert statuses["NVFP4-CKPT-1"] == "not applicable"  # judged elsewhere, whatever is selected
    # no bad input of section 5 was fed: no input-contract result is claimed for it
    assert statuses["NVFP4-IN-1"] == "not judged", cert["clauses"]["NVFP4-IN-1"]
    assert "NVFP4-IN-1" in cert["verdicts"]["clauses_not_judged"]
    assert "HSCALE-ARGMIN-1" in cert["verdicts"]["clauses_not_judged"]
    assert "NVFP4-E2M1-1" not in cert["verdicts"]["clauses_not_judged"]
    assert "(a partial run: " in done.stdout, done.stdout[-2000:]


def test_a_clause_asked_for_and_not_judged_exits_1(tmp_path):
    """`hscale conform --clause NVFP4-ACT-2` on an exact-recipe kernel: every test of the clause
    skips there (another recipe's), so nothing of it was judged: exit 1 with one line saying
    why, never "conforms" with exit 0 (issue 39)."""
    import os
    import subprocess
    import sys

    from helpers.selftest import tests_on_path

    done = subprocess.run(
        [sys.executable, "-m", "hscale", "conform", "--backend", "activation_kernels:exact",
         "--clause", "NVFP4-ACT-2", "--certificate", str(tmp_path / "cert.json")],
        cwd=tmp_path, env=dict(os.environ, **tests_on_path()), capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if "--clause NVFP4-ACT-2" in line]
    assert len(said) == 1 and "was not judged on backend 'vendor-act-exact'" in said[0] \
        and "declares the recipe 'exact'" in said[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
