"""``hscale eval --base FILE``: the original's logits kept and reused (hscale.evaluation.base).

The file round-trips every float32 bit pattern it is given; a second run reads it instead of
running the original and gives the same figures bit for bit; a base kept for another text,
context, window count, original or scoring is refused in one line naming what differs; and the
figures printed against the original (its perplexity, the ratio, KL, Δp, with their intervals)
equal an independent computation: the two models' logits from transformers directly, every
score in NumPy / SciPy float64 (scipy.special.log_softmax, scipy.stats.t), none of the kit's
scoring or interval code. The models are the seeded tiny Llama and its RTN checkpoint: seconds.
"""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers.checkpoint_edits import quantized  # noqa: E402
from helpers.llm_families import written  # noqa: E402
from helpers.paths import REPO_ROOT  # noqa: E402
from hscale.cli import main  # noqa: E402
from hscale.evaluation.base import (MAGIC, BaseKey, BaseWriter, KeptBase,  # noqa: E402
                                    StaleBase)

HELDOUT = REPO_ROOT / "hscale" / "calibration" / "data" / "heldout.txt"
CONTEXT, WINDOWS = 96, 3


def key(**changes) -> BaseKey:
    fields = dict(original_sha256="a" * 64, engine="transformers", text_sha256="b" * 64,
                  context=8, windows=3, first_scored=4, bos=1, ids_sha256="c" * 64, vocab=5)
    return BaseKey(**{**fields, **changes})


