"""``hscale quantize``: a Hugging Face model directory in, an NVFP4 checkpoint an engine loads out.

The steps (docs/quantize.md has the user's view):

1. **Plan** from the source's safetensors headers and the model's structure (its architecture
   built on the meta device, no weights read; ``plan``): every matmul weight whose weight is
   stored (each ``nn.Linear``, and each MoE expert's gate, up and down matrix, 2-D on disk
   whatever the module tree fuses) is quantized unless the ignore list names it (default
   ``lm_head``) or its input size is not a multiple of 16; every other stored tensor is kept
   as stored and said why (embeddings, norms, routers, biases; a tied head is not stored and
   is named in the ignore list). Linears engines fuse (q/k/v, gate/up, each expert's w1/w3)
   share one global scale.
2. **Calibrate and quantize.** A decoder (``hscale.models.decoder``) goes **block by block**
   (``sequential``): one block materialised at a time from the safetensors, run on the
   calibration batches, its statistics collected, its weights quantized and written, freed;
   memory holds one block, whatever the depth; an interrupted run resumes from its last
   completed block; ``torchrun`` spreads the batches and the searches over processes. Any other
   model (the bundled MiniLM encoder) goes **whole** (``whole``): calibrated by one forward pass
   of the whole model in float32 when the method needs it, then quantized and written tensor by
   tensor in the source's order. With ``--hessian`` (``hscale calibrate``'s file) nothing is
   calibrated and every model goes the whole way, h and H read layer by layer.
3. **Report**: per layer the weight MSE and the H-weighted errors against RTN at the same s_g,
   the calibration tokens each expert saw, what was kept and why, the time of each phase
   (``report``); saved as ``quantization_report.json`` in the output.

The output is written to a hidden directory beside ``out`` and renamed when complete.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict
from pathlib import Path

from hscale import __version__
from hscale.checkpoints import SafetensorsModel, copy_side_files, layout_named
from hscale.files import write_json
from hscale.models.architecture import meta_model
from hscale.models.inventory import inventory
from hscale.pipelines import AUTO_BACKEND_RULE, resolve_backend
from hscale.reference.validation import method_named

from .calibrate import calibration_batches, width_warnings
from .context import RunContext
from .distributed import Ranks
from .plan import ignore_list, kept_tensors, plan_layers
from .progress import Progress
from .report import REPORT_NAME, QuantizeReport, header_line, summarize
from .request import CheckedRequest, QuantizeRequest, check_request, needs_calibration
from .kept import KEPT_H_NAME, KeptH, kept_h_label
from .resume import HiddenStore, ResumableOutput, TermAsInterrupt, fingerprint

#: Options that do not change the output (left out of a resumable run's fingerprint).
NOT_IN_FINGERPRINT = ("force", "progress", "resume", "out")


def quantize_model(request: QuantizeRequest | None = None, log=None, **options) -> QuantizeReport:
    """``hscale quantize``'s work (see the module docstring); options as QuantizeRequest's.
    ``log(line)`` gets the run's header and notes (nothing by default)."""
    started = time.perf_counter()
    checked = check_request(request or QuantizeRequest(**options))  # every refusal, up front
    log = log or (lambda line: None)
    with checked.source.run_directory(checked.request.out, log,
                                      checked.request.progress) as directory:
        return _quantize_directory(checked, directory, log, started)


