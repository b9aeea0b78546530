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


# The paper's figures (Qwen3-4B-Instruct), for the tables and plots beside ours. The paper
# (/work/shared/paper, its LaTeX) numbers its floats in source order: Figure 1 is the gate_proj
# layer validation (fig:gate_layer_validation; its curves are images, only the means are in the
# text), Figure 2 the shift statistics (fig:step_dist; per-shift bars are images, the text gives
# the shares and two reductions), Table 7 the window sweep (tab:window_sweep; every value).
PAPER = {"output_reduction": {"hscale": 0.325, "scale-only": 0.126, "best-scale": 0.408},
         "shift_shares": {"keep": 0.312, "larger": 0.479, "smaller": 0.209},
         "reduction_at_minus_1": 0.328, "reduction_at_most_minus_4": 0.587,
         "window_median_U6_K16": 1.0,
         "window": {"0,16": 0.6463},
         "window_table": {"0,16": (64.63, 57.94), "4,16": (90.29, 87.46),
                          "5,16": (98.59, 97.83), "6,16": (100.00, 99.91),
                          "7,16": (100.00, 99.89), "8,16": (100.00, 99.84),
                          "10,16": (100.00, 99.63), "6,20": (100.00, 99.96),
                          "6,24": (100.00, 99.96)}}


PAPER_SOURCE = {"layers": "paper (Qwen3-4B-Instruct gate_proj, their setup), Fig. 1 text",
                "shifts": "paper (Qwen3-4B-Instruct MLP, their setup), Fig. 2 text",
                "window": "paper (Qwen3-4B-Instruct, their setup), Table 7"}


def short_name(module: str) -> str:
    for prefix in ("encoder.layer.", "model.layers."):
        if module.startswith(prefix):
            return module[len(prefix):]
    return module
