"""``hscale eval``: perplexity and KL divergence from the original, checked against routes that do
not go through it: transformers' own loss of the model (and of the original with the
checkpoint's weights copied in, exactly or rounded to bfloat16 as compressed-tensors decompresses
them), torch's own cross-entropy and KL divergence, scipy's Student t; and every user mistake
one line with exit code 2 (docs/cli.md).

The models are the seeded tiny Llama of tests/helpers/llm_families.py (synthetic weights, a byte-level
tokenizer) and its RTN checkpoints: seconds, for CI. SmolLM2 (a real trained decoder) and
llama.cpp are in tests/evaluation/test_eval_smollm2.py.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers.cli import hscale_here  # noqa: E402
from helpers.paths import REPO_ROOT  # noqa: E402
from helpers.checkpoint_edits import quantized  # noqa: E402
from hscale.cli import main  # noqa: E402
from hscale.evaluation.intervals import student_t_quantile, t_interval  # noqa: E402
from hscale.evaluation.scores import score_window  # noqa: E402
from hscale.evaluation.text import cut_windows, read_documents  # noqa: E402
from helpers.llm_families import written  # noqa: E402

HELDOUT = REPO_ROOT / "hscale" / "calibration" / "data" / "heldout.txt"
CONTEXT, WINDOWS = 128, 3


# --------------------------------------------------------------------------------------------
# the parts: windows, documents, scores, intervals
# --------------------------------------------------------------------------------------------

def test_windows_are_cut_as_llama_perplexity_cuts_them():
    """A BOS first, windows of `context` consecutive tokens, each window's first token replaced
    by the BOS; position j predicts the text's token j + 1 (never the BOS)."""
    tokens = list(range(100, 125))  # 25 tokens
    w = cut_windows(tokens, context=8, count=None, bos=1)
    assert (w.tokens, w.available, w.count, w.first) == (26, 3, 3, 0)
    assert w.ids.tolist() == [[1, 100, 101, 102, 103, 104, 105, 106],
                              [1, 108, 109, 110, 111, 112, 113, 114],
                              [1, 116, 117, 118, 119, 120, 121, 122]]
    assert w.targets.tolist() == [[100, 101, 102, 103, 104, 105, 106],
                                  [108, 109, 110, 111, 112, 113, 114],
                                  [116, 117, 118, 119, 120, 121, 122]]
    plain = cut_windows(tokens, context=8, count=2, bos=None, scored="second-half")
    assert plain.ids.tolist()[1] == list(range(108, 116)) and plain.available == 3
    assert (plain.first, plain.scored_per_window, plain.scored) == (4, 3, 6)
    with pytest.raises(ValueError, match=r"--windows 4: the text gives 25 tokens, 3 windows"):
        cut_windows(tokens, 8, 4, None)
    with pytest.raises(ValueError, match=r"gives 25 tokens, fewer than one window of --context"):
        cut_windows(tokens, 64, None, None)
    with pytest.raises(ValueError, match="--context 2: too short"):
        cut_windows(tokens, 2, None, None, scored="second-half")


def test_documents_text_whole_jsonl_records_directory_in_order(tmp_path):
    text = "# a heading, kept\n\n  indented line, kept as it is\n"
    (tmp_path / "b.txt").write_text(text)
    (tmp_path / "a.jsonl").write_text('{"text": "first"}\n\n{"text": "second"}\n')
    assert read_documents(tmp_path / "b.txt") == [text]
    assert read_documents(tmp_path / "a.jsonl") == ["first", "second"]
    assert read_documents(tmp_path) == ["first", "second", text]
    (tmp_path / "c.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"^--data .*c.jsonl, line 1: no field 'text'"):
        read_documents(tmp_path / "c.jsonl")
    (tmp_path / "d.txt").write_bytes(b"\xff\xfe not utf-8 \xc3")
    with pytest.raises(ValueError, match=r"^--data .*d.txt: unreadable as UTF-8"):
        read_documents(tmp_path / "d.txt")
    with pytest.raises(ValueError, match=r"^--data .*missing: no such file"):
        read_documents(tmp_path / "missing")


def test_documents_of_a_datasets_directory(tmp_path):
    """A ``save_to_disk`` directory: its --text-field column, as --calibration-data reads it."""
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"body": ["first record", "second record"]}).save_to_disk(
        str(tmp_path / "set"))
    assert read_documents(tmp_path / "set", "body") == ["first record", "second record"]
    with pytest.raises(ValueError, match=r"^--data .*set: no column 'text' \(it has body"):
        read_documents(tmp_path / "set")


