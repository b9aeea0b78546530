"""NVFP4 checkpoints on disk: the one reader and writer of the project (``hscale quantize``,
``hscale check``, ``hscale convert``).

Two layouts engines load (docs/spec.md NVFP4-CKPT-1, -2; sources in docs/checkpoints.md):

* **compressed-tensors** ``nvfp4-pack-quantized`` (llm-compressor writes it, vLLM and SGLang
  load it): per quantized Linear ``X``, ``X.weight_packed`` uint8 (out, in/2),
  ``X.weight_scale`` float8_e4m3fn (out, in/16), ``X.weight_global_scale`` float32 (1,) holding
  the *reciprocal* ``r = fp32(1/s_g)`` (NVFP4-GS-4); ``quantization_config`` in config.json.
* **modelopt** (ModelOpt's NVFP4 export; TensorRT-LLM, vLLM and SGLang load it): ``X.weight``
  uint8 (out, in/2), ``X.weight_scale`` float8_e4m3fn (out, in/16), ``X.weight_scale_2``
  float32 () holding the *multiplier* s_g; ``hf_quant_config.json`` beside config.json.

Everything else a model directory holds (other tensors, tokenizer, configs, sentence-transformers
modules) is carried over unchanged.

Writing streams: the layout of every output shard (names, dtypes, shapes, offsets) is planned
from the source's safetensors headers before any data is read, so each tensor is read, converted
and written once, in order, and memory holds one tensor at a time, never a shard
(``ShardWriter``). The output goes to a hidden temporary directory beside the target and is
renamed when complete (``OutputDirectory``); a run that dies leaves only that hidden directory,
which looks nothing like a model.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from hscale.reference import QuantizedWeight
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier

FORMATS = ("compressed-tensors", "modelopt")
GROUP = 16
CT_FORMAT_NAME = "nvfp4-pack-quantized"
MODELOPT_CONFIG = "hf_quant_config.json"
# ModelOpt's names of NVFP4 weights: NVFP4 (its W4A4 recipe, activations quantized too) and
# W4A16_NVFP4 (weights only). The weight tensors are the same in both.
MODELOPT_NVFP4_ALGOS = ("NVFP4", "W4A16_NVFP4")
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


# --------------------------------------------------------------------------------------------
# safetensors: headers, streamed shards
# --------------------------------------------------------------------------------------------

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
        as its uint8 bit patterns."""
        info = self.info[name]
        begin, end = info.offsets
        with open(self.file_of[name], "rb") as f:
            f.seek(begin)
            raw = f.read(end - begin)
        if len(raw) != end - begin:
            raise CheckpointError(f"{self.file_of[name]}: truncated, tensor {name!r} ends past "
                                  "the end of the file")
        return np.frombuffer(raw, dtype=numpy_dtype(info.dtype)).reshape(info.shape).copy()


def numpy_dtype(code: str) -> np.dtype:
    """The numpy dtype of a safetensors dtype code's bytes (float8 as uint8 bit patterns)."""
    import ml_dtypes
    if code == "BF16":
        return np.dtype(ml_dtypes.bfloat16)
    if code.startswith("F8"):
        return np.dtype(np.uint8)
    return np.dtype(DTYPE_CODES[code])


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


# --------------------------------------------------------------------------------------------
# the output directory: hidden while being written, renamed when complete
# --------------------------------------------------------------------------------------------

class OutputDirectory:
    """A directory written under a hidden temporary name beside ``target``
    (``.NAME.partial-PID-TOKEN``) and renamed to ``target`` by ``commit()``; ``abort()`` (or an
    exception inside ``with``) removes it. An existing target is replaced only with ``force``,
    and only once the new one is complete. ``argument`` names the target in messages (the
    command's option or argument that gave it)."""

    def __init__(self, target, force: bool = False, argument: str = "--out"):
        self.target = Path(target)
        if self.target.exists() and not force:
            raise CheckpointError(f"{self.target} exists; choose another {argument} or pass --force "
                                  "to replace it")
        if self.target.exists() and not self.target.is_dir():
            raise CheckpointError(f"{self.target} exists and is not a directory")
        parent = self.target.parent
        if not parent.is_dir():
            raise CheckpointError(f"{parent}: no such directory (the parent of {argument})")
        _remove_stale_partials(parent, self.target.name)
        self.path = parent / f".{self.target.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self.path.mkdir()
        except OSError as exc:
            raise CheckpointError(f"{parent}: cannot create a directory there ({exc})") from None
        self.committed = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.committed:
            self.abort()
        return False

    def commit(self) -> Path:
        old = None
        if self.target.exists():
            old = self.target.parent / f".{self.target.name}.replaced-{secrets.token_hex(4)}"
            os.rename(self.target, old)
        os.rename(self.path, self.target)
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.target

    def abort(self):
        shutil.rmtree(self.path, ignore_errors=True)


