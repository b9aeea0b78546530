"""NVIDIA ModelOpt's NVFP4 weight quantization behind the backend protocol (RTN only).

Library function called: ``modelopt.torch.quantization.qtensor.nvfp4_tensor.NVFP4QTensor.quantize(
weight, block_size=16, weights_scaling_factor_2=...)``, which returns the packed tensor
(``_quantized_data``, uint8, element 2i in the low nibble), ``weights_scaling_factor``
(float8_e4m3fn, row-major) and ``weights_scaling_factor_2`` (float32 scalar, the
dequantization multiplier that a ModelOpt checkpoint stores as ``weight_scale_2``). Inside:

- ``get_weights_scaling_factor_2``: ``reduce_amax(weight).float() / (6 * 448)``;
- ``get_weights_scaling_factor``: ``fp32(amax_g / fp32(6 * weight_scale_2))``, a 0 replaced by
  1.0, then ``_cast_per_block_scale_to_fp8``: clamped to ``[2^-9, 448]`` and cast to
  ``float8_e4m3fn``;
- codes: ``weight / fp32(e4m3 * weight_scale_2)`` and ``_cast_fp4`` (``searchsorted`` on the
  E2M1 midpoints, ties at 0.75 / 1.75 / 3.5 moved up: round to nearest even; sign bit from
  ``weight < 0``).

This is the dynamic path that ``modelopt.torch.export`` runs for a weight quantizer whose amax is
the weight's own (``get_weights_scaling_factor_from_quantizer`` on a non-static quantizer, then
``to_quantized_weight`` -> ``NVFP4QTensor.quantize`` with both factors). The static path (a
calibrated per-block amax, ``_cast_per_block_scale_to_fp8`` with normalisation) needs a
calibration loop and is not exercised here.

``weights_scaling_factor_2`` is left to ModelOpt (None) unless the caller gives ``global_scale``
(NVFP4-GS-3) or a ``scale_ceiling`` other than 448 (which ModelOpt has no parameter for; the
spec's s_g for that ceiling is passed, ``common.ceiling_global_scale``).
"""

from __future__ import annotations

import warnings

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U

LIBRARY_MODULE = "modelopt.torch.quantization.qtensor.nvfp4_tensor"


class ModelOptNVFP4:
    name = "modelopt-nvfp4"
    capabilities = common.RTN_ONLY
    global_scale_convention = "multiplier"  # weight_scale_2 = amax / (6 * 448)

    @property
    def version(self) -> str:
        return common.dist_version("nvidia-modelopt")

    def available(self):
        return common.module_status(LIBRARY_MODULE, quiet=True)

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

        weight, ceiling, given = common.check_arguments(self, weight, hessian_diag, method, init,
                                                        K, U, scale_ceiling, global_scale)
        passed = common.ceiling_global_scale(weight, ceiling, given)
        factor_2 = None if passed is None else torch.tensor(float(passed), dtype=torch.float32)
        packed, scale, scale_2 = NVFP4QTensor.quantize(common.torch_weight(weight), 16,
                                                       weights_scaling_factor_2=factor_2)
        return common.LibraryResult(common.fp8_bytes(scale),
                                    np.float32(scale_2.float().reshape(()).item()),
                                    packed=common.fp8_bytes(packed._quantized_data))


def create():
    return ModelOptNVFP4()
