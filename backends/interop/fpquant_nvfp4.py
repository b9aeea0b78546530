"""FP-Quant's NVFP4 weight quantization behind the backend protocol (RTN only). CUDA only: on a
machine without a CUDA device and QuTLASS, ``available()`` is False and says why.

Library function called: ``fp_quant.module.linear_fns.forward_quantize(weight, hadamard_matrix,
global_scale, FPQuantDtype.NVFP4, "abs_max")``, what ``FPQuantLinear`` runs on its weight when
it is not in pseudo-quantization mode. It casts the weight to bfloat16 and calls QuTLASS's
``fusedQuantizeNv`` (``fp_quant.module.qutlass_ops.fused_quantize_nv_op``), which returns the
packed E2M1 codes and the E4M3 scales in the 128x4 blocked layout, padded. The adapter passes an
identity 16x16 matrix as the Hadamard rotation (FP-Quant rotates by default; the spec does not)
and turns the blocked scales back to row-major with the spec's layout
(``hscale.reference.packing.unswizzle_scale_bytes``, NVFP4-PACK-3).

FP-Quant's global scale is a quantization multiplier (block scale ``gs * amax_g / 6``), fixed at
10.0 by ``FPQuantLinear`` for NVFP4 rather than derived from the tensor's amax; the adapter
passes the spec's reciprocal ``fp32(1 / s_g)`` (``reciprocal_from_multiplier``) of the caller's
or the spec's s_g instead, so that the group path is what is measured.

Read from the source, not measured (no CUDA device here): the pseudo-quantization Triton kernel
(``fp_quant.module.triton.nvfp4.nvfp4_forward_kernel``) rounds with strict ``>`` at every
midpoint, so the ties 0.75, 1.75 and 3.5 go down (to 0.5, 1.5 and 3), not to even.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U
from hscale.reference.global_scale import compute_global_scale, reciprocal_from_multiplier
from hscale.reference.packing import unswizzle_scale_bytes

LIBRARY_MODULES = ("fp_quant.module.linear_fns", "qutlass")


class FPQuantNVFP4:
    name = "fpquant-nvfp4"
    capabilities = common.RTN_ONLY
    global_scale_convention = "reciprocal"

    @property
    def version(self) -> str:
        return common.dist_version("fp-quant", "qutlass")

    def available(self):
        ok, reason = common.module_status(*LIBRARY_MODULES)
        if not ok:
            return False, (f"{reason} (fp-quant's NVFP4 quantizer is QuTLASS's CUDA "
                           "fusedQuantizeNv; its only other path is a Triton GPU kernel that "
                           "returns dequantized values)")
        import torch

        if not torch.cuda.is_available():
            return False, "fp-quant's NVFP4 quantizer (QuTLASS fusedQuantizeNv) needs a CUDA device"
        return True, ""

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        import torch
        from fp_quant.module.linear_fns import forward_quantize
        from fp_quant.utils import FPQuantDtype

        weight, ceiling, given = common.check_arguments(self, weight, hessian_diag, method, init,
                                                        K, U, scale_ceiling, global_scale)
        s_g = given if given is not None else compute_global_scale(common.tensor_amax(weight),
                                                                   ceiling)
        reciprocal = reciprocal_from_multiplier(s_g)
        data = common.torch_weight(weight).cuda()
        identity = torch.eye(16, dtype=torch.bfloat16, device="cuda")
        packed, scales, _mask = forward_quantize(
            data, identity, torch.tensor([float(reciprocal)], device="cuda"),
            FPQuantDtype.NVFP4, "abs_max")
        rows, cols = weight.shape
        scale_bytes = unswizzle_scale_bytes(common.fp8_bytes(scales).reshape(-1), rows, cols // 16)
        return common.LibraryResult(scale_bytes, np.float32(reciprocal),
                                    packed=common.fp8_bytes(packed).reshape(rows, cols // 2))


def create():
    return FPQuantNVFP4()
