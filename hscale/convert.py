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
* rewrites the configs (``quantization_config`` in config.json <-> hf_quant_config.json), the
  source's own config kept under ``converted_from`` so that converting back restores it.

``--requantize`` requantizes the layers that cannot be converted exactly from their decoded
weights (NVFP4-DEQ-1) at the target's global scale: each group's scale byte is the E4M3
rounding of its old value times the ratio of the scales (NVFP4-E4M3-2), each code the rounding
of the decoded weight at that byte (NVFP4-E2M1-2); how many bytes, codes and weights changed is
reported per layer.

The output is written like ``hscale quantize``'s: tensor by tensor into a hidden directory
beside DST, checked (every layer decoded from the output and compared with the source), and
renamed when complete.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from hscale.checkpoint import (GLOBAL_SHAPES, GROUP, MODELOPT_CONFIG, ROLE_DTYPES,
                               CheckpointError, OutputDirectory, SafetensorsModel, ShardWriter,
                               TensorInfo, compressed_tensors_config, copy_side_files,
                               implied_global_scale, modelopt_config, open_checkpoint,
                               quantized_tensor_names, reciprocals_of,
                               writable_global_scale)

REPORT_NAME = "conversion_report.json"
#: Where a ModelOpt file written by this command keeps the reciprocal its compressed-tensors
#: source stored, when another reciprocal reads back as the same s_g (safetensors metadata).
RECIPROCAL_KEY = "hscale.reciprocal."
#: The target's config keeps the source's under this key, so that converting back restores it.
CONVERTED_FROM = "converted_from"
#: Per-layer tensors of activation or KV-cache quantization: scales in each format's own
#: convention, which this command does not convert.
ACTIVATION_SUFFIXES = (".input_scale", ".input_global_scale", ".output_scale", ".k_scale",
                       ".v_scale")
FP32_SMALLEST_NORMAL = 2.0 ** -126


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

    def count(self, how: str) -> int:
        return sum(1 for layer in self.layers if layer.how == how)


# --------------------------------------------------------------------------------------------
# the plan: what each layer becomes, decided before anything is written
# --------------------------------------------------------------------------------------------

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


def convert_checkpoint(source, destination, *, to: str, force: bool = False,
                       requantize: bool = False) -> ConversionReport:
    """``hscale convert SOURCE DESTINATION --to FORMAT``; see the module docstring. A source
    that cannot be converted (unreadable, activation scales, layers that cannot be converted
    exactly without ``requantize``) raises ``CheckpointError`` before anything is written."""
    started = time.perf_counter()
    source = Path(source)
    fmt_info, model, modules = open_checkpoint(source)
    fmt = fmt_info.format
    _refuse_activation_quantization(model, fmt_info, source)
    plans = _plan_layers(model, modules, fmt, to)
    _reconcile_fused_sets(plans, to)
    for plan in plans.values():
        plan.target_stored = _target_stored(plan, fmt, to, model.metadata)
        if plan.target_global_scale != plan.global_scale:
            _rescale_or_requantize(plan, model)
    refused = [p for p in plans.values() if p.how == "requantized"]
    if refused and not requantize:
        shown = "; ".join(f"{p.module}: {p.reason}" for p in refused[:3])
        more = f"; and {len(refused) - 3} more" if len(refused) > 3 else ""
        raise CheckpointError(f"{len(refused)} of {len(plans)} layers cannot be converted to "
                              f"{to} exactly: {shown}{more}; --requantize requantizes them "
                              "from their decoded weights (reported per layer)")

    report = ConversionReport(str(source), str(destination), fmt, to)
    output = OutputDirectory(destination, force, argument="DST")
    with output:
        writer = ShardWriter(output.path, _output_tensors(model, plans, fmt, to),
                             _max_shard_bytes(model), _metadata(model, plans, fmt, to))
        _write_tensors(model, plans, fmt, to, writer, report)
        writer.close()
        copy_side_files(source, output.path)
        _rewrite_configs(output.path, fmt_info, to, model, plans)
        for layer in _verify(output.path, model, plans, fmt, to):
            report.layers.append(layer)
        report.seconds = time.perf_counter() - started
        (output.path / REPORT_NAME).write_text(json.dumps(asdict(report), indent=1) + "\n")
        output.commit()
    return report


