"""``hscale quantize``: a Hugging Face model directory in, an NVFP4 checkpoint an engine loads out.

The steps (docs/quantize.md has the user's view):

1. **Plan** from the source's safetensors headers and the model's structure (its architecture
   built on the meta device, no weights read): every ``nn.Linear`` whose weight is stored is
   quantized unless the ignore list names it (default ``lm_head``; embeddings and norms are not
   Linears) or its input size is not a multiple of 16 (left as it is, and listed). Linears fused
   by engines (q/k/v, gate/up, MoE w1/w3) form sets that share one global scale.
2. **Calibrate** (H-Scale and GPTQ only): ``h = diag(X^T X)`` per Linear input
   (HSCALE-CAL-1, ``hscale.calibration``), the full ``H`` for GPTQ (and for the quality report
   when it fits in memory); or read from ``--hessian`` (``hscale calibrate``'s file).
3. **Quantize and write**, tensor by tensor straight from the source shards into the output
   shards (``hscale.checkpoint``): each fused set's s_g from the largest amax of the set
   (NVFP4-GS-1), every block scale computed with that s_g (never rescaled afterwards), the
   pipeline's quantizer (RTN and 4over6 through the chosen backend, GPTQ through
   ``hscale.reference.gptq_quantize``, its group step through the backend's
   ``group_quantizer`` where it has one), the result stored in the chosen format. Memory holds the
   tensor being quantized, not the model (the RTN path reads nothing else).
4. **Report**: per layer the weight MSE, the H-weighted error (the diagonal proxy, and the full
   calibration output error ``Tr(dW G dW^T)`` when G is at hand) relative to RTN at the same
   s_g, and the histogram of the chosen shifts; saved as ``quantization_report.json`` in the
   output.

The output is written to a hidden directory beside ``out`` and renamed when complete.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from hscale import __version__
from hscale.checkpoint import (DEFAULT_MAX_SHARD_BYTES, FORMATS, MODELOPT_CONFIG,
                               CheckpointError, OutputDirectory, SafetensorsModel, ShardWriter,
                               TensorInfo, compressed_tensors_config, copy_side_files, read_header,
                               modelopt_config, quantized_tensor_infos, quantized_tensors,
                               to_numpy_bits, writable_global_scale)
from hscale.reference import compute_global_scale, gptq_quantize
from hscale.reference.validation import WEIGHT_DTYPES, check_choice, check_weight_finite

PIPELINES = {  # pipeline -> (init, scale ceiling C)
    "rtn": ("maxabs", 448.0),
    "4over6": ("4over6", 256.0),  # the 4over6 reference's headroom (NVFP4-INIT-2)
    "gptq": ("maxabs", 448.0),
}
METHODS = ("rtn", "scale-only", "hscale")
DEFAULT_IGNORE = ("lm_head",)
# Sibling Linears that engines fuse into one matmul, so they must share one global scale.
FUSED_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"),
                  ("gate_proj", "up_proj"), ("w1", "w3"))
REPORT_NAME = "quantization_report.json"
FULL_HESSIAN_BUDGET = 2 << 30  # bytes of float64 G kept for the report when not needed by GPTQ


@dataclass
class QuantizeRequest:
    """Everything ``hscale quantize`` takes (the command's options, one for one)."""

    model_dir: str | None = None  # None: the bundled all-MiniLM-L6-v2
    out: str = "nvfp4-model"
    pipeline: str = "rtn"
    method: str = "hscale"
    format: str = "compressed-tensors"
    backend: str = "numpy"
    K: int = 16
    U: int = 6
    ignore: tuple[str, ...] = DEFAULT_IGNORE
    calibration_text: str | None = None  # a file, one text per line; None: the bundled text
    samples: int = 512
    seq_len: int = 256
    batch_size: int = 16
    hessian: str | None = None  # hscale calibrate's file
    damp: float = 0.01
    block_size: int = 128
    act_order: bool = False
    static_groups: bool = False
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    force: bool = False
    progress: bool = True
    device: str | None = None  # calibration device ("cpu", "cuda", "auto" for accelerate)
    report_errors: bool = False  # calibrate for the H-weighted errors even when not needed


@dataclass
class LayerPlan:
    """One Linear of the source: quantized, or why not."""

    module: str
    rows: int
    cols: int
    dtype: str
    quantize: bool
    reason: str = ""
    fused_with: tuple[str, ...] = ()


@dataclass
class QuantizeReport:
    request: dict
    source: str
    out: str
    layers: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# checking the request
# --------------------------------------------------------------------------------------------

def check_request(request: QuantizeRequest) -> None:
    """Every option checked before any work (one clear error each)."""
    if request.pipeline not in PIPELINES:
        raise ValueError(f"--pipeline {request.pipeline!r}: one of {', '.join(PIPELINES)}")
    check_choice("method", request.method, METHODS)
    if request.format not in FORMATS:
        raise ValueError(f"--format {request.format!r}: one of {', '.join(FORMATS)}")
    for name in ("samples", "seq_len", "batch_size", "block_size", "max_shard_bytes"):
        value = getattr(request, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value!r}: must be a positive integer")
    if not (math.isfinite(request.damp) and request.damp >= 0):
        raise ValueError(f"--damp {request.damp!r}: must be finite and >= 0")
    if request.static_groups and request.pipeline != "gptq":
        raise ValueError("--static-groups: only the gptq pipeline has groups to fix up front")
    if request.act_order and request.pipeline != "gptq":
        raise ValueError("--act-order: only the gptq pipeline has a column order")
    if request.calibration_text is not None and not Path(request.calibration_text).is_file():
        raise ValueError(f"--calibration-text {request.calibration_text}: no such file")
    if request.hessian is not None:
        if not Path(request.hessian).is_file():
            raise ValueError(f"--hessian {request.hessian}: no such file")
        try:
            read_header(Path(request.hessian))
        except CheckpointError as exc:
            raise ValueError(f"--hessian {request.hessian}: unreadable, not an hscale "
                             f"calibrate file ({exc})") from None
    from hscale.backends import get
    backend = get(request.backend)
    ok, why = backend.available()
    if not ok:
        raise ValueError(f"--backend {request.backend}: not available here: {why}")


def needs_calibration(request: QuantizeRequest) -> bool:
    return request.method == "hscale" or request.pipeline == "gptq"


# --------------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------------

def model_directory(request: QuantizeRequest) -> Path:
    if request.model_dir is None:
        from hscale.models import minilm_model_dir
        return minilm_model_dir()
    directory = Path(request.model_dir)
    if not directory.is_dir():
        raise ValueError(f"{directory}: no such model directory")
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory}: no config.json (not a Hugging Face model directory)")
    return directory


