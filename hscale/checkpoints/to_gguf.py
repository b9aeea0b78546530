"""``hscale convert SRC OUT.gguf --to gguf``: an NVFP4 checkpoint (compressed-tensors or ModelOpt)
as a GGUF file llama.cpp runs (docs/spec.md NVFP4-GGUF-1, docs/checkpoints.md "GGUF NVFP4").

* Every quantized Linear becomes an NVFP4 tensor holding exactly its codes and scale bytes,
  reordered into ggml's blocks (``hscale.reference.gguf_blocks``), and a ``.scale`` F32 [1]
  holding the multiplier s_g the source means (for compressed-tensors ``fp32(1 / r)``,
  NVFP4-GS-4). llama.cpp computes ``fp32(e2m1 * ue4m3) * s_g`` in fp32: NVFP4-DEQ-1's value.
* Every other tensor keeps its values bit for bit: 2-D ones their dtype (F32, F16, BF16),
  1-D ones (norms, biases) as F32, which holds every F16 and BF16 value exactly.
* Names are llama.cpp's (gguf's tensor name map); for the llama architecture the query and key
  rows (codes and scale bytes alike) are permuted into ggml's rope order, as llama.cpp's own
  converter does. The Hugging Face module of every tensor is recorded in the file's metadata,
  so that ``hscale check`` reads it back under that name.
* Only the architectures whose llama.cpp graph applies every ``.scale`` are written (llama,
  mistral as llama, qwen3): others would run with their FFN weights 1/s_g too large.
* The vocabulary is the model's own when gguf reads it (``tokenizer.model`` through
  SentencePiece, or a byte-fallback BPE ``tokenizer.json``); a directory with no tokenizer gets a
  placeholder one (ids 0-2 ``<unk> <s> </s>``, 3-258 the 256 bytes, then unused tokens: the
  seeded decoders' ``ByteTokenizer``); any other tokenizer is refused.
* The weights are weight-only NVFP4, so every NVFP4 tensor is tagged
  ``general.tensor_extra.prec_a4 = false`` (llama.cpp's CUDA backend then keeps activations at
  8 bits or more; on the CPU they are Q8_0 in any case).

The file is written tensor by tensor under a temporary name beside OUT, read back (every
quantized Linear's codes, scale bytes and s_g, and every other tensor, compared with the
source's) and renamed when complete.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hscale.files import check_target, replacing

from hscale.reference.gguf_blocks import BLOCK, BLOCK_BYTES, to_gguf_blocks

from .from_gguf import add_fields, carried_fields, field_value
from .gguf import GGUFCheckpoint, is_gguf_file, permuted_heads, require_gguf, rope_permute, \
    rope_unpermute
from .gguf_facts import (METADATA_NAME, PREC_A4_KEY, PREC_NAMES_KEY, REFUSED_BECAUSE,
                         SCALE_APPLYING_ARCHITECTURES, SOURCE_MODULES_KEY, SOURCE_TENSORS_KEY,
                         WRITTEN_MODEL_TYPES, block_count_key, head_count_key,
                         llama_cpp_architecture, metadata_value, name_map,
                         written_architectures)
from .safetensors import CheckpointError
from .stored import open_checkpoint, read_stored_linear
#: The placeholder vocabulary's special tokens (the seeded decoders' ByteTokenizer ids).
PLACEHOLDER_SPECIALS = ("<unk>", "<s>", "</s>")
#: Elements of a tensor compared at a time when the written file is read back (``_verify``).
VERIFY_CHUNK = 1 << 22


@dataclass
class GGUFConversion:
    """What ``convert_to_gguf`` wrote."""

    source: str
    destination: str
    source_format: str
    architecture: str
    nvfp4_tensors: int = 0
    other_tensors: int = 0
    vocabulary: str = ""
    bytes: int = 0
    seconds: float = 0.0
    modules: list = field(default_factory=list)
    raw_tensors: int = 0  # copied as stored from the source GGUF (``raw_from``)


def convert_to_gguf(source, destination, *, force: bool = False, check=None,
                    raw_from=None) -> GGUFConversion:
    """``hscale convert SRC DST --to gguf``; see the module docstring. A source that cannot be
    written as GGUF raises ``CheckpointError`` before anything is written. ``check``: as for
    ``hscale.checkpoints.convert.convert_checkpoint`` (the source checked first, the written
    file before it is renamed). ``raw_from``: the GGUF model file the source was quantized from
    (``hscale quantize FILE.gguf --format gguf``): its tensors that are not quantized are copied
    from it as stored (their ggml type and bytes), and any it has that the checkpoint lacks
    too."""
    from .convert import _refuse_activation_quantization
    started = time.perf_counter()
    gguf = require_gguf()
    source, destination = Path(source), Path(destination)
    if is_gguf_file(source):
        raise CheckpointError(f"{source}: already GGUF (hscale convert --to gguf reads a "
                              "compressed-tensors or ModelOpt checkpoint directory)")
    check_destination(destination, force)
    if check is not None:
        check.source(source)
    detected, model, modules = open_checkpoint(source)
    _refuse_activation_quantization(model, detected, source)
    carried = carried_fields(source)
    if carried is not None:
        architecture, hparams = _carried_hyperparameters(carried, source)
    else:
        config = json.loads((source / "config.json").read_text())
        architecture, hparams = hyperparameters(config, source)
    names = name_map(architecture, hparams["block_count"])
    plan = _plan(model, modules, detected.layout, names, architecture, hparams, source)
    if raw_from is not None:
        plan = _raw_plan(plan, raw_from, gguf, architecture, hparams)

    report = GGUFConversion(str(source), str(destination), detected.format, architecture)
    writer = gguf.GGUFWriter(None, architecture)
    if carried is not None:
        add_fields(writer, carried, skip=("general.architecture",))
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_NVFP4)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        report.vocabulary = (
            f"the source GGUF's ({field_value(carried, 'tokenizer.ggml.model')!r} model, "
            f"pre-tokenizer {field_value(carried, 'tokenizer.ggml.pre')!r}, "
            f"{len(field_value(carried, 'tokenizer.ggml.tokens', []))} tokens), carried with "
            f"its other metadata from {METADATA_NAME}")
    else:
        _add_hyperparameters(writer, gguf, source.name, hparams)
        report.vocabulary = _add_vocabulary(writer, gguf, source, hparams["vocab_size"])
    nvfp4 = [entry["gguf"] for entry in plan if entry["kind"] == "nvfp4"]
    writer.add_array(PREC_NAMES_KEY, nvfp4)
    writer.add_array(PREC_A4_KEY, [False] * len(nvfp4))
    writer.add_array(SOURCE_TENSORS_KEY, [e["gguf"] for e in plan])
    writer.add_array(SOURCE_MODULES_KEY, [e["hf"] for e in plan])
    for entry in plan:
        writer.add_tensor_info(entry["gguf"], entry["shape"], np.dtype(entry["numpy"]),
                               entry["nbytes"], raw_dtype=entry["raw"])
    with replacing(destination, argument="DST") as temporary:
        writer.write_header_to_file(temporary)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for entry in plan:
            writer.write_tensor_data(entry["data"]())
        writer.close()
        _verify(temporary, model, detected.layout, plan)
        if check is not None:
            check.output(temporary, {})
        report.bytes = temporary.stat().st_size
    report.nvfp4_tensors = len(nvfp4)
    report.other_tensors = sum(1 for e in plan if e["kind"] in ("plain", "raw"))
    report.raw_tensors = sum(1 for e in plan if e["kind"] == "raw")
    report.modules = [e["hf"] for e in plan if e["kind"] == "nvfp4"]
    report.seconds = time.perf_counter() - started
    return report


def check_destination(destination: Path, force: bool, argument: str = "DST") -> None:
    """A GGUF file can be written at ``destination`` (``argument`` names it in messages)."""
    if str(destination) == "-":
        raise CheckpointError(f"{argument} -: a GGUF file is written to a named file (llama.cpp "
                              "maps it from disk), not to standard output")
    check_target(destination, argument=argument)  # never a link, a device or a directory
    if destination.exists() and not force:
        raise CheckpointError(f"{argument} {destination}: exists (--force replaces it)")


def hyperparameters(config: dict, source: Path) -> tuple[str, dict]:
    """(llama.cpp architecture, the hyperparameters its loader reads) from config.json, or a
    CheckpointError for a model llama.cpp would not run correctly from this file (or a field
    missing or of another type, named)."""
    where = source / "config.json"
    model_type = config.get("model_type")
    if model_type not in WRITTEN_MODEL_TYPES:
        why = REFUSED_BECAUSE.get(model_type, "not one whose llama.cpp graph is known to apply "
                                              "every NVFP4 tensor's .scale")
        raise CheckpointError(
            f"{where}: model_type {model_type!r}: {why}; GGUF NVFP4 is written for "
            f"{', '.join(sorted(WRITTEN_MODEL_TYPES))} (spec NVFP4-GGUF-1)")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise CheckpointError(f"{where}: rope_parameters is {type(rope).__name__}, not an object")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
        raise CheckpointError(f"{where}: rope_type {rope_type!r}: only the plain rotary "
                              "embedding is written (no rope scaling)")
    if config.get("mlp_bias"):
        raise CheckpointError(f"{where}: mlp_bias: llama.cpp refuses a bias on an NVFP4 FFN "
                              "weight with a .scale (llama-graph.cpp)")

    def field(key, kind="a positive integer", default=None, values=config):
        return metadata_value(values, key, kind, where, default)
    heads, hidden = field("num_attention_heads"), field("hidden_size")
    # null (or absent) where the model uses the default: hidden_size / heads
    derived = {"head_dim": config.get("head_dim") or hidden // heads,
               "num_key_value_heads": config.get("num_key_value_heads") or heads,
               "rope_theta": rope.get("rope_theta", config.get("rope_theta", 10000.0))}
    return llama_cpp_architecture(model_type), {
        "context_length": field("max_position_embeddings", default=2048),
        "embedding_length": hidden,
        "block_count": field("num_hidden_layers"),
        "feed_forward_length": field("intermediate_size"),
        "head_count": heads,
        "head_count_kv": field("num_key_value_heads", values=derived),
        "head_dim": field("head_dim", values=derived),
        "rope_freq_base": float(field("rope_theta", "a number", values=derived)),
        "rms_norm_eps": float(field("rms_norm_eps", "a number", default=1e-6)),
        "vocab_size": field("vocab_size"),
    }


def _carried_hyperparameters(carried: list[dict], source: Path) -> tuple[str, dict]:
    """(llama.cpp architecture, what the plan needs) from the header a checkpoint carries
    from its source GGUF, or a CheckpointError for an architecture whose graph does not apply
    every .scale, or a key the plan reads missing or of another type."""
    where = source / METADATA_NAME
    architecture = field_value(carried, "general.architecture")
    if architecture not in SCALE_APPLYING_ARCHITECTURES:
        raise CheckpointError(
            f"{where}: general.architecture {architecture!r}: not one whose llama.cpp graph is "
            "known to apply every NVFP4 tensor's .scale; GGUF NVFP4 is written for "
            f"{', '.join(written_architectures())} (spec NVFP4-GGUF-1)")
    heads = metadata_value(carried, head_count_key(architecture), "a positive integer", where)
    return architecture, {
        "block_count": metadata_value(carried, block_count_key(architecture),
                                      "a positive integer", where),
        "head_count": heads,
        "head_count_kv": metadata_value(carried, head_count_key(architecture, kv=True),
                                        "a positive integer", where, default=heads)}


def _add_hyperparameters(writer, gguf, name: str, hparams: dict) -> None:
    writer.add_name(name)
    writer.add_context_length(hparams["context_length"])
    writer.add_embedding_length(hparams["embedding_length"])
    writer.add_block_count(hparams["block_count"])
    writer.add_feed_forward_length(hparams["feed_forward_length"])
    writer.add_head_count(hparams["head_count"])
    writer.add_head_count_kv(hparams["head_count_kv"])
    writer.add_rope_dimension_count(hparams["head_dim"])
    writer.add_key_length(hparams["head_dim"])
    writer.add_value_length(hparams["head_dim"])
    writer.add_rope_freq_base(hparams["rope_freq_base"])
    writer.add_layer_norm_rms_eps(hparams["rms_norm_eps"])
    writer.add_vocab_size(hparams["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_NVFP4)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _add_vocabulary(writer, gguf, source: Path, vocab_size: int) -> str:
    """The model's vocabulary (or the placeholder); returns what was written, for the report."""
    if (source / "tokenizer.model").is_file():
        try:
            vocab = gguf.SentencePieceVocab(source)
        except ImportError:
            raise CheckpointError(f"{source / 'tokenizer.model'}: reading it needs sentencepiece "
                                  "(pip install sentencepiece)") from None
        kind = "SentencePiece tokenizer.model"
    elif (source / "tokenizer.json").is_file():
        try:
            vocab = gguf.LlamaHfVocab(source)
        except (FileNotFoundError, TypeError):
            raise CheckpointError(
                f"{source / 'tokenizer.json'}: not a byte-fallback BPE tokenizer (the kind "
                "gguf's LlamaHfVocab reads); other tokenizers need llama.cpp's pre-tokenizer "
                "table, which this command does not write") from None
        kind = "tokenizer.json (byte-fallback BPE)"
    else:
        tokens, scores, types = _placeholder_vocabulary(gguf, vocab_size)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        return ("placeholder (no tokenizer file): ids 0-2 <unk> <s> </s>, 3-258 the bytes "
                "0x00-0xFF, the rest unused")
    tokens, scores, types = zip(*vocab.all_tokens())
    if len(tokens) != vocab_size:
        raise CheckpointError(f"{source}: the tokenizer has {len(tokens)} tokens, config.json's "
                              f"vocab_size is {vocab_size}")
    writer.add_tokenizer_model(vocab.tokenizer_model)
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(tokens))
    writer.add_token_scores(list(scores))
    writer.add_token_types(list(types))
    gguf.SpecialVocab(source, n_vocab=len(tokens)).add_to_gguf(writer, quiet=True)
    return kind


