"""Checkpoints of the seeded tiny decoder for tests/checkpoints/test_check.py and tests/checkpoints/test_convert.py:
quantized by ``hscale quantize``'s API, and copies with one defect or edit planted."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from hscale.quantize import quantize_model

ATTENTION = "model.layers.0.self_attn."


def quantized(model: Path, out: Path, **options) -> Path:
    """``model`` quantized into ``out`` (RTN unless ``options`` say otherwise)."""
    options = {"pipeline": "rtn", "method": "rtn", **options}
    quantize_model(model_dir=str(model), out=str(out), progress=False, **options)
    return out


def planted(source: Path, target: Path, edit) -> Path:
    """A copy of checkpoint ``source`` with ``edit(tensors)`` applied to its weights file."""
    shutil.copytree(source, target)
    tensors = load_file(str(target / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def scale_bytes_of(tensors, name) -> np.ndarray:
    return tensors[name].view(torch.uint8).numpy().copy()


def set_scale_bytes(tensors, name, values: np.ndarray) -> None:
    tensors[name] = torch.from_numpy(np.ascontiguousarray(values)).view(torch.float8_e4m3fn)
