"""A quantized checkpoint run as a transformers model with the kit's own decoding (NVFP4-DEQ-1):
the route that does not depend on an engine's or a library's loader.

Why it exists: transformers 5.17 with compressed-tensors 0.19 loads an NVFP4 MoE checkpoint
whose experts are stored per expert *wrongly and silently*: each expert's
``weight_global_scale`` is dropped (transformers issue #48371), so its experts come back scaled
by 1/s_g. Dense checkpoints load right. So MoE outputs are validated here: every quantized
weight decoded by ``hscale.reference.dequantize`` and put into the transformers model (an
expert's gate, up and down matrices into its rows of the fused 3-D parameters).

* ``decoded_model(source, checkpoint)``: the whole model in float32 (small models);
* ``DecodedSource(source, checkpoint)`` with ``sequential_logits``: block by block, one block in
  memory (``hscale.models.decoder``), for models larger than memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hscale.checkpoints import SafetensorsModel, detect_format, read_stored_linear
from hscale.checkpoints.stored import quantized_modules
from hscale.models.architecture import architecture
from hscale.models.loading import quiet_transformers


class DecodedSource:
    """The source model's tensors, each quantized weight replaced by the checkpoint's decoding
    (float32): what ``SequentialDecoder`` reads to run the quantized model."""

    def __init__(self, source_dir, checkpoint_dir):
        self.original = SafetensorsModel(source_dir)
        self.checkpoint = SafetensorsModel(checkpoint_dir)
        self.layout = detect_format(checkpoint_dir).layout
        self.quantized = {f"{m}.weight": m for m in quantized_modules(self.checkpoint,
                                                                      self.layout)}
        self.info = self.original.info

    def decoded(self, module: str) -> np.ndarray:
        from hscale.reference import dequantize, unpack_codes
        stored = read_stored_linear(self.checkpoint, self.layout, module)
        return dequantize(unpack_codes(stored.packed), stored.scale_bytes,
                          stored.global_scale).astype(np.float32)

    def tensor(self, name, dtype=None, start=None, stop=None):
        import torch
        module = self.quantized.get(name)
        if module is None:
            return self.original.tensor(name, dtype, start, stop)
        weight = torch.from_numpy(self.decoded(module))
        if start is not None:
            weight = weight[start:stop]
        return weight if dtype is None else weight.to(dtype)


def decoded_model(source_dir, checkpoint_dir):
    """The source model (float32, from_pretrained) with every quantized weight of the
    checkpoint replaced by its decoding, experts into their fused parameters."""
    import torch
    from hscale.models.inventory import inventory
    cls, _ = architecture(source_dir)
    with quiet_transformers():
        model = cls.from_pretrained(source_dir, dtype=torch.float32).eval()
    found = inventory(Path(source_dir), model)
    decoded = DecodedSource(source_dir, checkpoint_dir)
    with torch.no_grad():
        for name, module in decoded.quantized.items():
            weight = torch.from_numpy(decoded.decoded(module))
            slot = found.experts.get(module)
            if slot is None:
                model.get_submodule(found.layout.to_module("." + module)[1:]).weight.copy_(weight)
                continue
            experts = model.get_submodule(found.layout.to_module("." + slot.experts)[1:])
            inter = experts.gate_up_proj.shape[1] // 2
            target = {"gate": experts.gate_up_proj[slot.expert, :inter],
                      "up": experts.gate_up_proj[slot.expert, inter:],
                      "down": experts.down_proj[slot.expert]}[slot.part]
            target.copy_(weight)
    return model


def sequential_logits(source_dir, reader, input_ids, attention_mask=None):
    """The logits of a causal decoder on one batch, run block by block from ``reader`` (a
    ``SafetensorsModel`` of the original, or a ``DecodedSource``): one block in memory."""
    import torch
    from hscale.models.decoder import SequentialDecoder
    decoder = SequentialDecoder(source_dir, reader)
    hidden, kwargs = decoder.block_inputs(input_ids, attention_mask)
    with torch.no_grad():
        for index in range(decoder.count):
            layer = decoder.materialize(index)
            hidden = layer(hidden, **kwargs[index])
            decoder.release(index)
        normed = decoder.head_inputs(input_ids, attention_mask, hidden)
        head = "lm_head.weight" if "lm_head.weight" in reader.info else decoder.embedding_name
        return torch.nn.functional.linear(normed, reader.tensor(head, torch.float32))
