"""The bases: the kit's own outputs of every layout, built once per session."""

from __future__ import annotations

from pathlib import Path

from helpers.mutations.registry import Base


def bases(root: Path, checkpoints: dict) -> dict[str, Base]:
    """The kit's own outputs of every layout, under ``root`` (built once): ``checkpoints`` is
    conftest's {format: the tiny decoder quantized in it}."""
    from hscale.checkpoints.to_gguf import convert_to_gguf
    from hscale.quantize import quantize_model
    from helpers.llm_families import written
    root = Path(root)
    made = {"ct": Base("ct", checkpoints["compressed-tensors"],
                       frozenset({"ct", "single", "head"}), "modelopt"),
            "modelopt": Base("modelopt", checkpoints["modelopt"],
                             frozenset({"modelopt", "single", "head"}), "compressed-tensors")}
    minilm = root / "minilm-modelopt"  # BERT: an encoder, its buffers stored, no head
    if not minilm.exists():
        from hscale.models import minilm_model_dir
        quantize_model(model_dir=str(minilm_model_dir()), out=str(minilm), format="modelopt",
                       pipeline="rtn", method="rtn", progress=False)
    made["minilm-modelopt"] = Base("minilm-modelopt", minilm, frozenset({"modelopt", "single"}),
                                   "compressed-tensors")
    llama = written(root, "llama")
    for fmt, tag, to in (("compressed-tensors", "ct", "modelopt"),
                         ("modelopt", "modelopt", "compressed-tensors")):
        out = root / f"w4a4-{tag}"
        if not out.exists():
            quantize_model(model_dir=str(llama), out=str(out), format=fmt, scheme="w4a4",
                           pipeline="rtn", method="rtn", samples=2, seq_len=64,
                           progress=False)
        made[f"w4a4-{tag}"] = Base(f"w4a4-{tag}", out,
                                   frozenset({tag, "w4a4", "single", "head"}), to)
    moe = root / "moe-ct"
    if not moe.exists():
        quantize_model(model_dir=str(written(root, "qwen3_moe")), out=str(moe),
                       format="compressed-tensors", pipeline="rtn", method="rtn",
                       max_shard_bytes=200_000, progress=False)
    made["moe-ct"] = Base("moe-ct", moe, frozenset({"ct", "sharded", "moe", "head"}),
                          "modelopt")
    gguf_out = root / "tiny.gguf"
    if not gguf_out.exists():
        convert_to_gguf(checkpoints["compressed-tensors"], gguf_out)
    made["gguf"] = Base("gguf", gguf_out, frozenset({"gguf"}), "compressed-tensors")
    llama_ct = root / "llama-ct"
    if not llama_ct.exists():
        quantize_model(model_dir=str(llama), out=str(llama_ct), format="compressed-tensors",
                       pipeline="rtn", method="rtn", progress=False)
        for tokenizer in llama_ct.glob("tokenizer*"):  # the placeholder vocabulary
            tokenizer.unlink()
    llama_gguf = root / "llama.gguf"
    if not llama_gguf.exists():
        convert_to_gguf(llama_ct, llama_gguf)
    made["gguf-llama"] = Base("gguf-llama", llama_gguf, frozenset({"gguf", "llama"}),
                              "modelopt")
    return made
