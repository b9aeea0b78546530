"""llama.cpp's importance matrix against the kit's own h on the same text (docs/quantize.md,
"llama.cpp importance matrices"; a maintainer script, not shipped, not run by CI).

    python tools/imatrix_compare.py --model MODEL.gguf --imatrix IMATRIX.gguf \\
        --text TEXT.txt --calibration-data DATA.jsonl --evaluation EVAL.txt --work DIR \\
        [--context 512] [--windows 8]

The imatrix is llama-imatrix's on ``--text`` with ``-c --context`` (the file ``--imatrix``);
``--calibration-data`` holds the same paragraphs as the text, one per record (the kit's usual
input). Three h for every quantized weight of the model:

* ``imatrix``: llama.cpp's sums of x^2 (HSCALE-CAL-3): llama.cpp's forward on the quantized
  GGUF weights (on the CPU its Q4_1 matmuls quantize activations to Q8_1 first), its tokens:
  the text tokenized whole and cut into chunks of ``--context`` tokens;
* ``same tokens``: the kit's collector (HSCALE-CAL-1) on exactly those chunks, the
  dequantized model in float32 through transformers: what differs from ``imatrix`` is the
  forward alone;
* ``kit``: ``hscale calibrate`` on ``--calibration-data`` (each paragraph its own sequence,
  truncated to ``--context``): what a kit user computes; it differs from ``same tokens`` by the
  segmentation of the text.

Each h is compared per weight after normalising it to sum 1 (H-Scale's choice does not depend
on h's scale): the relative L1 distance sum |a - b| / sum b, its median and worst weight. Then
each h quantizes the model with H-Scale (``hscale quantize --hessian`` / ``--imatrix``, RTN
beside): the share of scale bytes that differ, and on ``--windows`` windows of ``--context``
tokens of ``--evaluation`` the perplexity and the mean KL divergence from the original (the
original's float32 logits, each checkpoint decoded by the kit into the model), with RTN's
KL gap closed. Results go to DIR/results.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HSCALE = [sys.executable, "-m", "hscale.cli"]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def llama_tokens(model: Path, text: str) -> list[int]:
    """The text as llama.cpp tokenizes it for llama-imatrix (common_tokenize, specials
    added as the vocabulary says)."""
    import llama_cpp
    llm = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    try:
        return llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    finally:
        llm.close()


def same_token_h(directory: Path, chunks: list[list[int]], modules: list[str], out: Path):
    """The kit's collector (HSCALE-CAL-1) over the chunks, the model in float32."""
    import torch
    import transformers
    from hscale.calibration import collect_hessian_diag, save_hessians
    from hscale.models.loading import quiet_transformers
    with quiet_transformers():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32).eval()
    batches = [torch.tensor([chunk]) for chunk in chunks]
    h = collect_hessian_diag(model, batches, {m: model.get_submodule(m) for m in modules},
                             progress=False)
    save_hessians(out, h, {}, {"tokens": sum(map(len, chunks)), "from": "same tokens"})


