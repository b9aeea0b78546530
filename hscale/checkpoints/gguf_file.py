"""A GGUF model file read once: its header parsed from one memory map (every key-value pair with
its type, every tensor's name, ggml type, shape and offset), its tensors taken from the same map
one at a time and dequantized by the ``gguf`` package's own NumPy dequantizers
(``gguf.quants.dequantize``: Q4_1, Q8_0, K-quants, ... to float32).

Why not gguf's ``GGUFReader``: it builds a NumPy view for every element of every array, so a
vocabulary of 262,144 strings (Gemma 3) takes it tens of seconds on a loaded 2-core machine;
here a string array is walked once (each string's length) and its strings decoded when asked,
so the header of any model is read in a fraction of a second and a file is refused from its
header before any tensor is touched. Everything read is bounded by the file (a short or lying
file is a one-line ``GGUFFileError`` naming the byte, never an exception from inside).

The layout (ggml/docs/gguf.md, what ``gguf_init_from_file_impl`` reads): magic ``GGUF``,
uint32 version (2 or 3), uint64 tensor count, uint64 key-value count; each key-value pair a
string key, a uint32 value type and the value (an array: uint32 element type, uint64 count,
the elements); each tensor a string name, uint32 n_dims, n_dims uint64 dimensions (ggml's ne,
fastest first), uint32 ggml type, uint64 offset into the data section, which starts at the next
multiple of ``general.alignment`` (32 by default).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .gguf_container import MAX_DIMS, MAX_NAME_BYTES, VERSIONS
from .gguf_facts import MAGIC

#: GGUF's value types: number -> (name, struct format or None for string / array).
VALUE_TYPES = {0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"),
               4: ("UINT32", "<I"), 5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<?"),
               8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "<Q"),
               11: ("INT64", "<q"), 12: ("FLOAT64", "<d")}
STRING, ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


class GGUFFileError(ValueError):
    """A GGUF file whose header cannot be read as one: one line naming the file and the place."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the file: its name, ggml type, shape (row-major, as NumPy holds it: ggml's
    ne reversed), where its bytes lie in the file and how many."""

    name: str
    ggml_type: int
    shape: tuple
    start: int
    nbytes: int


@dataclass
class Field:
    """One key-value pair: its value type (and element type for an array) and the value as
    Python holds it; a string array keeps its strings' places and decodes them when asked."""

    key: str
    type: int
    sub_type: int | None
    _value: object = None
    _strings: list | None = None  # (start, length) of each string of a string array
    _file: "GGUFFile | None" = field(default=None, repr=False)

    @property
    def value(self):
        if self._strings is not None and self._value is None:
            data = self._file.buffer
            self._value = [bytes(data[a:a + n]).decode("utf-8", "surrogateescape")
                           for a, n in self._strings]
        return self._value

    def __len__(self) -> int:
        return len(self._strings) if self._strings is not None else (
            len(self._value) if isinstance(self._value, list) else 1)


