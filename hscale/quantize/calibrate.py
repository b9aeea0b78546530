"""Calibration of a model directory for ``hscale quantize`` and ``hscale calibrate``: h (and the
full H for GPTQ) of every Linear to be quantized, from a forward pass over the calibration text
(HSCALE-CAL-1)."""

from __future__ import annotations

import json
from pathlib import Path

from hscale.calibration import calibration_texts as bundled
from hscale.calibration import collect_hessian, collect_hessian_diag, save_hessians, text_batches
from hscale.calibration.sources import read_texts
from hscale.checkpoints import SafetensorsModel
from hscale.models.architecture import architecture, meta_model
from hscale.models.inventory import inventory
from hscale.models.loading import quiet_transformers

from .plan import plan_layers
from .request import QuantizeRequest, check_calibration_data, check_device
from .source import check_source


def calibration_texts(request: QuantizeRequest) -> list[str]:
    """The calibration texts: ``--calibration-data`` (a text, JSONL or dataset directory,
    ``hscale.calibration.sources``) or the bundled text, the first ``--samples`` of them."""
    if request.calibration_text is None:
        return bundled()[:request.samples]
    return read_texts(request.calibration_text, request.text_field, request.samples)


def load_tokenizer(directory: Path):
    import transformers
    with quiet_transformers():
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        except Exception as exc:  # noqa: BLE001 - any failure: the directory has no tokenizer
            raise ValueError(f"{directory}: no tokenizer to calibrate with ({exc}); pass "
                             "--hessian with h from hscale calibrate") from None
    if not tokenizer("calibration text")["input_ids"]:
        # transformers 5 builds a tokenizer from config.json alone where a directory has no
        # tokenizer files; its vocabulary is empty, and every text would be zero tokens
        raise ValueError(f"{directory}: no tokenizer to calibrate with (no tokenizer files: "
                         f"the {type(tokenizer).__name__} built from config.json alone gives "
                         "no token for any text); add the model's tokenizer, or pass --hessian "
                         "with h from hscale calibrate")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def calibration_batches(directory: Path, request: QuantizeRequest, texts=None):
    """``(batches, facts)``: the calibration texts tokenized in batches of at most
    ``--batch-size``, each truncated to ``--seq-len`` tokens, as a list (``batches_of``); facts:
    texts, batches, tokens (not padding), token slots (tokens and padding: what the forward
    computes on), seq_len, the forward's dtype."""
    texts = calibration_texts(request) if texts is None else texts
    batches = list(batches_of(load_tokenizer(directory), texts, request))
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    slots = sum(int(b["attention_mask"].numel()) for b in batches)
    return batches, {"texts": len(texts), "batches": len(batches), "seq_len": request.seq_len,
                     "tokens": tokens, "token_slots": slots, "dtype": request.calibration_dtype}


def batches_of(tokenizer, texts: list[str], request: QuantizeRequest):
    """The one batching of both calibration paths (whole model, block by block): texts grouped
    by token count (``text_batches(by_length=True)``), at most ``--batch-size`` per forward, so
    that padding costs little (SmolLM2 on 40 Debian Handbook paragraphs: 5,352 token slots in
    3 batches for 3,017 tokens in the texts' order, 3,232 in 6 by length)."""
    return text_batches(tokenizer, texts, request.batch_size, request.seq_len, by_length=True)


def width_warnings(plans, tokens: int) -> list[str]:
    """One line naming the planned Linears wider than the calibration's token count: their h
    rests on fewer tokens than inputs, and GPTQ's H = X^T X is singular (rank <= tokens)."""
    wide = [p for p in plans if p.quantize and not p.expert and p.cols > tokens]
    if not wide:
        return []
    widest = max(wide, key=lambda p: p.cols)
    return [f"calibration: {tokens:,} tokens, fewer than the input width of {len(wide)} "
            f"Linear(s) (widest: {widest.module}, {widest.cols:,} inputs): their h rests on "
            "fewer tokens than inputs and GPTQ's H is singular; give more calibration data "
            "(--calibration-data, --samples, --seq-len)"]


