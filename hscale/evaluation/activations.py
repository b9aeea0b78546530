"""W4A4 emulated on the CPU: every quantized Linear's input put through the engines' run-time
activation profile (NVFP4-ACT-1 .. -4, ``hscale.reference.activations``) with the activation
scale its checkpoint stores, as vLLM, SGLang and TensorRT-LLM quantize it on a Blackwell GPU
before the FP4 matmul. MoE experts (fused 3-D parameters, not Linears) are not hooked: their
activations stay float32, and ``activation_hooks`` says how many were left so."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class _SharedInput:
    """q/k/v (and gate/up) read one input and store one activation scale (NVFP4-CKPT-4): the
    input is quantized once and the result handed to each of them."""

    def __init__(self):
        self.key, self.value = None, None

    def quantized(self, x, g, a):
        import torch
        from hscale.reference.activations import fake_quantize_activations
        key = (x.data_ptr(), x._version, tuple(x.shape), float(g), float(a))
        if key != self.key:
            rows = x.detach().reshape(-1, x.shape[-1]).float().numpy()
            q = fake_quantize_activations(rows, g, a)  # NVFP4-ACT-1 .. -4
            self.key, self.value = key, torch.from_numpy(q).reshape(x.shape).to(x.dtype)
        return self.value


def activation_hooks(model, checkpoint_dir) -> tuple[list, int]:
    """Forward pre-hooks putting the input of every quantized Linear of ``model`` (the
    checkpoint's model, in transformers) through NVFP4-ACT-1 .. -4 with the activation scale
    ``checkpoint_dir`` (a W4A4 checkpoint) stores for it; returns (the hooks' handles, how many
    quantized expert matrices were left unhooked)."""
    from hscale.checkpoints import SafetensorsModel, detect_format
    from hscale.models.inventory import inventory
    from hscale.reference.activations import reciprocal
    layout = detect_format(checkpoint_dir).layout
    if not layout.activations:
        raise ValueError(f"{checkpoint_dir}: not a W4A4 checkpoint (no activation scales)")
    stored_model = SafetensorsModel(checkpoint_dir)
    found = inventory(Path(checkpoint_dir), model)
    shared = _SharedInput()
    handles, experts = [], 0
    for module in layout.module_tensors(stored_model):
        if module in found.experts:
            experts += 1
            continue
        stored = np.float32(stored_model.array(layout.tensor_names(module)["input"])
                            .reshape(-1)[0])
        a = layout.implied_global_scale(stored)  # NVFP4-ACT-1: the activation multiplier
        g = stored if layout.stores_reciprocal else reciprocal(a)  # what the kernel is given

        def hook(mod, args, g=g, a=a):
            return (shared.quantized(args[0], g, a),) + tuple(args[1:])
        target = model.get_submodule(found.layout.to_module("." + module)[1:])
        handles.append(target.register_forward_pre_hook(hook))
    return handles, experts