def _remove_stale_partials(parent: Path, name: str):
    """Partial outputs of runs that died (their process is gone) are removed."""
    for stale in parent.glob(f".{name}.partial-*"):
        try:
            pid = int(stale.name.rsplit(".partial-", 1)[1].split("-")[0])
            os.kill(pid, 0)  # still running: leave it
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            pass


# --------------------------------------------------------------------------------------------
# the two NVFP4 layouts
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StoredLinear:
    """One quantized Linear as a checkpoint stores it: ``packed`` uint8 (out, in/2),
    ``scale_bytes`` uint8 (out, in/16) (the float8_e4m3fn bit patterns), ``stored_global_scale``
    the float32 in the file, ``global_scale`` the multiplier s_g it means (NVFP4-GS-4 for a
    reciprocal)."""

    module: str
    packed: np.ndarray
    scale_bytes: np.ndarray
    stored_global_scale: np.float32
    global_scale: np.float32


# role -> the suffix of its tensor's name, per layout (NVFP4-CKPT-1, -2).
ROLE_SUFFIXES = {
    "compressed-tensors": {"packed": ".weight_packed", "scale": ".weight_scale",
                           "global": ".weight_global_scale"},
    "modelopt": {"packed": ".weight", "scale": ".weight_scale", "global": ".weight_scale_2"},
}
# What each role's tensor must be: safetensors dtype, and the global scale's shape.
ROLE_DTYPES = {"packed": "U8", "scale": "F8_E4M3", "global": "F32"}
GLOBAL_SHAPES = {"compressed-tensors": (1,), "modelopt": ()}


def quantized_tensor_names(fmt: str, module: str) -> dict[str, str]:
    """role -> tensor name of one quantized Linear: roles ``packed``, ``scale``, ``global``."""
    if fmt not in ROLE_SUFFIXES:
        raise CheckpointError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    return {role: module + suffix for role, suffix in ROLE_SUFFIXES[fmt].items()}


def quantized_module_tensors(model: "SafetensorsModel", fmt: str) -> dict[str, dict[str, str]]:
    """module -> {role: tensor name} of every quantized Linear a checkpoint holds any tensor of,
    in file order; a role whose tensor is missing is absent from the inner dict. A module is
    recognised by its scale or global-scale tensor, or (compressed-tensors) its packed codes,
    or (modelopt) a ``.weight`` stored as uint8, which only packed codes are."""
    suffixes = ROLE_SUFFIXES[fmt]
    markers = [suffixes["scale"], suffixes["global"]]
    if fmt == "compressed-tensors":
        markers.append(suffixes["packed"])
    modules: dict[str, dict[str, str]] = {}
    for name, info in model.info.items():
        module = next((name[: -len(m)] for m in markers if name.endswith(m)), None)
        if module is None and fmt == "modelopt" and name.endswith(".weight") \
                and info.dtype == "U8":
            module = name[: -len(".weight")]
        if module is not None and module not in modules:
            modules[module] = {role: n for role, n in quantized_tensor_names(fmt, module).items()
                               if n in model.info}
    return modules


