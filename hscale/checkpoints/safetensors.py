"""safetensors, the container of every checkpoint the project reads and writes.

Headers are read at once and data tensor by tensor, with plain reads (not a memory map, whose
pages would stay in the process's resident set as a whole model streams by). Writing streams:
the layout of every output shard (names, dtypes, shapes, offsets) is planned from the tensors'
descriptions before any data is read, so each tensor is read, converted and written once, in
order, and memory holds one tensor at a time, never a shard (``ShardWriter``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

INDEX_SUFFIX = ".safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 2 << 30
# Files of a model directory that hold weights: replaced by the output's own shards.
WEIGHT_FILE = re.compile(r".*\.(safetensors|bin|pt|pth|h5|msgpack|ckpt)$|.*\.safetensors\.index\.json$"
                         r"|.*\.bin\.index\.json$")

# safetensors dtype codes (the format's own names) <-> numpy dtypes of the raw bytes.
DTYPE_CODES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32",
               "U16": "uint16", "U8": "uint8", "BOOL": "bool"}

ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8,
              "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written as asked: says which file and why."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as a safetensors header describes it (``offsets``: its data's begin and end
    in the file; None for a tensor still to be written)."""

    name: str
    dtype: str  # safetensors code: F32, BF16, U8, F8_E4M3, ...
    shape: tuple[int, ...]
    offsets: tuple[int, int] | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEM_BYTES[self.dtype]


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict, int]:
    """(tensors, metadata, offset of the data) of one safetensors file, from its header."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (size,) = struct.unpack("<Q", raw)
            if size > 100 << 20:
                raise CheckpointError(f"{path}: not a safetensors file (header of {size} bytes)")
            header = json.loads(f.read(size))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read its safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in header.items():
        if entry.get("dtype") not in ITEM_BYTES:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {entry.get('dtype')!r}, "
                                  "which this tool does not read")
        begin, end = (8 + size + int(o) for o in entry["data_offsets"])
        info = TensorInfo(name, entry["dtype"], tuple(int(d) for d in entry["shape"]),
                          (begin, end))
        if end - begin != info.nbytes:
            raise CheckpointError(f"{path}: tensor {name!r} takes {end - begin} bytes, its "
                                  f"dtype and shape say {info.nbytes}")
        tensors[name] = info
    # A truncated file (an interrupted download or copy) is refused here, before any tensor is
    # read, rather than when the first tensor past its end is.
    data_end = max((info.offsets[1] for info in tensors.values()), default=8 + size)
    file_size = path.stat().st_size
    if file_size < data_end:
        raise CheckpointError(f"{path}: truncated: {file_size} bytes, its header says the data "
                              f"ends at byte {data_end}")
    return tensors, metadata, 8 + size


class SafetensorsModel:
    """The tensors of a model directory (one ``*.safetensors`` file or a sharded set with its
    index), or of one ``.safetensors`` file, read lazily: headers at once, data tensor by tensor
    with plain reads (not a memory map, whose pages would stay in the process's resident set as
    a whole model streams by)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        if self.directory.is_file():
            self.files = [self.directory]
        elif not self.directory.is_dir():
            raise CheckpointError(f"{self.directory}: no such directory")
        else:
            self.files = self._weight_files()
        self.metadata: dict = {}  # the first file's __metadata__
        self.info: dict[str, TensorInfo] = {}
        self.file_of: dict[str, Path] = {}
        for path in self.files:
            tensors, metadata, _ = read_header(path)
            if path == self.files[0]:
                self.metadata = dict(metadata)
            for name, info in tensors.items():
                if name in self.info:
                    raise CheckpointError(f"{path}: tensor {name!r} also in {self.file_of[name]}")
                self.info[name] = info
                self.file_of[name] = path

    def _weight_files(self) -> list[Path]:
        indexes = sorted(self.directory.glob("*" + INDEX_SUFFIX))
        if indexes:
            try:
                weight_map = json.loads(indexes[0].read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{indexes[0]}: unreadable index ({exc})") from None
            files = [self.directory / name for name in dict.fromkeys(weight_map.values())]
            missing = [f for f in files if not f.is_file()]
            if missing:
                raise CheckpointError(f"{indexes[0]}: lists {missing[0].name}, which is missing")
            return files
        files = sorted(self.directory.glob("*.safetensors"))
        if not files:
            others = sorted(p.name for p in self.directory.iterdir() if WEIGHT_FILE.match(p.name))
            hint = (f" (it has {', '.join(others[:3])}: convert to safetensors first)"
                    if others else "")
            raise CheckpointError(f"{self.directory}: no safetensors weights{hint}")
        return files

    def names(self) -> list[str]:
        return list(self.info)

    def array(self, name: str) -> np.ndarray:
        """The tensor ``name`` as numpy, bit for bit: bfloat16 as ``ml_dtypes.bfloat16``, float8
        as its uint8 bit patterns. Read straight into the array (one copy in memory)."""
        info = self.info[name]
        out = np.empty(info.shape, dtype=numpy_dtype(info.dtype))
        self._read_into(name, info.offsets[0], out.reshape(-1).view(np.uint8))
        return out

    def tensor(self, name: str, dtype=None, start: int | None = None, stop: int | None = None):
        """The tensor ``name`` (or rows ``[start, stop)`` of it) as a torch tensor in its stored
        dtype (float8 as float8), converted to ``dtype`` when given."""
        import torch
        info = self.info[name]
        first, last = (0, info.shape[0]) if start is None else (start, min(stop, info.shape[0]))
        shape = (last - first,) + info.shape[1:] if info.shape else ()
        row_bytes = info.nbytes // info.shape[0] if info.shape and info.shape[0] else 0
        raw = torch.empty(math.prod(shape) * ITEM_BYTES[info.dtype], dtype=torch.uint8)
        self._read_into(name, info.offsets[0] + first * row_bytes, raw.numpy())
        tensor = raw.view(torch_dtype(info.dtype)).reshape(shape)
        return tensor if dtype is None or tensor.dtype == dtype else tensor.to(dtype)

    def _read_into(self, name: str, begin: int, buffer: np.ndarray) -> None:
        view = memoryview(buffer).cast("B")
        with open(self.file_of[name], "rb", buffering=0) as f:
            f.seek(begin)
            done = 0
            while done < len(view):
                count = f.readinto(view[done:])
                if not count:
                    raise CheckpointError(f"{self.file_of[name]}: truncated, tensor {name!r} "
                                          "ends past the end of the file")
                done += count


def numpy_dtype(code: str) -> np.dtype:
    """The numpy dtype of a safetensors dtype code's bytes (float8 as uint8 bit patterns)."""
    import ml_dtypes
    if code == "BF16":
        return np.dtype(ml_dtypes.bfloat16)
    if code.startswith("F8"):
        return np.dtype(np.uint8)
    return np.dtype(DTYPE_CODES[code])


def torch_dtype(code: str):
    """The torch dtype of a safetensors dtype code."""
    import torch
    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
            "BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
            "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
            "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8,
            "BOOL": torch.bool}[code]


