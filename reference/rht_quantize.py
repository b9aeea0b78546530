"""Quantizing after the random Hadamard transform: what a kernel of the rht kind computes
(spec clauses NVFP4-RHT-1 .. -3, docs/spec.md section 12).

The tensor it quantizes (``x^T`` for the column-wise copy, ``x`` itself row-wise) is transformed
in blocks of 16 along its last axis and rounded by the profile (``reference.hadamard``); the
global scale is computed from the transformed values' amax (NVFP4-RHT-3: after the transform),
and the block scales and codes are those of the profile's activation recipe (``exact``: the
exact recipe, NVFP4-ACT-6; ``fast-math``: the fast-math recipe, NVFP4-ACT-2, -3).
"""

from __future__ import annotations

import numpy as np

from .activations import QuantizedActivations, quantize_activations
from .hadamard import PROFILES, TE_SIGN_MASK, rotate

AXES = ("columnwise", "rowwise")
#: The activation recipe each profile quantizes the transformed values by (NVFP4-RHT-3).
RECIPE_OF_PROFILE = {"exact": "exact", "fast-math": "fast-math"}


def transformed(x, *, mask: int = TE_SIGN_MASK, profile: str = "exact",
                axis: str = "columnwise") -> np.ndarray:
    """NVFP4-RHT-1, -2: the rounded transformed values of the tensor the kernel quantizes."""
    if profile not in PROFILES or axis not in AXES:
        raise ValueError(f"profile {profile!r} / axis {axis!r}: one of {', '.join(PROFILES)} / "
                         f"{', '.join(AXES)} (spec NVFP4-RHT-1, -2)")
    source = np.asarray(x)
    return rotate(source.T if axis == "columnwise" else source, mask, profile)


def quantize_rht(x, *, mask: int = TE_SIGN_MASK, profile: str = "exact",
                 axis: str = "columnwise") -> QuantizedActivations:
    """NVFP4-RHT-3: the transformed values quantized with the dynamic global scale of their own
    amax, by the profile's recipe."""
    y = transformed(x, mask=mask, profile=profile, axis=axis)
    return quantize_activations(y, None, recipe=RECIPE_OF_PROFILE[profile])