def open_checkpoint(directory) -> tuple["CheckpointFormat", "SafetensorsModel", dict]:
    """(its format, its tensors, module -> {role: tensor name}) of an NVFP4 checkpoint
    directory, or a CheckpointError naming what is missing: the directory, an NVFP4 config,
    or any quantized Linear."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such directory")
    fmt_info = detect_format(directory)
    model = SafetensorsModel(directory)
    modules = quantized_module_tensors(model, fmt_info.format)
    if not modules:
        raise CheckpointError(f"{directory}: its config says {fmt_info.format} NVFP4, but it "
                              "stores no quantized Linear (no "
                              f"{quantized_tensor_names(fmt_info.format, 'X')['scale']} tensors)")
    return fmt_info, model, modules


def quantized_tensor_infos(fmt: str, module: str, rows: int, cols: int) -> list[TensorInfo]:
    """The tensors one quantized (rows, cols) Linear takes, in the order they are written."""
    names = quantized_tensor_names(fmt, module)
    return [TensorInfo(names["packed"], ROLE_DTYPES["packed"], (rows, cols // 2)),
            TensorInfo(names["scale"], ROLE_DTYPES["scale"], (rows, cols // GROUP)),
            TensorInfo(names["global"], ROLE_DTYPES["global"], GLOBAL_SHAPES[fmt])]


def stored_global_scale(fmt: str, global_scale) -> np.float32:
    """What the file holds for the multiplier s_g: s_g itself (modelopt) or its reciprocal
    (compressed-tensors, NVFP4-GS-4)."""
    if fmt == "compressed-tensors":
        return reciprocal_from_multiplier(global_scale)
    return np.float32(global_scale)


def implied_global_scale(fmt: str, stored) -> np.float32:
    """The multiplier s_g a stored global scale means (NVFP4-GS-4 for a reciprocal)."""
    if fmt == "compressed-tensors":
        return multiplier_from_reciprocal(stored)
    return np.float32(stored)


def reciprocals_of(global_scale) -> list[np.float32]:
    """Every fp32 ``r`` that reads back as the multiplier ``global_scale``
    (``fp32(1 / r) == s_g``, NVFP4-GS-4), nearest to ``1 / s_g`` first: none for about 17% of
    fp32 values, two for as many others, else one. (They lie within an ulp or two of
    ``fp32(1 / s_g)``: the reciprocal map stretches or shrinks fp32 spacing by at most 2.)"""
    canonical = reciprocal_from_multiplier(global_scale)
    candidates = [canonical]
    for direction in (np.float32(0), np.float32(np.inf)):
        neighbour = canonical
        for _ in range(2):
            neighbour = np.nextafter(neighbour, direction)
            candidates.append(neighbour)
    exact = 1 / Fraction(float(np.float32(global_scale)))
    readable = [r for r in candidates if np.isfinite(r) and r > 0
                and multiplier_from_reciprocal(r) == np.float32(global_scale)]
    return sorted(readable, key=lambda r: abs(Fraction(float(r)) - exact))


def writable_global_scale(fmt: str, global_scale) -> np.float32:
    """The s_g to quantize with so that the file means exactly it: for compressed-tensors the
    multiplier implied by the stored reciprocal of ``global_scale`` (one ulp away for ~17% of
    values, NVFP4-GS-4), so that the stored bytes are the reference's for what a reader sees."""
    return implied_global_scale(fmt, stored_global_scale(fmt, global_scale))


def quantized_tensors(fmt: str, module: str, result: QuantizedWeight) -> dict[str, np.ndarray]:
    """name -> array to write, for one quantized Linear (in ``quantized_tensor_infos`` order)."""
    names = quantized_tensor_names(fmt, module)
    stored = stored_global_scale(fmt, result.global_scale)
    if implied_global_scale(fmt, stored) != np.float32(result.global_scale):
        raise CheckpointError(
            f"{module}: quantized with s_g = {float(result.global_scale)!r}, which a "
            f"{fmt} file cannot hold exactly (its reciprocal reads back as "
            f"{float(implied_global_scale(fmt, stored))!r}); quantize with "
            "writable_global_scale(s_g) (spec NVFP4-GS-4)")
    global_value = np.array([stored] if fmt == "compressed-tensors" else stored, np.float32)
    return {names["packed"]: np.asarray(result.packed, np.uint8),
            names["scale"]: np.asarray(result.scale_bytes, np.uint8),
            names["global"]: global_value}


def read_stored_linear(model: SafetensorsModel, fmt: str, module: str) -> StoredLinear:
    """One quantized Linear of a checkpoint, as stored, with the multiplier it implies."""
    names = quantized_tensor_names(fmt, module)
    for role, name in names.items():
        if name not in model.info:
            raise CheckpointError(f"{model.directory}: {module} lacks {name}")
    for role, dtype in ROLE_DTYPES.items():
        found = model.info[names[role]].dtype
        if found != dtype:
            raise CheckpointError(f"{model.directory}: {names[role]} is {found}, the {fmt} "
                                  f"layout stores {dtype}")
    packed = model.array(names["packed"])
    scale_bytes = model.array(names["scale"])
    stored = np.float32(model.array(names["global"]).reshape(-1)[0])
    return StoredLinear(module, packed, scale_bytes, stored, implied_global_scale(fmt, stored))


