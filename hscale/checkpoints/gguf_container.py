"""The GGUF container, read through the gguf package's own reader and validated before it is
trusted (docs/spec.md NVFP4-GGUF-2): what llama.cpp's loader (``ggml/src/gguf.cpp``
``gguf_init_from_file_impl``, in the llama.cpp that llama-cpp-python 0.3.36 vendors) refuses
is refused here too, one line naming the file and the place, never an exception from inside
the reader.

gguf's ``GGUFReader`` trusts the file: it reads past its end without a word (a short array),
loops over an array length it never compares with the file, accepts tensor data anywhere (two
tensors on the same bytes, or on the header), and decodes strings only when asked. Its checked
subclass here reads nothing past the end of the file and checks every tensor's info before the
reader maps its data: a name of valid UTF-8 shorter than 64 bytes, at most 4 dimensions, a
known type whose block divides each row, and the data at the offset llama.cpp expects (each
tensor where the one before it ends, padded to ``general.alignment``), inside the file. The
version (2 or 3, in the machine's byte order) and every metadata string (valid UTF-8) are
checked once the reader is built.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .inputs import CheckpointError, require_regular

CLAUSE = "NVFP4-GGUF-2"
#: The versions llama.cpp reads (gguf.cpp: 1 is refused, so is anything above 3).
VERSIONS = (2, 3)
#: llama.cpp's GGML_MAX_NAME: a tensor name is shorter.
MAX_NAME_BYTES = 64
#: llama.cpp's GGML_MAX_DIMS.
MAX_DIMS = 4


class ContainerError(ValueError):
    """What is wrong with the container, and where (the reader's file is added by the caller)."""


def read_gguf(gguf, path: Path):
    """gguf's reader of ``path``, the container validated (NVFP4-GGUF-2), and its metadata as
    Python values (strings, numbers, lists), or a CheckpointError naming the file and what is
    wrong where."""
    require_regular(path)
    try:
        reader = _checked_reader(gguf)(path)
    except ContainerError as exc:
        raise CheckpointError(f"{path}: not a readable GGUF file: {exc} (spec {CLAUSE})") \
            from None
    except Exception as exc:  # noqa: BLE001 - gguf's reader fails in many ways on bad bytes
        raise CheckpointError(f"{path}: not a readable GGUF file (gguf's reader: "
                              f"{type(exc).__name__}: {_first_line(exc)}; spec {CLAUSE})") \
            from None
    if reader.byte_order != "I":
        raise CheckpointError(f"{path}: a GGUF file of the other byte order, which llama.cpp "
                              f"does not read on this machine (spec {CLAUSE})")
    version = int(reader.fields["GGUF.version"].parts[0][0])
    if version not in VERSIONS:
        raise CheckpointError(f"{path}: GGUF version {version}; llama.cpp reads "
                              f"{' and '.join(map(str, VERSIONS))} (spec {CLAUSE})")
    fields = {}
    for key, field in reader.fields.items():
        try:
            fields[key] = field.contents()
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"{path}: metadata {key!r} holds a string that is not UTF-8 "
                                  f"(byte 0x{exc.object[exc.start]:02X} at {exc.start} of it; "
                                  f"spec {CLAUSE})") from None
        except Exception as exc:  # noqa: BLE001 - a value type gguf does not decode
            raise CheckpointError(f"{path}: metadata {key!r} cannot be decoded "
                                  f"({type(exc).__name__}: {_first_line(exc)}; spec {CLAUSE})") \
                from None
    return reader, fields


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


@lru_cache(maxsize=None)
def _checked_reader(gguf):
    """``GGUFReader`` that reads nothing past the end of the file and checks every tensor's
    info before it maps the tensor's data."""
    import numpy as np

    class CheckedReader(gguf.GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            itemsize = int(np.empty([], dtype=dtype).itemsize)
            end = int(offset) + itemsize * int(count)
            if end > len(self.data):
                raise ContainerError(f"truncated: reading {int(count)} x {itemsize} bytes at "
                                     f"byte {int(offset):,} goes past the end of the file "
                                     f"({len(self.data):,} bytes)")
            return super()._get(offset, dtype, count, override_order)

        def _build_tensors(self, start_offs, fields):
            expected = 0
            for field in fields:
                expected = _check_tensor_info(gguf, field, int(start_offs), expected,
                                              int(self.alignment), len(self.data))
            return super()._build_tensors(start_offs, fields)

    return CheckedReader


def _check_tensor_info(gguf, field, data_start: int, expected: int, alignment: int,
                       file_size: int) -> int:
    """One tensor's info as llama.cpp's loader checks it; returns where the next tensor's data
    must start (relative to the data section)."""
    _name_len, name_data, n_dims, dims, raw_type, offset = field.parts
    try:
        name = bytes(name_data).decode("utf-8")
    except UnicodeDecodeError:
        raise ContainerError(f"tensor name {bytes(name_data)!r} is not UTF-8") from None
    if len(name_data) >= MAX_NAME_BYTES:
        raise ContainerError(f"tensor {name!r}: a name of {len(name_data)} bytes; llama.cpp's "
                             f"are shorter than {MAX_NAME_BYTES}")
    if int(n_dims[0]) > MAX_DIMS:
        raise ContainerError(f"tensor {name!r}: {int(n_dims[0])} dimensions; llama.cpp reads at "
                             f"most {MAX_DIMS}")
    try:
        kind = gguf.GGMLQuantizationType(int(raw_type[0]))
        block, type_size = gguf.GGML_QUANT_SIZES[kind]
    except (ValueError, KeyError):
        raise ContainerError(f"tensor {name!r}: ggml type {int(raw_type[0])}, which is not one "
                             "gguf knows") from None
    shape = [int(d) for d in dims]
    if shape and shape[0] % block:
        raise ContainerError(f"tensor {name!r} of type {kind.name}: rows of {shape[0]} "
                             f"elements, not a multiple of its block of {block}")
    elements = 1
    for d in shape:
        elements *= d
    nbytes = elements // block * type_size
    if int(offset[0]) != expected:
        raise ContainerError(f"tensor {name!r}: its data at offset {int(offset[0]):,} of the "
                             f"data section, where llama.cpp expects {expected:,} (each tensor "
                             f"where the one before it ends, padded to {alignment} bytes): "
                             "tensors sharing, skipping or leaving bytes")
    end = data_start + expected + nbytes
    if end > file_size:
        raise ContainerError(f"truncated: tensor {name!r} ends at byte {end:,}, past the end of "
                             f"the file ({file_size:,} bytes)")
    return expected + -(-nbytes // alignment) * alignment
