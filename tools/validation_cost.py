"""What validating a checkpoint before trusting it costs ``hscale check`` and ``hscale convert``
(issue 34), as same-run shares of their time, in one warm process:

* check: the whole ``check_checkpoint`` (file alone), the part spent reading and validating
  every header and the shard index (``SafetensorsModel``), and the part spent on the model the
  config declares (``declared_model``, ``architecture_problems``, ``unknown_tensors``);
* convert: the whole ``convert_checkpoint`` with the command's ``ConversionCheck``, and the part
  spent checking the source before writing and the output before committing it.

    python tools/validation_cost.py CKPT_DIR --to modelopt [--runs 5]

Each figure is the median of ``--runs`` runs after one warm-up run (imports done).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from hscale.cli.args import CommandParser


def timed(owner, name: str, spent: dict, key: str) -> None:
    """Wrap ``owner.name`` (a module's function, an object's method) so that its time is added
    to ``spent[key]``."""
    function = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - started
    setattr(owner, name, wrapper)


def main(argv=None) -> int:
    parser = CommandParser(prog="python tools/validation_cost.py", description=__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--to", required=True, choices=("compressed-tensors", "modelopt"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    import hscale.check as check
    import hscale.check.conversion as conversion
    import hscale.checkpoints.stored as stored
    from hscale.checkpoints.convert import convert_checkpoint
    spent: dict = defaultdict(float)
    timed(stored, "SafetensorsModel", spent, "headers and index")
    for name in ("declared_model", "architecture_problems", "unknown_tensors"):
        timed(check, name, spent, "the declared model")
    rows = defaultdict(list)
    with tempfile.TemporaryDirectory() as work:
        for run in range(args.runs + 1):
            spent.clear()
            started = time.perf_counter()
            check.check_checkpoint(args.checkpoint, backend=None)
            whole = time.perf_counter() - started
            if run:
                rows["check"].append(whole)
                for key in ("headers and index", "the declared model"):
                    rows[f"check: {key}"].append(spent[key])
            verifier = conversion.ConversionCheck()
            for name in ("source", "output"):
                timed(verifier, name, spent, f"check {name}")
            started = time.perf_counter()
            convert_checkpoint(args.checkpoint, Path(work) / f"out-{run}", to=args.to,
                               requantize=True, check=verifier)
            whole = time.perf_counter() - started
            if run:
                rows["convert"].append(whole)
                for name in ("source", "output"):
                    rows[f"convert: checking the {name}"].append(spent[f"check {name}"])
    for key, values in rows.items():
        total = statistics.median(rows[key.split(":")[0]])
        median = statistics.median(values)
        share = f"{100 * median / total:5.1f}%" if ":" in key else "      "
        print(f"{key:40} {median:8.3f} s  {share}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
