"""The ``hscale`` console command."""

from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    import numpy as np

    from hscale import backends
    from hscale.demo import format_report, plot_histograms, run_demo

    if args.layer:
        with np.load(args.layer, allow_pickle=False) as data:
            weight, hessian_diag = data["weight"], data["hessian_diag"]
            name = str(data["name"]) if "name" in data else args.layer
    else:
        from hscale.calibration import load_default_layer
        layer = load_default_layer()
        weight, hessian_diag, name = layer.weight, layer.hessian_diag, layer.name
    backend = backends.get(args.backend)
    ok, why = backend.available()
    if not ok:
        print(f"hscale demo: backend {args.backend!r} is not available: {why}", file=sys.stderr)
        return 2
    rows = run_demo(weight, hessian_diag, backend=backend, init=args.init, K=args.K, U=args.U,
                    name=name)
    print(format_report(rows, name=name, shape=weight.shape, backend_name=backend.name,
                        init=args.init, K=args.K, U=args.U))
    if args.plot:
        plot_histograms(rows, args.plot, name=name)
        print(f"\nplot written to {args.plot}")
    return 0


def _bench(args) -> int:
    from hscale import bench
    return bench.main(args.bench_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hscale", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="quantize a layer with rtn, scale-only and hscale "
                                             "and compare (default: a bundled MiniLM layer)")
    demo.add_argument("--layer", help=".npz with 'weight' (m, n) and 'hessian_diag' (n,)")
    demo.add_argument("--backend", default="numpy", help="backend name or module:factory")
    demo.add_argument("--init", default="maxabs", choices=("maxabs", "4over6"))
    demo.add_argument("-K", type=int, default=16)
    demo.add_argument("-U", type=int, default=6)
    demo.add_argument("--plot", metavar="PNG", help="also save the histograms as a plot")
    demo.set_defaults(func=_demo)

    bench = commands.add_parser("bench", help="throughput and peak memory of the reference "
                                               "and backends (see hscale bench --help)")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    bench.set_defaults(func=_bench)

    try:
        from hscale.vectors.cli import add_vectors_parser, run_vectors
    except ImportError:  # the vectors package is optional at import time
        pass
    else:
        vectors = add_vectors_parser(commands)
        vectors.set_defaults(func=run_vectors)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the benchmark owns its options (hscale bench --help)
        from hscale import bench
        return bench.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except ValueError as exc:  # bad input: say what is wrong, no traceback
        print(f"hscale {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