def calibrate(directory: Path, modules: list[str], request: QuantizeRequest, full: bool,
              texts: list[str] | None = None, amax: dict | None = None):
    """({module: h}, {module: H} or {}, facts) from a forward pass of the whole model over the
    calibration text (or ``texts``); ``amax`` (a dict), when given, receives each module's
    input amax from the same pass (HSCALE-CAL-2)."""
    import torch
    texts = calibration_texts(request) if texts is None else texts
    cls, _ = architecture(directory)
    tokenizer = load_tokenizer(directory)
    with quiet_transformers():
        options = dict(dtype=getattr(torch, request.calibration_dtype))
        if request.device == "auto":
            options["device_map"] = "auto"  # accelerate's offload across devices
        model = cls.from_pretrained(directory, **options)
    if request.device not in (None, "auto"):
        model = model.to(request.device)
    model.eval()
    batches = batches_of(tokenizer, texts, request)
    stats: dict = {}
    layers = {name: model.get_submodule(name) for name in modules}
    if full:
        H, h = collect_hessian(model, batches, layers, progress=request.progress,
                               desc="calibration", stats=stats)
    else:
        h, H = collect_hessian_diag(model, batches, layers, progress=request.progress,
                                    desc="calibration", stats=stats), {}
    del model
    if amax is not None:
        amax.update(stats.get("amax", {}))
    facts = {"texts": len(texts), "batches": stats.get("batches"), "seq_len": request.seq_len,
             "tokens": max(stats.get("tokens", {0: 0}).values(), default=0),
             "full_hessian": bool(H), "dtype": request.calibration_dtype}
    return h, H, facts


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
    check_calibration_data(request)
    check_device(request.device)
    source = check_source(request.model_dir)
    with source.run_directory(path, progress=request.progress) as directory:
        return _calibrate_directory(path, directory, request, full)


def _calibrate_directory(path: Path, directory: Path, request: QuantizeRequest, full: bool):
    source = SafetensorsModel(directory)
    model = meta_model(directory)
    found = inventory(directory, model)
    plans = plan_layers(source, found.matmuls(), request.ignore, found.tied)
    modules = [p.module for p in plans if p.quantize]
    if found.block_prefix is not None and request.sequential == "auto":
        return _calibrate_blocks(path, directory, source, model, found, plans, request, full)
    refuse_whole_moe(plans)
    h, H, facts = calibrate(directory, modules, request, full)
    facts["layers"] = len(modules)
    save_hessians(path, h, H, facts)
    return facts


def refuse_whole_moe(plans) -> None:
    """MoE experts are calibrated from their routed tokens block by block only."""
    experts = [p.module for p in plans if p.quantize and p.expert]
    if experts:
        raise ValueError(f"{experts[0]}: MoE experts are calibrated block by block (their h from "
                         "the tokens routed to each); --sequential never calibrates the whole "
                         "model and cannot: leave --sequential auto, or pass --hessian")


def _calibrate_blocks(path: Path, directory, source, model, found, plans, request, full):
    """``hscale calibrate`` of a decoder, block by block (one block in memory), each block's h
    (and H) written to the file as the block is done (the file's layout planned first)."""
    import os
    import shutil
    from hscale import __version__
    from hscale.checkpoints import ShardWriter, TensorInfo
    from .blocks import BlockCalibration
    from .distributed import Ranks
    from .plan import block_order
    from .progress import Progress
    batches, facts = calibration_batches(directory, request)
    facts.update(layers=sum(p.quantize for p in plans), full_hessian=bool(full),
                 path="block by block")
    planned = {f"{p.module}.weight": p for p in plans if p.quantize}
    groups = [[planned[n] for n in group if n in planned]
              for group in block_order(source, plans, found)]
    infos = [TensorInfo(f"{kind}.{p.module}", "F64", (p.cols,) if kind == "h" else (p.cols,) * 2)
             for group in groups for p in group for kind in ("h", "H")[:1 + bool(full)]]
    temporary = path.absolute().parent / f".{path.name}.tmp-{os.getpid()}"
    temporary.mkdir()
    try:
        writer = ShardWriter(temporary, infos, 1 << 62, {
            "producer": f"hscale-nvfp4 {__version__}", "facts": json.dumps(facts)})
        progress = Progress(request.progress, sum(p.weights for p in planned.values()),
                            found.blocks)
        calibration = BlockCalibration(directory, source, model, batches, request, Ranks(),
                                       progress)
        calibration.start()
        facts["front_end"] = calibration.proof
        for index in range(found.blocks):
            progress.block(index, "calibrating")
            _write_statistics(writer, groups[1 + index], calibration.run_block(index, full),
                              full)
            progress.advance(sum(p.weights for p in groups[1 + index]))
        if groups[-1]:
            _write_statistics(writer, groups[-1], calibration.head_statistics(found.head, full),
                              full)
        progress.close()
        writer.close()
        os.replace(temporary / "model.safetensors", path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return facts


def _write_statistics(writer, plans, stats, full) -> None:
    import numpy as np
    for plan in plans:
        writer.write(f"h.{plan.module}", np.asarray(
            stats.h.get(plan.module, np.zeros(plan.cols)), np.float64))
        if full:
            writer.write(f"H.{plan.module}", np.asarray(
                stats.H.get(plan.module, np.zeros((plan.cols, plan.cols))), np.float64))
