"""Mutations of the safetensors container (header entries, offsets, names, metadata, lengths,
trailing bytes, what lies in the directory) and of the shard index."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
from pathlib import Path

from helpers.mutations.files import (a_file, an_entry, edit_header, edit_json, raw_header, tags_of,
                                     tensor_names, weight_files, write_raw)
from helpers.mutations.registry import SAFETENSORS, mutation


@mutation("header-entry-not-an-object", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    name, value = an_entry(path, rng), rng.choice([True, 1, "x", [], None, 2.5])
    edit_header(path, lambda h: h.__setitem__(name, value))
    return f"{path.name}: {name} = {value!r}"


@mutation("header-entry-missing-field", needs_any=SAFETENSORS)
def _(d, rng):
    path, key = a_file(d, rng), rng.choice(["dtype", "shape", "data_offsets"])
    name = an_entry(path, rng)
    edit_header(path, lambda h: h[name].pop(key))
    return f"{path.name}: {name} without {key}"


@mutation("header-field-wrong-type", needs_any=SAFETENSORS)
def _(d, rng):
    path, name = a_file(d, rng), None
    name = an_entry(path, rng)
    key, value = rng.choice([("shape", "128"), ("shape", [1.5]), ("shape", [-1]),
                             ("shape", [True]), ("shape", {"0": 1}), ("dtype", 5),
                             ("dtype", "F4X"), ("data_offsets", [0]),
                             ("data_offsets", [0, 1, 2]), ("data_offsets", "0,4"),
                             ("data_offsets", [0.0, 4.0]), ("data_offsets", [True, 4])])
    edit_header(path, lambda h: h[name].__setitem__(key, value))
    return f"{path.name}: {name}.{key} = {value!r}"


@mutation("header-size-mismatch", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    name = rng.choice([n for n in tensor_names(path)
                       if json.loads(raw_header(path)[0])[n]["shape"]])

    def grow(h):
        h[name]["shape"][0] += rng.choice([1, 2, 7])
    edit_header(path, grow)
    return f"{path.name}: {name}'s shape no longer its size"


@mutation("offsets-shared", needs_any=SAFETENSORS)
def _(d, rng):
    """One tensor's data placed on another's first bytes (its own length kept)."""
    path = rng.choice([p for p in weight_files(d) if len(tensor_names(p)) > 1])
    first, second = rng.sample(tensor_names(path), 2)

    def share(h):
        begin, end = h[second]["data_offsets"]
        start = h[first]["data_offsets"][0]
        h[second]["data_offsets"] = [start, start + end - begin]
    edit_header(path, share)
    return f"{path.name}: {second} on {first}'s bytes"


def _moved(path: Path, name: str, shift) -> None:
    """``name``'s data_offsets moved by ``shift(begin)`` bytes (its length kept)."""
    def move(h):
        begin, end = h[name]["data_offsets"]
        by = shift(begin)
        h[name]["data_offsets"] = [begin + by, end + by]
    edit_header(path, move)


