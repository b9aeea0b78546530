"""``hscale check`` and ``hscale convert``."""

from __future__ import annotations

from .args import EXIT_FINDINGS, EXIT_OK, UsageError, check_output_file

def _check(args) -> int:
    from hscale.check import check_checkpoint, format_report, write_report
    if args.hessian and not args.original:
        raise UsageError("--hessian needs --original: h weighs the error against the original "
                         "weights")
    if args.json:
        check_output_file("--json", args.json)
    if args.backend != "auto":
        from hscale.backends import get
        try:
            ok, why = get(args.backend).available()
        except ValueError as error:
            raise UsageError(str(error)) from None
        if not ok:
            raise UsageError(f"--backend {args.backend}: not available here: {why}")
    report = check_checkpoint(args.checkpoint, original=args.original, hessian=args.hessian,
                              backend=args.backend,
                              error_feedback=True if args.error_feedback else None)
    print(format_report(report, all_layers=args.all))
    if args.json:
        write_report(report, args.json)
        print(f"report: {args.json}")
    return EXIT_OK if report.conforms else EXIT_FINDINGS


def _convert(args) -> int:
    from hscale.check.conversion import ConversionCheck
    from hscale.checkpoints.convert import convert_checkpoint, format_conversion
    check = ConversionCheck()  # the source checked as hscale check does, the output too
    if args.to == "gguf":  # the third layout: a file llama.cpp runs
        from hscale.checkpoints.to_gguf import convert_to_gguf, format_gguf_conversion
        if args.requantize:
            raise UsageError("--requantize: a GGUF file keeps each Linear's own global scale, "
                             "so there is nothing to requantize")
        print(format_gguf_conversion(convert_to_gguf(args.source, args.destination,
                                                     force=args.force, check=check)))
        return EXIT_OK
    report = convert_checkpoint(args.source, args.destination, to=args.to, force=args.force,
                                requantize=args.requantize, check=check)
    print(format_conversion(report))
    return EXIT_OK


def add_parsers(commands) -> None:
    from hscale.checkpoints import FORMATS
    from hscale.pipelines import AUTO_BACKEND, AUTO_BACKEND_RULE
    check = commands.add_parser(
        "check", help="check an NVFP4 checkpoint made by any tool: structure and format, and "
                      "with --original each layer against the spec",
        description="Check a compressed-tensors or ModelOpt NVFP4 checkpoint: tensor names, "
                    "dtypes and shapes, the config, global scales, scale bytes, fused layers; "
                    "with --original, classify every layer as exact, faithful (with the "
                    "allowances it needs) or format-conformant (docs/checkpoints.md).")
    check.add_argument("checkpoint", metavar="CKPT_DIR", help="the checkpoint directory")
    check.add_argument("--original", metavar="MODEL",
                       help="the model it was quantized from (a directory, or a GGUF model "
                            "file), to re-derive every layer (with the h hscale quantize kept "
                            "beside the checkpoint, H-Scale's too)")
    check.add_argument("--hessian", metavar="FILE",
                       help="h (and H) from hscale calibrate: H-Scale is then tried exactly, "
                            "and each layer's output error is compared with RTN's")
    check.add_argument("--json", metavar="REPORT", help="also write the report as JSON")
    check.add_argument("--backend", default=AUTO_BACKEND,
                       help=f"what re-derives the layers, bit-identical to the reference: numpy "
                            f"(the reference), torch, torch-cuda, cupy; default {AUTO_BACKEND}: "
                            f"{AUTO_BACKEND_RULE}")
    check.add_argument("--error-feedback", action="store_true",
                       help="the codes come from GPTQ-like error feedback (as an hscale report "
                            "naming the gptq pipeline or an llm-compressor recipe with a GPTQ "
                            "modifier says without this option): judged by the format clauses, "
                            "re-derivation given as a consistency figure")
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
    convert.add_argument("--to", required=True, choices=FORMATS + ("gguf",),
                         help="the layout to write (gguf: DST is a .gguf file llama.cpp runs)")
    convert.add_argument("--force", action="store_true", help="replace an existing DST")
    convert.add_argument("--requantize", action="store_true",
                         help="requantize, from their decoded weights, the layers that cannot "
                              "be converted exactly (each listed in the report)")
    convert.set_defaults(func=_convert)
