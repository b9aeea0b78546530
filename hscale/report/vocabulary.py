"""The words and reference numbers of ``hscale report``: the methods compared, their labels, the
paper's figures printed beside ours, and short layer names."""

from __future__ import annotations

from pathlib import Path

DEFAULT_OUT = Path("fidelity-report")


METHODS = ("scale-only", "hscale", "hscale-block", "full-ladder", "best-scale")


LABELS = {"rtn": "min-max (RTN)", "scale-only": "weight-guided (h = 1)", "hscale": "H-Scale",
          "hscale-block": "block-Hessian H-Scale (hscale-block)",
          "full-ladder": "full ladder (diag objective)", "best-scale": "Best Scale (oracle)"}


BEST_SCALE_ITERATIONS = 60


# The paper's figures (Qwen3-4B-Instruct), for the tables beside ours.
PAPER = {"output_reduction": {"hscale": 0.325, "scale-only": 0.126, "best-scale": 0.408},
         "shift_shares": {"keep": 0.312, "larger": 0.479, "smaller": 0.209},
         "window_median_U6_K16": 1.0,
         "window": {"0,16": 0.6463}}


def short_name(module: str) -> str:
    for prefix in ("encoder.layer.", "model.layers."):
        if module.startswith(prefix):
            return module[len(prefix):]
    return module
