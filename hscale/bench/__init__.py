"""Backend benchmark: the NumPy reference against the fast backends, in one process.

``hscale bench`` (``main(argv)``) builds a seeded random layer (float32, normal with a few
outliers; a seeded positive Hessian diagonal h), then for each method times the reference
(``hscale.reference.quantize``) and each backend, interleaved round by round so that a change
in machine load hits both sides, checks that every backend's output is bit-identical to the
reference's, and prints throughput (weights per second, best of ``--repeat`` rounds), the
speed-up over the reference and the peak memory of one extra call.

Peak memory, what is measured (one extra call per backend and method, not timed):

* ``numpy`` (the reference): the peak of Python-traced allocations (``tracemalloc``, which sees
  NumPy's buffers) during one call, above what was allocated before it; and, like the others,
  its RSS peak in a fresh process.
* every backend: the growth of the resident set size during one call, in a fresh Python process
  (``python -m hscale.bench.child ...``) that builds the same layer and warms the
  backend up on an 8-row layer first (with torch's fused path forced on, so that its one-time
  compilation is not counted): Linux's VmHWM is reset through ``/proc/self/clear_refs``
  just before the call and compared with VmRSS before it. This counts native allocations
  (torch's CPU allocator is invisible to tracemalloc), work buffers, the result arrays and the
  float64 copies a backend makes. A fresh process is needed because the C allocator keeps freed
  memory mapped, which would hide the peak of a second call. Without clear_refs the fallback is
  the rise of ``resource.getrusage().ru_maxrss`` (a lower bound), and the report says so.

Timings are wall-clock (``time.perf_counter``). The torch backend runs on
``torch.get_num_threads()`` worker threads; the reference is single-threaded NumPy.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
import tracemalloc

import numpy as np

FIELDS = ("codes", "packed", "scale_bytes", "delta", "initial_bytes")


MiB = 1 << 20


DEFAULT_BACKEND = "torch"


def make_layer(rows: int, cols: int, seed: int = 0):
    """A seeded layer: float32 N(0, 0.02^2) weights with 0.1% outliers (x 10..50), and a
    seeded positive h (log-uniform over 4 decades), as a calibration pass would give."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    outliers = rng.random((rows, cols)) < 0.001
    weight[outliers] *= rng.uniform(10.0, 50.0, int(outliers.sum())).astype(np.float32)
    h = 10.0 ** rng.uniform(-2.0, 2.0, cols)
    return weight, h


def identical(expected, got) -> str | None:
    """None if ``got`` equals ``expected`` bit for bit, else what differs first."""
    from hscale.judge.findings import fp32_hex
    from hscale.judge.findings import plural

    for name in FIELDS:
        e, g = getattr(expected, name), getattr(got, name)
        if e is None and g is None:
            continue
        if e is None or g is None or e.dtype != g.dtype or e.shape != g.shape:
            return f"{name}: type or shape differs"
        if not np.array_equal(e, g):
            index = tuple(int(i) for i in np.argwhere(e != g)[0])
            return (f"{name}{list(index)} = {_element_text(g[index])}, expected "
                    f"{_element_text(e[index])} ({plural(int((e != g).sum()), 'element')} "
                    "differ)")
    if np.float32(got.global_scale) != np.float32(expected.global_scale):
        return (f"global_scale {float(got.global_scale)!r} ({fp32_hex(got.global_scale)}), "
                f"expected {float(expected.global_scale)!r} ({fp32_hex(expected.global_scale)})")
    return None


def _element_text(value) -> str:
    """A delta (int8) as signed decimal; a byte or code in hex, 0x7E."""
    if value.dtype.kind == "i":
        return f"{int(value):+d}"
    return f"0x{int(value):02X}"


def traced_peak(call):
    """(result, peak bytes) of Python-traced allocations during ``call()``."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, max(0, peak - before)


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_peak(call):
    """(result, peak bytes, how) of resident memory growth during ``call()`` in this process."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        before = _status_kib("VmRSS")
        result = call()
        peak = _status_kib("VmHWM")
        if before is not None and peak is not None:
            return result, max(0, peak - before) * 1024, "VmHWM - VmRSS before"
    except OSError:
        pass
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = call()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return result, max(0, after - before) * 1024, "ru_maxrss rise (lower bound)"


def child_rss_peak(backend, method, rows, cols, seed, init):
    """(peak bytes, how) of one call in a fresh Python process, so that memory freed by earlier
    calls (and kept by the C allocator) does not hide the call's peak. The child builds the
    layer, warms the backend up on an 8-row layer, then measures one call with ``rss_peak``."""
    import subprocess
    cmd = [sys.executable, "-m", "hscale.bench.child", backend, method, str(rows),
           str(cols), str(seed), init]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"child failed: {done.stderr.strip().splitlines()[-1:]}"
    peak, _, how = done.stdout.strip().splitlines()[-1].partition(" ")
    return int(peak), how + ", fresh process"


def _child_memory(backend, method, rows, cols, seed, init):
    weight, h = make_layer(int(rows), int(cols), int(seed))
    if backend == "numpy":
        from hscale.reference import quantize as call
    else:
        from hscale.backends import get
        call = get(backend).quantize
    small_w, small_h = make_layer(8, int(cols), 1)
    # Warm-up: imports and lazy initialisation; for torch also the fused walk (its library built
    # on a cold cache, then loaded and checked), forced on for the small layer so that none of that
    # is counted below.
    saved = os.environ.get("HSCALE_TORCH_COMPILE")
    if saved is None:
        os.environ["HSCALE_TORCH_COMPILE"] = "1"
    try:
        call(small_w, small_h, method=method, init=init)
    finally:
        if saved is None:
            del os.environ["HSCALE_TORCH_COMPILE"]
    _, peak, how = rss_peak(lambda: call(weight, h, method=method, init=init))
    print(peak, how)


