"""The ``numpy`` backend: the reference itself, behind the backend protocol."""

from __future__ import annotations

import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES


class NumpyReferenceBackend:
    name = "numpy"
    version = f"hscale.reference {__version__}, numpy {np.__version__}"
    capabilities = CAPABILITIES

    def available(self):
        return True, ""

    def quantize(self, weight, hessian_diag=None, **options):
        from hscale.reference import quantize
        return quantize(weight, hessian_diag, **options)


def create():
    return NumpyReferenceBackend()
