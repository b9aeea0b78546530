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

from .inputs import CheckpointError, field, json_type, read_json, string_list
from .layout_base import (CONVERTED_FROM, CT_ARGUMENT_DEFAULTS, CT_FORMAT_NAME, CT_NVFP4_INPUTS,
                          CT_NVFP4_WEIGHTS, CT_PRESETS, MODELOPT_CONFIG, MODELOPT_NVFP4_ALGOS,
                          CheckpointFormat, Layout)


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
        where = directory / "config.json"
        quant = field(config, "quantization_config", (dict, type(None)), where,
                      clause=self.clause)
        if not quant:
            return None
        where = f"{where}: quantization_config"
        if field(quant, "quant_method", (str, type(None)), where) != "compressed-tensors":
            return None
        if quant.get("format") != CT_FORMAT_NAME:
            raise CheckpointError(f"{directory / 'config.json'}: compressed-tensors format "
                                  f"{quant.get('format')!r}, not {CT_FORMAT_NAME!r} (NVFP4)")
        groups = config_groups(quant, where)
        ignore = module_patterns(quant, "ignore", where, self.clause)
        # W4A4 when a group quantizes inputs at all: its fields are then judged against
        # NVFP4-CKPT-4's, so a group that quantizes them otherwise is a finding, not a pass.
        w4a4 = any(group["input_activations"] is not None for group in groups.values())
        return CheckpointFormat(self.with_scheme("w4a4" if w4a4 else "w4a16"), ignore, quant,
                                targets=[t for g in groups.values() for t in g["targets"]])

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
        """The quantization config against NVFP4-CKPT-1 (and -4 for W4A4): status compressed,
        every group's weights 4-bit floats in static tensor_group groups of 16, symmetric, its
        inputs absent or NVFP4 W4A4's, no outputs; an absent field read as compressed-tensors
        reads it (its defaults: status initialized, 8 bits, int, symmetric, static)."""
        problems, notes = [], []
        config = detected.config
        status = config.get("quantization_status")
        if status != "compressed":
            read_as = " (absent: compressed-tensors reads 'initialized')" if status is None else ""
            problems.append(f"quantization_status {status!r}{read_as}: a checkpoint of packed "
                            "codes says 'compressed' (else a loader expects weights still to "
                            "be compressed)")
        groups = config_groups(config, detected.config_name)
        if not groups:
            problems.append("quantization_config has no config_groups: nothing says the "
                            "weights are NVFP4")
        for name, group in groups.items():
            if not group["targets"]:
                problems.append(f"config group {name!r} targets nothing")
            weights = group["weights"]
            if weights is None:
                problems.append(f"config group {name!r} has no weights quantization")
                continue
            problems += _argument_findings(name, "weights", weights,
                                           {**CT_NVFP4_WEIGHTS, "dynamic": False},
                                           "NVFP4 is")
            if group["format"] not in (None, CT_FORMAT_NAME):
                problems.append(f"config group {name!r}: format {group['format']!r}, not "
                                f"{CT_FORMAT_NAME!r}")
            if group["input_activations"] is not None:
                problems += _argument_findings(name, "input_activations",
                                               group["input_activations"], CT_NVFP4_INPUTS,
                                               "NVFP4 W4A4 (NVFP4-CKPT-4) is")
            elif self.activations:
                problems.append(f"config group {name!r} quantizes no inputs, where the other "
                                "groups quantize them (NVFP4-CKPT-4)")
            if group["output_activations"] is not None:
                problems.append(f"config group {name!r} quantizes output_activations: an NVFP4 "
                                "checkpoint quantizes weights (and for W4A4 inputs), which is "
                                "all a loader of nvfp4-pack-quantized reads")
        if config.get("kv_cache_scheme"):
            notes.append("a kv_cache_scheme quantizes the KV cache: not judged here")
        return problems, notes

    def quantizes_more_than_weights(self, detected):
        for name, group in config_groups(detected.config, detected.config_name).items():
            inputs = group["input_activations"]
            if inputs is not None and _argument_findings(name, "input_activations", inputs,
                                                         CT_NVFP4_INPUTS, ""):
                return f"config group {name!r} quantizes activations (not as NVFP4 W4A4)"
            if group["output_activations"] is not None:
                return f"config group {name!r} quantizes output activations"
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
        if path.exists():
            document = read_json(path)
            quant = self.quantization(document, path)
            return CheckpointFormat(self._for_algo(self._algo(quant, path)),
                                    module_patterns(quant, "exclude_modules",
                                                    f"{path}: quantization", self.clause),
                                    document, MODELOPT_CONFIG)
        where = directory / "config.json"
        quant = field(config, "quantization_config", (dict, type(None)), where,
                      clause=self.clause)
        if not quant or field(quant, "quant_method", (str, type(None)),
                              f"{where}: quantization_config") != "modelopt":
            return None
        return CheckpointFormat(self._for_algo(self._algo(quant, where)),
                                module_patterns(quant, "exclude_modules",
                                                f"{where}: quantization_config", self.clause),
                                quant)

    def quantization(self, document, where) -> dict:
        """The quantization settings of a ModelOpt config: hf_quant_config.json's
        ``quantization`` object, or config.json's ``quantization_config`` itself."""
        if isinstance(document, dict) and "quant_method" in document:
            return document
        quant = field(document, "quantization", dict, where, clause=self.clause)
        if quant is None:
            raise CheckpointError(f"{where}: has no quantization object (spec {self.clause})")
        return quant

    def _algo(self, quant: dict, where) -> str:
        algo = quant.get("quant_algo")
        if algo not in MODELOPT_NVFP4_ALGOS:
            raise CheckpointError(f"{where}: quant_algo {algo!r}, not one of "
                                  f"{', '.join(MODELOPT_NVFP4_ALGOS)}")
        return algo

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
        quant = self.quantization(detected.config, detected.config_name)
        group_size = quant.get("group_size")
        if group_size != GROUP_SIZE or type(group_size) is not int:
            problems.append(f"group_size {group_size!r}, NVFP4 is {GROUP_SIZE}")
        if quant.get("quant_algo") == "NVFP4" and not any(
                name.endswith(".input_scale") for name in model.info):
            problems.append(f"{detected.config_name} says quant_algo NVFP4, ModelOpt's W4A4 "
                            "recipe, but no input_scale tensors are stored: a loader that "
                            "quantizes activations finds no scales for them (NVFP4-CKPT-4; "
                            "ModelOpt names weights-only NVFP4 W4A16_NVFP4)")
        if quant.get("kv_cache_quant_algo"):
            notes.append(f"kv_cache_quant_algo {quant['kv_cache_quant_algo']!r} quantizes the KV "
                         "cache: not judged here")
        return problems, notes

    def quantizes_more_than_weights(self, detected):
        if self.quantization(detected.config, detected.config_name).get("kv_cache_quant_algo"):
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


