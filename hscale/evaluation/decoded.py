"""A quantized checkpoint run as a transformers model with the kit's own decoding (NVFP4-DEQ-1):
the route that does not depend on an engine's or a library's loader.

Why it exists: transformers 5.17 with compressed-tensors 0.19 loads an NVFP4 MoE checkpoint
whose experts are stored per expert *wrongly and silently*: each expert's
``weight_global_scale`` is dropped (transformers issue #48371), so its experts come back scaled
by 1/s_g. Dense checkpoints load right. So MoE outputs are validated here: every quantized
weight decoded by ``hscale.reference.dequantize`` and handed to transformers' own loading as
an unquantized state dict (which fuses an expert's gate, up and down matrices into the 3-D
parameters as it does for any checkpoint). It is also the route of checkpoints transformers
cannot run on a CPU (ModelOpt's NVFP4, whose loading wants a GPU) and of the exact NVFP4 values
(transformers + compressed-tensors decompresses to bfloat16, docs/checkpoints.md).

* ``decoded_model(source, checkpoint)``: the whole model in float32 (small models); ``source``
  None takes the checkpoint's own config and unquantized tensors (a checkpoint carries them
  unchanged), so a checkpoint runs without its original;
* ``DecodedSource(source, checkpoint)`` with ``sequential_logits``: block by block, one block in
  memory (``hscale.models.decoder``), for models larger than memory.
"""

from __future__ import annotations

import numpy as np

from hscale.checkpoints import (CheckpointError, SafetensorsModel, detect_format,
                                read_stored_linear)
from hscale.checkpoints.stored import quantized_modules
from hscale.models.architecture import architecture
from hscale.models.loading import quiet_transformers


def decode_linear(checkpoint: SafetensorsModel, layout, module: str) -> np.ndarray:
    """One stored Linear's weight as NVFP4-DEQ-1 defines it (float32)."""
    from hscale.reference import dequantize, unpack_codes
    stored = read_stored_linear(checkpoint, layout, module)
    return dequantize(unpack_codes(stored.packed), stored.scale_bytes,
                      stored.global_scale).astype(np.float32)


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
        return decode_linear(self.checkpoint, self.layout, module)

    def tensor(self, name, dtype=None, start=None, stop=None):
        import torch
        module = self.quantized.get(name)
        if module is None:
            return self.original.tensor(name, dtype, start, stop)
        weight = torch.from_numpy(self.decoded(module))
        if start is not None:
            weight = weight[start:stop]
        return weight if dtype is None else weight.to(dtype)


def decoded_state(checkpoint_dir, source_dir=None) -> dict:
    """The state dict of the model a checkpoint means, under the checkpoint's tensor names:
    every quantized weight decoded (NVFP4-DEQ-1, float32, ``X.weight``), every other tensor as
    stored in ``source_dir`` (default: the checkpoint itself, which carries them unchanged)."""
    import torch
    from hscale.checkpoints import LAYOUTS
    checkpoint = SafetensorsModel(checkpoint_dir)
    layout = detect_format(checkpoint_dir).layout
    modules = quantized_modules(checkpoint, layout)
    # a quantized Linear's own tensors in any layout (codes, scale bytes, global and activation
    # scales), which the decoded weight replaces; its bias and everything else is kept
    suffixes = {suffix for known in LAYOUTS.values()
                for suffix in (*known.suffixes.values(), known.input_suffix)}
    replaced = {module + suffix for module in modules for suffix in suffixes | {".weight"}}
    source = checkpoint if source_dir is None else SafetensorsModel(source_dir)
    state = {name: source.tensor(name, torch.float32) for name in source.info
             if name not in replaced}
    for module in modules:
        state[f"{module}.weight"] = torch.from_numpy(decode_linear(checkpoint, layout, module))
    return state


def decoded_model(source_dir, checkpoint_dir):
    """The model a checkpoint means, in float32, as transformers builds it: its config (the
    source's, or with ``source_dir`` None the checkpoint's own, its quantization config
    dropped) and ``decoded_state``, which transformers' own loading turns into its modules
    (per-expert weights fused into 3-D expert parameters as for any checkpoint). A parameter
    the state does not give is an error, never a random initialisation."""
    import torch
    import transformers
    config = transformers.AutoConfig.from_pretrained(source_dir or checkpoint_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    cls, _ = architecture(source_dir or checkpoint_dir)
    state = decoded_state(checkpoint_dir, source_dir)
    with quiet_transformers():
        model, info = cls.from_pretrained(None, config=config, state_dict=state,
                                          dtype=torch.float32, output_loading_info=True)
    if info.get("missing_keys"):
        missing = sorted(info["missing_keys"])
        raise CheckpointError(f"{checkpoint_dir}: gives no tensor for {len(missing)} of the "
                              f"model's parameters ({', '.join(missing[:3])}"
                              f"{', ...' if len(missing) > 3 else ''})")
    return model.eval()


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