def _quantize_directory(checked: CheckedRequest, directory, log, started: float
                        ) -> QuantizeReport:
    request, backend, gguf_output = checked.request, checked.backend, checked.gguf_output
    source = SafetensorsModel(directory)
    model = meta_model(directory)
    found = inventory(directory, model)
    plans = plan_layers(source, found.matmuls(), request.ignore, found.tied)
    quantized = [p for p in plans if p.quantize]
    if not quantized:
        raise ValueError(f"{directory}: no Linear layer to quantize (all ignored or skipped)")
    sequential = (request.sequential == "auto" and found.block_prefix is not None
                  and request.hessian is None and request.imatrix is None)
    ranks = Ranks.from_environment(request.device)
    try:
        if ranks.distributed and not sequential:
            raise ValueError(f"torchrun ({ranks.world} processes): {directory} is not a decoder "
                             "hscale quantizes block by block (or --hessian, --imatrix or "
                             "--sequential never "
                             "was given); run it in one process")
        backend_name = resolve_backend(request.backend)
        report = QuantizeReport(request=asdict(request), source=str(checked.source.path),
                                out=str(request.out))
        report.rank = ranks.rank
        report.request["backend"] = backend_name
        report.request["backend_asked"] = request.backend
        report.skipped = [{"module": p.module, "reason": p.reason} for p in plans
                          if not p.quantize]
        report.kept = [asdict(k) for k in kept_tensors(source, plans, found)]
        report.path = ("block by block" if sequential else "whole model") + (
            f" on {ranks.world} processes" if ranks.distributed else "")
        output = None
        if ranks.main:  # --out checked (and an interrupted run adopted) before the header
            options = {k: v for k, v in asdict(request).items() if k not in NOT_IN_FINGERPRINT}
            options["backend"] = backend_name
            print_id = fingerprint(checked.source.fingerprint_files(source), options,
                                   __version__)
            target = gguf_output.work_target if gguf_output is not None else Path(request.out)
            output = ResumableOutput(target, request.force, print_id,
                                     enabled=request.resume and sequential)
            log(header_line(report, plans, found, backend_name, request.backend,
                            AUTO_BACKEND_RULE, ranks.world))
        path = ranks.broadcast(str(output.path) if output is not None else None)
        c = RunContext(request=request, directory=directory, source=source, model=model,
                       inventory=found, plans=plans,
                       layout=layout_named("compressed-tensors" if gguf_output is not None
                                           else request.format, request.scheme),
                       backend=backend, ranks=ranks, report=report, log=log, output=output,
                       hidden_store=HiddenStore(path) if sequential else None,
                       kept=KeptH(path, ranks.main and request.keep_h
                                  and method_named(request.method).reads_statistics),
                       gguf_output=gguf_output, imatrix=checked.imatrix)
        with output if output is not None else contextlib.nullcontext(), TermAsInterrupt():
            _run(c, sequential, started)
            if ranks.main:
                _finish(c, output, started)
        return report
    finally:
        ranks.close()


def _run(c: RunContext, sequential: bool, started: float) -> None:
    request = c.request
    c.seconds["plan"] = time.perf_counter() - started
    calibrating = needs_calibration(request) or request.report_errors
    if sequential:
        from .sequential import SequentialRun
        if calibrating:
            begun = time.perf_counter()
            c.batches, facts = calibration_batches(c.directory, request)
            c.report.calibration = facts
            c.report.warnings += width_warnings(c.plans, facts["tokens"])
            for line in c.report.warnings:
                c.log(f"warning: {line}")
            c.seconds["calibration"] += time.perf_counter() - begun
        c.progress = Progress(request.progress and c.ranks.main,
                              sum(p.weights for p in c.quantized), c.inventory.blocks)
        try:
            SequentialRun(c).run()
        finally:
            c.progress.close()
    else:
        from .whole import run_whole
        run_whole(c, calibrating)


def _finish(c: RunContext, output, started: float) -> None:
    from .sequential import block_summary
    report, request = c.report, c.request
    copy_side_files(c.directory, output.path)
    c.layout.write_config(output.path, ignore_list(c.plans, c.inventory), __version__)
    report.summary = summarize(report.layers)
    report.summary.update(block_summary(report.layers))
    if request.model_dir is None:  # the bundled sentence encoder: what its users measure
        from hscale.calibration import heldout_texts
        from hscale.evaluation.embeddings import embedding_cosines
        report.summary["embedding_cosine_heldout"] = embedding_cosines(
            c.directory, output.path, heldout_texts())
    if getattr(output, "finish", None):
        output.finish()
    gguf = c.gguf_output  # --format gguf: the checkpoint is converted to it, then dropped
    kept = c.kept.write(gguf.side_file("h") if gguf is not None else output.path / KEPT_H_NAME,
                        report.calibration)
    if kept is not None:
        report.kept_h = kept_h_label(kept, gguf is None)
    if gguf is not None:
        gguf.write(c, output)
    _add_seconds(c, started)
    if gguf is not None:
        write_json(gguf.side_file("report"), asdict(report))
        output.abort()  # the checkpoint the file was converted from
        return
    (output.path / REPORT_NAME).write_text(json.dumps(asdict(report), indent=1) + "\n")
    output.commit()


def _add_seconds(c: RunContext, started: float) -> None:
    report = c.report
    report.seconds = {k: round(v, 3) for k, v in c.seconds.items() if v or k == "quantize"}
    report.seconds.update({k: round(v, 3) for k, v in c.timings.items()})
    report.seconds["total"] = time.perf_counter() - started
