"""llama.cpp importance matrices as h (``hscale quantize --imatrix FILE``, spec HSCALE-CAL-3).

llama.cpp's imatrix tool (``llama-imatrix``, tools/imatrix/imatrix.cpp) runs a model over a
text and, for every matmul whose weight's name starts with ``blk.``, sums the squares of each
input column over the token rows it sees; for a Mixture-of-Experts weight (``MUL_MAT_ID``), per
expert over the tokens routed to it. Two file formats:

* **GGUF** (the default since 2025): ``general.type = "imatrix"``, ``imatrix.datasets``,
  ``imatrix.chunk_count``, ``imatrix.chunk_size``; per weight ``<name>.in_sum2`` F32 ``[n_cols,
  n_experts]`` (the raw sums) and ``<name>.counts`` F32 ``[1, n_experts]`` (the token rows).
* **legacy .dat**: ``int32 n``; per entry ``int32 len, name, int32 ncall, int32 nval,
  float32[nval]`` with values ``(in_sum2 / count) * ncall`` (an expert with no token stored as 1s,
  times ncall); then ``int32 last_chunk, int32 len, dataset``.

So ``in_sum2`` of a weight (of expert e: its column e) is ``diag(X^T X)`` over the imatrix's
tokens: H-Scale's h (HSCALE-CAL-1), computed by llama.cpp's own forward. How each entry becomes
the h of a weight of the model is HSCALE-CAL-3; ``imatrix_statistics`` applies it and refuses,
in one line, a file that does not fit the model.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .statistics import LayerStatistics


class ImatrixError(ValueError):
    """An importance matrix that cannot be read, or does not fit the model: one line."""


@dataclass
class Imatrix:
    """An importance matrix as read: per llama.cpp weight name, the sums (n_experts, n_cols)
    and the token count of each expert (None where the format does not say: legacy), and what
    the file says of itself."""

    path: Path
    format: str  # "gguf" or "dat"
    sums: dict = field(default_factory=dict)  # name -> float32 (n_experts, n_cols)
    counts: dict = field(default_factory=dict)  # name -> float (n_experts,) or None
    datasets: list = field(default_factory=list)
    chunks: int = 0
    chunk_size: int | None = None


def read_imatrix(path) -> Imatrix:
    """An importance matrix file of either format (recognised by its first four bytes)."""
    path = Path(path)
    if not path.is_file():
        raise ImatrixError(f"--imatrix {path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(4)
    return _read_gguf(path) if magic == b"GGUF" else _read_dat(path)


def _read_gguf(path: Path) -> Imatrix:
    """A GGUF importance matrix, its header and tensors from one memory map
    (``hscale.checkpoints.gguf_file``); every key it reads checked (a key of another type is
    refused naming it)."""
    try:
        import gguf  # noqa: F401 - the ggml types of its tensors
    except ImportError:
        raise ImatrixError(f"--imatrix {path}: a GGUF imatrix needs the gguf package: pip "
                           "install 'hscale-nvfp4[engines]'") from None
    from hscale.checkpoints.gguf_facts import metadata_value
    from hscale.checkpoints.gguf_file import GGUFFile, GGUFFileError
    from hscale.checkpoints.safetensors import CheckpointError
    try:
        file = GGUFFile(path)
        fields = {k: file.value(k) for k in ("general.type", "general.architecture",
                                             "imatrix.datasets", "imatrix.chunk_count",
                                             "imatrix.chunk_size") if k in file.fields}
    except GGUFFileError as exc:  # the strings of imatrix.datasets are decoded (UTF-8) here
        raise ImatrixError(f"--imatrix {exc}") from None
    if fields.get("general.type") != "imatrix":
        kind = fields.get("general.type")
        said = f"general.type is {kind!r}" if kind is not None else "no general.type"
        what = " (a model?)" if "general.architecture" in fields and kind != "imatrix" else ""
        raise ImatrixError(f"--imatrix {path}: {said}, not 'imatrix': not an importance matrix"
                           f"{what}; llama-imatrix writes them")
    try:
        out = Imatrix(path, "gguf",
                      datasets=list(metadata_value(fields, "imatrix.datasets",
                                                   "an array of strings", path, default=[])),
                      chunks=metadata_value(fields, "imatrix.chunk_count", "an integer", path,
                                            default=0),
                      chunk_size=metadata_value(fields, "imatrix.chunk_size", "an integer",
                                                path, required=False))
    except CheckpointError as exc:
        raise ImatrixError(f"--imatrix {exc}") from None
    tensors = {t.name: t for t in file.tensors}
    for name, tensor in tensors.items():
        if not name.endswith(".in_sum2"):
            continue
        weight = name.removesuffix(".in_sum2")
        counts = tensors.get(f"{weight}.counts")
        if counts is None:
            raise ImatrixError(f"--imatrix {path}: {weight}.in_sum2 has no {weight}.counts")
        sums = file.dequantized(tensor)
        sums = sums.reshape(-1, int(tensor.shape[-1]))  # ggml ne = [n_cols, n_experts]
        count = file.dequantized(counts).reshape(-1)
        if count.size != sums.shape[0]:
            raise ImatrixError(f"--imatrix {path}: {weight}: {sums.shape[0]} experts of sums, "
                               f"{count.size} counts")
        out.sums[weight], out.counts[weight] = sums, count
    if not out.sums:
        raise ImatrixError(f"--imatrix {path}: no <name>.in_sum2 tensor")
    return out


def _read_dat(path: Path) -> Imatrix:
    data = path.read_bytes()
    position = 0

    def take(fmt: str):
        nonlocal position
        size = struct.calcsize(fmt)
        if position + size > len(data):
            raise ImatrixError(f"--imatrix {path}: truncated at byte {position} (neither a "
                               "GGUF imatrix nor a complete legacy .dat)")
        value = struct.unpack_from(fmt, data, position)
        position += size
        return value
    out = Imatrix(path, "dat")
    (entries,) = take("<i")
    if not 0 < entries < 1 << 20:
        raise ImatrixError(f"--imatrix {path}: not an importance matrix (a legacy .dat starts "
                           f"with its entry count; this says {entries})")
    for _ in range(entries):
        (length,) = take("<i")
        if not 0 < length < 4096:
            raise ImatrixError(f"--imatrix {path}: a name of {length} bytes: not a legacy .dat")
        name = take(f"<{length}s")[0].decode("utf-8", "replace")
        ncall, nval = take("<ii")
        values = np.array(take(f"<{nval}f"), np.float32) if nval > 0 else \
            np.zeros(0, np.float32)
        out.sums[name] = values
        out.counts[name] = None
        out.chunks = max(out.chunks, ncall)
    if position + 4 <= len(data):
        (out.chunks,) = take("<i")
        if position + 4 <= len(data):
            (length,) = take("<i")
            out.datasets = [take(f"<{length}s")[0].decode("utf-8", "replace")]
    return out


# --------------------------------------------------------------------------------------------
# llama.cpp's names -> the model's weights (HSCALE-CAL-3)
# --------------------------------------------------------------------------------------------

def llama_cpp_names(model_type: str, blocks: int, plans, inventory) -> dict:
    """{checkpoint module: (llama.cpp weight name, expert or None)} of every quantized weight:
    gguf's tensor name map of the model's llama.cpp architecture, and for an MoE expert e
    column e of the block's merged ``ffn_{gate,up,down}_exps``."""
    import gguf
    from hscale.checkpoints.gguf_facts import (expert_tensor_name, llama_cpp_architecture,
                                               name_map)
    names_of = name_map(llama_cpp_architecture(model_type), blocks)
    if names_of is None:
        raise ImatrixError(f"model_type {model_type!r}: no llama.cpp architecture of that name "
                           f"in gguf {gguf.__version__}, so llama.cpp's tensor names cannot be "
                           "mapped to this model's")
    names = {}
    for plan in plans:
        slot = inventory.experts.get(plan.module) if inventory is not None else None
        if slot is not None:
            block = inventory.block_of(slot.experts + ".")
            names[plan.module] = (expert_tensor_name(slot.part, block), slot.expert)
            continue
        found = names_of.get_name(f"{plan.module}.weight", try_suffixes=(".weight",))
        names[plan.module] = (found, None)
    return names


