"""Calibration block by block, with memory bounded by one block: the decoder's blocks are
materialised one at a time from the safetensors (``hscale.models.decoder``), run on the
calibration batches, their statistics collected (``hscale.calibration.blocks``) and reduced
across processes, then released; each block's outputs are the next block's inputs.

What memory holds at any moment: one block in float32 (Llama-3-8B: 0.87 GiB), the hidden states
of this process's calibration tokens (tokens x hidden x 4 B: 32 MiB per 2,048 tokens at hidden
4096), one batch's forward (its MLP intermediates: batch tokens x 14336 x 4 B each), h (and for
GPTQ one H per distinct input of the block: 1.9 GiB for Llama-3-8B, E x (H^2 + I^2) x 8 B for an
MoE block), and the embedding table 8192 rows at a time.
"""

from __future__ import annotations

import time

from hscale.calibration import LayerStatistics
from hscale.calibration.blocks import BlockStatistics
from hscale.models.decoder import SequentialDecoder, reference_block_input

#: Below this many bytes of float64 H per block the full H is collected even when the pipeline
#: does not need it, for the report's output error Tr(dW H dW^T) (small models).
REPORT_H_BYTES = 64 << 20


class BlockCalibration:
    """The calibration batches of this process, carried through the blocks."""

    def __init__(self, directory, source, model, batches, request, ranks, progress=None):
        self.directory = directory
        self.dtype = request.calibration_dtype
        self.decoder = SequentialDecoder(directory, source, _device(request.device), model,
                                         request.calibration_dtype)
        self.batches = batches
        self.ranks = ranks
        self.progress = progress
        self.mine = [b for b in range(len(batches)) if ranks.mine(b)]
        self.hidden: dict = {}
        self.kwargs: dict = {}
        self.masks = {b: batches[b].get("attention_mask") for b in self.mine}
        self.seconds = {"forward": 0.0, "statistics": 0.0, "read": 0.0, "probe": 0.0}
        self.proof: dict = {}  # what the front-end probe compared (``prove_front_end``)

    def start(self, first_block: int = 0, load=None) -> None:
        """The inputs of block ``first_block`` for this process's batches: the embeddings (block
        0), the hidden states a resumed run saved (``load(batch)``), or, when they are missing,
        the batches run forward through the blocks before it."""
        import torch
        for b in self.mine:
            batch = self.batches[b]
            hidden, self.kwargs[b] = self.decoder.block_inputs(batch["input_ids"],
                                                               batch.get("attention_mask"))
            if not self.proof:
                self.prove_front_end(b, hidden)
            saved = load(b) if load is not None and first_block else None
            self.hidden[b] = saved.to(hidden.device) if saved is not None else hidden
        missing = first_block and load is not None and any(load(b) is None for b in self.mine)
        if first_block and (load is None or missing):
            for index in range(first_block):  # recompute: forward only, no statistics
                layer = self.decoder.materialize(index)
                with torch.no_grad():
                    for b in self.mine:
                        self.hidden[b] = layer(self.hidden[b], **self.kwargs[b][index])
                self.decoder.release(index)

    def prove_front_end(self, b: int, hidden) -> None:
        """Block 0's input on batch ``b`` (the probe: this process's first batch) must be
        transformers' own forward's, bit for bit (``reference_block_input``): otherwise every
        statistic of the run would be computed on inputs the model never sees, and the run is
        refused, saying so, before any block is calibrated."""
        import torch
        started = time.perf_counter()
        batch = self.batches[b]
        expected = reference_block_input(self.directory, self.dtype, batch["input_ids"],
                                         batch.get("attention_mask"), self.decoder.device)
        self.seconds["probe"] += time.perf_counter() - started
        mask = batch.get("attention_mask")
        tokens = int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())
        if expected.shape != hidden.shape or not torch.equal(expected, hidden):
            raise FrontEndMismatch(self.directory, self.decoder.config.model_type, b, hidden,
                                   expected)
        self.proof = {"batch": b, "tokens": tokens, "equal": "bit for bit",
                      "reference": "from_pretrained of the model cut to its first block"}

    def run_block(self, index: int, full: bool, blocks: bool = False) -> LayerStatistics:
        """Block ``index`` run on the batches: its statistics (checkpoint module names), reduced
        over every process."""
        import torch
        started = time.perf_counter()
        layer = self.decoder.materialize(index)
        self.seconds["read"] += time.perf_counter() - started
        prefix = f"{self.decoder.prefix}{index}."
        layout = self.decoder.layout
        stats = BlockStatistics(layer, lambda name: layout.to_checkpoint("." + prefix + name)[1:],
                                layout, full, blocks)
        started = time.perf_counter()
        with torch.no_grad(), stats:
            for count, b in enumerate(self.mine):
                if self.progress is not None:
                    self.progress.step(f"calibrating batch {count + 1}/{len(self.mine)}")
                stats.batch(b, self.masks[b])
                self.hidden[b] = layer(self.hidden[b], **self.kwargs[b][index])
        forward = time.perf_counter() - started
        started = time.perf_counter()
        stats.reduce(self.ranks.gather, self.ranks.all_reduce)
        stats.fill_unrouted(self.ranks.gather, self.ranks.all_reduce)
        self.seconds["statistics"] += time.perf_counter() - started
        self.seconds["forward"] += forward
        self.decoder.release(index)
        return stats.result()

    def head_statistics(self, module: str, full: bool, blocks: bool = False) -> LayerStatistics:
        """The statistics of the head's input: the last block's output through the model's
        own final norm and pre-head code (``SequentialDecoder.head_inputs``)."""
        stats = BlockStatistics(None, None, self.decoder.layout, full, blocks)
        for b in self.mine:
            stats.batch(b, self.masks[b])
            batch = self.batches[b]
            rows = self.decoder.head_inputs(batch["input_ids"], batch.get("attention_mask"),
                                            self.hidden[b])
            stats.add_rows(module, stats.rows_of(rows))
        stats.reduce(self.ranks.gather, self.ranks.all_reduce)
        return stats.result()

    def block_h_bytes(self, index: int, plans) -> int:
        """Bytes of float64 H of the block's planned weights, one per distinct input at most
        (q/k/v and gate/up counted once: the largest member of each fused set)."""
        seen, total = set(), 0
        for plan in plans:
            key = plan.fused_with or (plan.module,)
            if key not in seen:
                seen.add(key)
                total += plan.cols ** 2 * 8
        return total


