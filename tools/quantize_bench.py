"""Benchmarks of ``hscale quantize`` (figures for docs/performance.md; not timed tests).

``python tools/quantize_bench.py bundled``: the bundled all-MiniLM-L6-v2 end to end, each
pipeline with its baseline (method rtn) and with H-Scale, every run a fresh process (imports,
calibration, quantization and writing counted, as a user waits for them); wall time and peak
resident memory of each. The same again with calibration done once by ``hscale calibrate`` and
read with ``--hessian``, which isolates what the H-Scale search itself adds.

``python tools/quantize_bench.py streaming --gib 4``: a synthetic Llama-shaped bfloat16
checkpoint of that size in 1 GiB shards (seeded random weights, written tensor by tensor), then
the RTN path on it in a fresh process: peak resident memory against the checkpoint's size.

Peak memory is the child's ``ru_maxrss`` (``os.wait4``), which includes the Python interpreter,
numpy, torch and transformers themselves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GiB = 1 << 30


def run_child(code: str) -> dict:
    """Wall time (s) and peak RSS (bytes) of ``python -c code`` in a fresh process."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    stdout, stderr = process.stdout.read(), process.stderr.read()
    if status != 0:
        raise RuntimeError(f"child failed ({status}): {stderr.strip().splitlines()[-3:]}")
    return {"seconds": seconds, "peak_rss_bytes": usage.ru_maxrss * 1024, "stdout": stdout}


def _quantize_code(out: str, **options) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in options.items())
    return ("import json; from hscale.quantize import quantize_model; "
            f"r = quantize_model(out={out!r}, force=True, progress=False, {args}); "
            "print(json.dumps({'seconds': r.seconds, 'summary': r.summary}))")


def bundled(work: Path, backend: str, out=sys.stdout) -> list[dict]:
    rows = []
    hessian = work / "h.safetensors"
    calibrate = run_child(
        "from hscale.quantize import QuantizeRequest, calibrate, model_directory, plan_layers; "
        "from hscale.models import architecture_linears; "
        "from hscale.calibration import save_hessians; "
        "from hscale.checkpoints import SafetensorsModel; "
        "r = QuantizeRequest(progress=False); d = model_directory(r); "
        "plans = plan_layers(SafetensorsModel(d), architecture_linears(d), r.ignore); "
        "h, H, facts = calibrate(d, [p.module for p in plans if p.quantize], r, True); "
        f"save_hessians({str(hessian)!r}, h, H, facts)")
    print(f"# hscale calibrate (full H), a fresh process: {calibrate['seconds']:.1f} s, peak "
          f"RSS {calibrate['peak_rss_bytes'] / 2**20:.0f} MiB", file=out, flush=True)
    for pipeline in ("rtn", "4over6", "gptq"):
        for with_file in (False, True):
            for method in ("rtn", "hscale"):
                options = dict(pipeline=pipeline, method=method, backend=backend)
                if with_file:
                    options["hessian"] = str(hessian)
                elif pipeline == "gptq" or method == "hscale":
                    pass  # calibrates itself
                result = run_child(_quantize_code(str(work / "out"), **options))
                inner = json.loads(result["stdout"].strip().splitlines()[-1])
                row = {"pipeline": pipeline, "method": method, "hessian_file": with_file,
                       "seconds": result["seconds"], "peak_rss_bytes": result["peak_rss_bytes"],
                       "phases": inner["seconds"], "summary": inner["summary"]}
                rows.append(row)
                print(f"{pipeline:7s} {method:7s} {'--hessian' if with_file else 'calibrates':10s}"
                      f" {row['seconds']:7.1f} s  peak RSS {row['peak_rss_bytes'] / 2**20:7.0f}"
                      f" MiB  output error vs RTN {inner['summary']['output_error_vs_rtn']}",
                      file=out, flush=True)
            base, hscale = rows[-2]["seconds"], rows[-1]["seconds"]
            print(f"#   {pipeline}{' --hessian' if with_file else ''}: H-Scale / baseline end to "
                  f"end x{hscale / base:.2f}", file=out, flush=True)
    return rows


def synthetic_checkpoint(directory: Path, gib: float, seed: int = 0) -> int:
    """A Llama-shaped bfloat16 checkpoint of about ``gib`` GiB (hidden 4096, intermediate 11008,
    as many layers as it takes), random weights, written tensor by tensor; returns its bytes."""
    import ml_dtypes
    import torch
    import transformers

    from hscale.checkpoints import ShardWriter, TensorInfo
    per_layer = (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) * 2
    embeddings = 2 * 32000 * 4096 * 2
    layers = max(1, math.ceil((gib * GiB - embeddings) / per_layer))
    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008,
                                      num_hidden_layers=layers, num_attention_heads=32,
                                      num_key_value_heads=32, vocab_size=32000,
                                      tie_word_embeddings=False)
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    infos = [TensorInfo(name, "BF16", tuple(p.shape)) for name, p in model.state_dict().items()]
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    writer = ShardWriter(directory, infos, GiB)
    rng = np.random.default_rng(seed)
    for info in infos:
        # random sign and mantissa, exponent 2^-9 .. 2^-6: weight-like magnitudes, made from
        # integers (a normal draw of 2 billion values is what would take the time here)
        raw = rng.integers(0, 1 << 16, size=info.shape, dtype=np.uint16)
        bits = (raw & 0x807F) | ((118 + (raw >> 7) % 4) << 7).astype(np.uint16)
        writer.write(info.name, bits.view(ml_dtypes.bfloat16))
    writer.close()
    return sum(i.nbytes for i in infos)


def streaming(work: Path, gib: float, backend: str, out=sys.stdout) -> dict:
    source = work / "synthetic"
    start = time.perf_counter()
    size = synthetic_checkpoint(source, gib)
    print(f"# synthetic checkpoint: {size / GiB:.2f} GiB in "
          f"{len(list(source.glob('*.safetensors')))} shards, written in "
          f"{time.perf_counter() - start:.0f} s", file=out, flush=True)
    result = run_child(_quantize_code(str(work / "out"), model_dir=str(source), pipeline="rtn",
                                      method="rtn", backend=backend))
    written = sum(p.stat().st_size for p in (work / "out").glob("*.safetensors"))
    row = {"checkpoint_bytes": size, "seconds": result["seconds"],
           "peak_rss_bytes": result["peak_rss_bytes"], "output_bytes": written,
           "weights_per_s": size / 2 / result["seconds"]}
    print(f"streaming RTN ({backend}): {row['seconds']:.0f} s, peak RSS "
          f"{row['peak_rss_bytes'] / GiB:.2f} GiB for a {size / GiB:.2f} GiB checkpoint "
          f"(output {written / GiB:.2f} GiB)", file=out, flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/quantize_bench.py",
                                     description="Benchmarks of hscale quantize.")
    parser.add_argument("what", choices=("bundled", "streaming"))
    parser.add_argument("--gib", type=float, default=4.0, help="streaming: checkpoint size")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        work = Path(scratch)
        result = (bundled(work, args.backend) if args.what == "bundled"
                  else streaming(work, args.gib, args.backend))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
