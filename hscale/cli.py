"""The hscale command: quantize a layer with RTN, scale-only and H-Scale side by side (demo),
time the backends against the reference (bench), and generate, verify and check the golden
test vectors (vectors). Every command and its exit codes: docs/cli.md.

Exit codes: 0 success; 1 the work ran and found a difference (a mismatch, vectors that drifted,
a result that does not conform); 2 a user error (a bad argument, an input that cannot be read,
a backend or library that is missing), said in one line on stderr before any work starts.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

PLOT_INSTALL_HINT = 'pip install "hscale-nvfp4[plot]" (or pip install matplotlib)'


class UsageError(ValueError):
    """A user's mistake (a bad argument, an input that cannot be read): one line, exit 2."""


class CommandParser(argparse.ArgumentParser):
    """argparse with its errors in one line, ``<prog>: <what is wrong> (see <prog> --help)``,
    and exit code 2, instead of the usage block followed by the error."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def fail(prog: str, message: str) -> int:
    """Print ``<prog>: <message>`` on stderr; the exit code of a user error."""
    print(f"{prog}: {message}", file=sys.stderr)
    return EXIT_USAGE


def error_text(error: BaseException) -> str:
    """The one-line text of an error: a file error as ``<path>: <why>``."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}"
    return str(error)


def plain_text(docstring: str) -> str:
    """A docstring without its reST markup (``x``, **x**, :func:`x`, `x`), for --help."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", docstring)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    return text.replace("``", "").replace("`", "")


# -- argument checks shared by the commands ---------------------------------------------------

def comma_separated(option: str, text: str) -> list[str]:
    """The non-empty items of a comma-separated option value; at least one."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option} {text!r}: no value given (a comma-separated list)")
    return items


def check_at_least(option: str, value, least) -> None:
    if value < least:
        raise UsageError(f"{option} {value}: must be at least {least}")


def check_layer_rows(option: str, rows: int) -> None:
    if rows < 1:
        raise UsageError(f"{option} {rows}: a layer needs at least one row (spec NVFP4-IN-1)")


def check_layer_cols(option: str, cols: int) -> None:
    from hscale.reference import GROUP_SIZE
    if cols < GROUP_SIZE or cols % GROUP_SIZE:
        raise UsageError(f"{option} {cols}: not a positive multiple of the group size "
                         f"{GROUP_SIZE}, as a layer's columns must be (spec NVFP4-IN-1)")


def check_method(option: str, method: str) -> None:
    from hscale.reference.validation import METHODS
    if method not in METHODS:
        raise UsageError(f"{option}: {method!r} is not a method; the methods are "
                         f"{', '.join(METHODS)} (spec NVFP4-IN-5)")


def check_init(option: str, init: str) -> None:
    from hscale.reference.validation import INITS
    if init not in INITS:
        raise UsageError(f"{option}: {init!r} is not an init; the inits are {', '.join(INITS)} "
                         "(spec NVFP4-IN-5)")


def load_backend(name: str):
    """The backend ``name`` (built-in or module:factory); a name that cannot be loaded is a
    UsageError. Whether it can run here is the caller's question (``available()``)."""
    from hscale import backends
    try:
        return backends.get(name)
    except ValueError as error:
        raise UsageError(str(error)) from None  # it names the backend and the forms


def check_output_file(option: str, path) -> None:
    """``path`` can be written: its directory exists and is not read-only."""
    directory = Path(path).absolute().parent
    if not directory.is_dir():
        raise UsageError(f"{option} {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path}: the directory {directory} is not writable")


def check_plot_file(option: str, path) -> str:
    """Before any work: matplotlib is installed and can write ``path`` in the format its suffix
    names (png without one). Returns the format."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise UsageError(f"{option} needs matplotlib, which is not installed: "
                         f"{PLOT_INSTALL_HINT}") from None
    check_output_file(option, path)
    image_format = Path(path).suffix[1:].lower() or "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if image_format not in formats:
        raise UsageError(f"{option} {path}: matplotlib cannot write .{image_format} files; "
                         f"use one of .{', .'.join(sorted(formats))}")
    return image_format


# -- the commands -----------------------------------------------------------------------------

def _demo(args) -> int:
    from hscale.demo import format_report, load_layer, plot_histograms, run_demo
    from hscale.reference.validation import check_window

    # Every argument is checked before the layer is quantized.
    check_window(args.K, args.U)
    backend = load_backend(args.backend)
    ok, why = backend.available()
    if not ok:
        raise UsageError(f"backend {args.backend!r} is not available: {why}")
    plot_format = check_plot_file("--plot", args.plot) if args.plot else None
    if args.layer:
        weight, hessian_diag, name = load_layer(args.layer)
    else:
        from hscale.calibration import load_default_layer
        layer = load_default_layer()
        weight, hessian_diag, name = layer.weight, layer.hessian_diag, layer.name
    rows = run_demo(weight, hessian_diag, backend=backend, init=args.init, K=args.K, U=args.U,
                    name=name)
    print(format_report(rows, name=name, shape=weight.shape, backend_name=backend.name,
                        init=args.init, K=args.K, U=args.U))
    if args.plot:
        plot_histograms(rows, args.plot, name=name, image_format=plot_format)
        print(f"\nplot written to {args.plot}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from hscale import __version__

    parser = CommandParser(prog="hscale", description=plain_text(__doc__),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hscale {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo", help="quantize a layer with rtn, scale-only and hscale and compare (default: a "
                     "bundled MiniLM layer)",
        description="Quantize one layer with rtn, scale-only and hscale and print their errors "
                    "side by side, and which shifts H-Scale chose.")
    demo.add_argument("--layer", help=".npz with 'weight' (m, n) and 'hessian_diag' (n,), "
                                      "optionally 'name' (np.savez(path, weight=W, "
                                      "hessian_diag=h))")
    demo.add_argument("--backend", default="numpy", help="backend name or module:factory")
    demo.add_argument("--init", default="maxabs", choices=("maxabs", "4over6"),
                      help="initial byte: maxabs (the group maximum on 6) or 4over6 (the better "
                           "of 6 and 4); default maxabs")
    demo.add_argument("-K", type=int, default=16,
                      help="window size: how many scale bytes H-Scale tries per group "
                           "(default 16)")
    demo.add_argument("-U", type=int, default=6,
                      help="how many of them lie above the initial byte; K-1-U lie below "
                           "(default 6, so the shifts are -9..+6)")
    demo.add_argument("--plot", metavar="PNG", help="also save the histograms as a plot "
                                                     "(needs matplotlib)")
    demo.set_defaults(func=_demo)

    # Only for the listing of --help: main() hands "hscale bench ..." to hscale.bench.main.
    commands.add_parser("bench", help="throughput and peak memory of the reference and "
                                      "backends (see hscale bench --help)", add_help=False)

    from hscale.vectors.cli import add_vectors_parser
    add_vectors_parser(commands)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the benchmark owns its options (hscale bench --help)
        from hscale import bench
        return bench.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or EXIT_OK
    except (ValueError, OSError) as error:  # a bad input: say what is wrong, no traceback
        return fail(f"hscale {args.command}", error_text(error))


if __name__ == "__main__":
    sys.exit(main())
