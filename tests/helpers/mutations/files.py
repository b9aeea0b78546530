"""Editing safetensors files, shard indexes and JSON configs by the formats' own definitions
(safetensors' header: a little-endian u64 length, the JSON header, the data), not through the
kit's readers."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Callable


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


def a_file(d: Path, rng) -> Path:
    return rng.choice(weight_files(d))


def an_entry(path: Path, rng) -> str:
    return rng.choice(tensor_names(path))


def tags_of(d: Path) -> set:
    return {"sharded"} if (d / "model.safetensors.index.json").exists() else set()


def model_config(d: Path) -> tuple[Path, dict]:
    path = d / "config.json"
    return path, json.loads(path.read_text())
