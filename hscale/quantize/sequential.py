"""``hscale quantize`` block by block: the path of decoders (``hscale.models.decoder``).

For each block in turn: calibrate it (``blocks.BlockCalibration``: materialise, run this
process's batches, collect and reduce h and H, release), quantize its weights (shared out
across processes, each fused set's s_g from its members' amax), write its tensors in the
planned order (process 0), make them durable and record the state a resumed run starts from
(``resume``). Tensors outside the blocks are copied first; a head left to quantize is calibrated
on the final norm of the last block's output and written last.
"""

from __future__ import annotations

import time
from collections import Counter

from hscale import __version__
from hscale.calibration import LayerStatistics
from hscale.checkpoints import ShardWriter
from hscale.pipelines import PIPELINES
from hscale.reference.validation import method_named

from .blocks import REPORT_H_BYTES, BlockCalibration
from .context import RunContext
from .layer import quantize_planned
from .plan import block_order, output_tensors


class SequentialRun:
    """Everything one run needs: set up by ``quantize_model`` (``run.py``)."""

    def __init__(self, context: RunContext):
        self.c = context

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        c = self.c
        request, ranks, report = c.request, c.ranks, c.report
        groups = block_order(c.source, c.plans, c.inventory)
        planned = {f"{p.module}.weight": p for p in c.plans if p.quantize}
        state = c.output.state if ranks.main and c.output is not None else None
        state = ranks.broadcast(state)
        first = state["blocks_done"] if state else 0
        writer = None
        if ranks.main:
            names = [n for group in groups for n in group]
            writer = ShardWriter(c.output.path, output_tensors(c.source, c.plans, c.layout, names),
                                 request.max_shard_bytes,
                                 {"producer": f"hscale-nvfp4 {__version__}"})
            if state:
                writer.resume(state["position"])
                report.layers = state["layers"]
                report.calibration.update(state.get("calibration", {}))
                c.log(f"resuming: blocks 0..{first - 1} of {c.inventory.blocks} were completed "
                      f"by an interrupted run; going on from block {first}")
            else:
                self._write(writer, groups[0], {})
        calibration = None
        if c.batches is not None:
            calibration = BlockCalibration(c.directory, c.source, c.model, c.batches, request,
                                           ranks, c.progress)
            started = time.perf_counter()
            calibration.start(first, (lambda b: c.hidden_store.load(first - 1, b))
                              if state and c.hidden_store is not None else None)
            report.calibration["front_end"] = calibration.proof
            c.seconds["calibration"] += time.perf_counter() - started
        if state:
            c.progress.advance(sum(planned[n].weights for g in groups[1:first + 1] for n in g
                                   if n in planned))
        for index in range(first, c.inventory.blocks):
            block = [n for n in groups[1 + index] if n in planned]
            stats = self._calibrate(calibration, index, [planned[n] for n in block])
            c.kept.add([planned[n] for n in block], stats)
            results = self._quantize(index, [planned[n] for n in block], stats)
            if ranks.main:
                started = time.perf_counter()
                self._write(writer, groups[1 + index], results)
                position = writer.flush()
                c.seconds["write"] += time.perf_counter() - started
            self._checkpoint_state(index, calibration, position if ranks.main else None)
        head = [planned[n] for n in groups[-1] if n in planned]
        if head:
            stats = self._head_statistics(calibration, head)
            c.kept.add(head, stats)
            results = self._quantize(None, head, stats)
            if ranks.main:
                self._write(writer, groups[-1], results)
        if ranks.main:
            writer.close()
        if calibration is not None:
            for key, value in calibration.seconds.items():
                c.seconds[f"calibration_{key}"] = value

    # -- steps -------------------------------------------------------------------------------
    def _calibrate(self, calibration, index, plans) -> LayerStatistics:
        c = self.c
        c.progress.block(index, "calibrating" if calibration is not None else "quantizing")
        if calibration is None:
            return LayerStatistics()
        started = time.perf_counter()
        full = PIPELINES[c.request.pipeline].needs_full_hessian or (
            c.request.report_errors and calibration.block_h_bytes(index, plans) <= REPORT_H_BYTES)
        stats = calibration.run_block(index, full, method_named(c.request.method).reads_blocks)
        c.seconds["calibration"] += time.perf_counter() - started
        return stats

    def _head_statistics(self, calibration, plans) -> LayerStatistics:
        head = self.c.inventory.head
        if calibration is None:
            return LayerStatistics()
        full = PIPELINES[self.c.request.pipeline].needs_full_hessian
        stats = LayerStatistics()
        if any(plan.module == head for plan in plans):
            stats = calibration.head_statistics(head, full,
                                                method_named(self.c.request.method).reads_blocks)
        stats.fallbacks.update({p.module: "outside the decoder blocks, not the head: no "
                                          "calibration input" for p in plans if p.module != head})
        return stats

    def _quantize(self, index, plans, stats: LayerStatistics) -> dict:
        """{tensor name: array} of the block's quantized weights, on process 0 (each process
        quantizes its share; the entries go to the report)."""
        c = self.c
        c.progress.step("quantizing")
        owners = c.ranks.share_out([p.weights for p in plans])
        scales: dict = {}
        mine: dict = {}
        entries: list = []
        started = time.perf_counter()
        for count, plan in enumerate(plans):
            if owners[count] != c.ranks.rank:
                continue
            weight = c.source.array(f"{plan.module}.weight")
            tensors, entry = quantize_planned(c, plan, weight, scales, stats, (count, len(plans)))
            del weight
            if index is not None:
                entry["block"] = index
            mine.update(tensors)
            entries.append((count, entry))
        c.seconds["quantize"] += time.perf_counter() - started
        gathered = c.ranks.gather_to_main((mine, entries))
        if not c.ranks.main:
            return {}
        results, ordered = {}, []
        for rank, (theirs, their_entries) in enumerate(gathered):
            results.update(theirs)
            ordered += their_entries
            if rank:
                c.progress.advance(sum(plans[i].weights for i, _ in their_entries))
        c.report.layers += [entry for _, entry in sorted(ordered, key=lambda e: e[0])]
        return results

    def _write(self, writer, names, results) -> None:
        """The group's tensors in order: a quantized weight's format tensors from ``results``,
        every other tensor copied from the source."""
        c = self.c
        planned = {f"{p.module}.weight": p for p in c.plans if p.quantize}
        for name in names:
            plan = planned.get(name)
            if plan is None:
                writer.write(name, c.source.array(name))
                continue
            for tensor_name in c.layout.tensor_names(plan.module).values():
                writer.write(tensor_name, results.pop(tensor_name))

    def _checkpoint_state(self, index, calibration, position) -> None:
        """After block ``index``: each process saves its batches' hidden states, then process 0
        records the state a resumed run starts from (``resume``)."""
        c = self.c
        if c.hidden_store is None:
            return
        started = time.perf_counter()
        if calibration is not None:
            c.hidden_store.save(index, {b: calibration.hidden[b] for b in calibration.mine})
        c.ranks.barrier()
        if c.ranks.main:
            c.output.save_state({"blocks_done": index + 1, "position": position,
                                 "layers": c.report.layers, "calibration": c.report.calibration,
                                 "world": c.ranks.world})
            c.hidden_store.drop_before(index)
        c.seconds["resume_state"] += time.perf_counter() - started


def block_summary(layers: list[dict]) -> dict:
    """The calibration tokens experts saw: how many experts, how many never routed to, and
    the fewest, median and most tokens of the others."""
    experts = [layer for layer in layers if layer.get("expert") and
               layer["module"].endswith(("gate_proj", "w1"))]
    if not experts:
        return {}
    tokens = sorted(layer.get("tokens", 0) for layer in experts)
    routed = [t for t in tokens if t]
    fallback = Counter(layer.get("fallback", "")[:40] for layer in experts if layer.get("fallback"))
    return {"experts": len(experts), "never_routed": len(tokens) - len(routed),
            "tokens_min": routed[0] if routed else 0,
            "tokens_median": routed[len(routed) // 2] if routed else 0,
            "tokens_max": routed[-1] if routed else 0, "fallbacks": dict(fallback)}
