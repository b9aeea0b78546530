"""What every NVFP4 checkpoint layout shares (hscale.checkpoints.layouts has the layouts
themselves, one class each, and their registry): the roles of a quantized Linear's tensors and
their dtypes, the configs' constants, ``CheckpointFormat`` (what a directory's configs say),
the ``Layout`` base class, the schemes and the reciprocals a stored global scale may hold
(NVFP4-GS-4)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable

import numpy as np

from hscale.reference import GROUP_SIZE, QuantizedWeight
from hscale.reference.constants import FP32_LARGEST_RECIPROCAL_NORMAL, FP32_SMALLEST_NORMAL
from hscale.reference.global_scale import (multiplier_from_reciprocal,
                                           reciprocal_from_multiplier)

from .safetensors import CheckpointError, SafetensorsModel, TensorInfo

#: What each role's tensor must be: its safetensors dtype.
ROLE_DTYPES = {"packed": "U8", "scale": "F8_E4M3", "global": "F32", "input": "F32"}
#: The keys of a compressed-tensors weights quantization that say NVFP4.
CT_NVFP4_WEIGHTS = {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                    "group_size": GROUP_SIZE, "symmetric": True}
#: The keys of compressed-tensors' W4A4 ``input_activations`` (its preset scheme ``NVFP4``,
#: compressed_tensors/quantization/quant_scheme.py): NVFP4 groups of 16, computed per token at
#: run time (``dynamic: local``) under a static calibrated ``input_global_scale``.
CT_NVFP4_INPUTS = {**CT_NVFP4_WEIGHTS, "dynamic": "local"}
#: What compressed-tensors reads for a QuantizationArgs key that is absent (0.19,
#: quantization/quant_args.py).
CT_ARGUMENT_DEFAULTS = {"num_bits": 8, "type": "int", "symmetric": True, "group_size": None,
                        "strategy": None, "dynamic": False}
#: compressed-tensors' NVFP4 presets (quantization/quant_scheme.py), for a config group given
#: as a preset's name and its targets.
CT_PRESETS = {"NVFP4A16": {"weights": {**CT_NVFP4_WEIGHTS, "dynamic": False},
                           "input_activations": None},
              "NVFP4": {"weights": {**CT_NVFP4_WEIGHTS, "dynamic": False},
                        "input_activations": dict(CT_NVFP4_INPUTS)}}
CT_FORMAT_NAME = "nvfp4-pack-quantized"
MODELOPT_CONFIG = "hf_quant_config.json"
# ModelOpt's names of NVFP4 weights: NVFP4 (its W4A4 recipe, activations quantized too) and
# W4A16_NVFP4 (weights only). The weight tensors are the same in both.
MODELOPT_NVFP4_ALGOS = ("NVFP4", "W4A16_NVFP4")
#: A converted checkpoint's config keeps its source's under this key, so that converting back
#: restores it.
CONVERTED_FROM = "converted_from"


@dataclass
class CheckpointFormat:
    """What a directory's configs say: its layout, the modules they exclude, and the layout's
    quantization config as stored."""

    layout: "Layout"
    ignore: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    config_name: str = "config.json"  # the file it was read from
    #: The modules its config says are quantized (compressed-tensors' targets: a class name
    #: such as "Linear", a module name, or "re:" a regular expression); None: every Linear
    #: not ignored (ModelOpt, GGUF).
    targets: list[str] | None = None

    @property
    def format(self) -> str:
        return self.layout.name


class Layout:
    """One on-disk NVFP4 layout. Subclasses give the attributes and the config methods."""

    name: str
    clause: str  # the clause that defines it
    suffixes: dict  # role -> the suffix of its tensor's name
    global_shape: tuple  # the global scale's shape
    stores_reciprocal: bool  # the global scale stored as r = fp32(1/s_g) (NVFP4-GS-4)
    config_file: str  # the file whose quantization config says "NVFP4"
    ignore_key: str  # its list of modules left unquantized
    input_suffix: str  # W4A4: the suffix of each Linear's activation scale (NVFP4-CKPT-4)
    #: Engines fuse q/k/v and gate/up into one matmul with one global scale (NVFP4-CKPT-3).
    one_scale_per_fused_set = True
    #: Its config lists the Linears left unquantized (ignore_key), so a loader expects every
    #: other one quantized (NVFP4-CKPT-6); a GGUF file types each tensor itself.
    lists_unquantized = True
    #: W4A4: each quantized Linear stores its input's activation scale too (role ``input``,
    #: NVFP4-CKPT-4), in the same convention and shape as its global scale.
    activations = False

    def __repr__(self) -> str:
        return f"<layout {self.name}{' W4A4' if self.activations else ''}>"

    @property
    def scheme(self) -> str:
        return "w4a4" if self.activations else "w4a16"

    def with_scheme(self, scheme: str) -> "Layout":
        """This layout for ``w4a16`` (weights only) or ``w4a4`` (an activation scale beside
        each quantized Linear, NVFP4-CKPT-4): the same class, the role ``input`` added."""
        if scheme not in SCHEMES:
            raise CheckpointError(f"scheme {scheme!r}: one of {', '.join(SCHEMES)}")
        if scheme == self.scheme:
            return self
        other = copy.copy(self)
        other.activations = scheme == "w4a4"
        other.suffixes = ({**type(self).suffixes, "input": self.input_suffix}
                          if other.activations else dict(type(self).suffixes))
        return other

    def __eq__(self, other) -> bool:
        return isinstance(other, Layout) and (self.name, self.activations) == (
            other.name, other.activations)

    def __hash__(self) -> int:
        return hash((self.name, self.activations))

    # -- tensor names ---------------------------------------------------------------------
    def tensor_names(self, module: str) -> dict[str, str]:
        """role -> tensor name of one quantized Linear: roles ``packed``, ``scale``, ``global``."""
        return {role: module + suffix for role, suffix in self.suffixes.items()}

    def tensor_infos(self, module: str, rows: int, cols: int) -> list[TensorInfo]:
        """The tensors one quantized (rows, cols) Linear takes, in the order they are written."""
        names = self.tensor_names(module)
        infos = [TensorInfo(names["packed"], ROLE_DTYPES["packed"], (rows, cols // 2)),
                 TensorInfo(names["scale"], ROLE_DTYPES["scale"], (rows, cols // GROUP_SIZE)),
                 TensorInfo(names["global"], ROLE_DTYPES["global"], self.global_shape)]
        if self.activations:  # NVFP4-CKPT-4: the activation scale, shaped as the global one
            infos.append(TensorInfo(names["input"], ROLE_DTYPES["input"], self.global_shape))
        return infos

    def module_of(self, name: str, info: TensorInfo) -> str | None:
        """The quantized Linear a tensor belongs to, from its name (its scale or global scale,
        or what only this layout's packed codes look like), else None."""
        for role in ("scale", "global"):
            if name.endswith(self.suffixes[role]):
                return name[: -len(self.suffixes[role])]
        return None

    def module_tensors(self, model: SafetensorsModel) -> dict[str, dict[str, str]]:
        """module -> {role: tensor name} of every quantized Linear a checkpoint holds any
        tensor of, in file order; a role whose tensor is missing is absent from the inner
        dict."""
        modules: dict[str, dict[str, str]] = {}
        for name, info in model.info.items():
            module = self.module_of(name, info)
            if module is not None and module not in modules:
                modules[module] = {role: n for role, n in self.tensor_names(module).items()
                                   if n in model.info}
        return modules

    # -- the global scale -----------------------------------------------------------------
    def stored_global_scale(self, global_scale) -> np.float32:
        """What the file holds for the multiplier s_g (NVFP4-GS-4)."""
        if self.stores_reciprocal:
            return reciprocal_from_multiplier(global_scale)
        return np.float32(global_scale)

    def implied_global_scale(self, stored) -> np.float32:
        """The multiplier s_g a stored global scale means (NVFP4-GS-4)."""
        if self.stores_reciprocal:
            return multiplier_from_reciprocal(stored)
        return np.float32(stored)

    def writable_global_scale(self, global_scale) -> np.float32:
        """The s_g to quantize with so that the file means exactly it: for a reciprocal layout
        the multiplier its stored reciprocal reads back as (one ulp away for ~17% of values,
        NVFP4-GS-4), so that the stored bytes are the reference's for what a reader sees."""
        return self.implied_global_scale(self.stored_global_scale(global_scale))

    def can_store(self, global_scale) -> bool:
        """Whether some stored value reads back as exactly this s_g (NVFP4-GS-4)."""
        return not self.stores_reciprocal or bool(reciprocals_of(global_scale))

    def stored_global_scale_problem(self, value: float, shown: str) -> tuple[str, str] | None:
        """(clause, what is wrong) when a stored global scale (``shown``: its value as a message
        prints it) is not usable: a positive normal fp32, for a reciprocal one whose
        reciprocal is a normal fp32 too (NVFP4-GS-2, -4); None when it is."""
        if self.stores_reciprocal:
            if np.isfinite(value) and FP32_SMALLEST_NORMAL <= value <= FP32_LARGEST_RECIPROCAL_NORMAL:
                return None
            return "NVFP4-GS-4", (f"the stored reciprocal r = {shown} is not a positive normal "
                                  "fp32 whose reciprocal is a normal fp32")
        if np.isfinite(value) and value >= FP32_SMALLEST_NORMAL:
            return None
        return "NVFP4-GS-2", f"s_g = {shown}: a global scale is a positive normal fp32"

    @property
    def convention(self) -> str:
        return "the reciprocal r" if self.stores_reciprocal else "the multiplier s_g"

    def global_scale_array(self, stored) -> np.ndarray:
        """The stored value as the tensor this layout writes."""
        return np.array(stored, np.float32).reshape(self.global_shape)

    def tensors(self, module: str, result: QuantizedWeight) -> dict[str, np.ndarray]:
        """name -> array to write, for one quantized Linear (in ``tensor_infos`` order)."""
        names = self.tensor_names(module)
        stored = self.stored_global_scale(result.global_scale)
        if self.implied_global_scale(stored) != np.float32(result.global_scale):
            raise CheckpointError(
                f"{module}: quantized with s_g = {float(result.global_scale)!r}, which a "
                f"{self.name} file cannot hold exactly (its reciprocal reads back as "
                f"{float(self.implied_global_scale(stored))!r}); quantize with "
                "writable_global_scale(s_g) (spec NVFP4-GS-4)")
        return {names["packed"]: np.asarray(result.packed, np.uint8),
                names["scale"]: np.asarray(result.scale_bytes, np.uint8),
                names["global"]: self.global_scale_array(stored)}

    # -- the activation scale (W4A4, NVFP4-CKPT-4) ------------------------------------------
    def input_tensors(self, module: str, multiplier) -> dict[str, np.ndarray]:
        """name -> array of one quantized Linear's activation scale, given its activation
        multiplier ``a`` (HSCALE-CAL-2): stored in the convention and shape of the layout's
        global scale (compressed-tensors the divisor ``g = fp32(1/a)``, ModelOpt ``a``). ``a``
        must read back exactly (``fp32(1/fp32(1/a)) == a``), as HSCALE-CAL-2 makes it."""
        stored = self.stored_global_scale(multiplier)
        if self.implied_global_scale(stored) != np.float32(multiplier):
            raise CheckpointError(
                f"{module}{self.input_suffix}: activation multiplier {float(multiplier)!r} "
                f"cannot be stored exactly by {self.name} (spec HSCALE-CAL-2, NVFP4-GS-4)")
        return {self.tensor_names(module)["input"]: self.global_scale_array(stored)}

    # -- configs: subclasses --------------------------------------------------------------
    def config(self, ignore: Iterable[str], version: str) -> dict:
        """The quantization config of a weights-only NVFP4 checkpoint this project writes."""
        raise NotImplementedError

    def detect(self, directory: Path, config: dict) -> CheckpointFormat | None:
        """This layout's reading of a directory's configs (``config``: config.json's), or None
        when they are not this layout's; a CheckpointError when they are but say something
        that is not NVFP4."""
        raise NotImplementedError

    def take_original(self, directory: Path, config: dict) -> dict:
        """Remove this layout's quantization configs from ``directory`` and from ``config``
        (config.json's content, edited in place); returns them keyed by where they were, as
        ``restore`` puts them back."""
        raise NotImplementedError

    def converted_from(self, original: dict) -> dict:
        """The ``converted_from`` record a conversion left in these configs ({} if none)."""
        raise NotImplementedError

    def restore(self, directory: Path, config: dict, kept: dict) -> bool:
        """Put back the configs ``kept`` holds of this layout (a ``converted_from`` record);
        False when it holds none."""
        raise NotImplementedError

    def place_config(self, directory: Path, config: dict, document: dict) -> None:
        """Put ``document`` where this layout keeps its quantization config (``config``:
        config.json's content, edited in place)."""
        raise NotImplementedError

    def write_config(self, directory: Path, ignore: Iterable[str], version: str) -> None:
        """The config of a weights-only checkpoint this project wrote, in ``directory``."""
        config_path = Path(directory) / "config.json"
        config = json.loads(config_path.read_text())
        self.take_original(Path(directory), config)
        self.place_config(Path(directory), config, self.config(ignore, version))
        config_path.write_text(json.dumps(config, indent=2) + "\n")

    def config_findings(self, detected: CheckpointFormat,
                        model: SafetensorsModel) -> tuple[list[str], list[str]]:
        """(problems, notes): what the quantization config says that is not weights-only
        NVFP4 of this layout (problems cite ``self.clause``), and what a reader should know."""
        raise NotImplementedError

    def quantizes_more_than_weights(self, detected: CheckpointFormat) -> str | None:
        """What the config quantizes besides the weights (activations, the KV cache), or None."""
        raise NotImplementedError

    def ignore_entries(self, ignore: Iterable[str], source: "Layout", modules: list[str],
                       quantized) -> list[str]:
        """``source``'s ignore list in this layout's syntax (``modules``: the Linears stored
        unquantized candidates, ``quantized``: those stored quantized)."""
        raise NotImplementedError


#: What ``--scheme`` takes: weights only (the default), or weights and activations.
SCHEMES = ("w4a16", "w4a4")

def reciprocals_of(global_scale) -> list[np.float32]:
    """Every fp32 ``r`` that reads back as the multiplier ``global_scale``
    (``fp32(1 / r) == s_g``, NVFP4-GS-4), nearest to ``1 / s_g`` first: none for about 17% of
    fp32 values, two for as many others, else one. (They lie within an ulp or two of
    ``fp32(1 / s_g)``: the reciprocal map stretches or shrinks fp32 spacing by at most 2.)"""
    canonical = reciprocal_from_multiplier(global_scale)
    candidates = [canonical]
    for direction in (np.float32(0), np.float32(np.inf)):
        neighbour = canonical
        for _ in range(2):
            neighbour = np.nextafter(neighbour, direction)
            candidates.append(neighbour)
    exact = 1 / Fraction(float(np.float32(global_scale)))
    readable = [r for r in candidates if np.isfinite(r) and r > 0
                and multiplier_from_reciprocal(r) == np.float32(global_scale)]
    return sorted(readable, key=lambda r: abs(Fraction(float(r)) - exact))
