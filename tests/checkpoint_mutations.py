"""Seeded mutations of real checkpoints, each written by hand from the file formats' own
definitions (safetensors' header, the shard index, compressed-tensors' and ModelOpt's configs,
GGUF's container as llama.cpp's gguf.cpp reads it), not through the readers under test
(tests/checkpoint_fuzz.py runs them; tests/test_checkpoint_fuzz.py and
tests/test_checkpoint_validation.py use them).

The bases are the kit's own outputs of every layout (``bases``): compressed-tensors and
ModelOpt, W4A16 and W4A4, one file and sharded, decoders dense and MoE and the bundled MiniLM (an
encoder, with a buffer stored), and GGUF (Qwen3, and Llama with its rope-permuted rows). A mutation edits a copy of one: the safetensors container (header
entries, offsets, names, metadata, lengths, trailing bytes, what lies in the directory), the
shard index, the configs (every field of the quantization config, config.json's shape of the
model), the tensors (removed, renamed, retyped, reshaped, added; bad global and activation
scales; bad scale bytes; fused sets split), and the GGUF container (version, magic, counts,
strings, offsets, types, hyper-parameters, recorded names). A mutation ``breaks`` the
checkpoint (an engine would refuse it, or load it and compute something else) or is benign
(a change the formats allow).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


# --------------------------------------------------------------------------------------------
# the bases
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Base:
    name: str
    path: Path
    tags: frozenset  # "ct", "modelopt", "gguf", "w4a4", "sharded", "moe", "llama", "single"
    to: str  # the layout a benign mutation converts it to


def bases(root: Path, checkpoints: dict) -> dict[str, Base]:
    """The kit's own outputs of every layout, under ``root`` (built once): ``checkpoints`` is
    conftest's {format: the tiny decoder quantized in it}."""
    from hscale.checkpoints.to_gguf import convert_to_gguf
    from hscale.quantize import quantize_model
    from llm_families import written
    root = Path(root)
    made = {"ct": Base("ct", checkpoints["compressed-tensors"],
                       frozenset({"ct", "single", "head"}), "modelopt"),
            "modelopt": Base("modelopt", checkpoints["modelopt"],
                             frozenset({"modelopt", "single", "head"}), "compressed-tensors")}
    minilm = root / "minilm-modelopt"  # BERT: an encoder, its buffers stored, no head
    if not minilm.exists():
        from hscale.models import minilm_model_dir
        quantize_model(model_dir=str(minilm_model_dir()), out=str(minilm), format="modelopt",
                       pipeline="rtn", method="rtn", progress=False)
    made["minilm-modelopt"] = Base("minilm-modelopt", minilm, frozenset({"modelopt", "single"}),
                                   "compressed-tensors")
    llama = written(root, "llama")
    for fmt, tag, to in (("compressed-tensors", "ct", "modelopt"),
                         ("modelopt", "modelopt", "compressed-tensors")):
        out = root / f"w4a4-{tag}"
        if not out.exists():
            quantize_model(model_dir=str(llama), out=str(out), format=fmt, scheme="w4a4",
                           pipeline="rtn", method="rtn", samples=2, seq_len=64,
                           progress=False)
        made[f"w4a4-{tag}"] = Base(f"w4a4-{tag}", out,
                                   frozenset({tag, "w4a4", "single", "head"}), to)
    moe = root / "moe-ct"
    if not moe.exists():
        quantize_model(model_dir=str(written(root, "qwen3_moe")), out=str(moe),
                       format="compressed-tensors", pipeline="rtn", method="rtn",
                       max_shard_bytes=200_000, progress=False)
    made["moe-ct"] = Base("moe-ct", moe, frozenset({"ct", "sharded", "moe", "head"}),
                          "modelopt")
    gguf_out = root / "tiny.gguf"
    if not gguf_out.exists():
        convert_to_gguf(checkpoints["compressed-tensors"], gguf_out)
    made["gguf"] = Base("gguf", gguf_out, frozenset({"gguf"}), "compressed-tensors")
    llama_ct = root / "llama-ct"
    if not llama_ct.exists():
        quantize_model(model_dir=str(llama), out=str(llama_ct), format="compressed-tensors",
                       pipeline="rtn", method="rtn", progress=False)
        for tokenizer in llama_ct.glob("tokenizer*"):  # the placeholder vocabulary
            tokenizer.unlink()
    llama_gguf = root / "llama.gguf"
    if not llama_gguf.exists():
        convert_to_gguf(llama_ct, llama_gguf)
    made["gguf-llama"] = Base("gguf-llama", llama_gguf, frozenset({"gguf", "llama"}),
                              "modelopt")
    return made


