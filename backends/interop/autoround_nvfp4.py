"""AutoRound's NVFP4 RTN path (``iters=0``) and its export packing, behind the backend protocol
(RTN only; the global scale is stored as its reciprocal, as in the llm-compressor format that
AutoRound exports).

Library functions called, in the order AutoRound's RTN flow calls them:

1. ``auto_round.data_type.nvfp.calculate_gparam(weight, 16)`` (``wrapper.py``, when a layer has
   no ``weight_global_scale``): ``448 * 6 * fp32(1 / amax)`` in fp32, the reciprocal of the
   spec's s_g (NVFP4-GS-4), 0 for an all-zero tensor (``get_reciprocal(0) = 0``);
2. ``auto_round.data_type.nvfp.nv_fp4(weight, bits=4, group_size=16, global_scale=...)`` (the
   registered ``nv_fp4`` data type, ``ref_nvfp4_quant``): block scale
   ``global_scale * fp32(amax_g * fp32(1 / 6))`` clamped to +-448 and cast to float8_e4m3fn;
3. ``auto_round.export.export_to_autoround.qlinear_fp.QuantLinear(4, 16, n, m, False,
   data_type="nv_fp", act_bits=16).pack(linear, scale, global_scale=...)`` (what
   ``export_to_nvfp_mx.pack_layer`` calls): ``w * get_reciprocal(scale *
   get_reciprocal(global_scale))``, clamped to +-6, ``cast_to_fp4`` (``torch.round`` per
   binade: ties to even) and ``pack_fp4_to_uint8`` (nearest table value by ``argmin``, sign
   from ``torch.signbit``; element 2i in the low nibble); its ``weight_packed``,
   ``weight_scale`` (float8_e4m3fn) and ``weight_global_scale`` are read as stored.

A caller's s_g (NVFP4-GS-3), or the spec's s_g for a ``scale_ceiling`` other than 448, is passed
as the reciprocal ``r = fp32(1 / s_g)`` in place of step 1.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U
from hscale.reference.global_scale import reciprocal_from_multiplier

LIBRARY_MODULES = ("auto_round.data_type.nvfp", "auto_round.export.export_to_autoround.qlinear_fp")


class AutoRoundNVFP4:
    name = "autoround-nvfp4"
    capabilities = common.RTN_ONLY
    global_scale_convention = "reciprocal"  # weight_global_scale = 448 * 6 / amax

    @property
    def version(self) -> str:
        return common.dist_version("auto-round")

    def available(self):
        return common.module_status(*LIBRARY_MODULES)

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        import torch
        from auto_round.data_type.nvfp import calculate_gparam, nv_fp4
        from auto_round.export.export_to_autoround.qlinear_fp import QuantLinear

        weight, ceiling, given = common.check_arguments(self, weight, hessian_diag, method, init,
                                                        K, U, scale_ceiling, global_scale)
        passed = common.ceiling_global_scale(weight, ceiling, given)
        data = common.torch_weight(weight)
        rows, cols = data.shape
        if passed is None:
            reciprocal = calculate_gparam(data, 16)
        else:
            reciprocal = torch.tensor(float(reciprocal_from_multiplier(passed)),
                                      dtype=torch.float32)
        _qdq, scale, _zp = nv_fp4(data, bits=4, group_size=16, global_scale=reciprocal)
        linear = torch.nn.Linear(cols, rows, bias=False, dtype=data.dtype)
        with torch.no_grad():
            linear.weight.copy_(data)
        packer = QuantLinear(4, 16, cols, rows, False, data_type="nv_fp", act_bits=16)
        packer.pack(linear, scale, global_scale=reciprocal, device="cpu")
        stored = np.float32(packer.weight_global_scale.reshape(()).item())
        return common.LibraryResult(common.fp8_bytes(packer.weight_scale).reshape(rows, cols // 16),
                                    stored, packed=common.fp8_bytes(packer.weight_packed))


def create():
    return AutoRoundNVFP4()
