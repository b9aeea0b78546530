"""A GGUF model file (llama.cpp's format: Q4_1, Q8_0, K-quants, F16, ...) as the Hugging Face model
directory the rest of the kit reads, for ``hscale quantize FILE.gguf``, ``hscale calibrate`` and
``hscale check --original FILE.gguf``.

The model is read by the one GGUF route of the kit, ``hscale.checkpoints.gguf_source.GGUFModel``
(the header once; every tensor dequantized by gguf's own dequantizer to float32, one at a time,
named and ordered as transformers' GGUF loading does); the directory then holds what
``save_pretrained`` would write: ``config.json`` (transformers' config of the header), the
tokenizer transformers builds from the file's vocabulary, and ``model.safetensors`` in float32
(tied weights absent, as the file has them), written tensor by tensor as each is dequantized.
Beside them, ``gguf_metadata.json`` carries every key-value pair of the file's header exactly
(types and bytes), so that a GGUF written from the directory later (``hscale convert --to
gguf``, or ``hscale quantize --format gguf``) has the source's tokenizer (``tokenizer.ggml.*``,
its pre-tokenizer and merges included) and hyperparameters, and llama.cpp runs it as it ran the
source.

Memory: one tensor in float32 at a time (and the memory map of the file); disk: the model in
float32 (SmolLM2-135M: 0.54 GB), in a temporary directory the caller removes.
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

from .gguf_facts import METADATA_NAME, NOT_CARRIED
from .safetensors import DEFAULT_MAX_SHARD_BYTES, ShardWriter, TensorInfo


@dataclass
class GGUFDirectory:
    """What ``write_model_directory`` wrote."""

    directory: Path
    header: object  # hscale.checkpoints.gguf_source.GGUFHeader
    tensors: int
    bytes: int
    seconds: float


def write_model_directory(model, directory, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
                          progress=None) -> GGUFDirectory:
    """The GGUF model ``model`` (a ``GGUFModel``, or a path opened as one) as a Hugging Face
    model directory ``directory`` (created, or an existing empty one); see the module docstring.
    A file that cannot be read raises ``GGUFSourceError`` (one line) before anything is
    written. ``progress(done, total)``: after each tensor."""
    from .gguf_source import GGUFModel
    started = time.perf_counter()
    model = model if isinstance(model, GGUFModel) else GGUFModel.open(model)
    config, tokenizer = model.config, model.tokenizer
    shapes = model.expected_shapes()
    model.check_shapes()
    names = [model.names[t.name] for t in model.file.tensors if t.name in model.names]
    infos = [TensorInfo(name, "F32", shapes[name]) for name in names]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / METADATA_NAME).write_text(json.dumps(
        {"source": str(model.path), "fields": header_fields(model.file)}) + "\n")
    writer = ShardWriter(directory, infos, max_shard_bytes,
                         {"producer": "hscale-nvfp4 from GGUF", "gguf": model.path.name})
    for name, value in model.tensors(progress):
        writer.write(name, np.ascontiguousarray(value, np.float32))
    writer.close()
    return GGUFDirectory(directory, model.header, len(infos), sum(i.nbytes for i in infos),
                         time.perf_counter() - started)


@contextlib.contextmanager
def temporary_model_directory(model, parent=None, log=None, progress=None):
    """``write_model_directory`` of the GGUF model ``model`` (a ``GGUFModel`` or a path) into a
    hidden temporary directory under ``parent`` (the system's temporary directory by default),
    yielded, and removed however the block ends. ``log(line)`` is told what is read and how
    long it took."""
    path = getattr(model, "path", model)
    parent = Path(parent if parent is not None else tempfile.gettempdir()).absolute()
    if not parent.is_dir():
        raise ValueError(f"{parent}: no such directory (for the model read from {path})")
    directory = parent / f".hscale-gguf-source-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        if log is not None:
            log(f"reading {path}: every tensor dequantized to float32 by gguf's dequantizer, one "
                f"at a time, into {directory}/ (removed at the end)")
        written = write_model_directory(model, directory, progress=progress)
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

def header_fields(file) -> list[dict]:
    """Every key-value pair of a GGUF file's header (a ``GGUFFile``, or a path) but those of
    ``NOT_CARRIED``, as JSON-able records ``{"key", "type", "value"}`` (``"sub_type"`` for
    arrays): strings as text (the reader refuses any that is not UTF-8), numbers as
    Python numbers of the stored width, so that ``add_fields`` writes the same bytes back."""
    from .gguf_file import VALUE_TYPES, GGUFFile
    file = file if isinstance(file, GGUFFile) else GGUFFile(file)
    records = []
    for key, item in file.fields.items():
        if key.startswith(NOT_CARRIED):
            continue
        record = {"key": key, "type": VALUE_TYPES[item.type][0]}
        if item.sub_type is not None:
            record["sub_type"] = VALUE_TYPES[item.sub_type][0]
        record["value"] = item.value
        records.append(record)
    return records


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
