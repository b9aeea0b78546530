"""The h an H-Scale run used, kept beside what it wrote, so that ``hscale check --original`` can
re-derive every layer exactly (H-Scale's bytes depend on h, which neither the checkpoint nor the
original model holds).

It is the file ``hscale calibrate`` writes (``h.MODULE`` float64, ``hscale.calibration.hessians``;
for ``hscale-block`` also ``B.MODULE``, the diagonal 16 x 16 blocks of H),
named ``hscale/h.safetensors`` inside a checkpoint directory and ``NAME.hscale-h.safetensors``
beside a GGUF file ``NAME.gguf``. In a checkpoint it lies in a sub-directory, not beside the
weights: engines (vLLM, SGLang) load every ``*.safetensors`` at a checkpoint's top level when
it has no shard index, and ``hscale check`` (NVFP4-CKPT-5, -6) refuses a safetensors file there
that is not the model's. It holds one float64 per input column of each quantized weight
(Llama-3-8B: 10 MB beside 5.6 GB; SmolLM2-135M: 1.3 MB). While the run goes, each weight's h is
saved in the partial output as it is known (a resumed run finds the blocks done before), and the
file is assembled when the run completes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

#: The kept h inside a checkpoint directory: in a sub-directory, so that no engine loading the
#: top level's ``*.safetensors`` takes it for weights.
KEPT_H_NAME = "hscale/h.safetensors"
#: Where each weight's h waits in the partial output until the run completes.
PENDING_DIR = "kept-h"


def kept_h_path(checkpoint) -> Path:
    """Where a checkpoint's kept h is: inside a directory, or beside a ``.gguf`` file."""
    checkpoint = Path(checkpoint)
    if checkpoint.is_dir():
        return checkpoint / KEPT_H_NAME
    from .source import gguf_side_file
    return gguf_side_file(checkpoint, "h")


def kept_h_label(path, in_directory: bool) -> str:
    """How reports name a kept h: its path inside the checkpoint directory, or its file name
    beside a GGUF file."""
    return KEPT_H_NAME if in_directory else Path(path).name


class KeptH:
    """The h of each quantized weight of a run, saved under ``partial`` (the partial output
    directory) as it comes, written as one file by ``write``."""

    def __init__(self, partial, enabled: bool):
        self.directory = Path(partial) / PENDING_DIR if enabled else None

    def add(self, plans, stats) -> None:
        """The h of ``plans`` (LayerPlans) that ``stats`` (LayerStatistics) holds, and the
        diagonal 16 x 16 blocks of H where it holds them (hscale-block)."""
        if self.directory is None:
            return
        self.directory.mkdir(exist_ok=True)
        for plan in plans:
            for kind, table in (("h", stats.h), ("B", stats.blocks)):
                value = table.get(plan.module)
                if value is not None:
                    np.save(self.directory / f"{kind}.{plan.module}.npy",
                            np.asarray(value, np.float64))

    def write(self, path, facts: dict) -> Path | None:
        """The file of every saved h (``save_hessians``'s format) at ``path``; the pending
        copies removed. None when nothing was kept."""
        if self.directory is None or not self.directory.is_dir():
            return None
        from hscale.calibration import save_hessians
        kept = {"h": {}, "B": {}}
        for entry in sorted(self.directory.glob("*.npy")):
            kind, _, module = entry.name.removesuffix(".npy").partition(".")
            kept[kind][module] = np.load(entry)
        shutil.rmtree(self.directory)
        if not kept["h"] and not kept["B"]:
            return None
        Path(path).parent.mkdir(exist_ok=True)
        save_hessians(path, kept["h"], {}, {**facts, "kept_by": "hscale quantize",
                                            "layers": len(kept["h"])}, blocks=kept["B"])
        return Path(path)
