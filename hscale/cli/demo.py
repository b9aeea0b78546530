"""``hscale demo``: RTN, scale-only and H-Scale side by side on one layer."""

from __future__ import annotations

from hscale.reference.constants import DEFAULT_K, DEFAULT_U

from .args import EXIT_OK, UsageError, check_plot_file, load_backend


def add_parser(commands) -> None:
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
    demo.add_argument("-K", type=int, default=DEFAULT_K,
                      help="window size: how many scale bytes H-Scale tries per group "
                           f"(default {DEFAULT_K})")
    demo.add_argument("-U", type=int, default=DEFAULT_U,
                      help="how many of them lie above the initial byte; K-1-U lie below "
                           f"(default {DEFAULT_U}, so the shifts are -{DEFAULT_K - 1 - DEFAULT_U}"
                           f"..+{DEFAULT_U})")
    demo.add_argument("--plot", metavar="PNG", help="also save the histograms as a plot "
                                                     "(needs matplotlib)")
    demo.set_defaults(func=_demo)


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
        from hscale.demo.default_layer import load_default_layer
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
