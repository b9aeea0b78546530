"""``hscale quantize`` and ``hscale calibrate``."""

from __future__ import annotations

from pathlib import Path

from hscale.reference.constants import DEFAULT_K, DEFAULT_U

from .args import EXIT_OK, require_models_extra, size

def add_calibration_options(parser) -> None:
    group = parser.add_argument_group(
        "calibration (h = diag(X^T X), HSCALE-CAL-1; decoders are calibrated block by block, "
        "one block in memory)")
    group.add_argument("--calibration-data", "--calibration-text", dest="calibration_text",
                       metavar="PATH",
                       help="what to calibrate on: a text file (one text per line), a JSONL file "
                            "(one record per line, its --text-field), or a directory (a datasets "
                            "save_to_disk directory, or text and JSONL files); default: the "
                            "bundled text (101 short English texts, ~2,700 tokens: enough for "
                            "MiniLM, not for an LLM, whose widest Linear has ~14,000 inputs)")
    group.add_argument("--text-field", default="text",
                       help="the JSONL field or dataset column holding the text (default text)")
    group.add_argument("--samples", type=int, default=512,
                       help="how many texts to use, the first N (default 512)")
    group.add_argument("--seq-len", type=int, default=256,
                       help="tokens per text at most (default 256: 512 x 256 = 131,072 tokens "
                            "at most, more than any Linear's width)")
    group.add_argument("--batch-size", type=int, default=16,
                       help="texts per forward pass at most (default 16; texts of similar "
                            "length are batched together, docs/quantize.md)")
    group.add_argument("--device", default=None,
                       help="where the calibration forward runs: cpu (default), cuda, cuda:N, "
                            "or auto (a CUDA device if there is one; for a model that is not a "
                            "decoder, accelerate's device_map)")
    group.add_argument("--calibration-dtype", default="float32", metavar="{float32,bfloat16}",
                       help="the dtype the calibration forward runs in: float32 (default) or "
                            "bfloat16, the dtype decoders are served in, whose matrix products "
                            "run 3-4x faster on CPUs with AVX512-BF16 or AMX (its h is that of "
                            "the bfloat16 model, not the same bits as float32's)")


def _request(args, **overrides):
    from hscale.quantize import QuantizeRequest
    require_models_extra()
    values = dict(
        model_dir=args.model_dir, calibration_text=args.calibration_text,
        text_field=args.text_field, samples=args.samples, seq_len=args.seq_len,
        batch_size=args.batch_size, device=args.device,
        calibration_dtype=args.calibration_dtype, progress=not args.quiet)
    values.update(overrides)
    return QuantizeRequest(**values)


def _quantize(args) -> int:
    from hscale.models import DEFAULT_IGNORE
    from hscale.quantize import REPORT_NAME, format_summary, quantize_model
    from hscale.quantize.source import gguf_side_file
    ignore = tuple(args.ignore) if args.ignore is not None else DEFAULT_IGNORE
    gguf_in = args.model_dir is not None and Path(args.model_dir).is_file()
    fmt = args.format or ("gguf" if gguf_in else "compressed-tensors")
    out = args.out or ("nvfp4-model.gguf" if fmt == "gguf" else "nvfp4-model")
    request = _request(args, out=out, pipeline=args.pipeline, method=args.method,
                       format=fmt, scheme=args.scheme, backend=args.backend, K=args.K,
                       U=args.U, ignore=ignore, hessian=args.hessian, imatrix=args.imatrix,
                       damp=args.damp,
                       block_size=args.block_size, act_order=args.act_order,
                       static_groups=args.static_groups, max_shard_bytes=args.max_shard_size,
                       force=args.force, report_errors=args.report_errors,
                       no_report=args.no_report,
                       sequential=args.sequential, resume=not args.no_resume,
                       keep_h=not args.no_keep_h)
    report = quantize_model(request, log=print)
    if report.rank:  # under torchrun: process 0 reports for all
        return EXIT_OK
    print(format_summary(report))
    where = gguf_side_file(out, "report") if fmt == "gguf" else Path(report.out) / REPORT_NAME
    print(f"\nwritten: {report.out} (report: {where})")
    return EXIT_OK


