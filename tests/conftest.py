"""Fixtures shared by the tests: the seeded tiny decoder on disk and its RTN checkpoints in both
layouts, built once per session; a built-in backend, or a skip saying why it cannot run; the
calibrated full models; the self-tests' subprocess runs of the installed suite; one quick
one-clause `hscale conform` run of the numpy backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: Markers whose tests run only when asked for by name (``pytest -m table``): hours of work
#: that CI and the README's test command leave out, saying so.
OPT_IN_MARKERS = {
    "table": "the real-decoder table of docs/results.md (hours on 2 cores)",
    "extended": "an extended self-test or library run, left out of the README's test command to "
                "keep CI within its time (docs/performance.md, 'Test suite and CI')",
}


def pytest_collection_modifyitems(config, items):
    asked = config.getoption("-m") or ""
    for item in items:
        for marker, what in OPT_IN_MARKERS.items():
            if marker in item.keywords and marker not in asked:
                item.add_marker(pytest.mark.skip(reason=f"{what}: opt in with pytest -m "
                                                        f"{marker}"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    """The seeded tiny decoder saved as a Hugging Face model directory."""
    pytest.importorskip("transformers")
    from hscale.models.synthetic import build_tiny_decoder
    directory = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny_decoder(seed=0).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def checkpoints(tiny, tmp_path_factory) -> dict:
    """format -> the tiny decoder quantized with RTN in that layout."""
    from helpers.checkpoint_edits import quantized
    out = tmp_path_factory.mktemp("checkpoints")
    return {fmt: quantized(tiny, out / fmt, format=fmt)
            for fmt in ("compressed-tensors", "modelopt")}


@pytest.fixture(scope="session")
def numpy_one_clause_run(tmp_path_factory):
    """``(the finished process, its certificate)``: ``hscale conform --backend numpy --quick
    --clause NVFP4-E2M1-1``, a partial run of a weight quantizer."""
    where = tmp_path_factory.mktemp("one-clause")
    done = subprocess.run(
        [sys.executable, "-m", "hscale", "conform", "--backend", "numpy", "--quick",
         "--clause", "NVFP4-E2M1-1", "--certificate", str(where / "cert.json")],
        cwd=where, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done, json.loads((where / "cert.json").read_text())


@pytest.fixture(scope="session")
def runnable_backend():
    """``runnable_backend(name)``: the built-in backend, or a skip with its reason (the CUDA
    backends on a machine without a CUDA device)."""
    from hscale.backends import get

    def backend_here(name):
        backend = get(name)
        ok, why = backend.available()
        if not ok:
            pytest.skip(f"{name} needs a CUDA device to run: {why}")
        return backend
    return backend_here


@pytest.fixture(scope="session")
def zoo():
    """The calibrated full models (the suite's own ``hscale.conformance.zoo``)."""
    from hscale.conformance.zoo import ModelZoo
    return ModelZoo()


@pytest.fixture(scope="session")
def selftest_runs(tmp_path_factory, request):
    """Every subprocess run of the self-tests (mutants, adapters), started together; the
    extended ones only when asked for (``pytest -m extended``)."""
    from helpers.selftest import all_runs
    return all_runs(tmp_path_factory.mktemp("selftest"),
                    extended="extended" in (request.config.getoption("-m") or ""))


def pytest_configure(config):
    """The torch backend's fused walk off for the session (tests/ and conformance/, and the
    processes their tests start) unless the run asks for it (``HSCALE_TORCH_COMPILE`` already
    set): on a cold cache each of its libraries takes one to three minutes of CPU to compile,
    which the default path would spend in whichever test first quantizes a layer of >= 64
    groups. tests/backends/test_fused_walk.py turns it back on for its own tests."""
    import os
    os.environ.setdefault("HSCALE_TORCH_COMPILE", "0")
