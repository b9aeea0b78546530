"""The NVFP4 checkpoint layouts engines load, one class each (docs/spec.md NVFP4-CKPT-1, -2;
sources in docs/checkpoints.md).

* **compressed-tensors** ``nvfp4-pack-quantized`` (llm-compressor writes it, vLLM and SGLang
  load it): per quantized Linear ``X``, ``X.weight_packed`` uint8 (out, in/2),
  ``X.weight_scale`` float8_e4m3fn (out, in/16), ``X.weight_global_scale`` float32 (1,) holding
  the *reciprocal* ``r = fp32(1/s_g)`` (NVFP4-GS-4); ``quantization_config`` in config.json.
* **modelopt** (ModelOpt's NVFP4 export; TensorRT-LLM, vLLM and SGLang load it): ``X.weight``
  uint8 (out, in/2), ``X.weight_scale`` float8_e4m3fn (out, in/16), ``X.weight_scale_2``
  float32 () holding the *multiplier* s_g; ``hf_quant_config.json`` beside config.json.

Everything that differs between them is a method or an attribute of its class: the tensor
names, the global scale's convention and shape, where the quantization config lives and what it
must say, its ignore list's syntax. The code that reads, writes, checks or converts checkpoints
asks the layout and never names one.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

from hscale.reference import GROUP_SIZE

from .layout_base import (CONVERTED_FROM, CT_FORMAT_NAME, CT_NVFP4_INPUTS, CT_NVFP4_WEIGHTS,
                          MODELOPT_CONFIG, MODELOPT_NVFP4_ALGOS, CheckpointFormat, Layout)
from .safetensors import CheckpointError


class CompressedTensors(Layout):
    name = "compressed-tensors"
    clause = "NVFP4-CKPT-1"
    suffixes = {"packed": ".weight_packed", "scale": ".weight_scale",
                "global": ".weight_global_scale"}
    input_suffix = ".input_global_scale"
    global_shape = (1,)
    stores_reciprocal = True
    config_file = "config.json"
    ignore_key = "ignore"

    def module_of(self, name, info):
        if name.endswith(self.suffixes["packed"]):
            return name[: -len(self.suffixes["packed"])]
        return super().module_of(name, info)

    def config(self, ignore, version):
        """config.json's ``quantization_config`` for NVFP4A16 (weights NVFP4, activations
        kept), as llm-compressor writes it; for W4A4 its preset ``NVFP4``, whose
        ``input_activations`` are NVFP4 groups of 16 quantized per token at run time
        (``dynamic: local``) under each Linear's stored ``input_global_scale``."""
        extra = {"actorder": None, "block_structure": None, "observer_kwargs": {}}
        weights = {**CT_NVFP4_WEIGHTS, "dynamic": False, "observer": "minmax", **extra}
        inputs = ({**CT_NVFP4_INPUTS, "observer": "static_minmax", **extra}
                  if self.activations else None)
        return {
            "quant_method": "compressed-tensors",
            "format": CT_FORMAT_NAME,
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": inputs,
                                          "output_activations": None,
                                          "format": CT_FORMAT_NAME}},
            "ignore": sorted(ignore),
            "kv_cache_scheme": None,
            "global_compression_ratio": None,
            "sparsity_config": {},
            "producer": {"name": "hscale-nvfp4", "version": version},
        }

    def detect(self, directory, config):
        quant = config.get("quantization_config") or {}
        if quant.get("quant_method") != "compressed-tensors":
            return None
        if quant.get("format") != CT_FORMAT_NAME:
            raise CheckpointError(f"{directory / 'config.json'}: compressed-tensors format "
                                  f"{quant.get('format')!r}, not {CT_FORMAT_NAME!r} (NVFP4)")
        w4a4 = any(_is_nvfp4_inputs(g.get("input_activations")) for g in
                   (quant.get("config_groups") or {}).values() if isinstance(g, dict))
        return CheckpointFormat(self.with_scheme("w4a4" if w4a4 else "w4a16"),
                                list(quant.get("ignore") or []), quant)

    def take_original(self, directory, config):
        return {"quantization_config": config.pop("quantization_config", None)}

    def converted_from(self, original):
        return (original.get("quantization_config") or {}).get(CONVERTED_FROM) or {}

    def restore(self, directory, config, kept):
        if kept.get("format") != self.name or "quantization_config" not in kept:
            return False
        config["quantization_config"] = kept["quantization_config"]
        return True

    def place_config(self, directory, config, document):
        config["quantization_config"] = document

    def config_findings(self, detected, model):
        problems, notes = [], []
        config = detected.config
        if config.get("quantization_status", "compressed") != "compressed":
            problems.append(f"quantization_status {config.get('quantization_status')!r}: a "
                            "checkpoint with packed codes says 'compressed'")
        groups = config.get("config_groups") or {}
        if not groups:
            problems.append("quantization_config has no config_groups: nothing says the "
                            "weights are NVFP4")
        for name, group in groups.items():
            weights = (group or {}).get("weights") if isinstance(group, dict) else None
            if not weights:
                problems.append(f"config group {name!r} has no weights quantization")
                continue
            for key, value in CT_NVFP4_WEIGHTS.items():
                if weights.get(key) != value:
                    problems.append(f"config group {name!r}: weights {key} "
                                    f"{weights.get(key)!r}, NVFP4 is {value!r}")
            if group.get("format") not in (None, CT_FORMAT_NAME):
                problems.append(f"config group {name!r}: format {group.get('format')!r}, not "
                                f"{CT_FORMAT_NAME!r}")
            inputs = group.get("input_activations")
            if inputs and self.activations:
                for key, value in CT_NVFP4_INPUTS.items():
                    if inputs.get(key) != value:
                        problems.append(f"config group {name!r}: input_activations {key} "
                                        f"{inputs.get(key)!r}, NVFP4 W4A4 is {value!r} "
                                        "(NVFP4-CKPT-4)")
            elif inputs:
                notes.append(f"config group {name!r} quantizes activations too: only the "
                             "weights are checked")
        return problems, notes

    def quantizes_more_than_weights(self, detected):
        for name, group in (detected.config.get("config_groups") or {}).items():
            if isinstance(group, dict) and group.get("input_activations") and not (
                    self.activations and _is_nvfp4_inputs(group["input_activations"])):
                return f"config group {name!r} quantizes activations (not as NVFP4 W4A4)"
        if detected.config.get("kv_cache_scheme"):
            return "a kv_cache_scheme quantizes the KV cache"
        return None

    def ignore_entries(self, ignore, source, modules, quantized):
        """Names stay; a glob becomes ``re:`` its regular expression (compressed-tensors'
        entries are names or ``re:`` expressions)."""
        if source.name == self.name:
            return list(ignore)
        return [f"re:{fnmatch.translate(p)}" if any(c in p for c in "*?[") else p
                for p in ignore]


