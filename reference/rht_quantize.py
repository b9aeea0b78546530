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
from .hadamard import PROFILES, SIZE, TE_SIGN_MASK, rotate

AXES = ("columnwise", "rowwise")
#: What a kernel does with a transformed axis that is not a multiple of 16 (NVFP4-RHT-1):
#: refuses the tensor, or pads it with zero tokens to the next multiple of 16.
PADDINGS = ("refuse", "zeros")
#: The activation recipe each profile quantizes the transformed values by (NVFP4-RHT-3).
RECIPE_OF_PROFILE = {"exact": "exact", "fast-math": "fast-math"}


def source_of(x, axis: str = "columnwise", padding: str = "refuse") -> np.ndarray:
    """NVFP4-RHT-1: the tensor the kernel transforms (``x^T`` column-wise, ``x`` row-wise),
    its last axis padded with zeros to a multiple of 16 under ``padding="zeros"`` (under
    ``refuse`` such a tensor is refused, by ``rotate``)."""
    if axis not in AXES or padding not in PADDINGS:
        raise ValueError(f"axis {axis!r} / padding {padding!r}: one of {', '.join(AXES)} / "
                         f"{', '.join(PADDINGS)} (spec NVFP4-RHT-1)")
    source = np.asarray(x)
    source = source.T if axis == "columnwise" else source
    short = -source.shape[1] % SIZE
    if padding == "zeros" and short:
        source = np.concatenate([source, np.zeros((source.shape[0], short), source.dtype)], 1)
    return source


def transformed(x, *, mask: int = TE_SIGN_MASK, profile: str = "exact",
                axis: str = "columnwise", padding: str = "refuse") -> np.ndarray:
    """NVFP4-RHT-1, -2: the rounded transformed values of the tensor the kernel quantizes."""
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r}: one of {', '.join(PROFILES)} (spec "
                         "NVFP4-RHT-2)")
    return rotate(source_of(x, axis, padding), mask, profile)


def quantize_rht(x, *, mask: int = TE_SIGN_MASK, profile: str = "exact",
                 axis: str = "columnwise", padding: str = "refuse") -> QuantizedActivations:
    """NVFP4-RHT-3: the transformed values quantized with the dynamic global scale of their own
    amax, by the profile's recipe."""
    y = transformed(x, mask=mask, profile=profile, axis=axis, padding=padding)
    return quantize_activations(y, None, recipe=RECIPE_OF_PROFILE[profile])