def _placeholder_vocabulary(gguf, vocab_size: int):
    if vocab_size < len(PLACEHOLDER_SPECIALS) + 256:
        raise CheckpointError(f"vocab_size {vocab_size}: a directory without a tokenizer gets "
                              "the placeholder vocabulary, which needs at least 259 ids")
    tokens = list(PLACEHOLDER_SPECIALS) + [f"<0x{b:02X}>" for b in range(256)]
    unused = vocab_size - len(tokens)
    tokens += [f"<unused{i}>" for i in range(unused)]
    types = ([gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 2
             + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.UNUSED] * unused)
    return tokens, [0.0] * vocab_size, types


def _plan(model, modules: dict, layout, names, architecture: str, hparams: dict,
          source: Path) -> list[dict]:
    """The tensors of the file, in the source's order: for each quantized Linear its NVFP4
    tensor and its .scale, for every other tensor itself; each with its GGUF name, shape, type
    and a function giving its data."""
    import gguf
    fields = {f"{architecture}.attention.head_count": hparams["head_count"],
              f"{architecture}.attention.head_count_kv": hparams["head_count_kv"]}
    owned = {name: module for module, tensors in modules.items() for name in tensors.values()}
    plan, unmapped = [], []
    for name in model.names():
        module = owned.get(name)
        if module is not None:
            if name != layout.tensor_names(module)["packed"]:
                continue  # the scale bytes and global scale go with the packed codes
            gguf_name = names.get_name(f"{module}.weight", try_suffixes=(".weight",))
            if gguf_name is None:
                unmapped.append(f"{module}.weight")
                continue
            plan += _quantized_entries(model, layout, module, gguf_name,
                                       permuted_heads(architecture, gguf_name, fields), gguf)
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            unmapped.append(name)
            continue
        plan.append(_plain_entry(model, name, gguf_name,
                                 permuted_heads(architecture, gguf_name, fields), gguf))
    if unmapped:
        raise CheckpointError(f"{source}: {len(unmapped)} tensors have no llama.cpp name for "
                              f"the {architecture} architecture (first {unmapped[0]})")
    return plan