class ModelOpt(Layout):
    name = "modelopt"
    clause = "NVFP4-CKPT-2"
    suffixes = {"packed": ".weight", "scale": ".weight_scale", "global": ".weight_scale_2"}
    input_suffix = ".input_scale"
    global_shape = ()
    stores_reciprocal = False
    config_file = MODELOPT_CONFIG
    ignore_key = "exclude_modules"

    def module_of(self, name, info):
        # a .weight stored as uint8 is packed codes: no other Linear weight is uint8
        if name.endswith(".weight") and info.dtype == "U8":
            return name[: -len(".weight")]
        return super().module_of(name, info)

    def config(self, ignore, version):
        """``hf_quant_config.json`` of a ModelOpt NVFP4 export: of the weights only, ModelOpt's
        and vLLM's name for it is W4A16_NVFP4; W4A4 is ``NVFP4``, and a loader then reads each
        Linear's ``input_scale`` (NVFP4-CKPT-4)."""
        algo = "NVFP4" if self.activations else "W4A16_NVFP4"
        return {"producer": {"name": "hscale-nvfp4", "version": version},
                "quantization": {"quant_algo": algo, "group_size": GROUP_SIZE,
                                 "exclude_modules": sorted(ignore), "kv_cache_quant_algo": None}}

    def detect(self, directory, config):
        path = directory / MODELOPT_CONFIG
        if path.is_file():
            try:
                document = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise CheckpointError(f"{path}: unreadable ({exc})") from None
            quant = document.get("quantization") or {}
            if quant.get("quant_algo") not in MODELOPT_NVFP4_ALGOS:
                raise CheckpointError(f"{path}: quant_algo {quant.get('quant_algo')!r}, not one "
                                      f"of {', '.join(MODELOPT_NVFP4_ALGOS)}")
            return CheckpointFormat(self._for_algo(quant.get("quant_algo")),
                                    list(quant.get("exclude_modules") or []), document,
                                    MODELOPT_CONFIG)
        quant = config.get("quantization_config") or {}
        if quant.get("quant_method") != "modelopt":
            return None
        if quant.get("quant_algo") not in MODELOPT_NVFP4_ALGOS:
            raise CheckpointError(f"{directory / 'config.json'}: modelopt quant_algo "
                                  f"{quant.get('quant_algo')!r}, not one of "
                                  f"{', '.join(MODELOPT_NVFP4_ALGOS)}")
        return CheckpointFormat(self._for_algo(quant.get("quant_algo")),
                                list(quant.get("exclude_modules") or []), quant)

    def _for_algo(self, algo) -> "Layout":
        """``NVFP4`` is ModelOpt's W4A4 (an ``input_scale`` per Linear, NVFP4-CKPT-4)."""
        return self.with_scheme("w4a4" if algo == "NVFP4" else "w4a16")

    def take_original(self, directory, config):
        path = directory / MODELOPT_CONFIG
        original = {"hf_quant_config": json.loads(path.read_text()) if path.is_file() else None}
        path.unlink(missing_ok=True)
        in_config = config.pop("quantization_config", None)
        if in_config is not None:  # a ModelOpt export may say it in config.json too
            original["config_quantization_config"] = in_config
        return original

    def converted_from(self, original):
        document = original.get("hf_quant_config") or original.get("config_quantization_config")
        return (document or {}).get(CONVERTED_FROM) or {}

    def restore(self, directory, config, kept):
        if kept.get("format") != self.name or "hf_quant_config" not in kept:
            return False
        if kept["hf_quant_config"] is not None:
            self.place_config(directory, config, kept["hf_quant_config"])
        if "config_quantization_config" in kept:
            config["quantization_config"] = kept["config_quantization_config"]
        return True

    def place_config(self, directory, config, document):
        (directory / MODELOPT_CONFIG).write_text(json.dumps(document, indent=2) + "\n")

    def config_findings(self, detected, model):
        problems, notes = [], []
        quant = detected.config.get("quantization", detected.config)
        if quant.get("group_size") != GROUP_SIZE:
            problems.append(f"group_size {quant.get('group_size')!r}, NVFP4 is {GROUP_SIZE}")
        if quant.get("quant_algo") == "NVFP4" and not any(
                name.endswith(".input_scale") for name in model.info):
            problems.append(f"{detected.config_name} says quant_algo NVFP4, ModelOpt's W4A4 "
                            "recipe, but no input_scale tensors are stored: a loader that "
                            "quantizes activations finds no scales for them (NVFP4-CKPT-4; "
                            "ModelOpt names weights-only NVFP4 W4A16_NVFP4)")
        return problems, notes

    def quantizes_more_than_weights(self, detected):
        if (detected.config.get("quantization") or detected.config).get("kv_cache_quant_algo"):
            return "kv_cache_quant_algo is set: the KV cache is quantized"
        return None

    def ignore_entries(self, ignore, source, modules, quantized):
        """Names and fnmatch patterns stay; each ``re:`` expression is replaced by the
        unquantized modules it matches (ModelOpt's entries are fnmatch patterns)."""
        out = []
        for entry in ignore:
            if entry.startswith("re:"):
                out += [m for m in modules if m not in quantized and re.match(entry[3:], m)]
            else:
                out.append(entry)
        return list(dict.fromkeys(out))


