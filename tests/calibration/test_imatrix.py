"""llama.cpp importance matrices as h (``hscale quantize --imatrix``, HSCALE-CAL-3), tested with
files written by llama.cpp's own ``llama-imatrix`` (tests/calibration/data/imatrix/README.md says how):
every weight's h is its entry's ``in_sum2`` (read here with the gguf package, not the kit's
reader), the legacy .dat's values are ``(in_sum2 / count) * ncall`` as llama.cpp's writer
computes them, the layers are the reference's H-Scale with that h (hscale check re-derives
them exactly), MoE experts take their column and an expert with no token the scale-only search,
and a file that does not fit the model is refused in one line."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF imatrix files need the gguf package")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.cli import hscale_here  # noqa: E402
from helpers.paths import REPO_ROOT  # noqa: E402
from helpers.gguf_models import write_gguf_model  # noqa: E402
from helpers.llm_families import written  # noqa: E402

from hscale.check import check_checkpoint  # noqa: E402
from hscale.quantize import quantize_model  # noqa: E402

DATA = Path(__file__).parent / "data" / "imatrix"
MODEL_SHA256 = "4978285932bd0cbb93cf6f65dbddeaab18269a7042e9676b560ebf1fdbbd57ff"
HSCALE = [sys.executable, "-m", "hscale.cli"]
NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
         "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """The seeded Llama the committed files were made from, as a directory and as the exact
    GGUF file llama-imatrix read."""
    root = tmp_path_factory.mktemp("imatrix")
    directory = written(root, "llama")
    path = write_gguf_model(directory, root / "llama-q8_0.gguf")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MODEL_SHA256, (
        "the seeded Llama's GGUF changed: rebuild tests/calibration/data/imatrix (its README says how)")
    return {"directory": directory, "gguf": path}


def sums_of(path: Path) -> dict:
    """llama.cpp weight -> (in_sum2 (experts, cols), counts (experts,)), read with gguf."""
    reader = gguf.GGUFReader(path)
    tensors = {t.name: np.asarray(t.data, np.float32) for t in reader.tensors}
    return {name[:-len(".in_sum2")]: (value.reshape(-1, value.shape[-1]),
                                      tensors[name[:-len(".in_sum2")] + ".counts"].reshape(-1))
            for name, value in tensors.items() if name.endswith(".in_sum2")}


def legacy_of(path: Path) -> dict:
    """llama.cpp weight -> (ncall, values) of a legacy .dat, read with struct."""
    import struct
    data = path.read_bytes()
    (count,), at = struct.unpack_from("<i", data), 4
    out = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<i", data, at)
        name = data[at + 4:at + 4 + length].decode()
        ncall, nval = struct.unpack_from("<ii", data, at + 4 + length)
        at += 12 + length
        out[name] = (ncall, np.frombuffer(data, "<f4", nval, at))
        at += 4 * nval
    return out


def gguf_name(module: str) -> str:
    _, _, layer, _, leaf = module.split(".")
    return f"blk.{layer}.{NAMES[leaf]}.weight"


def test_the_committed_files_are_what_llama_cpp_writes():
    sums = sums_of(DATA / "tiny-llama.imatrix.gguf")
    legacy = legacy_of(DATA / "tiny-llama.imatrix.dat")
    assert sorted(sums) == sorted(legacy) and len(sums) == 14
    for name, (in_sum2, counts) in sums.items():
        assert counts.tolist() == [88 * 128]  # every token of every chunk
        ncall, values = legacy[name]
        expected = (in_sum2[0] / np.float32(counts[0])) * np.float32(ncall)  # its writer's formula
        np.testing.assert_array_equal(values, expected.astype(np.float32), err_msg=name)


@pytest.mark.clause("HSCALE-CAL-3")
@pytest.mark.parametrize("source", ["gguf", "directory"])
def test_h_is_each_weights_in_sum2_and_check_re_derives_it(tiny, tmp_path, source):
    from safetensors.numpy import load_file
    report = quantize_model(model_dir=str(tiny[source]), out=str(tmp_path / "out"),
                            imatrix=str(DATA / "tiny-llama.imatrix.gguf"), progress=False)
    assert report.calibration["imatrix_format"] == "gguf" and report.calibration["chunks"] == 88
    assert report.path == "whole model" and "calibration" not in report.seconds
    kept = load_file(str(tmp_path / "out" / "hscale" / "h.safetensors"))
    sums = sums_of(DATA / "tiny-llama.imatrix.gguf")
    assert len(kept) == 14
    for layer in report.layers:
        in_sum2, counts = sums[gguf_name(layer["module"])]
        np.testing.assert_array_equal(kept[f"h.{layer['module']}"], in_sum2[0].astype(np.float64))
        assert layer["tokens"] == 88 * 128 and "fallback" not in layer
    original = tiny["gguf"] if source == "gguf" else tiny["directory"]
    checked = check_checkpoint(tmp_path / "out", original=original)
    assert {layer.recipe for layer in checked.layers} == {"hscale maxabs"}


@pytest.mark.clause("HSCALE-CAL-3")
def test_the_legacy_dat_gives_its_stored_values_as_h(tiny, tmp_path):
    from safetensors.numpy import load_file
    report = quantize_model(model_dir=str(tiny["directory"]), out=str(tmp_path / "out"),
                            imatrix=str(DATA / "tiny-llama.imatrix.dat"), progress=False)
    assert report.calibration["imatrix_format"] == "dat"
    kept = load_file(str(tmp_path / "out" / "hscale" / "h.safetensors"))
    legacy = legacy_of(DATA / "tiny-llama.imatrix.dat")
    for layer in report.layers:
        np.testing.assert_array_equal(kept[f"h.{layer['module']}"],
                                      legacy[gguf_name(layer["module"])][1].astype(np.float64))


def _write_imatrix(path: Path, entries: dict, kind: str = "imatrix") -> Path:
    """A GGUF imatrix as llama-imatrix lays it out (name.in_sum2 [cols, experts], name.counts
    [1, experts]), written with the gguf package."""
    writer = gguf.GGUFWriter(str(path), "llama")  # llama-imatrix's files carry it too
    writer.add_type(kind)
    writer.add_array("imatrix.datasets", ["synthetic"])
    writer.add_uint32("imatrix.chunk_count", 1)
    writer.add_uint32("imatrix.chunk_size", 512)
    for name, (sums, counts) in entries.items():
        writer.add_tensor(f"{name}.in_sum2", np.asarray(sums, np.float32))
        writer.add_tensor(f"{name}.counts", np.asarray(counts, np.float32).reshape(-1, 1))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.clause("HSCALE-CAL-3")
def test_experts_take_their_column_and_an_unseen_expert_the_scale_only_search(tmp_path):
    """Qwen3-MoE (8 experts of 3 matrices per block): blk.N.ffn_{gate,up,down}_exps hold one
    column of sums per expert; expert 5 of block 0 has count 0 (never routed to)."""
    from safetensors.numpy import load_file
    directory = written(tmp_path, "qwen3_moe")
    rng = np.random.default_rng(0)
    entries = {}
    for block in range(2):
        for part in ("q", "k", "v", "output"):
            cols = 128
            entries[f"blk.{block}.attn_{part}.weight"] = (
                rng.uniform(1, 9, (1, cols)).astype(np.float32), [64])
        for part, cols in (("gate", 128), ("up", 128), ("down", 64)):
            counts = rng.integers(1, 40, 8).astype(float)
            if block == 0:
                counts[5] = 0
            sums = rng.uniform(1, 9, (8, cols)).astype(np.float32)
            sums[counts == 0] = 0
            entries[f"blk.{block}.ffn_{part}_exps.weight"] = (sums, counts)
    path = _write_imatrix(tmp_path / "moe.imatrix.gguf", entries)
    report = quantize_model(model_dir=str(directory), out=str(tmp_path / "out"),
                            imatrix=str(path), progress=False)
    kept = load_file(str(tmp_path / "out" / "hscale" / "h.safetensors"))
    layers = {layer["module"]: layer for layer in report.layers}
    checked = 0
    for block in range(2):
        for e in range(8):
            for part, leaf in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
                module = f"model.layers.{block}.mlp.experts.{e}.{leaf}"
                sums, counts = entries[f"blk.{block}.ffn_{part}_exps.weight"]
                if counts[e] == 0:
                    assert f"h.{module}" not in kept
                    assert "saw no token routed to this expert" in layers[module]["fallback"]
                    assert layers[module]["method"] == "scale-only"
                else:
                    np.testing.assert_array_equal(kept[f"h.{module}"], sums[e])
                    assert layers[module]["tokens"] == counts[e]
                checked += 1
    assert checked == 48


@pytest.mark.parametrize("case, message", [
    ("narrow", "blk.0.attn_q.weight has 64 values, model.layers.0.self_attn.q_proj has 128 "
               "inputs: not an importance matrix of this model"),
    ("missing", "no entry blk.1.ffn_down.weight for model.layers.1.mlp.down_proj: not an "
                "importance matrix of this model"),
    ("model", "no general.type, not 'imatrix': not an importance matrix (a model?)"),
    ("truncated", "truncated at byte"),
])
def test_a_file_that_does_not_fit_is_refused_in_one_line(tiny, tmp_path, case, message):
    sums = sums_of(DATA / "tiny-llama.imatrix.gguf")
    if case == "narrow":
        sums["blk.0.attn_q.weight"] = (sums["blk.0.attn_q.weight"][0][:, :64], [64.0])
        path = _write_imatrix(tmp_path / "x.gguf", sums)
    elif case == "missing":
        del sums["blk.1.ffn_down.weight"]
        path = _write_imatrix(tmp_path / "x.gguf", sums)
    elif case == "model":
        path = tiny["gguf"]
    else:
        path = tmp_path / "x.dat"
        path.write_bytes((DATA / "tiny-llama.imatrix.dat").read_bytes()[:100])
    run = hscale_here(["quantize", tiny["directory"], "--imatrix", path,  # in this process
                       "--out", tmp_path / "out", "--quiet"])
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr[-2000:] + run.trace
    assert message in run.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, needs", [
    (["--scheme", "w4a4"], "each Linear's input amax"),
    (["--pipeline", "gptq"], "the full H = X^T X"),
    (["--method", "hscale-block"], "the diagonal 16 x 16 blocks of X^T X"),
])
def test_what_an_imatrix_cannot_stand_in_for_is_refused(tiny, tmp_path, option, needs):
    run = subprocess.run([*HSCALE, "quantize", str(tiny["directory"]), "--imatrix",
                          str(DATA / "tiny-llama.imatrix.gguf"), *option, "--out",
                          str(tmp_path / "out"), "--quiet"], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert f"that needs {needs}, which an importance matrix" in run.stderr


def llama_imatrix() -> str | None:
    return os.environ.get("LLAMA_IMATRIX") or shutil.which("llama-imatrix")


@pytest.mark.llamacpp_tools
def test_llama_imatrix_rebuilds_the_committed_file(tiny, tmp_path):
    """llama.cpp's tool run again on the same model, text and command (README) writes the same
    entries and counts, and sums equal to float32 rounding of another CPU's SIMD path."""
    tool = llama_imatrix()
    if tool is None:
        pytest.skip("llama-imatrix not found (set LLAMA_IMATRIX or put it on PATH; built from "
                    "llama-cpp-python 0.3.36's vendor/llama.cpp)")
    text = REPO_ROOT / "hscale" / "calibration" / "data" / "calibration.txt"
    out = tmp_path / "rebuilt.imatrix.gguf"
    run = subprocess.run([tool, "-m", str(tiny["gguf"]), "-f", str(text), "-o", str(out),
                          "-c", "128", "-t", "2", "--no-ppl"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    rebuilt, committed = sums_of(out), sums_of(DATA / "tiny-llama.imatrix.gguf")
    assert sorted(rebuilt) == sorted(committed)
    for name, (sums, counts) in committed.items():
        assert rebuilt[name][1].tolist() == counts.tolist()
        np.testing.assert_allclose(rebuilt[name][0], sums, rtol=1e-4, err_msg=name)
