"""``hscale convert``: an NVFP4 checkpoint from one layout to the other, losslessly.

compressed-tensors (NVFP4-CKPT-1) and ModelOpt (NVFP4-CKPT-2) store the same codes and scale
bytes under other names, and the global scale in two conventions: the reciprocal ``r`` and the
multiplier ``s_g`` (NVFP4-GS-4). So a conversion

* copies every packed code byte and scale byte unchanged, and every other tensor (embeddings,
  norms, biases, unquantized Linears) and side file as it is;
* converts the global scale exactly: ``s_g = fp32(1 / r)`` is what a compressed-tensors file
  means, so ModelOpt gets that ``s_g``; the other way, a multiplier is written as a reciprocal
  only if some fp32 ``r`` reads back as it. For about 17% of fp32 values none does; those layers
  are listed and refused, unless ``--requantize`` (below). Where two reciprocals read back as
  the same ``s_g``, the one the source stored is kept (a ModelOpt file written by this command
  records it in its safetensors metadata), so compressed-tensors -> ModelOpt ->
  compressed-tensors gives back every tensor byte for byte;
* gives fused layers (q/k/v, gate/up, MoE w1/w3, NVFP4-CKPT-3) one global scale, the largest
  of the set, by rescaling the scale bytes of the others, only where that is exact: every byte
  times the ratio of the two scales lands exactly on an E4M3 value, so every element decodes to
  the same value. Otherwise the layers are listed and refused, unless ``--requantize``;
* carries a W4A4 checkpoint's activation scales (NVFP4-CKPT-4) by the same rule as global
  scales: the multiplier ``a`` a compressed-tensors ``input_global_scale`` means is
  ``fp32(1 / g)`` (NVFP4-GS-4), ModelOpt's ``input_scale`` is ``a`` itself; the other way, the
  reciprocal that reads back as ``a`` (the one the source stored, recorded in the metadata,
  where two do). An ``a`` no fp32 reciprocal reads back as is refused, naming the tensor (an
  activation scale is never moved). So compressed-tensors -> ModelOpt -> compressed-tensors
  gives back every tensor byte for byte, W4A4 included;
* rewrites the configs (``quantization_config`` in config.json <-> hf_quant_config.json), the
  source's own config kept under ``converted_from`` so that converting back restores it.

``--requantize`` requantizes the layers that cannot be converted exactly from their decoded
weights (NVFP4-DEQ-1) at the target's global scale: each group's scale byte is the E4M3
rounding of its old value times the ratio of the scales (NVFP4-E4M3-2), each code the rounding
of the decoded weight at that byte (NVFP4-E2M1-2); how many bytes, codes and weights changed is
reported per layer.

A GGUF file converts too (NVFP4-GGUF-1): its multiplier ``.scale`` is a ModelOpt-like global
scale, and config.json and the tokenizer come from its metadata (``convert_configs``).

The output is written like ``hscale quantize``'s: tensor by tensor into a hidden directory
beside DST, checked (every layer decoded from the output and compared with the source), and
renamed when complete. With ``check`` (``hscale.check.conversion.ConversionCheck``, which the
command passes), the source is first checked exactly as ``hscale check`` checks it and refused
unless it conforms (but for fused sets' different global scales, which the conversion repairs),
and the output is checked the same way before it is renamed and must check as its source did.
The source is only ever read.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from hscale.files import OutputDirectory
from hscale.models.architecture import fused_sets
from hscale.reference import GROUP_SIZE

from .convert_configs import gguf_model, gguf_side_files, rewrite_configs
from .gguf import GGUF
from .layout_base import ROLE_DTYPES, Layout, reciprocals_of
from .layouts import layout_named
from .rescale import exact_byte_map, requantized
from .safetensors import (CheckpointError, SafetensorsModel, ShardWriter, TensorInfo,
                          copy_side_files)
from .stored import open_checkpoint, read_stored_linear

REPORT_NAME = "conversion_report.json"
#: Appended to RECIPROCAL_KEY + module for a W4A4 activation scale's recorded reciprocal.
INPUT_KEY = ".input"
#: Where a ModelOpt file written by this command keeps the reciprocal its compressed-tensors
#: source stored, when another reciprocal reads back as the same s_g (safetensors metadata).
RECIPROCAL_KEY = "hscale.reciprocal."
#: Per-layer tensors of activation or KV-cache quantization: scales in each format's own
#: convention, which this command does not convert (but a W4A4 layout's own activation scale,
#: the role ``input``, NVFP4-CKPT-4).
ACTIVATION_SUFFIXES = (".input_scale", ".input_global_scale", ".output_scale", ".k_scale",
                       ".v_scale")


@dataclass
class LayerConversion:
    """How one quantized Linear was carried over."""

    module: str
    how: str  # "copied", "rescaled" (scale bytes times an exact ratio), "requantized"
    global_scale: float  # the multiplier s_g the source means
    target_global_scale: float  # the multiplier the output means
    stored: float  # what the output stores for it (r or s_g)
    reason: str = ""  # why it could not be copied as it is
    changed: dict = field(default_factory=dict)  # requantized: bytes, codes, weights changed


@dataclass
class ConversionReport:
    source: str
    destination: str
    source_format: str
    target_format: str
    layers: list = field(default_factory=list)
    other_tensors: int = 0
    seconds: float = 0.0
    notes: list = field(default_factory=list)  # what the user should know: nothing dropped silently

    def count(self, how: str) -> int:
        return sum(1 for layer in self.layers if layer.how == how)


@dataclass
class LayerPlan:
    module: str
    tensors: dict  # role -> source tensor name
    shape: tuple
    global_scale: np.float32  # the multiplier the source means
    stored: np.float32  # what the source stores
    target_global_scale: np.float32 = None
    target_stored: np.float32 = None
    byte_map: np.ndarray | None = None  # rescaled: new byte of each old byte
    how: str = "copied"
    reason: str = ""
    input_stored: np.float32 | None = None  # W4A4: the activation scale the source stores
    input_multiplier: np.float32 | None = None  # the multiplier a it means (NVFP4-CKPT-4)
    input_target_stored: np.float32 | None = None  # what the output stores for a


def convert_checkpoint(source, destination, *, to: str, force: bool = False,
                       requantize: bool = False, check=None) -> ConversionReport:
    """``hscale convert SOURCE DESTINATION --to FORMAT``; see the module docstring. A source
    that cannot be converted (unreadable, activation scales, layers that cannot be converted
    exactly without ``requantize``) raises ``CheckpointError`` before anything is written.
    ``check`` (``hscale.check.conversion.ConversionCheck``, which the command passes) checks
    the source first, exactly as ``hscale check`` does, refusing one that does not conform, and
    the output before it is committed, which must check as its source did."""
    started = time.perf_counter()
    source = Path(source)
    layout_named(to)  # a wrong --to is said before the source is read
    if check is not None:
        check.source(source)
    detected, model, modules = open_checkpoint(source)
    layout = detected.layout
    if getattr(model, "unread", None):
        raise CheckpointError(f"{source}: {len(model.unread)} tensors of ggml types this command "
                              f"does not read (first {model.unread[0]}): converting would drop "
                              "them")
    target = layout_named(to, layout.scheme)  # W4A4 stays W4A4 (NVFP4-CKPT-4)
    meta = gguf_model(model, source) if layout == GGUF else None
    _refuse_activation_quantization(model, detected, source, modules)
    plans = _plan_layers(model, modules, layout, target)
    _reconcile_fused_sets(plans, target)
    for plan in plans.values():
        plan.target_stored = _target_stored(plan, layout, target, model.metadata)
        if plan.input_stored is not None:
            plan.input_target_stored = _input_target_stored(plan, layout, target,
                                                            model.metadata)
        if plan.target_global_scale != plan.global_scale:
            _rescale_or_requantize(plan, model)
    refused = [p for p in plans.values() if p.how == "requantized"]
    if refused and not requantize:
        shown = "; ".join(f"{p.module}: {p.reason}" for p in refused[:3])
        more = f"; and {len(refused) - 3} more" if len(refused) > 3 else ""
        raise CheckpointError(f"{len(refused)} of {len(plans)} layers cannot be converted to "
                              f"{to} exactly: {shown}{more}; --requantize requantizes them "
                              "from their decoded weights (reported per layer)")

    report = ConversionReport(str(source), str(destination), layout.name, target.name)
    output = OutputDirectory(destination, force, argument="DST")
    with output:
        writer = ShardWriter(output.path, _output_tensors(model, plans, target),
                             _max_shard_bytes(model), _metadata(model, plans, layout, target))
        _write_tensors(model, plans, target, writer, report)
        writer.close()
        if meta is not None:
            report.notes += gguf_side_files(source, output.path, meta, model.file)
        else:
            left = copy_side_files(source, output.path)
            if left:
                report.notes.append(f"not carried from {source}: {', '.join(left)}")
        report.notes += rewrite_configs(output.path, detected, target, model, plans, meta)
        for layer in _verify(output.path, model, plans, layout, target):
            report.layers.append(layer)
        if check is not None:
            check.output(output.path, {layer.module: layer.how for layer in report.layers})
        report.seconds = time.perf_counter() - started
        (output.path / REPORT_NAME).write_text(json.dumps(asdict(report), indent=1) + "\n")
        output.commit()
    return report


def _refuse_activation_quantization(model, detected, source: Path,
                                    modules: dict | None = None) -> None:
    """Activation and KV-cache scales are stored in each format's own convention: a copy would
    silently mean something else, so such checkpoints are refused, but for the activation
    scales of a W4A4 layout's quantized Linears (``modules``, NVFP4-CKPT-4), which are
    converted (not given, as for GGUF, which has no W4A4 here: refused too)."""
    layout = detected.layout
    own = ({layout.tensor_names(m)["input"] for m in modules}
           if layout.activations and modules is not None else set())
    for name in model.names():
        if name.endswith(ACTIVATION_SUFFIXES) and name not in own:
            raise CheckpointError(f"{source}: {name} is an activation or KV-cache scale, which "
                                  "this command does not convert (weights-only NVFP4 only)")
    more = detected.layout.quantizes_more_than_weights(detected)
    if more:
        raise CheckpointError(f"{source / detected.layout.config_file}: {more}, which this "
                              "command does not convert (weights-only NVFP4 only)")


def _plan_layers(model: SafetensorsModel, modules: dict, layout: Layout, to: Layout) -> dict:
    """module -> LayerPlan for every quantized Linear, after checking its tensors are whole."""
    plans = {}
    for module, tensors in modules.items():
        names = layout.tensor_names(module)
        for role, name in names.items():
            info = model.info.get(name)
            if info is None or info.dtype != ROLE_DTYPES[role]:
                found = "missing" if info is None else f"{info.dtype}, not {ROLE_DTYPES[role]}"
                raise CheckpointError(f"{model.directory}: {name} is {found} (hscale check "
                                      "says what else is wrong)")
        packed, scale = model.info[names["packed"]].shape, model.info[names["scale"]].shape
        if len(packed) != 2 or scale != (packed[0], 2 * packed[1] // GROUP_SIZE) \
                or (2 * packed[1]) % GROUP_SIZE or model.info[names["global"]].nbytes != 4:
            raise CheckpointError(f"{model.directory}: {module}'s tensors are {packed}, "
                                  f"{scale} and {model.info[names['global']].shape}, not a "
                                  "layout of NVFP4-CKPT-1/-2 (hscale check says more)")
        stored = np.float32(model.array(names["global"]).reshape(-1)[0])
        global_scale = _usable(module, layout, stored, model.directory)
        plans[module] = LayerPlan(module, names, (packed[0], 2 * packed[1]), global_scale,
                                  stored, target_global_scale=global_scale)
        if "input" in names:  # W4A4: the activation scale, in the layout's convention
            if model.info[names["input"]].nbytes != 4:
                raise CheckpointError(f"{model.directory}: {names['input']} is "
                                      f"{model.info[names['input']].shape}, not one float32 "
                                      "(NVFP4-CKPT-4; hscale check says more)")
            value = np.float32(model.array(names["input"]).reshape(-1)[0])
            if layout.stored_global_scale_problem(float(value), repr(float(value))) is not None:
                raise CheckpointError(f"{model.directory}: {names['input']} = {float(value)!r} "
                                      "is not a usable activation scale (a positive normal "
                                      "fp32, spec NVFP4-CKPT-4; hscale check says more)")
            plans[module].input_stored = value
            plans[module].input_multiplier = layout.implied_global_scale(value)
        if not to.can_store(global_scale):
            plans[module].target_global_scale = to.writable_global_scale(global_scale)
    return plans


def _usable(module: str, layout: Layout, stored: np.float32, directory) -> np.float32:
    if layout.stored_global_scale_problem(float(stored), repr(float(stored))) is not None:
        raise CheckpointError(f"{directory}: {module}'s global scale {float(stored)!r} is not a "
                              "usable positive normal fp32 (spec NVFP4-GS-4; hscale check says "
                              "more)")
    return layout.implied_global_scale(stored)


def _reconcile_fused_sets(plans: dict, to: Layout) -> None:
    """One global scale per fused set, the largest of its members' (as ``to`` can store it);
    each other member's scale bytes rescaled where that is exact, else marked for requantizing.
    A layer whose own s_g ``to`` cannot store (NVFP4-GS-4) is marked too."""
    sets = fused_sets(plans)
    for plan in plans.values():
        members = sets[plan.module]
        target = to.writable_global_scale(max(plans[m].global_scale for m in members))
        if target == plan.global_scale:
            continue
        plan.target_global_scale = target
        why_fused = (f"fused with {', '.join(m.rsplit('.', 1)[-1] for m in members if m != plan.module)}"
                     f" under s_g = {float(target)!r} (NVFP4-CKPT-3)" if len(members) > 1 else "")
        why_gs4 = (f"s_g = {float(plan.global_scale)!r} has no fp32 reciprocal that reads back "
                   "as itself (NVFP4-GS-4)" if not to.can_store(plan.global_scale) else "")
        plan.reason = "; ".join(w for w in (why_gs4, why_fused) if w)


def _rescale_or_requantize(plan: LayerPlan, model: SafetensorsModel) -> None:
    """A layer whose global scale changes: rescaled if every scale byte it holds has an exact
    counterpart under the new s_g, else to be requantized."""
    scale_bytes = model.array(plan.tensors["scale"])
    plan.byte_map = exact_byte_map(scale_bytes, plan.global_scale, plan.target_global_scale)
    if plan.byte_map is not None:
        plan.how = "rescaled"
    else:
        plan.how = "requantized"
        plan.reason += ("; its scale bytes times s_g / s_g' = "
                        f"{float(plan.global_scale) / float(plan.target_global_scale)!r} do not "
                        "all land on E4M3 values")


def _target_stored(plan: LayerPlan, layout: Layout, to: Layout, metadata: dict) -> np.float32:
    """What the output stores for the layer's target s_g: the source's own value where it means
    it already (so nothing changes), else the multiplier (modelopt) or the reciprocal that reads
    back as it, the one a conversion recorded where two do."""
    target = plan.target_global_scale
    if layout == to and target == plan.global_scale:
        return plan.stored
    if not to.stores_reciprocal:
        return np.float32(target)
    if layout.stores_reciprocal and target == plan.global_scale:
        return plan.stored
    candidates = reciprocals_of(target)
    recorded = metadata.get(RECIPROCAL_KEY + plan.module)
    if recorded is not None:
        value = np.array(int(recorded, 16), np.uint32).view(np.float32)[()]
        if any(value == c for c in candidates):
            return np.float32(value)
    return candidates[0]


def _input_target_stored(plan: LayerPlan, layout: Layout, to: Layout,
                         metadata: dict) -> np.float32:
    """What the output stores for the layer's activation multiplier a (NVFP4-CKPT-4), by the
    rule of global scales (NVFP4-GS-4): the source's own value in the same convention, a for
    ModelOpt, else the reciprocal that reads back as a (the recorded one where two do); an a
    that no reciprocal reads back as is refused."""
    a = plan.input_multiplier
    if layout.stores_reciprocal == to.stores_reciprocal:
        return plan.input_stored
    if not to.stores_reciprocal:
        return np.float32(a)
    candidates = reciprocals_of(a)
    if not candidates:
        raise CheckpointError(f"{plan.module}{layout.input_suffix} = {float(a)!r}: no fp32 "
                              f"reciprocal reads back as it, so {to.name}'s "
                              f"{plan.module}{to.input_suffix} cannot mean it exactly (spec "
                              "NVFP4-GS-4, NVFP4-CKPT-4); an activation scale is not moved")
    recorded = metadata.get(RECIPROCAL_KEY + plan.module + INPUT_KEY)
    if recorded is not None:
        value = np.array(int(recorded, 16), np.uint32).view(np.float32)[()]
        if any(value == c for c in candidates):
            return np.float32(value)
    return candidates[0]


def _role_of(plans: dict) -> dict:
    """source tensor name -> (plan, role) for every quantized Linear's tensors."""
    return {name: (plan, role) for plan in plans.values() for role, name in plan.tensors.items()}


