"""``hscale bench``: the NumPy reference against the fast backends, in one process
(``hscale.bench``)."""

from __future__ import annotations

import sys

from .args import (CommandParser, UsageError, check_at_least, check_layer_cols, check_layer_rows,
                   check_method, comma_separated, fail, load_backend)

def _shape(text):
    """(rows, cols) of ``ROWSxCOLS``, each checked as --rows and --cols are."""
    rows, sep, cols = text.lower().partition("x")
    if not (sep and rows.strip().isdigit() and cols.strip().isdigit()):
        raise UsageError(f"--reference-memory {text}: expected ROWSxCOLS, e.g. 4096x11008")
    check_layer_rows("--reference-memory rows", int(rows))
    check_layer_cols("--reference-memory columns", int(cols))
    return int(rows), int(cols)


def build_parser():
    parser = CommandParser(
        prog="hscale bench",
        description="Time the NumPy reference against the fast backends on a seeded layer and "
                    "check that their outputs are bit-identical. Most of the time goes to the "
                    "peak-memory measurement (a fresh process per backend and method); "
                    "--no-memory skips it.")
    parser.add_argument("--rows", type=int, default=4096, help="layer rows (default 4096)")
    parser.add_argument("--cols", type=int, default=4096,
                        help="layer columns, a multiple of 16 (default 4096)")
    parser.add_argument("--backends", default=None,
                        help="comma-separated backends to compare with the reference; each "
                             "must be able to run here (default: torch, skipped if it cannot)")
    parser.add_argument("--methods", default="rtn,hscale",
                        help="comma-separated methods (rtn, scale-only, hscale)")
    parser.add_argument("--init", default="maxabs", choices=("maxabs", "4over6"))
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds; the best counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the peak-memory calls (most of the run's time)")
    parser.add_argument("--reference-memory", metavar="ROWSxCOLS", default=None,
                        help="also report the reference's peak memory on a layer of this shape "
                             "(e.g. 4096x11008)")
    return parser


def check_arguments(args, default_backend: str) -> tuple[list[str], list[str], tuple[int, int] | None]:
    """(backends, methods, reference-memory shape), every argument checked before any work;
    UsageError for the first that is wrong."""
    check_layer_rows("--rows", args.rows)
    check_layer_cols("--cols", args.cols)
    methods = comma_separated("--methods", args.methods)
    for method in methods:
        check_method("--methods", method)
    check_at_least("--repeat", args.repeat, 1)
    check_at_least("--seed", args.seed, 0)
    shape = _shape(args.reference_memory) if args.reference_memory else None
    named = args.backends is not None
    backends = [b for b in comma_separated("--backends", args.backends or default_backend)
                if b != "numpy"]
    for name in backends:
        backend = load_backend(name)
        ok, why = backend.available()
        if named and not ok:  # the default backend that cannot run is skipped, with the reason
            raise UsageError(f"--backends {name}: cannot run here: {why}")
    return backends, methods, shape


def main(argv=None) -> int:
    from hscale.bench import DEFAULT_BACKEND, reference_peak_memory, run
    args = build_parser().parse_args(argv)
    try:
        backends, methods, shape = check_arguments(args, DEFAULT_BACKEND)
    except UsageError as error:
        return fail("hscale bench", str(error))
    steps = len(methods) * (2 if not args.no_memory else 1) + (shape is not None)
    done = iter(range(1, steps + 1))

    def progress(text):
        print(f"hscale bench [{next(done)}/{steps}] {text}", file=sys.stderr, flush=True)

    if not args.no_memory:
        print("hscale bench: the peak-memory measurement takes most of the time (--no-memory "
              "skips it)", file=sys.stderr, flush=True)
    results = run(args.rows, args.cols, backends, methods, args.repeat, args.seed, args.init,
                  memory=not args.no_memory, progress=progress)
    if shape:
        progress(f"reference peak memory on {shape[0]}x{shape[1]}")
        reference_peak_memory(*shape)
    return 0 if all(r["identical"] is not False for r in results) else 1