# --------------------------------------------------------------------------------------------
# editing files by their formats' own definitions
# --------------------------------------------------------------------------------------------

def weight_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.safetensors") if p.is_file())


def raw_header(path: Path) -> tuple[str, bytes]:
    """(the header's JSON text, the data) of a safetensors file."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    return raw[8:8 + size].decode("utf-8"), raw[8 + size:]


def write_raw(path: Path, text: str, data: bytes, pad: bool = True) -> None:
    encoded = text.encode("utf-8", "surrogatepass")
    if pad:
        encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def edit_header(path: Path, edit: Callable[[dict], object]) -> None:
    """``edit`` the header (a dict in file order) of a safetensors file, data untouched."""
    text, data = raw_header(path)
    header = json.loads(text)
    edit(header)
    write_raw(path, json.dumps(header, separators=(",", ":")), data)


def tensor_names(path: Path) -> list[str]:
    return [k for k in json.loads(raw_header(path)[0]) if k != "__metadata__"]


def edit_tensors(path: Path, edit: Callable[[dict], object]) -> None:
    """``edit`` the tensors (name -> torch tensor) of one safetensors file; its metadata
    kept."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata=metadata)


def file_holding(directory: Path, suffix: str, rng: random.Random) -> tuple[Path, str]:
    """(a weights file, a tensor name in it ending with ``suffix``), chosen by ``rng``."""
    found = [(p, n) for p in weight_files(directory) for n in tensor_names(p)
             if n.endswith(suffix)]
    if not found:
        raise LookupError(f"no tensor ending with {suffix}")
    return rng.choice(found)


def edit_json(path: Path, edit: Callable[[object], object]) -> None:
    """``edit`` a JSON file (in place, or return a replacement document)."""
    document = json.loads(path.read_text())
    replaced = edit(document)
    path.write_text(json.dumps(document if replaced is None else replaced, indent=1))


def quantization_config(directory: Path) -> tuple[Path, dict, Callable]:
    """(file, its quantization settings, a function writing them back) of a compressed-tensors
    or ModelOpt checkpoint."""
    if (directory / "hf_quant_config.json").exists():
        path = directory / "hf_quant_config.json"
        document = json.loads(path.read_text())
        return path, document["quantization"], lambda: path.write_text(json.dumps(document))
    path = directory / "config.json"
    document = json.loads(path.read_text())
    return (path, document["quantization_config"],
            lambda: path.write_text(json.dumps(document)))


def linear_modules(directory: Path, suffix: str) -> list[str]:
    """Modules of a safetensors checkpoint that store a tensor ending with ``suffix`` (the
    global scale's suffix gives the quantized Linears)."""
    return sorted({n[: -len(suffix)] for p in weight_files(directory) for n in tensor_names(p)
                   if n.endswith(suffix)})


GLOBAL_SUFFIX = {"ct": ".weight_global_scale", "modelopt": ".weight_scale_2"}
INPUT_SUFFIX = {"ct": ".input_global_scale", "modelopt": ".input_scale"}
PACKED_SUFFIX = {"ct": ".weight_packed", "modelopt": ".weight"}


def layout_tag_of(d: Path) -> str:
    return "modelopt" if (d / "hf_quant_config.json").exists() else "ct"


def patch_uint32(path: Path, key: str, value: int) -> None:
    """Metadata ``key`` (a UINT32, GGUF type 4) set to ``value``."""
    _at, kind, value_at, _length = gguf_layout(path)["kv"][key]
    assert kind == 4, (key, kind)
    patch(path, value_at, struct.pack("<I", value))


# -- GGUF: the container by its definition (gguf-py's constants, llama.cpp's gguf.cpp) ---------

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


# --------------------------------------------------------------------------------------------
# the mutations
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutation:
    kind: str
    needs: frozenset  # tags a base must have (any of ``needs_any`` too)
    breaks: bool
    apply: Callable  # (directory or file, rng) -> description
    needs_any: frozenset = frozenset()
    #: A conversion may repair what the mutation broke (a fused set's global scales, which
    #: hscale convert reconciles where that is exact): then it may succeed, and its output
    #: must conform.
    repaired_by_convert: bool = False

    def applies(self, base: Base) -> bool:
        return self.needs <= base.tags and (not self.needs_any or bool(self.needs_any
                                                                      & base.tags))


