"""A command's wall time and peak resident memory, measured in its own process image.

``measured_run(argv)`` runs ``[python, "-m", MODULE, ARGS...]`` as
``python -m hscale.bench.peak FILE -m MODULE ARGS...``: this module runs MODULE as
``__main__`` in the same process (``runpy``, as ``python -m`` does) and, at exit, writes the
process's ``VmHWM`` (``/proc/self/status``: the high-water mark of the memory image made at
exec) to FILE.

Why not ``ru_maxrss`` from ``os.wait4``: Linux carries a forked child's high-water mark across
``exec``, and a forked child starts with its parent's resident pages, so ``ru_maxrss`` reports
at least the parent's resident size at the fork. A benchmark whose parent holds a model (the
real-decoder table keeps the original's logits and runner) then reports the parent's size for
every command it runs (tests/tools/test_bench_peak.py shows both).
"""

from __future__ import annotations

import atexit
import os
import runpy
import subprocess
import sys
import tempfile
import time


def vm_hwm_kib() -> int | None:
    """This process's VmHWM in KiB, or None where /proc does not give it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def measured_run(argv: list[str], **popen) -> dict:
    """``{"seconds", "peak_rss_mib", "returncode"}`` of ``argv`` (``[python, "-m", module,
    ...]``) run in a fresh process; ``popen``: subprocess.Popen's options (its output). The
    peak is None where the process gave none (no /proc, or it did not exit through Python)."""
    if len(argv) < 3 or argv[1] != "-m":
        raise ValueError(f"measured_run takes [python, '-m', module, ...], not {argv[:3]}")
    handle, path = tempfile.mkstemp(prefix="hscale-peak-")
    os.close(handle)
    try:
        started = time.perf_counter()
        process = subprocess.Popen([argv[0], "-m", __name__, path, *argv[1:]], **popen)
        process.wait()
        seconds = time.perf_counter() - started
        with open(path) as recorded:
            text = recorded.read().strip()
    finally:
        os.unlink(path)
    return {"seconds": round(seconds, 1),
            "peak_rss_mib": round(int(text) / 1024) if text else None,
            "returncode": process.returncode}


def main() -> None:
    path, flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit(f"usage: python -m {__name__} FILE -m MODULE [ARGS...]")

    def record() -> None:
        peak = vm_hwm_kib()
        with open(path, "w") as out:
            out.write("" if peak is None else str(peak))
    atexit.register(record)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