def _shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def plan_shards(tensors: list[TensorInfo], max_shard_bytes: int) -> list[list[TensorInfo]]:
    """Consecutive tensors grouped into shards of at most ``max_shard_bytes`` of data (a single
    larger tensor gets a shard of its own)."""
    shards: list[list[TensorInfo]] = [[]]
    size = 0
    for info in tensors:
        if shards[-1] and size + info.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(info)
        size += info.nbytes
    return [s for s in shards if s]


class ShardWriter:
    """Writes the planned tensors, in plan order, into safetensors shards under ``directory``.
    Each shard's header (names, dtypes, shapes, offsets) is written first, from the plan; then
    the data of each tensor as it comes (``write``), so nothing but that tensor is in memory."""

    def __init__(self, directory: Path, tensors: list[TensorInfo], max_shard_bytes: int,
                 metadata: dict | None = None):
        self.directory = Path(directory)
        self.shards = plan_shards(tensors, max_shard_bytes)
        self.file_names = _shard_names(len(self.shards))
        self.metadata = {"format": "pt", **(metadata or {})}
        self.order = [(i, info) for i, shard in enumerate(self.shards) for info in shard]
        self.position = 0
        self.handle = None
        self.current = -1

    def _open_shard(self, index: int):
        if self.handle is not None:
            self.handle.close()
        header: dict = {"__metadata__": self.metadata}
        offset = 0
        for info in self.shards[index]:
            header[info.name] = {"dtype": info.dtype, "shape": list(info.shape),
                                 "data_offsets": [offset, offset + info.nbytes]}
            offset += info.nbytes
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned
        self.handle = open(self.directory / self.file_names[index], "wb")
        self.handle.write(struct.pack("<Q", len(encoded)))
        self.handle.write(encoded)
        self.current = index

    def write(self, name: str, data: np.ndarray):
        """The next tensor of the plan: ``data`` a numpy array of exactly its dtype's item size
        and shape (float8 and bfloat16 as their uint8 / uint16 bit patterns)."""
        index, info = self.order[self.position]
        if name != info.name:
            raise RuntimeError(f"shard writer: expected tensor {info.name!r}, got {name!r}")
        data = np.asarray(data)  # (not ascontiguousarray: it makes a 0-d scalar 1-d)
        if not data.flags.c_contiguous:
            data = data.copy(order="C")
        if tuple(data.shape) != info.shape or data.dtype.itemsize != ITEM_BYTES[info.dtype]:
            raise RuntimeError(f"shard writer: {name!r} is {data.dtype}{data.shape}, planned "
                               f"{info.dtype}{info.shape}")
        if index != self.current:
            self._open_shard(index)
        self.handle.write(data.reshape(-1).view(np.uint8).data)
        self.position += 1

    def write_chunks(self, name: str, chunks) -> None:
        """The next tensor of the plan from ``chunks``, arrays whose bytes, one after the other,
        are the tensor's (C order): a tensor larger than memory written piece by piece."""
        index, info = self.order[self.position]
        if name != info.name:
            raise RuntimeError(f"shard writer: expected tensor {info.name!r}, got {name!r}")
        if index != self.current:
            self._open_shard(index)
        written = 0
        for chunk in chunks:
            data = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
            self.handle.write(data.data)
            written += data.size
        if written != info.nbytes:
            raise RuntimeError(f"shard writer: {name!r} got {written} bytes, planned "
                               f"{info.nbytes}")
        self.position += 1

    def flush(self) -> int:
        """Everything written so far on disk (flushed and synced); returns how many tensors of
        the plan that is, the position ``resume`` takes."""
        if self.handle is not None:
            self.handle.flush()
            os.fsync(self.handle.fileno())
        return self.position

    def resume(self, position: int) -> None:
        """Continue an interrupted write whose first ``position`` tensors are on disk (what
        ``flush`` returned): the shard holding the next tensor is reopened and cut just before
        it; the shards before it are complete."""
        if not 0 <= position <= len(self.order):
            raise RuntimeError(f"shard writer: cannot resume at tensor {position} of "
                               f"{len(self.order)}")
        self.position = position
        if position == len(self.order) or position == 0:
            return
        index, info = self.order[position]
        within = next(k for k, i in enumerate(self.shards[index]) if i.name == info.name)
        if within == 0:  # the next tensor opens its shard: written afresh, header first
            return
        path = self.directory / self.file_names[index]
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
        offset = 8 + size + sum(i.nbytes for i in self.shards[index][:within])
        if path.stat().st_size < offset:
            raise RuntimeError(f"shard writer: {path} is shorter than the {position} tensors "
                               "the resumed run says it wrote")
        self.handle = open(path, "r+b")
        self.handle.truncate(offset)
        self.handle.seek(offset)
        self.current = index

    def close(self) -> dict[str, str]:
        """Finish; returns the weight map (tensor -> file) and writes the index if sharded."""
        if self.position != len(self.order):
            missing = self.order[self.position][1].name
            raise RuntimeError(f"shard writer: closed before tensor {missing!r} was written")
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        weight_map = {info.name: self.file_names[i] for i, info in self.order}
        if len(self.shards) > 1:
            total = sum(info.nbytes for _, info in self.order)
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (self.directory / ("model" + INDEX_SUFFIX)).write_text(json.dumps(index, indent=2))
        return weight_map


def copy_side_files(source: Path, destination: Path):
    """Every file and folder of a model directory except its weights (tokenizer, configs,
    sentence-transformers modules, README), unchanged."""
    for entry in Path(source).iterdir():
        if entry.name.startswith(".") or WEIGHT_FILE.match(entry.name):
            continue
        if entry.is_dir():
            shutil.copytree(entry, destination / entry.name)
        else:
            shutil.copy2(entry, destination / entry.name)
