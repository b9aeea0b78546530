"""``hscale check``: is an NVFP4 checkpoint, written by any tool, what its format and the spec say?

Two depths (docs/checkpoints.md, "Checking a checkpoint"):

* **The file alone** (structure and format). Every file is validated before it is trusted (the
  containers and the shard index, NVFP4-CKPT-5, NVFP4-GGUF-2; a file that breaks them is refused
  in one line). The format is detected from the configs (``hscale.checkpoints.detect_format``),
  and the checkpoint is judged against the model its config declares (``architecture``,
  NVFP4-CKPT-6: every Linear quantized completely or ignored, nothing else quantized, every
  other tensor present with its shape); every quantized Linear must have its three tensors with
  the layout's names, dtypes and shapes (NVFP4-CKPT-1, -2: packed ``(out, in/2)`` uint8, scale
  bytes ``(out, in/16)`` float8_e4m3fn, the global scale float32); the config must say 4-bit
  floats in groups of 16, and its ignore / exclude list must agree with what is stored; every
  global scale must be a usable fp32 in the format's convention (the reciprocal for
  compressed-tensors, the multiplier for ModelOpt, NVFP4-GS-4) and plausible against the
  decoded weights; no scale byte may be NaN (NVFP4-E4M3-1) or negative, nor 0x00 under codes
  that are not zero (NVFP4-ZERO-1); fused layers (q/k/v, gate/up, MoE w1/w3) must share one
  global scale (NVFP4-CKPT-3). A W4A4 checkpoint's activation scales (NVFP4-CKPT-4): present
  for every quantized Linear and expert, positive normal fp32, plausible in the layout's
  convention, equal across each fused set. Counted for the reader: subnormal (0x01..0x07) and
  saturated (0x7E) scale bytes, dead groups (every element decodes to zero), all-zero rows.
* **With the original weights** (``--original``, and ``--hessian`` for h): every layer is
  re-derived by the spec at the global scale its file implies (a pipeline's own s_g,
  NVFP4-GS-3) and classified by the one diagnoser (``hscale.judge.diagnose``): *exact*
  (byte for byte the reference's RTN, or H-Scale / scale-only / 4over6 when those reproduce
  it), else *faithful* (the suite's certificate, with the allowances of docs/spec.md section 7
  it needed, tried with none, then all, then only those used, as ``hscale interop`` does), else
  *format* (a scale rule of its own: every byte on the ladder, every code the correct rounding
  for the byte chosen), else not certified, with the findings. With h, each layer's output
  error against RTN at the same s_g (``hscale.evaluation.quality.layer_quality``).

The checkpoint is read shard by shard, tensor by tensor (``hscale.checkpoints.SafetensorsModel``):
memory holds one layer's tensors, the original weight and its certificate's float64 copy.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from hscale.checkpoints import CheckpointError, SafetensorsModel, open_checkpoint
from hscale.checkpoints.inputs import ConfigDoesNotBuild
from hscale.models.architecture import fused_sets

from hscale.judge.findings import Finding

from .architecture import CLAUSE as ARCHITECTURE_CLAUSE
from .architecture import architecture_problems, declared_model, unknown_tensors
from .rederive import classify_layer
from .report import CheckReport, LayerResult, Problem, format_report, write_report
from .structure import config_problems, fused_set_problems, plausibility_problems, read_layer

__all__ = ["CheckReport", "check_checkpoint", "format_report", "write_report"]


def check_checkpoint(checkpoint, original=None, hessian=None, backend="auto",
                     error_feedback: bool | None = None) -> CheckReport:
    """Check ``checkpoint`` (a directory), against the ``original`` model directory and
    ``hessian`` (an ``hscale calibrate`` file) when given. A checkpoint or input that cannot be
    read raises ``CheckpointError`` (one line naming the file); everything else it finds is in
    the report. ``backend`` re-derives the layers (``auto``: the fastest here, bit-identical to
    the reference). ``error_feedback``: the codes come from GPTQ-like error feedback (None: as
    the checkpoint's own records say: an hscale report naming the gptq pipeline, or an
    llm-compressor recipe with a GPTQ modifier)."""
    from hscale.backends import get
    from hscale.pipelines import resolve_backend
    from hscale.quantize.kept import kept_h_label, kept_h_path
    if original is not None and Path(original).is_file():  # a GGUF model, as quantize reads it
        from hscale.checkpoints.from_gguf import temporary_model_directory
        with temporary_model_directory(original) as directory:
            report = check_checkpoint(checkpoint, directory, hessian, backend, error_feedback)
        report.original = str(original)
        return report
    started = time.perf_counter()
    # the backend re-derives layers from the original, so it is loaded (and torch imported,
    # seconds) only when there is one
    fast = get(resolve_backend(backend)) if backend and original is not None else None
    checkpoint = Path(checkpoint)
    kept = kept_h_path(checkpoint)
    if hessian is None and original is not None and kept.is_file():
        hessian = kept  # the h hscale quantize kept: H-Scale's bytes can be re-derived
    detected, model, modules = open_checkpoint(checkpoint)
    layout = detected.layout
    report = CheckReport(str(checkpoint), layout.name, str(original) if original else None,
                         str(hessian) if hessian else None)
    if hessian == kept:
        report.notes.append(f"h from {kept_h_label(kept, Path(checkpoint).is_dir())}, which hscale quantize kept beside the "
                            "checkpoint (H-Scale's bytes re-derived with it)")
    source = _open_original(original, modules) if original else None
    hessians = _open_hessians(hessian, modules) if hessian else None

    declared = _declared(checkpoint, detected, model, modules, report)
    linears = declared.matmuls if declared is not None else None
    problems, notes = config_problems(detected, model, modules, linears, checkpoint)
    report.problems += problems
    report.notes += notes

    sets = fused_sets(modules)
    set_amax = _fused_set_amax(source, sets) if source is not None else {}
    hint, made_by = _recipe_hint(checkpoint)
    if error_feedback is None:
        error_feedback = made_by is not None
    if error_feedback and source is not None:
        report.notes.append(
            f"the codes come from error feedback ({made_by or 'as --error-feedback says'}): "
            "GPTQ moves codes away from the rounding of the original weights by design, so "
            "they are judged by the format clauses of the file alone, and their re-derivation "
            "is given as a consistency figure, not as findings")
    for module, tensors in modules.items():
        layer = LayerResult(module, dict(tensors), fused_with=sets[module])
        arrays = read_layer(model, layout, layer, linears)
        if arrays is not None and source is not None:
            classify_layer(layer, arrays, source, hessians, set_amax, layout, hint, fast,
                           error_feedback)
        report.layers.append(layer)

    report.problems += fused_set_problems(report.layers, layout)
    plausibility_problems(report.layers, layout)
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


def _declared(checkpoint: Path, detected, model, modules, report: CheckReport):
    """The model the checkpoint's config declares, its tensors judged against it
    (NVFP4-CKPT-6); None, with a note saying why, when no architecture can be built from the
    config (one transformers does not know): shapes are then checked against the packed codes
    alone."""
    try:
        declared = declared_model(checkpoint, model)
    except ConfigDoesNotBuild as exc:
        report.problems.append(Problem(detected.config_name, Finding(
            ARCHITECTURE_CLAUSE, str(exc), kind="architecture")))
        return None
    except (ValueError, ImportError, OSError) as exc:
        text = str(exc).strip().splitlines()
        report.notes.append(f"the model's architecture could not be built "
                            f"({text[0] if text else type(exc).__name__}): shapes are checked "
                            "against the packed codes, and Linears stored unquantized or "
                            "missing are not looked for")
        return None
    report.problems += architecture_problems(declared, detected, model, modules)
    problems, note = unknown_tensors(declared, detected, model, modules)
    report.problems += problems
    if note:
        report.notes.append(note)
    return declared


def _recipe_hint(directory: Path) -> tuple:
    """((method, init) from an hscale quantize report beside the checkpoint, or None: tried
    first, with RTN; the layers must still reproduce exactly), (what says the codes come from
    error feedback, or None): the report's gptq pipeline, or an llm-compressor recipe.yaml
    with a GPTQ modifier."""
    from hscale.pipelines import PIPELINES
    from hscale.quantize.report import REPORT_NAME
    from hscale.quantize.source import gguf_side_file
    hint = made_by = None
    report = directory / REPORT_NAME if directory.is_dir() else gguf_side_file(directory,
                                                                               "report")
    try:
        request = json.loads(report.read_text())["request"]
        hint = request["method"], PIPELINES[request["pipeline"]].init
        if not PIPELINES[request["pipeline"]].rederivable:
            made_by = f"{report.name} names the {request['pipeline']} pipeline"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        if "GPTQModifier" in (directory / "recipe.yaml").read_text():
            made_by = "recipe.yaml names llm-compressor's GPTQModifier"
    except (OSError, UnicodeDecodeError):
        pass
    return hint, made_by


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