MUTATIONS: dict[str, Mutation] = {}


def mutation(kind: str, needs=(), breaks: bool = True, needs_any=(),
             repaired_by_convert: bool = False):
    def register(function):
        MUTATIONS[kind] = Mutation(kind, frozenset(needs), breaks, function,
                                   frozenset(needs_any), repaired_by_convert)
        return function
    return register


SAFETENSORS = ("ct", "modelopt")


def _a_file(d: Path, rng) -> Path:
    return rng.choice(weight_files(d))


def _an_entry(path: Path, rng) -> str:
    return rng.choice(tensor_names(path))


@mutation("header-entry-not-an-object", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    name, value = _an_entry(path, rng), rng.choice([True, 1, "x", [], None, 2.5])
    edit_header(path, lambda h: h.__setitem__(name, value))
    return f"{path.name}: {name} = {value!r}"


@mutation("header-entry-missing-field", needs_any=SAFETENSORS)
def _(d, rng):
    path, key = _a_file(d, rng), rng.choice(["dtype", "shape", "data_offsets"])
    name = _an_entry(path, rng)
    edit_header(path, lambda h: h[name].pop(key))
    return f"{path.name}: {name} without {key}"


@mutation("header-field-wrong-type", needs_any=SAFETENSORS)
def _(d, rng):
    path, name = _a_file(d, rng), None
    name = _an_entry(path, rng)
    key, value = rng.choice([("shape", "128"), ("shape", [1.5]), ("shape", [-1]),
                             ("shape", [True]), ("shape", {"0": 1}), ("dtype", 5),
                             ("dtype", "F4X"), ("data_offsets", [0]),
                             ("data_offsets", [0, 1, 2]), ("data_offsets", "0,4"),
                             ("data_offsets", [0.0, 4.0]), ("data_offsets", [True, 4])])
    edit_header(path, lambda h: h[name].__setitem__(key, value))
    return f"{path.name}: {name}.{key} = {value!r}"


@mutation("header-size-mismatch", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
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
    path = _a_file(d, rng)
    name = _an_entry(path, rng)
    text, _ = raw_header(path)
    _moved(path, name, lambda begin: -begin - rng.randint(1, len(text)))
    return f"{path.name}: {name} moved before the data (negative offsets)"


@mutation("offsets-shifted", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    name = _an_entry(path, rng)
    shift = rng.choice([1, 2, 4, 8, 16, 64, 4096])
    _moved(path, name, lambda begin: shift)
    return f"{path.name}: {name} shifted by {shift} bytes"


@mutation("name-duplicated", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    text, data = raw_header(path)
    header = json.loads(text)
    name = _an_entry(path, rng)
    entry = json.dumps({name: header[name]}, separators=(",", ":"))[1:-1]
    write_raw(path, text.rstrip()[:-1] + "," + entry + "}", data)
    return f"{path.name}: {name} twice"


@mutation("trailing-bytes", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    count = rng.choice([1, 7, 8, 64, 4096])
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(count)))
    return f"{path.name}: {count} bytes appended"


@mutation("truncated", needs_any=SAFETENSORS + ("gguf",))
def _(d, rng):
    path = d if d.is_file() else _a_file(d, rng)
    size = path.stat().st_size
    cut = rng.choice([1, 2, 100, size // 2, size - 9, size - 1])
    with open(path, "r+b") as f:
        f.truncate(size - cut)
    return f"{path.name}: last {cut} bytes cut"


@mutation("header-length-short", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
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
    path = _a_file(d, rng)
    raw = path.read_bytes()
    value = rng.choice([0, 1, 7, len(raw), len(raw) * 4, 100_000_001, 2 ** 63 + 5])
    path.write_bytes(struct.pack("<Q", value) + raw[8:])
    return f"{path.name}: header length {value}"


@mutation("name-lone-surrogate", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    text, data = raw_header(path)
    name = _an_entry(path, rng)
    surrogate = rng.choice(["\\ud800", "\\udfff", "\\udc80"])
    write_raw(path, text.replace(json.dumps(name), json.dumps(name)[:-1] + surrogate + '"', 1),
              data)
    return f"{path.name}: {name} + {surrogate}"


@mutation("header-not-utf8", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    raw = bytearray(path.read_bytes())
    name = _an_entry(path, rng).encode()
    at = raw.index(name, 8) + rng.randrange(len(name))
    raw[at] = rng.choice([0xFF, 0xC3, 0x80])
    path.write_bytes(bytes(raw))
    return f"{path.name}: byte {at} of a name not UTF-8"


@mutation("header-not-json", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
    text, data = raw_header(path)
    at = rng.choice([i for i, c in enumerate(text) if c in '{}[]:,"'])
    instead = rng.choice([c for c in ("", "#", "{", "]") if c != text[at]])
    write_raw(path, text[:at] + instead + text[at + 1:], data)
    return f"{path.name}: JSON broken at {at} ({text[at]!r} -> {instead!r})"


@mutation("metadata-not-strings", needs_any=SAFETENSORS)
def _(d, rng):
    path = _a_file(d, rng)
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
    if "sharded" in _tags_of(d):  # listed, so that a loader would read it
        index = d / "model.safetensors.index.json"
        edit_json(index, lambda doc: doc["weight_map"].__setitem__("extra.tensor", target.name))
    return f"{target.name}: a {what}"


def _tags_of(d: Path) -> set:
    return {"sharded"} if (d / "model.safetensors.index.json").exists() else set()


@mutation("gguf-not-a-regular-file", needs=("gguf",))
def _(d, rng):
    d.unlink()
    what = rng.choice(["fifo", "directory"])
    if what == "fifo":
        os.mkfifo(d)
    else:
        d.mkdir()
    return f"{d.name}: replaced by a {what}"


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


# -- configs --------------------------------------------------------------------------------

CT_WEIGHT_CHANGES = [("num_bits", 8), ("num_bits", "4"), ("num_bits", 4.0), ("num_bits", True),
                     ("group_size", 32), ("group_size", 8), ("group_size", "16"),
                     ("group_size", None), ("type", "int"), ("strategy", "group"),
                     ("strategy", "channel"), ("symmetric", False), ("dynamic", True),
                     ("dynamic", "local")]


@mutation("ct-weights-field", needs=("ct",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    group = rng.choice(list(quant["config_groups"].values()))
    if rng.random() < 0.25:
        key = rng.choice(["num_bits", "type", "strategy", "group_size"])
        group["weights"].pop(key, None)
        save()
        return f"weights without {key}"
    key, value = rng.choice(CT_WEIGHT_CHANGES)
    group["weights"][key] = value
    save()
    return f"weights {key} = {value!r}"


@mutation("ct-inputs-field", needs=("ct", "w4a4"))
def _(d, rng):
    path, quant, save = quantization_config(d)
    group = rng.choice(list(quant["config_groups"].values()))
    key, value = rng.choice([("num_bits", 8), ("group_size", 32), ("dynamic", False),
                             ("strategy", "token"), ("type", "int"), ("symmetric", False)])
    group["input_activations"][key] = value
    save()
    return f"input_activations {key} = {value!r}"


@mutation("ct-status", needs=("ct",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    value = rng.choice(["frozen", "initialized", "calibration", None, 1, "absent"])
    if value == "absent":
        quant.pop("quantization_status")
    else:
        quant["quantization_status"] = value
    save()
    return f"quantization_status {value!r}"


@mutation("ct-format", needs=("ct",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    if rng.random() < 0.5:
        quant["format"] = rng.choice(["float-quantized", "pack-quantized", "dense", None])
    else:
        rng.choice(list(quant["config_groups"].values()))["format"] = "float-quantized"
    save()
    return "format changed"


@mutation("ct-outputs", needs=("ct",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    group = rng.choice(list(quant["config_groups"].values()))
    group["output_activations"] = dict(group["weights"])
    save()
    return "output_activations quantized"


@mutation("ignore-names-a-quantized-linear", needs_any=SAFETENSORS)
def _(d, rng):
    tag = layout_tag_of(d)
    module = rng.choice(linear_modules(d, GLOBAL_SUFFIX[tag]))
    path, quant, save = quantization_config(d)
    key = "ignore" if tag == "ct" else "exclude_modules"
    quant[key] = list(quant.get(key) or []) + [rng.choice([module, module.rsplit(".", 1)[-1],
                                                            f"re:{module}"])]
    save()
    return f"{key} names {module}"


@mutation("ignore-drops-an-unquantized-linear", needs=("head",), needs_any=SAFETENSORS)
def _(d, rng):
    tag = layout_tag_of(d)
    path, quant, save = quantization_config(d)
    key = "ignore" if tag == "ct" else "exclude_modules"
    quant[key] = []
    save()
    return f"{key} emptied (lm_head stored unquantized)"


@mutation("ct-targets-narrowed", needs=("ct",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    for group in quant["config_groups"].values():
        group["targets"] = [rng.choice(["re:.*mlp.*", "re:.*self_attn.*", "Embedding",
                                        "model.layers.0.mlp.down_proj"])]
    save()
    return f"targets {group['targets']}"


@mutation("config-wrong-types", needs_any=SAFETENSORS)
def _(d, rng):
    config = d / "config.json"
    document = json.loads(config.read_text())
    choice = rng.randrange(4) if "quantization_config" in document else rng.choice([0, 1])
    if choice == 0:
        config.write_text(rng.choice(["null", "[]", "3", '"config"', "{"]))
        return "config.json not an object"
    if choice == 1:
        hf = d / "hf_quant_config.json"
        if hf.exists():
            hf.write_text(rng.choice(["[1]", "null", '{"quantization": [1]}',
                                      '{"quantization": {"quant_algo": 4}}', "{"]))
            return "hf_quant_config.json of the wrong type"
        document["quantization_config"] = rng.choice([[1], "nvfp4", 4])
    elif choice == 2:
        quant = document["quantization_config"]
        key, value = rng.choice([("config_groups", [1]), ("config_groups", "g"),
                                 ("ignore", "lm_head"), ("ignore", 5), ("ignore", [1]),
                                 ("ignore", ["re:("])])
        quant[key] = value
    else:
        group = rng.choice(list(document["quantization_config"]["config_groups"]))
        key, value = rng.choice([("weights", [4]), ("targets", "Linear"), ("targets", [3]),
                                 ("input_activations", "none"), (None, 7)])
        if key is None:
            document["quantization_config"]["config_groups"][group] = value
        else:
            document["quantization_config"]["config_groups"][group][key] = value
    config.write_text(json.dumps(document))
    return f"config of the wrong type ({choice})"


@mutation("modelopt-field", needs=("modelopt",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    key, value = rng.choice([("group_size", 32), ("group_size", "16"), ("group_size", True),
                             ("group_size", None), ("quant_algo", "FP8"),
                             ("quant_algo", "W4A8_AWQ"), ("quant_algo", None),
                             ("exclude_modules", "lm_head"), ("exclude_modules", [3])])
    if value is None and rng.random() < 0.5:
        quant.pop(key)
    else:
        quant[key] = value
    save()
    return f"{key} = {value!r}"


@mutation("modelopt-w4a4-claimed", needs=("modelopt",))
def _(d, rng):
    path, quant, save = quantization_config(d)
    if quant["quant_algo"] == "NVFP4":  # W4A4: one activation scale removed instead
        file, name = file_holding(d, ".input_scale", rng)
        edit_tensors(file, lambda t: t.pop(name))
        return f"{name} removed"
    quant["quant_algo"] = "NVFP4"
    save()
    return "quant_algo NVFP4 without input scales"


def _model_config(d: Path) -> tuple[Path, dict]:
    path = d / "config.json"
    return path, json.loads(path.read_text())


@mutation("config-more-layers", needs_any=SAFETENSORS)
def _(d, rng):
    path, config = _model_config(d)
    factor = rng.choice([2, 3])
    config["num_hidden_layers"] *= factor
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"] * factor
    if isinstance(config.get("mlp_only_layers"), list):
        config["mlp_only_layers"] = []
    path.write_text(json.dumps(config))
    return f"config.json claims {factor}x the layers"


@mutation("config-fewer-layers", needs_any=SAFETENSORS)
def _(d, rng):
    path, config = _model_config(d)
    config["num_hidden_layers"] = 1
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:1]
    path.write_text(json.dumps(config))
    return "config.json claims 1 layer"


@mutation("config-other-sizes", needs_any=SAFETENSORS)
def _(d, rng):
    path, config = _model_config(d)
    key = rng.choice([k for k in ("hidden_size", "intermediate_size", "vocab_size",
                                  "moe_intermediate_size", "num_experts", "num_key_value_heads")
                      if isinstance(config.get(k), int) and config[k] > 1])
    config[key] = config[key] * 2 if key != "num_key_value_heads" else config[key] // 2
    path.write_text(json.dumps(config))
    return f"config.json {key} = {config[key]}"


@mutation("config-unknown-to-transformers", needs_any=SAFETENSORS, breaks=False)
def _(d, rng):
    """An architecture transformers does not know leaves the tensors unjudged against it: a
    note, not a finding (the checkpoint may well be right)."""
    path, config = _model_config(d)
    config["architectures"] = ["MyPrivateForCausalLM"]
    config["model_type"] = "my_private"
    path.write_text(json.dumps(config))
    return "architecture unknown to transformers"


# -- tensors --------------------------------------------------------------------------------

@mutation("linear-removed", needs_any=SAFETENSORS)
def _(d, rng):
    tag = layout_tag_of(d)
    module = rng.choice(linear_modules(d, GLOBAL_SUFFIX[tag]))
    for path in weight_files(d):
        names = [n for n in tensor_names(path) if n.startswith(module + ".")]
        if names:
            edit_tensors(path, lambda t: [t.pop(n) for n in names])
    index = d / "model.safetensors.index.json"
    if index.exists():
        edit_json(index, lambda doc: doc.__setitem__("weight_map", {
            k: v for k, v in doc["weight_map"].items() if not k.startswith(module + ".")}))
    return f"every tensor of {module} removed"


@mutation("tensor-removed", needs=("single",))
def _(d, rng):
    tag = layout_tag_of(d)
    suffixes = [".weight_scale", GLOBAL_SUFFIX[tag], PACKED_SUFFIX[tag]]
    if linear_modules(d, INPUT_SUFFIX[tag]):  # W4A4: its activation scales too
        suffixes.append(INPUT_SUFFIX[tag])
    path, name = file_holding(d, rng.choice(suffixes), rng)
    if name.endswith(".weight") and tag == "modelopt":
        name = rng.choice([n for n in tensor_names(path) if n.endswith(".weight_scale_2")])
    edit_tensors(path, lambda t: t.pop(name))
    return f"{name} removed"


@mutation("tensor-renamed", needs=("single",))
def _(d, rng):
    path = _a_file(d, rng)
    name = _an_entry(path, rng)
    new = name[:-1] + ("x" if name[-1] != "x" else "y")
    edit_tensors(path, lambda t: t.__setitem__(new, t.pop(name)))
    return f"{name} -> {new}"


@mutation("tensor-retyped", needs=("single",))
def _(d, rng):
    import torch
    tag = layout_tag_of(d)
    suffix = rng.choice([".weight_scale", GLOBAL_SUFFIX[tag]])
    path, name = file_holding(d, suffix, rng)
    dtype = torch.uint8 if suffix == ".weight_scale" else torch.float16

    def retype(t):
        t[name] = t[name].view(torch.uint8) if dtype == torch.uint8 else t[name].to(dtype)
    edit_tensors(path, retype)
    return f"{name} as {dtype}"


@mutation("tensor-reshaped", needs=("single",))
def _(d, rng):
    tag = layout_tag_of(d)
    suffix = rng.choice([".weight_scale", PACKED_SUFFIX[tag], GLOBAL_SUFFIX[tag]])
    path, name = file_holding(d, suffix, rng)
    if tag == "modelopt" and suffix == ".weight":
        path, name = file_holding(d, ".weight_scale", rng)

    def reshape(t):
        x = t[name]
        t[name] = x.reshape(-1) if x.dim() != 1 else x.reshape(1, 1, -1)
        if x.dim() == 2 and x.shape[0] != x.shape[1] and rng.random() < 0.5:
            t[name] = x.T.contiguous()
    edit_tensors(path, reshape)
    return f"{name} reshaped"


@mutation("global-scale-unusable", needs_any=SAFETENSORS)
def _(d, rng):
    import torch
    tag = layout_tag_of(d)
    path, name = file_holding(d, GLOBAL_SUFFIX[tag], rng)
    value = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e-40, -0.0, 2.0 ** 127])

    def edit(t):
        t[name] = torch.full_like(t[name], value)
    edit_tensors(path, edit)
    return f"{name} = {value!r}"


@mutation("activation-scale-unusable", needs=("w4a4",))
def _(d, rng):
    import torch
    tag = layout_tag_of(d)
    path, name = file_holding(d, INPUT_SUFFIX[tag], rng)
    value = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e-40])

    def edit(t):
        t[name] = torch.full_like(t[name], value)
    edit_tensors(path, edit)
    return f"{name} = {value!r}"


@mutation("scale-bytes-bad", needs_any=SAFETENSORS)
def _(d, rng):
    import torch
    path, name = file_holding(d, ".weight_scale", rng)
    packed = name[: -len(".weight_scale")] + PACKED_SUFFIX[layout_tag_of(d)]
    kinds = ["nan", "negative"] + (["zero-under-codes"] if packed in tensor_names(path) else [])
    kind = rng.choice(kinds)

    def edit(t):
        raw = t[name].view(torch.uint8).clone()
        r, c = rng.randrange(raw.shape[0]), rng.randrange(raw.shape[1])
        raw[r, c] = {"nan": rng.choice([0x7F, 0xFF]), "negative": int(raw[r, c]) | 0x80,
                     "zero-under-codes": 0x00}[kind]
        if kind == "zero-under-codes":  # a code that is not zero in the group
            codes = t[packed].clone()
            codes[r, 8 * c] = 0x11
            t[packed] = codes
        t[name] = raw.view(torch.float8_e4m3fn)
    edit_tensors(path, edit)
    return f"{name}: a {kind} scale byte"


@mutation("fused-set-split", needs_any=SAFETENSORS, repaired_by_convert=True)
def _(d, rng):
    tag = layout_tag_of(d)
    member = rng.choice([m for m in ("k_proj", "self.key", "up_proj")
                         if any(n.endswith(m + GLOBAL_SUFFIX[tag]) for p in weight_files(d)
                                for n in tensor_names(p))])
    path, name = file_holding(d, member + GLOBAL_SUFFIX[tag], rng)

    def edit(t):
        t[name] = t[name] * 2  # the same codes and bytes under another s_g
    edit_tensors(path, edit)
    return f"{name} doubled (its fused set no longer shares one)"


@mutation("linear-added", needs=("single",))
def _(d, rng):
    tag = layout_tag_of(d)
    module = rng.choice(linear_modules(d, GLOBAL_SUFFIX[tag]))
    extra = rng.choice(["model.layers.9.mlp.up_proj", "model.extra_proj",
                        module.replace("layers.0.", "layers.7.")])
    if extra == module:
        extra = "model.layers.9.mlp.up_proj"
    path = weight_files(d)[0]

    def edit(t):
        for name in [n for n in list(t) if n.startswith(module + ".")]:
            t[extra + name[len(module):]] = t[name].clone()
    edit_tensors(path, edit)
    return f"{module}'s tensors copied as {extra}"


@mutation("tensor-unknown-added", needs=("single",))
def _(d, rng):
    import torch
    path = weight_files(d)[0]
    name = rng.choice(["model.extra.weight", "model.layers.0.mlp.extra_bias", "foo"])
    edit_tensors(path, lambda t: t.__setitem__(name, torch.zeros(4, dtype=torch.float32)))
    return f"{name} added"


# -- benign ---------------------------------------------------------------------------------

@mutation("benign-header-rewritten", needs_any=SAFETENSORS, breaks=False)
def _(d, rng):
    path = _a_file(d, rng)
    text, data = raw_header(path)
    header = json.loads(text)
    items = list(header.items())
    rng.shuffle(items)
    write_raw(path, json.dumps(dict(items), indent=rng.choice([None, 1])), data)
    return f"{path.name}: header keys reordered, whitespace changed"


@mutation("benign-metadata-added", needs_any=SAFETENSORS, breaks=False)
def _(d, rng):
    path = _a_file(d, rng)
    edit_header(path, lambda h: h.setdefault("__metadata__", {}).__setitem__("note", "é ok"))
    return f"{path.name}: a metadata string added"


@mutation("benign-defaults-omitted", needs=("ct",), breaks=False)
def _(d, rng):
    path, quant, save = quantization_config(d)
    group = rng.choice(list(quant["config_groups"].values()))
    for key in rng.sample(["symmetric", "dynamic", "observer", "actorder", "observer_kwargs"],
                          2):
        group["weights"].pop(key, None)
    save()
    return "weights keys whose defaults are their values omitted"


@mutation("benign-config-key-added", needs_any=SAFETENSORS, breaks=False)
def _(d, rng):
    path, config = _model_config(d)
    config["my_note"] = {"made by": "a user"}
    path.write_text(json.dumps(config))
    hf = d / "hf_quant_config.json"
    if hf.exists():
        edit_json(hf, lambda doc: doc.__setitem__("comment", "kept"))
    return "unrelated keys added to the configs"


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
