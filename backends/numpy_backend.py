"""The ``numpy`` backend: the reference itself, behind the backend protocol (the weight
quantizer, and the GEMM: the exact sum rounded once, ``hscale.reference.accumulation``)."""

from __future__ import annotations

import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES

from . import gemm as gemm_kind


class NumpyReferenceBackend:
    name = "numpy"
    version = f"hscale.reference {__version__}, numpy {np.__version__}"
    capabilities = CAPABILITIES
    kinds = gemm_kind.KINDS
    gemm_model = gemm_kind.GEMM_MODEL
    gemm_out_dtypes = gemm_kind.GEMM_OUT_DTYPES
    gemm_activations = gemm_kind.GEMM_ACTIVATIONS
    gemm_scale_layout = gemm_kind.GEMM_SCALE_LAYOUT
    hands_back_objectives = True  # quantize(objectives=True): the search's group objectives

    def available(self):
        return True, ""

    def gemm(self, a, b, *, out_dtype="float32"):
        from hscale.reference.accumulation import reference_output
        return reference_output(gemm_kind.read_operand(a), gemm_kind.read_operand(b), out_dtype)

    def quantize(self, weight, hessian_diag=None, **options):
        from hscale.reference import quantize
        return quantize(weight, hessian_diag, **options)


def create():
    return NumpyReferenceBackend()
