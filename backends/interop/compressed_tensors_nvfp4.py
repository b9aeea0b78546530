"""compressed-tensors' NVFP4 checkpoint path (``nvfp4-pack-quantized``) behind the backend
protocol (RTN only; the global scale is stored as its reciprocal).

Library functions called (compressed-tensors only, no llm-compressor; for llm-compressor's own
observers on top of the same path see ``llmcompressor_nvfp4``):

1. ``compressed_tensors.quantization.preset_name_to_scheme("NVFP4A16", ["Linear"])``: the scheme
   llm-compressor's ``QuantizationModifier(scheme="NVFP4A16")`` applies (float, 4 bits,
   ``tensor_group`` strategy, group size 16, symmetric, scale dtype ``float8_e4m3fn``);
2. ``compressed_tensors.quantization.lifecycle.initialize.initialize_module_for_quantization``
   on a ``torch.nn.Linear`` holding the weight in its own dtype: registers ``weight_scale``
   (dtype of the weight) and ``weight_global_scale`` (float32);
3. ``compressed_tensors.quantization.utils.generate_gparam(min, max)``: the global scale
   ``448 * 6 / max(|min|, |max|)``, computed **in the dtype of the statistics** (the weight's),
   NaN / inf replaced by 1.0, stored as float32: the reciprocal of the spec's s_g
   (NVFP4-GS-4);
4. ``compressed_tensors.quantization.utils.calculate_qparams(min_vals, max_vals, args,
   global_scale)``: per group ``global_scale * (max(|min|, |max|) / 6)``, clamped to +-448 and
   cast to ``float8_e4m3fn`` (``round_to_quantized_type_dtype``), a 0 replaced by 0.125;
5. ``compressed_tensors.compressors.nvfp4.base.NVFP4PackedCompressor.compress(state_dict,
   scheme)``: ``quantize`` (``scale / global_scale``, then ``x / that``, ``cast_to_fp4``'s
   threshold rounding) and ``pack_fp4_to_uint8`` (element 2i in the low nibble), the scale cast
   to ``float8_e4m3fn``; its ``weight_packed``, ``weight_scale`` and ``weight_global_scale``
   are read as stored.

The per-group minima and maxima of step 4 are ``torch.amin`` / ``torch.amax`` over the groups
in the weight's dtype (what llm-compressor's ``memoryless_minmax`` observer computes; exact).
The scales returned by step 4 are copied into the module's ``weight_scale`` parameter, as
llm-compressor's ``update_qparams`` does (``copy_``: exact, E4M3 values fit every weight dtype).

A caller's ``global_scale`` s_g (NVFP4-GS-3), or the spec's s_g for a ``scale_ceiling`` other
than 448 (which compressed-tensors has no parameter for), is passed as the stored reciprocal
``r = fp32(1 / s_g)`` (NVFP4-GS-4's writer rule), in place of step 3.
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, GROUP_SIZE
from hscale.reference.global_scale import reciprocal_from_multiplier

GROUP = GROUP_SIZE


class CompressedTensorsNVFP4:
    name = "compressed-tensors-nvfp4"
    capabilities = common.RTN_ONLY
    global_scale_convention = "reciprocal"  # weight_global_scale = 448 * 6 / amax
    library_modules = ("compressed_tensors.compressors.nvfp4.base",)
    distributions = ("compressed-tensors",)

    @property
    def version(self) -> str:
        return common.dist_version(*self.distributions)

    def available(self):
        return common.module_status(*self.library_modules)

    # -- the steps ------------------------------------------------------------------------------
    def scheme(self):
        from compressed_tensors.quantization import preset_name_to_scheme

        return preset_name_to_scheme("NVFP4A16", ["Linear"])

    def module(self, data, scheme):
        """A ``torch.nn.Linear`` holding ``data``, initialised for quantization by
        compressed-tensors (``weight_scale``, ``weight_global_scale``)."""
        import torch
        from compressed_tensors.quantization.lifecycle.initialize import \
            initialize_module_for_quantization

        rows, cols = data.shape
        linear = torch.nn.Linear(cols, rows, bias=False, dtype=data.dtype)
        with torch.no_grad():
            linear.weight.copy_(data)
        initialize_module_for_quantization(linear, scheme)
        return linear

    def qparams(self, linear, scheme, reciprocal):
        """Fill ``weight_scale`` and ``weight_global_scale`` (compressed-tensors' own qparams
        from the group minima and maxima)."""
        import torch
        from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

        groups = linear.weight.detach().unflatten(-1, (-1, GROUP))
        min_vals, max_vals = torch.amin(groups, dim=-1), torch.amax(groups, dim=-1)
        if reciprocal is None:
            global_scale = generate_gparam(min_vals.min().reshape(1), max_vals.max().reshape(1))
        else:
            global_scale = torch.tensor([float(reciprocal)], dtype=torch.float32)
        scale, _zero_point = calculate_qparams(min_vals, max_vals, scheme.weights,
                                               global_scale=global_scale)
        self.store(linear, scale, global_scale)

    @staticmethod
    def store(linear, scale, global_scale):
        """The qparams into the module's parameters, as llm-compressor's ``update_qparams``
        does (``copy_`` into the existing parameters)."""
        import torch

        with torch.no_grad():
            linear.weight_scale.copy_(scale)
            linear.weight_global_scale.copy_(global_scale)

    def compress(self, linear, scheme):
        from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor

        state = {name: p.data for name, p in linear.named_parameters()}
        return NVFP4PackedCompressor.compress(state, scheme)

    # -- the protocol ---------------------------------------------------------------------------
    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        weight, ceiling, given = common.check_arguments(self, weight, hessian_diag, method, init,
                                                        K, U, scale_ceiling, global_scale)
        passed = common.ceiling_global_scale(weight, ceiling, given)
        reciprocal = None if passed is None else reciprocal_from_multiplier(passed)
        scheme = self.scheme()
        linear = self.module(common.torch_weight(weight), scheme)
        self.qparams(linear, scheme, reciprocal)
        stored = self.compress(linear, scheme)
        stored_reciprocal = np.float32(stored["weight_global_scale"].reshape(()).item())
        return common.LibraryResult(common.fp8_bytes(stored["weight_scale"]), stored_reciprocal,
                                    packed=common.fp8_bytes(stored["weight_packed"]))


def create():
    return CompressedTensorsNVFP4()
