"""What ``hscale convert`` asks of ``hscale check``: the source is checked exactly as ``hscale
check SRC`` checks it before anything is written, and refused unless it conforms (but for
what the conversion itself repairs: fused layers' different global scales, NVFP4-CKPT-3,
which a conversion reconciles or refuses layer by layer); the output is checked the same way
before it is committed, and must check as its source did: no finding, the same layers, each
the same shape and (where its codes and bytes were copied) the same statistics and global
scale. So a conversion never launders a broken checkpoint into one that "conforms", and never
leaves an output that looks complete but checks otherwise.

``hscale.checkpoints.convert`` cannot import this (the check reads checkpoints, not the other
way): the command hands a ``ConversionCheck`` to the converters.
"""

from __future__ import annotations

from pathlib import Path

from hscale.judge.findings import plural

from . import check_checkpoint

#: Findings a conversion repairs, for targets that fuse layers (NVFP4-CKPT-3: it gives each
#: fused set one global scale, exactly or not at all) or that do not fuse them (GGUF).
REPAIRED = {("NVFP4-CKPT-3", "fused")}
#: Statistics that depend on the layout's convention, not on what the checkpoint means.
CONVENTION_STATS = {"stored_input_scale"}
#: What a layer's scale bytes may change without changing a decoded weight (rescaled).
BYTE_STATS = {"dead_groups", "zero_rows", "zero_bytes", "subnormal_bytes", "saturated_bytes",
              "largest_byte", "code_units_max"}


class ConversionCheck:
    """``source(path)`` before a conversion writes, ``output(path, how)`` before it commits;
    each raises a ValueError (one line) when the checkpoint is refused."""

    def __init__(self, command: str = "hscale check"):
        self.command = command
        self.before = None

    def source(self, path) -> None:
        report = check_checkpoint(Path(path), backend=None)
        kept = [p for p in report.all_problems()
                if (p.finding.clause, p.finding.kind) not in REPAIRED]
        if kept:
            count = sum(p.count for p in kept)
            raise ValueError(f"{path}: does not conform ({plural(count, 'finding')}; the first: "
                             f"{kept[0].render()}); {self.command} {path} lists them; nothing "
                             "was written")
        self.before = report

    def output(self, path, how: dict) -> None:
        """``how``: module -> "copied", "rescaled" or "requantized" (how convert carried it)."""
        after = check_checkpoint(Path(path), backend=None)
        problems = after.all_problems()
        if problems:
            raise RuntimeError(f"the converted checkpoint does not check as its source did: "
                               f"{problems[0].render()}: a bug, please report (nothing was "
                               "written)")
        before = {layer.module: layer for layer in self.before.layers}
        written = {layer.module: layer for layer in after.layers}
        if before.keys() != written.keys():
            differ = sorted(before.keys() ^ written.keys())
            raise RuntimeError(f"the converted checkpoint holds other quantized Linears than its "
                               f"source ({differ[0]}): a bug, please report (nothing was "
                               "written)")
        for module, layer in before.items():
            other = written[module]
            carried = how.get(module, "copied")
            skip = CONVENTION_STATS | (BYTE_STATS if carried == "rescaled" else set())
            same = layer.shape == other.shape and (
                carried == "requantized" or (
                    {k: v for k, v in layer.stats.items() if k not in skip}
                    == {k: v for k, v in other.stats.items() if k not in skip}
                    and (carried != "copied" or layer.global_scale == other.global_scale)))
            if not same:
                raise RuntimeError(f"{module}: the converted checkpoint checks otherwise than "
                                   f"its source ({carried}): a bug, please report (nothing was "
                                   "written)")