class GGUFFile:
    """The header of a GGUF file and its tensors' bytes, from one memory map (see the module
    docstring). ``fields``: key -> Field, in the file's order; ``tensors``: TensorEntry, in the
    file's order."""

    #: How many times a GGUF file was opened this way in this process (tests bound it).
    opened = 0

    def __init__(self, path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
            raise GGUFFileError(f"{self.path}: cannot be read ({exc})") from None
        type(self).opened += 1
        self.buffer = memoryview(self._map)
        self.size = len(self._map)
        self.fields: dict[str, Field] = {}
        self.tensors: list[TensorEntry] = []
        self._read_header()

    # -- the header ----------------------------------------------------------------------------
    def _fail(self, what: str):
        raise GGUFFileError(f"{self.path}: not a readable GGUF file: {what}")

    def _unpack(self, fmt: str, at: int):
        size = struct.calcsize(fmt)
        if at + size > self.size:
            self._fail(f"truncated: {size} bytes at byte {at:,} go past the end of the file "
                       f"({self.size:,} bytes)")
        return struct.unpack_from(fmt, self._map, at), at + size

    def _string(self, at: int, errors: str = "strict") -> tuple[str, int]:
        """A string at ``at``: a key or a tensor name must be UTF-8; a value's bytes that are
        not are kept as surrogate escapes (``errors``), so that they are carried unchanged."""
        (length,), at = self._unpack("<Q", at)
        if at + length > self.size:
            self._fail(f"truncated: a string of {length:,} bytes at byte {at:,}")
        try:
            return bytes(self.buffer[at:at + length]).decode("utf-8", errors), at + length
        except UnicodeDecodeError:
            self._fail(f"a string at byte {at:,} is not UTF-8")

    def _read_header(self) -> None:
        if self.size < 4 or bytes(self.buffer[:4]) != MAGIC:
            raise GGUFFileError(f"{self.path}: not a GGUF file (it does not begin with the bytes "
                                "GGUF)")
        (version, tensor_count, kv_count), at = self._unpack("<IQQ", 4)
        if version not in VERSIONS:
            self._fail(f"version {version}; llama.cpp reads {' and '.join(map(str, VERSIONS))}")
        self.version = version
        for _ in range(kv_count):
            key, at = self._string(at)
            (kind,), at = self._unpack("<I", at)
            item, at = self._value(key, kind, at)
            self.fields[key] = item
        infos = []
        for _ in range(tensor_count):
            name, at = self._string(at)
            if len(name.encode("utf-8")) >= MAX_NAME_BYTES:
                self._fail(f"tensor {name!r}: a name of {len(name.encode())} bytes; llama.cpp's "
                           f"are shorter than {MAX_NAME_BYTES}")
            (dims,), at = self._unpack("<I", at)
            if dims > MAX_DIMS:
                self._fail(f"tensor {name!r}: {dims} dimensions; llama.cpp reads at most "
                           f"{MAX_DIMS}")
            ne, at = self._unpack(f"<{dims}Q", at)
            (ggml_type, offset), at = self._unpack("<IQ", at)
            infos.append((name, ne, ggml_type, offset))
        alignment = self.value("general.alignment", DEFAULT_ALIGNMENT)
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
            self._fail(f"general.alignment {alignment!r}: not a positive integer")
        data_start = -(-at // alignment) * alignment
        for name, ne, ggml_type, offset in infos:
            self.tensors.append(self._tensor(name, ne, ggml_type, data_start + offset))

    def _value(self, key: str, kind: int, at: int) -> tuple[Field, int]:
        if kind not in VALUE_TYPES:
            self._fail(f"metadata {key!r} has value type {kind}, which GGUF does not define")
        if kind == STRING:
            text, at = self._string(at, "surrogateescape")
            return Field(key, kind, None, text), at
        if kind != ARRAY:
            (value,), at = self._unpack(VALUE_TYPES[kind][1], at)
            return Field(key, kind, None, value), at
        (sub, count), at = self._unpack("<IQ", at)
        if sub not in VALUE_TYPES or sub == ARRAY:
            self._fail(f"metadata {key!r}: an array of value type {sub}, which is not read")
        if sub == STRING:
            places = []
            for _ in range(count):
                (length,), at = self._unpack("<Q", at)
                places.append((at, length))
                at += length
            if at > self.size:
                self._fail(f"truncated: metadata {key!r} runs past the end of the file")
            return Field(key, kind, sub, _strings=places, _file=self), at
        fmt = VALUE_TYPES[sub][1]
        width = struct.calcsize(fmt)
        if at + width * count > self.size:
            self._fail(f"truncated: metadata {key!r} ({count:,} values) runs past the end of the "
                       "file")
        values = np.frombuffer(self.buffer, np.dtype(fmt), count, at).tolist()
        return Field(key, kind, sub, values), at + width * count

    def _tensor(self, name: str, ne, ggml_type: int, start: int) -> TensorEntry:
        import gguf
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            self._fail(f"tensor {name!r}: ggml type {ggml_type}, which is not one gguf knows")
        if ne and ne[0] % block:
            self._fail(f"tensor {name!r}: rows of {ne[0]} elements, not a multiple of its "
                       f"type's block of {block}")
        nbytes = int(np.prod(ne, dtype=np.int64)) // block * type_size if ne else type_size
        if start + nbytes > self.size:
            self._fail(f"truncated: tensor {name!r} ends at byte {start + nbytes:,}, past the "
                       f"end of the file ({self.size:,} bytes)")
        return TensorEntry(name, ggml_type, tuple(int(d) for d in reversed(ne)), start, nbytes)

    # -- what callers read -------------------------------------------------------------------
    def value(self, key: str, default=None):
        """The value of metadata ``key`` (``default`` where it is absent)."""
        item = self.fields.get(key)
        return default if item is None else item.value

    def values(self) -> dict:
        """Every key's value, strings of string arrays decoded."""
        return {key: item.value for key, item in self.fields.items()}

    def type_name(self, ggml_type: int) -> str:
        import gguf
        return gguf.GGMLQuantizationType(ggml_type).name

    def stored(self, entry: TensorEntry) -> np.ndarray:
        """A tensor's bytes as stored (uint8, flat), a view of the map."""
        return np.frombuffer(self.buffer, np.uint8, entry.nbytes, entry.start)

    def raw(self, entry: TensorEntry) -> np.ndarray:
        """A tensor as gguf's reader gives its ``data``: F32, F16 and the other plain types as
        their NumPy dtype in the tensor's shape, quantized types as (rows, bytes per row) uint8."""
        import gguf
        kind = gguf.GGMLQuantizationType(entry.ggml_type)
        plain = {gguf.GGMLQuantizationType.F32: np.float32,
                 gguf.GGMLQuantizationType.F16: np.float16,
                 gguf.GGMLQuantizationType.F64: np.float64,
                 gguf.GGMLQuantizationType.I8: np.int8, gguf.GGMLQuantizationType.I16: np.int16,
                 gguf.GGMLQuantizationType.I32: np.int32,
                 gguf.GGMLQuantizationType.I64: np.int64}.get(kind)
        data = self.stored(entry)
        if plain is not None:
            return data.view(plain).reshape(entry.shape)
        block, type_size = gguf.GGML_QUANT_SIZES[kind]
        rows = entry.shape[:-1] or (1,)
        return data.reshape(*rows, entry.shape[-1] // block * type_size)

    def dequantized(self, entry: TensorEntry) -> np.ndarray:
        """A tensor's values, float32, by the gguf package's own dequantizer (the values
        transformers' GGUF loading computes)."""
        import gguf
        values = gguf.dequantize(self.raw(entry), gguf.GGMLQuantizationType(entry.ggml_type))
        return np.asarray(values, np.float32).reshape(entry.shape)

    def close(self) -> None:
        self.buffer.release()
        self._map.close()