def imatrix_statistics(imatrix: Imatrix, plans, model_type: str, blocks: int, inventory
                       ) -> LayerStatistics:
    """h of every planned weight from the importance matrix (HSCALE-CAL-3): its entry's sums
    (an expert's: its column), as float64; ``fallbacks`` names each weight quantized with h = 1
    instead (an expert the file saw no token of; a weight outside the blocks, which llama.cpp
    does not collect). Refused in one line: a weight inside the blocks with no entry, an entry
    whose width is not the weight's input size."""
    stats = LayerStatistics()
    path = imatrix.path
    names = llama_cpp_names(model_type, blocks, plans, inventory)
    for plan in plans:
        name, expert = names[plan.module]
        sums = imatrix.sums.get(name) if name is not None else None
        if sums is None:
            inside = inventory is not None and inventory.block_of(plan.module) is not None
            if inside:
                raise ImatrixError(
                    f"--imatrix {path}: no entry {name or '(no llama.cpp name)'} for "
                    f"{plan.module}: not an importance matrix of this model (it has "
                    f"{len(imatrix.sums)} entries, first {next(iter(imatrix.sums))})")
            stats.fallbacks[plan.module] = (
                f"llama.cpp's imatrix has no {name or 'entry'} (llama-imatrix collects the "
                "blocks' weights only, the output head with --process-output)")
            continue
        slot = inventory.experts.get(plan.module) if inventory is not None else None
        experts = 1 if slot is None else inventory.expert_counts[slot.experts]
        if sums.size != experts * plan.cols:  # HSCALE-CAL-3: not this model's file
            raise ImatrixError(f"--imatrix {path}: {name} has {sums.size} values, "
                               f"{plan.module} has {plan.cols} inputs"
                               + (f" in each of {experts} experts" if slot else "")
                               + ": not an importance matrix of this model")
        rows = sums.reshape(experts, plan.cols)
        e = 0 if expert is None else expert
        count = imatrix.counts.get(name)
        unseen = (count is not None and count[e] == 0) or (
            count is None and expert is not None and np.all(rows[e] == rows[e][0]))
        if unseen:  # HSCALE-CAL-3: no token: h = 1, as llama-quantize weighs it
            stats.fallbacks[plan.module] = (
                "the imatrix saw no token routed to this expert: h = 1 (the scale-only "
                "search), as llama-quantize weighs it")
            stats.tokens[plan.module] = 0
            continue
        stats.h[plan.module] = rows[e].astype(np.float64)  # HSCALE-CAL-3: exact widening
        if count is not None:
            stats.tokens[plan.module] = int(count[e])
    return stats


def describe(imatrix: Imatrix) -> dict:
    """What the report says of the file."""
    return {"from": str(imatrix.path), "imatrix_format": imatrix.format,
            "entries": len(imatrix.sums), "datasets": imatrix.datasets,
            "chunks": imatrix.chunks, "chunk_size": imatrix.chunk_size}
