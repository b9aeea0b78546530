"""The kernel race of docs/performance.md: the torch backend's H-Scale on the CPU (its default
path: the fused walk, compiled once and loaded from the disk cache) against the plain RTN of
the libraries a user would pick instead, on the same machine in the same run, with the
machine's own limits beside the figures.

    python tools/kernel_race.py [--shapes 4096x4096,576x576,...] [--pairs 5] [--json OUT]
                                [--no-first-run] [--no-limits]
    python tools/kernel_race.py --fused-vs-eager rtn,hscale-block --shapes 4x256,576x576

Peers, each called on a float32 torch tensor through the library's own production path (the
adapters of backends/interop/ say the same calls; here without their numpy round trip):

* ``torchao``: ``per_tensor_amax_to_scale(torch.max(torch.abs(w)))`` then
  ``NVFP4Tensor.to_nvfp4(w, block_size=16, per_tensor_scale=..., is_swizzled_scales=False)``
  (torchao's weight-only NVFP4 workflow): packed codes and E4M3 scales;
* ``ct-compress``: compressed-tensors' qparams (group ``amin``/``amax``, ``generate_gparam``,
  ``calculate_qparams``) and ``NVFP4PackedCompressor.compress`` (the checkpoint's packed
  weight), on a ``Linear`` initialised by ``initialize_module_for_quantization`` outside the
  clock (llm-compressor holds its modules already);
* ``ct-fake``: the same qparams and ``fake_quantize`` (quantize-dequantize, what
  llm-compressor's calibration runs; no packing).

Ours: ``TorchBackend("cpu").quantize_on_device(w, h, codes=False)`` (tensors in, packed codes
and scale bytes out, like the peers), method hscale (K = 16, U = 6, max-abs init), its result
checked bit for bit against ``hscale.reference.quantize`` on every shape; and the same call with
``compile=False`` (the eager kernels), to show where the fused walk is the faster. All on
``torch.get_num_threads()`` threads.

Timing: after one untimed call of each, ``--pairs`` rounds; each round times every contestant
once, in an order that rotates from round to round (A B C D, B C D A, ...), so that a change of
load hits all of them alike; the figures are medians over rounds, and each ratio is the median
of the per-round ratios (peer time / ours): throughput relative to the peer. The fastest peer is
the one of least median time.

First run (``--no-first-run`` skips it): a fresh process quantizes the 4096 x 4096 layer with
an empty cache directory (the compilation, once per machine), then another fresh process with
that directory (the library loaded and each new block shape checked against the eager pipeline,
once per process); each figure is the first call's wall time in its process.

Fused against eager (``--fused-vs-eager METHODS``, instead of the race): for each method and
shape, ``TorchBackend("cpu", compile=True)`` and ``compile=False`` timed in alternating pairs
(after one untimed call of each), both checked bit for bit against the reference; the ratio is
the median of the pairs' eager / fused. hscale-block's blocks come from a seeded 64-sample
activation matrix.

Limits (``--no-limits`` skips them): tools/machine_limits.c compiled with gcc and run: the peak
float64 rate (FMA chains) and the memory bandwidth (copy, triad), one thread and all. The ratio
to the float64 roofline counts the exact arithmetic of the walk: 11 unfused float64 operations
per element and candidate (the product with the reciprocal, the clamps, the rounding's add and
subtract, the product with the scale, the residual, its square, h, the pairwise sum) and 14 per
element outside the window (|w|, the maximum, the final codes' division and rounding), against
half the FMA peak (an unfused operation is one flop). The ratio to the bandwidth is the time the
layer's own bytes take (4 read, 0.5625 written per weight) over the measured time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SMOLLM2_SHAPES = ("576x576", "192x576", "1536x576", "576x1536")  # SmolLM2-135M's Linears
DEFAULT_SHAPES = ("4096x4096",) + SMOLLM2_SHAPES
OPS_PER_ELEMENT_CANDIDATE = 11
OPS_PER_ELEMENT = 14
BYTES_PER_WEIGHT = 4 + 0.5 + 1 / 16


def machine_limits() -> dict:
    """tools/machine_limits.c's figures (compiled here with gcc -O2 -march=native -fopenmp)."""
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "machine_limits"
        subprocess.run(["gcc", "-O2", "-march=native", "-fopenmp", str(HERE / "machine_limits.c"),
                        "-o", str(binary)], check=True)
        done = subprocess.run([str(binary)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def peers(torch):
    """name -> (setup(w) -> run()) for the libraries' RTN."""
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    from hscale.backends.interop.compressed_tensors_nvfp4 import CompressedTensorsNVFP4

    def torchao(w):
        def run():
            scale = per_tensor_amax_to_scale(torch.max(torch.abs(w)))
            return NVFP4Tensor.to_nvfp4(w, block_size=16, per_tensor_scale=scale,
                                        is_swizzled_scales=False).qdata
        return run

    ct = CompressedTensorsNVFP4()

    def ct_compress(w):
        scheme = ct.scheme()
        linear = ct.module(w, scheme)

        def run():
            ct.qparams(linear, scheme, None)
            return ct.compress(linear, scheme)["weight_packed"]
        return run

    def ct_fake(w):
        from compressed_tensors.quantization.lifecycle.forward import fake_quantize
        scheme = ct.scheme()
        linear = ct.module(w, scheme)

        def run():
            ct.qparams(linear, scheme, None)
            return fake_quantize(linear.weight, linear.weight_scale, None, scheme.weights,
                                 global_scale=linear.weight_global_scale)
        return run

    return {"torchao": torchao, "ct-compress": ct_compress, "ct-fake": ct_fake}


def race_shape(torch, rows, cols, pairs, contestants_for) -> dict:
    from hscale.backends.torch_backend import TorchBackend
    from hscale.backends.torch_tensor import to_host
    from hscale.bench import identical, make_layer
    from hscale.reference import quantize as reference_quantize

    weight, h = make_layer(rows, cols)
    w = torch.from_numpy(weight)
    backend = TorchBackend("cpu")
    ours = lambda: backend.quantize_on_device(w, h, codes=False)  # noqa: E731
    ours()  # warm-up: the fused walk loaded (compiled, on a cold cache) and verified
    differs = identical(reference_quantize(weight, h),
                        to_host(backend.quantize_on_device(w, h, codes=True)))
    eager_backend = TorchBackend("cpu", compile=False)
    runs = {"hscale (torch CPU)": ours,
            "hscale eager": lambda: eager_backend.quantize_on_device(w, h, codes=False)}
    runs.update({name: make(w) for name, make in contestants_for.items()})
    for run in runs.values():
        run()
    names = list(runs)
    times = {name: [] for name in names}
    for round_ in range(pairs):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    ours_name = names[0]
    out = {"shape": f"{rows}x{cols}", "weights": rows * cols, "bit_identical": differs is None,
           "difference": differs, "status": backend.version, "seconds": times,
           "median_seconds": {n: statistics.median(t) for n, t in times.items()}}
    ratios = {n: [p / o for p, o in zip(times[n], times[ours_name])] for n in names[1:]}
    out["median_ratio"] = {n: statistics.median(r) for n, r in ratios.items()}
    out["ratio_range"] = {n: (min(r), max(r)) for n, r in ratios.items()}
    out["fastest_peer"] = min(names[2:], key=lambda n: out["median_seconds"][n])
    return out


def fused_vs_eager(torch, rows, cols, method, pairs) -> dict:
    from hscale.backends.torch_backend import TorchBackend
    from hscale.backends.torch_tensor import to_host
    from hscale.bench import identical, make_layer
    from hscale.reference import quantize as reference_quantize
    from hscale.reference.objective import diagonal_blocks

    weight, h = make_layer(rows, cols)
    if method == "hscale-block":
        x = np.random.default_rng(0).standard_normal((64, cols))
        h = diagonal_blocks(x.T @ x)
    w = torch.from_numpy(weight)
    backends = {"fused": TorchBackend("cpu", compile=True),
                "eager": TorchBackend("cpu", compile=False)}
    expected = reference_quantize(weight, h, method=method)
    differs = [identical(expected, to_host(b.quantize_on_device(w, h, method=method, codes=True)))
               for b in backends.values()]
    times = {name: [] for name in backends}
    for k in range(pairs):
        for name in (("fused", "eager") if k % 2 == 0 else ("eager", "fused")):
            start = time.perf_counter()
            backends[name].quantize_on_device(w, h, method=method, codes=False)
            times[name].append(time.perf_counter() - start)
    ratios = [e / f for e, f in zip(times["eager"], times["fused"])]
    return {"shape": f"{rows}x{cols}", "method": method, "seconds": times,
            "bit_identical": all(d is None for d in differs),
            "fused_on": backends["fused"].fused.disabled is None,
            "median_seconds": {n: statistics.median(t) for n, t in times.items()},
            "eager_over_fused": statistics.median(ratios), "range": (min(ratios), max(ratios))}


FIRST_RUN = """
import sys, time, numpy as np, torch
from hscale.bench import make_layer
from hscale.backends.torch_backend import TorchBackend
w, h = make_layer(4096, 4096)
wt = torch.from_numpy(w)
b = TorchBackend("cpu")
t = time.perf_counter(); b.quantize_on_device(wt, h, codes=False); first = time.perf_counter() - t
t = time.perf_counter(); b.quantize_on_device(wt, h, codes=False); second = time.perf_counter() - t
print(first, second, b.fused.disabled is None)
"""


def first_run() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HSCALE_CACHE_DIR=cache)
        for label in ("cold cache (compiles)", "warm cache (new process)"):
            done = subprocess.run([sys.executable, "-c", FIRST_RUN], env=env, check=True,
                                  capture_output=True, text=True)
            first, second, fused = done.stdout.split()
            out[label] = {"first_call_seconds": float(first), "next_call_seconds": float(second),
                          "fused": fused == "True"}
    return out


def roofline(result: dict, limits: dict) -> dict:
    """The median H-Scale time against the machine's float64 and bandwidth floors."""
    weights = result["weights"]
    seconds = result["median_seconds"]["hscale (torch CPU)"]
    ops = weights * (16 * OPS_PER_ELEMENT_CANDIDATE + OPS_PER_ELEMENT)
    peak_ops = limits["fma_gflops_all"] / 2 * 1e9
    floor_fp64 = ops / peak_ops
    floor_bytes = weights * BYTES_PER_WEIGHT / (limits["copy_gbs_all"] * 1e9)
    return {"fp64_floor_seconds": floor_fp64, "of_fp64_roofline": floor_fp64 / seconds,
            "bandwidth_floor_seconds": floor_bytes, "of_bandwidth": floor_bytes / seconds,
            "achieved_gops": ops / seconds / 1e9}


def render(results, limits, first) -> str:
    lines = ["| shape | H-Scale (torch CPU) | " + " | ".join(results[0]["median_ratio"])
             + " | fastest peer | H-Scale / fastest peer (median of rounds, range) "
             "| bit-identical |", "|---|---:|" + "---:|" * len(results[0]["median_ratio"])
             + "---|---:|---|"]
    for r in results:
        ours = r["median_seconds"]["hscale (torch CPU)"]
        peer_cells = " | ".join(f"{r['median_seconds'][n] * 1e3:.1f} ms"
                                for n in r["median_ratio"])
        best = r["fastest_peer"]
        low, high = r["ratio_range"][best]
        lines.append(f"| {r['shape']} | {ours * 1e3:.1f} ms ({r['weights'] / ours / 1e6:.1f} M "
                     f"weights/s) | {peer_cells} | {best} | **x{r['median_ratio'][best]:.2f}** "
                     f"({low:.2f}-{high:.2f}) | {'yes' if r['bit_identical'] else 'NO'} |")
    if limits:
        lines.append("")
        lines.append(f"Machine limits (tools/machine_limits.c): float64 FMA peak "
                     f"{limits['fma_gflops_1']:.1f} GFLOP/s on one thread, "
                     f"{limits['fma_gflops_all']:.1f} on {limits['threads']}; copy "
                     f"{limits['copy_gbs_1']:.1f} / {limits['copy_gbs_all']:.1f} GB/s; triad "
                     f"{limits['triad_gbs_1']:.1f} / {limits['triad_gbs_all']:.1f} GB/s.")
        for r in results:
            f = roofline(r, limits)
            lines.append(f"- {r['shape']}: {f['achieved_gops']:.1f} G float64 ops/s, "
                         f"{f['of_fp64_roofline']:.0%} of the unfused float64 peak "
                         f"({f['fp64_floor_seconds'] * 1e3:.1f} ms floor); the layer's bytes "
                         f"alone take {f['bandwidth_floor_seconds'] * 1e3:.2f} ms "
                         f"({f['of_bandwidth']:.1%} of the measured time)")
    if first:
        lines.append("")
        for label, f in first.items():
            lines.append(f"- first run, {label}: first call {f['first_call_seconds']:.1f} s, "
                         f"next call {f['next_call_seconds']:.2f} s, fused walk "
                         f"{'on' if f['fused'] else 'OFF'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--peers", default="torchao,ct-compress,ct-fake")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-first-run", action="store_true")
    parser.add_argument("--no-limits", action="store_true")
    parser.add_argument("--fused-vs-eager", metavar="METHODS",
                        help="time the fused walk against the eager kernels for these methods "
                             "instead of the race")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    import torch
    if args.fused_vs_eager:
        return run_fused_vs_eager(torch, args)
    available = peers(torch)
    chosen = {name: available[name] for name in args.peers.split(",") if name}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    limits = None if args.no_limits else machine_limits()
    results = []
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        results.append(race_shape(torch, rows, cols, args.pairs, chosen))
        print(f"{shape}: done", file=sys.stderr, flush=True)
    first = None if args.no_first_run else first_run()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    header = (f"{started}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
              f"{os.cpu_count()} CPUs, load average at the end {' '.join(load)}")
    print(header)
    print(render(results, limits, first))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "limits": limits, "results": results,
                                         "first_run": first}, indent=1, default=str))
    return 0 if all(r["bit_identical"] for r in results) else 1


def run_fused_vs_eager(torch, args) -> int:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results = []
    for method in args.fused_vs_eager.split(","):
        for shape in args.shapes.split(","):
            rows, cols = (int(v) for v in shape.split("x"))
            r = fused_vs_eager(torch, rows, cols, method, args.pairs)
            results.append(r)
            print(f"{started} {shape} {method}: fused {r['median_seconds']['fused'] * 1e3:.1f} "
                  f"ms, eager {r['median_seconds']['eager'] * 1e3:.1f} ms, eager / fused "
                  f"x{r['eager_over_fused']:.2f} ({r['range'][0]:.2f}-{r['range'][1]:.2f}), "
                  f"bit-identical {'yes' if r['bit_identical'] else 'NO'}, fused walk "
                  f"{'on' if r['fused_on'] else 'OFF'}", flush=True)
    with open("/proc/loadavg") as f:
        print("load average at the end", " ".join(f.read().split()[:3]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0 if all(r["bit_identical"] and r["fused_on"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
