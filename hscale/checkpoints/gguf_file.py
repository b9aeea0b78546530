"""The kit's one reader of GGUF files (llama.cpp's format): the header parsed from one memory
map (every key-value pair with its type, every tensor's name, ggml type, shape and offset) and
validated as llama.cpp's loader validates it (docs/spec.md NVFP4-GGUF-2), its tensors taken
from the same map one at a time and dequantized by the ``gguf`` package's own NumPy
dequantizers (``gguf.quants.dequantize``: Q4_1, Q8_0, K-quants, ... to float32). Every GGUF
file the kit reads comes through here: NVFP4 checkpoints (``hscale check`` and ``convert``,
``gguf.GGUFCheckpoint``), model files (``gguf_source``, ``from_gguf``, ``to_gguf``), importance
matrices (``hscale.calibration.imatrix``).

What is refused (``gguf_init_from_file_impl`` in ``ggml/src/gguf.cpp``, the llama.cpp that
llama-cpp-python 0.3.36 vendors, refuses it too, and the spec adds UTF-8): a file that is not a
regular file (NVFP4-CKPT-5); no magic ``GGUF``; a version other than 2 or 3, or one written in
the other byte order; a key given twice; a key, a string value or a tensor name that is not
UTF-8; a value type GGUF does not define (an array of arrays among them); ``general.alignment``
not a UINT32 power of two; a tensor name given twice or of 64 bytes or more; more than 4
dimensions, or more elements than an int64 holds; a ggml type gguf does not know, or whose block
does not divide the tensor's rows; a tensor's data anywhere but where the one before it ends,
padded to the alignment (tensors sharing, skipping or leaving bytes, or lying on the header);
anything that runs past the end of the file. Each is one line, a ``GGUFFileError`` (a
CheckpointError) naming the file, the key or tensor and the byte, and citing the clause; never
an exception from inside. Bytes after the last tensor are allowed (llama.cpp reads what the
infos say).

Why not gguf's ``GGUFReader``: it builds a NumPy view for every element of every array, so a
vocabulary of 262,144 strings (Gemma 3) takes it tens of seconds on a loaded 2-core machine;
here a string array is walked once (each string's length) and its strings decoded (strictly,
as UTF-8) when asked, so the header of any model is read in a fraction of a second and a file
is refused from its header before any tensor is touched. It also trusts the file: it reads
past the end of a short array without a word and accepts tensor data anywhere.

The layout (ggml/docs/gguf.md): magic ``GGUF``, uint32 version, uint64 tensor count, uint64
key-value count; each key-value pair a string key, a uint32 value type and the value (an
array: uint32 element type, uint64 count, the elements); each tensor a string name, uint32
n_dims, n_dims uint64 dimensions (ggml's ne, fastest first), uint32 ggml type, uint64 offset
into the data section, which starts at the next multiple of ``general.alignment`` (32 by
default). A string is a uint64 length and that many bytes. Everything is little-endian (the
byte order of every machine the kit runs on).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .gguf_facts import (CONTAINER_CLAUSE, MAGIC, MAX_DIMS, MAX_NAME_BYTES,
                         VERSIONS)
from .inputs import CheckpointError, open_regular

#: GGUF's value types: number -> (name, struct format or None for string / array).
VALUE_TYPES = {0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"),
               4: ("UINT32", "<I"), 5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<?"),
               8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "<Q"),
               11: ("INT64", "<q"), 12: ("FLOAT64", "<d")}
STRING, ARRAY, UINT32 = 8, 9, 4
DEFAULT_ALIGNMENT = 32
#: The fewest bytes a key-value pair (an empty key, a type, a one-byte value) and a tensor info
#: (an empty name, no dimension, a type, an offset) take: a count that cannot fit is refused
#: before it is walked.
SMALLEST_KV, SMALLEST_TENSOR_INFO = 8 + 4 + 1, 8 + 4 + 4 + 8


class GGUFFileError(CheckpointError):
    """A GGUF file that cannot be read as one: one line naming the file, the place and the rule
    (NVFP4-GGUF-2)."""


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
    Python holds it; a string array keeps its strings' places and decodes them when asked
    (strictly: a string that is not UTF-8 is a GGUFFileError naming the key and the element)."""

    key: str
    type: int
    sub_type: int | None
    _value: object = None
    _strings: list | None = None  # (start, length) of each string of a string array
    _file: "GGUFFile | None" = field(default=None, repr=False)

    @property
    def value(self):
        if self._strings is not None and self._value is None:
            self._value = [self._file.text(a, n, f"metadata {self.key!r}[{i}]")
                           for i, (a, n) in enumerate(self._strings)]
        return self._value

    @property
    def types(self) -> list[int]:
        """The value type, and for an array its element type (as gguf's ``ReaderField.types``
        lists them, and as llama.cpp's typed getters compare them)."""
        return [self.type] if self.sub_type is None else [self.type, self.sub_type]

    def __len__(self) -> int:
        return len(self._strings) if self._strings is not None else (
            len(self._value) if isinstance(self._value, list) else 1)