def architecture(directory) -> tuple:
    """``(model class, config)`` of a model directory: the transformers class its config.json
    names in ``architectures``."""
    import transformers
    from hscale.models import _quiet_transformers
    with _quiet_transformers():
        config = transformers.AutoConfig.from_pretrained(directory)
    names = list(config.architectures or [])
    cls = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), None)
    if cls is None:
        raise ValueError(f"{directory}/config.json: architecture {names or '(none)'} is not one "
                         f"that the installed transformers {transformers.__version__} knows")
    return cls, config


def architecture_linears(directory: Path) -> dict[str, tuple[int, int]]:
    """{module name: (out, in)} of every nn.Linear of the model's architecture, built on the
    meta device from its config (no weights read)."""
    import torch
    from hscale.models import _quiet_transformers
    cls, config = architecture(directory)
    with torch.device("meta"), _quiet_transformers():
        model = cls(config)
    return {name: (module.out_features, module.in_features)
            for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def _ignored(module: str, patterns: Iterable[str]) -> str | None:
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.search(pattern[3:], module):
                return pattern
        elif fnmatch.fnmatchcase(module, pattern) or module.split(".")[-1] == pattern:
            return pattern
    return None


def fused_sets(modules: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """module -> the quantized modules it shares a global scale with (itself included)."""
    modules = list(modules)
    present = set(modules)
    sets: dict[str, tuple[str, ...]] = {m: (m,) for m in modules}
    for module in modules:
        parent, _, leaf = module.rpartition(".")
        for siblings in FUSED_SIBLINGS:
            if leaf in siblings:
                members = tuple(f"{parent}.{s}" if parent else s for s in siblings
                                if (f"{parent}.{s}" if parent else s) in present)
                sets[module] = members
    return sets


def plan_layers(source: SafetensorsModel, linears: dict[str, tuple[int, int]],
                ignore: Iterable[str]) -> list[LayerPlan]:
    """The Linears whose weight the source stores, each quantized or not, with the reason."""
    plans = []
    for module, (rows, cols) in linears.items():
        info = source.info.get(f"{module}.weight")
        if info is None:
            continue  # not stored (a tied head): nothing to quantize or copy
        if info.shape != (rows, cols):
            raise CheckpointError(f"{source.directory}: {module}.weight is {info.shape}, the "
                                  f"architecture says ({rows}, {cols})")
        plan = LayerPlan(module, rows, cols, info.dtype, True)
        pattern = _ignored(module, ignore)
        if pattern is not None:
            plan.quantize, plan.reason = False, f"ignored (matches {pattern!r})"
        elif cols % 16:
            plan.quantize, plan.reason = False, (f"in_features {cols} is not a multiple of 16 "
                                                 "(NVFP4-IN-1): left unquantized")
        elif info.dtype not in ("F32", "F16", "BF16"):
            plan.quantize, plan.reason = False, (f"stored as {info.dtype}, not float32, "
                                                 "float16 or bfloat16: left as it is")
        plans.append(plan)
    quantized = [p.module for p in plans if p.quantize]
    sets = fused_sets(quantized)
    for plan in plans:
        if plan.quantize:
            plan.fused_with = sets[plan.module]
    return plans


def output_tensors(source: SafetensorsModel, plans: list[LayerPlan], fmt: str) -> list[TensorInfo]:
    """The output's tensors in the source's order, each quantized weight replaced in place by
    its format's tensors."""
    replaced = {f"{p.module}.weight": p for p in plans if p.quantize}
    tensors = []
    for name, info in source.info.items():
        plan = replaced.get(name)
        if plan is None:
            tensors.append(info)
        else:
            tensors.extend(quantized_tensor_infos(fmt, plan.module, plan.rows, plan.cols))
    return tensors


# --------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------

def calibration_texts(request: QuantizeRequest) -> list[str]:
    from hscale.calibration import calibration_texts as bundled
    if request.calibration_text is None:
        texts = bundled()
    else:
        lines = Path(request.calibration_text).read_text(encoding="utf-8").splitlines()
        texts = [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]
        if not texts:
            raise ValueError(f"--calibration-text {request.calibration_text}: no texts in it")
    return texts[:request.samples]


def calibrate(directory: Path, modules: list[str], request: QuantizeRequest, full: bool,
              texts: list[str] | None = None):
    """({module: h}, {module: H} or {}, facts) from a forward pass over the calibration text
    (or ``texts``)."""
    import torch
    import transformers
    from hscale.calibration import collect_hessian, collect_hessian_diag, text_batches
    from hscale.models import _quiet_transformers
    texts = calibration_texts(request) if texts is None else texts
    cls, _ = architecture(directory)
    with _quiet_transformers():
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        except Exception as exc:  # noqa: BLE001 - any failure: the directory has no tokenizer
            raise ValueError(f"{directory}: no tokenizer to calibrate with ({exc}); pass "
                             "--hessian with h from hscale calibrate") from None
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        options = dict(dtype=torch.float32)
        if request.device == "auto":
            options["device_map"] = "auto"  # accelerate's offload across devices
        model = cls.from_pretrained(directory, **options)
    if request.device not in (None, "auto"):
        model = model.to(request.device)
    model.eval()
    batches = text_batches(tokenizer, texts, request.batch_size, request.seq_len)
    stats: dict = {}
    layers = {name: model.get_submodule(name) for name in modules}
    if full:
        H, h = collect_hessian(model, batches, layers, progress=request.progress,
                               desc="calibration", stats=stats)
    else:
        h, H = collect_hessian_diag(model, batches, layers, progress=request.progress,
                                    desc="calibration", stats=stats), {}
    del model
    facts = {"texts": len(texts), "batches": stats.get("batches"), "seq_len": request.seq_len,
             "tokens": max(stats.get("tokens", {0: 0}).values(), default=0),
             "full_hessian": bool(H)}
    return h, H, facts


def save_hessians(path, h: dict, H: dict, facts: dict) -> None:
    """``hscale calibrate``'s file: ``h.MODULE`` float64 (n,), ``H.MODULE`` (n, n) if full."""
    from safetensors.numpy import save_file
    tensors = {f"h.{name}": np.ascontiguousarray(v, np.float64) for name, v in h.items()}
    tensors.update({f"H.{name}": np.ascontiguousarray(v, np.float64) for name, v in H.items()})
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial")
    save_file(tensors, str(tmp), metadata={"producer": f"hscale-nvfp4 {__version__}",
                                           "facts": json.dumps(facts)})
    tmp.replace(path)


def load_hessians(path, modules: list[str], full: bool):
    """({module: h}, {module: H}) for ``modules`` from an ``hscale calibrate`` file."""
    from safetensors import safe_open
    h, H = {}, {}
    try:
        with safe_open(str(path), framework="numpy") as f:
            names = set(f.keys())
            for module in modules:
                if f"h.{module}" not in names:
                    raise ValueError(f"--hessian {path}: no h for {module} (calibrated for "
                                     "another model or another ignore list?)")
                h[module] = f.get_tensor(f"h.{module}")
                if full:
                    if f"H.{module}" not in names:
                        raise ValueError(f"--hessian {path}: no full H for {module}; gptq needs "
                                         "it: hscale calibrate --full")
                    H[module] = f.get_tensor(f"H.{module}")
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors' own error type for a bad file
        raise ValueError(f"--hessian {path}: unreadable ({exc})") from None
    return h, H


# --------------------------------------------------------------------------------------------
# quantizing one layer
# --------------------------------------------------------------------------------------------

def quantize_weight(weight, hessian_diag=None, *, pipeline="rtn", method="hscale",
                    backend="numpy", hessian=None, global_scale=None, K=16, U=6,
                    damp=0.01, block_size=128, act_order=False, static_groups=False):
    """One weight (a numpy array, or a torch tensor of float32, float16 or bfloat16, taken bit
    for bit) quantized by a pipeline; h (or the full H for gptq) as numpy or torch. Returns the
    reference's ``QuantizedWeight``."""
    from hscale.backends import get
    weight = _as_numpy(weight)
    hessian_diag = None if hessian_diag is None else _as_numpy(hessian_diag)
    init, ceiling = PIPELINES[pipeline]
    quantizer = get(backend) if isinstance(backend, str) else backend
    if pipeline == "gptq":
        if hessian is None:
            raise ValueError("pipeline 'gptq' needs the full Hessian H (n, n)")
        # The sweep is the reference's; a backend that offers one chooses each group's bytes
        # (bit-identical, faster), the others leave that to the reference too.
        group_quantizer = getattr(quantizer, "group_quantizer", None)
        return gptq_quantize(weight, _as_numpy(hessian), method=method, init=init, K=K, U=U,
                             scale_ceiling=ceiling, global_scale=global_scale, damp=damp,
                             block_size=block_size, act_order=act_order,
                             static_groups=static_groups,
                             group_quantizer=group_quantizer() if group_quantizer else None)
    return quantizer.quantize(weight, hessian_diag if method == "hscale" else None, method=method,
                              init=init, K=K, U=U, scale_ceiling=ceiling,
                              global_scale=global_scale)


def _as_numpy(value):
    if type(value).__module__.split(".")[0] == "torch":
        return to_numpy_bits(value)
    return value


def set_global_scale(members, weight_of, fmt: str, ceiling: float) -> np.float32:
    """The one s_g of a fused set (NVFP4-CKPT-3): NVFP4-GS-1 from the largest amax of its
    members (``weight_of(module)`` gives each weight), as ``fmt`` can store it."""
    amax = max(tensor_amax(f"{m}.weight", weight_of(m)) for m in members)
    return writable_global_scale(fmt, compute_global_scale(amax, ceiling))


def tensor_amax(name: str, weight: np.ndarray) -> float:
    """max |w| of a stored weight, after checking that every element is finite (NVFP4-IN-1,
    the message naming the tensor and the first bad index)."""
    try:
        check_weight_finite(weight)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return max(float(np.max(weight)), -float(np.min(weight)))


def layer_quality(weight, result, rtn, h, G, rows_per_block: int = 256) -> dict:
    """Weight MSE, the diagonal proxy sum_j h_j dW_ij^2 and (with G) Tr(dW G dW^T), each with
    the same quantity of RTN at the same s_g, and the shift histogram; computed by blocks of
    rows, so that the float64 differences of a large layer never exist whole."""
    from hscale.reference import dequantize
    sums = Counter()
    for r0 in range(0, weight.shape[0], rows_per_block):
        rows = slice(r0, r0 + rows_per_block)
        w = np.asarray(weight[rows], np.float64)
        for tag, q in (("", result), ("_rtn", rtn)):
            d = w - dequantize(q.codes[rows], q.scale_bytes[rows], q.global_scale)
            sums["weight_se" + tag] += float(np.sum(d * d))
            if h is not None:
                sums["diag_error" + tag] += float(np.sum((d * d) @ h))
            if G is not None:
                sums["output_error" + tag] += float(np.sum((d @ G) * d))  # Tr(dW G dW^T)
    out = {"weight_mse": sums["weight_se"] / weight.size,
           "weight_mse_rtn": sums["weight_se_rtn"] / weight.size}
    for key in ("diag_error", "output_error"):
        if key in sums:
            out[key], out[key + "_rtn"] = sums[key], sums[key + "_rtn"]
    if result.delta is not None:
        live = result.scale_bytes != 0
        values, counts = np.unique(result.delta[live], return_counts=True)
        out["shifts"] = {int(v): int(c) for v, c in zip(values, counts)}
    return out


# --------------------------------------------------------------------------------------------
# the whole model
# --------------------------------------------------------------------------------------------

def quantize_model(request: QuantizeRequest | None = None, **options) -> QuantizeReport:
    """``hscale quantize``'s work (see the module docstring); options as QuantizeRequest's."""
    from hscale.backends import get
    request = request or QuantizeRequest(**options)
    check_request(request)
    started = time.perf_counter()
    directory = model_directory(request)
    source = SafetensorsModel(directory)
    plans = plan_layers(source, architecture_linears(directory), request.ignore)
    quantized = [p for p in plans if p.quantize]
    if not quantized:
        raise ValueError(f"{directory}: no Linear layer to quantize (all ignored or skipped)")
    report = QuantizeReport(request=asdict(request), source=str(directory), out=str(request.out))
    report.skipped = [{"module": p.module, "reason": p.reason} for p in plans if not p.quantize]
    output = OutputDirectory(request.out, request.force)  # checks --out before any work
    with output:
        h, H = {}, {}
        modules = [p.module for p in quantized]
        gptq = request.pipeline == "gptq"
        if needs_calibration(request) or request.report_errors or request.hessian:
            want_full = gptq or sum(p.cols ** 2 * 8 for p in quantized) <= FULL_HESSIAN_BUDGET
            if request.hessian is not None:
                h, H = load_hessians(request.hessian, modules, gptq)
                report.calibration = {"from": request.hessian}
            else:
                h, H, report.calibration = calibrate(directory, modules, request, want_full)
        report.seconds["calibration"] = time.perf_counter() - started

        init, ceiling = PIPELINES[request.pipeline]
        backend = get(request.backend)
        global_scales = {}
        for plan in quantized:  # one pass over the weights for the fused sets' amax
            if plan.fused_with[0] == plan.module and len(plan.fused_with) > 1:
                s_g = set_global_scale(plan.fused_with, lambda m: source.array(f"{m}.weight"),
                                       request.format, ceiling)
                global_scales.update({m: s_g for m in plan.fused_with})

        writer = ShardWriter(output.path, output_tensors(source, plans, request.format),
                             request.max_shard_bytes, {"producer": f"hscale-nvfp4 {__version__}"})
        replaced = {f"{p.module}.weight": p for p in quantized}
        names = source.names()
        bar = _progress(len(names), request.progress)
        quantize_started = time.perf_counter()
        for name in names:
            plan = replaced.get(name)
            tensor = source.array(name)
            if plan is None:
                writer.write(name, tensor)
                bar.update(1)
                continue
            weight = tensor
            if weight.dtype not in WEIGHT_DTYPES:
                raise ValueError(f"{name}: dtype {weight.dtype}")
            s_g = global_scales.get(plan.module)
            if s_g is None:
                s_g = set_global_scale((plan.module,), lambda m: weight, request.format, ceiling)
            try:
                result = quantize_weight(
                    weight, h.get(plan.module), pipeline=request.pipeline,
                    method=request.method, backend=backend, hessian=H.get(plan.module),
                    global_scale=s_g, K=request.K, U=request.U, damp=request.damp,
                    block_size=request.block_size, act_order=request.act_order,
                    static_groups=request.static_groups)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
            for tensor_name, data in quantized_tensors(request.format, plan.module,
                                                       result).items():
                writer.write(tensor_name, data)
            rtn = result if (request.pipeline, request.method) == ("rtn", "rtn") else \
                backend.quantize(weight, method="rtn", init="maxabs",
                                 global_scale=result.global_scale)
            quality = layer_quality(weight, result, rtn, h.get(plan.module), H.get(plan.module))
            report.layers.append({"module": plan.module, "shape": [plan.rows, plan.cols],
                                  "global_scale": float(result.global_scale),
                                  "fused_with": list(plan.fused_with), **quality})
            bar.update(1)
        bar.close()
        writer.close()
        report.seconds["quantize"] = time.perf_counter() - quantize_started
        copy_side_files(directory, output.path)
        ignore = [p.module for p in plans if not p.quantize]
        _write_configs(output.path, request.format, ignore)
        report.summary = summarize(report.layers)
        if request.model_dir is None:  # the bundled sentence encoder: what its users measure
            from hscale.calibration import heldout_texts
            report.summary["embedding_cosine_heldout"] = embedding_cosines(
                directory, output.path, heldout_texts())
        report.seconds["total"] = time.perf_counter() - started
        (output.path / REPORT_NAME).write_text(json.dumps(asdict(report), indent=1) + "\n")
        output.commit()
    return report


def checkpoint_weights(checkpoint_dir) -> dict:
    """module -> the checkpoint's weight of every quantized Linear as NVFP4-DEQ-1 defines it
    (float32)."""
    from hscale.checkpoint import detect_format, iter_quantized_modules, read_stored_linear
    from hscale.reference import dequantize, unpack_codes
    fmt = detect_format(checkpoint_dir).format
    stored_model = SafetensorsModel(checkpoint_dir)
    weights = {}
    for module in iter_quantized_modules(stored_model, fmt):
        stored = read_stored_linear(stored_model, fmt, module)
        weights[module] = dequantize(unpack_codes(stored.packed), stored.scale_bytes,
                                     stored.global_scale).astype(np.float32)
    return weights


def sentence_embeddings(model, tokenizer, texts, batch_size: int = 32) -> np.ndarray:
    """Mean-pooled, L2-normalised last hidden states (all-MiniLM-L6-v2's sentence embedding)."""
    import torch
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                              max_length=256, return_tensors="pt")
            hidden = model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(out).astype(np.float64)


class EmbeddingProbe:
    """The source model's sentence embeddings of ``texts``, in float32 as loaded, and with its
    Linear weights replaced: ``cosine(weights)`` gives the cosine similarity of each text's
    embedding to the float32 one (mean and min), and puts the original weights back."""

    def __init__(self, source_dir, texts):
        import transformers
        from hscale.models import _quiet_transformers
        self.texts = list(texts)
        self.model_class, _ = architecture(source_dir)
        with _quiet_transformers():
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(source_dir)
            self.model = self.model_class.from_pretrained(source_dir).eval()
        self.base = self.embeddings(self.model)

    def embeddings(self, model) -> np.ndarray:
        return sentence_embeddings(model, self.tokenizer, self.texts)

    def cosine(self, weights: dict) -> dict:
        """``weights``: module -> weight (m, n), any float dtype; every other weight stays."""
        import torch
        originals = {}
        try:
            with torch.no_grad():
                for module, weight in weights.items():
                    parameter = self.model.get_submodule(module).weight
                    originals[module] = parameter.detach().clone()
                    parameter.copy_(torch.from_numpy(np.asarray(weight, dtype=np.float32)))
            return cosine_stats(self.base, self.embeddings(self.model))
        finally:
            with torch.no_grad():
                for module, original in originals.items():
                    self.model.get_submodule(module).weight.copy_(original)


def embedding_cosines(source_dir, checkpoint_dir, texts) -> dict:
    """Cosine similarity of each text's sentence embedding, the quantized checkpoint's against
    the source model's (float32): through NVFP4-DEQ-1 (``checkpoint_weights``) and, for a
    compressed-tensors checkpoint, through the library's own loading (transformers with
    compressed-tensors, decompressing on load)."""
    import transformers
    from hscale.checkpoint import detect_format
    from hscale.models import _quiet_transformers
    import warnings
    probe = EmbeddingProbe(source_dir, texts)
    result = {"texts": len(probe.texts),
              "dequantize": probe.cosine(checkpoint_weights(checkpoint_dir))}
    if detect_format(checkpoint_dir).format == "compressed-tensors":
        try:
            with _quiet_transformers(), warnings.catch_warnings():
                # transformers warns that the checkpoint's own quantization_config wins: it is
                # the same
                warnings.simplefilter("ignore", UserWarning)
                loaded = probe.model_class.from_pretrained(
                    checkpoint_dir,
                    quantization_config=transformers.CompressedTensorsConfig(dequantize=True)
                ).eval()
                # compressed-tensors 0.19 leaves the decompressed weights in bfloat16 inside a
                # float32 model, whose forward then fails; 0.20 converts them. float() keeps
                # their (bfloat16) values exactly.
                loaded = loaded.float()
            result["compressed_tensors_load"] = cosine_stats(probe.base, probe.embeddings(loaded))
        except ImportError as exc:
            result["compressed_tensors_load"] = f"not run: {exc}"
    return result


def cosine_stats(a: np.ndarray, b: np.ndarray) -> dict:
    cosines = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"mean": float(np.mean(cosines)), "min": float(np.min(cosines))}