def _output_tensors(model, plans, to: Layout) -> list:
    """The output's tensors in the source's order, each quantized Linear's renamed for ``to``."""
    roles = _role_of(plans)
    tensors = []
    for name, info in model.info.items():
        if name not in roles:
            tensors.append(TensorInfo(name, info.dtype, info.shape))
            continue
        plan, role = roles[name]
        target = to.tensor_names(plan.module)[role]
        shape = to.global_shape if role in ("global", "input") else info.shape
        tensors.append(TensorInfo(target, ROLE_DTYPES[role], shape))
    return tensors


def _max_shard_bytes(model: SafetensorsModel) -> int:
    """Shards no larger than the source's largest (one file for a one-file source)."""
    sizes: dict = {}
    for name, info in model.info.items():
        sizes[model.file_of[name]] = sizes.get(model.file_of[name], 0) + info.nbytes
    return max(sizes.values()) if len(sizes) > 1 else sum(sizes.values()) + 1


def _metadata(model, plans, layout: Layout, to: Layout) -> dict:
    """The source's safetensors metadata, with the reciprocals a reciprocal-layout source
    stored recorded where another one reads back as the same s_g (for a multiplier-layout
    output, so that converting back gives the same bytes)."""
    metadata = {k: v for k, v in model.metadata.items() if not k.startswith(RECIPROCAL_KEY)}
    if layout.stores_reciprocal and not to.stores_reciprocal:
        for plan in plans.values():
            if plan.target_global_scale == plan.global_scale \
                    and reciprocals_of(plan.global_scale)[0] != plan.stored:
                bits = int(np.array(plan.stored, np.float32).view(np.uint32))
                metadata[RECIPROCAL_KEY + plan.module] = f"0x{bits:08X}"
            if plan.input_stored is not None \
                    and reciprocals_of(plan.input_multiplier)[0] != plan.input_stored:
                bits = int(np.array(plan.input_stored, np.float32).view(np.uint32))
                metadata[RECIPROCAL_KEY + plan.module + INPUT_KEY] = f"0x{bits:08X}"
    return metadata