def _is_nvfp4_inputs(inputs) -> bool:
    """Whether a compressed-tensors ``input_activations`` entry says NVFP4 groups of 16 (the
    preset ``NVFP4``'s): 4-bit floats, tensor_group (vLLM's ``_is_fp4a4_nvfp4`` reads no more)."""
    return isinstance(inputs, dict) and all(inputs.get(k) == CT_NVFP4_WEIGHTS[k] for k in
                                            ("num_bits", "type", "strategy", "group_size"))


#: Every layout, by name: the choices of ``--format`` and ``--to``.
LAYOUTS = {layout.name: layout for layout in (CompressedTensors(), ModelOpt())}
FORMATS = tuple(LAYOUTS)


def layout_named(name, scheme: str | None = None) -> Layout:
    """The layout called ``name`` (a Layout is returned as it is), for ``scheme`` when given
    (``w4a16``, ``w4a4``), or a CheckpointError."""
    if isinstance(name, Layout):
        return name if scheme is None else name.with_scheme(scheme)
    if name not in LAYOUTS:
        raise CheckpointError(f"format {name!r}: one of {', '.join(FORMATS)}")
    return LAYOUTS[name] if scheme is None else LAYOUTS[name].with_scheme(scheme)


def detect_format(directory) -> CheckpointFormat:
    """The NVFP4 layout of a checkpoint directory, from its configs, or a CheckpointError."""
    directory = Path(directory)
    config_path = directory / "config.json"
    config = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{config_path}: unreadable ({exc})") from None
    for layout in LAYOUTS.values():
        detected = layout.detect(directory, config)
        if detected is not None:
            return detected
    raise CheckpointError(f"{directory}: not an NVFP4 checkpoint (no compressed-tensors "
                          f"quantization_config in config.json, no {MODELOPT_CONFIG})")
