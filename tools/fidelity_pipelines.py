"""docs/results.md's pipeline table: every Linear of a model (default the bundled
all-MiniLM-L6-v2), each pipeline (rtn, 4over6, gptq) with its baseline scale rule and with
H-Scale, the mean over layers of each layer's error relative to the pipeline's own baseline.

    python tools/fidelity_pipelines.py pipelines [MODEL_DIR] [--backend NAME]
"""

from __future__ import annotations

import argparse
import sys

from hscale.report.pipelines import calibrated_model, pipelines_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/fidelity_pipelines.py",
                                     description="Layer-output fidelity on a real model.")
    parser.add_argument("what", choices=("pipelines",))
    parser.add_argument("model_dir", nargs="?", default=None,
                        help="a Hugging Face model directory (default: the bundled MiniLM)")
    parser.add_argument("--backend", default="numpy")
    args = parser.parse_args(argv)
    model = calibrated_model(args.model_dir, progress=False)
    pipelines_table(model, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