def config_groups(quant: dict, where) -> dict:
    """name -> {targets, weights, input_activations, output_activations, format} of a
    compressed-tensors ``config_groups``, their JSON types checked (a wrong one is a
    CheckpointError naming the field); a group given as a preset's name and its targets
    (``"NVFP4A16": ["Linear"]``) is the preset's scheme."""
    groups = field(quant, "config_groups", (dict, type(None)), where) or {}
    out = {}
    for name, group in groups.items():
        place = f"{where}.config_groups.{name}"
        if isinstance(group, list):  # compressed-tensors' preset form: name -> targets
            preset = CT_PRESETS.get(name)
            targets = module_patterns({"targets": group}, "targets", place)
            out[name] = {"targets": targets, "format": None, "output_activations": None,
                         **(preset or {"weights": {"preset": name}, "input_activations": None})}
            continue
        if not isinstance(group, dict):
            raise CheckpointError(f"{place}: is {json_type(group)}, where a quantization scheme "
                                  "(an object) or a list of targets belongs")
        out[name] = {"targets": module_patterns(group, "targets", place),
                     "format": group.get("format")}
        for key in ("weights", "input_activations", "output_activations"):
            out[name][key] = field(group, key, (dict, type(None)), place)
    return out


def module_patterns(document: dict, key: str, where, clause: str = "") -> list[str]:
    """A list of module names or patterns (an ignore list, targets): strings, each ``re:``
    entry a regular expression Python compiles."""
    patterns = string_list(document, key, where, clause)
    for i, pattern in enumerate(patterns):
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as exc:
                raise CheckpointError(f"{where}: {key}[{i}] {pattern!r} is not a regular "
                                      f"expression ({exc})") from None
    return patterns


def _argument_findings(group: str, role: str, arguments: dict, wanted: dict,
                       says: str) -> list[str]:
    """A compressed-tensors QuantizationArgs against ``wanted``, an absent key read as
    compressed-tensors reads it (CT_ARGUMENT_DEFAULTS); a value of another JSON type than the
    wanted one (``"16"`` for 16, ``1`` for true) is a finding too."""
    problems = []
    if "preset" in arguments:
        return [f"config group {group!r}: the preset {arguments['preset']!r}, which is not "
                "NVFP4's (NVFP4A16 or NVFP4)"]
    for key, value in wanted.items():
        found = arguments.get(key, CT_ARGUMENT_DEFAULTS.get(key))
        if found != value or type(found) is not type(value):
            absent = f" (absent: read as {found!r})" if key not in arguments else ""
            problems.append(f"config group {group!r}: {role} {key} {arguments.get(key)!r}"
                            f"{absent}, {says} {value!r}")
    return problems


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
    if config_path.exists():
        config = read_json(config_path)
        if not isinstance(config, dict):
            raise CheckpointError(f"{config_path}: is {json_type(config)}, where a model's "
                                  "config (a JSON object) belongs")
    for layout in LAYOUTS.values():
        detected = layout.detect(directory, config)
        if detected is not None:
            return detected
    raise CheckpointError(f"{directory}: not an NVFP4 checkpoint (no compressed-tensors "
                          f"quantization_config in config.json, no {MODELOPT_CONFIG})")
