"""Mutations of the configs: every field of the compressed-tensors and ModelOpt quantization
configs, the ignore lists, and config.json's shape of the model."""

from __future__ import annotations

import json

from helpers.mutations.files import (GLOBAL_SUFFIX, edit_json, edit_tensors, file_holding,
                                     layout_tag_of, linear_modules, model_config,
                                     quantization_config)
from helpers.mutations.registry import SAFETENSORS, mutation


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


@mutation("config-more-layers", needs_any=SAFETENSORS)
def _(d, rng):
    path, config = model_config(d)
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
    path, config = model_config(d)
    config["num_hidden_layers"] = 1
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:1]
    path.write_text(json.dumps(config))
    return "config.json claims 1 layer"


@mutation("config-other-sizes", needs_any=SAFETENSORS)
def _(d, rng):
    path, config = model_config(d)
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
    path, config = model_config(d)
    config["architectures"] = ["MyPrivateForCausalLM"]
    config["model_type"] = "my_private"
    path.write_text(json.dumps(config))
    return "architecture unknown to transformers"


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
    path, config = model_config(d)
    config["my_note"] = {"made by": "a user"}
    path.write_text(json.dumps(config))
    hf = d / "hf_quant_config.json"
    if hf.exists():
        edit_json(hf, lambda doc: doc.__setitem__("comment", "kept"))
    return "unrelated keys added to the configs"


# -- every config field a reader consults: removed, renamed, or of another JSON type ------------

#: The model config fields ``hscale check`` (the architecture it declares) and ``hscale convert
#: --to gguf`` (the hyperparameters llama.cpp reads) consult.
MODEL_FIELDS = ("model_type", "architectures", "num_hidden_layers", "hidden_size",
                "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size")
#: The quantization fields the layouts read: compressed-tensors' group weights, ModelOpt's.
CT_WEIGHT_FIELDS = ("num_bits", "type", "group_size", "strategy")
MODELOPT_FIELDS = ("quant_algo", "group_size")


def _retyped(value, rng):
    """A JSON value of another type than ``value``'s that a careless reader might still take."""
    if isinstance(value, bool):
        return rng.choice(["true", 1])
    if isinstance(value, int):
        return rng.choice([str(value), float(value) + 0.5, [value]])
    if isinstance(value, str):
        return rng.choice([7, [value], {"name": value}])
    if isinstance(value, list):
        return rng.choice([",".join(map(str, value)), len(value)])
    return rng.choice(["x", 1])


def _shapes(config: dict) -> dict | None:
    """The tensor shapes transformers builds from ``config`` (on the meta device), or None."""
    import torch
    import transformers
    try:
        built = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = transformers.AutoModel.from_config(built)
    except Exception:  # noqa: BLE001 - a config transformers cannot build
        return None
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _changes_the_model(config: dict, key: str) -> bool:
    """Removing ``key`` changes what transformers builds (its default is another value, and
    the architecture uses it: a MoE model's dense intermediate_size may be unused); the two
    naming fields always matter to loaders."""
    if key in ("model_type", "architectures"):
        return True
    before = _shapes(config)
    return before is None or _shapes({k: v for k, v in config.items() if k != key}) != before


@mutation("config-read-field-removed", needs_any=SAFETENSORS)
def _(d, rng):
    """A config field a reader consults removed, or renamed (a letter changed) so that no
    reader finds it; never one whose removal leaves the model transformers builds unchanged
    (its value the class's default, or a field the architecture does not use)."""
    path, config = model_config(d)
    key = rng.choice([k for k in MODEL_FIELDS if k in config and _changes_the_model(config, k)])
    value = config.pop(key)
    if rng.random() < 0.5:
        config[key[:-1] + "#"] = value
    path.write_text(json.dumps(config))
    return f"config.json {key} removed"


@mutation("config-read-field-retyped", needs_any=SAFETENSORS)
def _(d, rng):
    path, config = model_config(d)
    key = rng.choice([k for k in MODEL_FIELDS if k in config])
    config[key] = _retyped(config[key], rng)
    path.write_text(json.dumps(config))
    return f"config.json {key} = {config[key]!r}"


@mutation("quant-read-field-removed-or-retyped", needs_any=SAFETENSORS)
def _(d, rng):
    """A quantization field a layout consults removed or of another JSON type."""
    path, quant, save = quantization_config(d)
    if "config_groups" in quant:
        holder = quant["config_groups"][rng.choice(sorted(quant["config_groups"]))]["weights"]
        key = rng.choice([k for k in CT_WEIGHT_FIELDS if k in holder])
    else:
        holder = quant
        key = rng.choice([k for k in MODELOPT_FIELDS if k in holder])
    if rng.random() < 0.5:
        holder.pop(key)
        said = "removed"
    else:
        holder[key] = _retyped(holder[key], rng)
        said = f"= {holder[key]!r}"
    save()
    return f"quantization {key} {said}"
