"""The hscale command: quantize a model into a checkpoint engines load (quantize, with its
calibration on its own: calibrate), quantize a layer with RTN, scale-only and H-Scale side by
side (demo), time the backends against the reference (bench), and generate, verify and check
the golden test vectors (vectors). Every command and its exit codes: docs/cli.md.

Exit codes: 0 success; 1 the work ran and found a difference (a mismatch, vectors that drifted,
a result that does not conform); 2 a user error (a bad argument, an input that cannot be read,
a backend or library that is missing), said in one line on stderr before any work starts.
"""

from __future__ import annotations

import argparse
import logging
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


def _size(text: str) -> int:
    """``2GB``, ``512MB``, ``1.5GiB`` or a number of bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?i?B?)\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 2GB or 512MB")
    number, unit = float(match.group(1)), match.group(2).upper().rstrip("B").rstrip("I")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
    return int(number * scale)


def add_calibration_options(parser) -> None:
    group = parser.add_argument_group("calibration (h = diag(X^T X), HSCALE-CAL-1)")
    group.add_argument("--calibration-text", metavar="FILE",
                       help="texts to calibrate on, one per line (default: the bundled text)")
    group.add_argument("--samples", type=int, default=512,
                       help="how many texts of the file to use (default 512)")
    group.add_argument("--seq-len", type=int, default=256,
                       help="tokens per text at most (default 256)")
    group.add_argument("--batch-size", type=int, default=16, help="texts per forward pass")
    group.add_argument("--device", default=None,
                       help="where the calibration forward runs: cpu (default), cuda, or auto "
                            "(accelerate's device_map, for a model larger than one device)")


def require_models_extra() -> None:
    """quantize and calibrate need torch, transformers and safetensors: say how to get them."""
    import importlib.util
    missing = [m for m in ("torch", "transformers", "safetensors")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"needs {', '.join(missing)}, not installed: pip install "
                         '"hscale-nvfp4[models]" (install the CPU torch first where there is '
                         "no GPU, e.g. pip install torch==2.13.0)")


def _request(args, **overrides):
    from hscale.quantize_model import QuantizeRequest
    require_models_extra()
    values = dict(
        model_dir=args.model_dir, calibration_text=args.calibration_text,
        samples=args.samples, seq_len=args.seq_len, batch_size=args.batch_size,
        device=args.device, progress=not args.quiet)
    values.update(overrides)
    return QuantizeRequest(**values)


def _quantize(args) -> int:
    from hscale.quantize_model import DEFAULT_IGNORE, REPORT_NAME, format_summary, quantize_model
    ignore = tuple(args.ignore) if args.ignore is not None else DEFAULT_IGNORE
    request = _request(args, out=args.out, pipeline=args.pipeline, method=args.method,
                       format=args.format, backend=args.backend, K=args.K, U=args.U,
                       ignore=ignore, hessian=args.hessian, damp=args.damp,
                       block_size=args.block_size, act_order=args.act_order,
                       static_groups=args.static_groups, max_shard_bytes=args.max_shard_size,
                       force=args.force, report_errors=args.report_errors)
    report = quantize_model(request)
    print(format_summary(report))
    print(f"\nwritten: {report.out} (report: {Path(report.out) / REPORT_NAME})")
    return EXIT_OK


def _calibrate(args) -> int:
    from hscale.quantize_model import DEFAULT_IGNORE, calibrate_to_file
    ignore = tuple(args.ignore) if args.ignore is not None else DEFAULT_IGNORE
    request = _request(args, out=args.out, ignore=ignore)
    facts = calibrate_to_file(request, args.out, full=args.full, force=args.force)
    print(f"h of {facts['layers']} Linear layers ({'with' if args.full else 'without'} the "
          f"full H) from {facts['texts']} texts, {facts['tokens']} tokens: {args.out}")
    return EXIT_OK


def add_quantize_parsers(commands) -> None:
    from hscale.checkpoint import FORMATS
    from hscale.quantize_model import METHODS, PIPELINES
    quantize = commands.add_parser(
        "quantize", help="quantize a Hugging Face model into an NVFP4 checkpoint engines load "
                         "(default: the bundled all-MiniLM-L6-v2)",
        description="Quantize every Linear of a Hugging Face model directory with a pipeline "
                    "(rtn, 4over6, gptq) and a scale method (rtn, scale-only, hscale) and write "
                    "a compressed-tensors or ModelOpt NVFP4 checkpoint (docs/quantize.md).")
    quantize.add_argument("model_dir", nargs="?", default=None, metavar="MODEL_DIR",
                          help="a Hugging Face model directory with safetensors weights "
                               "(default: the bundled all-MiniLM-L6-v2)")
    quantize.add_argument("--out", default="nvfp4-model", help="output directory "
                                                               "(default nvfp4-model)")
    quantize.add_argument("--pipeline", default="rtn", choices=tuple(PIPELINES),
                          help="rtn (max-abs init), 4over6 (4over6 init, C = 256), gptq")
    quantize.add_argument("--method", default="hscale", choices=METHODS,
                          help="the scale byte: rtn keeps the initial byte, scale-only searches "
                               "with h = 1, hscale with h (default)")
    quantize.add_argument("--format", default="compressed-tensors", choices=FORMATS)
    quantize.add_argument("--backend", default="numpy",
                          help="numpy, torch, torch-cuda, cupy or module:factory")
    quantize.add_argument("-K", type=int, default=16, help="window size (default 16)")
    quantize.add_argument("-U", type=int, default=6, help="upward shifts (default 6)")
    quantize.add_argument("--ignore", action="append", metavar="PATTERN",
                          help="a Linear to leave unquantized: a module name, a glob, a last "
                               "name component, or re:REGEX (repeatable; default: lm_head)")
    quantize.add_argument("--hessian", metavar="FILE",
                          help="h (and H for gptq) from hscale calibrate instead of calibrating")
    quantize.add_argument("--damp", type=float, default=0.01, help="gptq: relative damping")
    quantize.add_argument("--block-size", type=int, default=128,
                          help="gptq: columns per lazy update block")
    quantize.add_argument("--act-order", action="store_true",
                          help="gptq: sweep the columns by descending H_jj")
    quantize.add_argument("--static-groups", action="store_true",
                          help="gptq: choose every group's byte before the sweep")
    quantize.add_argument("--max-shard-size", type=_size, default="2GB",
                          help="largest output shard (default 2GB)")
    quantize.add_argument("--report-errors", action="store_true",
                          help="calibrate for the report's H-weighted errors even when the "
                               "method does not need h")
    quantize.add_argument("--force", action="store_true",
                          help="replace an existing output directory")
    quantize.add_argument("--quiet", action="store_true", help="no progress bars")
    add_calibration_options(quantize)
    quantize.set_defaults(func=_quantize)

    calibrate = commands.add_parser(
        "calibrate", help="write h = diag(X^T X) of every Linear (and H with --full) for "
                          "hscale quantize --hessian",
        description="Run the calibration text through a model and write h (and H) per Linear, "
                    "so that calibration and quantization can run on different machines.")
    calibrate.add_argument("model_dir", nargs="?", default=None, metavar="MODEL_DIR",
                           help="a Hugging Face model directory (default: the bundled MiniLM)")
    calibrate.add_argument("--out", required=True, help="the .safetensors file to write")
    calibrate.add_argument("--full", action="store_true",
                           help="also the full H = X^T X per layer (gptq needs it)")
    calibrate.add_argument("--ignore", action="append", metavar="PATTERN",
                           help="as hscale quantize's (default: lm_head)")
    calibrate.add_argument("--force", action="store_true", help="replace an existing file")
    calibrate.add_argument("--quiet", action="store_true", help="no progress bar")
    add_calibration_options(calibrate)
    calibrate.set_defaults(func=_calibrate)


def _check(args) -> int:
    from hscale.check import check_checkpoint, format_report, write_report
    if args.hessian and not args.original:
        raise UsageError("--hessian needs --original: h weighs the error against the original "
                         "weights")
    if args.json:
        check_output_file("--json", args.json)
    report = check_checkpoint(args.checkpoint, original=args.original, hessian=args.hessian)
    print(format_report(report, all_layers=args.all))
    if args.json:
        write_report(report, args.json)
        print(f"report: {args.json}")
    return EXIT_OK if report.conforms else EXIT_FINDINGS


def _convert(args) -> int:
    from hscale.convert import convert_checkpoint, format_conversion
    report = convert_checkpoint(args.source, args.destination, to=args.to, force=args.force,
                                requantize=args.requantize)
    print(format_conversion(report))
    return EXIT_OK


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
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"needs matplotlib, which is not installed: {PLOT_INSTALL_HINT}") from None
    from hscale.report import build
    doc = build(out, progress=not args.quiet, iterations=args.iterations,
                reuse_measured=args.reuse_measured)
    print(f"report: {out} ({len(doc['layers'])} Linears, {doc['wall_seconds']:.0f} s)")
    return EXIT_OK


def add_report_parser(commands) -> None:
    report = commands.add_parser(
        "report", help="reproduce the paper's analyses on the bundled MiniLM and compare "
                       "H-Scale with the installed libraries' scale searches (docs/fidelity.md)",
        description="Regenerate docs/fidelity/: per-layer output error of each scale search "
                    "against min-max, the shift statistics, the (U, K) window sweep, H-Scale on "
                    "each pipeline, the paper's microcase and the head-to-head table, as JSON, "
                    "markdown tables and PNG plots (same bytes on a rerun on the same machine).")
    report.add_argument("--out", default="docs/fidelity", metavar="DIR",
                        help="the directory to write (default docs/fidelity)")
    report.add_argument("--iterations", type=int, default=60,
                        help="gradient steps of the Best Scale oracle per layer (default 60)")
    report.add_argument("--reuse-measured", action="store_true",
                        help="keep the competitor rows an earlier run measured (DIR/figures.json) "
                             "instead of running those libraries again")
    report.add_argument("--quiet", action="store_true", help="no progress bar")
    report.set_defaults(func=_report)


def add_checkpoint_parsers(commands) -> None:
    from hscale.checkpoint import FORMATS
    check = commands.add_parser(
        "check", help="check an NVFP4 checkpoint made by any tool: structure and format, and "
                      "with --original each layer against the spec",
        description="Check a compressed-tensors or ModelOpt NVFP4 checkpoint: tensor names, "
                    "dtypes and shapes, the config, global scales, scale bytes, fused layers; "
                    "with --original, classify every layer as exact, faithful (with the "
                    "allowances it needs) or format-conformant (docs/checkpoints.md).")
    check.add_argument("checkpoint", metavar="CKPT_DIR", help="the checkpoint directory")
    check.add_argument("--original", metavar="MODEL_DIR",
                       help="the model it was quantized from, to re-derive every layer")
    check.add_argument("--hessian", metavar="FILE",
                       help="h (and H) from hscale calibrate: H-Scale is then tried exactly, "
                            "and each layer's output error is compared with RTN's")
    check.add_argument("--json", metavar="REPORT", help="also write the report as JSON")
    check.add_argument("--all", action="store_true",
                       help="list every layer, however many (default: all up to 40, else "
                            "those with findings or not exact)")
    check.set_defaults(func=_check)

    convert = commands.add_parser(
        "convert", help="convert an NVFP4 checkpoint between compressed-tensors and ModelOpt, "
                        "losslessly",
        description="Convert an NVFP4 checkpoint between the compressed-tensors and ModelOpt "
                    "layouts: codes and scale bytes copied unchanged, the global scale's "
                    "reciprocal and multiplier forms converted exactly, configs rewritten, "
                    "fused layers given one global scale where that is exact "
                    "(docs/checkpoints.md).")
    convert.add_argument("source", metavar="SRC", help="the checkpoint to convert")
    convert.add_argument("destination", metavar="DST", help="the directory to write")
    convert.add_argument("--to", required=True, choices=FORMATS, help="the layout to write")
    convert.add_argument("--force", action="store_true", help="replace an existing DST")
    convert.add_argument("--requantize", action="store_true",
                         help="requantize, from their decoded weights, the layers that cannot "
                              "be converted exactly (each listed in the report)")
    convert.set_defaults(func=_convert)


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

    add_quantize_parsers(commands)
    add_checkpoint_parsers(commands)
    add_report_parser(commands)

    # Only for the listing of --help: main() hands "hscale bench ..." to hscale.bench.main,
    # "hscale interop ..." to hscale.interop.main.
    commands.add_parser("bench", help="throughput and peak memory of the reference and "
                                      "backends (see hscale bench --help)", add_help=False)
    commands.add_parser("interop", help="run the real NVFP4 libraries through the suite and "
                                        "regenerate docs/interop.md (see hscale interop --help)",
                        add_help=False)

    from hscale.vectors.cli import add_vectors_parser
    add_vectors_parser(commands)
    return parser


# Loggers of libraries that transformers imports whenever they are installed (its quantizer
# registry imports torchao, for one), which warn at import time about things that do not concern
# an hscale command: torchao's CUDA kernels that a CPU machine cannot load, and torch's
# deprecation of the way torchao registers its enums. Their errors still show.
IMPORT_NOISE_LOGGERS = ("torchao", "torch.utils._pytree")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for name in IMPORT_NOISE_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if argv[:1] == ["bench"]:  # the benchmark owns its options (hscale bench --help)
        from hscale import bench
        return bench.main(argv[1:])
    if argv[:1] == ["interop"]:  # so does the interop matrix (hscale interop --help)
        from hscale import interop
        return interop.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or EXIT_OK
    except (ValueError, OSError) as error:  # a bad input: say what is wrong, no traceback
        return fail(f"hscale {args.command}", error_text(error))


if __name__ == "__main__":
    sys.exit(main())
