"""The header of a safetensors file, validated before anything in it is trusted (docs/spec.md
NVFP4-CKPT-5): the checks safetensors' own loader makes when it opens a file
(``safetensors/src/tensor.rs``, ``Metadata::validate``), and the ones it leaves out (a name
given twice, a lone surrogate), each refusal one line naming the file, the tensor and the rule.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from .inputs import CheckpointError, json_type, open_regular

#: safetensors' own limit on a header (its MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000

ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8,
              "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}


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
    """(tensors, metadata, offset of the data) of one safetensors file, from its header, which
    is validated before anything in it is trusted (NVFP4-CKPT-5, the checks safetensors' own
    loader makes at open): a regular file; a header of at most MAX_HEADER_BYTES of UTF-8 JSON,
    an object; every tensor named once, in valid UTF-8, its entry an object with a known
    ``dtype``, a ``shape`` of non-negative integers and ``data_offsets`` [begin, end] whose
    length is the shape's size times the dtype's; the tensors, sorted by offset, covering the
    data region exactly (no overlap, no gap, nothing after the last, nothing missing: a
    truncated file); ``__metadata__`` an object of strings. Any other header is a
    CheckpointError naming the file, the tensor and the rule."""
    path = Path(path)
    with open_regular(path) as f:
        try:
            raw = f.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (size,) = struct.unpack("<Q", raw)
            if size > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path}: not a safetensors file (a header of {size:,} "
                                      f"bytes, above safetensors' {MAX_HEADER_BYTES:,})")
            text = f.read(size)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read its safetensors header "
                                  f"({exc.strerror or exc})") from None
    if len(text) != size:
        raise CheckpointError(f"{path}: truncated: the header says {size:,} bytes of JSON, the "
                              f"file holds {len(text):,} after the first 8")
    header = _header_json(path, text)
    metadata = _metadata(path, header.pop("__metadata__", None))
    tensors = {name: _tensor_info(path, name, entry, 8 + size) for name, entry in header.items()}
    _check_coverage(path, tensors, 8 + size, path.stat().st_size)
    return tensors, metadata, 8 + size


def _header_json(path: Path, text: bytes) -> dict:
    """The header's JSON object: UTF-8, starting with ``{`` (trailing spaces pad it), every
    key once."""
    def no_duplicates(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise CheckpointError(f"{path}: the header names {key!r} twice: a reader "
                                      "keeps one of the two at random (spec NVFP4-CKPT-5)")
            seen[key] = value
        return seen
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: its header is not UTF-8 (byte 0x{text[exc.start]:02X} "
                              f"at offset {8 + exc.start}; spec NVFP4-CKPT-5)") from None
    if not decoded.startswith("{"):
        raise CheckpointError(f"{path}: not a safetensors file (its header does not start with "
                              "'{')")
    try:
        header = json.loads(decoded, object_pairs_hook=no_duplicates)
    except ValueError as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path}: its header is not valid JSON ({exc})") from None
    return header


def _metadata(path: Path, metadata) -> dict:
    """``__metadata__``: absent, null, or an object of strings (safetensors' own rule)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{path}: __metadata__ is {json_type(metadata)}, where an object "
                              "of strings belongs (spec NVFP4-CKPT-5)")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise CheckpointError(f"{path}: __metadata__[{key!r}] is {json_type(value)}, where "
                                  "a string belongs (spec NVFP4-CKPT-5)")
        for text in (key, value):
            _utf8(path, text, "__metadata__ holds")
    return dict(metadata)


def _utf8(path: Path, text: str, what: str) -> None:
    """JSON's escapes let a header hold lone surrogates, which are not UTF-8 text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CheckpointError(f"{path}: {what} {text!r}, which is not valid UTF-8 (a lone "
                              "surrogate; spec NVFP4-CKPT-5)") from None


def _natural(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor_info(path: Path, name: str, entry, data_start: int) -> TensorInfo:
    """One header entry, its fields checked (NVFP4-CKPT-5)."""
    _utf8(path, name, "a tensor is named")
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: its entry is {json_type(entry)}, where an object with "
                              "dtype, shape and data_offsets belongs (spec NVFP4-CKPT-5)")
    missing = [key for key in ("dtype", "shape", "data_offsets") if key not in entry]
    if missing:
        raise CheckpointError(f"{where}: its entry has no {' and no '.join(missing)} (spec "
                              "NVFP4-CKPT-5)")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEM_BYTES:
        raise CheckpointError(f"{where}: dtype {dtype!r}, which is not one this tool reads "
                              f"({', '.join(ITEM_BYTES)})")
    if not isinstance(shape, list) or not all(_natural(d) for d in shape):
        raise CheckpointError(f"{where}: shape {json.dumps(shape)[:60]}, where an array of "
                              "non-negative integers belongs (spec NVFP4-CKPT-5)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_natural(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise CheckpointError(f"{where}: data_offsets {json.dumps(offsets)[:60]}, where "
                              "[begin, end], two integers 0 <= begin <= end, belong (spec "
                              "NVFP4-CKPT-5)")
    info = TensorInfo(name, dtype, tuple(shape), (data_start + offsets[0],
                                                  data_start + offsets[1]))
    if offsets[1] - offsets[0] != info.nbytes:
        raise CheckpointError(f"{where}: takes {offsets[1] - offsets[0]:,} bytes, its dtype "
                              f"{dtype} and shape {list(shape)} say {info.nbytes:,} (spec "
                              "NVFP4-CKPT-5)")
    return info


def _check_coverage(path: Path, tensors: dict, data_start: int, file_size: int) -> None:
    """The tensors' data, sorted by offset, cover the data region exactly: no two share a byte,
    no byte between two belongs to none, the last ends where the file ends (NVFP4-CKPT-5). Two
    tensors sharing bytes are named before any gap (sharing is what leaves the gap)."""
    cursor, previous, gap = data_start, None, None
    for info in sorted(tensors.values(), key=lambda i: (i.offsets, i.name)):
        begin, end = info.offsets
        if begin < cursor:
            raise CheckpointError(
                f"{path}: tensor {info.name!r} (data_offsets [{begin - data_start}, "
                f"{end - data_start}]) overlaps {previous.name!r} (which ends at "
                f"{cursor - data_start}): two tensors share bytes (spec NVFP4-CKPT-5)")
        if begin > cursor and gap is None:
            gap = (f"{path}: bytes {cursor - data_start}..{begin - data_start} of the data "
                   f"belong to no tensor (a gap before {info.name!r}; spec NVFP4-CKPT-5)")
        cursor, previous = end, info
    if gap is not None:
        raise CheckpointError(gap)
    if file_size < cursor:
        # A truncated file (an interrupted download or copy) is refused here, before any
        # tensor is read, rather than when the first tensor past its end is.
        raise CheckpointError(f"{path}: truncated: {file_size} bytes, its header says the data "
                              f"ends at byte {cursor}")
    if file_size > cursor:
        extra = file_size - cursor
        raise CheckpointError(
            f"{path}: no tensor covers the last {extra:,} byte{'s' * (extra != 1)} of the file "
            f"(from byte {cursor:,} of {file_size:,}): the header's length or its offsets are "
            "wrong (spec NVFP4-CKPT-5)")
