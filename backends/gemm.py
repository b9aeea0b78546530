"""The GEMM of the built-in backends (spec section 10): what they declare for the gemm kind,
and how they read the operands a kernel receives.

An operand arrives as a GEMM kernel receives it (``hscale.judge.gemm.GemmOperand``: packed
codes, scale bytes in the declared layout, the global scale), or, for the weight-only GEMM
(NVFP4-GEMM-8), as an array of activations. The built-in backends declare row-major scale
bytes, every output dtype and every first operand, and the fp32 accumulation model with the
global scales on the accumulator (NVFP4-GEMM-4, -4).
"""

from __future__ import annotations

import numpy as np

from hscale.reference.gemm import Nvfp4Tensor

KINDS = frozenset({"weight", "gemm"})
GEMM_MODEL = "fp32"
GEMM_OUT_DTYPES = ("float32", "bfloat16", "float16")
GEMM_ACTIVATIONS = ("nvfp4", "float32", "bfloat16", "float16")
GEMM_SCALE_LAYOUT = "row-major"


def read_operand(operand):
    """An NVFP4 operand as the reference reads it (codes, row-major scale bytes, global scale),
    or the activations array unchanged."""
    if isinstance(operand, np.ndarray):
        return operand
    if getattr(operand, "scale_layout", "row-major") != GEMM_SCALE_LAYOUT:
        raise ValueError(f"scale bytes in layout {operand.scale_layout!r}: this backend "
                         f"declares {GEMM_SCALE_LAYOUT} (gemm_scale_layout)")
    return Nvfp4Tensor.from_packed(operand.packed, operand.scale_bytes, operand.global_scale)
