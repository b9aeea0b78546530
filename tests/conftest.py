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

#: The tiers beyond the default one: a test carrying one of these markers runs only when its
#: marker is asked for by name (``pytest -m extended``); the README's test command, which CI
#: runs, leaves it out and says so in one line per tier. Their times: docs/performance.md, "Test
#: suite and CI".
OPT_IN_MARKERS = {
    "extended": "the deeper runs: more self-test kernels, slips and library runs, full models "
                "in every dtype, every simulator",
    "fuzz": "the checkpoint fuzzer's marker run, 1,000 mutated checkpoints",
    "table": "the real-decoder table of docs/results.md (hours on 2 cores)",
}
#: How many tests of each opt-in tier a session left out, for its summary line; under xdist
#: they travel from a worker (``workeroutput``) to the controller, which collects nothing.
LEFT_OUT = pytest.StashKey[dict]()
LEFT_OUT_KEY = "hscale_tests_left_out"


#: Tests of the installed suite (conformance/, which a vendor runs whole and which knows
#: nothing of the kit's tiers) that the kit's own run puts in an opt-in tier: node-id prefix ->
#: (tier, why). The seeded tiny decoder's full-model tests stay in the default tier.
SUITE_TIERS = {
    "conformance/test_full_models.py::test_full_model[numpy-minilm-": (
        "extended", "all-MiniLM-L6-v2 on the reference backend, about 20 CPU s a configuration"),
    "conformance/test_full_models.py::test_full_model[torch-minilm-": (
        "extended", "all-MiniLM-L6-v2 on the torch backend, about 17 CPU s a configuration"),
}


def opt_in_tier(item) -> str | None:
    """The opt-in tier ``item`` belongs to, or None for the default tier."""
    return next((marker for marker in OPT_IN_MARKERS if marker in item.keywords), None)


def asked_for(config, marker: str) -> bool:
    """Whether the session's ``-m`` expression names ``marker``."""
    return marker in (config.getoption("-m") or "")


def pytest_addoption(parser):
    parser.addoption("--clause-map", metavar="PATH", default=None,
                     help="write every collected test's clause IDs and tier to PATH (JSON; "
                          "tools/clause_map.py reads it)")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        for prefix, (tier, _) in SUITE_TIERS.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(getattr(pytest.mark, tier))
    # the tests reading the self-tests' runs last: the runs are built in the background while
    # the others run (selftest_runs_started)
    items.sort(key=uses_selftest_runs)
    left_out: dict[str, int] = {}
    kept = []
    for item in items:
        tier = opt_in_tier(item)
        if tier is not None and not asked_for(config, tier):
            left_out[tier] = left_out.get(tier, 0) + 1
        else:
            kept.append(item)
    path = config.getoption("--clause-map")
    if path:
        write_clause_map(path, items, kept)
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in set(kept)])
        items[:] = kept
    config.stash[LEFT_OUT] = left_out
    if hasattr(config, "workeroutput"):
        config.workeroutput[LEFT_OUT_KEY] = left_out


def write_clause_map(path: str, items, kept) -> None:
    """{node id: {"clauses": [...], "tier": "default" or the opt-in marker, "selected": bool}}."""
    chosen = set(kept)
    entries = {item.nodeid: {"clauses": sorted({c for m in item.iter_markers("clause")
                                                for c in m.args}),
                             "tier": opt_in_tier(item) or "default",
                             "selected": item in chosen}
               for item in items}
    Path(path).write_text(json.dumps(entries, indent=0, sort_keys=True), encoding="utf-8")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker's count of the tests it left out (every worker collects the same)."""
    sent = getattr(node, "workeroutput", {}).get(LEFT_OUT_KEY)
    if sent is not None:
        node.config.stash[LEFT_OUT] = sent


def pytest_terminal_summary(terminalreporter, config):
    for marker, count in config.stash.get(LEFT_OUT, {}).items():
        terminalreporter.write_line(
            f"left out: {count} tests of the opt-in tier '{marker}' ({OPT_IN_MARKERS[marker]}): "
            f"pytest -m {marker}")


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


def uses_selftest_runs(item) -> bool:
    return "selftest_runs" in getattr(item, "fixturenames", ())


@pytest.fixture(scope="session", autouse=True)
def selftest_runs_started(tmp_path_factory, request):
    """The self-tests' subprocess runs (mutants, adapters, vendor kernels; the extended ones
    only when asked for, ``pytest -m extended``) started in the background by the first worker
    of a session that has tests reading them, once per session (tests/helpers/shared.py)."""
    if any(uses_selftest_runs(item) for item in request.session.items):
        from helpers.selftest import all_runs
        from helpers.shared import start_in_background
        extended = "extended" in (request.config.getoption("-m") or "")
        start_in_background(tmp_path_factory, "selftest",
                            lambda directory: all_runs(directory, extended=extended))


@pytest.fixture(scope="session")
def selftest_runs(tmp_path_factory, selftest_runs_started):
    """Every run of the self-tests, once they are done."""
    from helpers.shared import background_result
    return background_result(tmp_path_factory, "selftest")


def pytest_configure(config):
    """The torch backend's fused walk off for the session (tests/ and conformance/, and the
    processes their tests start) unless the run asks for it (``HSCALE_TORCH_COMPILE`` already
    set): on a cold cache each of its libraries takes one to three minutes of CPU to compile,
    which the default path would spend in whichever test first quantizes a layer of >= 64
    groups. tests/backends/test_fused_walk.py turns it back on for its own tests.

    Under pytest-xdist, one torch thread per worker (and per process a worker starts) unless
    ``OMP_NUM_THREADS`` says otherwise: the workers are as many as the cores already, and
    torch's intra-op threads (one per core in every worker) contend and spin while they wait,
    about a quarter more CPU for the same tests (conformance/test_hypothesis.py on two
    workers: 77 CPU s against 105). The tests of the torch backend's worker threads set their
    own count (tests/backends/test_backends_tensor.py, test_fused_walk.py)."""
    import os
    os.environ.setdefault("HSCALE_TORCH_COMPILE", "0")
    if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
        import importlib.util
        if importlib.util.find_spec("torch") is not None:
            import torch
            torch.set_num_threads(1)
