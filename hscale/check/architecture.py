"""The checkpoint against the model its own config declares (NVFP4-CKPT-6).

The architecture a checkpoint's config names is built on the meta device (from config.json, or
for a GGUF file from its metadata through transformers' GGUF config reader): its Linears and
MoE experts' matrices, its tied head, and every tensor ``save_pretrained`` writes for it with
its shape. Against them: every matmul stored quantized (checked tensor by tensor elsewhere),
or unquantized and ignored, or a tied head left out; nothing quantized that the architecture
does not declare or that no config group targets; every other tensor present with its shape.
So a config claiming more layers, another hidden size or another number of experts than the
tensors hold is named, tensor by tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hscale.checkpoints.inputs import ConfigDoesNotBuild
from hscale.judge.findings import Finding, plural

from .report import Problem, counted

CLAUSE = "NVFP4-CKPT-6"
#: Findings listed per kind; the rest are counted.
LISTED = 8


@dataclass
class DeclaredModel:
    """What a checkpoint's config declares: ``source`` says which config, in words."""

    source: str
    matmuls: dict  # checkpoint module -> (out, in): every Linear and every expert's matrix
    tied: dict = field(default_factory=dict)  # head module -> the tensor it shares
    shapes: dict = field(default_factory=dict)  # every tensor save_pretrained writes -> shape
    #: Stored names a loader of this architecture drops without a word: its buffers (which it
    #: computes itself, as BERT's position_ids) and its class's keys to ignore on load.
    ignorable: tuple = ()


def declared_model(checkpoint: Path, model) -> DeclaredModel:
    """The model ``checkpoint``'s config declares (``model``: its tensors, a GGUF file's reader
    for its metadata). ValueError (or ImportError) when no architecture can be built from it
    (unknown to transformers, or no config: a note); ConfigDoesNotBuild when the config names
    a known architecture that cannot be built from it (a finding)."""
    from hscale.models.architecture import saved_tensor_shapes
    from hscale.models.inventory import inventory
    if checkpoint.is_dir():
        meta, source = _meta_from_directory(checkpoint)
        found = inventory(checkpoint, meta)
    else:
        meta, source = _meta_from_gguf(model)
        found = inventory(checkpoint, meta)
    buffers = [re.escape(name) for name, owner in found.owners.items()
               if owner.startswith("buffer ")]
    ignored_keys = list(getattr(meta, "_keys_to_ignore_on_load_unexpected", None) or [])
    return DeclaredModel(source, found.matmuls(), dict(found.tied), saved_tensor_shapes(meta),
                         tuple(f"^{b}$" for b in buffers) + tuple(ignored_keys))


