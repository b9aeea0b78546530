"""GPU benchmark: the ``cupy`` and ``torch-cuda`` backends on large layers, against the reference.

``python tools/gpu_bench.py [--sizes 4096,8192,16384] [--configs rtn:maxabs,hscale:4over6,...]``

For every square layer size and every (method, init) configuration, on the seeded layer of
``hscale bench`` (``hscale.bench.make_layer``), in one process:

* **reference**: ``hscale.reference.quantize`` over blocks of rows in parallel worker processes
  (one per CPU), every block given the tensor's own s_g (``resolve_global_scale``, the one step
  that spans rows), so the blocks together are exactly the reference's result. Its wall time is
  the same-run baseline of the ratios.
* **cupy, on device**: the weight already a CuPy array, ``CupyBackend.quantize_on_device`` (the
  amax pass, one scalar to the host for s_g, the fused kernel), the result left on the device;
  wall time of the whole call, synchronised, and the fused kernel alone (CUDA events).
* **cupy, numpy in and out** and **torch-cuda, numpy in and out**: ``quantize()`` as the
  conformance suite calls it: host validation, transfers and the host result included.

Every result is compared with the reference bit for bit (codes, packed bytes, scale bytes,
initial bytes, delta, s_g). Times are medians of ``--repeat`` calls after a warm-up call.

Roofline: the device's fp64 peak is SMs x fp64 FMA units per SM x 2 flops x SM clock (64 units
on compute capability 9.0, the H100 and H200; 32 on 8.0), and a kernel doing ``--ops-per-weight``
(default 240) fp64 operations per weight cannot exceed peak / ops weights per second. The report
gives each on-device figure as a fraction of that bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from hscale.bench import FIELDS, identical, make_layer
from hscale.cli.args import (CommandParser, UsageError, check_at_least, check_init, check_layer_cols,
                        check_method, check_output_file, check_plot_file, comma_separated,
                        error_text, fail, load_backend, plain_text)

FP64_UNITS_PER_SM = {(9, 0): 64, (8, 0): 32}
DEFAULT_CONFIGS = "rtn:maxabs,rtn:4over6,hscale:maxabs,hscale:4over6"

_LAYER: dict = {}  # the layer of the current size, inherited by the forked reference workers


def _reference_block(args):
    from hscale.reference import quantize
    r0, r1, options, s_g = args
    weight, h = _LAYER["weight"], _LAYER["h"]
    q = quantize(weight[r0:r1], h, global_scale=s_g, **options)
    return r0, {name: getattr(q, name) for name in FIELDS}


def reference_result(weight, h, options, workers):
    """The reference's result (a dict of the FIELDS and global_scale), rows in parallel."""
    import multiprocessing
    from hscale.reference.quantize import resolve_global_scale
    s_g = resolve_global_scale(weight, None, options.get("scale_ceiling", 448.0))
    _LAYER.update(weight=weight, h=h)
    rows = weight.shape[0]
    step = -(-rows // (4 * workers))
    tasks = [(r0, min(rows, r0 + step), options, s_g) for r0 in range(0, rows, step)]
    parts = {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for r0, fields in pool.imap_unordered(_reference_block, tasks):
            parts[r0] = fields
    ordered = [parts[r0] for r0 in sorted(parts)]
    result = {name: np.concatenate([p[name] for p in ordered]) for name in FIELDS}
    result["global_scale"] = np.float32(s_g)
    return result


def mismatch(expected: dict, got) -> str | None:
    """None when ``got`` (a QuantizedWeight) equals the reference's fields bit for bit, else
    the first difference (``hscale.bench.identical``'s text)."""
    from types import SimpleNamespace
    return identical(SimpleNamespace(**expected), got)


def device_facts():
    """(name, fp64 peak flop/s or None, text) of CUDA device 0."""
    import cupy
    device = cupy.cuda.Device(0)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = device.attributes["MultiProcessorCount"]
    clock_hz = _sm_clock_hz(device)
    cc = (props["major"], props["minor"])
    units = FP64_UNITS_PER_SM.get(cc)
    peak = None if units is None or clock_hz is None else sms * units * 2 * clock_hz
    clock = "an unknown clock" if clock_hz is None else f"{clock_hz / 1e9:.3f} GHz"
    text = (f"{name}, compute capability {cc[0]}.{cc[1]}, {sms} SMs at {clock}, "
            f"{device.mem_info[1] / 2**30:.1f} GiB; fp64 peak "
            + (f"{peak / 1e12:.2f} TFLOP/s ({units} FMA units/SM)" if peak else "unknown"))
    return name, peak, text


def _sm_clock_hz(device):
    """The SM's maximum clock: the CUDA attribute, else NVML (CUDA 13 dropped the clock from
    the device properties), else None."""
    try:
        return device.attributes["ClockRate"] * 1e3  # kHz
    except Exception:  # noqa: BLE001
        pass
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.id)
        return pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) * 1e6  # MHz
    except Exception:  # noqa: BLE001
        return None


