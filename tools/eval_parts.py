"""CPU seconds of the parts of ``hscale eval``'s window loop when llama.cpp runs the GGUF files
(issue 42; figures for docs/performance.md; a maintainer script, never run by CI):

    LLAMA_CPP_LIB_PATH=LLAMA_BUILD/bin python tools/eval_parts.py MODEL.gguf ORIGINAL.gguf \\
        TEXT [--windows 2] [--threads 2]

Per window (context 512, the second half scored, as ``hscale eval --scored second-half`` and
llama-perplexity): the model's forward and the original's, each through the kit's own
``LlamaCppRunner.logits``, and the scoring against the original (``score_window``'s arithmetic)
on one torch thread, as ``hscale eval`` runs it, and on two, with the two results compared bit
for bit. CPU seconds (``time.process_time``: the process's threads together), so that the
other tenants of a shared machine count as little as they can; a loaded machine still adds the
time llama.cpp's threads spin at their barriers while the other is parked.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

CONTEXT = 512
FIRST = CONTEXT // 2
FIELDS = ("nll", "kl", "top1_agrees", "base_nll", "delta_p")


def cpu_seconds(function, *args):
    start = time.process_time()
    result = function(*args)
    return result, round(time.process_time() - start, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("original")
    parser.add_argument("text")
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    from hscale.evaluation import scores
    from hscale.evaluation.runners import LlamaCppRunner
    text = open(args.text, encoding="utf-8").read()
    figures, rows, targets = {"windows": args.windows, "threads": args.threads}, {}, {}
    for name, path in (("model", args.model), ("original", args.original)):
        runner, figures[f"{name} load"] = cpu_seconds(LlamaCppRunner, path, CONTEXT,
                                                      args.threads)
        figures["flash_attention"] = runner.facts["flash_attention"]
        tokens = runner.tokenize(text)  # SmolLM2 puts no BOS first
        figures[f"{name} forward per window"] = []
        for index in range(args.windows):
            ids = np.array(tokens[index * CONTEXT:(index + 1) * CONTEXT])
            logits, seconds = cpu_seconds(runner.logits, ids, FIRST)
            rows[name, index] = logits[:CONTEXT - 1 - FIRST]
            targets[index] = np.array(tokens[index * CONTEXT + 1:(index + 1) * CONTEXT])
            figures[f"{name} forward per window"].append(seconds)
        runner.close()
    alike = True
    for threads in (1, 2):
        torch.set_num_threads(threads)
        key = f"scoring on {threads} torch thread{'s' if threads > 1 else ''} per window"
        figures[key] = []
        for index in range(args.windows):
            got, seconds = cpu_seconds(scores._score_rows, torch, rows["model", index],
                                       targets[index], FIRST, rows["original", index])
            figures[key].append(seconds)
            if threads == 1:
                rows["scores", index] = got
            else:
                alike &= all(np.array_equal(getattr(got, f), getattr(rows["scores", index], f))
                             for f in FIELDS)
    figures["scores bit for bit alike on 1 and 2 threads"] = alike
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
