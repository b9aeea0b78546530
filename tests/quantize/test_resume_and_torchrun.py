"""An interrupted block-by-block run resumes from its last completed block, and torchrun with
two gloo processes writes the same checkpoint as one process: byte for byte, in every case.

* interrupted by Ctrl-C (KeyboardInterrupt) after its second block, and killed (SIGKILL) once
  its first block's state is on disk: the next run of the same command says it resumes, and its
  checkpoint is the uninterrupted run's, bit for bit;
* a run with other options does not adopt the partial output (it starts afresh);
* ``torchrun --nproc-per-node 2 -m hscale quantize`` (gloo, CPU): batches and searches split
  over the two processes, the statistics summed; the same bytes as one process, dense and MoE.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.llm_families import written  # noqa: E402

from hscale.quantize import quantize_model  # noqa: E402
from hscale.quantize.resume import STATE_NAME  # noqa: E402

OPTIONS = dict(progress=False, batch_size=4, samples=24)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


@pytest.fixture(scope="module")
def uninterrupted(root):
    """``uninterrupted(family)``: (the family's 3-block model, its checkpoint written by one
    uninterrupted process), each made once."""
    made = {}

    def make(family):
        if family not in made:
            source = written(root, family, num_hidden_layers=3)
            out = root / f"{family}-uninterrupted"
            quantize_model(model_dir=str(source), out=str(out), **OPTIONS)
            made[family] = source, out
        return made[family]
    return make


def weight_bytes(directory: Path) -> dict:
    """Every file of a checkpoint but its report (whose times differ), as bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.is_file() and p.name != "quantization_report.json"}


def _interrupted(monkeypatch, source: Path, out: Path, after: int, **options) -> Path:
    """A run stopped by Ctrl-C (KeyboardInterrupt) once its block ``after`` is durable: the
    partial output it leaves."""
    from hscale.quantize import sequential
    real = sequential.SequentialRun._checkpoint_state

    def interrupted(self, index, *args):
        real(self, index, *args)
        if index == after:
            raise KeyboardInterrupt
    monkeypatch.setattr(sequential.SequentialRun, "_checkpoint_state", interrupted)
    with pytest.raises(KeyboardInterrupt):
        quantize_model(model_dir=str(source), out=str(out), **{**OPTIONS, **options})
    monkeypatch.undo()
    assert not out.exists()
    (partial,) = out.parent.glob(f".{out.name}.partial-*")
    assert json.loads((partial / STATE_NAME).read_text())["blocks_done"] == after + 1
    return partial


def test_ctrl_c_after_a_block_resumes_to_the_same_bytes(uninterrupted, tmp_path, monkeypatch):
    source, whole = uninterrupted("llama")
    out = tmp_path / "out"
    _interrupted(monkeypatch, source, out, after=1)
    lines = []
    report = quantize_model(model_dir=str(source), out=str(out), log=lines.append, **OPTIONS)
    assert any(line.startswith("resuming: blocks 0..1 of 3") for line in lines), lines
    assert weight_bytes(out) == weight_bytes(whole)
    assert len(report.layers) == 21 and not list(tmp_path.glob(".out.*"))
    assert not (out / STATE_NAME).exists() and not (out / "hidden").exists()


def test_a_run_with_other_options_does_not_adopt_the_partial_output(uninterrupted, tmp_path,
                                                                    monkeypatch):
    source, _ = uninterrupted("llama")
    out = tmp_path / "out"
    partial = _interrupted(monkeypatch, source, out, after=0)
    lines = []
    quantize_model(model_dir=str(source), out=str(out), log=lines.append, method="scale-only",
                   **OPTIONS)
    assert not any(line.startswith("resuming") for line in lines), lines
    assert not partial.exists() and not list(tmp_path.glob(".out.*"))
    fresh = tmp_path / "fresh"
    quantize_model(model_dir=str(source), out=str(fresh), method="scale-only", **OPTIONS)
    assert weight_bytes(out) == weight_bytes(fresh)


@pytest.mark.extended  # about 45 CPU s; Ctrl-C's resume and the killed-run test keep the path
def test_killed_after_a_block_resumes_to_the_same_bytes(uninterrupted, tmp_path):
    """SIGKILL (no handler runs, nothing is cleaned up) in a fresh process the moment its first
    block's state is on disk; the next run adopts what it left."""
    source, whole = uninterrupted("qwen3_moe")
    out = tmp_path / "out"
    script = f"""
import os, signal
from hscale.quantize import quantize_model, sequential
real = sequential.SequentialRun._checkpoint_state
def killed(self, index, *args):
    real(self, index, *args)
    os.kill(os.getpid(), signal.SIGKILL)
sequential.SequentialRun._checkpoint_state = killed
quantize_model(model_dir={str(source)!r}, out={str(out)!r}, **{OPTIONS!r})
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert not out.exists()
    (partial,) = tmp_path.glob(".out.partial-*")
    assert json.loads((partial / STATE_NAME).read_text())["blocks_done"] == 1
    lines = []
    quantize_model(model_dir=str(source), out=str(out), log=lines.append, **OPTIONS)
    assert any(line.startswith("resuming: blocks 0..0 of 3") for line in lines), lines
    assert weight_bytes(out) == weight_bytes(whole)
    assert not list(tmp_path.glob(".out.*"))


def _torchrun(nproc: int, source: Path, out: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--master-port", str(29500 + os.getpid() % 1000), "-m", "hscale", "quantize",
               str(source), "--out", str(out), "--quiet", "--batch-size", "4", "--samples", "24"]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return time.perf_counter() - started


# the MoE family's run (about 25 CPU s) is in the extended tier
@pytest.mark.parametrize("family", ["llama", pytest.param("qwen3_moe", marks=pytest.mark.extended)])
def test_torchrun_two_gloo_processes_write_one_processs_bytes(uninterrupted, tmp_path, family):
    source, one = uninterrupted(family)
    two = tmp_path / "two"
    seconds = _torchrun(2, source, two)
    print(f"\ntorchrun --nproc-per-node 2 ({family}, 3 blocks): {seconds:.1f} s")
    assert weight_bytes(two) == weight_bytes(one)
    report = json.loads((two / "quantization_report.json").read_text())
    assert report["path"] == "block by block on 2 processes"
    assert len(report["layers"]) == len(json.loads(
        (one / "quantization_report.json").read_text())["layers"])
