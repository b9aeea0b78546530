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
   shards (``hscale.checkpoints``): each fused set's s_g from the largest amax of the set
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

import json
import time
from dataclasses import asdict

import numpy as np

from hscale import __version__
from hscale.calibration import load_hessians
from hscale.checkpoints import SafetensorsModel, ShardWriter, copy_side_files, layout_named
from hscale.evaluation.quality import layer_quality
from hscale.files import OutputDirectory
from hscale.models.architecture import architecture_linears
from hscale.pipelines import PIPELINES, quantize_weight
from hscale.reference import GROUP_SIZE, QuantizedWeight, compute_global_scale
from hscale.reference.quantize import encode_groups
from hscale.reference.validation import WEIGHT_DTYPES, check_weight_finite

from .calibrate import calibrate
from .plan import output_tensors, plan_layers
from .report import REPORT_NAME, QuantizeReport, _progress, summarize
from .request import QuantizeRequest, check_request, model_directory, needs_calibration


FULL_HESSIAN_BUDGET = 2 << 30  # bytes of float64 G kept for the report when not needed by GPTQ


def set_global_scale(members, weight_of, layout, ceiling: float) -> np.float32:
    """The one s_g of a fused set (NVFP4-CKPT-3): NVFP4-GS-1 from the largest amax of its
    members (``weight_of(module)`` gives each weight), as ``layout`` can store it."""
    amax = max(tensor_amax(f"{m}.weight", weight_of(m)) for m in members)
    return layout_named(layout).writable_global_scale(compute_global_scale(amax, ceiling))


#: Rows encoded at once where a layer's codes are recomputed (bounds the float64 copies).
ROWS_PER_BLOCK = 1024


def tensor_amax(name: str, weight: np.ndarray) -> float:
    """max |w| of a stored weight. A NaN or an infinity makes it non-finite (max and min carry
    them), and only then is the weight searched for the first bad element, so that the message
    names the tensor and the index (NVFP4-IN-1) without a second pass over every finite weight."""
    amax = max(float(np.max(weight)), -float(np.min(weight)))
    if not np.isfinite(amax):
        try:
            check_weight_finite(weight)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return amax


def rtn_counterpart(weight, result, pipeline: str, backend):
    """RTN (max-abs init, HSCALE-METHOD-1) at the result's s_g, to compare with. For the rtn
    pipeline the result's initial bytes *are* RTN's bytes (NVFP4-INIT-1 at the same s_g), so
    only their codes are encoded; the other pipelines start elsewhere and RTN is quantized."""
    chosen = PIPELINES[pipeline]
    if result.method == "rtn" and chosen.init == "maxabs" and chosen.rederivable:
        return result
    if chosen.init == "maxabs" and chosen.rederivable and result.initial_bytes is not None:
        rows, cols = weight.shape
        codes = np.empty((rows, cols), np.uint8)
        for r0 in range(0, rows, ROWS_PER_BLOCK):  # float64 copies of a block, not the layer
            block = slice(r0, r0 + ROWS_PER_BLOCK)
            groups = np.asarray(weight[block], np.float64).reshape(-1, cols // GROUP_SIZE,
                                                                   GROUP_SIZE)
            codes[block] = encode_groups(groups, result.initial_bytes[block],
                                         result.global_scale).reshape(-1, cols)
        return QuantizedWeight.from_bytes(codes, result.initial_bytes,
                                          result.initial_bytes, result.global_scale,
                                          method="rtn", init="maxabs")
    return backend.quantize(weight, method="rtn", init="maxabs", global_scale=result.global_scale)


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
        gptq = PIPELINES[request.pipeline].needs_full_hessian
        if needs_calibration(request) or request.report_errors or request.hessian:
            want_full = gptq or sum(p.cols ** 2 * 8 for p in quantized) <= FULL_HESSIAN_BUDGET
            if request.hessian is not None:
                h, H = load_hessians(request.hessian, modules, gptq)
                report.calibration = {"from": request.hessian}
            else:
                h, H, report.calibration = calibrate(directory, modules, request, want_full)
        report.seconds["calibration"] = time.perf_counter() - started

        ceiling = PIPELINES[request.pipeline].scale_ceiling
        layout = layout_named(request.format)
        backend = get(request.backend)
        global_scales = {}
        for plan in quantized:  # one pass over the weights for the fused sets' amax
            if plan.fused_with[0] == plan.module and len(plan.fused_with) > 1:
                s_g = set_global_scale(plan.fused_with, lambda m: source.array(f"{m}.weight"),
                                       layout, ceiling)
                global_scales.update({m: s_g for m in plan.fused_with})

        writer = ShardWriter(output.path, output_tensors(source, plans, layout),
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
                s_g = set_global_scale((plan.module,), lambda m: weight, layout, ceiling)
            try:
                result = quantize_weight(
                    weight, h.get(plan.module), pipeline=request.pipeline,
                    method=request.method, backend=backend, hessian=H.get(plan.module),
                    global_scale=s_g, K=request.K, U=request.U, damp=request.damp,
                    block_size=request.block_size, act_order=request.act_order,
                    static_groups=request.static_groups)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
            for tensor_name, data in layout.tensors(plan.module, result).items():
                writer.write(tensor_name, data)
            rtn = rtn_counterpart(weight, result, request.pipeline, backend)
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
        layout.write_config(output.path, ignore, __version__)
        report.summary = summarize(report.layers)
        if request.model_dir is None:  # the bundled sentence encoder: what its users measure
            from hscale.calibration import heldout_texts
            from hscale.evaluation.embeddings import embedding_cosines
            report.summary["embedding_cosine_heldout"] = embedding_cosines(
                directory, output.path, heldout_texts())
        report.seconds["total"] = time.perf_counter() - started
        (output.path / REPORT_NAME).write_text(json.dumps(asdict(report), indent=1) + "\n")
        output.commit()
    return report
