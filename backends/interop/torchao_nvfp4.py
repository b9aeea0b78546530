"""torchao's NVFP4 weight quantization behind the backend protocol (RTN only).

Library functions called, in the order torchao's own weight-only workflow calls them
(``torchao/prototype/mx_formats/inference_workflow.py``, ``_nvfp4_weight_only_quantize``, and
the CONVERT step of the static path):

1. ``torch.max(torch.abs(weight))`` and
   ``torchao.prototype.mx_formats.nvfp4_tensor.per_tensor_amax_to_scale(amax)``
   (``amax.float() / (448 * 6)`` in fp32): the per-tensor scale, a dequantization multiplier;
2. ``torchao.prototype.mx_formats.nvfp4_tensor.NVFP4Tensor.to_nvfp4(weight, block_size=16,
   per_tensor_scale=..., is_swizzled_scales=False)``, which runs ``nvfp4_quantize``:
   ``block_scale = fp32(amax_g / 6)``, ``fp32(block_scale / per_tensor_scale)`` clamped to
   ``[finfo(float8_e4m3fn).tiny = 2^-6, 448]`` and cast to ``float8_e4m3fn``; codes from
   ``w * fp32(fp32(1 / per_tensor_scale) / e4m3)`` clamped to +-6, ``f32_to_f4_unpacked``
   (round to nearest even) and ``pack_uint4`` (element 2i in the low nibble);
3. the result's ``qdata`` (packed bytes) and ``scale`` (float8_e4m3fn, row-major) are read as
   they are.

The workflow asks for swizzled scales (``is_swizzled_scales=True``); the adapter asks for the
row-major layout instead, which is the same values before ``to_blocked`` (NVFP4-PACK-3 is
checked against torchao's ``to_blocked`` elsewhere in the suite).

``create_single_level()`` calls ``to_nvfp4`` with ``per_tensor_scale=None``, torchao's
single-level mode (``NVFP4WeightOnlyConfig(use_dynamic_per_tensor_scale=False)``): the block
scale ``amax_g / 6`` itself is cast to E4M3 and there is no global scale, which the adapter
reports as s_g = 1.0.

Inputs: torchao takes float32 and bfloat16 tensors only; a float16 weight is widened to float32
(exact). A caller's ``global_scale`` is passed as ``per_tensor_scale`` (NVFP4-GS-3); for a
``scale_ceiling`` other than 448, which torchao has no parameter for, the spec's s_g for that
ceiling is passed the same way (``common.ceiling_global_scale``). The single-level mode has no
per-tensor scale to pass, so it ignores both.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U

LIBRARY_MODULE = "torchao.prototype.mx_formats.nvfp4_tensor"


class TorchaoNVFP4:
    capabilities = common.RTN_ONLY
    global_scale_convention = "multiplier"  # per_tensor_scale = amax / (448 * 6)

    def __init__(self, per_tensor_scale: bool = True):
        self.per_tensor_scale = per_tensor_scale
        self.name = "torchao-nvfp4" if per_tensor_scale else "torchao-nvfp4-single-level"

    @property
    def version(self) -> str:
        return common.dist_version("torchao")

    def available(self):
        return common.module_status(LIBRARY_MODULE)

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        import torch
        from torchao.prototype.mx_formats.nvfp4_tensor import (NVFP4Tensor,
                                                               per_tensor_amax_to_scale)

        weight, ceiling, given = common.check_arguments(self, weight, hessian_diag, method, init,
                                                        K, U, scale_ceiling, global_scale)
        data = common.torch_weight(weight, accepts=("float32", "bfloat16"))
        if self.per_tensor_scale:
            passed = common.ceiling_global_scale(weight, ceiling, given)
            if passed is None:
                per_tensor_scale = per_tensor_amax_to_scale(torch.max(torch.abs(data)))
            else:
                per_tensor_scale = torch.tensor(float(passed), dtype=torch.float32)
            s_g = np.float32(per_tensor_scale.item())
        else:
            per_tensor_scale, s_g = None, np.float32(1.0)
        q = NVFP4Tensor.to_nvfp4(data, block_size=16, per_tensor_scale=per_tensor_scale,
                                 is_swizzled_scales=False)
        return common.LibraryResult(common.fp8_bytes(q.scale), s_g,
                                    packed=common.fp8_bytes(q.qdata))


def create():
    """torchao two-level NVFP4: per-tensor scale amax / 2688 and E4M3 block scales."""
    return TorchaoNVFP4(per_tensor_scale=True)


def create_single_level():
    """torchao single-level NVFP4: E4M3 block scales amax_g / 6, no per-tensor scale."""
    return TorchaoNVFP4(per_tensor_scale=False)
