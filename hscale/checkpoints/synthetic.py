"""Seeded synthetic decoders written as Hugging Face model directories, tensor by tensor.

``write_synthetic_model(out, config)`` writes ``config.json``, bfloat16 safetensors shards with
exactly the names and shapes ``save_pretrained`` writes for the config (MoE experts per expert
and 2-D, a tied head absent; ``hscale.models.architecture.saved_tensor_shapes``), their index,
and a tokenizer ``AutoTokenizer`` loads (``hscale.models.synthetic.save_byte_tokenizer``).
Memory holds one chunk of 2^24 values, never a tensor: a Llama-3-8B-shape model (16 GB) is
written in about 5 minutes here, at under 1 GiB resident.

The values depend only on (seed, tensor name, shape): each tensor draws from its own generator,
seeded by sha256 of the seed and its name. Matmul weights ``[out, in]`` (Linears, experts,
routers, the head) are N(0, 1/in), which keeps activations of order 1; the embedding
N(0, 0.02^2), biases N(0, 0.02^2); norm gains 1 + 0.1 N(0, 1), and in the decoder's pre-norms
and final norm 1% of the channels (the same in every layer, like the outlier features of real
models) get 8x the gain, so that h = diag(X^T X) is as uneven as real models' (max/median of
about 100). Results on these models are labelled synthetic wherever they are reported.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

from .safetensors import ShardWriter, TensorInfo

CHUNK = 1 << 24
OUTLIER_FRACTION, OUTLIER_GAIN = 0.01, 8.0
PRE_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")


def _seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def tensor_chunks(name: str, shape: tuple, seed: int, hidden: int, base_prefix: str = "model"):
    """The values of one tensor (float32), in C order, chunk by chunk."""
    import torch
    numel = math.prod(shape)
    generator = torch.Generator().manual_seed(_seed(seed, name))
    if len(shape) == 1:
        if name.endswith(".bias"):
            yield torch.randn(numel, generator=generator) * 0.02
            return
        gains = 1.0 + 0.1 * torch.randn(numel, generator=generator)
        if numel == hidden and (name.endswith(PRE_NORMS) or name == f"{base_prefix}.norm.weight"):
            outliers = torch.Generator().manual_seed(_seed(seed, "outlier-channels"))
            count = max(1, round(OUTLIER_FRACTION * hidden))
            gains[torch.randperm(hidden, generator=outliers)[:count]] *= OUTLIER_GAIN
        yield gains
        return
    std = 0.02 if "embed_tokens" in name else 1.0 / math.sqrt(shape[-1])
    done = 0
    while done < numel:
        count = min(CHUNK, numel - done)
        yield torch.randn(count, generator=generator) * std
        done += count


def write_synthetic_model(out, config, seed: int = 0, max_shard_bytes: int = 4 << 30,
                          log=None) -> dict:
    """Write the seeded model of ``config`` (``hscale.models.synthetic.family_config`` or
    ``preset_config``) to the directory ``out`` (created); returns its facts."""
    import torch
    from hscale.models.architecture import saved_tensor_shapes
    from hscale.models.loading import quiet_transformers
    from hscale.models.synthetic import save_byte_tokenizer
    import transformers
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    config.save_pretrained(out)
    save_byte_tokenizer(out)
    with torch.device("meta"), quiet_transformers():
        model = getattr(transformers, config.architectures[0])(config)
    shapes = saved_tensor_shapes(model)
    prefix = model.base_model_prefix
    infos = [TensorInfo(name, "BF16", shape) for name, shape in shapes.items()]
    writer = ShardWriter(out, infos, max_shard_bytes, {"producer": "hscale synthetic"})
    for info in infos:
        writer.write_chunks(info.name, (
            chunk.to(torch.bfloat16).view(torch.int16).numpy()
            for chunk in tensor_chunks(info.name, info.shape, seed, config.hidden_size, prefix)))
        if log is not None and info.nbytes > 256 << 20:
            log(f"  {info.name}: {info.nbytes / 2**30:.2f} GiB, "
                f"{time.perf_counter() - started:.0f} s")
    writer.close()
    facts = {"generator": "hscale.checkpoints.synthetic", "seed": seed,
             "architecture": config.architectures[0], "tensors": len(infos),
             "bytes": sum(i.nbytes for i in infos), "shards": len(writer.file_names),
             "seconds": round(time.perf_counter() - started, 1)}
    (out / "synthetic.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts
