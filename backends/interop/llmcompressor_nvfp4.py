"""llm-compressor's NVFP4 weight path with its CPU scale observers, behind the backend protocol
(RTN only: each observer is its own scale rule; min-max is the spec's rule, the MSE ones are
judged under ``--profile format``).

Library functions called, as ``QuantizationModifier(scheme="NVFP4A16")`` calls them per Linear
(``llmcompressor/modifiers/quantization/quantization/base.py``: observe, then update_qparams;
the checkpoint is then written by compressed-tensors' compressor):

1. compressed-tensors ``preset_name_to_scheme("NVFP4A16", ["Linear"])`` and
   ``initialize_module_for_quantization`` on a ``torch.nn.Linear`` holding the weight in its own
   dtype (see ``compressed_tensors_nvfp4``), with ``scheme.weights.observer`` set to the
   observer's registry name;
2. ``llmcompressor.modifiers.quantization.calibration.initialize_observer(linear, "weight")``
   (``Observer.load_from_registry``), ``observe(linear, "weight")`` (the observer's
   ``update_statistics_from_observed``: group minima and maxima, or the MSE grid search's) and
   ``update_qparams(linear, "weight")`` (``Observer.get_qparams``: ``get_global_scale``, which
   calls compressed-tensors ``generate_gparam`` on the observed absolute maximum in the
   statistics' dtype, then ``calculate_qparams``), copied into ``weight_scale`` /
   ``weight_global_scale``;
3. compressed-tensors ``NVFP4PackedCompressor.compress(state_dict, scheme)``: ``quantize`` and
   ``pack_fp4_to_uint8``; ``weight_packed``, ``weight_scale`` (float8_e4m3fn) and
   ``weight_global_scale`` (float32, the reciprocal 448 * 6 / amax, NVFP4-GS-4) are read as
   stored.

Observers (llm-compressor 0.14, ``llmcompressor/observers``): ``memoryless_minmax`` (the default
for weights), ``memoryless_mse`` (what ``observer="mse"`` becomes for weights: a shrink-only grid
p = 1 - i/100, i < 20, patience 5, norm 2.4), ``nvfp4_expanded_mse`` (grid from 1.8x down to 0.8x
of the group range, 200 steps, patience 1000) and ``fouroversix`` (in 0.14 an alias of
``nvfp4_expanded_mse`` that warns so; not the 4-or-6 choice of NVFP4-INIT-2).

A caller's ``global_scale`` s_g (NVFP4-GS-3), or the spec's s_g for a ``scale_ceiling`` other
than 448, replaces ``get_global_scale``: the observer's statistics go through
``calculate_qparams`` with the stored reciprocal ``r = fp32(1 / s_g)``, which is what
``Observer.get_qparams`` does with its own global scale.
"""

from __future__ import annotations

from hscale.backends.interop import common
from hscale.backends.interop.compressed_tensors_nvfp4 import CompressedTensorsNVFP4

OBSERVERS = ("memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse", "fouroversix",
             "imatrix_mse")


class LLMCompressorNVFP4(CompressedTensorsNVFP4):
    library_modules = ("llmcompressor.observers", "llmcompressor.modifiers.quantization.calibration",
                       "compressed_tensors.compressors.nvfp4.base")
    distributions = ("llmcompressor", "compressed-tensors")

    def __init__(self, observer: str = "memoryless_minmax", importance=None):
        if observer not in OBSERVERS:
            raise ValueError(f"observer {observer!r}: one of {', '.join(OBSERVERS)}")
        self.observer = observer
        # imatrix_mse: h = diag(X^T X), fed through the observer's own forward pre-hook
        self.importance = importance
        self.name = f"llmcompressor-{observer.replace('_', '-')}"

    def scheme(self):
        scheme = super().scheme()
        scheme.weights.observer = self.observer
        return scheme

    def qparams(self, linear, scheme, reciprocal):
        import warnings

        import torch
        from compressed_tensors.quantization.utils import calculate_qparams
        from llmcompressor.modifiers.quantization.calibration import (initialize_observer,
                                                                      observe, update_qparams)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the fouroversix alias warns
            initialize_observer(linear, "weight")
        if self.importance is not None:
            self.gather_importance(linear)
        observe(linear, "weight")
        if reciprocal is None:
            update_qparams(linear, "weight")
            return
        observer = linear.weight_observer
        global_scale = torch.tensor([float(reciprocal)], dtype=torch.float32)
        scale, _zero_point = calculate_qparams(observer.min_vals, observer.max_vals,
                                               observer.args, global_scale=global_scale)
        observer.delete_statistics()
        self.store(linear, scale, global_scale)


    def gather_importance(self, linear):
        """The imatrix observer's ``attach`` hook (E[x^2] per input channel) fed one token per
        input channel, token j = sqrt(h_j) e_j, so its sum of x^2 is h (up to the square
        root's rounding); the observer divides by the token count and by the mean, so only h's
        proportions matter. The forward itself is not used."""
        import numpy as np
        import torch
        observer = linear.weight_observer
        observer.attach(linear)
        tokens = torch.diag(torch.from_numpy(np.sqrt(np.asarray(self.importance, np.float64))))
        try:
            with torch.no_grad():
                linear(tokens.to(linear.weight.dtype))
        finally:
            observer.detach(linear)


def create():
    """The default weight observer, memoryless min-max: the spec's RTN rule."""
    return LLMCompressorNVFP4("memoryless_minmax")


def create_mse():
    return LLMCompressorNVFP4("memoryless_mse")


def create_expanded_mse():
    return LLMCompressorNVFP4("nvfp4_expanded_mse")


def create_fouroversix():
    return LLMCompressorNVFP4("fouroversix")


def create_imatrix_mse(importance=None):
    """llm-compressor's ``imatrix_mse`` observer (0.11+): E[x^2]-weighted grid search,
    norm 3, shrink-only multipliers scored with fp32 scales; ``importance`` h = diag(X^T X)."""
    return LLMCompressorNVFP4("imatrix_mse", importance)
