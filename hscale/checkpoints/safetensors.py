"""safetensors, the container of every checkpoint the project reads and writes.

Headers are read at once, each validated before it is trusted (``safetensors_header``), a
sharded set against its index; data is read tensor by tensor, with plain reads (not a memory
map, whose pages would stay in the process's resident set as a whole model streams by), of
regular files only (NVFP4-CKPT-5). Writing streams:
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
from pathlib import Path

import numpy as np

from .inputs import CheckpointError, field, open_regular, read_json, require_regular
from .safetensors_header import ITEM_BYTES, TensorInfo, read_header

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


class SafetensorsModel:
    """The tensors of a model directory (one ``*.safetensors`` file, or the shards its index
    lists), or of one ``.safetensors`` file, read lazily: headers at once, data tensor by tensor
    with plain reads (not a memory map, whose pages would stay in the process's resident set as
    a whole model streams by). Every header is validated (``read_header``) and a sharded set
    against its index (``_check_index``) before anything is read: NVFP4-CKPT-5."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.index: Path | None = None
        self.weight_map: dict[str, str] = {}
        if self.directory.is_dir():
            self.files = self._weight_files()
        elif self.directory.exists():
            self.files = [require_regular(self.directory)]
        else:
            raise CheckpointError(f"{self.directory}: no such directory")
        self.metadata: dict = {}  # the first file's __metadata__
        self.info: dict[str, TensorInfo] = {}
        self.file_of: dict[str, Path] = {}
        for path in self.files:
            tensors, metadata, _ = read_header(path)
            if path == self.files[0]:
                self.metadata = dict(metadata)
            for name, info in tensors.items():
                if name in self.info:
                    raise CheckpointError(f"{path}: tensor {name!r} also in {self.file_of[name]} "
                                          "(spec NVFP4-CKPT-5)")
                self.info[name] = info
                self.file_of[name] = path
        if self.index is not None:
            self._check_index()

    def _weight_files(self) -> list[Path]:
        indexes = sorted(self.directory.glob("*" + INDEX_SUFFIX))
        if len(indexes) > 1:
            raise CheckpointError(f"{self.directory}: two shard indexes, {indexes[0].name} and "
                                  f"{indexes[1].name}: which shards make the model is ambiguous "
                                  "(spec NVFP4-CKPT-5)")
        if indexes:
            return self._indexed_files(indexes[0])
        files = sorted(self.directory.glob("*.safetensors"))
        if not files:
            others = sorted(p.name for p in self.directory.iterdir() if WEIGHT_FILE.match(p.name))
            hint = (f" (it has {', '.join(others[:3])}: convert to safetensors first)"
                    if others else "")
            raise CheckpointError(f"{self.directory}: no safetensors weights{hint}")
        return files

    def _indexed_files(self, index: Path) -> list[Path]:
        """The shards ``index`` lists, in order, after checking its ``weight_map`` (an object of
        tensor name -> file name in this directory), that each is a regular file, and that no
        other safetensors file lies beside them (a loader reads only the listed shards, so the
        tensors of an unlisted one would be silently missing). Mistral's
        ``consolidated.safetensors`` (its own format, which loaders of the sharded one skip) is
        the exception."""
        document = read_json(index)
        weight_map = field(document, "weight_map", dict, index, clause="NVFP4-CKPT-5")
        if weight_map is None:
            raise CheckpointError(f"{index}: has no weight_map (spec NVFP4-CKPT-5)")
        for name, file_name in weight_map.items():
            if not isinstance(file_name, str) or file_name in ("", ".", "..") \
                    or "/" in file_name or "\\" in file_name:
                raise CheckpointError(f"{index}: weight_map[{name!r}] is {json.dumps(file_name)}, "
                                      "where the name of a shard in this directory belongs (spec "
                                      "NVFP4-CKPT-5)")
        self.index, self.weight_map = index, dict(weight_map)
        files = [self.directory / name for name in dict.fromkeys(weight_map.values())]
        for path in files:
            if not path.exists():
                raise CheckpointError(f"{index}: lists {path.name}, which is missing")
            require_regular(path)
        listed = {path.name for path in files}
        for path in sorted(self.directory.glob("*.safetensors")):
            if path.name not in listed and not path.name.startswith("consolidated"):
                require_regular(path)  # a FIFO or a device is said to be one
                raise CheckpointError(f"{path}: a safetensors file that {index.name} does not "
                                      "list: a loader never reads it, so its tensors are "
                                      "missing from the model (spec NVFP4-CKPT-5)")
        return files

    def _check_index(self) -> None:
        """Every tensor the index maps is in the shard it names, and every tensor of every shard
        is mapped to that shard (NVFP4-CKPT-5)."""
        for name, file_name in self.weight_map.items():
            if name not in self.info:
                raise CheckpointError(f"{self.index}: maps {name!r} to {file_name}, which does "
                                      "not hold it (spec NVFP4-CKPT-5)")
            if self.file_of[name].name != file_name:
                raise CheckpointError(f"{self.index}: maps {name!r} to {file_name}, but "
                                      f"{self.file_of[name].name} holds it (spec NVFP4-CKPT-5)")
        unlisted = [name for name in self.info if name not in self.weight_map]
        if unlisted:
            raise CheckpointError(f"{self.file_of[unlisted[0]]}: holds {unlisted[0]!r}, which "
                                  f"{self.index.name} does not map"
                                  + (f" (nor {len(unlisted) - 1} others)" if len(unlisted) > 1
                                     else "") + " (spec NVFP4-CKPT-5)")

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
        with open_regular(self.file_of[name], buffering=0) as f:
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


def copy_side_files(source: Path, destination: Path) -> list[str]:
    """Every file and folder of a model directory except its weights (tokenizer, configs,
    sentence-transformers modules, README), unchanged; returns the names it did not copy and
    why, for the caller to report (hidden entries such as a download cache, and weights in
    other formats, which the output's own safetensors replace)."""
    left = []
    for entry in sorted(Path(source).iterdir()):
        if entry.name.startswith("."):
            left.append(f"{entry.name} (hidden)")
            continue
        if WEIGHT_FILE.match(entry.name):
            if not entry.name.endswith((".safetensors", INDEX_SUFFIX)):
                left.append(f"{entry.name} (weights in another format)")
            continue
        if entry.is_dir():
            shutil.copytree(entry, destination / entry.name)
        else:
            shutil.copy2(entry, destination / entry.name)
    return left