def calibrate_to_file(request: QuantizeRequest, path, *, full: bool, force: bool) -> dict:
    """``hscale calibrate``: h (and H) of the Linears ``hscale quantize`` would quantize with
    the same ignore list, written to ``path``."""
    path = Path(path)
    if path.exists() and not force:
        raise ValueError(f"{path} exists; choose another --out or pass --force to replace it")
    if not path.absolute().parent.is_dir():
        raise ValueError(f"--out {path}: the directory {path.absolute().parent} does not exist")
    for name in ("samples", "seq_len", "batch_size"):
        value = getattr(request, name)
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be a positive integer")
    if request.calibration_text is not None and not Path(request.calibration_text).is_file():
        raise ValueError(f"--calibration-text {request.calibration_text}: no such file")
    directory = model_directory(request)
    plans = plan_layers(SafetensorsModel(directory), architecture_linears(directory),
                        request.ignore)
    modules = [p.module for p in plans if p.quantize]
    h, H, facts = calibrate(directory, modules, request, full)
    facts["layers"] = len(modules)
    save_hessians(path, h, H, facts)
    return facts


def format_summary(report: QuantizeReport) -> str:
    """The per-layer table and the totals, readable in one screen."""
    request = report.request
    lines = [f"{report.source} -> {report.out}: pipeline {request['pipeline']}, method "
             f"{request['method']}, format {request['format']}, backend {request['backend']}",
             f"{'layer':48} {'shape':>11} {'weight MSE':>11} {'diag(H) err':>12} "
             f"{'output err':>11}   (each relative to RTN at the same s_g)"]

    def ratio(layer, key):
        if key not in layer or not layer[key + "_rtn"]:
            return f"{'-':>11}"
        return f"{layer[key] / layer[key + '_rtn']:11.3f}"
    for layer in report.layers:
        name = layer["module"] if len(layer["module"]) <= 48 else "..." + layer["module"][-45:]
        shape = "x".join(map(str, layer["shape"]))
        lines.append(f"{name:48} {shape:>11} {ratio(layer, 'weight_mse')} "
                     f"{ratio(layer, 'diag_error'):>12} {ratio(layer, 'output_error')}")
    summary = report.summary

    def shown(value):
        return "-" if value is None else f"{value:.3f}"
    lines.append(f"mean over {summary['layers']} layers: weight MSE "
                 f"{shown(summary['weight_mse_vs_rtn'])}, diag(H) error "
                 f"{shown(summary['diag_error_vs_rtn'])}, output error "
                 f"{shown(summary['output_error_vs_rtn'])} of RTN's")
    if summary.get("shifts"):
        lines.append("shifts chosen (delta: groups): " + ", ".join(
            f"{k:+d}: {v}" for k, v in summary["shifts"].items()))
    for entry in report.skipped:
        lines.append(f"not quantized: {entry['module']}: {entry['reason']}")
    cosine = summary.get("embedding_cosine_heldout")
    if cosine:
        lines.append(f"sentence embeddings on {cosine['texts']} held-out texts, cosine to fp32: "
                     f"mean {cosine['dequantize']['mean']:.5f} (min "
                     f"{cosine['dequantize']['min']:.5f})")
    seconds = report.seconds
    lines.append(f"time: calibration {seconds.get('calibration', 0):.1f} s, quantization "
                 f"{seconds.get('quantize', 0):.1f} s, total {seconds.get('total', 0):.1f} s")
    return "\n".join(lines)


def _write_configs(directory: Path, fmt: str, ignore: list[str]) -> None:
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    if fmt == "compressed-tensors":
        config["quantization_config"] = compressed_tensors_config(ignore, __version__)
    else:
        config.pop("quantization_config", None)
        (directory / MODELOPT_CONFIG).write_text(
            json.dumps(modelopt_config(ignore, __version__), indent=2) + "\n")
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def summarize(layers: list[dict]) -> dict:
    """Means over layers of the ratios to RTN, and the shift histogram of the whole model."""
    def mean_ratio(key):
        ratios = [layer[key] / layer[key + "_rtn"] for layer in layers
                  if key in layer and layer[key + "_rtn"] > 0]
        return float(np.mean(ratios)) if ratios else None
    shifts: Counter = Counter()
    for layer in layers:
        shifts.update({int(k): v for k, v in layer.get("shifts", {}).items()})
    return {"layers": len(layers), "weight_mse_vs_rtn": mean_ratio("weight_mse"),
            "diag_error_vs_rtn": mean_ratio("diag_error"),
            "output_error_vs_rtn": mean_ratio("output_error"),
            "shifts": dict(sorted(shifts.items()))}


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc="quantize", unit="tensor")
