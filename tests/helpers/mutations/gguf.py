"""Mutations of a GGUF file: the container (version, magic, counts, strings, offsets, types),
its hyper-parameters and recorded names, its scale bytes and global scales."""

from __future__ import annotations

import os
import struct

from helpers.mutations.gguf_file import gguf_layout, gguf_tensor_data, patch, patch_uint32
from helpers.mutations.registry import mutation


@mutation("gguf-not-a-regular-file", needs=("gguf",))
def _(d, rng):
    d.unlink()
    what = rng.choice(["fifo", "directory"])
    if what == "fifo":
        os.mkfifo(d)
    else:
        d.mkdir()
    return f"{d.name}: replaced by a {what}"


@mutation("benign-gguf-trailing-bytes", needs=("gguf",), breaks=False)
def _(d, rng):
    with open(d, "ab") as f:
        f.write(b"\0" * rng.choice([1, 32, 4096]))
    return "bytes after the last tensor (llama.cpp reads what its infos say)"


@mutation("benign-gguf-version-2", needs=("gguf",), breaks=False)
def _(d, rng):
    patch(d, 4, struct.pack("<I", 2))
    return "GGUF version 2 (llama.cpp reads it)"


# -- GGUF -----------------------------------------------------------------------------------

@mutation("gguf-version", needs=("gguf",))
def _(d, rng):
    value = rng.choice([0, 1, 4, 99, 0x00030000])
    patch(d, 4, struct.pack("<I", value))
    return f"version {value}"


@mutation("gguf-magic", needs=("gguf",))
def _(d, rng):
    patch(d, rng.randrange(4), bytes([rng.randrange(256)]))
    data = d.read_bytes()
    if data[:4] == b"GGUF":
        patch(d, 0, b"GGUG")
    return "magic broken"


@mutation("gguf-counts", needs=("gguf",))
def _(d, rng):
    which = rng.choice([8, 16])
    (count,) = struct.unpack_from("<Q", d.read_bytes(), which)
    value = rng.choice([count + 1, count + 1000, 2 ** 40, 2 ** 63])
    patch(d, which, struct.pack("<Q", value))
    return f"{'tensor' if which == 8 else 'kv'} count {value}"


