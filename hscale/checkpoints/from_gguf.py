"""A GGUF model file (llama.cpp's format: Q4_1, Q8_0, K-quants, F16, ...) as the Hugging Face model
directory the rest of the kit reads, for ``hscale quantize FILE.gguf`` and ``hscale check
--original FILE.gguf``.

The model is read by the one GGUF route of the kit, ``hscale.models.gguf_source.load_gguf_model``
(transformers' GGUF loading: every tensor dequantized to float32, llama.cpp's names mapped, the
query and key rows put back in Hugging Face's order); the directory then holds what
``save_pretrained`` would write: ``config.json`` (without the GGUF loading's quantization
config), the tokenizer transformers built from the file's vocabulary, and ``model.safetensors``
in float32 (tied weights left out, MoE experts per expert), written tensor by tensor. Beside
them, ``gguf_metadata.json`` carries every key-value pair of the file's header exactly (types
and bytes), so that a GGUF written from the directory later (``hscale convert --to gguf``, or
``hscale quantize --format gguf``) has the source's tokenizer (``tokenizer.ggml.*``, its
pre-tokenizer and merges included) and hyperparameters, and llama.cpp runs it as it ran the
source.

Memory: the whole model in float32 while it is written (SmolLM2-135M: 0.54 GB); disk: the same
again, in a temporary directory the caller removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .safetensors import DEFAULT_MAX_SHARD_BYTES, ShardWriter, TensorInfo

#: The header of the GGUF file a directory was made from, carried through checkpoints.
METADATA_NAME = "gguf_metadata.json"
#: Keys not carried: the reader's own fields, and what a new file must state afresh.
NOT_CARRIED = ("GGUF.", "general.file_type", "general.quantization_version",
               "general.alignment", "hscale.")


@dataclass
class GGUFDirectory:
    """What ``write_model_directory`` wrote."""

    directory: Path
    header: object  # hscale.models.gguf_source.GGUFHeader
    tensors: int
    bytes: int
    seconds: float


def write_model_directory(path, directory, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
                          ) -> GGUFDirectory:
    """The GGUF model file ``path`` as a Hugging Face model directory ``directory`` (created,
    or an existing empty one); see the module docstring. A file that cannot be read raises
    ``hscale.models.gguf_source.GGUFSourceError`` (one line) before anything is written."""
    import torch
    from hscale.models.architecture import saved_state
    from hscale.models.gguf_source import load_gguf_model, read_gguf_header
    started = time.perf_counter()
    header = read_gguf_header(path)  # refused before the (long) load
    loaded = load_gguf_model(header.path, "float32")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = loaded.model.config
    if hasattr(config, "quantization_config"):  # the GGUF loading's own, not the weights'
        del config.quantization_config
    config.dtype = torch.float32
    config.architectures = [type(loaded.model).__name__]  # the GGUF loading leaves it unset
    config.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    (directory / METADATA_NAME).write_text(json.dumps(
        {"source": str(header.path), "fields": header_fields(header.path)}) + "\n")
    state = saved_state(loaded.model)
    infos = [TensorInfo(name, "F32", tuple(tensor.shape)) for name, tensor in state.items()]
    writer = ShardWriter(directory, infos, max_shard_bytes,
                         {"producer": "hscale-nvfp4 from GGUF", "gguf": header.path.name})
    for info in infos:
        writer.write(info.name, state[info.name].detach().to(torch.float32).numpy())
    writer.close()
    return GGUFDirectory(directory, header, len(infos), sum(i.nbytes for i in infos),
                         time.perf_counter() - started)


@contextlib.contextmanager
def temporary_model_directory(path, parent=None, log=None):
    """``write_model_directory`` of the GGUF model ``path`` into a hidden temporary directory
    under ``parent`` (the system's temporary directory by default), yielded, and removed
    however the block ends. ``log(line)`` is told what is read and how long it took."""
    parent = Path(parent if parent is not None else tempfile.gettempdir()).absolute()
    if not parent.is_dir():
        raise ValueError(f"{parent}: no such directory (for the model read from {path})")
    directory = parent / f".hscale-gguf-source-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        if log is not None:
            log(f"reading {path}: every tensor dequantized to float32 by transformers' GGUF "
                f"loading, into {directory}/ (removed at the end)")
        written = write_model_directory(path, directory)
        if log is not None:
            types = ", ".join(f"{k} {v}" for k, v in written.header.tensor_types.items())
            log(f"read {path} ({written.header.architecture}; tensors: {types}): "
                f"{written.tensors} tensors, {written.bytes / 2**20:,.0f} MiB in float32, "
                f"{written.seconds:.1f} s")
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# the header's key-value pairs, exactly
# --------------------------------------------------------------------------------------------

def header_fields(path) -> list[dict]:
    """Every key-value pair of a GGUF file's header but those of ``NOT_CARRIED``, as JSON-able
    records ``{"key", "type", "value"}`` (``"sub_type"`` for arrays): strings as text (bytes
    that are not UTF-8 kept as surrogate escapes), numbers as Python numbers of the stored
    width, so that ``add_fields`` writes the same bytes back."""
    import gguf
    reader = gguf.GGUFReader(path)
    records = []
    for field in reader.fields.values():
        if field.name.startswith(NOT_CARRIED):
            continue
        kind = gguf.GGUFValueType(field.types[0])
        record = {"key": field.name, "type": kind.name}
        if kind == gguf.GGUFValueType.ARRAY:
            sub = gguf.GGUFValueType(field.types[1]) if len(field.types) > 1 else None
            if sub is None or sub == gguf.GGUFValueType.ARRAY:
                raise ValueError(f"{path}: {field.name}: an array of arrays, which is not "
                                 "carried")
            record["sub_type"] = sub.name
            record["value"] = [_scalar(field.parts[i], sub) for i in field.data]
        else:
            record["value"] = _scalar(field.parts[field.data[0]], kind)
        records.append(record)
    return records


def _scalar(part, kind):
    import gguf
    if kind == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8", "surrogateescape")
    return part[0].item()


def add_fields(writer, records: list[dict], skip: tuple[str, ...] = ()) -> None:
    """The records of ``header_fields`` written into a ``gguf.GGUFWriter`` with their own
    types (keys starting with one of ``skip`` left out)."""
    import gguf
    for record in records:
        if record["key"].startswith(skip):
            continue
        kind = gguf.GGUFValueType[record["type"]]
        sub = gguf.GGUFValueType[record["sub_type"]] if "sub_type" in record else None
        value = record["value"]
        if (sub or kind) == gguf.GGUFValueType.STRING:
            encode = lambda text: text.encode("utf-8", "surrogateescape")  # noqa: E731
            value = [encode(v) for v in value] if sub is not None else encode(value)
        writer.add_key_value(record["key"], value, kind, sub)


def carried_fields(directory) -> list[dict] | None:
    """The header records a model directory or checkpoint carries from the GGUF it was made
    from (``METADATA_NAME``), or None."""
    path = Path(directory) / METADATA_NAME
    if not path.is_file():
        return None
    return json.loads(path.read_text())["fields"]


def field_value(records: list[dict], key: str, default=None):
    """The value of ``key`` among ``records``."""
    return next((r["value"] for r in records if r["key"] == key), default)


def tensor_bytes(reader_tensor) -> np.ndarray:
    """A GGUF tensor's stored bytes, as a flat uint8 array (any ggml type)."""
    return np.asarray(reader_tensor.data).reshape(-1).view(np.uint8)