def test_scores_are_torch_cross_entropy_and_kl_divergence():
    """Negative log-likelihood against torch's cross_entropy, KL(P || Q) against torch's
    kl_div (its own formula, log-targets), top-1 agreement by counting; the positions before
    `first` are not scored."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 50, generator=g) * 3
    reference = logits + torch.randn(20, 50, generator=g)
    targets = torch.randint(0, 50, (19,), generator=g)
    got = score_window(logits[5:], targets.numpy(), first=5, reference=reference[5:19])
    expected_nll = torch.nn.functional.cross_entropy(logits[5:19].double(), targets[5:],
                                                     reduction="none")
    np.testing.assert_allclose(got.nll, expected_nll.numpy(), rtol=1e-12)
    log_p = torch.log_softmax(reference[5:19].double(), -1)
    log_q = torch.log_softmax(logits[5:19].double(), -1)
    expected_kl = torch.nn.functional.kl_div(log_q, log_p, reduction="none",
                                             log_target=True).sum(-1)
    np.testing.assert_allclose(got.kl, expected_kl.numpy(), rtol=1e-10, atol=1e-15)
    agree = (reference[5:19].argmax(-1) == logits[5:19].argmax(-1)).double().numpy()
    np.testing.assert_array_equal(got.top1_agrees, agree)
    same = score_window(logits, targets.numpy(), first=0, reference=logits[:19])
    assert np.all(same.kl == 0) and np.all(same.top1_agrees == 1)


def test_scores_run_on_one_thread_with_the_figures_of_many(monkeypatch):
    """The scoring runs on one torch thread whatever the caller set, and gives the caller its
    count back; its figures are, bit for bit, those of the same arithmetic on four threads
    (rows of a 4,096-token vocabulary, the last row block one row long, where a split of a
    row's reduction across threads would show)."""
    from hscale.evaluation import scores
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2 * scores.ROWS_AT_ONCE + 1, 4096, generator=g) * 4
    reference = logits + torch.randn(logits.shape, generator=g)
    targets = torch.randint(0, 4096, (logits.shape[0],), generator=g).numpy()
    saved = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        on_four = scores._score_rows(torch, logits, targets, 0, reference)
        seen = []
        real = torch.log_softmax
        monkeypatch.setattr(torch, "log_softmax",
                            lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
        pinned = score_window(logits, targets, 0, reference)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(saved)
    assert seen and set(seen) == {1}
    assert after == 4
    for name in ("nll", "kl", "top1_agrees", "base_nll", "delta_p"):
        np.testing.assert_array_equal(getattr(pinned, name), getattr(on_four, name))


def test_student_t_quantiles_and_interval():
    """Textbook quantiles (t(0.975; 1) = 12.7062, t(0.975; 4) = 2.7764, t(0.995; 10) = 3.1693,
    t(0.975; 100) = 1.9840), scipy's where installed, and the interval."""
    for p, df, value in ((0.975, 1, 12.7062047), (0.975, 4, 2.7764451), (0.995, 10, 3.1692727),
                         (0.975, 100, 1.9839715), (0.025, 4, -2.7764451)):
        assert student_t_quantile(p, df) == pytest.approx(value, abs=2e-7)
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (2, 5, 15, 63, 1000):
        for p in (0.6, 0.9, 0.975, 0.9995):
            assert student_t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df),
                                                              rel=1e-9)
    got = t_interval([5, 1, 4, 2, 3])
    assert (got.mean, got.n) == (3.0, 5)
    assert got.half_width == pytest.approx(2.7764451052 * math.sqrt(0.5), rel=1e-10)
    single = t_interval([2.5])
    assert (single.low, single.high, single.half_width) == (2.5, 2.5, None)


