"""fouroversix (the "Four Over Six" reference) behind the backend protocol: RTN with the max-abs
init (its ``static_6`` rule) and with the 4over6 init (its default ``mse`` rule).

Library function called: ``fouroversix.quantize.pytorch.reference.quantize_to_fp4(x, x_amax,
fp4_format=DataType.nvfp4, scale_rule=..., round_style=RoundStyle.nearest, pack_values=True,
use_blackwell_scale_layout=False)``: the function that fouroversix's PyTorch backend
(``PyTorchQuantizeBackend.quantize_to_fp4``, the one ``fouroversix.quantize_to_fp4`` selects
without a Blackwell GPU) calls, asked for row-major scales instead of the Blackwell layout and
called on the unpadded weight (the backend pads to 128 x 64 with zeros, which changes no
group). It returns the packed codes (``pack_unpacked_fp4``: element 2i in the low nibble), the
float8_e4m3fn scales and the tensor amax. Inside (``quantize_to_nvfp4``):

- ``encode_scale = fp32(6 * C / amax)`` with ``C = 448`` for ``static_6`` and ``256`` for the
  4over6 rules; block scale ``fp32(fp32(amax_g / 6) * encode_scale)`` cast to E4M3 (the "4"
  candidate multiplies by 1.5 before the cast);
- codes ``x * fp32(1 / fp32(decode_scale * e4m3))`` with ``decode_scale = fp32(1 /
  encode_scale)``, rounded by ``fake_quantize_to_e2m1`` (``torch.round``: ties to even) and
  turned into codes through bfloat16 (``quantize_bf16_to_unpacked_fp4``);
- 4over6 (``select_fouroversix``): both candidates dequantized in fp32 and the "4" side chosen
  when its sum of squared errors is strictly smaller.

The library stores the tensor amax, and dequantizes as ``value * scale * amax / (6 * C)``; the
adapter reports the s_g that amax stands for, ``fp32(amax / (6 C))`` (NVFP4-GS-1 applied to the
stored amax, ``hscale.reference.global_scale.compute_global_scale``).

A caller's s_g, or a ``scale_ceiling`` other than the rule's C, is passed as
``x_amax = fp32(s_g * 6 * C)`` (fouroversix takes an amax, not a scale; the product is rounded,
so s_g may come back one ulp off, which the suite then reports).
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U
from hscale.reference.global_scale import compute_global_scale

LIBRARY_MODULE = "fouroversix.quantize.pytorch.reference"
RULES = {"maxabs": ("static_6", 448.0), "4over6": ("mse", 256.0)}


class FourOverSixNVFP4:
    name = "fouroversix"
    capabilities = frozenset({"rtn", "4over6"})
    global_scale_convention = "multiplier"

    @property
    def version(self) -> str:
        return common.dist_version("fouroversix")

    def available(self):
        return common.module_status(LIBRARY_MODULE)

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        import torch
        from fouroversix.quantize.pytorch.reference import quantize_to_fp4
        from fouroversix.utils import DataType, RoundStyle, ScaleRule

        weight, ceiling, given = common.check_arguments(self, weight, hessian_diag, method, init,
                                                        K, U, scale_ceiling, global_scale)
        rule, rule_ceiling = RULES[init]
        x_amax = None
        if given is not None or float(ceiling) != rule_ceiling:
            s_g = given if given is not None else compute_global_scale(
                common.tensor_amax(weight), ceiling)
            x_amax = torch.tensor(float(np.float32(float(s_g) * 6 * rule_ceiling)),
                                  dtype=torch.float32)
        values, scales, amax = quantize_to_fp4(
            common.torch_weight(weight), x_amax, fp4_format=DataType.nvfp4,
            scale_rule=ScaleRule(rule), round_style=RoundStyle.nearest, pack_values=True,
            use_blackwell_scale_layout=False)
        rows, cols = weight.shape
        stored_amax = float(amax.reshape(()).item())
        return common.LibraryResult(common.fp8_bytes(scales).reshape(rows, cols // 16),
                                    compute_global_scale(stored_amax, rule_ceiling),
                                    packed=common.fp8_bytes(values).reshape(rows, cols // 2),
                                    amax=stored_amax)


def create():
    return FourOverSixNVFP4()
