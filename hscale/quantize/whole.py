"""``hscale quantize`` of a whole model: the path of models that are not decoders run block by
block (the bundled MiniLM encoder), and of runs given ``--hessian``.

Calibration (when the method needs it) is one forward pass of the whole model in float32
(``calibrate``): memory holds the model, which is why decoders go block by block instead. Then
every tensor of the source, in the source's order, is read, quantized if planned (each fused
set's s_g from the largest amax of its members, read first) and written: memory holds one
tensor. h and H from a ``--hessian`` file are read layer by layer.
"""

from __future__ import annotations

import time

from hscale.calibration import LayerStatistics, load_hessians
from hscale.checkpoints import ShardWriter
from hscale.pipelines import PIPELINES

from hscale import __version__

from .calibrate import calibrate, calibration_texts, refuse_whole_moe, width_warnings
from .activations import add_input_scale
from .context import RunContext
from .layer import quantize_layer, set_global_scale
from .plan import output_tensors
from .progress import Progress

#: Bytes of float64 G kept for the report when the pipeline does not need it.
FULL_HESSIAN_BUDGET = 2 << 30


def run_whole(c: RunContext, calibrating: bool) -> None:
    request, source, layout, report = c.request, c.source, c.layout, c.report
    quantized = [p for p in c.plans if p.quantize]
    modules = [p.module for p in quantized]
    gptq = PIPELINES[request.pipeline].needs_full_hessian
    stats = LayerStatistics()
    if request.hessian is not None:
        stats.h, stats.H = load_hessians(request.hessian, modules, gptq, lazy=True)
        report.calibration = {"from": request.hessian}
    elif calibrating:
        refuse_whole_moe(c.plans)
        started = time.perf_counter()
        want_full = gptq or sum(p.cols ** 2 * 8 for p in quantized) <= FULL_HESSIAN_BUDGET
        texts = calibration_texts(request)
        stats.h, stats.H, report.calibration = calibrate(c.directory, modules, request,
                                                          want_full, texts, stats.amax)
        report.warnings += width_warnings(c.plans, report.calibration["tokens"])
        for line in report.warnings:
            c.log(f"warning: {line}")
        c.seconds["calibration"] += time.perf_counter() - started

    ceiling = PIPELINES[request.pipeline].scale_ceiling
    scales = {}
    for plan in quantized:  # one pass over the weights for the fused sets' amax
        if plan.fused_with[0] == plan.module and len(plan.fused_with) > 1:
            s_g = set_global_scale(plan.fused_with, lambda m: source.array(f"{m}.weight"),
                                   layout, ceiling)
            scales.update({m: s_g for m in plan.fused_with})

    writer = ShardWriter(c.output.path, output_tensors(source, c.plans, layout),
                         request.max_shard_bytes, {"producer": f"hscale-nvfp4 {__version__}"})
    replaced = {f"{p.module}.weight": p for p in quantized}
    progress = Progress(request.progress, sum(p.weights for p in quantized))
    started = time.perf_counter()
    count = 0
    try:
        for name in source.names():
            plan = replaced.get(name)
            tensor = source.array(name)
            if plan is None:
                writer.write(name, tensor)
                continue
            progress.tensor(count, len(quantized), plan.module)
            done = [0]

            def on_groups(weights, done=done):
                done[0] += weights
                progress.advance(weights)
            tensors, entry = quantize_layer(plan, tensor, scales.get(plan.module), request,
                                            c.backend, layout, stats.h.get(plan.module),
                                            stats.H.get(plan.module), on_groups=on_groups,
                                            timings=c.timings)
            add_input_scale(plan, tensors, entry, stats.amax, layout)
            for tensor_name, data in tensors.items():
                writer.write(tensor_name, data)
            report.layers.append(entry)
            progress.advance(plan.weights - done[0])
            count += 1
    finally:
        progress.close()
    writer.close()
    c.seconds["quantize"] += time.perf_counter() - started