def _load_backends(names, out):
    """The available backends among ``names`` (built-in names or "module:factory"), each with
    the name it was asked by (the child process of the memory measurement gets it again)."""
    from hscale.backends import get
    backends = []
    for name in names:
        backend = get(name)
        ok, why = backend.available()
        if not ok:
            print(f"# skipping backend {name}: {why}", file=out)
            continue
        backend.spec_name = name
        backends.append(backend)
    return backends


def run(rows=4096, cols=4096, backends=("torch",), methods=("rtn", "hscale"), repeat=3,
        seed=0, init="maxabs", memory=True, out=None, progress=None):
    """Time the reference and ``backends`` on one layer; return a list of result dicts.
    ``out``: where the report goes (default: sys.stdout when called); ``progress(text)``, if
    given, is told each step before it starts."""
    from hscale.judge.findings import plural
    from hscale.reference import quantize as reference_quantize

    out = out or sys.stdout
    progress = progress or (lambda text: None)
    weight, h = make_layer(rows, cols, seed)
    size = rows * cols
    loaded = _load_backends(backends, out)
    results = []
    print(f"# layer {rows}x{cols} float32 (seed {seed}), init {init}, best of {repeat}; "
          f"torch threads: {_torch_threads()}; cpus: {os.cpu_count()}", file=out)
    for backend in loaded:
        print(f"# {backend.name}: {backend.version}", file=out)
    for method in methods:
        options = dict(method=method, init=init)

        def ref_call():
            return reference_quantize(weight, h, **options)

        compared = ", ".join(b.name for b in loaded) or "no backend"
        progress(f"{method}: timing the reference against {compared}, "
                 f"{plural(max(1, repeat), 'round')}")
        timings = {"numpy": []}
        for backend in loaded:
            backend.quantize(weight, h, **options)  # warm-up (imports, first allocations)
            timings[backend.name] = []
        expected = None
        for _ in range(max(1, repeat)):
            start = time.perf_counter()
            expected = ref_call()
            timings["numpy"].append(time.perf_counter() - start)
            for backend in loaded:
                start = time.perf_counter()
                got = backend.quantize(weight, h, **options)
                timings[backend.name].append(time.perf_counter() - start)
                mismatch = identical(expected, got)
                if mismatch:
                    timings[backend.name + ":mismatch"] = mismatch
        ref_best = min(timings["numpy"])
        peaks = {}
        if memory:
            progress(f"{method}: peak memory, one call per backend in a fresh process (most of "
                     "the run's time; --no-memory skips it)")
            _, peaks["numpy"] = traced_peak(ref_call)
            peaks["numpy:rss"], _ = child_rss_peak("numpy", method, rows, cols, seed, init)
            for backend in loaded:
                peak, how = child_rss_peak(backend.spec_name, method, rows, cols, seed, init)
                peaks[backend.name] = peak
                peaks[backend.name + ":how"] = how
        rows_out = [("numpy", None)] + [(b.name, b) for b in loaded]
        for name, backend in rows_out:
            best = min(timings[name])
            mismatch = timings.get(name + ":mismatch")
            result = {
                "method": method, "init": init, "backend": name, "rows": rows, "cols": cols,
                "seconds": best, "all_seconds": timings[name],
                "weights_per_s": size / best, "speedup": ref_best / best,
                "peak_bytes": peaks.get(name),
                "peak_measure": ("tracemalloc" if name == "numpy" else peaks.get(name + ":how")),
                "peak_rss_bytes": peaks.get(name + ":rss", peaks.get(name)),
                "identical": None if name == "numpy" else mismatch is None,
                "mismatch": mismatch,
            }
            results.append(result)
            _print_result(result, out)
    return results


def _torch_threads():
    try:
        import torch
        return torch.get_num_threads()
    except ImportError:
        return "n/a"


def _print_result(r, out):
    peak = ""
    if r["peak_bytes"] is not None:
        peak = f"  peak {r['peak_bytes'] / MiB:7.1f} MiB"
        if r["backend"] == "numpy" and r["peak_rss_bytes"] is not None:
            peak += f" traced, {r['peak_rss_bytes'] / MiB:7.1f} MiB RSS"
        else:
            peak += " RSS"
    same = {None: "reference", True: "bit-identical", False: f"MISMATCH: {r['mismatch']}"}
    print(f"{r['method']:10s} {r['backend']:10s} {r['seconds']:8.3f} s  "
          f"{r['weights_per_s'] / 1e6:9.2f} Mweights/s  x{r['speedup']:6.2f}{peak}  "
          f"{same[r['identical']]}", file=out)


def reference_peak_memory(rows=4096, cols=11008, method="hscale", seed=0, out=None):
    """Peak traced memory (bytes) of one reference call on a rows x cols layer."""
    from hscale.reference import quantize as reference_quantize
    out = out or sys.stdout
    weight, h = make_layer(rows, cols, seed)
    start = time.perf_counter()
    _, peak = traced_peak(lambda: reference_quantize(weight, h, method=method))
    seconds = time.perf_counter() - start
    print(f"# reference {method} {rows}x{cols}: peak traced memory {peak / MiB:.1f} MiB "
          f"({peak / (1 << 30):.3f} GiB; input {weight.nbytes / MiB:.1f} MiB not counted), "
          f"{seconds:.1f} s traced", file=out)
    return peak