class FrontEndMismatch(ValueError):
    """Block-by-block calibration would not feed block 0 what the model's own forward feeds
    it: one line saying by how much, and what to do instead."""

    def __init__(self, directory, model_type: str, batch: int, ours, theirs):
        if ours.shape != theirs.shape:
            how = f"shape {tuple(ours.shape)} against {tuple(theirs.shape)}"
        else:
            difference = float((ours.double() - theirs.double()).abs().max())
            how = (f"max |difference| {difference:.3g}, norm {float(ours.double().norm()):.4g} "
                   f"against {float(theirs.double().norm()):.4g}")
        super().__init__(
            f"{directory}: block-by-block calibration refused: block 0's input on calibration "
            f"batch {batch} differs from transformers' own forward of the model ({model_type}; "
            f"{how}), so the front end (the embedding and the code before the first block) is "
            "not the model's and every statistic would be wrong; calibrate the whole model "
            "instead (--sequential never: memory holds the whole model)")


def _device(device) -> str:
    """Where this process's forward runs: ``cuda`` (or ``auto`` with a CUDA device) under
    torchrun means the process's own device, ``cuda:LOCAL_RANK``."""
    import os
    if device in (None, "auto"):
        import torch
        device = "cuda" if device == "auto" and torch.cuda.is_available() else "cpu"
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return device
