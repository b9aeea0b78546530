"""A real engine runs the output: llama.cpp, through llama-cpp-python built for the CPU, loads the
GGUF that ``hscale convert --to gguf`` writes from the seeded tiny decoder quantized with RTN and
with H-Scale, and its logits on the bundled held-out text are compared with transformers running
the dequantized checkpoint (NVFP4-GGUF-1, NVFP4-DEQ-1).

llama.cpp's CPU kernel for NVFP4 (``ggml_vec_dot_nvfp4_q8_0``) quantizes the activations to
Q8_0 first, so the engine is compared both with the dequantized model and with the dequantized
model whose quantized Linears see Q8_0 activations (ggml's x86 rule, written here: per 32
values d = amax / 127 stored as float16, q = round-half-even(x * 127 / amax)). H-Scale's gain is
measured inside the engine: the mean KL divergence from the float32 model's next-token
distribution, RTN against H-Scale.

Behind the ``engine`` marker, skipped when llama-cpp-python is not installed (it is a CPU build
of several minutes: ``pip install 'hscale-nvfp4[engines]'``). Run and print the figures
(docs/checkpoints.md records them): ``pytest -m engine tests/interop/test_engine_llamacpp.py -s``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (a CPU "
                                "build of several minutes: pip install 'hscale-nvfp4[engines]')")
pytest.importorskip("gguf", reason="GGUF needs the gguf package (the engines extra)")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers.checkpoint_edits import quantized  # noqa: E402
from hscale.checkpoints import checkpoint_weights  # noqa: E402
from hscale.checkpoints.to_gguf import convert_to_gguf  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-DEQ-1")]

#: Held-out sequences evaluated (bundled text through the ByteTokenizer), and their length.
SEQUENCES, LENGTH = 6, 128


def q8_0(x: torch.Tensor) -> torch.Tensor:
    """Activations as ggml's x86 quantize_row_q8_0 leaves them (blocks of 32 along the last
    dimension): q = round-half-even(x * (127 / amax)), times float16(amax / 127)."""
    blocks = x.reshape(-1, 32)
    amax = blocks.abs().amax(dim=1, keepdim=True)
    d = amax / 127.0
    inverse = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    q = torch.round(blocks * inverse)  # torch.round: half to even, as _mm256_round_ps
    return (q * d.half().float()).reshape(x.shape)


def load(directory):
    from hscale.models.loading import quiet_transformers
    with quiet_transformers():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def transformers_logits(model, sequences, weights=None, activations_q8=False):
    modules = dict(model.named_modules())
    handles = []
    with torch.no_grad():
        if weights is not None:
            for name, weight in weights.items():
                modules[name].weight.copy_(torch.from_numpy(weight))
            if activations_q8:
                handles = [modules[name].register_forward_pre_hook(
                    lambda _m, args: (q8_0(args[0]),)) for name in weights]
        try:
            return [model(torch.tensor([ids])).logits[0].numpy() for ids in sequences]
        finally:
            for handle in handles:
                handle.remove()


def engine_logits(path, sequences):
    started = time.perf_counter()
    llm = llama_cpp.Llama(str(path), n_ctx=2 * LENGTH, n_batch=LENGTH, n_ubatch=LENGTH,
                          n_threads=2, logits_all=True, verbose=False, type_k=0, type_v=0)
    try:
        out = []
        for ids in sequences:
            llm.reset()
            llm.eval(ids)
            out.append(np.array(llm.scores[: len(ids)], np.float32))
        return out, time.perf_counter() - started
    finally:
        llm.close()


def compare(a, b) -> dict:
    a, b = np.concatenate(a), np.concatenate(b)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return {"cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
            "max_abs": float(np.abs(a - b).max()),
            "rel_l2": float(np.linalg.norm(a - b) / np.linalg.norm(b)),
            "argmax": float(np.mean(a.argmax(1) == b.argmax(1)))}


def kl_from(reference, logits) -> float:
    """Mean KL(reference || logits) per token, in nats."""
    p = torch.log_softmax(torch.from_numpy(np.concatenate(reference)).double(), dim=-1)
    q = torch.log_softmax(torch.from_numpy(np.concatenate(logits)).double(), dim=-1)
    return float((p.exp() * (p - q)).sum(-1).mean())


@pytest.fixture(scope="module")
def measured(tiny, tmp_path_factory):
    from hscale.calibration import collect_hessian, save_hessians, tiny_decoder_batches
    from hscale.calibration.texts import heldout_texts
    from hscale.models import linear_layers
    from hscale.models.synthetic import ByteTokenizer
    out = tmp_path_factory.mktemp("engine")
    model = load(tiny)
    H, h = collect_hessian(model, tiny_decoder_batches(vocab_size=model.config.vocab_size),
                           dict(linear_layers(model)), progress=False)
    save_hessians(out / "h.safetensors", h, H, {"model": "tiny decoder"})
    checkpoints = {"rtn": quantized(tiny, out / "rtn"),
                   "hscale": quantized(tiny, out / "hscale", method="hscale",
                                       hessian=str(out / "h.safetensors"))}
    tokenizer = ByteTokenizer(model.config.vocab_size)
    stream = [i for text in heldout_texts() for i in tokenizer.encode(text)]
    sequences = [stream[k * LENGTH:(k + 1) * LENGTH] for k in range(SEQUENCES)]
    assert all(len(s) == LENGTH for s in sequences)
    original = transformers_logits(model, sequences)
    figures = {}
    for method, checkpoint in checkpoints.items():
        path = out / f"{method}.gguf"
        convert_to_gguf(checkpoint, path)
        weights = checkpoint_weights(checkpoint)
        dequantized = transformers_logits(load(tiny), sequences, weights)
        emulated = transformers_logits(load(tiny), sequences, weights, activations_q8=True)
        engine, seconds = engine_logits(path, sequences)
        figures[method] = {
            "engine vs transformers, dequantized + Q8_0 activations": compare(engine, emulated),
            "engine vs transformers, dequantized": compare(engine, dequantized),
            "engine vs float32 model": compare(engine, original),
            "transformers dequantized vs float32 model": compare(dequantized, original),
            "KL from float32 model, engine": kl_from(original, engine),
            "KL from float32 model, transformers dequantized": kl_from(original, dequantized),
            "engine seconds (load + 6 x 128 tokens)": seconds,
        }
    return figures


def test_llama_cpp_runs_the_converted_checkpoints_as_transformers_runs_them(measured):
    for method, figures in measured.items():
        print(f"\n{method}:")
        for key, value in figures.items():
            shown = (", ".join(f"{k} {v:.6g}" for k, v in value.items())
                     if isinstance(value, dict) else f"{value:.6g}")
            print(f"  {key}: {shown}")
        emulated = figures["engine vs transformers, dequantized + Q8_0 activations"]
        assert emulated["cos_min"] > 0.9999 and emulated["rel_l2"] < 5e-3, (method, emulated)
        plain = figures["engine vs transformers, dequantized"]
        assert plain["cos_min"] > 0.999 and plain["rel_l2"] < 5e-2, (method, plain)


def test_h_scale_gains_inside_the_engine(measured):
    engine = {m: f["KL from float32 model, engine"] for m, f in measured.items()}
    offline = {m: f["KL from float32 model, transformers dequantized"] for m, f in measured.items()}
    print(f"\nKL from the float32 model, H-Scale / RTN: engine {engine['hscale'] / engine['rtn']:.4f}"
          f", transformers {offline['hscale'] / offline['rtn']:.4f}")
    assert engine["hscale"] < engine["rtn"] and offline["hscale"] < offline["rtn"]


def test_a_llama_checkpoint_runs_with_its_rope_rows_permuted(tmp_path):
    """The llama architecture's query and key rows are written in ggml's rope order: a wrong
    order would scramble attention, and the engine would not match transformers."""
    from hscale.models.synthetic import TINY_DECODER_DEFAULTS, build_tiny_decoder
    config = transformers.LlamaConfig(**TINY_DECODER_DEFAULTS)
    build_tiny_decoder(seed=1, config=config).save_pretrained(tmp_path / "model")
    checkpoint = quantized(tmp_path / "model", tmp_path / "ct")
    convert_to_gguf(checkpoint, tmp_path / "llama.gguf")
    rng = np.random.default_rng(0)
    sequences = [[1] + rng.integers(3, 512, LENGTH - 1).tolist() for _ in range(2)]
    weights = checkpoint_weights(checkpoint)
    emulated = transformers_logits(load(tmp_path / "model"), sequences, weights, True)
    engine, _ = engine_logits(tmp_path / "llama.gguf", sequences)
    figures = compare(engine, emulated)
    print(f"\nllama, engine vs transformers dequantized + Q8_0: {figures}")
    assert figures["cos_min"] > 0.9999 and figures["rel_l2"] < 5e-3, figures
