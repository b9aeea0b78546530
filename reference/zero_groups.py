"""Zero groups (spec clause NVFP4-ZERO-1).

A group whose largest magnitude is 0 (every element +0.0 or -0.0) has no scale to choose: its
scale byte is 0x00, its codes carry only the sign bit of each element, and it is neither
initialised nor searched.
"""

from __future__ import annotations

import numpy as np

from .e2m1 import SIGN_BIT

ZERO_GROUP_BYTE = 0x00  # NVFP4-ZERO-1


def is_zero_group(group_amax: np.ndarray) -> np.ndarray:
    """True for the groups whose maximum magnitude is 0 (NVFP4-ZERO-1)."""
    return np.asarray(group_amax) == 0


def zero_group_codes(groups: np.ndarray) -> np.ndarray:
    """Codes of a zero group: the sign bit of each element and magnitude 0 (NVFP4-ZERO-1, with
    the sign rule of NVFP4-E2M1-3, so -0.0 gives 0x8)."""
    return np.where(np.signbit(groups), SIGN_BIT, 0).astype(np.uint8)  # NVFP4-ZERO-1
