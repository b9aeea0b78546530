"""The checkpoint fuzzer: a mutated checkpoint (tests/helpers/mutations/) run through
``hscale check`` and ``hscale convert``, and every way their answers fall short.

Both commands run in this process (``hscale.cli.main``, imports warm), a hang cut by SIGALRM.
``judge`` names what went wrong: a traceback, a hang, "conforms" on a broken checkpoint (or a
valid one refused), an exit-2 line that names no file of the checkpoint, an exit-1 answer
without its verdict or with a flood of findings, a changed input, a failed conversion that left
something behind, a conversion whose output does not check as its source.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from helpers.cli import TIMEOUT_S, Run
from helpers.cli import hscale_here as run_command
from helpers.mutations import MUTATIONS, Base

#: The most lines of findings one mutation may print (a defect is named, not listed a
#: thousand times).
MOST_FINDING_LINES = 40


def snapshot(path: Path) -> dict:
    """What is at ``path`` (a file or a directory tree): each entry's kind and, for regular
    files, a hash of its bytes; nothing that is not a regular file is opened."""
    out = {}
    entries = [path] + (sorted(path.rglob("*")) if path.is_dir() and not path.is_symlink()
                        else [])
    for entry in entries:
        mode = os.lstat(entry).st_mode
        key = str(entry.relative_to(path.parent))
        if stat.S_ISREG(mode):
            out[key] = ("file", hashlib.sha256(entry.read_bytes()).hexdigest())
        elif stat.S_ISLNK(mode):
            out[key] = ("link", os.readlink(entry))
        else:
            out[key] = ("other", stat.S_IFMT(mode))
    return out


@dataclass
class Case:
    seed: int
    base: str
    kind: str
    breaks: bool
    what: str = ""
    check: Run | None = None
    convert: Run | None = None
    to: str = ""
    failures: list = field(default_factory=list)


def make_case(seed: int, base: Base, kind: str, root: Path) -> tuple[Case, Path]:
    """A copy of ``base`` under ``root`` with mutation ``kind`` applied by ``Random(seed)``."""
    rng = random.Random(seed)
    target = root / f"case-{seed}-{base.name}-{kind}"
    if base.path.is_dir():
        shutil.copytree(base.path, target)
    else:
        target = target.with_suffix(".gguf")
        shutil.copy(base.path, target)
    mutation = MUTATIONS[kind]
    case = Case(seed, base.name, kind, mutation.breaks)
    case.what = mutation.apply(target, rng)
    return case, target


def run_case(case: Case, target: Path, base: Base, rng: random.Random) -> Case:
    """Both commands on the mutated checkpoint, and every way their answers fall short."""
    before = snapshot(target)
    case.check = run_command(["check", target])
    choices = [base.to] if not case.breaks else [base.to, "gguf"]
    case.to = rng.choice(choices)
    destination = target.parent / (f"out-{case.seed}" + (".gguf" if case.to == "gguf" else ""))
    case.convert = run_command(["convert", target, destination] + convert_options(case.to))
    case.failures = judge(case, target, destination, before)
    if destination.exists() and case.convert.code == 0 and not case.failures:
        written = run_command(["check", destination])
        if written.code != 0:
            case.failures.append(f"the converted output does not check as its source "
                                 f"({written.code}): {_last(written.out + written.err)}")
    _remove(destination)
    return case


def convert_options(to: str) -> list[str]:
    """``--to`` and, for compressed-tensors, ``--requantize``: a ModelOpt multiplier that no
    fp32 reciprocal reads back as (17% of them, NVFP4-GS-4) is requantized and reported, not
    refused."""
    return ["--to", to] + (["--requantize"] if to == "compressed-tensors" else [])


def judge(case: Case, target: Path, destination: Path, before: dict) -> list[str]:
    failures = []
    for command, run in (("check", case.check), ("convert", case.convert)):
        if run.code == "traceback":
            failures.append(f"{command}: traceback: {run.trace.strip().splitlines()[-1]}")
            continue
        if run.code == "hang":
            failures.append(f"{command}: no answer in {TIMEOUT_S} s")
            continue
        if "Traceback" in run.err or "Traceback" in run.out:
            failures.append(f"{command}: printed a traceback")
        if run.code == 2:
            lines = [line for line in run.err.splitlines() if line.strip()]
            if len(lines) != 1 or not lines[0].startswith(f"hscale {command}: "):
                failures.append(f"{command}: exit 2 without one line on stderr: {run.err!r}")
            elif str(target) not in lines[0] and str(destination) not in lines[0]:
                failures.append(f"{command}: exit 2 naming no file of the checkpoint: "
                                f"{lines[0]}")
        elif run.code == 1 and command == "check":
            if not run.out.rstrip().splitlines()[-1].startswith("does not conform"):
                failures.append("check: exit 1 without 'does not conform'")
            findings = run.out.split("\nfindings (", 1)[-1].split("\n\n", 1)[0]
            if findings.count("\n") > MOST_FINDING_LINES:
                failures.append(f"check: {findings.count(chr(10))} lines of findings for one "
                                "mutation")
        elif run.code not in (0, 1, 2) or (run.code == 1 and command == "convert"):
            failures.append(f"{command}: exit code {run.code!r}")
    if case.breaks:
        if case.check.code == 0:
            failures.append(f"check: 'conforms' on a broken checkpoint ({case.what})")
        if case.convert.code == 0 and not MUTATIONS[case.kind].repaired_by_convert:
            failures.append(f"convert: converted a broken checkpoint ({case.what})")
    else:
        if case.check.code != 0:
            failures.append(f"check: refused a valid checkpoint ({case.what}): "
                            f"{_last(case.check.out + case.check.err)}")
        if case.convert.code != 0:
            failures.append(f"convert: refused a valid checkpoint ({case.what}): "
                            f"{_last(case.convert.out + case.convert.err)}")
    if snapshot(target) != before:
        failures.append("the input changed")
    if case.convert.code != 0:
        left = [p.name for p in destination.parent.iterdir()
                if p.name == destination.name or p.name.startswith(f".{destination.name}.")]
        if left:
            failures.append(f"convert failed but left {left}")
    return failures


def _last(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def remove_case(target: Path) -> None:
    _remove(target)


def plan(count: int, seed: int, made: dict) -> list[tuple[int, Base, str]]:
    """``count`` (seed, base, kind) triples: bases in turn, each with a mutation chosen by the
    seed among those that apply to it (so every base is mutated and every kind is drawn)."""
    names = sorted(made)
    out = []
    for i in range(count):
        base = made[names[i % len(names)]]
        kinds = sorted(k for k, m in MUTATIONS.items() if m.applies(base))
        rng = random.Random(seed * 1_000_003 + i)
        out.append((seed * 1_000_003 + i, base, rng.choice(kinds)))
    return out


def every_kind_once(made: dict) -> list[tuple[int, Base, str]]:
    """Each mutation kind on one base it applies to (bases in turn), seeds fixed."""
    names = sorted(made)
    out = []
    for i, (kind, mutation) in enumerate(sorted(MUTATIONS.items())):
        fitting = [made[n] for n in names if mutation.applies(made[n])]
        out.append((i, fitting[i % len(fitting)], kind))
    return out