def _calibrate(args) -> int:
    from hscale.models import DEFAULT_IGNORE
    from hscale.quantize import calibrate_to_file
    ignore = tuple(args.ignore) if args.ignore is not None else DEFAULT_IGNORE
    request = _request(args, out=args.out, ignore=ignore)
    facts = calibrate_to_file(request, args.out, full=args.full, force=args.force)
    print(f"h of {facts['layers']} Linear layers ({'with' if args.full else 'without'} the "
          f"full H) from {facts['texts']} texts, {facts['tokens']} tokens: {args.out}")
    return EXIT_OK


def add_parsers(commands) -> None:
    from hscale.checkpoints import FORMATS
    from hscale.checkpoints.layout_base import SCHEMES
    from hscale.pipelines import AUTO_BACKEND, AUTO_BACKEND_RULE, PIPELINES
    from hscale.reference.gptq import DEFAULT_BLOCK_SIZE, DEFAULT_DAMP
    from hscale.reference.methods import METHOD_NAMES as METHODS
    quantize = commands.add_parser(
        "quantize", help="quantize a Hugging Face model into an NVFP4 checkpoint engines load "
                         "(default: the bundled all-MiniLM-L6-v2)",
        description="Quantize every Linear of a Hugging Face model directory or a GGUF model "
                    "file with a pipeline (rtn, 4over6, gptq) and a scale method (rtn, "
                    "scale-only, hscale) and write a compressed-tensors or ModelOpt NVFP4 "
                    "checkpoint, or a GGUF NVFP4 file llama.cpp runs (docs/quantize.md).")
    quantize.add_argument("model_dir", nargs="?", default=None, metavar="MODEL",
                          help="a Hugging Face model directory with safetensors weights, or a "
                               "GGUF model file (any architecture transformers reads from GGUF; "
                               "dequantized by transformers' GGUF loading); default: the "
                               "bundled all-MiniLM-L6-v2")
    quantize.add_argument("--out", default=None,
                          help="output directory (default nvfp4-model), or with --format gguf "
                               "the .gguf file (default nvfp4-model.gguf)")
    quantize.add_argument("--pipeline", default="rtn", choices=tuple(PIPELINES),
                          help="rtn (max-abs init), 4over6 (4over6 init, C = 256), gptq")
    quantize.add_argument("--method", default="hscale", choices=METHODS,
                          help="the scale byte: rtn keeps the initial byte, scale-only searches "
                               "with h = 1, hscale with h (default), hscale-block with the "
                               "diagonal 16 x 16 blocks of X^T X (HSCALE-BLOCK-1)")
    quantize.add_argument("--format", default=None, choices=FORMATS + ("gguf",),
                          help="compressed-tensors (the default for a model directory), "
                               "modelopt, or gguf (the default for a GGUF model: a GGUF NVFP4 "
                               "file llama.cpp runs, carrying a GGUF source's tokenizer, "
                               "metadata and unquantized tensors as stored)")
    quantize.add_argument("--scheme", default="w4a16", choices=SCHEMES,
                          help="w4a16 (default): NVFP4 weights, activations kept; w4a4: also "
                               "each Linear's activation scale from its calibrated input amax "
                               "(engines quantize activations at run time; Blackwell GPUs)")
    quantize.add_argument("--backend", default=AUTO_BACKEND,
                          help=f"numpy (the reference), torch, torch-cuda, cupy or "
                               f"module:factory, every one bit-identical to the reference; "
                               f"default {AUTO_BACKEND}: the fastest here, {AUTO_BACKEND_RULE}")
    quantize.add_argument("-K", type=int, default=DEFAULT_K,
                          help=f"window size (default {DEFAULT_K})")
    quantize.add_argument("-U", type=int, default=DEFAULT_U,
                          help=f"upward shifts (default {DEFAULT_U})")
    quantize.add_argument("--ignore", action="append", metavar="PATTERN",
                          help="a Linear to leave unquantized: a module name, a glob, a last "
                               "name component, or re:REGEX (repeatable; default: lm_head)")
    quantize.add_argument("--hessian", metavar="FILE",
                          help="h (and H for gptq) from hscale calibrate instead of calibrating")
    quantize.add_argument("--imatrix", metavar="FILE",
                          help="h from a llama.cpp importance matrix (llama-imatrix's GGUF file "
                               "or legacy .dat; its tensor names mapped to the model's, experts "
                               "by column, spec HSCALE-CAL-3) instead of calibrating")
    quantize.add_argument("--damp", type=float, default=DEFAULT_DAMP, help="gptq: relative damping")
    quantize.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE,
                          help="gptq: columns per lazy update block")
    quantize.add_argument("--act-order", action="store_true",
                          help="gptq: sweep the columns by descending H_jj")
    quantize.add_argument("--static-groups", action="store_true",
                          help="gptq: choose every group's byte before the sweep")
    quantize.add_argument("--max-shard-size", type=size, default="2GB",
                          help="largest output shard (default 2GB)")
    quantize.add_argument("--report-errors", action="store_true",
                          help="the report's errors in full: calibrate for the H-weighted "
                               "errors even when the method does not need h, and collect the "
                               "full X^T X where it fits for each layer's output error "
                               "Tr(dW G dW^T) (tokens x n^2 multiply-adds per input: more than "
                               "the search)")
    quantize.add_argument("--no-report", action="store_true",
                          help="no per-layer errors against RTN (the report keeps the shifts "
                               "chosen, what was kept, the times)")
    quantize.add_argument("--force", action="store_true",
                          help="replace an existing output directory")
    quantize.add_argument("--sequential", choices=("auto", "never"), default="auto",
                          help="auto (default): a decoder (a causal LM with a list of blocks) "
                               "is calibrated and quantized block by block, one block in "
                               "memory; never: the whole model at once (the path of every other "
                               "model)")
    quantize.add_argument("--no-resume", action="store_true",
                          help="start afresh even where an interrupted run of the same command "
                               "left its completed blocks (resumed by default)")
    quantize.add_argument("--no-keep-h", action="store_true",
                          help="H-Scale: do not keep the h it used beside the output (by "
                               "default hscale/h.safetensors in the checkpoint, "
                               "NAME.hscale-h.safetensors beside NAME.gguf: what hscale check "
                               "--original needs to re-derive H-Scale's bytes)")
    quantize.add_argument("--quiet", action="store_true", help="no progress bars")
    add_calibration_options(quantize)
    quantize.set_defaults(func=_quantize)

    calibrate = commands.add_parser(
        "calibrate", help="write h = diag(X^T X) of every Linear (and H with --full) for "
                          "hscale quantize --hessian",
        description="Run the calibration text through a model and write h (and H) per Linear, "
                    "so that calibration and quantization can run on different machines.")
    calibrate.add_argument("model_dir", nargs="?", default=None, metavar="MODEL",
                           help="a Hugging Face model directory or a GGUF model file (default: "
                                "the bundled MiniLM)")
    calibrate.add_argument("--out", required=True, help="the .safetensors file to write")
    calibrate.add_argument("--full", action="store_true",
                           help="also the full H = X^T X per layer (gptq needs it)")
    calibrate.add_argument("--ignore", action="append", metavar="PATTERN",
                           help="as hscale quantize's (default: lm_head)")
    calibrate.add_argument("--force", action="store_true", help="replace an existing file")
    calibrate.add_argument("--quiet", action="store_true", help="no progress bar")
    add_calibration_options(calibrate)
    calibrate.set_defaults(func=_calibrate)
