"""Hypothesis strategies for activation tensors (the activation kind): a weighted mix of group
kinds, in the manner of TestFloat, where the run-time recipes split.

Group kinds and their weights (``ACTIVATION_GROUP_KINDS``):

=================  ==  =========================================================================
random             3   normal values at a random scale (the activations of a real layer)
sf-midpoint        3   the group maximum at ``6 m / g`` for an E4M3 midpoint m (+-1 ulp): where
                       the recipes' associations and rcp(6) move a byte
ties               2   elements on E2M1 midpoints of the group's scale (+-1 ulp): where an
                       approximate reciprocal moves a code
tiny               1   a maximum whose block scale is subnormal or rounds to 0 (no 0x01 floor)
saturating         1   a maximum above ``448 * 6 / g``: a static scale below the run-time amax
zero               1   every element +0.0 or -0.0
outlier            1   one large element among small ones
=================  ==  =========================================================================

On top: -0.0 and small negatives sprinkled in; the input in one of the backend's dtypes; the
global scale ``g`` a calibration's (``2688 / amax_cal`` for an amax near the tensor's, its
reciprocal reading back, HSCALE-CAL-2) or a power of two, or none (the kernel's own, where it
declares the dynamic mode).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from hscale.judge.activations import ActivationCase
from hscale.judge.builders import BF16, F16, F32
from hscale.reference.constants import E2M1_MAGNITUDES, E2M1_MIDPOINTS, GROUP_SIZE
from hscale.reference.e4m3 import E4M3_VALUES

from .strategies import to_dtype, ulp_step

ACTIVATION_GROUP_KINDS = (["random"] * 3 + ["sf-midpoint"] * 3 + ["ties"] * 2
                          + ["tiny", "saturating", "zero", "outlier"])
E4M3_MIDPOINTS = (E4M3_VALUES[1:127] + E4M3_VALUES[:126]) / 2  # 0x00|0x01 .. 0x7D|0x7E


def read_back_scale(amax: float) -> np.float32:
    """``g = fp32(1 / a)`` for ``a = fp32(amax / 2688)`` raised to read back (HSCALE-CAL-2's
    scales: a kernel given g and one given a = fp32(1/g) mean the same scale)."""
    one = np.float32(1)
    a = np.float32(max(float(amax), 1e-30) / 2688)
    a = one / (one / a)
    return one / a


@st.composite
def activation_scales(draw, amax: float) -> np.float32:
    """A static g: a calibration's for an amax near (or below) the tensor's, or a power of
    two."""
    kind = draw(st.sampled_from(["calibrated", "calibrated", "below", "pow2"]))
    if kind == "pow2":
        return np.float32(2.0 ** draw(st.integers(-8, 12)))
    factor = 1.0 if kind == "calibrated" else draw(st.sampled_from([0.5, 0.1, 0.01]))
    wobble = draw(st.sampled_from([1.0, 0.75, 1.3, 2.0]))
    return read_back_scale(max(amax, 1e-6) * factor * wobble)


def group_values(kind: str, g: float, rng: np.random.Generator, dtype) -> np.ndarray:
    """16 float64 values of one group of the named kind (exact in float64; the caller rounds
    into the dtype)."""
    if kind == "zero":
        return np.where(rng.random(GROUP_SIZE) < 0.5, -0.0, 0.0)
    if kind == "random":
        return rng.standard_normal(GROUP_SIZE) * 10.0 ** rng.uniform(-3, 3)
    if kind == "outlier":
        values = rng.standard_normal(GROUP_SIZE) * 0.01
        values[rng.integers(GROUP_SIZE)] = rng.choice([-1, 1]) * 10.0 ** rng.uniform(0, 3)
        return values
    if kind == "tiny":
        return rng.standard_normal(GROUP_SIZE) * 6 * 2.0 ** -10 / g * rng.uniform(0.01, 1)
    if kind == "saturating":
        return rng.standard_normal(GROUP_SIZE) * 6 * 448 / g * rng.uniform(1.1, 20)
    mid = float(E4M3_MIDPOINTS[rng.integers(len(E4M3_MIDPOINTS))])
    top = 6 * mid / g
    if kind == "sf-midpoint":
        values = rng.uniform(-1, 1, GROUP_SIZE) * top
        values[0] = float(ulp_step(np.array([top]), np.array([rng.integers(-1, 2)]), dtype)[0])
        return values
    # ties: the maximum at 6 v / g for a ladder value v (its block scale is v), the others on
    # E2M1 midpoints of that scale (or one ulp off)
    scale = float(E4M3_VALUES[rng.integers(1, 127)]) / g
    mids = rng.choice(E2M1_MIDPOINTS, GROUP_SIZE) * scale * rng.choice([-1, 1], GROUP_SIZE)
    values = ulp_step(mids, rng.integers(-1, 2, GROUP_SIZE), dtype)
    values[0] = E2M1_MAGNITUDES[-1] * scale
    return values


@st.composite
def activation_cases(draw, dtypes, dynamic: bool = False, max_tokens: int = 6,
                     max_groups: int = 4) -> ActivationCase:
    """An activation tensor in one of ``dtypes`` and its global scale (None: dynamic, drawn
    only when ``dynamic``). The scale is drawn first, and the groups are built around it (their
    boundaries are the scale's)."""
    dtype = draw(st.sampled_from(list(dtypes)))
    tokens = draw(st.integers(1, max_tokens))
    group_count = draw(st.integers(1, max_groups))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    nominal = 10.0 ** draw(st.integers(-2, 3))
    g = draw(activation_scales(nominal))
    rows = []
    for _ in range(tokens):
        kinds = [draw(st.sampled_from(ACTIVATION_GROUP_KINDS)) for _ in range(group_count)]
        rows.append(np.concatenate([group_values(k, float(g), rng, dtype) for k in kinds]))
    values = np.stack(rows)
    sprinkle = rng.random(values.shape) < 0.05
    values = np.where(sprinkle, -rng.uniform(0, 1e-3, values.shape) * np.abs(values).max(),
                      values)
    x = to_dtype(values, dtype)
    if dynamic and draw(st.booleans()):
        g = None
    return ActivationCase(x, g, title="generated")


#: The dtypes the strategies draw from, and how often.
ACTIVATION_DTYPES = [BF16, BF16, F16, F32]