def _write_tensors(model, plans, to: Layout, writer: ShardWriter, report) -> None:
    """Every tensor of the source in order: the others as they are, each quantized Linear's
    under its new name, its global scale converted, its codes and bytes unchanged unless the
    layer is rescaled or requantized."""
    roles = _role_of(plans)
    changed: dict = {}  # module -> its new {packed, scale}, until both are written
    for name in model.names():
        if name not in roles:
            writer.write(name, model.array(name))
            report.other_tensors += 1
            continue
        plan, role = roles[name]
        target_name = to.tensor_names(plan.module)[role]
        if role == "global":
            writer.write(target_name, to.global_scale_array(plan.target_stored))
        elif role == "input":  # NVFP4-CKPT-4: the activation scale in the target's convention
            writer.write(target_name, to.global_scale_array(plan.input_target_stored))
        elif plan.how == "copied":
            writer.write(target_name, model.array(name))
        else:
            if plan.module not in changed:
                changed[plan.module] = _converted_arrays(model, plan)
            writer.write(target_name, changed[plan.module].pop(role))
            if not changed[plan.module]:
                del changed[plan.module]


def _converted_arrays(model, plan: LayerPlan) -> dict:
    """{packed, scale} of a layer whose global scale changes: its scale bytes mapped exactly
    (rescaled), or requantized."""
    from hscale.reference import pack_codes, unpack_codes
    packed = model.array(plan.tensors["packed"])
    scale_bytes = model.array(plan.tensors["scale"])
    if plan.how == "rescaled":
        return {"packed": packed, "scale": plan.byte_map[scale_bytes]}
    codes, new_bytes = requantized(unpack_codes(packed), scale_bytes, plan.global_scale,
                                   plan.target_global_scale)
    return {"packed": pack_codes(codes), "scale": new_bytes}


