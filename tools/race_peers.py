"""What a user runs instead of ``hscale quantize``, each as its own documentation shows it, for
the end-to-end races of tools/quantize_race.py (one side of a pair, in a fresh process):

    python tools/race_peers.py llmcompressor MODEL OUT   # oneshot(scheme="NVFP4A16")
    python tools/race_peers.py modelopt MODEL OUT        # mtq.quantize W4A16 NVFP4, export

``llmcompressor``: llm-compressor's NVFP4A16 example (examples/quantization_w4a16_fp4): the
model loaded by transformers in its stored dtype, ``oneshot`` with a ``QuantizationModifier``
(targets Linear, scheme NVFP4A16, ignore lm_head; no calibration data: the scheme is
weight-only), then ``save_pretrained(save_compressed=True)`` and the tokenizer: a
compressed-tensors NVFP4 checkpoint, as ``hscale quantize --format compressed-tensors`` writes.

``modelopt``: ModelOpt's weight-only NVFP4 (its own ``W4A16_NVFP4_CFG``), ``mtq.quantize``
with no forward loop (weight amax needs none), ``export_hf_checkpoint``. Where it fails on a
CPU the error is printed and the exit status is 3, which the race reports as "does not run
here" (ModelOpt 0.47 ran on this CPU: 2026-11-28).
"""

from __future__ import annotations

import sys
import time


def llmcompressor(model_dir: str, out: str) -> None:
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    loaded = time.perf_counter()
    recipe = QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=["lm_head"])
    oneshot(model=model, recipe=recipe)
    quantized = time.perf_counter()
    model.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)
    print(f"race-phases load {loaded - started:.2f} quantize {quantized - loaded:.2f} "
          f"save {time.perf_counter() - quantized:.2f}", file=sys.stderr)


def modelopt(model_dir: str, out: str) -> None:
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    loaded = time.perf_counter()
    try:
        mtq.quantize(model, mtq.W4A16_NVFP4_CFG, forward_loop=None)
        quantized = time.perf_counter()
        export_hf_checkpoint(model, export_dir=out)
    except Exception as exc:  # noqa: BLE001 - the race says why it does not run here
        print(f"race-unsupported {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
              file=sys.stderr)
        raise SystemExit(3)
    print(f"race-phases load {loaded - started:.2f} quantize {quantized - loaded:.2f} "
          f"save {time.perf_counter() - quantized:.2f}", file=sys.stderr)


if __name__ == "__main__":
    tool, model_dir, out = sys.argv[1:4]
    {"llmcompressor": llmcompressor, "modelopt": modelopt}[tool](model_dir, out)
