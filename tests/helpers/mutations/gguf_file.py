"""Editing a GGUF file by the container's own definition (gguf-py's constants, llama.cpp's
gguf.cpp), not through the kit's reader."""

from __future__ import annotations

import struct
from pathlib import Path


def patch_uint32(path: Path, key: str, value: int) -> None:
    """Metadata ``key`` (a UINT32, GGUF type 4) set to ``value``."""
    _at, kind, value_at, _length = gguf_layout(path)["kv"][key]
    assert kind == 4, (key, kind)
    patch(path, value_at, struct.pack("<I", value))


def gguf_layout(path: Path) -> dict:
    """Where things are in a GGUF file, parsed here from the bytes by the format's definition
    (GGUF v3: magic, version u32, tensor count u64, kv count u64, key/value pairs, tensor
    infos), not by the reader under test: {"version": offset, "counts": offset,
    "kv": {key: (key offset, value type, value offset, value length)}, "tensors": [(name,
    info offset, dims offset, n_dims, type offset, offset offset)]}."""
    data = path.read_bytes()
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    position = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)

    def string(at):
        (length,) = struct.unpack_from("<Q", data, at)
        return data[at + 8: at + 8 + length], at + 8 + length

    def skip_value(kind, at):
        if kind == 8:
            return string(at)[1]
        if kind == 9:
            item, count = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(count):
                at = skip_value(item, at)
            return at
        return at + sizes[kind]
    kv = {}
    for _ in range(n_kv):
        key, at = string(position)
        (kind,) = struct.unpack_from("<I", data, at)
        end = skip_value(kind, at + 4)
        kv[key.decode("utf-8", "replace")] = (position, kind, at + 4, end - at - 4)
        position = end
    tensors = []
    for _ in range(n_tensors):
        name, at = string(position)
        (n_dims,) = struct.unpack_from("<I", data, at)
        dims_at = at + 4
        type_at = dims_at + 8 * n_dims
        tensors.append((name.decode("utf-8", "replace"), position, dims_at, n_dims, type_at,
                        type_at + 4))
        position = type_at + 12
    return {"version": 4, "counts": 8, "kv": kv, "tensors": tensors, "info_end": position}


def patch(path: Path, offset: int, new: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(new)


def gguf_tensor_data(path: Path) -> dict:
    """name -> (type, dims, absolute data offset) from the container's own fields."""
    layout = gguf_layout(path)
    data = path.read_bytes()
    alignment = 32
    if "general.alignment" in layout["kv"]:
        alignment = struct.unpack_from("<I", data, layout["kv"]["general.alignment"][2])[0]
    start = -(-layout["info_end"] // alignment) * alignment
    out = {}
    for name, _info, dims_at, n_dims, type_at, offset_at in layout["tensors"]:
        dims = struct.unpack_from(f"<{n_dims}Q", data, dims_at)
        (kind,) = struct.unpack_from("<I", data, type_at)
        (offset,) = struct.unpack_from("<Q", data, offset_at)
        out[name] = (kind, dims, start + offset)
    return out
