"""torchao's run-time NVFP4 activation quantization behind the activation kind (docs/spec.md
section 8, recipe ``torchao``).

Library functions called, as torchao's own W4A4 linear calls them on its input
(``torchao/prototype/mx_formats/nvfp4_tensor.py``, the dynamic-quant branch of the linear's
dispatch, torchao 0.18):

1. the per-tensor scale: the static one given (``act_per_tensor_scale``, a multiplier ``a``), or
   dynamically ``per_tensor_amax_to_scale(torch.max(torch.abs(x)))`` (``amax / (448 * 6)``);
2. ``NVFP4Tensor.to_nvfp4(x, block_size=16, per_tensor_scale=a, is_swizzled_scales=True)``
   (``nvfp4_quantize``: block scales ``(amax_g / 6) / a`` clamped to ``[2^-6, 448]``, codes from
   ``x * ((1 / a) / e4m3)``, then ``to_blocked`` for the 128x4 layout the GEMM reads);
3. its ``qdata`` (packed codes, element 2i in the low nibble) and ``scale`` (the swizzled
   float8_e4m3fn bytes, zero padded) are returned as they are.

torchao takes bfloat16 and float32 activations; the global scale it takes and returns is the
multiplier ``a`` (``activation_scale_convention = "multiplier"``).
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common

LIBRARY_MODULE = "torchao.prototype.mx_formats.nvfp4_tensor"


class TorchaoActivations:
    name = "torchao-nvfp4-activations"
    kinds = frozenset({"activation"})
    activation_recipe = "torchao"
    activation_global_scale = ("static", "dynamic")
    activation_scale_convention = "multiplier"
    activation_scale_layout = "swizzled-128x4"
    activation_dtypes = ("float32", "bfloat16")

    @property
    def version(self) -> str:
        return common.dist_version("torchao")

    def available(self):
        return common.module_status(LIBRARY_MODULE)

    def quantize_activations(self, x, global_scale=None):
        import torch
        from torchao.prototype.mx_formats.nvfp4_tensor import (NVFP4Tensor,
                                                               per_tensor_amax_to_scale)

        data = common.torch_weight(np.asarray(x), accepts=("float32", "bfloat16"))
        if global_scale is None:
            per_tensor_scale = per_tensor_amax_to_scale(torch.max(torch.abs(data)))
        else:
            per_tensor_scale = torch.tensor(float(global_scale), dtype=torch.float32)
        q = NVFP4Tensor.to_nvfp4(data, block_size=16, per_tensor_scale=per_tensor_scale,
                                 is_swizzled_scales=True)
        return common.LibraryResult(common.fp8_bytes(q.scale).reshape(-1),
                                    np.float32(per_tensor_scale.item()),
                                    packed=common.fp8_bytes(q.qdata))


def create():
    return TorchaoActivations()
