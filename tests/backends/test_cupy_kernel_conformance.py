"""The whole conformance suite, golden vectors and full models included, against the cupy
backend's CUDA kernels compiled for the host (``-DHSCALE_HOST_HARNESS``): on a machine without
a GPU this is the kernel logic's conformance run; on a GPU the suite runs against the real
``cupy`` backend (docs/performance.md has that run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

HARNESS = "hscale.backends.cupy_backend:create_host_harness"


@pytest.mark.slow
@pytest.mark.extended  # about 40 CPU s: compiles the kernels for the host and runs the suite
@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc for the CUDA kernel's host harness")
def test_conformance_suite_on_the_cuda_kernels_built_for_the_host(tmp_path, request):
    # The suite's full-model tests (MiniLM and the tiny decoders, layer by layer: two minutes
    # of CI's time) run only with `pytest -m extended`; the kernel's arithmetic is the same on
    # every layer, and every other test of the suite runs here.
    models = [] if "extended" in (request.config.getoption("-m") or "") else ["-m", "not slow"]
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "hscale.conformance", "-q", "-p",
           "no:cacheprovider", "--backend", HARNESS, *models,
           "--certificate", str(tmp_path / "report-{backend}.json")]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "report-cupy-host-harness.json").read_text())
    tests = report["tests"]
    assert tests.get("failed", 0) == 0 and tests.get("error", 0) == 0, tests
    # every backend test ran, except those of the block-Hessian method, which the kernel does
    # not declare, and those of the other kinds (it is a weight quantizer): nothing skipped for
    # want of a model or another capability
    assert tests.get("passed", 0) >= 390, tests
    others = {reason: n for reason, n in report["skip_reasons"].items()
              if "does not declare capability 'hscale-block'" not in reason
              and " does not declare the kind " not in reason}
    assert not others, others
    assert report["profile"] == "exact" and not report["violations"], report["violations"]
    assert report["verdict"] == "conforms", report["verdicts"]