def test_the_base_file_round_trips_every_bit(tmp_path):
    """Every float32 class (signed zeros, subnormals, the largest finite, infinities, NaN
    payloads, random patterns) read back bit for bit, window by window; the header says where
    the rows start and a cut file is refused."""
    special = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF,
                        0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001, 0x3F800000],
                       dtype=np.uint32)
    rng = np.random.default_rng(0)
    k = key()
    rows = k.context - 1 - k.first_scored
    windows = [rng.integers(0, 2 ** 32, (rows, k.vocab), dtype=np.uint32) for _ in range(3)]
    windows[0].reshape(-1)[: special.size] = special
    path = tmp_path / "base.bin"
    with BaseWriter(path, k, {"path": "orig", "kind": "model directory"}) as writer:
        for bits in windows:
            writer.add(bits.view(np.float32))
        writer.close()
    kept = KeptBase(path)
    assert kept.key == k and kept.original == {"path": "orig", "kind": "model directory"}
    for index, bits in enumerate(windows):
        np.testing.assert_array_equal(kept.logits(index).numpy().view(np.uint32), bits)
    raw = path.read_bytes()  # the documented layout, read without the reader
    (length,) = struct.unpack("<Q", raw[len(MAGIC):len(MAGIC) + 8])
    start = -(-(len(MAGIC) + 8 + length) // 64) * 64
    np.testing.assert_array_equal(np.frombuffer(raw[start:], "<u4").reshape(3, rows, k.vocab),
                                  np.stack(windows))
    path.write_bytes(raw[:-4])
    with pytest.raises(StaleBase, match=r"truncated or damaged"):
        KeptBase(path)
    path.write_bytes(b"GGUF" + raw[4:])
    with pytest.raises(StaleBase, match=r"not a base hscale eval wrote"):
        KeptBase(path)


def test_a_writer_that_does_not_finish_leaves_nothing(tmp_path):
    path = tmp_path / "base.bin"
    k = key()
    with pytest.raises(RuntimeError), BaseWriter(path, k, {}) as writer:
        writer.add(np.zeros((3, 5), np.float32))
        raise RuntimeError("interrupted")
    writer = BaseWriter(path, k, {})
    writer.add(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"1 of 3 windows written; not kept"):
        writer.close()
    with pytest.raises(ValueError, match=r"window 0 has logits \(2, 5\)"), \
            BaseWriter(path, k, {}) as writer:
        writer.add(np.zeros((2, 5), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_a_base_is_refused_for_anything_that_differs(tmp_path):
    path = tmp_path / "base.bin"
    with BaseWriter(path, key(), {}) as writer:
        for _ in range(3):
            writer.add(np.zeros((3, 5), np.float32))
        writer.close()
    kept = KeptBase(path)
    kept.check(**{k: v for k, v in vars(key()).items()})  # the same key passes
    for field, value, named in (("text_sha256", "d" * 64, "the text"), ("context", 9, "--context"),
                                ("windows", 2, "the number of windows"),
                                ("first_scored", 0, "the scored positions"),
                                ("bos", None, "the BOS token"),
                                ("ids_sha256", "e" * 64, "the token ids"), ("vocab", 6,
                                                                            "the vocabulary"),
                                ("engine", "llama.cpp", "the engine"),
                                ("original_sha256", "f" * 64, "the original model")):
        with pytest.raises(StaleBase, match=re.escape(named)) as caught:
            kept.check(**{field: value})
        assert "\n" not in str(caught.value) and "delete it or name another --base" in \
            str(caught.value)


def test_a_base_of_another_version_is_refused(tmp_path):
    """A base an earlier kit wrote (version 1: llama.cpp ran its GGUF originals without flash
    attention) is refused in one line naming both versions, not read."""
    from hscale.evaluation.base import VERSION
    path = tmp_path / "base.bin"
    with BaseWriter(path, key(), {}) as writer:
        for _ in range(3):
            writer.add(np.zeros((3, 5), np.float32))
        writer.close()
    raw = path.read_bytes()
    assert raw.count(b'"version": %d' % VERSION) == 1
    path.write_bytes(raw.replace(b'"version": %d' % VERSION, b'"version": 1'))
    with pytest.raises(StaleBase, match=rf"base version 1 \(<f4\), this hscale reads version "
                                        rf"{VERSION}$"):
        KeptBase(path)


# --------------------------------------------------------------------------------------------
# hscale eval with a kept base, on the tiny Llama
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("base")
    source = written(root, "llama")
    return {"source": source, "ct": quantized(source, root / "ct",
                                              format="compressed-tensors"),
            "other": written(root, "llama", rms_norm_eps=1e-3), "root": root}


def run_eval(capsys, model, *options, data=HELDOUT, context=CONTEXT, windows=WINDOWS):
    """hscale eval in this process (the caller reads capsys); its exit code."""
    return main(["eval", str(model), "--data", str(data), "--context", str(context),
                 "--windows", str(windows), "--quiet", "--loader", "kit", *map(str, options)])


def test_a_second_run_reads_the_base_and_gives_the_same_figures(models, capsys, tmp_path):
    base, first_json, second_json = (tmp_path / n for n in ("base.bin", "1.json", "2.json"))
    assert run_eval(capsys, models["ct"], "--original", models["source"], "--base", base,
                    "--json", first_json) == 0
    first_out = capsys.readouterr().out
    assert f"the original's logits kept in {base}" in first_out
    assert run_eval(capsys, models["ct"], "--base", base, "--json", second_json) == 0
    second_out = capsys.readouterr().out
    assert f"the original's logits read from {base}" in second_out
    first, second = json.loads(first_json.read_text()), json.loads(second_json.read_text())
    assert "load_original" in first["seconds"] and "load_original" not in second["seconds"]
    for figure in ("perplexity", "kld", "top1_agreement", "original_perplexity",
                   "perplexity_ratio", "delta_p", "per_window"):
        assert first[figure] == second[figure], figure  # bit for bit: the same float64s
    assert second["original"]["path"] == str(models["source"])
    # the printed figures too, but for the last line (the seconds) and the base's verb
    strip = re.compile(r"^(report: .*|[\d.]+ s|the original's logits .*)$", re.M)
    assert strip.sub("", first_out) == strip.sub("", second_out)


def test_a_stale_base_is_refused_in_one_line(models, capsys, tmp_path):
    base = tmp_path / "base.bin"
    assert run_eval(capsys, models["ct"], "--original", models["source"], "--base", base) == 0
    other_text = tmp_path / "other.txt"
    other_text.write_text(HELDOUT.read_text()[::-1])
    capsys.readouterr()
    cases = (({"data": other_text}, (), "the text (SHA-256 of --data) differs"),
             ({"context": 64}, (), "--context differs (the base's 96, this run's 64)"),
             ({"windows": 2}, (), "the number of windows differs (the base's 3, this run's 2)"),
             ({}, ("--scored", "second-half"), "the scored positions (--scored) differs"),
             ({}, ("--original", models["other"]), "the original model (SHA-256 of its "
                                                   "files) differs"))
    for changes, options, named in cases:
        code = run_eval(capsys, models["ct"], "--base", base, *options, **changes)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, err
        assert named in lines[0] and str(base) in lines[0], lines[0]
    missing = tmp_path / "missing.bin"
    assert run_eval(capsys, models["ct"], "--base", missing) == 2
    assert "no such file, and no --original to compute it from" in capsys.readouterr().err
    assert not missing.exists()


def test_a_base_kept_by_another_engine_build_is_refused(models, capsys, tmp_path):
    """The engine's build is in the key (its torch and transformers versions, the CPU kernels
    torch picked): logits another build computed round differently, so its base is refused in
    one line that names both builds whole."""
    base = tmp_path / "base.bin"
    assert run_eval(capsys, models["ct"], "--original", models["source"], "--base", base) == 0
    capsys.readouterr()
    raw = base.read_bytes()
    version, kernels = torch.__version__, torch.backends.cpu.get_cpu_capability()
    here = (f"transformers (transformers {transformers.__version__}, torch {version}, "
            f"CPU {kernels})")
    assert raw.count(here.encode()) == 1  # the key says which build computed the logits
    there = here.replace(f"torch {version}", f"torch {'9' * len(version)}")
    base.write_bytes(raw.replace(here.encode(), there.encode()))  # the same length
    code = run_eval(capsys, models["ct"], "--base", base)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert "the engine that runs the original differs" in lines[0]
    assert f"the base's {there}, this run's {here})" in lines[0], lines[0]


def _t_interval(values):
    from scipy import stats
    values = np.asarray(values, np.float64)
    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return values.mean(), values.mean() - half, values.mean() + half


def test_printed_figures_against_an_independent_route(models, capsys, tmp_path):
    """The tiny Llama (original) and its RTN checkpoint decoded by the kit, both run by
    transformers directly on the windows; the original's perplexity, the ratio, KL and Δp
    with their 95% intervals computed in NumPy / SciPy, compared with the printed lines."""
    special = pytest.importorskip("scipy.special")
    from hscale.checkpoints import checkpoint_weights
    from hscale.evaluation.text import cut_windows
    assert run_eval(capsys, models["ct"], "--original", models["source"], "--base",
                    tmp_path / "base.bin") == 0
    printed = capsys.readouterr().out
    tokenizer = transformers.AutoTokenizer.from_pretrained(models["source"])
    windows = cut_windows(tokenizer(HELDOUT.read_text(), add_special_tokens=False)["input_ids"],
                          CONTEXT, WINDOWS, bos=tokenizer.bos_token_id)
    original = transformers.AutoModelForCausalLM.from_pretrained(
        models["source"], dtype=torch.float32).eval()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        models["source"], dtype=torch.float32).eval()
    with torch.no_grad():
        for module, weight in checkpoint_weights(models["ct"]).items():
            model.get_submodule(module).weight.copy_(torch.from_numpy(weight))
    nll_q, nll_p, kl, delta = [], [], [], []
    for ids, targets in zip(windows.ids, windows.targets):
        with torch.no_grad():
            q = model(torch.as_tensor(ids)[None]).logits[0, :-1].double().numpy()
            p = original(torch.as_tensor(ids)[None]).logits[0, :-1].double().numpy()
        log_q, log_p = special.log_softmax(q, -1), special.log_softmax(p, -1)
        at = np.arange(targets.size)
        nll_q.append(-log_q[at, targets].mean())
        nll_p.append(-log_p[at, targets].mean())
        kl.append((np.exp(log_p) * (log_p - log_q)).sum(-1).mean())
        delta.append((np.exp(log_q[at, targets]) - np.exp(log_p[at, targets])).mean())

    def numbers(prefix: str) -> list[float]:
        line = next(line for line in printed.splitlines() if line.startswith(prefix))
        return [float(x) for x in re.findall(r"-?\d+\.\d+", line)]
    ppl_p = np.exp(_t_interval(nll_p))
    ratio = np.exp(_t_interval(np.array(nll_q) - np.array(nll_p)))
    got = numbers("original's perplexity")
    np.testing.assert_allclose(got[:3], ppl_p, rtol=2e-4)  # printed with 4 decimals
    np.testing.assert_allclose(got[3:6], ratio, atol=1.5e-5)
    kl_got = numbers("KL divergence from")
    np.testing.assert_allclose(kl_got[:3], _t_interval(kl), atol=1e-5, rtol=1e-4)
    delta_got = numbers("Δp")
    np.testing.assert_allclose(delta_got[:3], 100 * np.array(_t_interval(delta)), atol=1.5e-3)
    assert ratio[0] != 1 and kl_got[0] > 0  # the checkpoint is not the original
