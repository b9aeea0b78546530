"""W4A4 emulated on the CPU against W4A16 and float32 (docs/checkpoints.md, "W4A4").

    python tools/w4a4_emulation.py [--samples N]

Quantizes two small models with ``hscale quantize`` (RTN weights, so that the figures isolate
the scheme), once ``--scheme w4a16`` and once ``--scheme w4a4``, and compares the outputs:

* **fp32**: the source model;
* **W4A16**: every quantized weight replaced by its NVFP4 decoding (NVFP4-DEQ-1), activations
  kept in float32;
* **W4A4**: the W4A4 checkpoint's decoded weights, and every quantized Linear's input run through
  the engines' run-time activation profile (NVFP4-ACT-1 .. -4, ``hscale.reference.activations``)
  with the activation scale the checkpoint stores (``input_global_scale`` / ``input_scale``).

Models: the seeded tiny Llama of the tests (``tests/helpers/llm_families.py``; logits on seeded random
tokens: cosine to fp32, relative Frobenius error, top-1 agreement) and the bundled MiniLM
(sentence embeddings of the held-out texts: mean and min cosine to fp32). Everything is seeded:
the figures repeat exactly on the same library versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from hscale.evaluation.activations import activation_hooks

ROOT = Path(__file__).resolve().parents[1]


def _quantize(source, out: Path, scheme: str, samples: int) -> Path:
    from hscale.quantize import quantize_model
    quantize_model(model_dir=None if source is None else str(source), out=str(out),
                   pipeline="rtn", method="rtn", scheme=scheme, samples=samples,
                   progress=False)
    return out


def decoder_figures(source: Path, w4a16: Path, w4a4: Path) -> dict:
    import torch
    import transformers
    from hscale.evaluation.decoded import decoded_model
    from hscale.models.loading import quiet_transformers
    ids = torch.randint(3, 259, (2, 40), generator=torch.Generator().manual_seed(0))
    with quiet_transformers():
        base = transformers.AutoModelForCausalLM.from_pretrained(
            source, dtype=torch.float32).eval()

    def logits(model):
        with torch.no_grad():
            return model(ids).logits.double()
    reference = logits(base)
    emulated = decoded_model(source, w4a4)
    handles, _ = activation_hooks(emulated, w4a4)
    try:
        outputs = {"w4a16": logits(decoded_model(source, w4a16)), "w4a4": logits(emulated)}
    finally:
        for handle in handles:
            handle.remove()
    figures = {"tokens": int(ids.numel())}
    for name, value in outputs.items():
        figures[name] = {
            "logit_cosine": float(torch.nn.functional.cosine_similarity(
                value.flatten(), reference.flatten(), dim=0)),
            "relative_error": float((value - reference).norm() / reference.norm()),
            "top1_agreement": float((value.argmax(-1) == reference.argmax(-1)).double().mean())}
    return figures


def minilm_figures(w4a16: Path, w4a4: Path) -> dict:
    from hscale.calibration import heldout_texts
    from hscale.checkpoints import checkpoint_weights
    from hscale.evaluation.decoded import decoded_model
    from hscale.evaluation.embeddings import EmbeddingProbe, cosine_stats
    from hscale.models import minilm_model_dir
    source = minilm_model_dir()
    probe = EmbeddingProbe(source, heldout_texts())
    figures = {"texts": len(probe.texts),
               "w4a16": probe.cosine(checkpoint_weights(w4a16))}
    model = decoded_model(source, w4a4)
    handles, _ = activation_hooks(model, w4a4)
    try:
        figures["w4a4"] = cosine_stats(probe.base, probe.embeddings(model))
    finally:
        for handle in handles:
            handle.remove()
    return figures


def measure(root: Path, samples: int = 64) -> dict:
    """The figures of both models, their checkpoints written under ``root``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_families import written
    llama = written(root, "llama")
    result = {"decoder (tiny llama, logits)": decoder_figures(
        llama, _quantize(llama, root / "llama-w4a16", "w4a16", samples),
        _quantize(llama, root / "llama-w4a4", "w4a4", samples))}
    result["MiniLM (sentence embeddings)"] = minilm_figures(
        _quantize(None, root / "minilm-w4a16", "w4a16", samples),
        _quantize(None, root / "minilm-w4a4", "w4a4", samples))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=64, help="calibration texts (default 64)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        print(json.dumps(measure(Path(directory), args.samples), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
