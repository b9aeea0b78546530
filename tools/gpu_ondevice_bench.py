"""GPU benchmark of the on-device paths: ``TorchBackend.quantize_on_device`` (torch-cuda, the
whole-tensor pipeline of ``hscale.backends.torch_tensor``) and ``CupyBackend.quantize_on_device``
(the fused kernel), for each method on square layers, in one process.

``python tools/gpu_ondevice_bench.py [--sizes 4096,8192,16384] [--methods rtn,hscale,hscale-block]
[--check-rows 256] [--repeat 5] [--json PATH] [--compiled N,N] [--chunk-groups N,N]
[--profile SIZE]``

Layer: ``hscale.bench.make_layer`` (as tools/gpu_bench.py, the 2026-11-22 bench), max-abs init;
hscale-block gets seeded positive-definite 16 x 16 blocks (``seeded_blocks``). Times: medians of
``--repeat`` calls after a warm-up call, synchronised, the weight already on the device and the
result left there (``codes=False``: packed codes, scale bytes, initial bytes); cupy's kernel
alone by CUDA events (tools/gpu_bench.py's ``KernelTimer``).

Checks, every result: the torch-cuda result (all of it) against the numpy reference on
``--check-rows`` rows (the first and the last half of them, quantized by
``hscale.reference.quantize`` at the whole tensor's s_g, in worker processes): codes, packed,
scale bytes, initial bytes, delta, s_g; and against cupy's result on the whole tensor where cupy
declares the method. ``--compiled N,N``: also torch-cuda with ``compile=True`` (the fused walk:
Triton kernels compiled in the process by torch.compile, each new block shape checked against
the eager ones by ``torch_compile.CompiledWalk``) in blocks of each N groups, every size and
method, its whole result against the eager one, the first call (compiling, checking each new
block shape) timed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import KernelTimer, device_facts  # noqa: E402  (tools/ is not a package)

from hscale.bench import FIELDS, identical, make_layer  # noqa: E402

_LAYER: dict = {}


def seeded_blocks(cols: int, h: np.ndarray, seed: int = 1) -> np.ndarray:
    """(cols/16, 16, 16) float64 blocks ``A A^T / 16 + diag(h)`` of seeded A: symmetric positive
    definite, off-diagonal terms of the size of the diagonal ones, as X^T X's blocks are."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((cols // 16, 16, 16))
    blocks = a @ a.transpose(0, 2, 1) / 16.0
    blocks[:, np.arange(16), np.arange(16)] += h.reshape(-1, 16)
    return np.ascontiguousarray(blocks)


def _reference_rows(task):
    from hscale.reference import quantize
    r0, r1, method, s_g = task
    q = quantize(_LAYER["weight"][r0:r1], _LAYER["arg"], method=method, init="maxabs",
                 global_scale=s_g)
    return r0, {name: getattr(q, name) for name in FIELDS}


def reference_sample(weight, arg, method, s_g, check_rows, workers):
    """(row indices, the reference's fields on those rows) at the tensor's s_g."""
    import multiprocessing
    rows = weight.shape[0]
    half = max(1, min(rows, check_rows) // 2)
    spans = [(0, half), (rows - half, rows)] if rows > 2 * half else [(0, rows)]
    step = max(1, half // max(1, workers // len(spans)))
    tasks = [(a, min(b, a + step), method, s_g) for b0, b in spans for a in range(b0, b, step)]
    _LAYER.update(weight=weight, arg=arg)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = dict(pool.imap_unordered(_reference_rows, tasks))
    order = sorted(parts)
    index = np.concatenate([np.arange(r0, min(r0 + parts[r0]["codes"].shape[0], rows))
                            for r0 in order])
    fields = {name: np.concatenate([parts[r0][name] for r0 in order]) for name in FIELDS}
    return index, fields


def median_time(call, repeat, synchronize):
    times = []
    for _ in range(repeat):
        synchronize()
        start = time.perf_counter()
        call()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gpu_ondevice_bench.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4096,8192,16384")
    parser.add_argument("--methods", default="rtn,hscale,hscale-block")
    parser.add_argument("--check-rows", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--ops-per-weight", type=float, default=240.0)
    parser.add_argument("--compiled", default="", metavar="N,N",
                        help="also torch-cuda with the fused walk (compile=True), in blocks of "
                             "each N groups")
    parser.add_argument("--chunk-groups", default="",
                        help="torch-cuda also with these groups per block, comma-separated "
                             "(each checked against the default's result)")
    parser.add_argument("--profile", type=int, default=0, metavar="SIZE",
                        help="the kernels of one hscale call of each path at SIZE")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import cupy
    import torch

    from hscale.backends.cupy_backend import CupyBackend
    from hscale.backends.torch_backend import TorchBackend
    from hscale.backends.torch_tensor import to_host

    _, peak, facts = device_facts()
    roofline = None if peak is None else peak / args.ops_per_weight
    print(f"# device: {facts}")
    if roofline:
        print(f"# roofline at {args.ops_per_weight:.0f} fp64 ops/weight: "
              f"{roofline / 1e9:.1f} G weights/s")
    print(f"# torch {torch.__version__}, cupy {cupy.__version__}; medians of {args.repeat}; "
          f"reference on {args.check_rows} rows, {args.workers} processes")
    torch_cuda, cupy_backend = TorchBackend("cuda:0"), CupyBackend()
    runtime = cupy_backend.runtime()

    def sync():
        torch.cuda.synchronize()
        cupy.cuda.Device().synchronize()

    compiled_chunks = [int(c) for c in args.compiled.split(",") if c]
    compiled = {}  # chunk groups -> its backend, kept across sizes (compiled once)
    results = []
    print(f"{'size':>11} {'method':12} {'implementation':30} {'median':>10} {'G weights/s':>11} "
          f"{'kernel':>10} {'roofline':>8} {'peak GiB':>8}  checks", flush=True)
    for size in [int(s) for s in args.sizes.split(",")]:
        weight, h = make_layer(size, size, 0)
        blocks = seeded_blocks(size, h)
        w_torch = torch.from_numpy(weight).cuda()
        w_cupy = cupy.asarray(weight)
        for method in args.methods.split(","):
            arg = blocks if method == "hscale-block" else (h if method == "hscale" else None)
            options = dict(method=method, init="maxabs")
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            full = to_host(torch_cuda.quantize_on_device(w_torch, arg, codes=True, **options))
            peak_gib = (torch.cuda.max_memory_allocated() - base) / 2**30
            start = time.perf_counter()
            index, expected = reference_sample(weight, arg, method, full.global_scale,
                                               args.check_rows, args.workers)
            ref_seconds = time.perf_counter() - start
            sample = SimpleNamespace(global_scale=full.global_scale,
                                     **{n: getattr(full, n)[index] for n in FIELDS})
            wrong = identical(SimpleNamespace(global_scale=full.global_scale, **expected),
                              sample)
            from hscale.reference.quantize import resolve_global_scale
            s_g = resolve_global_scale(weight, None, 448.0)
            if np.float32(s_g) != full.global_scale:
                wrong = f"global_scale {full.global_scale} expected {s_g}"
            checks = [f"reference {len(index)} rows: "
                      + ("bit-identical" if wrong is None else f"MISMATCH {wrong}")]
            seconds = median_time(lambda: torch_cuda.quantize_on_device(w_torch, arg, **options),
                                  args.repeat, sync)
            row = dict(size=size, method=method, implementation="torch-cuda on device",
                       seconds=seconds, peak_gib=peak_gib, reference_rows=len(index),
                       reference_seconds=ref_seconds, identical_reference=wrong is None,
                       mismatch=wrong)
            rows = [row]
            for chunk in [int(c) for c in args.chunk_groups.split(",") if c]:
                other = TorchBackend("cuda:0", chunk_groups=chunk)
                other_wrong = identical(full, to_host(other.quantize_on_device(
                    w_torch, arg, codes=True, **options)))
                rows.append(dict(size=size, method=method, chunk_groups=chunk,
                                 implementation=f"torch-cuda, {chunk} groups/block",
                                 seconds=median_time(lambda: other.quantize_on_device(
                                     w_torch, arg, **options), args.repeat, sync),
                                 identical_default=other_wrong is None, mismatch=other_wrong))
            for chunk in compiled_chunks:
                if chunk not in compiled:
                    compiled[chunk] = TorchBackend("cuda:0", compile=True, chunk_groups=chunk)
                rows.append(compiled_row(compiled[chunk], chunk, size, method, w_torch, arg,
                                         options, full, args.repeat, sync))
            if method in cupy_backend.capabilities and method != "hscale-block":
                timer = KernelTimer(runtime)
                try:
                    got = cupy_backend.quantize_on_device(w_cupy, arg, codes=True, **options)
                    cupy_wrong = identical(full, got.to_host(runtime))
                    timer.times.clear()
                    c_seconds = median_time(
                        lambda: cupy_backend.quantize_on_device(w_cupy, arg, **options),
                        args.repeat, sync)
                    kernel = statistics.median(timer.times)
                finally:
                    runtime.launch = timer.launch
                checks.append("cupy = torch-cuda, whole tensor: "
                              + ("bit-identical" if cupy_wrong is None else f"MISMATCH {cupy_wrong}"))
                row["identical_cupy"] = cupy_wrong is None
                rows.append(dict(size=size, method=method, implementation="cupy on device",
                                 seconds=c_seconds, kernel_seconds=kernel,
                                 identical_torch=cupy_wrong is None, mismatch=cupy_wrong))
            for r in rows:
                r["weights_per_s"] = weight.size / r["seconds"]
                if roofline and r["method"] != "rtn":
                    r["roofline_fraction"] = r["weights_per_s"] / roofline
                    if "kernel_seconds" in r:
                        r["kernel_roofline_fraction"] = weight.size / r["kernel_seconds"] / roofline
                kernel = (f"{r['kernel_seconds'] * 1e3:8.2f}ms" if "kernel_seconds" in r
                          else " " * 10)
                roof = (f"{r['roofline_fraction'] * 100:7.1f}%" if "roofline_fraction" in r
                        else " " * 8)
                peak_text = f"{r['peak_gib']:8.2f}" if "peak_gib" in r else " " * 8
                if r is row:
                    said = "; ".join(checks)
                elif "identical_eager" in r:
                    said = (f"first call {r['first_call_seconds']:.2f} s; = eager: "
                            + ("bit-identical" if r["identical_eager"]
                               else f"MISMATCH {r['mismatch']}"))
                elif "identical_default" in r:
                    said = "= the default's result: " + ("bit-identical" if r["identical_default"]
                                                         else f"MISMATCH {r['mismatch']}")
                else:
                    said = ""
                print(f"{size:>5}x{size:<5} {method:12} {r['implementation']:30} "
                      f"{r['seconds'] * 1e3:8.2f}ms {r['weights_per_s'] / 1e9:11.2f} {kernel} "
                      f"{roof} {peak_text}  {said}", flush=True)
                results.append(r)
        if args.profile and size == args.profile:
            profile_call(torch, sync, size, w_torch, h, torch_cuda, compiled)
        w_torch = w_cupy = None  # the layer freed before the next size
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    for backend in compiled.values():
        print(f"# compiled, {backend.chunk_groups} groups/block: {backend.version}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    bad = [r for r in results if r.get("mismatch")]
    return 1 if bad else 0


def compiled_row(backend, chunk, size, method, w_torch, arg, options, full, repeat, sync):
    """torch-cuda with the fused walk in blocks of ``chunk`` groups: the first call (compiling,
    checking each new block shape against the eager kernels) timed apart, its whole result
    against the eager pipeline's ``full``, then the median of ``repeat``."""
    from hscale.backends.torch_tensor import to_host
    start = time.perf_counter()
    got = to_host(backend.quantize_on_device(w_torch, arg, codes=True, **options))
    sync()
    first = time.perf_counter() - start
    wrong = identical(full, got)
    if backend.fused.disabled:
        wrong = f"the fused walk is off: {backend.fused.disabled}"
    seconds = median_time(lambda: backend.quantize_on_device(w_torch, arg, **options),
                          repeat, sync)
    return dict(size=size, method=method, chunk_groups=chunk,
                implementation=f"torch-cuda fused, {chunk} groups/block", seconds=seconds,
                first_call_seconds=first, identical_eager=wrong is None, mismatch=wrong)


def profile_call(torch, sync, size, w_torch, h, torch_cuda, compiled):
    """Where the time goes: the kernels of one hscale call of the eager path and of each fused
    one, by torch's profiler."""
    from torch.profiler import ProfilerActivity, profile
    paths = [("eager", torch_cuda)] + [(f"fused {c}", b) for c, b in compiled.items()]
    for label, backend in paths:
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                backend.quantize_on_device(w_torch, h, method="hscale")
                sync()
        except Exception as exc:  # noqa: BLE001  (no CUPTI on some machines)
            print(f"# profile of the {label} path failed: {exc}")
            continue
        print(f"# profile of one torch-cuda call, {label}, hscale {size}x{size}:")
        for key in ("device_time_total", "cuda_time_total", "cpu_time_total"):
            try:
                print(prof.key_averages().table(sort_by=key, row_limit=12,
                                                max_name_column_width=60))
                break
            except Exception as exc:  # noqa: BLE001  (the key's name by version)
                print(f"# sort by {key}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
