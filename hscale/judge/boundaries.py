"""Cases whose fp32 quotients and products land a few fp32 ulps from every rounding boundary
(every E4M3 midpoint of a scale byte, every E2M1 midpoint of a code), in every input dtype: for
the weight kind (docs/spec.md sections 1-2) and the activation kind (section 8).

Data one ulp *of the input dtype* from a boundary (what generated tensors hold) sits 2^-8 from
it in bfloat16, far beyond what an fp32 reciprocal a few ulps off moves: only a quotient or a
product a few *fp32* ulps from the boundary tells a kernel that computes it within the error the
spec allows (an exact quotient, NVFP4-INIT-1 and NVFP4-E2M1-2; a reciprocal within the one ulp
PTX states, NVFP4-ACT-5) from one further off. Such values need a constructed global scale,
since the inputs have few bits: here the inputs have at most 7 significant bits (exact in
bfloat16, float16 and float32 alike) and the global scale is ``1 + i 2^-23`` for small i, one
tensor per i:

- *scale byte* rows: a group maximum ``6 m`` for each midpoint ``m`` between two E4M3 values
  (0x00|0x01 .. 0x7D|0x7E): the weight's quotient ``amax_g / (6 s_g)`` is ``m / s_g``, the
  activation's block scale ``g * (amax_g * rcp(6))`` is ``m (1 + i 2^-23)`` rounded (the nearest
  ``rcp(6)`` gives ``6 m * rcp(6) = m`` exactly, the other neighbour ``m`` less one ulp): from
  ``i`` up to ``2 i`` fp32 ulps from the midpoint;
- *code* rows: for each E4M3 value ``v`` a group with maximum ``6 v`` (its byte is ``v``'s, a
  few ulps of the scale cannot move it) and the elements ``+-mu v`` for every E2M1 midpoint
  ``mu``: the weight's ``|w| / s`` is ``mu / s_g``, the fast-math product ``x * rcp(v *
  rcp(g))`` is ``mu (1 + i 2^-23)`` within a few ulps.

Every scale reads back (``fp32(1 / fp32(1 / g)) == g``), so a kernel given the reciprocal sees
the same scale. The exact and torchao recipes form other products of the same numbers, which
land as near the same boundaries.
"""

from __future__ import annotations

import numpy as np

from hscale.reference.constants import E2M1_MIDPOINTS, GROUP_SIZE
from hscale.reference.e4m3 import E4M3_VALUES

from .activations import ActivationCase
from .builders import exact
from .cases import Case

#: The global scales' offsets from 1, in units of 2^-23 (an fp32 ulp just above 1): products
#: from -16 to +16 fp32 ulps of every boundary, each side densely near it.
OFFSETS = tuple(range(-8, 9))
#: Byte 0x00 .. 0x7E's values, and the 126 midpoints between neighbours.
LADDER = np.asarray(E4M3_VALUES[:0x7F], dtype=np.float64)
MIDPOINTS = (LADDER[1:] + LADDER[:-1]) / 2


def global_scale(offset: int) -> np.float32:
    """``g = 1 + offset * 2^-23`` (exact in fp32, and reading back)."""
    g = np.float32(1.0 + offset * 2.0 ** -23)
    one = np.float32(1)
    assert one / (one / g) == g, offset  # noqa: S101 - the construction's own claim
    return g


def block_scale_rows() -> np.ndarray:
    """(126, 16) float64: per E4M3 midpoint m, a group whose maximum is 6 m (the other
    elements smaller, of both signs, -0.0 among them)."""
    rows = np.zeros((len(MIDPOINTS), GROUP_SIZE))
    rows[:, 0] = 6 * MIDPOINTS
    rows[:, 1] = -0.0
    rows[:, 2:] = -MIDPOINTS[:, None] * np.resize([1.0, -2.0, 3.0, -0.5], GROUP_SIZE - 2)
    return rows


def code_rows() -> np.ndarray:
    """(126, 16) float64: per non-zero E4M3 value v, the group [6 v, +-mu v for the seven E2M1
    midpoints mu, -0.0]."""
    values = LADDER[1:]
    mids = np.asarray(E2M1_MIDPOINTS, dtype=np.float64)
    rows = np.zeros((len(values), GROUP_SIZE))
    rows[:, 0] = 6 * values
    rows[:, 1:1 + len(mids)] = mids * values[:, None]
    rows[:, 1 + len(mids):1 + 2 * len(mids)] = -mids * values[:, None]
    rows[:, GROUP_SIZE - 1] = -0.0
    return rows


def _rows(dtype) -> np.ndarray:
    return exact(np.concatenate([block_scale_rows(), code_rows()]), dtype)


def boundary_cases(dtype) -> list[ActivationCase]:
    """The activation kind's: one tensor per offset of :data:`OFFSETS`, the scale-byte rows
    then the code rows, in ``dtype`` (every value exact there), its static global scale
    ``g = 1 + offset 2^-23``."""
    x = _rows(dtype)
    name = np.dtype(dtype).name
    return [ActivationCase(x, global_scale(offset), id=f"act-boundaries-{name}-{offset:+d}",
                           title=f"fp32 products within {2 * abs(offset) or 1} ulps of every "
                                 f"E4M3 and E2M1 boundary, {name}, g = 1 {offset:+d} * 2^-23",
                           clauses=("NVFP4-ACT-5",))
            for offset in OFFSETS]


def weight_boundary_cases(dtype) -> list[Case]:
    """The weight kind's: the same rows, RTN with a caller's ``s_g = 1 + offset 2^-23``
    (NVFP4-GS-3), one case per offset: the exact quotients ``amax_g / (6 s_g)`` and ``|w| / s``
    a few fp32 ulps from every E4M3 and E2M1 midpoint (NVFP4-INIT-1, NVFP4-E2M1-2)."""
    w = _rows(dtype)
    name = np.dtype(dtype).name
    return [Case(w, None, method="rtn", global_scale=global_scale(offset),
                 id=f"boundaries-{name}-{offset:+d}",
                 title=f"quotients within {2 * abs(offset) or 1} fp32 ulps of every E4M3 and "
                       f"E2M1 midpoint, {name}, s_g = 1 {offset:+d} * 2^-23",
                 clauses=("NVFP4-INIT-1", "NVFP4-E2M1-2", "NVFP4-E4M3-2"))
            for offset in OFFSETS]
