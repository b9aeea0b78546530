"""``hscale check``: is an NVFP4 checkpoint, written by any tool, what its format and the spec say?

Two depths (docs/checkpoints.md, "Checking a checkpoint"):

* **The file alone** (structure and format). The format is detected from the configs
  (``hscale.checkpoint.detect_format``); every quantized Linear must have its three tensors with
  the layout's names, dtypes and shapes (NVFP4-CKPT-1, -2: packed ``(out, in/2)`` uint8, scale
  bytes ``(out, in/16)`` float8_e4m3fn, the global scale float32); the config must say 4-bit
  floats in groups of 16, and its ignore / exclude list must agree with what is stored; every
  global scale must be a usable fp32 in the format's convention (the reciprocal for
  compressed-tensors, the multiplier for ModelOpt, NVFP4-GS-4) and plausible against the
  decoded weights; no scale byte may be NaN (NVFP4-E4M3-1) or negative, nor 0x00 under codes
  that are not zero (NVFP4-ZERO-1); fused layers (q/k/v, gate/up, MoE w1/w3) must share one
  global scale (NVFP4-CKPT-3). Counted for the reader: subnormal (0x01..0x07) and saturated
  (0x7E) scale bytes, dead groups (every element decodes to zero), all-zero rows.
* **With the original weights** (``--original``, and ``--hessian`` for h): every layer is
  re-derived by the spec at the global scale its file implies (a pipeline's own s_g,
  NVFP4-GS-3) and classified by the one diagnoser (``hscale.judge.diagnose``): *exact*
  (byte for byte the reference's RTN, or H-Scale / scale-only / 4over6 when those reproduce
  it), else *faithful* (the suite's certificate, with the allowances of docs/spec.md section 7
  it needed, tried with none, then all, then only those used, as ``hscale interop`` does), else
  *format* (a scale rule of its own: every byte on the ladder, every code the correct rounding
  for the byte chosen), else not certified, with the findings. With h, each layer's output
  error against RTN at the same s_g (``hscale.quantize_model.layer_quality``).

The checkpoint is read shard by shard, tensor by tensor (``hscale.checkpoint.SafetensorsModel``):
memory holds one layer's tensors, the original weight and its certificate's float64 copy.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from hscale.checkpoint import (GLOBAL_SHAPES, GROUP, MODELOPT_CONFIG, ROLE_DTYPES,
                               CheckpointError, SafetensorsModel, implied_global_scale,
                               open_checkpoint, quantized_tensor_names,
                               writable_global_scale)
from hscale.judge.findings import Finding, plural

REPORT_VERSION = 1
#: Up to this many layers the table lists every layer; above, only those with findings.
TABLE_ALL_LAYERS = 40
#: Findings shown per tensor and clause; the rest are counted.
SHOWN = 3
#: Places listed per kind of bad scale byte in one tensor; the rest are counted.
LISTED = 8
#: Decoded weights above this are not a trained Linear's: a global scale in the other
#: convention gives about (6 * 448)^2 / amax, 7e6 for amax = 1 (NVFP4-GS-4).
IMPLAUSIBLE_MAGNITUDE = 1e4
#: A layer whose decoded magnitude is this many decades from the reference (the original's
#: amax, or the other layers' median) while the other reading is close is flagged.
IMPLAUSIBLE_DECADES = 2.0
FP32_SMALLEST_NORMAL = 2.0 ** -126
#: The ways a layer can be re-derived, tried in this order (a hint from an hscale quantize
#: report first): (method, init, scale ceiling C of its pipeline). rtn is always tried;
#: hscale needs h.
RECIPES = (("rtn", "maxabs", 448.0), ("hscale", "maxabs", 448.0), ("scale-only", "maxabs", 448.0),
           ("rtn", "4over6", 256.0), ("hscale", "4over6", 256.0),
           ("scale-only", "4over6", 256.0))
#: The window of the searched methods (HSCALE-WIN-1 defaults): a searched byte lies within it.
WINDOW_DOWN, WINDOW_UP = 9, 6


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------

@dataclass
class Problem:
    """A finding about one named tensor (or module, or config file)."""

    tensor: str
    finding: Finding

    @property
    def count(self) -> int:
        """How many findings it stands for (a "count" problem stands for those not listed)."""
        return int(self.finding.observed) if self.finding.kind == "count" else 1

    def render(self) -> str:
        return f"{self.tensor}: {self.finding.render()}"

    def as_json(self) -> dict:
        return {"tensor": self.tensor, **self.finding.as_json()}


@dataclass
class LayerResult:
    """What ``hscale check`` found about one quantized Linear."""

    module: str
    tensors: dict
    shape: tuple | None = None
    fused_with: tuple = ()
    stored_global_scale: float | None = None
    global_scale: float | None = None
    stats: dict = field(default_factory=dict)
    verdict: str = ""  # "exact", "faithful", "format", "not certified", "" (file only)
    recipe: str = ""  # "rtn maxabs", ... (the method and init that reproduce or certify it)
    allowances: dict = field(default_factory=dict)  # allowance -> groups or elements
    global_scale_note: str = ""  # how the s_g relates to NVFP4-GS-1's (with the original)
    quality: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def problem(self, role: str, clause: str, text: str, **where):
        self.problems.append(Problem(self.tensors.get(role, self.module),
                                     Finding(clause, text, **where)))

    def as_json(self) -> dict:
        return {"module": self.module, "tensors": self.tensors,
                "shape": list(self.shape) if self.shape else None,
                "fused_with": list(self.fused_with),
                "stored_global_scale": self.stored_global_scale,
                "stored_global_scale_bits": _bits(self.stored_global_scale),
                "global_scale": self.global_scale, "global_scale_bits": _bits(self.global_scale),
                "global_scale_note": self.global_scale_note, "stats": self.stats,
                "verdict": self.verdict, "recipe": self.recipe, "allowances": self.allowances,
                "quality": self.quality, "notes": self.notes,
                "findings": [p.as_json() for p in self.problems]}


@dataclass
class CheckReport:
    checkpoint: str
    format: str
    original: str | None = None
    hessian: str | None = None
    layers: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # about the checkpoint as a whole
    notes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def conforms(self) -> bool:
        return not self.problems and not any(layer.problems for layer in self.layers)

    def all_problems(self) -> list:
        return self.problems + [p for layer in self.layers for p in layer.problems]

    def totals(self) -> dict:
        stats: Counter = Counter()
        for layer in self.layers:
            stats.update({k: v for k, v in layer.stats.items() if isinstance(v, int)})
        verdicts = Counter(layer.verdict or "checked" for layer in self.layers)
        recipes = Counter(f"{layer.verdict} {layer.recipe}".strip() for layer in self.layers
                          if layer.recipe)
        allowances: Counter = Counter()
        for layer in self.layers:
            allowances.update(layer.allowances)
        clauses: Counter = Counter()
        for problem in self.all_problems():
            clauses[problem.finding.clause] += problem.count
        return {"layers": len(self.layers), "verdicts": dict(verdicts), "recipes": dict(recipes),
                "allowances": dict(allowances), "findings": sum(clauses.values()),
                "findings_by_clause": dict(clauses),
                "layers_with_findings": sum(1 for layer in self.layers if layer.problems),
                **{k: stats[k] for k in ("weights", "groups", "dead_groups", "zero_rows",
                                          "subnormal_bytes", "saturated_bytes", "zero_bytes")}}

    def as_json(self) -> dict:
        return {"report_version": REPORT_VERSION, "checkpoint": self.checkpoint,
                "format": self.format, "original": self.original, "hessian": self.hessian,
                "conforms": self.conforms, "totals": self.totals(), "seconds": self.seconds,
                "notes": self.notes, "findings": [p.as_json() for p in self.problems],
                "layers": [layer.as_json() for layer in self.layers]}


def _bits(value) -> str | None:
    if value is None:
        return None
    return f"0x{int(np.array(value, dtype=np.float32).view(np.uint32)):08X}"


def _f32(value) -> str:
    return f"{float(value)!r} ({_bits(value)})"


# --------------------------------------------------------------------------------------------
# the whole checkpoint
# --------------------------------------------------------------------------------------------

def check_checkpoint(checkpoint, original=None, hessian=None) -> CheckReport:
    """Check ``checkpoint`` (a directory), against the ``original`` model directory and
    ``hessian`` (an ``hscale calibrate`` file) when given. A checkpoint or input that cannot be
    read raises ``CheckpointError`` (one line naming the file); everything else it finds is in
    the report."""
    started = time.perf_counter()
    checkpoint = Path(checkpoint)
    fmt_info, model, modules = open_checkpoint(checkpoint)
    fmt = fmt_info.format
    report = CheckReport(str(checkpoint), fmt, str(original) if original else None,
                         str(hessian) if hessian else None)
    source = _open_original(original, modules) if original else None
    hessians = _open_hessians(hessian, modules) if hessian else None

    linears, why_not = _architecture(checkpoint)
    if linears is None:
        report.notes.append(f"the model's architecture could not be built ({why_not}): shapes "
                            "are checked against the packed codes, and Linears stored "
                            "unquantized are not looked for")
    problems, notes = config_problems(fmt_info, model, modules, linears, checkpoint)
    report.problems += problems
    report.notes += notes

    from hscale.quantize_model import fused_sets
    sets = fused_sets(modules)
    set_amax = _fused_set_amax(source, sets) if source is not None else {}
    hint = _recipe_hint(checkpoint)
    for module, tensors in modules.items():
        layer = LayerResult(module, dict(tensors), fused_with=sets[module])
        arrays = read_layer(model, fmt, layer, linears)
        if arrays is not None and source is not None:
            classify_layer(layer, arrays, source, hessians, set_amax, fmt, hint)
        report.layers.append(layer)

    report.problems += fused_set_problems(report.layers, fmt)
    plausibility_problems(report.layers, fmt)
    report.seconds = time.perf_counter() - started
    return report


def _open_original(original, modules) -> SafetensorsModel:
    """The original model, after checking (from its headers alone) that it holds a weight for
    every quantized Linear: a wrong directory is a mistake said before any work."""
    if not Path(original).is_dir():
        raise CheckpointError(f"--original {original}: no such directory")
    source = SafetensorsModel(original)
    missing = [m for m in modules if f"{m}.weight" not in source.info]
    if missing:
        raise CheckpointError(f"--original {original}: has no {missing[0]}.weight"
                              + (f" (nor {len(missing) - 1} other quantized Linears')"
                                 if len(missing) > 1 else "")
                              + ": not the model this checkpoint was made from?")
    return source


def _open_hessians(hessian, modules) -> SafetensorsModel:
    path = Path(hessian)
    if not path.is_file():
        raise CheckpointError(f"--hessian {hessian}: no such file")
    hessians = SafetensorsModel(path)
    if not any(f"h.{m}" in hessians.info for m in modules):
        raise CheckpointError(f"--hessian {hessian}: holds no h.MODULE for any quantized Linear "
                              "of the checkpoint (hscale calibrate writes them)")
    return hessians


def _architecture(directory: Path):
    """({module: (out, in)} of every nn.Linear of the model's architecture, None) or (None, why)."""
    try:
        from hscale.quantize_model import architecture_linears
        return architecture_linears(directory), ""
    except Exception as exc:  # noqa: BLE001 - any failure: the check goes on without it
        return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _recipe_hint(directory: Path) -> tuple | None:
    """(method, init) from an hscale quantize report beside the checkpoint: tried first (the
    layers must still reproduce exactly)."""
    from hscale.quantize_model import PIPELINES, REPORT_NAME
    try:
        request = json.loads((directory / REPORT_NAME).read_text())["request"]
        return request["method"], PIPELINES[request["pipeline"]][0]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _fused_set_amax(source: SafetensorsModel, sets: dict) -> dict:
    """module -> the largest amax of its fused set's original weights (NVFP4-CKPT-3), for the
    sets of more than one member (one extra read of their weights)."""
    amax: dict = {}
    for members in {s for s in sets.values() if len(s) > 1}:
        values = []
        for member in members:
            weight = source.array(f"{member}.weight")
            values.append(max(float(np.max(weight)), -float(np.min(weight))) if weight.size
                          else 0.0)
        amax.update({m: max(values) for m in members})
    return amax


# --------------------------------------------------------------------------------------------
# the configs
# --------------------------------------------------------------------------------------------

def config_problems(fmt_info, model, modules, linears, directory: Path) -> tuple[list, list]:
    """(problems, notes): the quantization config against the format (4-bit floats in groups
    of 16) and its ignore / exclude list against what the checkpoint stores."""
    from hscale.quantize_model import _ignored
    fmt = fmt_info.format
    config_name = "config.json" if fmt == "compressed-tensors" else MODELOPT_CONFIG
    if fmt == "modelopt" and not (directory / MODELOPT_CONFIG).is_file():
        config_name = "config.json"
    clause = "NVFP4-CKPT-1" if fmt == "compressed-tensors" else "NVFP4-CKPT-2"
    problems, notes = [], []

    def problem(text):
        problems.append(Problem(config_name, Finding(clause, text, kind="config")))

    config = fmt_info.config
    if fmt == "compressed-tensors":
        if config.get("quantization_status", "compressed") != "compressed":
            problem(f"quantization_status {config.get('quantization_status')!r}: a checkpoint "
                    "with packed codes says 'compressed'")
        groups = config.get("config_groups") or {}
        if not groups:
            problem("quantization_config has no config_groups: nothing says the weights are "
                    "NVFP4")
        for name, group in groups.items():
            weights = (group or {}).get("weights") if isinstance(group, dict) else None
            if not weights:
                problem(f"config group {name!r} has no weights quantization")
                continue
            want = {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                    "group_size": GROUP, "symmetric": True}
            for key, value in want.items():
                if weights.get(key) != value:
                    problem(f"config group {name!r}: weights {key} {weights.get(key)!r}, NVFP4 "
                            f"is {value!r}")
            if group.get("format") not in (None, "nvfp4-pack-quantized"):
                problem(f"config group {name!r}: format {group.get('format')!r}, not "
                        "'nvfp4-pack-quantized'")
            if group.get("input_activations"):
                notes.append(f"config group {name!r} quantizes activations too: only the "
                             "weights are checked")
    else:
        quant = config.get("quantization", config)
        if quant.get("group_size") != GROUP:
            problem(f"group_size {quant.get('group_size')!r}, NVFP4 is {GROUP}")
        if quant.get("quant_algo") == "NVFP4" and not any(
                name.endswith(".input_scale") for name in model.info):
            notes.append(f"{config_name} says quant_algo NVFP4, ModelOpt's W4A4 recipe, but no "
                         "input_scale tensors are stored: a loader that quantizes activations "
                         "finds no scales for them (ModelOpt names weights-only NVFP4 "
                         "W4A16_NVFP4); only the weights are checked")
    word = "ignore" if fmt == "compressed-tensors" else "exclude_modules"
    for module in modules:
        pattern = _ignored(module, fmt_info.ignore)
        if pattern is not None:
            problem(f"{module} is stored quantized, but the {word} list names it ({pattern!r}): "
                    "a loader expects it unquantized")
    if linears is not None:
        for module in linears:
            info = model.info.get(f"{module}.weight")
            if module in modules or info is None or info.dtype not in ("F32", "F16", "BF16"):
                continue
            if _ignored(module, fmt_info.ignore) is None:
                problem(f"{module} is a Linear stored unquantized ({module}.weight {info.dtype}), "
                        f"but the {word} list does not name it: a loader expects "
                        f"{quantized_tensor_names(fmt, module)['packed']}")
    return problems, notes


# --------------------------------------------------------------------------------------------
# one layer from the file alone
# --------------------------------------------------------------------------------------------

def read_layer(model: SafetensorsModel, fmt: str, layer: LayerResult, linears) -> dict | None:
    """Check one quantized Linear's tensors (names, dtypes, shapes, global scale, scale bytes)
    and gather its decoded statistics into ``layer``; returns its arrays (packed, scale_bytes,
    codes, global_scale) when they can be judged further, else None."""
    from hscale.reference.packing import swizzled_size
    clause = "NVFP4-CKPT-1" if fmt == "compressed-tensors" else "NVFP4-CKPT-2"
    names = quantized_tensor_names(fmt, layer.module)
    layer.tensors = names
    missing = [role for role in names if names[role] not in model.info]
    for role in missing:
        present = [names[r] for r in names if r not in missing]
        layer.problem(role, clause, f"missing: the {fmt} layout stores {names[role]} beside "
                      f"{', '.join(present)}", kind="structure")
    if missing:
        return None
    infos = {role: model.info[names[role]] for role in names}
    broken = False
    for role, info in infos.items():
        if info.dtype != ROLE_DTYPES[role]:
            layer.problem(role, clause, f"dtype {info.dtype}, the {fmt} layout stores "
                          f"{ROLE_DTYPES[role]}", kind="structure", expected=ROLE_DTYPES[role],
                          observed=info.dtype)
            broken = True
    if linears is not None and layer.module in linears:
        rows, cols = linears[layer.module]
    elif len(infos["packed"].shape) == 2:
        rows, cols = infos["packed"].shape[0], 2 * infos["packed"].shape[1]
    else:
        layer.problem("packed", "NVFP4-PACK-1", f"shape {infos['packed'].shape}: packed codes "
                      "are 2-D (out, in/2)", kind="structure")
        return None
    layer.shape = (rows, cols)
    if cols % GROUP:
        layer.problem("packed", "NVFP4-IN-1", f"in_features {cols} is not a multiple of the "
                      f"group size {GROUP}", kind="structure")
        return None
    wanted = {"packed": ((rows, cols // 2), "NVFP4-PACK-1", "(out, in/2)"),
              "scale": ((rows, cols // GROUP), "NVFP4-PACK-2", "(out, in/16), row-major"),
              "global": (GLOBAL_SHAPES[fmt], clause, "the layout's")}
    for role, (shape, shape_clause, what) in wanted.items():
        found = infos[role].shape
        if found == shape:
            continue
        text = f"shape {found}, expected {shape} {what} for the ({rows}, {cols}) Linear"
        if role == "scale" and math.prod(found) == swizzled_size(rows, cols // GROUP) \
                and math.prod(found) != rows * (cols // GROUP):
            shape_clause = "NVFP4-PACK-3"
            text += (f"; {math.prod(found)} bytes is the size of the swizzled 128x4 layout of "
                     "NVFP4-PACK-3, which is for GEMM kernels, not for checkpoints")
        layer.problem(role, shape_clause, text, kind="structure", expected=str(shape),
                      observed=str(found))
        broken = True
    if broken:
        return None

    packed = model.array(names["packed"])
    scale_bytes = model.array(names["scale"])
    stored = np.float32(model.array(names["global"]).reshape(-1)[0])
    layer.stored_global_scale = float(stored)
    global_scale = _usable_global_scale(layer, fmt, stored)
    codes = _statistics(layer, packed, scale_bytes, global_scale)
    if global_scale is None:
        return None
    return {"packed": packed, "scale_bytes": scale_bytes, "codes": codes,
            "global_scale": global_scale}


def _usable_global_scale(layer: LayerResult, fmt: str, stored: np.float32):
    """The multiplier s_g the stored value means, or None (and a finding) when it is not a
    usable fp32: finite, positive, normal, its dequantized range finite (NVFP4-GS-2, GS-4)."""
    from hscale.reference.global_scale import dequantizes_finitely
    value = float(stored)
    if fmt == "compressed-tensors":
        # r must be a positive normal fp32 whose reciprocal is a normal fp32 (NVFP4-GS-4).
        usable = np.isfinite(value) and FP32_SMALLEST_NORMAL <= value <= 2.0 ** 126
        if not usable:
            layer.problem("global", "NVFP4-GS-4", f"the stored reciprocal r = {_f32(value)} is "
                          "not a positive normal fp32 whose reciprocal is a normal fp32",
                          kind="sg")
            return None
        global_scale = implied_global_scale(fmt, stored)
    else:
        global_scale = stored
        if not (np.isfinite(value) and value >= FP32_SMALLEST_NORMAL):
            layer.problem("global", "NVFP4-GS-2", f"s_g = {_f32(value)}: a global scale is a "
                          "positive normal fp32", kind="sg")
            return None
    if not dequantizes_finitely(global_scale):
        layer.problem("global", "NVFP4-GS-2", f"s_g = {_f32(global_scale)}: 6 * 448 * s_g "
                      "overflows fp32, so the largest codes decode to infinity", kind="sg")
        return None
    layer.global_scale = float(global_scale)
    return global_scale


def _statistics(layer: LayerResult, packed, scale_bytes, global_scale) -> np.ndarray:
    """Scale-byte findings (NaN, negative, zero under non-zero codes) and the counts a reader
    wants; returns the unpacked codes."""
    from hscale.reference import SCALE_BYTE_VALUES, unpack_codes
    rows, cols = layer.shape
    codes = unpack_codes(packed)
    magnitude = (codes & 0x7).reshape(rows, cols // GROUP, GROUP)
    live_codes = magnitude.any(axis=2)  # some element of the group is not +-0
    nan = (scale_bytes & 0x7F) == 0x7F
    negative = ((scale_bytes & 0x80) != 0) & ~nan
    zero_under_codes = (scale_bytes == 0) & live_codes

    def listed(mask, clause, describe):
        hits = np.argwhere(mask)
        for r, i in hits[:LISTED]:
            layer.problem("scale", clause, describe(int(scale_bytes[r, i])),
                          group=(int(r), int(i)), kind="byte",
                          observed=f"0x{int(scale_bytes[r, i]):02X}")
        if len(hits) > LISTED:
            layer.problems.append(counted(layer.tensors["scale"], clause, len(hits) - LISTED))

    listed(nan, "NVFP4-E4M3-1", lambda b: f"scale byte 0x{b:02X} is NaN (0x7F and 0xFF are NaN "
                                          "in E4M3): the group decodes to NaN")
    listed(negative, "NVFP4-E4M3-3", lambda b: f"scale byte 0x{b:02X} has the sign bit set: "
                                               "scale bytes are the positive ladder 0x01..0x7E "
                                               "(and 0x00)")
    listed(zero_under_codes, "NVFP4-ZERO-1",
           lambda b: "scale byte 0x00 (a zero group) under codes that are not all zero: every "
                     "element decodes to 0 whatever its code")
    valid = ~nan & ~negative
    dead = ~live_codes | (scale_bytes == 0)
    top = np.take(np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]), magnitude.max(axis=2))
    byte_values = np.where(valid, SCALE_BYTE_VALUES[np.where(valid, scale_bytes, 0) & 0x7F], 0.0)
    units = float(np.max(top * byte_values)) if top.size else 0.0  # max |q| * e4m3(c)
    layer.stats = {
        "weights": rows * cols, "groups": int(scale_bytes.size),
        "dead_groups": int(np.count_nonzero(dead)),
        "zero_rows": int(np.count_nonzero(dead.all(axis=1))),
        "zero_bytes": int(np.count_nonzero(scale_bytes == 0)),
        "subnormal_bytes": int(np.count_nonzero((scale_bytes >= 0x01) & (scale_bytes <= 0x07))),
        "saturated_bytes": int(np.count_nonzero(scale_bytes == 0x7E)),
        "nan_bytes": int(np.count_nonzero(nan)), "negative_bytes": int(np.count_nonzero(negative)),
        "largest_byte": f"0x{int(np.max(np.where(valid, scale_bytes, 0))):02X}",
        # the largest |decoded weight| is max(|q| e4m3(c)) s_g (exact in float64)
        "code_units_max": units,
    }
    if global_scale is not None:
        layer.stats["decoded_amax"] = units * float(global_scale)
    return codes


# --------------------------------------------------------------------------------------------
# the checkpoint-wide judgements
# --------------------------------------------------------------------------------------------

def fused_set_problems(layers: list, fmt: str) -> list:
    """Fused layers whose stored global scales differ (NVFP4-CKPT-3)."""
    stored = {layer.module: layer.stored_global_scale for layer in layers}
    problems, seen = [], set()
    for layer in layers:
        members = layer.fused_with
        if len(members) < 2 or members in seen:
            continue
        seen.add(members)
        values = {m: stored.get(m) for m in members}
        if None in values.values() or len({_bits(v) for v in values.values()}) == 1:
            continue
        meaning = {m: float(implied_global_scale(fmt, np.float32(v))) for m, v in values.items()}
        shown = ", ".join(f"{m.rsplit('.', 1)[-1]} s_g = {meaning[m]!r} ({_bits(values[m])} "
                          "stored)" for m in members)
        name = f"{members[0].rsplit('.', 1)[0]}.{{{','.join(m.rsplit('.', 1)[-1] for m in members)}}}"
        problems.append(Problem(name, Finding(
            "NVFP4-CKPT-3", f"fused layers with different global scales: {shown}; an engine "
            "fuses them into one matmul with one s_g (the largest) and mis-scales the others",
            kind="fused")))
    return problems


def plausibility_problems(layers: list, fmt: str) -> None:
    """Layers whose global scale decodes absurd weights, for those not judged against their
    original already: the reference magnitude is the other layers' median (or, with fewer than
    three layers, the largest magnitude a trained Linear reaches)."""
    judged = [layer for layer in layers if layer.stats.get("decoded_amax")
              and "original_amax" not in layer.stats]
    read = {layer.module: layer.stats["decoded_amax"] for layer in layers
            if layer.stats.get("decoded_amax")}
    for layer in judged:
        others = [v for m, v in read.items() if m != layer.module]
        implausible_global_scale(layer, fmt, float(np.median(others)) if len(others) >= 2
                                 else None)


def implausible_global_scale(layer: LayerResult, fmt: str, reference) -> bool:
    """Whether the layer's global scale decodes weights far from ``reference`` (the original's
    amax, or the other layers' median; None: compared with what no trained Linear reaches), and
    if so a finding, which says when the stored value reads sensibly in the other convention
    (a compressed-tensors reciprocal stored as the multiplier, or the reverse, NVFP4-GS-4)."""
    other = "modelopt" if fmt == "compressed-tensors" else "compressed-tensors"
    magnitude = layer.stats["decoded_amax"]
    other_magnitude = layer.stats["code_units_max"] * float(
        implied_global_scale(other, np.float32(layer.stored_global_scale)))
    if reference is not None and _decades(magnitude, reference) > IMPLAUSIBLE_DECADES:
        plausible_other = _decades(other_magnitude, reference) < 1
    elif reference is None and magnitude > IMPLAUSIBLE_MAGNITUDE:
        plausible_other = other_magnitude < magnitude
    else:
        return False
    if "original_amax" in layer.stats:
        compared = f"the original weights reach {layer.stats['original_amax']:.4g}"
    elif reference is not None:
        compared = f"the other layers' median is {reference:.4g}"
    else:
        compared = f"no trained Linear reaches {IMPLAUSIBLE_MAGNITUDE:g}"
    convention = "the reciprocal r" if fmt == "compressed-tensors" else "the multiplier s_g"
    text = (f"stored {_f32(layer.stored_global_scale)}, read as {convention} as {fmt} stores "
            f"it, decodes the weights up to {magnitude:.4g}, where {compared}")
    if plausible_other:
        text += (f"; read as {other} stores it they reach {other_magnitude:.4g}: the global "
                 "scale looks stored in the other convention")
    layer.problem("global", "NVFP4-GS-4" if plausible_other else "NVFP4-GS-1", text, kind="sg")
    return True


def _decades(value: float, reference) -> float:
    if reference is None or not value > 0 or not reference > 0:
        return 0.0
    return abs(math.log10(value / reference))


# --------------------------------------------------------------------------------------------
# one layer against its original weights
# --------------------------------------------------------------------------------------------

def classify_layer(layer: LayerResult, arrays: dict, source: SafetensorsModel, hessians,
                   set_amax: dict, fmt: str, hint) -> None:
    """Re-derive the layer from its original weight at the s_g its file implies and classify it
    (exact, faithful with allowances, format, or not certified), by the one diagnoser."""
    from hscale.reference.validation import WEIGHT_DTYPES, check_weight_finite
    weight = source.array(f"{layer.module}.weight")
    if weight.shape != layer.shape:
        layer.problem("packed", "NVFP4-CKPT-1" if fmt == "compressed-tensors" else
                      "NVFP4-CKPT-2", f"the original {layer.module}.weight is {weight.shape}, "
                      f"the checkpoint stores a {layer.shape} Linear", kind="structure")
        return
    if weight.dtype not in WEIGHT_DTYPES:
        layer.notes.append(f"the original weight is {weight.dtype}: not judged against it")
        return
    try:
        check_weight_finite(weight)
    except ValueError as exc:
        layer.notes.append(f"the original weight is not finite ({exc}): not judged against it")
        return
    amax = max(float(np.max(weight)), -float(np.min(weight)))
    layer.stats["original_amax"] = amax
    if amax > 0 and implausible_global_scale(layer, fmt, amax):
        layer.verdict = "not certified"  # every byte and code would follow from the s_g
        return
    h, H = _layer_hessians(layer, hessians)
    global_scale = arrays["global_scale"]
    layer.global_scale_note = _global_scale_note(fmt, global_scale,
                                                 set_amax.get(layer.module, amax))
    observed_bits = SimpleNamespace(packed=arrays["packed"], scale_bytes=arrays["scale_bytes"],
                                    global_scale=global_scale)
    recipes = _recipes(hint, h is not None)
    cases = {}  # (method, init) -> Case, each computing the reference's result once

    def case_of(method, init, ceiling):
        from hscale.judge.cases import Case
        key = (method, init)
        if key not in cases:
            cases[key] = Case(weight=weight, hessian_diag=h if method == "hscale" else None,
                              method=method, init=init, scale_ceiling=ceiling,
                              global_scale=global_scale, id=layer.module)
        return cases[key]

    exact = _exact_recipe(layer, arrays, observed_bits, recipes, case_of)
    if exact is not None:
        layer.verdict, layer.recipe = "exact", " ".join(exact[:2])
    else:
        _certify(layer, arrays, observed_bits, recipes, case_of)
    rtn = case_of("rtn", "maxabs", 448.0).reference_outputs
    _quality(layer, weight, arrays, rtn, h, H)


def _recipes(hint, have_h: bool) -> list:
    recipes = [r for r in RECIPES if have_h or r[0] != "hscale"]
    if hint is not None:
        recipes.sort(key=lambda r: (r[0], r[1]) != tuple(hint))
    return recipes


def _layer_hessians(layer: LayerResult, hessians):
    if hessians is None:
        return None, None
    h = H = None
    cols = layer.shape[1]
    if f"h.{layer.module}" in hessians.info:
        h = hessians.array(f"h.{layer.module}").astype(np.float64)
        if h.shape != (cols,) or not np.all(np.isfinite(h)) or np.any(h < 0):
            layer.notes.append(f"h.{layer.module} in the hessian file is not {cols} finite "
                               "non-negative values: not used")
            h = None
    else:
        layer.notes.append(f"the hessian file has no h.{layer.module}: judged without h")
    if h is not None and f"H.{layer.module}" in hessians.info \
            and hessians.info[f"H.{layer.module}"].shape == (cols, cols):
        H = hessians.array(f"H.{layer.module}").astype(np.float64)
    return h, H


def _global_scale_note(fmt: str, global_scale, amax: float) -> str:
    """How the file's s_g relates to NVFP4-GS-1's for the amax of its fused set (information:
    a pipeline may choose its own s_g, NVFP4-GS-3; the layer is judged at the file's)."""
    from hscale.reference import compute_global_scale
    for ceiling in (448.0, 256.0):
        try:
            spec = writable_global_scale(fmt, compute_global_scale(amax, ceiling))
        except ValueError:
            continue
        if spec == global_scale:
            how = "" if fmt == "modelopt" else ", as its stored reciprocal reads back"
            return f"NVFP4-GS-1 with C = {ceiling:g}{how}"
    spec = np.float32(compute_global_scale(amax, 448.0)) if amax > 0 else np.float32(1.0)
    ulps = int(np.array(global_scale, np.float32).view(np.int32)) - \
        int(np.array(spec, np.float32).view(np.int32))
    if abs(ulps) <= 4:
        return f"{ulps:+d} fp32 ulp from NVFP4-GS-1's {float(spec)!r} (C = 448)"
    return f"its own: x{float(global_scale) / float(spec):.6g} NVFP4-GS-1's {float(spec)!r} (C = 448)"


def _exact_recipe(layer, arrays, observed_bits, recipes, case_of):
    """The first recipe whose reference result is the stored one byte for byte, confirmed by
    the exact profile of the one diagnoser; None if none is. A searched method is tried only
    where every stored byte lies in the window of its init's RTN byte (else it cannot be it)."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import diagnose, observe
    stored_bytes = arrays["scale_bytes"].astype(np.int16)
    for method, init, ceiling in recipes:
        if method != "rtn":
            rtn = case_of("rtn", init, ceiling).reference_outputs
            if isinstance(rtn, Rejection):
                continue
            shift = stored_bytes - rtn.scale_bytes.astype(np.int16)
            live = rtn.scale_bytes != 0
            if np.any(live & ((shift < -WINDOW_DOWN) | (shift > WINDOW_UP))):
                continue
        case = case_of(method, init, ceiling)
        expected = case.reference_outputs
        if isinstance(expected, Rejection):
            layer.notes.append(f"{method} {init}: the reference rejects the inputs "
                               f"({expected.message})")
            continue
        if not (np.array_equal(expected.scale_bytes, arrays["scale_bytes"])
                and np.array_equal(expected.packed, arrays["packed"])):
            continue
        observed, _ = observe(observed_bits, case)
        if observed is not None and diagnose(case, observed).ok:
            return method, init
    return None


def _certify(layer, arrays, observed_bits, recipes, case_of) -> None:
    """Not exact: the faithful certificate, then the format profile, each tried with no
    allowance, then all, then only those used; else the findings of the format profile with
    every allowance (what is wrong whatever the layer's scale rule), preceded by what explains
    them where something does (swapped nibbles, a swizzled scale tensor)."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import diagnose, observe
    from hscale.judge.profiles import ALLOWANCES, FAITHFUL, FORMAT

    def certified(case, profile):
        """(the diagnosis that certifies the layer, None) or (None, the findings with every
        allowance and how many more it counted)."""
        observed, structure = observe(observed_bits, case)
        if observed is None:
            return None, (structure, Counter())
        tried = diagnose(case, observed, profile=profile)
        if tried.ok:
            return tried, None
        every = diagnose(case, observed, profile=profile, allowances=tuple(ALLOWANCES))
        if not every.ok:
            return None, (every.findings, every.unlisted)
        used = tuple(a for a in ALLOWANCES if every.allowance_uses.get(a))
        minimal = diagnose(case, observed, profile=profile, allowances=used)
        return (minimal if minimal.ok else every), None

    for method, init, ceiling in recipes:
        case = case_of(method, init, ceiling)
        if isinstance(case.reference_outputs, Rejection):
            continue
        diagnosis, _ = certified(case, FAITHFUL)
        if diagnosis is not None:
            layer.verdict, layer.recipe = "faithful", f"{method} {init}"
            layer.allowances = dict(diagnosis.allowance_uses)
            if diagnosis.tolerance_uses:
                layer.notes.append(f"{diagnosis.tolerance_uses} groups accepted within the "
                                   "faithful objective tolerance")
            return
    case = case_of("rtn", "maxabs", 448.0)
    diagnosis, rejected = certified(case, FORMAT)
    if diagnosis is not None:
        layer.verdict = "format"
        layer.allowances = dict(diagnosis.allowance_uses)
        return
    findings, unlisted = rejected
    layer.verdict = "not certified"
    explained = _explanations(layer, arrays, observed_bits, recipes, case_of)
    layer.problems += explained
    if explained:  # what the format profile finds then follows from it
        total = len(findings) + sum(unlisted.values())
        layer.notes.append(f"the format profile's {plural(total, 'finding')} about its codes "
                           "and bytes follow from the finding above")
        return
    for finding in findings:
        layer.problems.append(Problem(_tensor_of(layer, finding.clause), finding))
    _add_counts(layer, unlisted)


def _add_counts(layer: LayerResult, unlisted: Counter) -> None:
    """How many more findings of each clause the diagnoser counted without listing them."""
    for clause, count in unlisted.items():
        if count:
            layer.problems.append(counted(_tensor_of(layer, clause), clause, count))


def counted(tensor: str, clause: str, count: int) -> Problem:
    """``count`` more findings of ``clause`` about ``tensor``, counted, not listed (the table
    adds them to its "... and N more")."""
    return Problem(tensor, Finding(clause, f"... and {count} more, counted but not listed",
                                   kind="count", observed=str(count)))


def _explanations(layer, arrays, observed_bits, recipes, case_of) -> list:
    """Findings that explain a layer no profile certifies, where one does: the exact profile's
    own diagnosis when the scale bytes are a recipe's and only the packing differs (swapped
    nibbles, NVFP4-PACK-1), and scale bytes that are a recipe's in the swizzled 128x4 layout
    (NVFP4-PACK-3)."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import diagnose, observe
    from hscale.reference import unswizzle_scale_bytes
    from hscale.reference.packing import swizzled_size
    rows, scale_cols = arrays["scale_bytes"].shape
    for method, init, ceiling in recipes:
        case = case_of(method, init, ceiling)
        expected = case.reference_outputs
        if isinstance(expected, Rejection):
            continue
        if np.array_equal(expected.scale_bytes, arrays["scale_bytes"]):
            observed, _ = observe(observed_bits, case)
            diagnosis = diagnose(case, observed) if observed is not None else None
            if diagnosis is not None and diagnosis.clauses() == ["NVFP4-PACK-1"]:
                found = [Problem(layer.tensors["packed"], f) for f in diagnosis.findings]
                more = sum(diagnosis.unlisted.values())
                if more:
                    found.append(counted(layer.tensors["packed"], "NVFP4-PACK-1", more))
                return found
        if arrays["scale_bytes"].size == swizzled_size(rows, scale_cols):
            unswizzled = unswizzle_scale_bytes(arrays["scale_bytes"].reshape(-1), rows,
                                               scale_cols)
            if np.array_equal(unswizzled, expected.scale_bytes):
                return [Problem(layer.tensors["scale"], Finding(
                    "NVFP4-PACK-3", f"the scale bytes are {method} {init}'s in the swizzled "
                    "128x4 layout of GEMM kernels; a checkpoint stores them row-major, byte "
                    "[r, i] for group (r, i) (NVFP4-PACK-2)", kind="layout"))]
    return []


def _tensor_of(layer: LayerResult, clause: str) -> str:
    """The tensor a diagnoser finding is about, from its clause."""
    if clause.startswith(("NVFP4-E2M1", "NVFP4-PACK-1")):
        return layer.tensors["packed"]
    if clause.startswith("NVFP4-GS"):
        return layer.tensors["global"]
    return layer.tensors["scale"]


def _quality(layer, weight, arrays, rtn, h, H) -> None:
    """Weight MSE, and with h the diagonal proxy sum_j h_j dW_ij^2 (and Tr(dW H dW^T) with H),
    each beside RTN's at the same s_g (``layer_quality``), and the shifts from RTN's bytes."""
    from hscale.judge.cases import Rejection
    from hscale.quantize_model import layer_quality
    if isinstance(rtn, Rejection):
        return
    shift = arrays["scale_bytes"].astype(np.int16) - rtn.scale_bytes.astype(np.int16)
    stored = SimpleNamespace(codes=arrays["codes"], scale_bytes=arrays["scale_bytes"],
                             global_scale=arrays["global_scale"],
                             delta=np.clip(shift, -128, 127).astype(np.int8))
    layer.quality = layer_quality(weight, stored, rtn, h, H)
    layer.quality["shifts_from_rtn"] = layer.quality.pop("shifts", {})


# --------------------------------------------------------------------------------------------
# what the user reads
# --------------------------------------------------------------------------------------------

def format_report(report: CheckReport, all_layers: bool = False) -> str:
    """The per-layer table (every layer up to TABLE_ALL_LAYERS, else those with findings or not
    exact), the totals, and the findings: one screen for a small model."""
    totals = report.totals()
    lines = [f"{report.checkpoint}: {report.format} NVFP4, {plural(totals['layers'], 'quantized Linear')}, "
             f"{totals['weights']:,} weights"
             + (f"; against {report.original}" if report.original else "")
             + (f" with h from {report.hessian}" if report.hessian else "")]
    have_quality = any("diag_error" in layer.quality for layer in report.layers)
    listed = [layer for layer in report.layers
              if all_layers or len(report.layers) <= TABLE_ALL_LAYERS or layer.problems
              or layer.verdict not in ("", "exact")]
    header = (f"{'layer':46} {'shape':>10} {'s_g':>11} {'dead':>5} {'sub':>5} {'sat':>6}  "
              f"{'verdict':38}")
    if have_quality:
        header += f" {'diag(H) err':>11} {'output err':>10}"
    lines.append(header + "  findings")
    for layer in listed:
        name = layer.module if len(layer.module) <= 46 else "..." + layer.module[-43:]
        shape = "x".join(map(str, layer.shape)) if layer.shape else "?"
        sg = f"{layer.global_scale:.4g}" if layer.global_scale is not None else "-"
        stats = layer.stats
        verdict = _verdict_text(layer)
        row = (f"{name:46} {shape:>10} {sg:>11} {stats.get('dead_groups', '-'):>5} "
               f"{stats.get('subnormal_bytes', '-'):>5} {stats.get('saturated_bytes', '-'):>6}  "
               f"{verdict:38}")
        if have_quality:
            row += f" {_ratio(layer.quality, 'diag_error'):>11} {_ratio(layer.quality, 'output_error'):>10}"
        clauses = Counter()
        for problem in layer.problems:
            clauses[problem.finding.clause] += problem.count
        row += "  " + (", ".join(f"{c} x{n}" for c, n in clauses.items()) or "-")
        lines.append(row)
    if len(listed) < len(report.layers):
        lines.append(f"({len(report.layers) - len(listed)} more layers, exact and without "
                     "findings, not listed; --all lists them)")
    lines.append(_totals_line(report, totals))
    if have_quality:
        lines.append("diag(H) err, output err: the layer's sum_j h_j dW_ij^2 and "
                     "Tr(dW H dW^T), relative to RTN's at the same s_g")
    for note in report.notes:
        lines.append(f"note: {note}")
    problems = report.all_problems()
    if problems:
        lines.append("")
        lines.append(f"findings ({totals['findings']}):")
        lines += _render_problems(problems)
    for layer in report.layers:
        for note in layer.notes:
            lines.append(f"note: {layer.module}: {note}")
    lines.append("")
    where = [plural(totals["layers_with_findings"], "layer")] * bool(
        totals["layers_with_findings"]) + ["the checkpoint as a whole"] * bool(report.problems)
    lines.append("conforms" if report.conforms else
                 f"does not conform: {plural(totals['findings'], 'finding')}, about "
                 + " and ".join(where))
    return "\n".join(lines)


def _verdict_text(layer: LayerResult) -> str:
    if not layer.verdict:
        return "findings" if layer.problems else "format ok"
    # the recipe without the default init: "rtn", "hscale", "rtn 4over6"
    text = layer.verdict + (f" {layer.recipe.replace(' maxabs', '')}" if layer.recipe else "")
    if layer.allowances:
        text += " (" + ", ".join(f"{a} {n}" for a, n in layer.allowances.items()) + ")"
    return text


def _ratio(quality: dict, key: str) -> str:
    if key not in quality or not quality.get(key + "_rtn"):
        return "-"
    return f"{quality[key] / quality[key + '_rtn']:.3f}"


def _totals_line(report: CheckReport, totals: dict) -> str:
    verdicts = ", ".join(f"{n} {v}" for v, n in totals["verdicts"].items())
    recipes = "; ".join(f"{n} {r}" for r, n in totals["recipes"].items())
    allowances = ", ".join(f"{a} {n}" for a, n in totals["allowances"].items())
    return (f"totals: {verdicts}" + (f" ({recipes})" if recipes else "")
            + (f"; allowances used: {allowances}" if allowances else "")
            + f"; {totals['groups']:,} groups: {totals['dead_groups']:,} dead, "
            f"{totals['zero_rows']:,} all-zero rows, {totals['subnormal_bytes']:,} subnormal "
            f"and {totals['saturated_bytes']:,} saturated scale bytes; {report.seconds:.1f} s")


def _render_problems(problems: list) -> list:
    """Each tensor's findings, the first SHOWN of each clause, then how many more."""
    lines = []
    shown: Counter = Counter()
    hidden: Counter = Counter()
    for problem in problems:
        key = (problem.tensor, problem.finding.clause)
        if problem.finding.kind == "count":
            hidden[key] += int(problem.finding.observed)
            continue
        shown[key] += 1
        if shown[key] <= SHOWN:
            lines.append("  " + problem.render())
        else:
            hidden[key] += 1
    for (tensor, clause), count in hidden.items():
        lines.append(f"  {tensor}: [{clause}] ... and {count} more")
    return lines


def write_report(report: CheckReport, path) -> None:
    """The JSON report, written to a temporary name and renamed when complete."""
    from hscale.vectors.formats import write_json_atomically
    write_json_atomically(Path(path), report.as_json())
