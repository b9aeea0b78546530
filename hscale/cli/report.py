"""``hscale report``."""

from __future__ import annotations

import os
from pathlib import Path

from hscale.report.vocabulary import BEST_SCALE_ITERATIONS, DEFAULT_OUT

from .args import EXIT_OK, PLOT_INSTALL_HINT, UsageError, check_output_file


def _report(args) -> int:
    if args.iterations < 0:
        raise UsageError(f"--iterations {args.iterations}: must be at least 0")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if not out.is_dir():
        check_output_file("--out", out)
    elif not os.access(out, os.W_OK):
        raise UsageError(f"--out {out}: the directory is not writable")
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"needs matplotlib, which is not installed: {PLOT_INSTALL_HINT}")
    from hscale.report import build
    doc = build(out, progress=not args.quiet, iterations=args.iterations,
                reuse_measured=args.reuse_measured)
    print(f"report: {out} ({len(doc['layers'])} Linears, {doc['wall_seconds']:.0f} s)")
    return EXIT_OK


def add_parser(commands) -> None:
    report = commands.add_parser(
        "report", help="reproduce the paper's analyses on the bundled MiniLM and compare "
                       "H-Scale with the installed libraries' scale searches (docs/fidelity.md)",
        description="Regenerate docs/fidelity/: per-layer output error of each scale search "
                    "against min-max, the shift statistics, the (U, K) window sweep, H-Scale on "
                    "each pipeline, the paper's microcase, the head-to-head table with its spread "
                    "over calibration subsets, and the same head to head on the kit's tiny "
                    "decoder families (Llama, Qwen3, Qwen3-MoE shapes, synthetic seeded weights), "
                    "as JSON, markdown tables and PNG plots (same bytes on a rerun on the same "
                    "machine).")
    report.add_argument("--out", default=str(DEFAULT_OUT), metavar="DIR",
                        help=f"the directory to write (default {DEFAULT_OUT}; the project's "
                             "docs are regenerated with --out docs/fidelity)")
    report.add_argument("--iterations", type=int, default=BEST_SCALE_ITERATIONS,
                        help="gradient steps of the Best Scale oracle per layer (default 60)")
    report.add_argument("--reuse-measured", action="store_true",
                        help="keep the competitor rows an earlier run measured (DIR/figures.json) "
                             "instead of running those libraries again")
    report.add_argument("--quiet", action="store_true", help="no progress bar")
    report.set_defaults(func=_report)