def _median_time(call, repeat, synchronize):
    times = []
    for _ in range(repeat):
        synchronize()
        start = time.perf_counter()
        result = call()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


class KernelTimer:
    """CUDA events around every ``hs_quantize`` launch of a cupy runtime."""

    def __init__(self, runtime):
        import cupy
        self.cupy, self.runtime, self.times = cupy, runtime, []
        self.launch = runtime.launch
        runtime.launch = self._launch

    def _launch(self, name, groups, *args):
        if name != "hs_quantize":
            return self.launch(name, groups, *args)
        start, stop = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        start.record()
        self.launch(name, groups, *args)
        stop.record()
        stop.synchronize()
        self.times.append(self.cupy.cuda.get_elapsed_time(start, stop) / 1e3)


def run(sizes, configs, backends, repeat, ops_per_weight, workers, out=sys.stdout):
    import cupy

    from hscale.backends import get
    from hscale.backends.cupy_backend import CupyBackend

    name, peak, facts = device_facts()
    roofline = None if peak is None else peak / ops_per_weight
    print(f"# device: {facts}", file=out)
    if roofline:
        print(f"# roofline at {ops_per_weight} fp64 ops/weight: {roofline / 1e9:.1f} G weights/s",
              file=out)
    print(f"# cupy {cupy.__version__}; reference on {workers} worker processes; medians of "
          f"{repeat}", file=out)
    on_device = CupyBackend() if "cupy" in backends else None
    numpy_in = {b: get(b) for b in backends}
    for b, backend in numpy_in.items():
        ok, why = backend.available()
        if not ok:
            raise SystemExit(f"gpu_bench: backend {b} unavailable: {why}")
        print(f"# {b}: {backend.version}", file=out)
    results = []
    print(f"{'size':>11} {'method':6} {'init':6} {'implementation':38} {'median':>10} "
          f"{'G weights/s':>11} {'vs ref':>7} {'kernel':>10} {'roofline':>8}  identical",
          file=out)
    for size in sizes:
        weight, h = make_layer(size, size, 0)
        weights = weight.size
        weight_dev = cupy.asarray(weight)
        for method, init in configs:
            options = dict(method=method, init=init)
            start = time.perf_counter()
            expected = reference_result(weight, h, options, workers)
            ref_seconds = time.perf_counter() - start
            rows = [dict(implementation=f"reference, {workers} processes", seconds=ref_seconds,
                         all_seconds=[ref_seconds], identical=None, mismatch=None)]
            if on_device is not None:
                backend = on_device
                runtime = backend.runtime()
                timer = KernelTimer(runtime)
                try:
                    def call(weight_dev=weight_dev):  # bound now: deleted after the loop
                        return backend.quantize_on_device(weight_dev, h, **options)
                    first = call()
                    wrong = mismatch(expected, first.to_host(runtime))
                    timer.times.clear()
                    seconds, all_seconds, _ = _median_time(call, repeat,
                                                           cupy.cuda.Device().synchronize)
                    kernel = statistics.median(timer.times)
                finally:
                    runtime.launch = timer.launch
                rows.append(dict(implementation="cupy on device",
                                 seconds=seconds, all_seconds=all_seconds, kernel_seconds=kernel,
                                 identical=wrong is None, mismatch=wrong))
            for b, backend in numpy_in.items():
                def call():
                    return backend.quantize(weight, h, **options)
                wrong = mismatch(expected, call())
                reps = max(1, repeat // 3) if b == "torch-cuda" and size >= 8192 else repeat
                seconds, all_seconds, _ = _median_time(call, reps, _synchronize_all)
                rows.append(dict(implementation=f"{b}, numpy in and out", seconds=seconds,
                                 all_seconds=all_seconds, identical=wrong is None,
                                 mismatch=wrong))
            for row in rows:
                row.update(size=size, method=method, init=init, weights=weights,
                           weights_per_s=weights / row["seconds"],
                           vs_reference=ref_seconds / row["seconds"], device=name)
                if roofline and "kernel_seconds" in row:
                    row["kernel_weights_per_s"] = weights / row["kernel_seconds"]
                    row["roofline_fraction"] = row["kernel_weights_per_s"] / roofline
                _print_row(row, out)
                results.append(row)
        del weight_dev
        cupy.get_default_memory_pool().free_all_blocks()
    return results


def _synchronize_all():
    try:
        import cupy
        cupy.cuda.Device().synchronize()
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:
        pass


def _print_row(r, out):
    kernel = (f"{r['kernel_seconds'] * 1e3:8.2f}ms" if "kernel_seconds" in r else f"{'':10}")
    roof = f"{r['roofline_fraction'] * 100:7.1f}%" if "roofline_fraction" in r else f"{'':8}"
    same = {None: "reference", True: "bit-identical", False: f"MISMATCH {r['mismatch']}"}
    print(f"{r['size']:>5}x{r['size']:<5} {r['method']:6} {r['init']:6} {r['implementation']:38} "
          f"{r['seconds'] * 1e3:8.2f}ms {r['weights_per_s'] / 1e9:11.2f} x{r['vs_reference']:6.1f} "
          f"{kernel} {roof}  {same[r['identical']]}", file=out, flush=True)


def sweep_threads(size, threads, repeat, out=sys.stdout):
    """The fused kernel's median time (hscale, max-abs init) for each block size, on device."""
    import cupy

    from hscale.backends.cupy_backend import CupyBackend
    weight, h = make_layer(size, size, 0)
    weight_dev = cupy.asarray(weight)
    backend = CupyBackend()
    runtime = backend.runtime()
    timer = KernelTimer(runtime)
    try:
        for block in threads:
            runtime.threads_per_block = block
            backend.quantize_on_device(weight_dev, h)
            timer.times.clear()
            for _ in range(repeat):
                backend.quantize_on_device(weight_dev, h)
            kernel = statistics.median(timer.times)
            print(f"# threads per block {block:4d}: kernel {kernel * 1e3:8.3f} ms, "
                  f"{weight.size / kernel / 1e9:7.2f} G weights/s (hscale, maxabs, "
                  f"{size}x{size})", file=out, flush=True)
    finally:
        runtime.launch = timer.launch


def profile_once(size, method, init):
    """One warm-up and one measured on-device call, for a profiler (ncu -k hs_quantize_kernel)."""
    import cupy

    from hscale.backends.cupy_backend import CupyBackend
    weight, h = make_layer(size, size, 0)
    backend = CupyBackend()
    weight_dev = cupy.asarray(weight)
    for _ in range(2):
        backend.quantize_on_device(weight_dev, h, method=method, init=init)
    cupy.cuda.Device().synchronize()


def plot(results, path, ops_per_weight=240.0):
    """Weights per second against layer size, one line per implementation and configuration,
    with the 20 G weights/s goal and the fp64 roofline; written to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, method in zip(axes, ("hscale", "rtn")):
        lines = {}
        for r in results:
            if r["method"] != method:
                continue
            key = (r["implementation"].replace(", numpy in and out", " (numpy in/out)")
                   .replace(" processes", " CPU processes"), r["init"])
            lines.setdefault(key, []).append((r["weights"], r["weights_per_s"]))
            if "kernel_weights_per_s" in r:
                lines.setdefault(("cupy kernel alone", r["init"]), []).append(
                    (r["weights"], r["kernel_weights_per_s"]))
        names = sorted({name for name, _ in lines})
        for (name, init), points in sorted(lines.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                    color=f"C{names.index(name)}", linestyle="-" if init == "maxabs" else "--",
                    label=f"{name}, {init}")
        ax.axhline(20e9, color="grey", linewidth=0.8, linestyle=":")
        ax.text(points[0][0], 21e9, "goal 20 G weights/s", fontsize=8, color="grey")
        roofline = [r["kernel_weights_per_s"] / r["roofline_fraction"] for r in results
                    if "roofline_fraction" in r]
        if roofline and method == "hscale":  # rtn does almost no float64 arithmetic
            ax.axhline(roofline[0], color="black", linewidth=0.8, linestyle=":")
            ax.text(points[0][0], roofline[0] * 1.08,
                    f"fp64 roofline at {ops_per_weight:.0f} ops/weight", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("weights in the layer")
        ax.set_title(f"{method}: {results[0].get('device', 'GPU')}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("weights per second")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


PROG = "python tools/gpu_bench.py"


def _whole_numbers(option: str, text: str) -> list[int]:
    items = comma_separated(option, text)
    if not all(item.isdigit() for item in items):
        raise UsageError(f"{option} {text}: expected comma-separated whole numbers")
    return [int(item) for item in items]


def _config(option: str, text: str) -> tuple[str, str]:
    method, sep, init = text.partition(":")
    if not sep:
        raise UsageError(f"{option} {text}: expected METHOD:INIT, e.g. hscale:maxabs")
    check_method(option, method)
    check_init(option, init)
    return method, init


def check_arguments(args) -> tuple[list[int], list[tuple[str, str]], list[str]]:
    """(sizes, configs, backends): every argument, and that the backends can run here, checked
    before any work; UsageError for the first problem."""
    if args.replot and not args.plot:
        raise UsageError("--replot needs --plot PNG")
    if args.plot:
        check_plot_file("--plot", args.plot)
    if args.replot:
        return [], [], []
    sizes = _whole_numbers("--sizes", args.sizes)
    for size in sizes:
        check_layer_cols("--sizes", size)  # a square layer: its columns are its size
    configs = [_config("--configs", c) for c in comma_separated("--configs", args.configs)]
    backends = comma_separated("--backends", args.backends)
    check_at_least("--repeat", args.repeat, 1)
    check_at_least("--workers", args.workers, 1)
    if not args.ops_per_weight > 0:
        raise UsageError(f"--ops-per-weight {args.ops_per_weight}: must be positive")
    if args.sweep_threads:
        for block in _whole_numbers("--sweep-threads", args.sweep_threads):
            check_at_least("--sweep-threads", block, 1)
    if args.profile_once:
        size, method, init = args.profile_once
        check_layer_cols("--profile-once SIZE", _whole_numbers("--profile-once SIZE", size)[0])
        _config("--profile-once", f"{method}:{init}")
    if args.json:
        check_output_file("--json", args.json)
    for name in dict.fromkeys(["cupy"] + backends):  # cupy: the device facts and kernel timer
        ok, why = load_backend(name).available()
        if not ok:
            raise UsageError(f"backend {name} cannot run here: {why} (this benchmark needs a "
                             "CUDA GPU and CuPy)")
    return sizes, configs, backends


def main(argv=None) -> int:
    parser = CommandParser(prog=PROG, description=plain_text(__doc__),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096,8192,16384",
                        help="square layer sizes, comma-separated, multiples of 16")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help="method:init pairs, comma-separated")
    parser.add_argument("--backends", default="cupy,torch-cuda",
                        help="backends timed with numpy in and out (cupy is also timed on "
                             "device)")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--ops-per-weight", type=float, default=240.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--plot", metavar="PNG", help="also plot throughput against size")
    parser.add_argument("--replot", metavar="JSON",
                        help="only plot (--plot) the figures of an earlier --json run")
    parser.add_argument("--sweep-threads", metavar="N,N,...",
                        help="only time the kernel at these block sizes (largest size)")
    parser.add_argument("--profile-once", nargs=3, metavar=("SIZE", "METHOD", "INIT"),
                        help="only run two on-device calls (for ncu)")
    args = parser.parse_args(argv)
    try:
        sizes, configs, backends = check_arguments(args)
        if args.replot:
            with open(args.replot) as f:
                figures = json.load(f)
    except (UsageError, OSError) as error:
        return fail(PROG, error_text(error))
    except ValueError as error:  # json.JSONDecodeError
        return fail(PROG, f"--replot {args.replot}: not a JSON file of figures ({error})")
    if args.replot:
        plot(figures, args.plot, args.ops_per_weight)
        return 0
    if args.profile_once:
        size, method, init = args.profile_once
        profile_once(int(size), method, init)
        return 0
    if args.sweep_threads:
        sweep_threads(max(sizes), [int(t) for t in args.sweep_threads.split(",")], args.repeat)
        return 0
    results = run(sizes, configs, backends, args.repeat, args.ops_per_weight, args.workers)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1, default=float)
        os.replace(tmp, args.json)
    if args.plot:
        plot(results, args.plot, args.ops_per_weight)
    return 0 if all(r["identical"] is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
