"""The engines' CUDA activation quantizers behind the activation kind (docs/spec.md section 8,
recipe ``fast-math``): vLLM's ``scaled_fp4_quant`` and FlashInfer's ``fp4_quantize``. Both need
a CUDA device of their architecture (their FP4 conversions are ``cvt...e2m1x2``, Blackwell,
SM100 and later) and their CUDA wheel; ``available()`` says which is missing, and the suite then
skips with that reason. The lent GPU machines of this project (H100, H200: Hopper, SM90) can
run neither, and have no network to install either wheel (docs/interop.md, "Not run").

Library functions called (the sources read at vLLM v0.33 ``vllm/_custom_ops.py`` and FlashInfer
0.7 ``flashinfer/fp4_quantization.py``):

- vLLM: ``vllm._custom_ops.scaled_fp4_quant(x, input_global_scale)`` with ``x`` bfloat16 or
  float16 on the GPU and ``input_global_scale`` the fp32 tensor ``g`` (``6 * 448 / amax``, the
  compressed-tensors ``input_global_scale``); it returns the packed codes (uint8 ``[m, n/2]``)
  and the block scales in the 128x4 layout (float8_e4m3fn, rows padded to 128, scale columns to
  4; the padding is written as zeros since vllm#31097 and #53568, while the small-M path through
  FlashInfer's 8x4 layout could return non-zero padding, vllm#37563, fix open in #47587: what
  NVFP4-ACT-10 judges);
- FlashInfer: ``flashinfer.fp4_quantize(x, global_scale, sf_vec_size=16, sf_use_ue8m0=False,
  is_sf_swizzled_layout=..., is_sf_8x4_layout=...)``, the same contract, in the 128x4, the 8x4
  or the row-major ("linear") layout; ``TRTLLM_DISABLE_FP4_QUANT_FAST_MATH=1`` in the
  environment selects the exact recipe (``create_flashinfer_exact``).
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from hscale.backends.interop import common

#: The compute capability the FP4 conversion instructions need (Blackwell).
FP4_CAPABILITY = (10, 0)


def cuda_fp4_status(module: str) -> tuple[bool, str]:
    """``(True, "")`` when ``module`` imports and a CUDA device of compute capability 10.0 or
    later is visible, else ``(False, why)``."""
    ok, why = common.module_status(module)
    if not ok:
        return False, (f"{why} (its CUDA wheel is not installed; it needs a Blackwell GPU, "
                       "compute capability 10.0 or later)")
    import torch
    if not torch.cuda.is_available():
        return False, "needs a CUDA device (Blackwell, compute capability 10.0 or later): none"
    capability = torch.cuda.get_device_capability()
    if capability < FP4_CAPABILITY:
        return False, (f"needs compute capability 10.0 or later for its FP4 conversions, the "
                       f"device {torch.cuda.get_device_name()} has {capability[0]}.{capability[1]}")
    return True, ""


def _cuda_input(x):
    import torch
    data = common.torch_weight(np.asarray(x), accepts=("bfloat16", "float16"))
    return data.cuda()


class VllmActivations:
    name = "vllm-scaled-fp4-quant"
    kinds = frozenset({"activation"})
    activation_recipe = "fast-math"
    activation_scale_layout = "swizzled-128x4"
    activation_dtypes = ("bfloat16", "float16")

    @property
    def version(self) -> str:
        return common.dist_version("vllm")

    def available(self):
        return cuda_fp4_status("vllm._custom_ops")

    def quantize_activations(self, x, global_scale=None):
        import torch
        ops = importlib.import_module("vllm._custom_ops")
        if global_scale is None:
            raise ValueError("scaled_fp4_quant takes the static input_global_scale")
        g = torch.tensor([float(global_scale)], dtype=torch.float32, device="cuda")
        packed, scales = ops.scaled_fp4_quant(_cuda_input(x), g)
        return common.LibraryResult(common.fp8_bytes(scales).reshape(-1), np.float32(g.item()),
                                    packed=common.fp8_bytes(packed))


class FlashInferActivations:
    kinds = frozenset({"activation"})
    activation_dtypes = ("bfloat16", "float16")

    def __init__(self, layout: str = "swizzled-128x4", exact: bool = False):
        self.activation_scale_layout = layout
        self.activation_recipe = "exact" if exact else "fast-math"
        self.exact = exact
        suffix = {"swizzled-128x4": "", "swizzled-8x4": "-8x4", "row-major": "-linear"}[layout]
        self.name = "flashinfer-fp4-quantize" + ("-exact" if exact else "") + suffix

    @property
    def version(self) -> str:
        return common.dist_version("flashinfer-python")

    def available(self):
        return cuda_fp4_status("flashinfer")

    def quantize_activations(self, x, global_scale=None):
        import torch
        flashinfer = importlib.import_module("flashinfer")
        if global_scale is None:
            raise ValueError("fp4_quantize takes the static global scale")
        g = torch.tensor([float(global_scale)], dtype=torch.float32, device="cuda")
        previous = os.environ.get("TRTLLM_DISABLE_FP4_QUANT_FAST_MATH")
        if self.exact:
            os.environ["TRTLLM_DISABLE_FP4_QUANT_FAST_MATH"] = "1"
        try:
            packed, scales = flashinfer.fp4_quantize(
                _cuda_input(x), g, sf_vec_size=16, sf_use_ue8m0=False,
                is_sf_swizzled_layout=self.activation_scale_layout != "row-major",
                is_sf_8x4_layout=self.activation_scale_layout == "swizzled-8x4")
        finally:
            if self.exact and previous is None:
                os.environ.pop("TRTLLM_DISABLE_FP4_QUANT_FAST_MATH", None)
        return common.LibraryResult(common.fp8_bytes(scales).reshape(-1), np.float32(g.item()),
                                    packed=common.fp8_bytes(packed))


def create_vllm():
    return VllmActivations()


def create_flashinfer():
    return FlashInferActivations()


def create_flashinfer_8x4():
    return FlashInferActivations("swizzled-8x4")


def create_flashinfer_linear():
    return FlashInferActivations("row-major")


def create_flashinfer_exact():
    return FlashInferActivations(exact=True)
