"""``hscale quantize`` of a whole model: the path of models that are not decoders run block by
block (the bundled MiniLM encoder), and of runs given ``--hessian`` or ``--imatrix``.

Calibration (when the method needs it) is one forward pass of the whole model in float32
(``calibrate``): memory holds the model, which is why decoders go block by block instead. Then
every tensor of the source, in the source's order, is read, quantized if planned (by the layer
step both paths share, ``layer.quantize_planned``: each fused set's s_g from the largest amax of
its members) and written: memory holds one tensor. h and H from a ``--hessian`` file are read
layer by layer.
"""

from __future__ import annotations

import time

from hscale.calibration import LayerStatistics, load_hessians
from hscale.calibration.imatrix import describe, imatrix_statistics
from hscale.checkpoints import ShardWriter
from hscale.pipelines import PIPELINES
from hscale.reference import diagonal_blocks
from hscale.reference.validation import method_named

from hscale import __version__

from .calibrate import calibrate, calibration_texts, refuse_whole_moe, width_warnings
from .context import RunContext
from .layer import quantize_planned
from .plan import output_tensors
from .progress import Progress

#: Bytes of float64 G kept for the report (with --report-errors) when the pipeline does not
#: need it.
FULL_HESSIAN_BUDGET = 2 << 30


def run_whole(c: RunContext, calibrating: bool) -> None:
    request, source, layout, report = c.request, c.source, c.layout, c.report
    quantized = [p for p in c.plans if p.quantize]
    modules = [p.module for p in quantized]
    gptq = PIPELINES[request.pipeline].needs_full_hessian
    block = method_named(request.method).reads_blocks  # the diagonal 16 x 16 blocks, from H
    stats = LayerStatistics()
    if request.hessian is not None:
        stats.h, stats.H = load_hessians(request.hessian, modules, gptq or block, lazy=True)
        report.calibration = {"from": request.hessian}
    elif c.imatrix is not None:  # llama.cpp's sums of x^2 (HSCALE-CAL-3), read when checked
        imatrix = c.imatrix
        stats = imatrix_statistics(imatrix, quantized, c.inventory.model_type,
                                   c.inventory.blocks, c.inventory)
        report.calibration = describe(imatrix)
    elif calibrating:
        refuse_whole_moe(c.plans)
        started = time.perf_counter()
        want_full = gptq or block or (request.report_errors and sum(
            p.cols ** 2 * 8 for p in quantized) <= FULL_HESSIAN_BUDGET)
        texts = calibration_texts(request)
        stats.h, stats.H, report.calibration = calibrate(c.directory, modules, request,
                                                          want_full, texts, stats.amax)
        report.warnings += width_warnings(c.plans, report.calibration["tokens"])
        for line in report.warnings:
            c.log(f"warning: {line}")
        c.seconds["calibration"] += time.perf_counter() - started

    if block:
        stats.blocks = {m: diagonal_blocks(stats.H.get(m)) for m in modules
                        if stats.H.get(m) is not None}
    c.kept.add(quantized, stats)
    writer = ShardWriter(c.output.path, output_tensors(source, c.plans, layout),
                         request.max_shard_bytes, {"producer": f"hscale-nvfp4 {__version__}"})
    replaced = {f"{p.module}.weight": p for p in quantized}
    c.progress = Progress(request.progress, sum(p.weights for p in quantized))
    scales: dict = {}  # fused set member -> the set's s_g
    started = time.perf_counter()
    try:
        for name in source.names():
            plan = replaced.get(name)
            tensor = source.array(name)
            if plan is None:
                writer.write(name, tensor)
                continue
            tensors, entry = quantize_planned(c, plan, tensor, scales, stats,
                                              (len(report.layers), len(quantized)))
            for tensor_name, data in tensors.items():
                writer.write(tensor_name, data)
            report.layers.append(entry)
    finally:
        c.progress.close()
    writer.close()
    c.seconds["quantize"] += time.perf_counter() - started