@mutation("gguf-string-length", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    key = rng.choice([k for k, v in layout["kv"].items() if v[1] == 8])
    at = layout["kv"][key][2]
    patch(d, at, struct.pack("<Q", rng.choice([2 ** 40, 2 ** 63, d.stat().st_size])))
    return f"{key}'s length inflated"


@mutation("gguf-array-length", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    key = rng.choice([k for k, v in layout["kv"].items() if v[1] == 9])
    at = layout["kv"][key][2] + 4
    patch(d, at, struct.pack("<Q", rng.choice([2 ** 40, 2 ** 62])))
    return f"{key}'s array length inflated"


@mutation("gguf-string-not-utf8", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    key = rng.choice(["general.architecture", "general.name"])
    at = layout["kv"][key][2] + 8
    patch(d, at, bytes([rng.choice([0xFF, 0xC3, 0x80])]))
    return f"{key} not UTF-8"


@mutation("gguf-architecture-changed", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    at, length = layout["kv"]["general.architecture"][2], layout["kv"]["general.architecture"][3]
    current = d.read_bytes()[at + 8: at + length].decode()
    other = {"qwen3": "qwen2", "llama": "bert2"}[current]
    patch(d, at + 8, other[:len(current)].ljust(len(current), "x").encode())
    return f"general.architecture {current} -> {other}"


@mutation("gguf-head-count", needs=("gguf", "llama"))
def _(d, rng):
    key = rng.choice(["llama.attention.head_count", "llama.attention.head_count_kv"])
    value = rng.choice([0, 3, 5, 1000, 2 ** 31])
    patch_uint32(d, key, value)
    return f"{key} = {value}"


@mutation("gguf-block-count", needs=("gguf",))
def _(d, rng):
    key = next(k for k in gguf_layout(d)["kv"] if k.endswith(".block_count"))
    value = rng.choice([1, 4, 6])
    patch_uint32(d, key, value)
    return f"{key} = {value}"


@mutation("gguf-embedding-length", needs=("gguf",))
def _(d, rng):
    key = next(k for k in gguf_layout(d)["kv"] if k.endswith(".embedding_length"))
    patch_uint32(d, key, rng.choice([64, 256]))
    return f"{key} changed"


@mutation("gguf-tensor-offset", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    tensors = layout["tensors"]
    index = rng.randrange(1, len(tensors))
    data = d.read_bytes()
    (offset,) = struct.unpack_from("<Q", data, tensors[index][5])
    previous = struct.unpack_from("<Q", data, tensors[index - 1][5])[0]
    value = rng.choice([previous, 0, offset + 1, offset + 32, offset - 32, 2 ** 40])
    patch(d, tensors[index][5], struct.pack("<Q", value))
    return f"{tensors[index][0]} data offset {offset} -> {value}"


@mutation("gguf-tensor-type", needs=("gguf",))
def _(d, rng):
    """Another type than the tensor's, never one float type for another on a float tensor
    (the same bytes read as other floats: no reader can tell a norm's values are wrong)."""
    layout = gguf_layout(d)
    name, _info, _dims, _n, type_at, _off = rng.choice(layout["tensors"])
    (current,) = struct.unpack_from("<I", d.read_bytes(), type_at)
    if current == 40:
        choices = [0, 1, 2, 8, 200]
    elif name.endswith(".scale"):
        choices = [1, 2, 200]
    else:
        choices = [2, 8, 40, 200]
    patch(d, type_at, struct.pack("<I", rng.choice(choices)))
    return f"{name}'s type {current} changed"


@mutation("gguf-tensor-dims", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    name, _info, dims_at, n_dims, _type, _off = rng.choice(layout["tensors"])
    which = rng.randrange(n_dims)
    (dim,) = struct.unpack_from("<Q", d.read_bytes(), dims_at + 8 * which)
    value = rng.choice([dim * 2, dim + 64, 0, 2 ** 40]) or (0 if dim else 64)
    patch(d, dims_at + 8 * which, struct.pack("<Q", value))
    return f"{name}'s dimension {which}: {dim} -> {value}"


@mutation("gguf-tensor-renamed", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    name, info_at = rng.choice([(t[0], t[1]) for t in layout["tensors"]])
    i = rng.randrange(len(name))
    new = rng.choice([ord("x") if name[i] != "x" else ord("y"), 0xFF])
    patch(d, info_at + 8 + i, bytes([new]))
    return f"a byte of {name}'s name changed"


@mutation("gguf-recorded-name", needs=("gguf",))
def _(d, rng):
    """A Hugging Face name the writer recorded changed: given twice, or one naming no module.
    (The entries of the ``.scale`` tensors are left alone: a reader names a ``.scale`` after
    its weight, so its own entry is never read.)"""
    layout = gguf_layout(d)
    data = d.read_bytes()
    lists = {}
    for key in ("hscale.source.tensors", "hscale.source.modules"):
        value_at = layout["kv"][key][2]
        (count,) = struct.unpack_from("<Q", data, value_at + 4)
        at, strings = value_at + 12, []
        for _ in range(count):
            (size,) = struct.unpack_from("<Q", data, at)
            strings.append((at + 8, data[at + 8: at + 8 + size]))
            at += 8 + size
        lists[key] = strings
    used = [i for i, (_, name) in enumerate(lists["hscale.source.tensors"])
            if not name.endswith(b".scale")]
    key = rng.choice(sorted(lists))
    strings = [lists[key][i] for i in used]
    (first_at, first), (_, second) = rng.sample(strings, 2)
    same_length = [s for _, s in strings if len(s) == len(first) and s != first]
    if same_length and rng.random() < 0.5:
        patch(d, first_at, rng.choice(same_length))  # one name given twice
        return f"{key}: {first!r} recorded as another entry's name"
    patch(d, first_at, b"#" * len(first))  # a name matching nothing
    return f"{key}: {first!r} recorded as {'#' * len(first)}"


@mutation("gguf-scale-bytes-bad", needs=("gguf",))
def _(d, rng):
    tensors = {n: t for n, t in gguf_tensor_data(d).items() if t[0] == 40}
    name = rng.choice(list(tensors))
    _kind, dims, at = tensors[name]
    block = rng.randrange(dims[0] // 64 * dims[1])
    byte = at + 36 * block + rng.randrange(4)
    current = d.read_bytes()[byte]
    value = rng.choice([current | 0x80, 0x7F, 0xFF])
    patch(d, byte, bytes([value if value != current else 0x7F]))
    return f"{name}: scale byte 0x{value:02X}"


@mutation("gguf-global-scale-bad", needs=("gguf",))
def _(d, rng):
    tensors = gguf_tensor_data(d)
    name = rng.choice([n for n in tensors if n.endswith(".scale")])
    value = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e-40])
    patch(d, tensors[name][2], struct.pack("<f", value))
    return f"{name} = {value!r}"


@mutation("gguf-key-duplicated", needs=("gguf",))
def _(d, rng):
    layout = gguf_layout(d)
    keys = list(layout["kv"])
    same = [(a, b) for a in keys for b in keys if a != b and len(a) == len(b)]
    first, second = rng.choice(same)
    patch(d, layout["kv"][first][0] + 8, second.encode())
    return f"key {first} renamed {second} (twice)"


# -- every metadata key a reader consults: removed (renamed), or stored as another type --------

def read_keys(layout: dict) -> list[str]:
    """The metadata keys of the base that the kit's GGUF readers consult (hscale.checkpoints.
    gguf_facts, GGUFCheckpoint, the layout's findings, the model file's header check)."""
    architecture = next(k for k in layout["kv"] if k.endswith(".block_count")).split(".")[0]
    wanted = ["general.architecture", f"{architecture}.block_count",
              f"{architecture}.attention.head_count", f"{architecture}.attention.head_count_kv",
              f"{architecture}.attention.key_length", "hscale.source.tensors",
              "hscale.source.modules", "general.tensor_extra.name"]
    return [k for k in wanted if k in layout["kv"]]


def _is_llama_cpps_default(d, layout: dict, key: str) -> bool:
    """Whether ``key`` holds what llama.cpp's loader takes without it (llama-model.cpp
    ``load_hparams``: attention.key_length defaults to embedding_length / head_count), so that
    removing it changes nothing a reader or llama.cpp sees."""
    if not key.endswith(".attention.key_length"):
        return False
    architecture = key.split(".")[0]
    data = d.read_bytes()

    def uint32(name):
        entry = layout["kv"].get(f"{architecture}.{name}")
        return None if entry is None else struct.unpack_from("<I", data, entry[2])[0]
    heads = uint32("attention.head_count")
    return bool(heads) and uint32("attention.key_length") == uint32("embedding_length") // heads


@mutation("gguf-read-key-removed", needs=("gguf",))
def _(d, rng):
    """A key a reader consults renamed to one nobody reads (its last character replaced): for
    the reader, the key is missing; for llama.cpp too."""
    layout = gguf_layout(d)
    key = rng.choice([k for k in read_keys(layout) if k != "general.tensor_extra.name"
                      and not _is_llama_cpps_default(d, layout, k)])
    at = layout["kv"][key][0] + 8 + len(key) - 1
    patch(d, at, b"#")
    return f"{key} removed (renamed {key[:-1]}#)"


@mutation("gguf-read-key-retyped", needs=("gguf",))
def _(d, rng):
    """A UINT32 key a reader consults stored as another 4-byte type (INT32, FLOAT32: the same
    bytes, so the file still parses), which llama.cpp's typed getters refuse."""
    layout = gguf_layout(d)
    key = rng.choice([k for k in read_keys(layout) if layout["kv"][k][1] == 4])
    kind = rng.choice([5, 6])
    patch(d, layout["kv"][key][2] - 4, struct.pack("<I", kind))
    return f"{key} stored as {'INT32' if kind == 5 else 'FLOAT32'}"


@mutation("gguf-read-array-retyped", needs=("gguf",))
def _(d, rng):
    """A string array a reader consults (the recorded names, the precision tags' names) stored
    as an array of 8-byte integers: the same length field, other elements."""
    layout = gguf_layout(d)
    key = rng.choice([k for k in read_keys(layout) if layout["kv"][k][1] == 9])
    patch(d, layout["kv"][key][2], struct.pack("<I", 10))
    return f"{key}: an array of UINT64"


@mutation("benign-gguf-precision-tags-removed", needs=("gguf",), breaks=False)
def _(d, rng):
    """Without general.tensor_extra.name llama.cpp runs the weights as it would any NVFP4 file
    (on Blackwell with 4-bit activations): said in a note, the file conforms."""
    layout = gguf_layout(d)
    key = "general.tensor_extra.name"
    patch(d, layout["kv"][key][0] + 8 + len(key) - 1, b"#")
    return f"{key} removed"