class GGUFFile:
    """The header of a GGUF file, validated (NVFP4-GGUF-2), and its tensors' bytes, from one
    memory map (see the module docstring). ``fields``: key -> Field, in the file's order;
    ``tensors``: TensorEntry, in the file's order; ``version``, ``alignment``, ``data_start``
    (the byte where the data section starts)."""

    #: How many times a GGUF file was opened this way in this process (tests bound it).
    opened = 0

    def __init__(self, path):
        self.path = Path(path)
        try:
            with open_regular(self.path) as f:
                size = os.fstat(f.fileno()).st_size
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except CheckpointError as exc:  # not a regular file, or cannot be opened
            raise GGUFFileError(str(exc)) from None
        except (OSError, ValueError) as exc:
            raise GGUFFileError(f"{self.path}: cannot be read ({exc})") from None
        type(self).opened += 1
        self.buffer = memoryview(self._map if self._map is not None else b"")
        self.size = len(self.buffer)
        self.fields: dict[str, Field] = {}
        self.tensors: list[TensorEntry] = []
        self._read_header()

    # -- reading, bounded by the file ----------------------------------------------------------
    def _fail(self, what: str):
        raise GGUFFileError(f"{self.path}: not a readable GGUF file: {what} (spec "
                            f"{CONTAINER_CLAUSE})")

    def _unpack(self, fmt: str, at: int, what: str):
        size = struct.calcsize(fmt)
        if at + size > self.size:
            self._fail(f"truncated: {what} ({size} bytes at byte {at:,}) goes past the end of "
                       f"the file ({self.size:,} bytes)")
        return struct.unpack_from(fmt, self.buffer, at), at + size

    def text(self, at: int, length: int, what: str) -> str:
        """The ``length`` bytes at ``at`` as UTF-8 text (``what``: whose, for the message)."""
        raw = bytes(self.buffer[at:at + length])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._fail(f"{what} holds a string that is not UTF-8 (byte 0x{raw[exc.start]:02X} "
                       f"at {exc.start} of it, byte {at + exc.start:,} of the file)")

    def _string(self, at: int, what: str) -> tuple[str, int]:
        (length,), at = self._unpack("<Q", at, f"the length of {what}")
        if at + length > self.size:
            self._fail(f"truncated: {what}, a string of {length:,} bytes at byte {at:,}, goes "
                       f"past the end of the file ({self.size:,} bytes)")
        return self.text(at, length, what), at + length

    # -- the header ----------------------------------------------------------------------------
    def _read_header(self) -> None:
        if self.size < 4 or bytes(self.buffer[:4]) != MAGIC:
            raise GGUFFileError(f"{self.path}: not a GGUF file (it does not begin with the bytes "
                                f"GGUF) (spec {CONTAINER_CLAUSE})")
        (version,), at = self._unpack("<I", 4, "the version")
        if version and not version & 0xFFFF:  # llama.cpp's test (gguf.cpp), gguf's too
            self._fail(f"version field 0x{version:08X}: a GGUF file of the other byte order "
                       f"(version {int.from_bytes(version.to_bytes(4, 'little'), 'big')}), "
                       "which llama.cpp does not read on this machine")
        if version not in VERSIONS:
            self._fail(f"version {version}; llama.cpp reads {' and '.join(map(str, VERSIONS))}")
        self.version = version
        (tensor_count, kv_count), at = self._unpack("<QQ", at, "the tensor and key counts")
        if kv_count * SMALLEST_KV + tensor_count * SMALLEST_TENSOR_INFO > self.size - at:
            self._fail(f"truncated: {kv_count:,} key-value pairs and {tensor_count:,} tensor "
                       f"infos cannot fit in the {self.size - at:,} bytes after the counts")
        key = None
        for index in range(kv_count):
            start = at
            key, at = self._string(at, f"the key of key-value pair {index}"
                                   + (f" (the one after {key!r})" if key is not None else ""))
            if key in self.fields:
                self._fail(f"metadata key {key!r} given twice (the second at byte {start:,}): "
                           "llama.cpp refuses a key given twice")
            (kind,), at = self._unpack("<I", at, f"the value type of metadata {key!r}")
            self.fields[key], at = self._value(key, kind, at)
        infos, names = [], {}
        for index in range(tensor_count):
            info, at = self._tensor_info(index, at, names)
            infos.append(info)
        self.alignment = self._alignment()
        self.data_start = -(-at // self.alignment) * self.alignment
        expected = 0  # where the next tensor's data must start, in the data section
        for name, ne, ggml_type, offset in infos:
            entry, expected = self._tensor(name, ne, ggml_type, offset, expected)
            self.tensors.append(entry)

    def _value(self, key: str, kind: int, at: int) -> tuple[Field, int]:
        what = f"metadata {key!r}"
        if kind not in VALUE_TYPES:
            self._fail(f"{what} has value type {kind}, which GGUF does not define")
        if kind == STRING:
            text, at = self._string(at, what)
            return Field(key, kind, None, text), at
        if kind != ARRAY:
            (value,), at = self._unpack(VALUE_TYPES[kind][1], at, f"the value of {what}")
            return Field(key, kind, None, value), at
        (sub, count), at = self._unpack("<IQ", at, f"the element type and count of {what}")
        if sub not in VALUE_TYPES or sub == ARRAY:
            self._fail(f"{what}: an array of value type {sub}, which llama.cpp does not read "
                       f"({'an array of arrays' if sub == ARRAY else 'not a GGUF type'})")
        width = 8 if sub == STRING else struct.calcsize(VALUE_TYPES[sub][1])
        if count * width > self.size - at:
            self._fail(f"truncated: {what}, an array of {count:,} {VALUE_TYPES[sub][0]} values "
                       f"at byte {at:,}, cannot fit in the {self.size - at:,} bytes left of the "
                       "file")
        if sub == STRING:
            places = []
            for index in range(count):
                (length,), at = self._unpack("<Q", at, f"the length of {what}[{index}]")
                if at + length > self.size:
                    self._fail(f"truncated: {what}[{index}], a string of {length:,} bytes at "
                               f"byte {at:,}, goes past the end of the file ({self.size:,} "
                               "bytes)")
                places.append((at, length))
                at += length
            return Field(key, kind, sub, _strings=places, _file=self), at
        values = np.frombuffer(self.buffer, np.dtype(VALUE_TYPES[sub][1]), count, at).tolist()
        return Field(key, kind, sub, values), at + width * count

    def _tensor_info(self, index: int, at: int, names: dict) -> tuple[tuple, int]:
        """Tensor ``index``'s info at ``at``: (name, ne, ggml type, offset), and where the next
        begins; its name and dimension count checked as llama.cpp checks them."""
        name, at = self._string(at, f"tensor {index}'s name")
        size = len(name.encode("utf-8"))
        if size >= MAX_NAME_BYTES:
            self._fail(f"tensor {name!r}: a name of {size} bytes; llama.cpp's are shorter than "
                       f"{MAX_NAME_BYTES}")
        if name in names:
            self._fail(f"tensor {name!r} given twice (tensors {names[name]} and {index}): "
                       "llama.cpp refuses a name given twice")
        names[name] = index
        (dims,), at = self._unpack("<I", at, f"the dimension count of tensor {name!r}")
        if dims > MAX_DIMS:
            self._fail(f"tensor {name!r}: {dims} dimensions; llama.cpp reads at most {MAX_DIMS}")
        ne, at = self._unpack(f"<{dims}Q", at, f"the dimensions of tensor {name!r}")
        (ggml_type, offset), at = self._unpack("<IQ", at, f"the type and offset of tensor "
                                                          f"{name!r}")
        return (name, ne, ggml_type, offset), at

    def _alignment(self) -> int:
        """``general.alignment``: a UINT32 power of two (32 where it is absent)."""
        item = self.fields.get("general.alignment")
        if item is None:
            return DEFAULT_ALIGNMENT
        if item.types != [UINT32]:
            self._fail("metadata 'general.alignment' is stored as "
                       f"{' of '.join(VALUE_TYPES[t][0] for t in item.types)}; llama.cpp reads "
                       "it as UINT32")
        value = item.value
        if value == 0 or value & (value - 1):
            self._fail(f"general.alignment {value}: not a power of two, as llama.cpp requires")
        return value

    def _tensor(self, name: str, ne, ggml_type: int, offset: int, expected: int
                ) -> tuple[TensorEntry, int]:
        """A tensor's entry, its type, size and place checked as llama.cpp checks them, and
        where the next tensor's data must start (relative to the data section)."""
        import gguf
        try:
            kind = gguf.GGMLQuantizationType(ggml_type)
            block, type_size = gguf.GGML_QUANT_SIZES[kind]
        except (ValueError, KeyError):
            self._fail(f"tensor {name!r}: ggml type {ggml_type}, which is not one gguf knows")
        row = ne[0] if ne else 1  # llama.cpp: a dimension not stored is 1
        if row % block:
            self._fail(f"tensor {name!r} of type {kind.name}: rows of {row} elements, not a "
                       f"multiple of its block of {block}")
        elements = 1
        for d in ne:
            elements *= d
        if elements >= 1 << 63:
            self._fail(f"tensor {name!r}: dimensions {list(ne)}, more elements than llama.cpp's "
                       "int64 counts hold")
        nbytes = elements // block * type_size
        if offset != expected:
            self._fail(f"tensor {name!r}: its data at offset {offset:,} of the data section, "
                       f"where llama.cpp expects {expected:,} (each tensor where the one before "
                       f"it ends, padded to {self.alignment} bytes): tensors sharing, skipping "
                       "or leaving bytes")
        start = self.data_start + offset
        if start + nbytes > self.size:
            self._fail(f"truncated: tensor {name!r} ends at byte {start + nbytes:,}, past the "
                       f"end of the file ({self.size:,} bytes)")
        entry = TensorEntry(name, ggml_type, tuple(int(d) for d in reversed(ne)), start, nbytes)
        return entry, expected + -(-nbytes // self.alignment) * self.alignment

    # -- what callers read -------------------------------------------------------------------
    def value(self, key: str, default=None):
        """The value of metadata ``key`` (``default`` where it is absent)."""
        item = self.fields.get(key)
        return default if item is None else item.value

    def values(self) -> dict:
        """Every key's value, strings of string arrays decoded (and so checked: UTF-8)."""
        return {key: item.value for key, item in self.fields.items()}

    def type_name(self, ggml_type: int) -> str:
        import gguf
        return gguf.GGMLQuantizationType(ggml_type).name

    def stored(self, entry: TensorEntry) -> np.ndarray:
        """A tensor's bytes as stored (uint8, flat), a view of the map."""
        return np.frombuffer(self.buffer, np.uint8, entry.nbytes, entry.start)

    def raw(self, entry: TensorEntry) -> np.ndarray:
        """A tensor as gguf's reader gives its ``data``: F32, F16 and the other plain types as
        their NumPy dtype in the tensor's shape, quantized types (BF16 among them) as (rows,
        bytes per row) uint8; a read-only view of the map."""
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
        if self._map is not None:
            self._map.close()
