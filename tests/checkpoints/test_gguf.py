"""GGUF NVFP4, the third layout (NVFP4-GGUF-1): ``hscale convert --to gguf`` and ``hscale
check`` on a .gguf file. The golden values come from gguf's own dequantizer
(``gguf.quants.dequantize``, llama.cpp's ``dequantize_row_nvfp4`` in Python) times the stored
``.scale``, compared with the checkpoint decoded through ml_dtypes' float4 / float8 casts; the
block layout is checked on a hand-built row, and llama's rope permutation is written again here
as a loop over heads."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF needs the gguf package (the engines extra)")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.checkpoint_edits import quantized  # noqa: E402
from helpers.cli import hscale_here  # noqa: E402
from hscale.check import check_checkpoint  # noqa: E402
from hscale.checkpoints import CheckpointError, SafetensorsModel  # noqa: E402
from hscale.checkpoints.to_gguf import convert_to_gguf  # noqa: E402
from hscale.reference.gguf_blocks import from_gguf_blocks, to_gguf_blocks  # noqa: E402

NVFP4 = gguf.GGMLQuantizationType.NVFP4
SUFFIXES = {"compressed-tensors": (".weight_packed", ".weight_scale", ".weight_global_scale"),
            "modelopt": (".weight", ".weight_scale", ".weight_scale_2")}


def decoded(packed: np.ndarray, scale_bytes: np.ndarray, global_scale) -> np.ndarray:
    """Weights from NVFP4-PACK-1 codes through ml_dtypes' casts, in float64 (exact)."""
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    values = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scales = scale_bytes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return values * np.repeat(scales, 16, axis=1) * float(global_scale)


def checkpoint_linears(directory: Path, fmt: str) -> dict:
    """module -> its decoded weight (the multiplier s_g read from the file independently)."""
    model = SafetensorsModel(directory)
    packed_suffix, scale_suffix, global_suffix = SUFFIXES[fmt]
    out = {}
    for name in model.info:
        if name.endswith(global_suffix):
            module = name[: -len(global_suffix)]
            stored = np.float32(model.array(name).reshape(-1)[0])
            s_g = np.float32(1) / stored if fmt == "compressed-tensors" else stored
            out[module] = decoded(model.array(module + packed_suffix),
                                  model.array(module + scale_suffix), s_g)
    return out


def gguf_linears(path: Path) -> dict:
    """GGUF name -> its weight by gguf's own dequantizer times its .scale."""
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    out = {}
    for name, tensor in tensors.items():
        if tensor.tensor_type == NVFP4:
            weight = gguf.quants.dequantize(tensor.data, NVFP4).astype(np.float64)
            scale = tensors[name.removesuffix(".weight") + ".scale"].data
            out[name] = weight * float(np.float32(scale[0]))
    return out


