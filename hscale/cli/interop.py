"""``hscale interop``: the real NVFP4 libraries through the conformance suite
(``hscale.interop``)."""

from __future__ import annotations

import json
from pathlib import Path

from hscale.files import write_json, write_text

from .args import CommandParser, check_output_file, error_text, fail

def main(argv=None) -> int:
    from hscale.interop import chosen_adapters, measure
    from hscale.interop.render import render
    parser = CommandParser(
        prog="hscale interop", description="Run the real NVFP4 libraries installed here through "
                                           "the conformance suite, count what each does "
                                           "differently on the golden vectors and real layers, "
                                           "and write the results and their markdown.")
    parser.add_argument("--adapters", default=None,
                        help="comma-separated labels or module:factory names (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="count on the level-0 vectors only (no level-2 set, no MiniLM)")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the markdown from the results file")
    parser.add_argument("--activations", action="store_true",
                        help="measure the run-time activation quantizers (the activation kind) "
                             "instead of the weight quantizers")
    parser.add_argument("--counts-only", action="store_true",
                        help="keep the suite runs of the results file, recount the data sets "
                             "and the examples")
    parser.add_argument("--gemm", action="store_true",
                        help="measure the GEMM paths (the gemm kind: ggml, torchao, ModelOpt) "
                             "instead of the weight quantizers")
    parser.add_argument("--training", action="store_true",
                        help="measure the training quantizers (the stochastic, rht and tile "
                             "kinds: gfloat, TransformerEngine's reference) instead of the "
                             "weight quantizers")
    parser.add_argument("--results", default="interop-results.json", metavar="FILE",
                        help="the results file, read and extended (default "
                             "interop-results.json)")
    parser.add_argument("--docs", "--markdown", dest="markdown", default="interop.md",
                        metavar="FILE", help="the markdown to write (default interop.md; '-': "
                                             "standard output)")
    args = parser.parse_args(argv)
    results_path = Path(args.results)
    try:
        results = json.loads(results_path.read_text()) if results_path.is_file() else {}
        check_output_file("--results", results_path)
        check_output_file("--docs", args.markdown)
    except (OSError, ValueError) as exc:
        return fail("hscale interop", error_text(exc))
    if args.training and not args.render:
        from hscale.interop.training import measure_training
        measure_training(results)
        write_json(results_path, results, argument="--results")
    elif (args.gemm or args.activations) and not args.render:
        if args.activations:
            from hscale.interop.activations import measure_all
            measure_all(results)
            write_json(results_path, results, argument="--results")
        if args.gemm:
            from hscale.interop.gemm import GEMM_PATHS, measure_gemm
            for path in GEMM_PATHS:
                entry = measure_gemm(path)
                if "not_run" in entry and "suite" in results.get("gemm", {}).get(path.label, {}):
                    print(f"[{path.label}] not available here ({entry['not_run']}): the "
                          "earlier measurement is kept", flush=True)
                    continue
                results.setdefault("gemm", {})[path.label] = entry
                write_json(results_path, results, argument="--results")
    elif not args.render:
        try:
            chosen = chosen_adapters(args.adapters)
        except ValueError as exc:
            return fail("hscale interop", f"--adapters {args.adapters}: {exc}")
        for adapter in chosen:
            entry = measure(adapter, full=not args.quick, earlier=results.get(adapter.label),
                            counts_only=args.counts_only)
            if "not_run" in entry and "exact" in results.get(adapter.label, {}):
                print(f"[{adapter.label}] not available here ({entry['not_run']}): the "
                      "earlier measurement is kept", flush=True)
                continue
            results[adapter.label] = entry
            write_json(results_path, results, argument="--results")
    write_text(args.markdown, render(results, results_path.name), argument="--docs")
    if args.markdown != "-":
        print(f"written: {args.markdown}")
    return 0
