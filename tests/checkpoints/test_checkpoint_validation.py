"""Every mutation issue 34 lists, one test each: ``hscale check`` refuses it in one line naming
the file and the place (exit 2) or reports it as a finding naming the tensor or field and the
clause (exit 1), never "conforms", never a traceback or a hang; ``hscale convert`` refuses it
before writing anything and leaves its input as it was.

The edits are made by hand from the formats' definitions (tests/helpers/mutations/). Where
a library has its own reader, it is the independent judge of the container rules: safetensors'
``safe_open`` refuses the same headers (NVFP4-CKPT-5), and what llama.cpp's gguf.cpp expects of
a tensor's offset is computed here from the GGUF definition (NVFP4-GGUF-2)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf", reason="GGUF needs the gguf package (the engines extra)")

from helpers.checkpoint_edits import ATTENTION, planted  # noqa: E402
from helpers.checkpoint_fuzz import run_command, snapshot  # noqa: E402
from helpers.cli import hscale_here  # noqa: E402
from helpers.mutations import (edit_header, edit_json, gguf_layout, gguf_tensor_data,  # noqa: E402
                                  patch, patch_uint32, raw_header, write_raw)

HSCALE = [sys.executable, "-m", "hscale.cli"]


@pytest.fixture(scope="module")
def gguf_files(checkpoints, tiny, tmp_path_factory) -> dict:
    """{"qwen3": the tiny decoder as GGUF, "llama": a tiny Llama as GGUF (rope-permuted)}."""
    from helpers.checkpoint_edits import quantized
    from hscale.checkpoints.to_gguf import convert_to_gguf
    from helpers.llm_families import written
    root = tmp_path_factory.mktemp("gguf")
    convert_to_gguf(checkpoints["compressed-tensors"], root / "qwen3.gguf")
    llama = quantized(written(root, "llama"), root / "llama-ct", format="compressed-tensors")
    for tokenizer in llama.glob("tokenizer*"):
        tokenizer.unlink()
    convert_to_gguf(llama, root / "llama.gguf")
    return {"qwen3": root / "qwen3.gguf", "llama": root / "llama.gguf"}


@pytest.fixture(scope="module")
def sharded(tiny, tmp_path_factory) -> Path:
    """The tiny decoder in compressed-tensors, in four shards and their index."""
    from helpers.checkpoint_edits import quantized
    out = tmp_path_factory.mktemp("sharded") / "ct"
    return quantized(tiny, out, format="compressed-tensors", max_shard_bytes=200_000)


def copy_of(source: Path, target: Path) -> Path:
    (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    return target


def answers(path: Path, tmp_path: Path, to: str = "modelopt") -> tuple:
    """(check's run, convert's run) on ``path``, after asserting that convert wrote nothing,
    left its input as it was, and neither printed a traceback."""
    before = snapshot(path)
    check = run_command(["check", path])
    out = tmp_path / "converted"
    convert = run_command(["convert", path, out, "--to", to])
    for run in (check, convert):
        assert run.code in (0, 1, 2), (run.code, run.trace)
    assert convert.code == 2 and not out.exists(), convert.out + convert.err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".converted.")]
    assert snapshot(path) == before
    return check, convert


def refused(path: Path, tmp_path: Path, *words: str, to: str = "modelopt") -> str:
    """The one line check refused ``path`` with (exit 2), which names the file and ``words``;
    convert refuses it too."""
    check, convert = answers(path, tmp_path, to)
    lines = [line for line in check.err.splitlines() if line.strip()]
    assert check.code == 2 and len(lines) == 1 and check.out == "", (check.code, check.out,
                                                                       check.err)
    assert str(path) in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def reported(path: Path, tmp_path: Path, tensor: str, clause: str, *words: str,
             to: str = "modelopt") -> str:
    """The finding check reported about ``tensor`` under ``clause`` (exit 1, "does not
    conform"), its text holding ``words``; convert refuses the checkpoint."""
    check, convert = answers(path, tmp_path, to)
    assert check.code == 1 and check.out.rstrip().splitlines()[-1].startswith("does not "
                                                                              "conform")
    lines = [line.strip() for line in check.out.splitlines()
             if line.strip().startswith(f"{tensor}: [{clause}]")]
    assert lines, (tensor, clause, check.out[-2000:])
    for word in words:
        assert any(word in line for line in lines), (word, lines)
    assert "does not conform" in convert.err and "nothing was written" in convert.err
    return lines[0]


def safetensors_refuses(path: Path) -> None:
    """safetensors' own reader refuses the file too (the independent judge of NVFP4-CKPT-5)."""
    from safetensors import safe_open
    with pytest.raises(Exception):
        with safe_open(str(path), "np"):
            pass


CT = "compressed-tensors"


def set_weights(key, value):
    def edit(document):
        document["quantization_config"]["config_groups"]["group_0"]["weights"][key] = value
    return edit


# -- "conforms" on checkpoints that are broken -------------------------------------------------

@pytest.mark.clause("NVFP4-CKPT-1")
@pytest.mark.parametrize("key, value, says", [
    ("group_size", 32, "weights group_size 32, NVFP4 is 16"),
    ("num_bits", 8, "weights num_bits 8, NVFP4 is 4"),
    ("strategy", None, "weights strategy None"),
])
def test_config_values_that_are_not_nvfp4(checkpoints, tmp_path, key, value, says):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    if value is None:  # a missing key: read as compressed-tensors reads it (strategy None)
        edit_json(case / "config.json", lambda d: d["quantization_config"]["config_groups"]
                  ["group_0"]["weights"].pop(key) and None)
        says = "weights strategy None (absent: read as None)"
    else:
        edit_json(case / "config.json", set_weights(key, value))
    reported(case, tmp_path, "config.json", "NVFP4-CKPT-1", says)


@pytest.mark.clause("NVFP4-CKPT-1")
def test_a_missing_num_bits_is_read_as_compressed_tensors_reads_it(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    edit_json(case / "config.json", lambda d: d["quantization_config"]["config_groups"]
              ["group_0"]["weights"].pop("num_bits") and None)
    reported(case, tmp_path, "config.json", "NVFP4-CKPT-1",
             "weights num_bits None (absent: read as 8), NVFP4 is 4")


@pytest.mark.clause("NVFP4-CKPT-1")
@pytest.mark.parametrize("status", ["frozen", None])
def test_a_status_other_than_compressed(checkpoints, tmp_path, status):
    case = copy_of(checkpoints[CT], tmp_path / "case")

    def edit(document):
        if status is None:
            document["quantization_config"].pop("quantization_status")
        else:
            document["quantization_config"]["quantization_status"] = status
    edit_json(case / "config.json", edit)
    reported(case, tmp_path, "config.json", "NVFP4-CKPT-1",
             f"quantization_status {status!r}" + (" (absent: compressed-tensors reads "
                                                  "'initialized')" if status is None else ""))


@pytest.mark.clause("NVFP4-CKPT-1")
def test_an_ignore_list_naming_a_quantized_linear(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    edit_json(case / "config.json", lambda d: d["quantization_config"]["ignore"].append(
        ATTENTION + "q_proj"))
    reported(case, tmp_path, "config.json", "NVFP4-CKPT-1",
             f"{ATTENTION}q_proj is stored quantized, but the ignore list names it")


@pytest.mark.clause("NVFP4-CKPT-4")
@pytest.mark.parametrize("key, value", [("group_size", 32), ("num_bits", 8)])
def test_w4a4_inputs_that_are_not_nvfp4(checkpoints, tiny, tmp_path, key, value):
    """A group quantizing inputs is W4A4 and judged so (such inputs were a note and the
    checkpoint 'conformed')."""
    case = copy_of(checkpoints[CT], tmp_path / "case")

    def edit(document):
        group = document["quantization_config"]["config_groups"]["group_0"]
        group["input_activations"] = {**group["weights"], "dynamic": "local", key: value}
    edit_json(case / "config.json", edit)
    reported(case, tmp_path, "config.json", "NVFP4-CKPT-1",
             f"input_activations {key} {value}, NVFP4 W4A4 (NVFP4-CKPT-4) is")


@pytest.mark.clause("NVFP4-CKPT-6")
def test_a_config_claiming_twice_the_layers(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")

    def edit(document):
        document["num_hidden_layers"] *= 2
        document["layer_types"] = document["layer_types"] * 2
    edit_json(case / "config.json", edit)
    reported(case, tmp_path, "model.layers.2.self_attn.q_proj.weight", "NVFP4-CKPT-6",
             "missing: config.json (Qwen3ForCausalLM, num_hidden_layers 4",
             "declares the 128x128 Linear model.layers.2.self_attn.q_proj")


@pytest.mark.clause("NVFP4-CKPT-6")
def test_every_tensor_of_a_quantized_linear_removed(checkpoints, tmp_path):
    module = "model.layers.1.mlp.up_proj"
    case = planted(checkpoints[CT], tmp_path / "case", lambda tensors: [
        tensors.pop(n) for n in list(tensors) if n.startswith(module + ".")])
    reported(case, tmp_path, f"{module}.weight", "NVFP4-CKPT-6",
             f"stored neither quantized ({module}.weight_packed) nor as a weight")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_two_tensors_on_the_same_bytes(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    q, k = ATTENTION + "q_proj.weight_global_scale", ATTENTION + "k_proj.weight_global_scale"
    edit_header(path, lambda h: h[k].__setitem__("data_offsets", list(h[q]["data_offsets"])))
    safetensors_refuses(path)
    line = refused(case, tmp_path, "two tensors share bytes", "NVFP4-CKPT-5")
    assert q in line and k in line


@pytest.mark.clause("NVFP4-CKPT-5")
def test_negative_offsets_into_the_header(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    name = ATTENTION + "q_proj.weight_scale"

    def back(h):
        begin, end = h[name]["data_offsets"]
        h[name]["data_offsets"] = [-500, -500 + end - begin]
    edit_header(path, back)
    safetensors_refuses(path)
    refused(case, tmp_path, repr(name), "data_offsets [-500,", "0 <= begin <= end")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_scale_offsets_into_the_header_are_not_converted(checkpoints, tmp_path):
    """Offsets that stay non-negative but point the scale bytes at the header's own JSON, made
    consistent by moving the header into the data (the convert of issue 34 wrote the header's
    text as scale bytes and exited 0): refused, nothing written."""
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    text, data = raw_header(path)
    header = json.loads(text)
    name = ATTENTION + "q_proj.weight_scale"
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [0, end - begin]  # on the first tensor's bytes
    write_raw(path, json.dumps(header, separators=(",", ":")), data)
    refused(case, tmp_path, "two tensors share bytes")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_a_tensor_named_twice(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    text, data = raw_header(path)
    name = ATTENTION + "v_proj.weight_scale"
    entry = json.dumps({name: json.loads(text)[name]}, separators=(",", ":"))[1:-1]
    write_raw(path, text.rstrip()[:-1] + "," + entry + "}", data)
    refused(case, tmp_path, f"the header names {name!r} twice")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_trailing_bytes_after_the_data(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    with open(path, "ab") as f:
        f.write(b"\0" * 64)
    safetensors_refuses(path)
    refused(case, tmp_path, "no tensor covers the last 64 bytes of the file")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_an_index_omitting_every_tensor_of_a_shard_still_on_disk(sharded, tmp_path):
    case = copy_of(sharded, tmp_path / "case")
    index = case / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    shard = "model-00002-of-00004.safetensors"
    document["weight_map"] = {k: v for k, v in document["weight_map"].items() if v != shard}
    index.write_text(json.dumps(document))
    refused(case, tmp_path, shard, "does not list: a loader never reads it")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_a_tensor_name_with_a_lone_surrogate(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    text, data = raw_header(path)
    write_raw(path, text.replace('"model.norm.weight"', '"model.norm.weight\\ud800"'), data)
    safetensors_refuses(path)
    refused(case, tmp_path, "'model.norm.weight\\ud800'", "not valid UTF-8 (a lone surrogate")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_metadata_with_a_value_that_is_not_a_string(checkpoints, tmp_path):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    edit_header(path, lambda h: h["__metadata__"].__setitem__("x", 5))
    safetensors_refuses(path)
    refused(case, tmp_path, "__metadata__['x'] is an integer, where a string belongs")


# -- tracebacks -------------------------------------------------------------------------------

@pytest.mark.clause("NVFP4-CKPT-5")
@pytest.mark.parametrize("edit, words", [
    (lambda h: h.__setitem__("model.norm.weight", True),
     "its entry is a boolean, where an object"),
    (lambda h: h["model.norm.weight"].pop("shape"), "its entry has no shape"),
    (lambda h: h["model.norm.weight"].__setitem__("shape", "128"),
     'shape "128", where an array of non-negative integers'),
    (lambda h: h["model.norm.weight"].__setitem__("data_offsets", [0.0, 512]),
     "data_offsets [0.0, 512]"),
    (lambda h: h["model.norm.weight"].__setitem__("dtype", 5), "dtype 5"),
], ids=["entry-true", "no-shape", "shape-string", "float-offset", "dtype-int"])
def test_header_entries_of_the_wrong_type(checkpoints, tmp_path, edit, words):
    case = copy_of(checkpoints[CT], tmp_path / "case")
    edit_header(case / "model.safetensors", edit)
    safetensors_refuses(case / "model.safetensors")
    refused(case, tmp_path, "'model.norm.weight'", words)


@pytest.mark.clause("NVFP4-CKPT-1", "NVFP4-CKPT-2", "NVFP4-CKPT-5")
@pytest.mark.parametrize("fmt, file, edit, words", [
    (CT, "config.json", None, "is null, where a model's config"),
    (CT, "config.json", lambda d: d.__setitem__("quantization_config", [1]),
     "quantization_config is an array ([1]), where an object or null belongs"),
    (CT, "config.json", lambda d: d["quantization_config"].__setitem__("config_groups", [1]),
     "config_groups is an array ([1])"),
    (CT, "config.json", lambda d: d["quantization_config"].__setitem__("ignore", "lm_head"),
     'ignore is a string ("lm_head"), where an array or null belongs'),
    (CT, "config.json", lambda d: d["quantization_config"].__setitem__("ignore", ["re:("]),
     "ignore[0] 're:(' is not a regular expression"),
    ("modelopt", "hf_quant_config.json", lambda d: [1], "is an array, not a JSON object"),
], ids=["config-null", "quantization-config-list", "config-groups-list", "ignore-string",
        "ignore-bad-regex", "hf-quant-config-list"])
def test_configs_of_the_wrong_json_type(checkpoints, tmp_path, fmt, file, edit, words):
    case = copy_of(checkpoints[fmt], tmp_path / "case")
    if edit is None:
        (case / file).write_text("null")
    else:
        edit_json(case / file, edit)
    refused(case, tmp_path, file, words, to=CT if fmt == "modelopt" else "modelopt")


@pytest.mark.clause("NVFP4-CKPT-5")
def test_an_index_weight_map_of_the_wrong_type(sharded, tmp_path):
    case = copy_of(sharded, tmp_path / "case")
    edit_json(case / "model.safetensors.index.json", lambda d: d.__setitem__("weight_map", []))
    refused(case, tmp_path, "model.safetensors.index.json", "weight_map is an array")


@pytest.mark.clause("NVFP4-GGUF-2")
def test_a_gguf_architecture_that_is_not_utf8(gguf_files, tmp_path):
    case = copy_of(gguf_files["qwen3"], tmp_path / "case.gguf")
    at = gguf_layout(case)["kv"]["general.architecture"][2]
    patch(case, at + 8, b"\xff")
    refused(case, tmp_path, "metadata 'general.architecture' holds a string that is not UTF-8",
            to=CT)


@pytest.mark.clause("NVFP4-GGUF-1")
@pytest.mark.parametrize("heads", [0, 3])
def test_a_gguf_head_count_that_does_not_split_the_rows(gguf_files, tmp_path, heads):
    """0 was a ZeroDivisionError, 3 an unnamed reshape error."""
    case = copy_of(gguf_files["llama"], tmp_path / "case.gguf")
    patch_uint32(case, "llama.attention.head_count", heads)
    refused(case, tmp_path, f"llama.attention.head_count = {heads}",
            "'blk.0.attn_q.weight''s 128 rows", to=CT)


@pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-GGUF-2")
@pytest.mark.parametrize("how", ["renamed", "retyped"])
def test_a_gguf_head_count_renamed_or_retyped_is_one_line(gguf_files, tmp_path, how):
    """A renamed llama.attention.head_count ended hscale check and convert in KeyError; a key
    stored as another type than llama.cpp reads it as is refused naming the key."""
    case = copy_of(gguf_files["llama"], tmp_path / "case.gguf")
    key = "llama.attention.head_count"
    key_at, _kind, value_at, _length = gguf_layout(case)["kv"][key]
    if how == "renamed":
        patch(case, key_at + 8 + len(key) - 1, b"#")
        refused(case, tmp_path, f"metadata {key} is missing", to=CT)
    else:
        patch(case, value_at - 4, struct.pack("<I", 6))  # UINT32 -> FLOAT32, the same bytes
        refused(case, tmp_path, f"metadata {key} is stored as FLOAT32", "reads it as UINT32",
                to=CT)


@pytest.mark.clause("NVFP4-GGUF-2")
@pytest.mark.parametrize("version", [1, 4])
def test_another_gguf_version(gguf_files, tmp_path, version):
    case = copy_of(gguf_files["qwen3"], tmp_path / "case.gguf")
    patch(case, 4, struct.pack("<I", version))
    refused(case, tmp_path, f"version {version}", to=CT)


@pytest.mark.clause("NVFP4-GGUF-2")
def test_a_gguf_tensor_on_another_tensors_data(gguf_files, tmp_path):
    """What llama.cpp's reader expects, computed here from the GGUF definition: each tensor's
    offset is where the one before it ends, padded to 32 bytes."""
    case = copy_of(gguf_files["qwen3"], tmp_path / "case.gguf")
    tensors = gguf_layout(case)["tensors"]
    data = case.read_bytes()
    previous = struct.unpack_from("<Q", data, tensors[0][5])[0]
    name, offset_at = tensors[1][0], tensors[1][5]
    expected = struct.unpack_from("<Q", data, offset_at)[0]
    patch(case, offset_at, struct.pack("<Q", previous))
    refused(case, tmp_path, f"tensor {name!r}", f"offset {previous:,}",
            f"llama.cpp expects {expected:,}", to=CT)


@pytest.mark.clause("NVFP4-E4M3-3", "NVFP4-GGUF-1")
def test_sign_flipped_gguf_scale_bytes(gguf_files, tmp_path):
    """A scale byte with the sign bit set (llama.cpp's decoder ignores it): a finding naming
    the module's scale bytes and the group, and no conversion."""
    case = copy_of(gguf_files["qwen3"], tmp_path / "case.gguf")
    name, (kind, dims, at) = next((n, t) for n, t in gguf_tensor_data(case).items()
                                  if t[0] == 40 and n == "blk.0.ffn_down.weight")
    byte = case.read_bytes()[at]
    patch(case, at, bytes([byte | 0x80]))
    line = reported(case, tmp_path, "model.layers.0.mlp.down_proj.weight_scale",
                    "NVFP4-E4M3-3", "has the sign bit set", to=CT)
    assert "group (r=0, i=0)" in line


# -- hangs and names --------------------------------------------------------------------------

@pytest.mark.clause("NVFP4-CKPT-5")
def test_a_fifo_in_the_directory_is_refused_without_being_opened(checkpoints, tmp_path):
    """As a user runs it: a subprocess with a timeout (it hung forever)."""
    case = copy_of(checkpoints[CT], tmp_path / "case")
    os.mkfifo(case / "extra.safetensors")
    result = subprocess.run(HSCALE + ["check", str(case)], capture_output=True, text=True,
                            timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0] == (f"hscale check: {case / 'extra.safetensors'}: is a FIFO, not a regular "
                        "file: refused, not read (spec NVFP4-CKPT-5)")


def test_non_utf8_names_under_a_strict_utf8_stdout(checkpoints, tmp_path):
    """A checkpoint directory and a destination named with bytes that are not UTF-8, stdout
    strict UTF-8: check reports, convert converts and says so (it wrote everything, then
    failed on its own report)."""
    source = Path(os.fsdecode(bytes(tmp_path) + b"/ck\xff"))
    copy_of(checkpoints[CT], source)
    destination = Path(os.fsdecode(bytes(tmp_path) + b"/out\xfe"))
    # in this process, its streams as PYTHONIOENCODING=utf-8:strict makes a process's (the
    # command's own stream setup is what is under test; the entry point has its process tests)
    check = hscale_here(["check", source], stream_errors="strict")
    assert check.returncode == 0 and check.stderr == "", check.stderr + check.trace
    assert check.stdout.splitlines()[0].startswith(str(tmp_path) + "/ck\\udcff")
    convert = hscale_here(["convert", source, destination, "--to", "modelopt"],
                          stream_errors="strict")
    assert convert.returncode == 0 and convert.stderr == "", convert.stderr + convert.trace
    assert "written: " in convert.stdout and destination.is_dir()


# -- what convert did wrong -------------------------------------------------------------------

@pytest.mark.clause("NVFP4-GGUF-1")
@pytest.mark.parametrize("which, to", [("qwen3", CT), ("llama", "modelopt")])
def test_a_gguf_file_converts(gguf_files, tmp_path, which, to):
    """Any GGUF file ended in AttributeError ('file_of'). The output decodes to gguf's own
    dequantization of the file (times its .scale) for every Linear, and checks as its source
    (conforms)."""
    import ml_dtypes
    out = tmp_path / "out"
    result = run_command(["convert", gguf_files[which], out, "--to", to])
    assert result.code == 0, result.err
    assert "note: config.json: the GGUF metadata as transformers" in result.out
    assert run_command(["check", out]).code == 0
    reader = gguf.GGUFReader(gguf_files[which])
    tensors = {t.name: t for t in reader.tensors}
    recorded = dict(zip(*(reader.fields[k].contents() for k in ("hscale.source.tensors",
                                                              "hscale.source.modules"))))
    from hscale.checkpoints import SafetensorsModel
    model = SafetensorsModel(out)
    names = {CT: (".weight_packed", ".weight_global_scale"), "modelopt": (".weight",
                                                                         ".weight_scale_2")}[to]
    checked = 0
    for name, tensor in tensors.items():
        if int(tensor.tensor_type) != 40:
            continue
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float64)
        expected *= float(np.float32(tensors[name.removesuffix(".weight") + ".scale"].data[0]))
        module = recorded[name].removesuffix(".weight")
        packed = model.array(module + names[0])
        codes = np.stack([packed & 0xF, packed >> 4], -1).reshape(packed.shape[0], -1)
        values = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        scales = model.array(module + ".weight_scale").view(ml_dtypes.float8_e4m3fn)
        stored = np.float32(model.array(module + names[1]).reshape(-1)[0])
        s_g = np.float32(1) / stored if to == CT else stored
        decoded = values * np.repeat(scales.astype(np.float64), 16, axis=1) * float(s_g)
        if which == "llama" and name.endswith((".attn_q.weight", ".attn_k.weight")):
            heads = reader.fields["llama.attention.head_count" + (
                "_kv" if "attn_k" in name else "")].contents()
            decoded = decoded.reshape(heads, 2, -1, decoded.shape[1]).swapaxes(1, 2).reshape(
                decoded.shape)  # Hugging Face's rows into ggml's rope order
        np.testing.assert_array_equal(decoded, expected, err_msg=name)
        checked += 1
    assert checked == 14


@pytest.mark.clause("NVFP4-CKPT-2", "NVFP4-CKPT-1")
def test_an_edited_hf_quant_config_is_not_replaced_by_the_kept_original(checkpoints,
                                                                         tmp_path):
    """compressed-tensors -> ModelOpt, a user's edit to hf_quant_config.json, ModelOpt ->
    compressed-tensors: the edit is carried (here a module added to exclude_modules) and the
    report says the kept original was not restored; an unedited round trip still restores it."""
    there, back = tmp_path / "modelopt", tmp_path / "back"
    assert run_command(["convert", checkpoints[CT], there, "--to", "modelopt"]).code == 0
    edit_json(there / "hf_quant_config.json",
              lambda d: d["quantization"]["exclude_modules"].append("model.embed_tokens"))
    result = run_command(["convert", there, back, "--to", CT])
    assert result.code == 0, result.err
    assert ("note: hf_quant_config.json was edited after hscale convert wrote it: converted as "
            "it is now; the compressed-tensors config it kept under converted_from is not "
            "restored") in result.out
    ignore = json.loads((back / "config.json").read_text())["quantization_config"]["ignore"]
    assert ignore == ["lm_head", "model.embed_tokens"]
    unedited = tmp_path / "unedited"
    assert run_command(["convert", checkpoints[CT], tmp_path / "m2", "--to", "modelopt"]).code == 0
    result = run_command(["convert", tmp_path / "m2", unedited, "--to", CT])
    assert result.code == 0 and "was edited" not in result.out
    assert json.loads((unedited / "config.json").read_text())["quantization_config"] == \
        json.loads((checkpoints[CT] / "config.json").read_text())["quantization_config"]


@pytest.mark.parametrize("length", [231, 255])
def test_a_destination_name_of_up_to_255_bytes(checkpoints, tmp_path, length):
    destination = tmp_path / ("d" * length)
    result = run_command(["convert", checkpoints[CT], destination, "--to", "modelopt"])
    assert result.code == 0, result.err
    assert destination.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["d" * length]


def test_a_conversion_whose_output_fails_its_check_leaves_nothing(checkpoints, tmp_path):
    """The output is checked before it is committed: a check that finds it wrong leaves no
    destination and no hidden partial, and an existing destination (--force) as it was."""
    from hscale.check.conversion import ConversionCheck
    from hscale.checkpoints.convert import convert_checkpoint

    class Failing(ConversionCheck):
        def output(self, path, how):
            raise RuntimeError("planted")
    with pytest.raises(RuntimeError, match="planted"):
        convert_checkpoint(checkpoints[CT], tmp_path / "out", to="modelopt", check=Failing())
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("old")
    with pytest.raises(RuntimeError, match="planted"):
        convert_checkpoint(checkpoints[CT], tmp_path / "out", to="modelopt", force=True,
                           check=Failing())
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "keep").read_text() == "old"


# -- exit 2 without a name, and vague answers ---------------------------------------------------

@pytest.mark.clause("NVFP4-GS-4", "NVFP4-CKPT-3")
def test_a_nan_global_scale_in_a_fused_set_is_a_finding(checkpoints, tmp_path):
    name = ATTENTION + "k_proj.weight_global_scale"
    case = planted(checkpoints[CT], tmp_path / "case",
                   lambda t: t.__setitem__(name, torch.tensor([float("nan")])))
    check = run_command(["check", case])
    assert check.code == 1
    findings = [line.strip() for line in check.out.split("findings (", 1)[1].splitlines()[1:]
                if line.strip() and not line.startswith("does not")]
    assert findings[0].startswith(f"{name}: [NVFP4-GS-4] tensor: the stored reciprocal r = nan")
    assert len(findings) == 1, findings


@pytest.mark.clause("NVFP4-CKPT-5")
def test_a_header_length_cut_into_its_padding(checkpoints, tmp_path):
    """Valid JSON still, every tensor read one byte early: the byte left over at the end is
    named (the answer was vague)."""
    case = copy_of(checkpoints[CT], tmp_path / "case")
    path = case / "model.safetensors"
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    assert raw[8 + size - 1:8 + size] == b" ", "the writer pads its header with spaces"
    path.write_bytes(struct.pack("<Q", size - 1) + raw[8:])
    safetensors_refuses(path)
    refused(case, tmp_path, "no tensor covers the last 1 byte of the file",
            "the header's length or its offsets are wrong")


@pytest.mark.clause("NVFP4-GS-2")
def test_a_subnormal_global_scale_is_one_finding(checkpoints, tmp_path):
    name = ATTENTION + "o_proj.weight_scale_2"
    case = planted(checkpoints["modelopt"], tmp_path / "case",
                   lambda t: t.__setitem__(name, torch.tensor(1e-40)))
    check = run_command(["check", case])
    findings = [line.strip() for line in check.out.split("findings (", 1)[1].splitlines()[1:]
                if line.strip() and not line.startswith("does not")]
    assert check.code == 1 and len(findings) == 1, check.out[-1500:]
    assert findings[0].startswith(f"{name}: [NVFP4-GS-2] tensor: s_g = 9.99994610111476e-41 "
                                  "(0x000116C2): a global scale is a positive normal fp32")
