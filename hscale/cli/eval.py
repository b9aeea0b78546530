"""``hscale eval``: perplexity, and KL divergence from the original, of a model or checkpoint."""

from __future__ import annotations

import sys

from .args import EXIT_OK, check_output_file


def _eval(args) -> int:
    from hscale.evaluation.perplexity import (EvalRequest, check_eval_request, evaluate,
                                              format_summary)
    from hscale.files import is_stdout, write_json
    if args.json:
        check_output_file("--json", args.json)
    checked = check_eval_request(EvalRequest(
        model=args.model, data=args.data, original=args.original, text_field=args.text_field,
        context=args.context, windows=args.windows, scored=args.scored, engine=args.engine,
        loader=args.loader, activations=args.activations, threads=args.threads,
        progress=not args.quiet, base=args.base))
    document = evaluate(checked)
    to_stdout = bool(args.json) and is_stdout(args.json)
    print(format_summary(document), file=sys.stderr if to_stdout else sys.stdout)
    if args.json:
        written = write_json(args.json, document, "--json")
        if not to_stdout:
            print(f"report: {written}")
    return EXIT_OK


def add_parser(commands) -> None:
    from hscale.evaluation.loaders import ACTIVATIONS, ENGINES, LOADERS
    from hscale.evaluation.text import SCORED
    parser = commands.add_parser(
        "eval", help="perplexity of a model or NVFP4 checkpoint on a text, and its KL "
                     "divergence from the original (GGUF in llama.cpp, the rest in "
                     "transformers)",
        description="Perplexity of a causal language model (a Hugging Face directory, a "
                    "compressed-tensors or ModelOpt NVFP4 checkpoint, or a GGUF file) on a "
                    "text, and with --original its token-level KL divergence from the "
                    "original model, each with a 95% interval over windows of the text "
                    "(docs/cli.md, docs/results.md).")
    parser.add_argument("model", metavar="MODEL",
                        help="a model directory, an NVFP4 checkpoint directory, or a .gguf "
                             "file (run by llama.cpp)")
    parser.add_argument("--data", required=True, metavar="PATH",
                        help="the text: a text file (read whole), a JSONL file (one record per "
                             "line, its --text-field), or a directory (a datasets save_to_disk "
                             "directory, or text and JSONL files, documents joined by a blank "
                             "line)")
    parser.add_argument("--original", metavar="MODEL",
                        help="the model MODEL was quantized from (a directory or a .gguf file): "
                             "adds the KL divergence of MODEL's next-token distribution from "
                             "its, token by token")
    parser.add_argument("--base", metavar="FILE",
                        help="the original's logits kept in FILE (as llama-perplexity's "
                             "--kl-divergence-base): written by a run with --original where "
                             "FILE does not exist, read by later runs instead of running the "
                             "original (--original may then be left out); a FILE kept for "
                             "another original, text or windows is refused")
    parser.add_argument("--text-field", default="text",
                        help="the JSONL field or dataset column holding the text (default text)")
    parser.add_argument("--context", type=int, default=512,
                        help="tokens per window (default 512)")
    parser.add_argument("--windows", type=int, default=None,
                        help="how many windows, the first N (default: every whole window of "
                             "the text)")
    parser.add_argument("--scored", choices=SCORED, default="all",
                        help="all (default): every prediction of a window; second-half: those "
                             "with at least half a window before them, as llama-perplexity "
                             "scores")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="what runs a GGUF file: llama.cpp (auto) or transformers' GGUF "
                             "reading (not for NVFP4 files); a GGUF --original runs in MODEL's "
                             "engine")
    parser.add_argument("--loader", choices=LOADERS, default="auto",
                        help="a checkpoint into transformers: library (transformers + "
                             "compressed-tensors, decompressing to bfloat16) or kit (the spec's "
                             "float32 decoding); auto: library for dense compressed-tensors, kit "
                             "for MoE and ModelOpt")
    parser.add_argument("--activations", choices=ACTIVATIONS, default="auto",
                        help="auto: a W4A4 checkpoint's activations quantized as engines do "
                             "(emulated); float: every activation float32 (weight-only)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: torch's and llama.cpp's own choice)")
    parser.add_argument("--json", metavar="FILE",
                        help="also write the figures as JSON ('-': standard output, the summary "
                             "then goes to standard error)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_eval)
