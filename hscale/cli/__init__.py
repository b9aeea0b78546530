"""The hscale command, one sub-command per job:

  quantize   a model (a Hugging Face directory or a GGUF file) into an NVFP4 checkpoint engines
             load; calibrate: its calibration on its own (h, and H with --full)
  check      an NVFP4 checkpoint made by any tool, against the spec (and its original)
  convert    a checkpoint between compressed-tensors and ModelOpt, or to GGUF NVFP4, losslessly
  eval       a model's perplexity on a text, and its KL divergence from the original
  demo       one layer quantized with RTN, scale-only and H-Scale side by side
  report     the paper's analyses, and H-Scale against the installed libraries' searches
  bench      the backends' throughput and peak memory against the reference
  interop    the real NVFP4 libraries through the conformance suite
  conform    a backend certified against the spec (the conformance suite and its certificate)
  vectors    the golden test vectors: generate, verify, check, explain
  docs       the shipped documentation; every command and its exit codes: hscale docs cli

Exit codes: 0 success; 1 the work ran and found a difference (a mismatch, vectors that drifted,
a result that does not conform); 2 a user error (a bad argument, an input that cannot be read,
a backend or library that is missing), said in one line on stderr before any work starts.
"""

from __future__ import annotations

import argparse
import logging
import sys

from hscale.models.loading import MissingPackage

from . import bench, checkpoints, conform, demo, docs, interop, quantize, report, vectors
from . import eval as eval_command
from .args import EXIT_OK, CommandParser, error_text, fail, plain_text

#: Commands that own their whole argument list (``hscale bench --help``): the dispatcher hands
#: them everything after their name.
OWN_PARSERS = {"bench": bench.main, "interop": interop.main, "conform": conform.main}


def build_parser() -> argparse.ArgumentParser:
    from hscale import __version__

    parser = CommandParser(prog="hscale", description=plain_text(__doc__),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hscale {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(commands)
    quantize.add_parsers(commands)
    checkpoints.add_parsers(commands)
    eval_command.add_parser(commands)
    report.add_parser(commands)
    # Only for the listing of --help: main() hands "hscale bench ..." to bench.main,
    # "hscale interop ..." to interop.main.
    commands.add_parser("bench", help="throughput and peak memory of the reference and "
                                      "backends (see hscale bench --help)", add_help=False)
    commands.add_parser("interop", help="run the real NVFP4 libraries through the suite and "
                                        "write what each does differently (see hscale interop "
                                        "--help)", add_help=False)
    commands.add_parser("conform", help="run the conformance suite on a backend and write its "
                                        "certificate (see hscale conform --help)",
                        add_help=False)
    vectors.add_parser(commands)
    docs.add_parser(commands)
    return parser


# Loggers of libraries that transformers imports whenever they are installed (its quantizer
# registry imports torchao, for one), which warn at import time about things that do not concern
# an hscale command: torchao's CUDA kernels that a CPU machine cannot load, and torch's
# deprecation of the way torchao registers its enums. Their errors still show.
IMPORT_NOISE_LOGGERS = ("torchao", "torch.utils._pytree")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):
        # A name that is not valid in the stream's encoding (a directory name of non-UTF-8
        # bytes, under a strict UTF-8 stdout) is printed escaped rather than ending the command
        # with an error after its work is done.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    for name in IMPORT_NOISE_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if argv[:1] and argv[0] in OWN_PARSERS:
        return OWN_PARSERS[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
    # a bad input, or an optional package not installed: say what is wrong, no traceback
    try:
        return args.func(args) or EXIT_OK
    except (ValueError, OSError, MissingPackage) as error:
        return fail(f"hscale {args.command}", error_text(error))
