"""compressed-tensors' W4A4 activation path (the ``NVFP4`` preset's ``input_activations``:
tensor_group, group 16, ``dynamic: local``) behind the activation kind (docs/spec.md section 8).

Library functions called, as ``forward_quantize`` (``quantization/lifecycle/forward.py``) runs them
on a Linear's input when a W4A4 model is run by compressed-tensors itself (its fake-quant
emulation, the one llm-compressor calibrates and evaluates with), version 0.19:

1. ``quantization.utils.helpers.compute_dynamic_scales_and_zp(x, args, module, global_scale=g)``
   with ``args = PRESET_SCHEMES["NVFP4"]["input_activations"]`` and ``g`` the static
   ``input_global_scale`` (``6 * 448 / amax``, a divisor): per group ``g * (amax_g / 6)`` rounded
   to float8_e4m3fn, ``amax_g / 6`` computed in the input's dtype (bfloat16 for a bfloat16
   input), a zero scale replaced by 0.125 (byte 0x20);
2. ``quantization.lifecycle.forward.quantize(x, scale, zero_point, args, global_scale=g)``: the
   E2M1 values (``x / (scale / g)`` cast to FP4 through the activation's dtype), read back here
   as codes (value -> code, sign bit from the value's sign);

the scale bytes are the float8 bytes of step 1. It is meant to emulate the engines' kernel,
so it is judged under their recipe, ``fast-math``; docs/interop.md shows what differs.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import E2M1_MAGNITUDES

LIBRARY_MODULE = "compressed_tensors.quantization.lifecycle.forward"


class CompressedTensorsActivations:
    name = "compressed-tensors-nvfp4-activations"
    kinds = frozenset({"activation"})
    activation_recipe = "fast-math"

    @property
    def version(self) -> str:
        return common.dist_version("compressed-tensors")

    def available(self):
        return common.module_status(LIBRARY_MODULE)

    def quantize_activations(self, x, global_scale=None):
        import torch
        from compressed_tensors.quantization.lifecycle.forward import quantize
        from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
        from compressed_tensors.quantization.utils.helpers import compute_dynamic_scales_and_zp

        if global_scale is None:
            raise ValueError("compressed-tensors' W4A4 activations take the static "
                             "input_global_scale")
        args = PRESET_SCHEMES["NVFP4"]["input_activations"]
        data = common.torch_weight(np.asarray(x))
        g = torch.tensor([float(global_scale)], dtype=torch.float32)
        module = torch.nn.Linear(data.shape[1], 1, bias=False)
        scale, zero_point = compute_dynamic_scales_and_zp(data, args, module, global_scale=g)
        values = quantize(data, scale, zero_point, args, global_scale=g).float().numpy()
        magnitude = np.searchsorted(np.array(E2M1_MAGNITUDES), np.abs(values))
        codes = magnitude.astype(np.uint8) | (np.signbit(values).astype(np.uint8) << 3)
        scale_bytes = common.fp8_bytes(scale.to(torch.float8_e4m3fn))
        return common.LibraryResult(scale_bytes.reshape(data.shape[0], -1), np.float32(g.item()),
                                    codes=codes)


def create():
    return CompressedTensorsActivations()