def _refuse_activation_quantization(model, fmt_info, source: Path) -> None:
    """Activation and KV-cache scales are stored in each format's own convention: a copy would
    silently mean something else, so such checkpoints are refused."""
    for name in model.names():
        if name.endswith(ACTIVATION_SUFFIXES):
            raise CheckpointError(f"{source}: {name} is an activation or KV-cache scale, which "
                                  "this command does not convert (weights-only NVFP4 only)")
    config = fmt_info.config
    if fmt_info.format == "compressed-tensors":
        for name, group in (config.get("config_groups") or {}).items():
            if isinstance(group, dict) and group.get("input_activations"):
                raise CheckpointError(f"{source}/config.json: config group {name!r} quantizes "
                                      "activations, which this command does not convert")
        if config.get("kv_cache_scheme"):
            raise CheckpointError(f"{source}/config.json: a kv_cache_scheme, which this "
                                  "command does not convert")
    elif (config.get("quantization") or config).get("kv_cache_quant_algo"):
        raise CheckpointError(f"{source}: kv_cache_quant_algo is set; KV-cache scales are not "
                              "converted")


def _plan_layers(model: SafetensorsModel, modules: dict, fmt: str, to: str) -> dict:
    """module -> LayerPlan for every quantized Linear, after checking its tensors are whole."""
    plans = {}
    for module, tensors in modules.items():
        names = quantized_tensor_names(fmt, module)
        for role, name in names.items():
            info = model.info.get(name)
            if info is None or info.dtype != ROLE_DTYPES[role]:
                found = "missing" if info is None else f"{info.dtype}, not {ROLE_DTYPES[role]}"
                raise CheckpointError(f"{model.directory}: {name} is {found} (hscale check "
                                      "says what else is wrong)")
        packed, scale = model.info[names["packed"]].shape, model.info[names["scale"]].shape
        if len(packed) != 2 or scale != (packed[0], 2 * packed[1] // GROUP) \
                or (2 * packed[1]) % GROUP or model.info[names["global"]].nbytes != 4:
            raise CheckpointError(f"{model.directory}: {module}'s tensors are {packed}, "
                                  f"{scale} and {model.info[names['global']].shape}, not a "
                                  "layout of NVFP4-CKPT-1/-2 (hscale check says more)")
        stored = np.float32(model.array(names["global"]).reshape(-1)[0])
        global_scale = _usable(module, fmt, stored, model.directory)
        plans[module] = LayerPlan(module, names, (packed[0], 2 * packed[1]), global_scale,
                                  stored, target_global_scale=global_scale)
        if to == "compressed-tensors" and not reciprocals_of(global_scale):
            plans[module].target_global_scale = writable_global_scale(to, global_scale)
    return plans


def _usable(module: str, fmt: str, stored: np.float32, directory) -> np.float32:
    value = float(stored)
    if not (np.isfinite(value) and value >= FP32_SMALLEST_NORMAL
            and (fmt == "modelopt" or value <= 2.0 ** 126)):
        raise CheckpointError(f"{directory}: {module}'s global scale {value!r} is not a usable "
                              "positive normal fp32 (spec NVFP4-GS-4; hscale check says more)")
    return implied_global_scale(fmt, stored)


def _reconcile_fused_sets(plans: dict, to: str) -> None:
    """One global scale per fused set, the largest of its members' (as ``to`` can store it);
    each other member's scale bytes rescaled where that is exact, else marked for requantizing.
    A layer whose own s_g ``to`` cannot store (NVFP4-GS-4) is marked too."""
    from hscale.quantize_model import fused_sets
    sets = fused_sets(plans)
    for plan in plans.values():
        members = sets[plan.module]
        target = max(plans[m].global_scale for m in members)
        if to == "compressed-tensors":
            target = writable_global_scale(to, target)
        if target == plan.global_scale:
            continue
        plan.target_global_scale = target
        why_fused = (f"fused with {', '.join(m.rsplit('.', 1)[-1] for m in members if m != plan.module)}"
                     f" under s_g = {float(target)!r} (NVFP4-CKPT-3)" if len(members) > 1 else "")
        why_gs4 = (f"s_g = {float(plan.global_scale)!r} has no fp32 reciprocal that reads back "
                   "as itself (NVFP4-GS-4)" if not reciprocals_of(plan.global_scale)
                   and to == "compressed-tensors" else "")
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


def _target_stored(plan: LayerPlan, fmt: str, to: str, metadata: dict) -> np.float32:
    """What the output stores for the layer's target s_g: the source's own value where it means
    it already (so nothing changes), else the multiplier (modelopt) or the reciprocal that reads
    back as it, the one a conversion recorded where two do."""
    target = plan.target_global_scale
    if fmt == to and target == plan.global_scale:
        return plan.stored
    if to == "modelopt":
        return np.float32(target)
    if fmt == "compressed-tensors" and target == plan.global_scale:
        return plan.stored
    candidates = reciprocals_of(target)
    recorded = metadata.get(RECIPROCAL_KEY + plan.module)
    if recorded is not None:
        value = np.array(int(recorded, 16), np.uint32).view(np.float32)[()]
        if any(value == c for c in candidates):
            return np.float32(value)
    return candidates[0]


# --------------------------------------------------------------------------------------------
# rescaling and requantizing
# --------------------------------------------------------------------------------------------

def _ladder() -> dict:
    """E4M3 value (exact) -> ladder byte 0x01..0x7E."""
    from hscale.reference import SCALE_BYTE_VALUES
    return {Fraction(float(SCALE_BYTE_VALUES[b])): b for b in range(0x01, 0x7F)}


def exact_byte_map(scale_bytes: np.ndarray, global_scale, target) -> np.ndarray | None:
    """New byte of each byte value 0..255 so that ``e4m3(new) * target == e4m3(old) * s_g``
    exactly for every byte the tensor holds (0x00 stays 0x00), or None if some byte has no
    such E4M3 value (or is NaN or negative)."""
    from hscale.reference import SCALE_BYTE_VALUES
    ladder = _ladder()
    ratio = Fraction(float(global_scale)) / Fraction(float(target))
    mapping = np.zeros(256, np.uint8)
    for byte in np.unique(scale_bytes):
        byte = int(byte)
        if byte == 0:
            continue
        if byte > 0x7E:
            return None
        new = ladder.get(Fraction(float(SCALE_BYTE_VALUES[byte])) * ratio)
        if new is None:
            return None
        mapping[byte] = new
    return mapping


def requantized(codes: np.ndarray, scale_bytes: np.ndarray, global_scale, target):
    """(codes, scale bytes) of the decoded weights (NVFP4-DEQ-1) requantized at the ``target``
    s_g keeping each group's scale: its byte the E4M3 rounding of e4m3(old) s_g / target
    (NVFP4-E4M3-2; a non-zero byte stays at least 0x01), its codes the rounding of the decoded
    weights at that byte (NVFP4-E2M1-2); a zero group keeps byte 0x00 and its signs."""
    from hscale.reference import decode_e4m3, dequantize, encode_e2m1, encode_e4m3
    if np.any(scale_bytes > 0x7E):
        raise CheckpointError("NaN or negative scale bytes cannot be requantized (hscale check "
                              "names them)")
    decoded = dequantize(codes, scale_bytes, global_scale)
    rows, cols = codes.shape
    # e4m3(old) * s_g is exact in float64; dividing by the target rounds once, and no quotient
    # of a 28-bit by a 24-bit number lies within 2^-53 of an E4M3 midpoint without being on it.
    value = decode_e4m3(scale_bytes) * float(global_scale) / float(target)
    new_bytes = encode_e4m3(value)
    new_bytes = np.where((scale_bytes != 0) & (new_bytes == 0), 1, new_bytes).astype(np.uint8)
    groups = decoded.reshape(rows, cols // GROUP, GROUP)
    scale = float(target) * decode_e4m3(new_bytes)
    live = new_bytes != 0
    new_codes = np.where(live[..., None],
                         encode_e2m1(groups, np.where(live, scale, 1.0)[..., None]),
                         np.signbit(groups).astype(np.uint8) << 3)
    return new_codes.reshape(rows, cols).astype(np.uint8), new_bytes


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------

def _role_of(plans: dict, fmt: str) -> dict:
    """source tensor name -> (plan, role) for every quantized Linear's tensors."""
    return {name: (plan, role) for plan in plans.values() for role, name in plan.tensors.items()}


def _output_tensors(model, plans, fmt: str, to: str) -> list:
    """The output's tensors in the source's order, each quantized Linear's renamed for ``to``."""
    roles = _role_of(plans, fmt)
    tensors = []
    for name, info in model.info.items():
        if name not in roles:
            tensors.append(TensorInfo(name, info.dtype, info.shape))
            continue
        plan, role = roles[name]
        target = quantized_tensor_names(to, plan.module)[role]
        shape = GLOBAL_SHAPES[to] if role == "global" else info.shape
        tensors.append(TensorInfo(target, ROLE_DTYPES[role], shape))
    return tensors


def _max_shard_bytes(model: SafetensorsModel) -> int:
    """Shards no larger than the source's largest (one file for a one-file source)."""
    sizes: dict = {}
    for name, info in model.info.items():
        sizes[model.file_of[name]] = sizes.get(model.file_of[name], 0) + info.nbytes
    return max(sizes.values()) if len(sizes) > 1 else sum(sizes.values()) + 1


def _metadata(model, plans, fmt: str, to: str) -> dict:
    """The source's safetensors metadata, with the reciprocals a compressed-tensors source
    stored recorded where another one reads back as the same s_g (modelopt output only)."""
    metadata = {k: v for k, v in model.metadata.items() if not k.startswith(RECIPROCAL_KEY)}
    if fmt == "compressed-tensors" and to == "modelopt":
        for plan in plans.values():
            if plan.target_global_scale == plan.global_scale \
                    and reciprocals_of(plan.global_scale)[0] != plan.stored:
                bits = int(np.array(plan.stored, np.float32).view(np.uint32))
                metadata[RECIPROCAL_KEY + plan.module] = f"0x{bits:08X}"
    return metadata


def _write_tensors(model, plans, fmt, to, writer: ShardWriter, report) -> None:
    """Every tensor of the source in order: the others as they are, each quantized Linear's
    under its new name, its global scale converted, its codes and bytes unchanged unless the
    layer is rescaled or requantized."""
    roles = _role_of(plans, fmt)
    changed: dict = {}  # module -> its new {packed, scale}, until both are written
    for name in model.names():
        if name not in roles:
            writer.write(name, model.array(name))
            report.other_tensors += 1
            continue
        plan, role = roles[name]
        target_name = quantized_tensor_names(to, plan.module)[role]
        if role == "global":
            value = np.float32(plan.target_stored)
            writer.write(target_name, np.array([value] if GLOBAL_SHAPES[to] else value,
                                               np.float32))
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


def _verify(directory: Path, source, plans, fmt: str, to: str) -> list:
    """Every layer read back from the written output and decoded (NVFP4-DEQ-1) beside the
    source's: a copied or rescaled layer must decode to the same weights bit for bit (else this
    is a bug, and nothing is committed); a requantized one reports what changed."""
    from hscale.checkpoint import read_stored_linear
    from hscale.reference import dequantize, unpack_codes
    written = SafetensorsModel(directory)
    layers = []
    for plan in plans.values():
        before = read_stored_linear(source, fmt, plan.module)
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
        layers.append(layer)
    return layers


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------

def _rewrite_configs(directory: Path, fmt_info, to: str, model, plans) -> None:
    """config.json's quantization_config <-> hf_quant_config.json, the source's kept under
    ``converted_from`` (and restored when converting back)."""
    from hscale import __version__
    fmt = fmt_info.format
    if fmt == to:
        return
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    modelopt_path = directory / MODELOPT_CONFIG
    if to == "modelopt":
        source_quant = config.pop("quantization_config")
        kept = source_quant.get(CONVERTED_FROM) or {}
        if kept.get("format") == "modelopt" and "hf_quant_config" in kept:
            target = kept["hf_quant_config"]
            if "config_quantization_config" in kept:
                config["quantization_config"] = kept["config_quantization_config"]
        else:
            target = modelopt_config(_modelopt_excludes(fmt_info.ignore, model, plans),
                                     __version__)
            target[CONVERTED_FROM] = {"format": fmt, "quantization_config": source_quant}
        modelopt_path.write_text(json.dumps(target, indent=2) + "\n")
    else:
        source_modelopt = json.loads(modelopt_path.read_text()) if modelopt_path.is_file() \
            else None
        modelopt_path.unlink(missing_ok=True)
        source_in_config = config.pop("quantization_config", None)
        kept = (source_modelopt or source_in_config or {}).get(CONVERTED_FROM) or {}
        if kept.get("format") == "compressed-tensors" and "quantization_config" in kept:
            config["quantization_config"] = kept["quantization_config"]
        else:
            quant = compressed_tensors_config(_compressed_tensors_ignore(fmt_info.ignore),
                                              __version__)
            quant[CONVERTED_FROM] = {"format": fmt, "hf_quant_config": source_modelopt}
            if source_in_config is not None:
                quant[CONVERTED_FROM]["config_quantization_config"] = source_in_config
            config["quantization_config"] = quant
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def _modelopt_excludes(ignore, model, plans) -> list:
    """compressed-tensors' ignore list as ModelOpt's exclude_modules (fnmatch patterns): names
    kept, each ``re:`` pattern replaced by the unquantized modules it matches."""
    modules = [n[: -len(".weight")] for n in model.names() if n.endswith(".weight")]
    out = []
    for entry in ignore:
        if entry.startswith("re:"):
            out += [m for m in modules if m not in plans and re.match(entry[3:], m)]
        else:
            out.append(entry)
    return list(dict.fromkeys(out))


def _compressed_tensors_ignore(exclude) -> list:
    """ModelOpt's exclude_modules (fnmatch patterns) as compressed-tensors' ignore list, whose
    entries are names or ``re:`` regular expressions."""
    return [f"re:{fnmatch.translate(p)}" if any(c in p for c in "*?[") else p for p in exclude]


# --------------------------------------------------------------------------------------------
# what the user reads
# --------------------------------------------------------------------------------------------

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
    lines.append(f"written: {report.destination} (report: "
                 f"{Path(report.destination) / REPORT_NAME})")
    return "\n".join(lines)
