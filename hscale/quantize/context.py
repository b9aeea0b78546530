"""The state of one ``hscale quantize`` run, as one typed record: what ``quantize_model`` sets up
(the request, the source, the plan, the layout, the backend built once, the processes, the
report) and what the two paths (``whole``, ``sequential``) and the layer step share while they
run (the progress bar, the phase times, the calibration batches, the output being written)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hscale.checkpoints import Layout, SafetensorsModel
from hscale.models.inventory import Inventory

from .distributed import Ranks
from .kept import KeptH
from .plan import LayerPlan
from .progress import Progress
from .report import QuantizeReport
from .request import QuantizeRequest
from .resume import HiddenStore, ResumableOutput


@dataclass
class RunContext:
    """Everything a run shares. Set up by ``quantize_model``; the fields with defaults are the
    ones a path fills as it goes."""

    request: QuantizeRequest
    directory: Path  # the source model directory
    source: SafetensorsModel  # its weights, read tensor by tensor
    model: Any  # its architecture, built on the meta device
    inventory: Inventory
    plans: list[LayerPlan]
    layout: Layout  # the output layout (format and scheme)
    backend: Any  # the quantizer's backend, built once (``check_request``)
    ranks: Ranks
    report: QuantizeReport
    log: Callable[[str], None]
    output: ResumableOutput | None = None  # where process 0 writes (None on the others)
    hidden_store: HiddenStore | None = None  # the block path's saved hidden states (resume)
    progress: Progress = field(default_factory=lambda: Progress(False, 0))
    seconds: Counter = field(default_factory=Counter)  # phase -> seconds
    timings: dict = field(default_factory=dict)  # search / errors seconds (``quantize_layer``)
    batches: list | None = None  # the calibration batches (the block path)
    kept: KeptH = field(default_factory=lambda: KeptH(None, False))  # the h kept (H-Scale)
    gguf_output: Any = None  # --format gguf: the file (source.GGUFOutput)
    imatrix: Any = None  # --imatrix, read when the request was checked

    @property
    def quantized(self) -> list[LayerPlan]:
        """The plans of the weights quantized, in the plan's order."""
        return [p for p in self.plans if p.quantize]