# --------------------------------------------------------------------------------------------
# whole evaluations on the tiny Llama
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> dict:
    """The tiny Llama, its RTN checkpoints (compressed-tensors, ModelOpt, W4A4) and the
    windows `hscale eval` will cut from the held-out text."""
    root = tmp_path_factory.mktemp("eval")
    source = written(root, "llama")
    models = {"source": source}
    for name, options in (("ct", {"format": "compressed-tensors"}),
                          ("modelopt", {"format": "modelopt"}),
                          ("w4a4", {"format": "compressed-tensors", "scheme": "w4a4"})):
        models[name] = quantized(source, root / name, **options)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    ids = tokenizer(HELDOUT.read_text(), add_special_tokens=False)["input_ids"]
    assert tokenizer("a")["input_ids"][0] == tokenizer.bos_token_id == 1  # it puts <s> first
    models["windows"] = cut_windows(ids, CONTEXT, WINDOWS, bos=1)
    return models


def evaluated(capsys, tmp_path, model, *options) -> dict:
    """hscale eval MODEL --data held-out ... run in this process; its JSON document."""
    out = tmp_path / "eval.json"
    code = main(["eval", str(model), "--data", str(HELDOUT), "--context", str(CONTEXT),
                 "--windows", str(WINDOWS), "--quiet", "--json", str(out),
                 *map(str, options)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"report: {out}" in captured.out and "perplexity" in captured.out
    return json.loads(out.read_text())


def own_losses(model, windows) -> list[float]:
    """transformers' own loss (labels = the window, shifted inside the model) per window."""
    with torch.no_grad():
        return [float(model(torch.as_tensor(ids)[None], labels=torch.as_tensor(ids)[None]).loss)
                for ids in windows.ids]


def original_with(source, weights, bfloat16: bool = False):
    """The original model with every checkpoint weight copied into its Linear (rounded to
    bfloat16 first where asked): an assembly that does not go through hscale eval's loaders."""
    model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    with torch.no_grad():
        for module, weight in weights.items():
            value = torch.from_numpy(weight)
            model.get_submodule(module).weight.copy_(value.bfloat16().float() if bfloat16
                                                     else value)
    return model


def test_perplexity_is_the_exponential_of_transformers_own_loss(llama, capsys, tmp_path):
    """The tiny Llama's tokenizer puts <s> first, so each window starts with it; every
    prediction is scored, as transformers' loss scores them; and KL from itself is exactly 0."""
    got = evaluated(capsys, tmp_path, llama["source"], "--original", llama["source"])
    model = transformers.AutoModelForCausalLM.from_pretrained(llama["source"],
                                                              dtype=torch.float32).eval()
    losses = own_losses(model, llama["windows"])
    np.testing.assert_allclose(got["per_window"]["nll"], losses, rtol=2e-6)
    assert got["perplexity"]["mean"] == pytest.approx(math.exp(np.mean(losses)), rel=2e-6)
    assert got["perplexity"]["low"] < got["perplexity"]["mean"] < got["perplexity"]["high"]
    assert got["tokens_scored"] == WINDOWS * (CONTEXT - 1)
    assert got["kld"]["mean"] == 0 and got["kld"]["max"] == 0
    assert got["top1_agreement"]["mean"] == 1.0 and got["original"]["tokenizer_agrees"]
    assert got["data"]["sha256"] and got["windows"]["count"] == WINDOWS


@pytest.mark.parametrize("loader", ["library", "kit"])
def test_compressed_tensors_checkpoint_both_loaders(llama, capsys, tmp_path, loader):
    """library: transformers + compressed-tensors, whose weights are the spec's decoding
    rounded to bfloat16; kit: the spec's decoding itself. Each equals the original model with
    those weights copied in, scored by transformers' own loss; KL from the original > 0."""
    pytest.importorskip("compressed_tensors")
    from hscale.checkpoints import checkpoint_weights
    got = evaluated(capsys, tmp_path, llama["ct"], "--original", llama["source"],
                    "--loader", loader)
    assert ("compressed-tensors" in got["model"]["route"]) == (loader == "library")
    model = original_with(llama["source"], checkpoint_weights(llama["ct"]),
                          bfloat16=loader == "library")
    np.testing.assert_allclose(got["per_window"]["nll"], own_losses(model, llama["windows"]),
                               rtol=2e-6)
    assert 0 < got["kld"]["mean"] < 1 and got["kld"]["low"] < got["kld"]["mean"]


def test_modelopt_checkpoint_runs_through_the_kits_decoding(llama, capsys, tmp_path):
    from hscale.checkpoints import checkpoint_weights
    got = evaluated(capsys, tmp_path, llama["modelopt"])
    assert got["model"]["kind"] == "ModelOpt NVFP4 checkpoint"
    assert "NVFP4-DEQ-1" in got["model"]["route"]
    assert got["original"] is None and "kld" not in got  # no original: no divergence
    model = original_with(llama["source"], checkpoint_weights(llama["modelopt"]))
    np.testing.assert_allclose(got["per_window"]["nll"], own_losses(model, llama["windows"]),
                               rtol=2e-6)


def test_w4a4_checkpoint_runs_with_its_activations_quantized(llama, capsys, tmp_path):
    """Emulated (the default): the activation profile is on every quantized Linear, and the
    model moves further from the original than with float activations; --activations float
    is the same weights as the W4A16 checkpoint (RTN weights do not depend on the scheme)."""
    emulated = evaluated(capsys, tmp_path, llama["w4a4"], "--original", llama["source"],
                         "--loader", "kit")
    weight_only = evaluated(capsys, tmp_path, llama["w4a4"], "--original", llama["source"],
                            "--loader", "kit", "--activations", "float")
    w4a16 = evaluated(capsys, tmp_path, llama["ct"], "--original", llama["source"],
                      "--loader", "kit")
    assert "emulated (NVFP4-ACT-1 .. -4" in emulated["model"]["activations"]
    assert "on 14 Linears" in emulated["model"]["activations"]
    assert weight_only["model"]["activations"].startswith("float32")
    assert weight_only["per_window"] == w4a16["per_window"]
    assert emulated["kld"]["mean"] > weight_only["kld"]["mean"]


def test_json_to_standard_output_and_the_summary_to_standard_error(llama, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "hscale", "eval", str(llama["source"]), "--data", str(HELDOUT),
         "--context", "64", "--windows", "2", "--json", "-"], capture_output=True, text=True,
        cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["command"] == "hscale eval" and document["windows"]["count"] == 2
    assert "perplexity" in result.stderr and "eval:" in result.stderr  # summary, progress
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# a user's mistakes: one line, exit code 2
# --------------------------------------------------------------------------------------------

def error_line(result) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and result.returncode == 2, (result.returncode, result.stderr)
    return lines[0]


def test_a_text_too_short_for_its_windows_is_refused_before_any_model_is_loaded(
        llama, tmp_path, monkeypatch, capsys):
    """The text is cut by MODEL's tokenizer alone: fewer tokens than one window (or than
    --windows asks) is refused without building a model (it once took 396 s of loading the
    model and the original to say so)."""
    import hscale.evaluation.perplexity as perplexity

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(perplexity, "open_runner", no_model)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", no_model)
    short = tmp_path / "short.txt"
    short.write_text("A short text.")
    for data, windows, pattern in (
            (short, [], r"--data: the text gives \d+ tokens, fewer than one window of --context "
                        r"128"),
            (HELDOUT, ["--windows", "999"], r"--windows 999: the text gives [\d,]+ tokens")):
        code = main(["eval", str(llama["source"]), "--data", str(data), "--context", "128",
                     *windows, "--original", str(llama["source"]), "--quiet"])
        assert code == 2 and re.search(pattern, capsys.readouterr().err)


def test_a_llama_cpp_that_does_not_load_is_refused_in_one_line(tmp_path, monkeypatch):
    """llama-cpp-python installed without its llama.cpp library (a failed or cached build, a
    library moved away) raises at import: the GGUF evaluation refuses it before any work, in
    one line that says what is wrong, why (llama-cpp-python's own error) and what to do."""
    from helpers.gguf_models import write_gguf_file
    package = tmp_path / "site" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise FileNotFoundError(\"Shared library with base name 'llama' not found\")\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    model = write_gguf_file(tmp_path / "model.gguf")
    result = hscale_here(["eval", str(model), "--data", str(HELDOUT), "--quiet"], cwd=tmp_path)
    assert result.returncode == 2, result.trace
    line = error_line(result)
    assert line.startswith("hscale eval: llama.cpp runs GGUF files and llama-cpp-python is "
                           "installed but does not load: reinstall it"), line
    assert line.endswith("(llama_cpp: FileNotFoundError: Shared library with base name "
                         "'llama' not found)"), line


def test_a_missing_optional_package_is_one_line_with_exit_code_2(llama, tmp_path, monkeypatch):
    """A dense compressed-tensors checkpoint goes the library route, which needs the
    compressed-tensors package; where it is not installed (the wheel's [models] extra alone)
    the command names it and the extra that installs it in one line, exit code 2, as for any
    other set-up mistake (``hscale.models.loading.MissingPackage``), not a traceback."""
    monkeypatch.setitem(sys.modules, "compressed_tensors", None)  # its import raises
    result = hscale_here(["eval", str(llama["ct"]), "--data", str(HELDOUT), "--context", "64",
                          "--windows", "1", "--quiet"], cwd=tmp_path)
    assert result.returncode == 2, result.trace
    assert error_line(result) == (
        "hscale eval: this needs the Python package 'compressed_tensors'; install the "
        "optional dependencies with `pip install 'hscale-nvfp4[interop]'`")


def test_mistakes_are_one_line_with_exit_code_2(llama, tmp_path):
    other_vocab = written(tmp_path, "llama", vocab_size=300)
    (tmp_path / "not.gguf").write_bytes(b"not a model")
    (tmp_path / "no-config").mkdir()
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "link.json").symlink_to(tmp_path / "target.json")
    source, data = str(llama["source"]), str(HELDOUT)
    cases = {
        "missing data": ([source, "--data", "nothing.txt"], r"--data nothing.txt: no such"),
        "missing model": (["nothing", "--data", data], r"MODEL nothing: no such file"),
        "not a model file": ([str(tmp_path / "not.gguf"), "--data", data],
                             r"neither a GGUF file nor a model directory"),
        "no config": ([str(tmp_path / "no-config"), "--data", data], r"no config.json"),
        "context 1": ([source, "--data", data, "--context", "1"], r"--context 1: must be"),
        "windows 0": ([source, "--data", data, "--windows", "0"], r"--windows 0: must be"),
        "too many windows": ([source, "--data", data, "--context", "128", "--windows", "999"],
                             r"--windows 999: the text gives [\d,]+ tokens, \d+ windows"),
        "longer than trained": ([source, "--data", data, "--context", "9999"],
                                r"--context 9999: more than the \d+ positions"),
        "json into a directory": ([source, "--data", data, "--json", str(tmp_path / "a-dir")],
                                  r"--json .*a-dir: is a directory"),
        "json onto a link": ([source, "--data", data, "--json", str(tmp_path / "link.json")],
                             r"--json .*link.json: is a symbolic link"),
        "library loader of ModelOpt": ([str(llama["modelopt"]), "--data", data, "--loader",
                                        "library"], r"--loader library: MODEL .* ModelOpt"),
        "another vocabulary": ([source, "--data", data, "--context", "64", "--windows", "1",
                                "--original", str(other_vocab)],
                               r"--original .*: a vocabulary of 300 tokens, MODEL's has"),
        "no data option": ([source], r"the following arguments are required: --data"),
    }
    # in this process (tests/helpers/cli.py); test_eval's other tests run the entry point
    results = {name: hscale_here(["eval", *arguments, "--quiet"], cwd=tmp_path)
               for name, (arguments, _) in cases.items()}
    for name, (_, pattern) in cases.items():
        assert results[name].returncode != "traceback", (name, results[name].trace)
        line = error_line(results[name])
        assert line.startswith("hscale eval: "), (name, line)
        assert re.search(pattern, line), (name, line)
    assert not (tmp_path / "target.json").exists()