def _quantized_entries(model, layout, module: str, gguf_name: str, heads, gguf) -> list[dict]:
    stored = read_stored_linear(model, layout, module)
    problem = layout.stored_global_scale_problem(float(stored.stored_global_scale),
                                                 repr(float(stored.stored_global_scale)))
    if problem is not None:
        raise CheckpointError(f"{model.directory}: {module}: {problem[1]} (spec {problem[0]}; "
                              "hscale check says more)")
    rows, cols = stored.packed.shape[0], 2 * stored.packed.shape[1]
    if cols % BLOCK:
        raise CheckpointError(f"{model.directory}: {module} has in_features {cols}, not a "
                              f"multiple of {BLOCK}: a GGUF NVFP4 row is whole blocks of 64 "
                              "weights (spec NVFP4-GGUF-1)")
    bad = np.flatnonzero((stored.scale_bytes & 0x80) | ((stored.scale_bytes & 0x7F) == 0x7F))
    if bad.size:
        byte = int(stored.scale_bytes.reshape(-1)[bad[0]])
        raise CheckpointError(f"{model.directory}: {module} holds scale byte 0x{byte:02X} "
                              f"({bad.size} such): llama.cpp ignores the sign bit and reads 0x7F "
                              "as 0, so it would not mean what the file says (spec NVFP4-GGUF-1; "
                              "hscale check says more)")

    def blocks():
        current = read_stored_linear(model, layout, module)
        packed, scale_bytes = current.packed, current.scale_bytes
        if heads is not None:
            packed, scale_bytes = rope_permute(packed, heads), rope_permute(scale_bytes, heads)
        return to_gguf_blocks(packed, scale_bytes)

    scale_name = gguf_name.removesuffix(".weight") + ".scale"
    global_scale = np.array([stored.global_scale], np.float32)
    return [{"kind": "nvfp4", "hf": f"{module}.weight", "gguf": gguf_name,
             "shape": (rows, cols // BLOCK * BLOCK_BYTES), "numpy": "uint8",
             "nbytes": rows * cols // BLOCK * BLOCK_BYTES,
             "raw": gguf.GGMLQuantizationType.NVFP4, "data": blocks},
            {"kind": "scale", "hf": f"{module}.scale", "gguf": scale_name, "shape": (1,),
             "numpy": "float32", "nbytes": 4, "raw": None, "data": lambda: global_scale}]


def _plain_entry(model, name: str, gguf_name: str, heads, gguf) -> dict:
    info = model.info[name]
    if info.dtype not in ("F32", "F16", "BF16"):
        raise CheckpointError(f"{model.directory}: {name} is {info.dtype}; GGUF gets F32, F16 "
                              "or BF16 tensors beside the NVFP4 ones")
    dtype = "F32" if len(info.shape) == 1 else info.dtype  # 1-D: F32, exact for all three

    def data():
        array = model.array(name)
        if heads is not None:
            array = rope_permute(array, heads)
        if dtype == "F32":
            return np.ascontiguousarray(array, np.float32)
        if dtype == "BF16":
            return np.ascontiguousarray(array).view(np.uint16)
        return np.ascontiguousarray(array, np.float16)

    raw = {"F32": None, "F16": None, "BF16": gguf.GGMLQuantizationType.BF16}[dtype]
    numpy = {"F32": "float32", "F16": "float16", "BF16": "uint16"}[dtype]
    size = int(np.prod(info.shape)) * (4 if dtype == "F32" else 2)
    return {"kind": "plain", "hf": name, "gguf": gguf_name, "shape": info.shape, "numpy": numpy,
            "nbytes": size, "raw": raw, "data": data}


def _verify(path: Path, model, layout, plan: list[dict]) -> None:
    """The written file read back through the GGUF reader: every quantized Linear's codes,
    scale bytes and s_g, and every other tensor's values, must be the source's exactly (else
    this is a bug, and nothing is committed)."""
    written = GGUFCheckpoint(path)
    stored = None  # the written file's tensors as stored, for those copied raw
    for entry in plan:
        if entry["kind"] == "nvfp4":
            module = entry["hf"].removesuffix(".weight")
            before = read_stored_linear(model, layout, module)
            same = (np.array_equal(written.array(f"{module}.weight"), before.packed)
                    and np.array_equal(written.array(f"{module}.weight_scale"), before.scale_bytes)
                    and written.array(f"{module}.scale").reshape(-1)[0] == before.global_scale)
        elif entry["kind"] == "plain":
            same = _same_values(written.array(entry["hf"]), model.array(entry["hf"]))
        elif entry["kind"] == "raw":
            if stored is None:  # the same read of the written file
                stored = {t.name: t for t in written.file.tensors}
            same = _same_raw(entry, written.file, stored[entry["gguf"]], model)
        else:
            continue
        if not same:
            raise RuntimeError(f"{entry['gguf']}: read back from the GGUF file differs from "
                               f"the source's {entry['hf']}: a bug, please report (nothing "
                               "was written)")


def _same_values(after, before) -> bool:
    """One shape and the same float32 values, ``VERIFY_CHUNK`` elements at a time (whole float32
    copies of Llama-3-8B's token embedding would be 2.1 GB each)."""
    if after.shape != before.shape:
        return False
    after, before = after.reshape(-1), before.reshape(-1)
    parts = (slice(i, i + VERIFY_CHUNK) for i in range(0, after.size, VERIFY_CHUNK))
    return all(np.array_equal(np.asarray(after[part], np.float32),
                              np.asarray(before[part], np.float32)) for part in parts)


def _raw_plan(plan: list[dict], source, gguf, architecture: str, hparams: dict
              ) -> list[dict]:
    """The tensors of the file when the checkpoint was quantized from the GGUF model ``source``
    (its path, or the ``GGUFModel`` the run read, whose one read serves here too): the source's
    tensors in its order, each quantized Linear's NVFP4 tensor and .scale in place of its
    weight, every other tensor copied as stored (its ggml type and bytes: a Q8_0 embedding stays
    Q8_0, so llama.cpp runs it as it ran the source)."""
    from .gguf_file import GGUFFile
    file = getattr(source, "file", None) or GGUFFile(source)
    path = file.path
    fields = {head_count_key(architecture): hparams["head_count"],
              head_count_key(architecture, kv=True): hparams["head_count_kv"]}
    quantized: dict = {}
    plain = {e["gguf"]: e for e in plan if e["kind"] == "plain"}
    for entry in plan:
        if entry["kind"] == "nvfp4":
            quantized[entry["gguf"]] = [entry]
            last = entry["gguf"]
        elif entry["kind"] == "scale":
            quantized[last].append(entry)
    out = []
    for tensor in file.tensors:
        if tensor.name in quantized:
            out += quantized.pop(tensor.name)
            continue
        known = plain.pop(tensor.name, None)
        data = file.raw(tensor)
        out.append({"kind": "raw", "hf": known["hf"] if known else tensor.name,
                    "gguf": tensor.name, "shape": data.shape, "numpy": data.dtype.str,
                    "nbytes": tensor.nbytes,
                    "raw": gguf.GGMLQuantizationType(tensor.ggml_type),
                    "data": lambda data=data: data, "stored": data,
                    "heads": permuted_heads(architecture, tensor.name, fields),
                    "compare": known is not None})
    missing = list(quantized) + list(plain)
    if missing:
        raise CheckpointError(f"{path}: has no tensor {missing[0]} (nor {len(missing) - 1} "
                              "others): not the GGUF file this checkpoint was quantized from")
    return out


def _same_raw(entry: dict, file, tensor, model) -> bool:
    """A tensor copied as stored: its bytes in the written file (``tensor`` of the
    ``GGUFFile`` ``file``) are the source GGUF's, and (where the checkpoint has it) their
    dequantization is the checkpoint's."""
    import gguf
    kind = gguf.GGMLQuantizationType(tensor.ggml_type)
    if kind != entry["raw"] or not np.array_equal(
            file.stored(tensor), np.asarray(entry["stored"]).reshape(-1).view(np.uint8)):
        return False
    if not entry["compare"]:
        return True
    values = np.asarray(gguf.dequantize(file.raw(tensor), kind), np.float32)
    if entry["heads"] is not None:
        values = rope_unpermute(values, entry["heads"])
    return _same_values(values, model.array(entry["hf"]))


def format_gguf_conversion(report: GGUFConversion) -> str:
    return "\n".join([
        f"{report.source} ({report.source_format}) -> {report.destination} (gguf, "
        f"{report.architecture}): {report.nvfp4_tensors} quantized Linears as NVFP4 blocks "
        "with their .scale (codes, scale bytes and s_g unchanged), "
        f"{report.other_tensors} other tensors copied exactly"
        + (f" ({report.raw_tensors} as stored in the source GGUF, their ggml types kept)"
           if report.raw_tensors else "") + f"; {report.bytes:,} bytes; "
        f"{report.seconds:.1f} s",
        f"vocabulary: {report.vocabulary}",
        f"written: {report.destination} (read back and compared with the source)"])