def run(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def normalised(h: np.ndarray) -> np.ndarray:
    return np.asarray(h, np.float64) / float(np.sum(h))


def compare_h(a: dict, b: dict) -> dict:
    distances = {m: float(np.abs(normalised(a[m]) - normalised(b[m])).sum()) for m in a}
    values = np.array(list(distances.values()))
    worst = max(distances, key=distances.get)
    return {"median": float(np.median(values)), "mean": float(np.mean(values)),
            "max": float(values.max()), "worst": worst}


def byte_difference(a: Path, b: Path) -> float:
    from hscale.checkpoints import SafetensorsModel
    first, second = SafetensorsModel(a), SafetensorsModel(b)
    differ = total = 0
    for name in first.info:
        if name.endswith(".weight_scale"):
            x, y = first.array(name).view(np.uint8), second.array(name).view(np.uint8)
            differ += int(np.count_nonzero(x != y))
            total += x.size
    return differ / total


def evaluate(directory: Path, checkpoints: dict, text: str, context: int, windows: int,
             tokenizer) -> dict:
    """Perplexity and mean KL from the original on ``windows`` windows of ``context`` tokens
    (evenly spaced over the text), every model in float32."""
    import torch
    import transformers
    from hscale.evaluation.decoded import decoded_model
    from hscale.models.loading import quiet_transformers
    ids = tokenizer(text)["input_ids"]
    step = max(context, (len(ids) - context) // max(1, windows - 1))
    starts = [i * step for i in range(windows) if i * step + context <= len(ids)]
    batches = [torch.tensor([ids[s:s + context]]) for s in starts]
    with quiet_transformers():
        original = transformers.AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32).eval()
    with torch.no_grad():
        reference = [torch.log_softmax(original(b).logits[0, :-1].double(), -1) for b in batches]
    del original
    out = {}
    for name, checkpoint in {"original": None, **checkpoints}.items():
        model = None if checkpoint is None else decoded_model(directory, checkpoint).eval()
        nll, kl, count = 0.0, 0.0, 0
        with torch.no_grad():
            for batch, ref in zip(batches, reference):
                logp = ref if model is None else torch.log_softmax(
                    model(batch).logits[0, :-1].double(), -1)
                target = batch[0, 1:]
                nll -= float(logp[torch.arange(len(target)), target].sum())
                kl += float((ref.exp() * (ref - logp)).sum())
                count += len(target)
        out[name] = {"perplexity": float(np.exp(nll / count)), "kl": kl / count,
                     "tokens": count}
        log(f"  {name}: perplexity {out[name]['perplexity']:.3f}, KL {out[name]['kl']:.5f}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--imatrix", required=True, type=Path)
    parser.add_argument("--text", required=True, type=Path)
    parser.add_argument("--calibration-data", required=True, type=Path)
    parser.add_argument("--evaluation", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args(argv)
    from safetensors.numpy import load_file
    from hscale.calibration.imatrix import imatrix_statistics, read_imatrix
    from hscale.checkpoints import SafetensorsModel
    from hscale.checkpoints.from_gguf import write_model_directory
    from hscale.models.architecture import meta_model
    from hscale.models.inventory import inventory
    from hscale.quantize.plan import plan_layers
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    directory = work / "model"
    if not (directory / "config.json").is_file():
        log(f"reading {args.model} into {directory}")
        write_model_directory(args.model, directory)
    found = inventory(directory, meta_model(directory))
    plans = [p for p in plan_layers(SafetensorsModel(directory), found.matmuls(), ("lm_head",),
                                    found.tied) if p.quantize]
    modules = [p.module for p in plans]
    tokens = llama_tokens(args.model, args.text.read_text(encoding="utf-8"))
    chunks = [tokens[i:i + args.context]
              for i in range(0, len(tokens) - args.context + 1, args.context)]
    log(f"{len(tokens)} tokens by llama.cpp's tokenizer: {len(chunks)} chunks of {args.context}")
    files = {"same tokens": work / "h-same-tokens.safetensors", "kit": work / "h-kit.safetensors"}
    if not files["same tokens"].is_file():
        same_token_h(directory, chunks, modules, files["same tokens"])
    if not files["kit"].is_file():
        run([*HSCALE, "calibrate", str(directory), "--out", str(files["kit"]),
             "--calibration-data", str(args.calibration_data), "--samples", "100000",
             "--seq-len", str(args.context), "--quiet"])
    imatrix = read_imatrix(args.imatrix)
    stats = imatrix_statistics(imatrix, plans, found.model_type, found.blocks, found)
    h = {"imatrix": stats.h,
         **{k: {m[2:]: v for m, v in load_file(str(p)).items()} for k, p in files.items()}}
    results = {"tokens": {"llama.cpp": len(tokens), "chunks": len(chunks),
                          "imatrix counts": int(imatrix.chunks) * (imatrix.chunk_size or 0)},
               "h": {"imatrix vs same tokens": compare_h(h["imatrix"], h["same tokens"]),
                     "same tokens vs kit": compare_h(h["same tokens"], h["kit"]),
                     "imatrix vs kit": compare_h(h["imatrix"], h["kit"])}}
    checkpoints, seconds = {}, {}
    for name, options in {"RTN": ["--method", "rtn"],
                          "H-Scale, kit h": ["--hessian", str(files["kit"])],
                          "H-Scale, same-token h": ["--hessian", str(files["same tokens"])],
                          "H-Scale, imatrix h": ["--imatrix", str(args.imatrix)]}.items():
        out = work / name.replace(" ", "-").replace(",", "")
        if not (out / "config.json").is_file():
            seconds[name] = run([*HSCALE, "quantize", str(directory), "--out", str(out),
                                 "--no-keep-h", "--quiet", *options])
        checkpoints[name] = out
    pairs = [("H-Scale, imatrix h", "H-Scale, same-token h"),
             ("H-Scale, same-token h", "H-Scale, kit h"), ("H-Scale, imatrix h", "H-Scale, kit h"),
             ("RTN", "H-Scale, kit h"), ("RTN", "H-Scale, imatrix h")]
    results["scale bytes differing"] = {f"{a} / {b}": byte_difference(checkpoints[a],
                                                                     checkpoints[b])
                                        for a, b in pairs}
    import transformers
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    results["evaluation"] = evaluate(directory, checkpoints,
                                     args.evaluation.read_text(encoding="utf-8"), args.context,
                                     args.windows, tokenizer)
    results["seconds"] = seconds
    (work / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    evaluation = results["evaluation"]
    gap = evaluation["RTN"]["kl"]
    print("| h | perplexity | KL from the original | share of RTN's KL closed |")
    print("|---|---:|---:|---:|")
    for name, figures in evaluation.items():
        closed = "-" if name in ("original", "RTN") else f"{1 - figures['kl'] / gap:.1%}"
        print(f"| {name} | {figures['perplexity']:.3f} | {figures['kl']:.5f} | {closed} |")
    print(json.dumps({k: v for k, v in results.items() if k != "evaluation"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
