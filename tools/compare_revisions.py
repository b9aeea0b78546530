"""Two revisions of the kit timed against each other in one run (docs/performance.md): the
reference, the torch backend and ``hscale quantize`` on the bundled model, each measurement a
fresh process of the revision's own interpreter, the two revisions interleaved round by round
so that a change in the machine's load hits both alike. Prints every round, then per
measurement the median of each revision and their ratio (new / old: above 1 is slower).

    python tools/compare_revisions.py --old /path/to/old/python --new /path/to/new/python \
        [--rounds 5] [--json FILE]

Each interpreter must import its revision as ``hscale`` (an installed wheel, an editable
install, or a venv whose ``hscale`` points at a worktree of the revision).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: What each measurement runs in the child; it prints the seconds it timed (a call, or the
#: whole command as the user waits for it).
MEASUREMENTS = {
    "reference hscale 512x4096": """
import time
from hscale.bench import make_layer
from hscale.reference import quantize
w, h = make_layer(512, 4096, 0)
quantize(w[:16], h, method="hscale")
start = time.perf_counter(); quantize(w, h, method="hscale"); print(time.perf_counter() - start)
""",
    "torch hscale 4096x4096 (median of 3)": """
import statistics, time
from hscale.backends import get
from hscale.bench import make_layer
w, h = make_layer(4096, 4096, 0)
backend = get("torch")
backend.quantize(w, h, method="hscale")
times = []
for _ in range(3):
    start = time.perf_counter(); backend.quantize(w, h, method="hscale")
    times.append(time.perf_counter() - start)
print(statistics.median(times))
""",
}
#: ``hscale quantize`` on the bundled MiniLM, end to end as a user runs it (calibration, the
#: H-Scale search on the default backend, writing, the held-out embedding check).
QUANTIZE = ["-m", "hscale", "quantize", "--quiet", "--force"]


def run_child(python: str, code: str | None, work: Path) -> float:
    if code is None:
        start = time.perf_counter()
        done = subprocess.run([python, *QUANTIZE, "--out", str(work / "out")], cwd=work,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
    else:
        done = subprocess.run([python, "-c", code], cwd=work, capture_output=True, text=True)
        seconds = float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0.0
    if done.returncode != 0:
        raise SystemExit(f"{python}: failed:\n{done.stderr[-2000:]}")
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/compare_revisions.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the old revision's python")
    parser.add_argument("--new", required=True, help="the new revision's python")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    names = list(MEASUREMENTS) + ["hscale quantize, bundled MiniLM (end to end)"]
    times = {name: {"old": [], "new": []} for name in names}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for round_ in range(1, args.rounds + 1):
            # alternate which revision goes first, so neither always meets a warmer machine
            order = ("old", "new") if round_ % 2 else ("new", "old")
            for name in names:
                for side in order:
                    python = args.old if side == "old" else args.new
                    seconds = run_child(python, MEASUREMENTS.get(name), work)
                    times[name][side].append(seconds)
                print(f"round {round_}: {name}: old {times[name]['old'][-1]:.3f} s, new "
                      f"{times[name]['new'][-1]:.3f} s", flush=True)
    print()
    summary = {}
    for name in names:
        old, new = (statistics.median(times[name][s]) for s in ("old", "new"))
        summary[name] = {"old_median_s": old, "new_median_s": new, "ratio": new / old,
                         "old_s": times[name]["old"], "new_s": times[name]["new"]}
        print(f"{name}: old {old:.3f} s, new {new:.3f} s (median of {args.rounds}); "
              f"new / old = {new / old:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
