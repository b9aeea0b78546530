"""The checkpoint fuzzer: seeded mutations of the kit's own outputs of every layout
(compressed-tensors and ModelOpt, W4A16 and W4A4, one file and sharded, dense and MoE, MiniLM,
GGUF Qwen3 and Llama; tests/helpers/mutations/) through ``hscale check`` and ``hscale convert``:
no traceback, no hang, no "conforms" on a mutation that breaks the checkpoint (and no refusal of
a benign one), no exit-2 line that names no file, no change to the input, nothing left behind by
a failed conversion, and every conversion's output checking as its source did.

Every CI run puts each kind of mutation through both commands once (``test_each_kind``);
``pytest -m fuzz tests/checkpoints/test_checkpoint_fuzz.py`` runs the marker run, 1,000 seeded cases across
the bases (``HSCALE_CHECKPOINT_FUZZ=N`` for another count, ``HSCALE_CHECKPOINT_FUZZ_SEED`` for
another seed), whose figures docs/checkpoints.md records."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf", reason="GGUF needs the gguf package (the engines extra)")

from helpers.checkpoint_fuzz import make_case, plan, remove_case, run_case  # noqa: E402
from helpers.mutations import MUTATIONS, bases  # noqa: E402

CLAUSES = ("NVFP4-CKPT-5", "NVFP4-CKPT-6", "NVFP4-GGUF-2")
pytestmark = pytest.mark.clause(*CLAUSES)


@pytest.fixture(scope="module")
def made(checkpoints, tmp_path_factory) -> dict:
    return bases(tmp_path_factory.mktemp("bases"), checkpoints)


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_each_kind(made, kind, tmp_path):
    """One mutation of ``kind`` on a base it applies to (the bases taken in turn across the
    kinds), both commands' answers judged."""
    names = sorted(made)
    fitting = [made[n] for n in names if MUTATIONS[kind].applies(made[n])]
    assert fitting, f"{kind} applies to no base"
    index = sorted(MUTATIONS).index(kind)
    base = fitting[index % len(fitting)]
    case, target = make_case(index, base, kind, tmp_path)
    case = run_case(case, target, base, random.Random(index))
    assert not case.failures, (f"{kind} on {base.name} ({case.what}): {case.failures}; "
                               f"check said {case.check.out[-300:]}{case.check.err[-300:]}")


def test_every_base_is_a_valid_checkpoint(made, tmp_path):
    """The bases themselves conform and convert, so that every finding on a mutation is the
    mutation's."""
    from helpers.checkpoint_fuzz import convert_options, run_command
    for base in made.values():
        result = run_command(["check", base.path])
        assert result.code == 0, (base.name, result.out[-500:], result.err)
        out = tmp_path / f"{base.name}-converted"
        result = run_command(["convert", base.path, out] + convert_options(base.to))
        assert result.code == 0, (base.name, result.out[-500:], result.err)
        assert run_command(["check", out]).code == 0, base.name


@pytest.mark.fuzz
def test_seeded_mutations_at_scale(made, tmp_path):
    """HSCALE_CHECKPOINT_FUZZ (default 1,000) seeded cases, the bases in turn, each with a
    mutation drawn among those that apply to it; zero failures of any kind."""
    count = int(os.environ.get("HSCALE_CHECKPOINT_FUZZ", "1000"))
    seed = int(os.environ.get("HSCALE_CHECKPOINT_FUZZ_SEED", "2026"))
    started = time.perf_counter()
    tally: Counter = Counter()
    failed = []
    for done, (case_seed, base, kind) in enumerate(plan(count, seed, made), 1):
        case, target = make_case(case_seed, base, kind, tmp_path)
        case = run_case(case, target, base, random.Random(case_seed))
        remove_case(target)
        tally[("case", "breaks" if case.breaks else "benign")] += 1
        tally[("base", base.name)] += 1
        tally[("kind", kind)] += 1
        tally[("check", str(case.check.code))] += 1
        tally[("convert", str(case.convert.code))] += 1
        if case.failures:
            failed.append((case.seed, base.name, kind, case.what, case.failures))
        if done % 50 == 0 or done == count:
            elapsed = time.perf_counter() - started
            print(f"checkpoint fuzz: {done}/{count} cases, {len(failed)} failed, "
                  f"{elapsed:.0f} s, about {elapsed / done * (count - done):.0f} s left",
                  file=sys.__stderr__, flush=True)
    summary = {"cases": count, "seed": seed, "seconds": round(time.perf_counter() - started),
               "failed": len(failed),
               "failures": {kind: sum(1 for f in failed if kind in " ".join(f[4]))
                            for kind in ("traceback", "no answer", "'conforms'",
                                         "converted a broken", "refused a valid",
                                         "the input changed", "left", "naming no file")},
               **{group: {k: n for (g, k), n in sorted(tally.items()) if g == group}
                  for group in ("case", "base", "kind", "check", "convert")}}
    report = os.environ.get("HSCALE_CHECKPOINT_FUZZ_REPORT")
    if report:
        with open(report, "w") as out:
            json.dump(summary, out, indent=1)
    print(json.dumps(summary, indent=1), file=sys.__stderr__, flush=True)
    assert not failed, failed[:5]