def to_numpy_bits(tensor) -> np.ndarray:
    """A torch tensor's data as numpy, bit for bit (bfloat16 as ml_dtypes.bfloat16, float8 as
    uint8 bit patterns)."""
    import ml_dtypes
    import torch
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if tensor.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return tensor.view(torch.uint8).numpy()
    return tensor.numpy()


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------

def compressed_tensors_config(ignore: Iterable[str], version: str) -> dict:
    """config.json's ``quantization_config`` for NVFP4A16 (weights NVFP4, activations kept), as
    llm-compressor writes it."""
    weights = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
               "symmetric": True, "dynamic": False, "actorder": None, "block_structure": None,
               "observer": "minmax", "observer_kwargs": {}}
    return {
        "quant_method": "compressed-tensors",
        "format": CT_FORMAT_NAME,
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                      "input_activations": None, "output_activations": None,
                                      "format": CT_FORMAT_NAME}},
        "ignore": sorted(ignore),
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
        "sparsity_config": {},
        "producer": {"name": "hscale-nvfp4", "version": version},
    }


def modelopt_config(exclude: Iterable[str], version: str) -> dict:
    """``hf_quant_config.json`` of a ModelOpt NVFP4 export of the weights only: ModelOpt's and
    vLLM's name for it is W4A16_NVFP4 (their ``NVFP4`` also quantizes activations, and a loader
    then looks for each Linear's ``input_scale``)."""
    return {"producer": {"name": "hscale-nvfp4", "version": version},
            "quantization": {"quant_algo": "W4A16_NVFP4", "group_size": GROUP,
                             "exclude_modules": sorted(exclude), "kv_cache_quant_algo": None}}


@dataclass
class CheckpointFormat:
    """What a directory's configs say: its format and the modules they exclude."""

    format: str
    ignore: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)


def detect_format(directory) -> CheckpointFormat:
    """The NVFP4 format of a checkpoint directory, from its configs, or a CheckpointError."""
    directory = Path(directory)
    config_path = directory / "config.json"
    config = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{config_path}: unreadable ({exc})") from None
    quant = config.get("quantization_config") or {}
    if quant.get("quant_method") == "compressed-tensors":
        fmt = quant.get("format")
        if fmt != CT_FORMAT_NAME:
            raise CheckpointError(f"{config_path}: compressed-tensors format {fmt!r}, not "
                                  f"{CT_FORMAT_NAME!r} (NVFP4)")
        return CheckpointFormat("compressed-tensors", list(quant.get("ignore") or []), quant)
    modelopt_path = directory / MODELOPT_CONFIG
    if modelopt_path.is_file():
        try:
            modelopt = json.loads(modelopt_path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{modelopt_path}: unreadable ({exc})") from None
        algo = (modelopt.get("quantization") or {}).get("quant_algo")
        if algo not in MODELOPT_NVFP4_ALGOS:
            raise CheckpointError(f"{modelopt_path}: quant_algo {algo!r}, not one of "
                                  f"{', '.join(MODELOPT_NVFP4_ALGOS)}")
        return CheckpointFormat("modelopt",
                                list(modelopt["quantization"].get("exclude_modules") or []),
                                modelopt)
    if quant.get("quant_method") == "modelopt":
        if quant.get("quant_algo") not in MODELOPT_NVFP4_ALGOS:
            raise CheckpointError(f"{config_path}: modelopt quant_algo "
                                  f"{quant.get('quant_algo')!r}, not one of "
                                  f"{', '.join(MODELOPT_NVFP4_ALGOS)}")
        return CheckpointFormat("modelopt", list(quant.get("exclude_modules") or []), quant)
    raise CheckpointError(f"{directory}: not an NVFP4 checkpoint (no compressed-tensors "
                          f"quantization_config in config.json, no {MODELOPT_CONFIG})")


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


def iter_quantized_modules(model: SafetensorsModel, fmt: str) -> Iterator[str]:
    """Module names of the quantized Linears a checkpoint holds, in file order."""
    suffix = ".weight_packed" if fmt == "compressed-tensors" else ".weight_scale_2"
    for name in model.names():
        if name.endswith(suffix):
            yield name[: -len(suffix)]
