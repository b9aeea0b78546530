"""NVIDIA ModelOpt's NVFP4 quantizer applied to activations, behind the activation kind
(docs/spec.md section 8).

Library function called: ``modelopt.torch.quantization.qtensor.nvfp4_tensor.NVFP4QTensor.quantize(
x, 16, weights_scaling_factor_2=a)`` with ``a`` the static input scale a ModelOpt ``NVFP4``
checkpoint stores (``input_scale = amax / (6 * 448)``, a multiplier): ModelOpt's own CPU
quantizer, which its W4A4 path and the emulation of a W4A4 checkpoint run on a Linear's input.
It returns the packed codes (``_quantized_data``, element 2i in the low nibble) and the block
scales (float8_e4m3fn, row-major). Inside (version 0.47): block scales ``amax_g / (6 * a)``
clamped to ``[2^-9, 448]`` (a 0x01 floor), a zero group's replaced by 1.0; codes from
``x / (e4m3 * a)`` by ``searchsorted`` on the E2M1 midpoints, the sign from ``x < 0``.

It divides where the engines multiply by reciprocals, so the recipe it is judged under is the
one that divides, ``exact`` (TransformerEngine's); docs/interop.md shows what differs.
"""

from __future__ import annotations

import warnings

import numpy as np

from hscale.backends.interop import common

LIBRARY_MODULE = "modelopt.torch.quantization.qtensor.nvfp4_tensor"


class ModelOptActivations:
    name = "modelopt-nvfp4-activations"
    kinds = frozenset({"activation"})
    activation_recipe = "exact"
    activation_scale_convention = "multiplier"  # input_scale = amax / (6 * 448)

    @property
    def version(self) -> str:
        return common.dist_version("nvidia-modelopt")

    def available(self):
        return common.module_status(LIBRARY_MODULE, quiet=True)

    def quantize_activations(self, x, global_scale=None):
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
        if global_scale is None:
            raise ValueError("ModelOpt's NVFP4 activations take the static input_scale")
        packed, block, _ = NVFP4QTensor.quantize(
            common.torch_weight(np.asarray(x)), 16,
            weights_scaling_factor_2=torch.tensor(float(global_scale), dtype=torch.float32))
        return common.LibraryResult(common.fp8_bytes(block).reshape(np.shape(x)[0], -1),
                                    np.float32(global_scale),
                                    packed=common.fp8_bytes(packed._quantized_data))


def create():
    return ModelOptActivations()