def _verify(directory: Path, source, plans, layout: Layout, to: Layout) -> list:
    """Every layer read back from the written output and decoded (NVFP4-DEQ-1) beside the
    source's: a copied or rescaled layer must decode to the same weights bit for bit (else this
    is a bug, and nothing is committed); a requantized one reports what changed."""
    from hscale.reference import dequantize, unpack_codes
    written = SafetensorsModel(directory)
    layers = []
    for plan in plans.values():
        before = read_stored_linear(source, layout, plan.module)
        after = read_stored_linear(written, to, plan.module)
        old = dequantize(unpack_codes(before.packed), before.scale_bytes, before.global_scale)
        new = dequantize(unpack_codes(after.packed), after.scale_bytes, after.global_scale)
        same = old.view(np.uint32) == new.view(np.uint32)
        layer = LayerConversion(plan.module, plan.how, float(plan.global_scale),
                                float(after.global_scale), float(after.stored_global_scale),
                                plan.reason)
        if plan.how == "requantized":
            with np.errstate(divide="ignore", invalid="ignore"):
                relative = np.abs(new.astype(np.float64) - old) / np.abs(old)
            layer.changed = {
                "scale_bytes": int(np.count_nonzero(before.scale_bytes != after.scale_bytes)),
                "codes": int(np.count_nonzero(unpack_codes(before.packed)
                                              != unpack_codes(after.packed))),
                "weights": int(np.count_nonzero(~same)), "of_weights": int(same.size),
                "max_relative_change": float(np.nanmax(np.where(same, 0.0, relative)))
                if not same.all() else 0.0}
        elif not same.all():
            raise RuntimeError(f"{plan.module}: converted {plan.how} but decodes differently "
                               "from the source: a bug, please report (nothing was written)")
        if plan.input_stored is not None:  # the activation multiplier, bit for bit
            stored = np.float32(written.array(to.tensor_names(plan.module)["input"])
                                .reshape(-1)[0])
            if to.implied_global_scale(stored).view(np.uint32) != \
                    np.float32(plan.input_multiplier).view(np.uint32):
                raise RuntimeError(f"{plan.module}: its activation scale means "
                                   f"{float(to.implied_global_scale(stored))!r} after "
                                   f"conversion, {float(plan.input_multiplier)!r} before: a "
                                   "bug, please report (nothing was written)")
        layers.append(layer)
    return layers


def format_conversion(report: ConversionReport) -> str:
    lines = [f"{report.source} ({report.source_format}) -> {report.destination} "
             f"({report.target_format}): {len(report.layers)} quantized Linears: "
             f"{report.count('copied')} copied (codes and scale bytes unchanged, the global "
             f"scale converted exactly), {report.count('rescaled')} rescaled exactly, "
             f"{report.count('requantized')} requantized; {report.other_tensors} other tensors "
             f"copied; {report.seconds:.1f} s"]
    for layer in report.layers:
        if layer.how == "copied":
            continue
        line = (f"  {layer.module}: {layer.how}, s_g {layer.global_scale!r} -> "
                f"{layer.target_global_scale!r} ({layer.reason})")
        if layer.changed:
            c = layer.changed
            line += (f"; changed: {c['scale_bytes']} scale bytes, {c['codes']} codes, "
                     f"{c['weights']} of {c['of_weights']} decoded weights (at most "
                     f"{c['max_relative_change']:.3g} relative)")
        lines.append(line)
    lines += [f"note: {note}" for note in report.notes]
    lines.append(f"written: {report.destination} (report: "
                 f"{Path(report.destination) / REPORT_NAME})")
    return "\n".join(lines)