def _meta_from_directory(directory: Path):
    """The meta model of config.json: a ValueError when transformers does not know the
    architecture it names (a note), ConfigDoesNotBuild when it knows it but cannot build it
    from this config (a finding)."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from hscale.checkpoints.inputs import read_json
    from hscale.models.loading import quiet_transformers
    if not (directory / "config.json").is_file():
        raise ValueError("the directory has no config.json")
    document = read_json(directory / "config.json")  # a JSON object: detect_format saw to it
    model_type, names = document.get("model_type"), document.get("architectures")
    # the two fields loaders pick the model by (transformers' AutoConfig: model_type; vLLM
    # and from_pretrained's class: architectures): absent or of another type, a finding
    if not isinstance(model_type, str):
        raise ConfigDoesNotBuild("config.json's model_type is " + (
            "missing" if model_type is None else f"{model_type!r}, not a string") +
            ": transformers' AutoConfig picks the configuration class by it")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigDoesNotBuild("config.json's architectures is " + (
            "missing" if names is None else f"{names!r}, not a list of class names") +
            ": engines (vLLM, from_pretrained's class) pick the model class by it")
    classes = [getattr(transformers, n, None) for n in names]
    cls = next((c for c in classes if c is not None), None)
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING or cls is None:
        raise ValueError(f"config.json's model_type {model_type!r} and architectures "
                         f"{names!r} are not ones transformers {transformers.__version__} knows")
    try:
        with quiet_transformers():
            config = transformers.AutoConfig.from_pretrained(directory)
        with torch.device("meta"), quiet_transformers():
            meta = cls(config)
    except Exception as exc:  # noqa: BLE001 - any failure of a known class is the config's
        raise ConfigDoesNotBuild(f"config.json names {cls.__name__}, which transformers "
                                 f"{transformers.__version__} cannot build from it "
                                 f"({_first_line(exc)})") from None
    return meta, f"config.json ({cls.__name__}, {_counts(config)})"


def _meta_from_gguf(model):
    meta = model.meta_model()
    return meta, f"the GGUF metadata ({type(meta).__name__}, {_counts(meta.config)})"


def _counts(config) -> str:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    parts = [f"{key} {getattr(text, key)}" for key in
             ("num_hidden_layers", "hidden_size", "num_experts", "num_local_experts")
             if isinstance(getattr(text, key, None), int)]
    return ", ".join(parts)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def architecture_problems(declared: DeclaredModel, detected, model, modules: dict) -> list:
    """Findings (Problems) of the tensors against the declared model: matmuls missing or of
    another shape, quantized modules it does not declare or no config group targets, other
    tensors missing or of another shape. (A stored unquantized Linear that the ignore list
    does not name, and each quantized Linear's own tensors, are judged elsewhere.)"""
    layout = detected.layout
    problems = []
    missing, wrong_shape, undeclared, untargeted = [], [], [], []
    for module, shape in declared.matmuls.items():
        if module in modules:
            continue
        info = model.info.get(f"{module}.weight")
        if info is None:
            if module not in declared.tied:
                missing.append((f"{module}.weight", f"missing: {declared.source} declares the "
                                f"{shape[0]}x{shape[1]} Linear {module}, stored neither "
                                f"quantized ({layout.tensor_names(module)['packed']}) nor as a "
                                "weight: a loader finds nothing to load"))
        elif info.shape != tuple(shape):
            wrong_shape.append((info.name, f"shape {info.shape}, {declared.source} declares "
                                f"{tuple(shape)} for this Linear"))
    for module in modules:
        if module not in declared.matmuls:
            undeclared.append((module, f"stored quantized, but {declared.source} declares no "
                               "such Linear: a loader has nowhere to put it"))
        elif detected.targets is not None and _target_of(module, detected.targets,
                                                         declared) is None:
            untargeted.append((module, f"stored quantized, but no config group targets it "
                               f"(targets {detected.targets}): a loader expects it "
                               "unquantized"))
    weights = {f"{m}.weight" for m in declared.matmuls}
    for name, shape in declared.shapes.items():
        if name in weights:
            continue
        info = model.info.get(name)
        if info is None:
            missing.append((name, f"missing: {declared.source} has this tensor of shape "
                            f"{tuple(shape)}"))
        elif info.shape != tuple(shape):
            wrong_shape.append((name, f"shape {info.shape}, {declared.source} declares "
                                f"{tuple(shape)}"))
    for found in (missing, wrong_shape, undeclared, untargeted):
        for tensor, text in found[:LISTED]:
            problems.append(Problem(tensor, Finding(CLAUSE, text, kind="architecture")))
        if len(found) > LISTED:
            problems.append(counted(found[LISTED][0], CLAUSE, len(found) - LISTED))
    return problems


#: Per-layer scales of activation or KV-cache quantization, which a weights-only checkpoint may
#: carry for its engine: named in a note, not judged.
RUN_TIME_SCALES = (".input_scale", ".input_global_scale", ".output_scale", ".k_scale",
                   ".v_scale")


def unknown_tensors(declared: DeclaredModel, detected, model, modules: dict) -> tuple[list, str]:
    """(findings, note) of the stored tensors the declared model does not have and that belong
    to no quantized Linear: each a finding (a loader drops it, or refuses it; either way the
    checkpoint is not the model its config says), but activation and KV-cache scales, which
    get a note."""
    known = set(declared.shapes) | {f"{m}.weight" for m in declared.matmuls}
    for module in modules:
        known.update(detected.layout.tensor_names(module).values())
    unknown = [name for name in model.info if name not in known
               and not any(re.search(pattern, name) for pattern in declared.ignorable)]
    scales = [name for name in unknown if name.endswith(RUN_TIME_SCALES)]
    others = [name for name in unknown if name not in scales]
    problems = [Problem(name, Finding(CLAUSE, f"stored, but {declared.source} has no such "
                                      "tensor and it belongs to no quantized Linear: a loader "
                                      "drops it or refuses it", kind="architecture"))
                for name in others[:LISTED]]
    if len(others) > LISTED:
        problems.append(counted(others[LISTED], CLAUSE, len(others) - LISTED))
    note = (f"{plural(len(scales), 'activation or KV-cache scale')} beside weights-only "
            f"quantized Linears (first {scales[0]}): not judged" if scales else "")
    return problems, note


def _target_of(module: str, targets: list, declared: DeclaredModel) -> str | None:
    """The first compressed-tensors target naming ``module``: the class ``Linear`` (every
    Linear and expert matrix), its name, or ``re:`` a regular expression matched at its start
    (compressed-tensors' ``is_match``)."""
    for target in targets:
        if target == "Linear" and module in declared.matmuls:
            return target
        if target.startswith("re:") and re.match(target[3:], module):
            return target
        if target == module:
            return target
    return None
