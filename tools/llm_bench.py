"""Benchmarks of ``hscale quantize`` on synthetic LLM shapes (figures for docs/performance.md and
docs/quantize.md; a maintainer script, never run by the test suite or CI).

    python tools/llm_bench.py write  --preset llama8b  --out DIR [--layers N]
    python tools/llm_bench.py run    MODEL --out OUT [-- hscale quantize options...]
    python tools/llm_bench.py check  CKPT --original MODEL [-- hscale check options...]
    python tools/llm_bench.py logits MODEL CKPT [--texts 4]
    python tools/llm_bench.py pair   MODEL --out DIR [--repeat 2] [-- hscale quantize options...]

``write``: a seeded synthetic decoder of a preset shape (``llama8b``: Meta-Llama-3-8B's, 32
blocks, 16.06 GB bfloat16; ``qwen3moe``: Qwen3-30B-A3B's blocks with 64 experts, top 8),
written tensor by tensor (``hscale.checkpoints.synthetic``); ``--layers N`` keeps the first N
blocks (the same values: a tensor's depend only on its name and the seed).

``run`` / ``check``: the command in a fresh process, as a user runs it; wall time and peak
resident memory (the child's own VmHWM, ``hscale.bench.peak``: the interpreter, torch and
transformers included; not wait4's ``ru_maxrss``, which counts this process's size at the fork),
the phases from the quantization report; one JSON line on stdout.

``pair``: RTN (``--method rtn``) and H-Scale (the default method, calibration included) in
turn, ``--repeat`` times each, every run a fresh process of ``run``'s kind on the same machine in
the same minutes: the same-run ratio of their wall times, and each run's phases and peak RSS
(the figures of docs/performance.md, "H-Scale against RTN on a real decoder"). MODEL is a
Hugging Face directory: a GGUF model is written as one first
(``hscale.checkpoints.from_gguf.write_model_directory``, as tools/imatrix_compare.py does), so
that reading the GGUF file is timed in neither run.

``logits``: the model's logits on the first ``--texts`` bundled texts (byte tokens), the
original's against the checkpoint decoded by the kit (NVFP4-DEQ-1, experts put into their
fused parameters), both run block by block (one block in memory): cosine, max |difference|.
transformers' own compressed-tensors loading is not used for MoE checkpoints: it drops each
expert's global scale (transformers#48371).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def run_child(argv: list[str]) -> dict:
    """Wall time (s), peak RSS (MiB) and return code of ``argv`` in a fresh process; its
    output goes to this process's stderr."""
    from hscale.bench.peak import measured_run
    return measured_run(argv, stdout=sys.stderr, stderr=sys.stderr)


def write(args) -> dict:
    from hscale.checkpoints.synthetic import write_synthetic_model
    from hscale.models.synthetic import preset_config
    overrides = {"num_hidden_layers": args.layers} if args.layers else {}
    started = time.perf_counter()
    facts = write_synthetic_model(args.out, preset_config(args.preset, **overrides),
                                  seed=args.seed, log=lambda line: print(line, file=sys.stderr))
    import resource
    facts.update(wall=round(time.perf_counter() - started, 1),
                 peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    return facts


def run(args, rest) -> dict:
    argv = [sys.executable, "-m", "hscale", "quantize", args.model, "--out", args.out,
            "--force", *rest]
    result = run_child(argv)
    report = Path(args.out) / "quantization_report.json"
    if result["returncode"] == 0 and report.is_file():
        document = json.loads(report.read_text())
        result.update(seconds_phases=document["seconds"], summary={
            k: v for k, v in document["summary"].items() if k != "shifts"},
            calibration=document["calibration"], layers=len(document["layers"]),
            request={k: document["request"][k] for k in ("pipeline", "method", "backend")})
    result["argv"] = argv[2:]
    return result


def pair(args, rest) -> dict:
    """RTN and H-Scale in turn (``run``), ``--repeat`` times, each writing under ``--out`` (a
    directory, made if missing); the wall-time ratios and their median."""
    Path(args.out).mkdir(parents=True, exist_ok=True)
    runs = []
    for attempt in range(args.repeat):
        for method in ("rtn", "hscale"):
            one = argparse.Namespace(model=args.model, out=str(Path(args.out) / method))
            result = run(one, [*rest, "--method", method])
            result.update(method=method, attempt=attempt)
            print(json.dumps(result), file=sys.stderr, flush=True)
            runs.append(result)
    by = {m: [r["seconds"] for r in runs if r["method"] == m] for m in ("rtn", "hscale")}
    ratios = [h / r for r, h in zip(by["rtn"], by["hscale"])]
    return {"runs": runs, "ratios": ratios, "ratio_median": statistics.median(ratios),
            "returncode": max(r["returncode"] for r in runs)}


def check(args, rest) -> dict:
    argv = [sys.executable, "-m", "hscale", "check", args.checkpoint, "--original",
            args.original, "--json", str(Path(args.checkpoint).parent / "check.json"), *rest]
    result = run_child(argv)
    document = json.loads((Path(args.checkpoint).parent / "check.json").read_text())
    result.update(conforms=document["conforms"], totals={
        k: document["totals"][k] for k in ("layers", "verdicts", "findings", "consistency")},
        check_seconds=round(document["seconds"], 1), argv=argv[2:])
    return result


def logits(args) -> dict:
    import torch
    from hscale.calibration import calibration_texts
    from hscale.checkpoints import SafetensorsModel
    from hscale.evaluation.decoded import DecodedSource, sequential_logits
    from hscale.models.synthetic import ByteTokenizer
    torch.set_num_threads(os.cpu_count() or 1)
    texts = calibration_texts()[:args.texts]
    batch = ByteTokenizer(1 << 20)(texts, max_length=args.seq_len)
    mask = batch["attention_mask"].bool()
    started = time.perf_counter()
    original = sequential_logits(args.model, SafetensorsModel(args.model), batch["input_ids"],
                                 batch["attention_mask"])[mask]
    decoded = sequential_logits(args.model, DecodedSource(args.model, args.checkpoint),
                                batch["input_ids"], batch["attention_mask"])[mask]
    cosine = torch.nn.functional.cosine_similarity(original.double(), decoded.double(), dim=-1)
    return {"tokens": int(mask.sum()), "finite": bool(torch.isfinite(decoded).all()),
            "cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min()),
            "max_abs_diff": float((original - decoded).abs().max()),
            "max_abs_logit": float(original.abs().max()),
            "top1_agreement": float((original.argmax(-1) == decoded.argmax(-1)).double().mean()),
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = []
    if "--" in argv:
        rest = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    w = commands.add_parser("write")
    w.add_argument("--preset", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--layers", type=int)
    w.add_argument("--seed", type=int, default=0)
    r = commands.add_parser("run")
    r.add_argument("model")
    r.add_argument("--out", required=True)
    c = commands.add_parser("check")
    c.add_argument("checkpoint")
    c.add_argument("--original", required=True)
    p = commands.add_parser("pair")
    p.add_argument("model")
    p.add_argument("--out", required=True)
    p.add_argument("--repeat", type=int, default=2)
    g = commands.add_parser("logits")
    g.add_argument("model")
    g.add_argument("checkpoint")
    g.add_argument("--texts", type=int, default=4)
    g.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args(argv)
    result = {"write": lambda: write(args), "run": lambda: run(args, rest),
              "check": lambda: check(args, rest), "logits": lambda: logits(args),
              "pair": lambda: pair(args, rest)}[args.command]()
    print(json.dumps({"command": args.command, **result}))
    return 0 if result.get("returncode", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
