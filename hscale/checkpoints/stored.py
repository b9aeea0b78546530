"""Reading the quantized Linears of an NVFP4 checkpoint, in whichever layout it is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .layout_base import ROLE_DTYPES, CheckpointFormat, Layout
from .layouts import detect_format, layout_named
from .inputs import require_regular
from .safetensors import CheckpointError, SafetensorsModel


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


def open_checkpoint(directory) -> tuple[CheckpointFormat, SafetensorsModel, dict]:
    """(its format, its tensors, module -> {role: tensor name}) of an NVFP4 checkpoint
    directory (or GGUF file), or a CheckpointError naming what is missing: the directory, an NVFP4 config,
    or any quantized Linear."""
    directory = Path(directory)
    from .gguf import is_gguf_file, open_gguf
    if is_gguf_file(directory):  # a GGUF file: the third layout (NVFP4-GGUF-1)
        return open_gguf(directory)
    if directory.exists() and not directory.is_dir():
        require_regular(directory)  # a FIFO, a device: said so, never opened
        raise CheckpointError(f"{directory}: neither a checkpoint directory nor a GGUF file "
                              "(it does not start with the GGUF magic)")
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such directory")
    detected = detect_format(directory)
    model = SafetensorsModel(directory)
    modules = detected.layout.module_tensors(model)
    if not modules:
        raise CheckpointError(f"{directory}: its config says {detected.format} NVFP4, but it "
                              "stores no quantized Linear (no "
                              f"{detected.layout.tensor_names('X')['scale']} tensors)")
    return detected, model, modules


def quantized_modules(model: SafetensorsModel, layout: Layout | str) -> list[str]:
    """The quantized Linears a checkpoint holds any tensor of, in file order."""
    return list(layout_named(layout).module_tensors(model))


def read_stored_linear(model: SafetensorsModel, layout: Layout | str, module: str) -> StoredLinear:
    """One quantized Linear of a checkpoint, as stored, with the multiplier it implies."""
    layout = layout_named(layout)
    names = layout.tensor_names(module)
    for name in names.values():
        if name not in model.info:
            raise CheckpointError(f"{model.directory}: {module} lacks {name}")
    for role, name in names.items():
        dtype = ROLE_DTYPES[role]
        found = model.info[name].dtype
        if found != dtype:
            raise CheckpointError(f"{model.directory}: {names[role]} is {found}, the "
                                  f"{layout.name} layout stores {dtype}")
    packed = model.array(names["packed"])
    scale_bytes = model.array(names["scale"])
    stored = np.float32(model.array(names["global"]).reshape(-1)[0])
    return StoredLinear(module, packed, scale_bytes, stored, layout.implied_global_scale(stored))


def checkpoint_weights(checkpoint_dir) -> dict:
    """module -> the checkpoint's weight of every quantized Linear as NVFP4-DEQ-1 defines it
    (float32)."""
    from hscale.reference import dequantize, unpack_codes
    layout = detect_format(checkpoint_dir).layout
    model = SafetensorsModel(checkpoint_dir)
    weights = {}
    for module in quantized_modules(model, layout):
        stored = read_stored_linear(model, layout, module)
        weights[module] = dequantize(unpack_codes(stored.packed), stored.scale_bytes,
                                     stored.global_scale).astype(np.float32)
    return weights
