"""What a running ``hscale quantize`` shows: one bar over the weights to quantize, whose label
says the block (of how many) and what it is doing (calibrating batch b/B, quantizing), the
tensor (t/T of the block, its name), and the ETA from the rate so far; GPTQ moves it within a
tensor, group column by group column. Off with ``--quiet`` (and on every process but the first
under torchrun)."""

from __future__ import annotations


class Progress:
    def __init__(self, enabled: bool, total_weights: int, blocks: int | None = None):
        self.blocks = blocks
        self.bar = None
        if enabled and total_weights:
            from tqdm import tqdm
            self.bar = tqdm(total=total_weights, unit="w", unit_scale=True, desc="quantize",
                            dynamic_ncols=True, smoothing=0.1)
        self.block_text, self.step_text = "", ""

    def block(self, index: int, step: str) -> None:
        """Block ``index`` (0-based), now ``step`` ("calibrating", "quantizing", ...)."""
        if self.bar is None:
            return
        self.block_text = f"block {index + 1}/{self.blocks}" if self.blocks else ""
        self.step(step)

    def step(self, text: str) -> None:
        if self.bar is None:
            return
        self.step_text = text
        label = ", ".join(t for t in (self.block_text, text) if t)
        self.bar.set_description(label or "quantize", refresh=True)

    def tensor(self, index: int, count: int, name: str) -> None:
        if self.bar is None:
            return
        short = name if len(name) <= 40 else "..." + name[-37:]
        self.bar.set_postfix_str(f"tensor {index + 1}/{count} {short}", refresh=True)

    def advance(self, weights: int) -> None:
        if self.bar is not None:
            self.bar.update(weights)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