@mutation("offsets-into-header", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    name = an_entry(path, rng)
    text, _ = raw_header(path)
    _moved(path, name, lambda begin: -begin - rng.randint(1, len(text)))
    return f"{path.name}: {name} moved before the data (negative offsets)"


@mutation("offsets-shifted", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    name = an_entry(path, rng)
    shift = rng.choice([1, 2, 4, 8, 16, 64, 4096])
    _moved(path, name, lambda begin: shift)
    return f"{path.name}: {name} shifted by {shift} bytes"


@mutation("name-duplicated", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    text, data = raw_header(path)
    header = json.loads(text)
    name = an_entry(path, rng)
    entry = json.dumps({name: header[name]}, separators=(",", ":"))[1:-1]
    write_raw(path, text.rstrip()[:-1] + "," + entry + "}", data)
    return f"{path.name}: {name} twice"


@mutation("trailing-bytes", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    count = rng.choice([1, 7, 8, 64, 4096])
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(count)))
    return f"{path.name}: {count} bytes appended"


@mutation("truncated", needs_any=SAFETENSORS + ("gguf",))
def _(d, rng):
    path = d if d.is_file() else a_file(d, rng)
    size = path.stat().st_size
    cut = rng.choice([1, 2, 100, size // 2, size - 9, size - 1])
    with open(path, "r+b") as f:
        f.truncate(size - cut)
    return f"{path.name}: last {cut} bytes cut"


@mutation("header-length-short", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    text = raw[8:8 + size]
    padding = len(text) - len(text.rstrip(b" "))
    cut = rng.randint(1, padding) if padding and rng.random() < 0.7 else rng.choice(
        [1, 2, 8, size // 2])
    path.write_bytes(struct.pack("<Q", size - cut) + raw[8:])
    return f"{path.name}: header length {size} -> {size - cut}"


@mutation("header-length-wrong", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    raw = path.read_bytes()
    value = rng.choice([0, 1, 7, len(raw), len(raw) * 4, 100_000_001, 2 ** 63 + 5])
    path.write_bytes(struct.pack("<Q", value) + raw[8:])
    return f"{path.name}: header length {value}"


@mutation("name-lone-surrogate", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    text, data = raw_header(path)
    name = an_entry(path, rng)
    surrogate = rng.choice(["\\ud800", "\\udfff", "\\udc80"])
    write_raw(path, text.replace(json.dumps(name), json.dumps(name)[:-1] + surrogate + '"', 1),
              data)
    return f"{path.name}: {name} + {surrogate}"


@mutation("header-not-utf8", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    raw = bytearray(path.read_bytes())
    name = an_entry(path, rng).encode()
    at = raw.index(name, 8) + rng.randrange(len(name))
    raw[at] = rng.choice([0xFF, 0xC3, 0x80])
    path.write_bytes(bytes(raw))
    return f"{path.name}: byte {at} of a name not UTF-8"


@mutation("header-not-json", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    text, data = raw_header(path)
    at = rng.choice([i for i, c in enumerate(text) if c in '{}[]:,"'])
    instead = rng.choice([c for c in ("", "#", "{", "]") if c != text[at]])
    write_raw(path, text[:at] + instead + text[at + 1:], data)
    return f"{path.name}: JSON broken at {at} ({text[at]!r} -> {instead!r})"


@mutation("metadata-not-strings", needs_any=SAFETENSORS)
def _(d, rng):
    path = a_file(d, rng)
    value = rng.choice([5, ["a"], {"a": "b"}, True, 1.5, None])
    whole = rng.random() < 0.3

    def edit(h):
        if whole:
            h["__metadata__"] = rng.choice([[1], "text", 3])
        else:
            h.setdefault("__metadata__", {})["producer_note"] = value
    edit_header(path, edit)
    return f"{path.name}: __metadata__ not an object of strings"


@mutation("not-a-regular-file", needs_any=SAFETENSORS)
def _(d, rng):
    what = rng.choice(["fifo", "device", "socket", "directory"])
    target = d / rng.choice(["extra.safetensors", "model-extra.safetensors"])
    if what == "fifo":
        os.mkfifo(target)
    elif what == "device":
        os.symlink("/dev/zero", target)
    elif what == "socket":  # bound at a short path (AF_UNIX allows 108 bytes), moved in
        short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp")) / "s"
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(short))
        os.rename(short, target)
        short.parent.rmdir()
    else:
        target.mkdir()
    if "sharded" in tags_of(d):  # listed, so that a loader would read it
        index = d / "model.safetensors.index.json"
        edit_json(index, lambda doc: doc["weight_map"].__setitem__("extra.tensor", target.name))
    return f"{target.name}: a {what}"


def _weight_map(d: Path) -> tuple[Path, dict]:
    """(the index, its weight_map) of a sharded checkpoint."""
    index = d / "model.safetensors.index.json"
    return index, json.loads(index.read_text())["weight_map"]


@mutation("index-omits-a-shard", needs=("sharded",))
def _(d, rng):
    index, weight_map = _weight_map(d)
    shard = rng.choice(sorted(set(weight_map.values())))
    edit_json(index, lambda doc: doc.__setitem__(
        "weight_map", {k: v for k, v in weight_map.items() if v != shard}))
    return f"index without {shard}'s tensors"


@mutation("index-wrong-type", needs=("sharded",))
def _(d, rng):
    index, weight_map = _weight_map(d)
    name = rng.choice(list(weight_map))
    bad_file = rng.choice([1, None, ["a"], "../model.safetensors", "sub/model.safetensors", ""])
    text = rng.choice([json.dumps({"weight_map": rng.choice([[], "x", None, 3])}),
                       rng.choice(["null", "[]", '"index"']),
                       json.dumps({"weight_map": {**weight_map, name: bad_file}}),
                       json.dumps({"metadata": {"total_size": 1}}),
                       "{" + index.read_text()])
    index.write_text(text)
    return f"index: {text[:60]}"


@mutation("index-wrong-shard", needs=("sharded",))
def _(d, rng):
    index, weight_map = _weight_map(d)
    shards = sorted(set(weight_map.values()))
    name = rng.choice(list(weight_map))
    choice = rng.randrange(3)
    key, value = [(name, rng.choice([s for s in shards if s != weight_map[name]])),
                  ("model.layers.0.not_a_tensor.weight", rng.choice(shards)),
                  (name, "model-99999-of-00004.safetensors")][choice]
    edit_json(index, lambda doc: doc["weight_map"].__setitem__(key, value))
    return f"index maps {key} to {value}"


@mutation("unlisted-shard", needs=("sharded",))
def _(d, rng):
    source = rng.choice(weight_files(d))
    shutil.copy(source, d / "model-extra.safetensors")
    return f"a copy of {source.name}, unlisted"


@mutation("benign-header-rewritten", needs_any=SAFETENSORS, breaks=False)
def _(d, rng):
    path = a_file(d, rng)
    text, data = raw_header(path)
    header = json.loads(text)
    items = list(header.items())
    rng.shuffle(items)
    write_raw(path, json.dumps(dict(items), indent=rng.choice([None, 1])), data)
    return f"{path.name}: header keys reordered, whitespace changed"


@mutation("benign-metadata-added", needs_any=SAFETENSORS, breaks=False)
def _(d, rng):
    path = a_file(d, rng)
    edit_header(path, lambda h: h.setdefault("__metadata__", {}).__setitem__("note", "é ok"))
    return f"{path.name}: a metadata string added"