def permuted(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rope order, as a loop: row h*d + 2i + j of the GGUF tensor is row
    h*d + j*(d/2) + i of Hugging Face's."""
    d = rows.shape[0] // heads
    out = np.empty_like(rows)
    for h in range(heads):
        for i in range(d // 2):
            for j in range(2):
                out[h * d + 2 * i + j] = rows[h * d + j * (d // 2) + i]
    return out


def hf_to_gguf(module: str) -> str:
    layer = module.split(".")[2] if module.startswith("model.layers.") else None
    leaf = module.rsplit(".", 1)[-1]
    names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    return f"blk.{layer}.{names[leaf]}.weight"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> dict:
    """A seeded tiny Llama and its RTN checkpoint (compressed-tensors), for the rope rows."""
    import transformers
    from hscale.models.synthetic import TINY_DECODER_DEFAULTS, build_tiny_decoder
    directory = tmp_path_factory.mktemp("llama")
    config = transformers.LlamaConfig(**TINY_DECODER_DEFAULTS)
    build_tiny_decoder(seed=1, config=config).save_pretrained(directory / "model")
    return {"model": directory / "model",
            "compressed-tensors": quantized(directory / "model", directory / "ct")}


@pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-PACK-1")
def test_a_hand_built_row_lands_where_ggml_reads_it():
    """One row of 64 elements, element k with code k % 16 and group s with scale byte 0x38 + s:
    block = the four bytes, then byte 8s + j = code(16s + j) | code(16s + j + 8) << 4."""
    codes = np.arange(64, dtype=np.uint8) % 16
    packed = (codes[0::2] | (codes[1::2] << 4))[None, :]
    scale_bytes = np.array([[0x38, 0x39, 0x3A, 0x3B]], np.uint8)
    block = to_gguf_blocks(packed, scale_bytes)
    expected = [0x38, 0x39, 0x3A, 0x3B] + [(j | ((j + 8) << 4)) for s in range(4) for j in range(8)]
    assert block.tolist() == [expected]
    back = from_gguf_blocks(block)
    assert back[0].tolist() == packed.tolist() and back[1].tolist() == scale_bytes.tolist()


@pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-DEQ-1")
def test_random_blocks_decode_as_ggml_decodes_them():
    rng = np.random.default_rng(11)
    packed = rng.integers(0, 256, (40, 96), dtype=np.uint8)
    scale_bytes = rng.integers(0, 0x7F, (40, 12), dtype=np.uint8)  # 0x00..0x7E
    raw = to_gguf_blocks(packed, scale_bytes)
    ours = decoded(packed, scale_bytes, 1.0)
    theirs = gguf.quants.dequantize(raw, NVFP4).astype(np.float64)
    np.testing.assert_array_equal(theirs, ours)  # equal in value: gguf reads code 0x8 as +0
    assert [a.tolist() for a in from_gguf_blocks(raw)] == [packed.tolist(), scale_bytes.tolist()]


@pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-GS-4", "NVFP4-CKPT-1", "NVFP4-CKPT-2")
@pytest.mark.parametrize("fmt", ["compressed-tensors", "modelopt"])
def test_converted_checkpoints_decode_in_gguf_as_in_their_layout(checkpoints, tmp_path, fmt):
    out = tmp_path / "tiny.gguf"
    report = convert_to_gguf(checkpoints[fmt], out)
    assert (report.architecture, report.nvfp4_tensors) == ("qwen3", 14)
    in_gguf = gguf_linears(out)
    in_checkpoint = checkpoint_linears(checkpoints[fmt], fmt)
    assert sorted(in_gguf) == sorted(hf_to_gguf(m) for m in in_checkpoint)
    for module, weight in in_checkpoint.items():
        np.testing.assert_array_equal(in_gguf[hf_to_gguf(module)], weight, err_msg=module)
    reader = gguf.GGUFReader(out)
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith(("general.t", "tok"))}
    assert sorted(fields["general.tensor_extra.name"]) == sorted(in_gguf)
    assert fields["general.tensor_extra.prec_a4"] == [False] * 14
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == 512 and tokens[1:3] == ["<s>", "</s>"] and tokens[3 + 0x41] == "<0x41>"
    # every other tensor carried exactly (the model is float32)
    source = SafetensorsModel(checkpoints[fmt])
    plain = {t.name: t.data for t in reader.tensors if t.tensor_type != NVFP4
             and not t.name.endswith(".scale")}
    np.testing.assert_array_equal(plain["token_embd.weight"],
                                  source.array("model.embed_tokens.weight"))
    np.testing.assert_array_equal(plain["blk.1.attn_k_norm.weight"],
                                  source.array("model.layers.1.self_attn.k_norm.weight"))


@pytest.mark.clause("NVFP4-GGUF-1")
def test_llama_query_and_key_rows_are_in_ggml_rope_order(tiny_llama, tmp_path):
    out = tmp_path / "llama.gguf"
    convert_to_gguf(tiny_llama["compressed-tensors"], out)
    in_gguf = gguf_linears(out)
    heads = {"q_proj": 4, "k_proj": 2}
    for module, weight in checkpoint_linears(tiny_llama["compressed-tensors"],
                                             "compressed-tensors").items():
        leaf = module.rsplit(".", 1)[-1]
        expected = permuted(weight, heads[leaf]) if leaf in heads else weight
        np.testing.assert_array_equal(in_gguf[hf_to_gguf(module)], expected, err_msg=module)
    assert not np.array_equal(permuted(np.arange(128.0)[:, None], 4), np.arange(128.0)[:, None])
    # hscale check reads the rows back in Hugging Face's order: every layer is exact RTN
    report = check_checkpoint(out, original=tiny_llama["model"])
    assert report.conforms and [layer.verdict for layer in report.layers] == ["exact"] * 14


@pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-E4M3-3", "NVFP4-CKPT-3")
def test_check_reads_gguf_and_names_planted_defects(checkpoints, tiny, tmp_path):
    good = tmp_path / "good.gguf"
    convert_to_gguf(checkpoints["compressed-tensors"], good)
    report = check_checkpoint(good, original=tiny)
    assert report.conforms, report.problems
    assert [layer.verdict for layer in report.layers] == ["exact"] * 14
    assert report.layers[0].module.startswith("model.layers.")

    data = good.read_bytes()
    reader = gguf.GGUFReader(good)
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    signed = bytearray(data)
    signed[q.data_offset] |= 0x80  # the first scale byte of row 0 (an absolute offset)
    (tmp_path / "signed.gguf").write_bytes(bytes(signed))
    # the .scale renamed away (same length, in the tensor infos: the last occurrence)
    at = data.rfind(b"blk.0.attn_v.scale")
    (tmp_path / "unscaled.gguf").write_bytes(data[:at] + b"blk.0.attn_v.scalx"
                                             + data[at + 18:])
    (tmp_path / "qwen2.gguf").write_bytes(data.replace(b"qwen3", b"qwen2"))

    def findings(path):
        report = check_checkpoint(path)
        layers = [f"{layer.module}: {p}" for layer in report.layers for p in layer.problems]
        return report.conforms, layers, [str(p) for p in report.problems]

    conforms, layers, _ = findings(tmp_path / "signed.gguf")
    assert not conforms and any("self_attn.q_proj" in f and "sign bit" in f for f in layers)
    conforms, layers, _ = findings(tmp_path / "unscaled.gguf")
    assert not conforms and any("self_attn.v_proj" in f and "missing" in f
                                and "v_proj.scale" in f for f in layers)
    conforms, _, problems = findings(tmp_path / "qwen2.gguf")
    assert not conforms and any("NVFP4-GGUF-1" in p and "'qwen2'" in p for p in problems)


@pytest.mark.clause("NVFP4-GGUF-1")
def test_convert_refuses_what_llama_cpp_would_run_wrongly(checkpoints, tmp_path):
    qwen2 = tmp_path / "qwen2"
    qwen2.mkdir()
    for f in checkpoints["compressed-tensors"].iterdir():
        (qwen2 / f.name).write_bytes(f.read_bytes())
    config = json.loads((qwen2 / "config.json").read_text())
    config["model_type"] = "qwen2"
    (qwen2 / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"qwen2.*NaN.*NVFP4-GGUF-1"):
        convert_to_gguf(qwen2, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()
    with pytest.raises(CheckpointError, match="already GGUF"):
        good = tmp_path / "good.gguf"
        convert_to_gguf(checkpoints["modelopt"], good)
        convert_to_gguf(good, tmp_path / "again.gguf")


@pytest.mark.clause("NVFP4-GGUF-1")
def test_the_command_line_says_one_line_and_exits_2(checkpoints, tmp_path):
    source = checkpoints["compressed-tensors"]
    target = tmp_path / "tiny.gguf"
    target.write_bytes(b"old")
    link = tmp_path / "link.gguf"
    link.symlink_to(target)
    cases = {
        "exists": ([source, target, "--to", "gguf"], "exists (--force replaces it)"),
        "link": ([source, link, "--to", "gguf", "--force"], "symbolic link"),
        "stdout": ([source, "-", "--to", "gguf"], "not to standard output"),
        "requantize": ([source, target, "--to", "gguf", "--requantize"], "nothing to requantize"),
    }
    for name, (args, text) in cases.items():  # the mistakes in this process
        result = hscale_here(["convert", *args])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and text in lines[0], (name, result.stderr)
    assert target.read_bytes() == b"old" and link.is_symlink()
    # in this process too: convert and check keep their fresh-process tests
    # (tests/checkpoints/test_convert.py, test_check.py)
    result = hscale_here(["convert", source, target, "--to", "gguf", "--force"])
    assert result.returncode == 0 and "14 quantized Linears" in result.stdout, result.stderr
    result = hscale_here(["check", target])
    assert result.returncode == 0 and "gguf NVFP4, 14 quantized Linears" in result.stdout
    for cut in (5000, target.stat().st_size - 100000):  # in the metadata, in the tensors
        truncated = tmp_path / f"cut-{cut}.gguf"
        truncated.write_bytes(target.read_bytes()[:cut])
        result = hscale_here(["check", truncated])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 \
            and "not a readable GGUF file" in lines[0], result.stderr


def test_the_read_back_compares_a_slab_at_a_time_with_numpys_verdict(monkeypatch):
    """``_verify``'s comparison of a written tensor with its source, cut into slabs so that a
    large embedding is never copied whole, gives numpy's whole-array verdict (float32 values,
    -0 equal to +0, NaN unequal) wherever the difference lies, a slab boundary included."""
    from hscale.checkpoints import to_gguf
    monkeypatch.setattr(to_gguf, "VERIFY_CHUNK", 7)  # slabs of 7 elements, 7 < a row
    rng = np.random.default_rng(0)
    source = rng.standard_normal((5, 9)).astype(np.float16)
    cases = {"equal": source.astype(np.float32).copy()}
    for name, index in (("first", 0), ("on a boundary", 7), ("last", 44)):
        changed = source.astype(np.float32)
        changed.reshape(-1)[index] += 1
        cases[name] = changed
    signed = source.astype(np.float32)
    signed.reshape(-1)[13] = -0.0
    zeroed = source.copy()
    zeroed.reshape(-1)[13] = 0.0
    nan = source.astype(np.float32)
    nan.reshape(-1)[20] = np.nan
    for name, (after, before) in {**{k: (v, source) for k, v in cases.items()},
                                  "signed zero": (signed, zeroed), "NaN": (nan, nan),
                                  "shape": (source.astype(np.float32).reshape(9, 5), source)
                                  }.items():
        expected = after.shape == before.shape and np.array_equal(
            after.astype(np.float32), before.astype(np.float32))
        assert to_gguf._same_values(after, before) == expected, name
    assert [to_gguf._same_values(cases[n], source) for n in cases] == [True, False, False, False]
