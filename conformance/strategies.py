"""Hypothesis strategies: a weighted mix of group kinds, in the manner of TestFloat.

Structural choices (the kind of each group, the ladder byte, the dtype, where the ties go, the
global-scale mode, the window, the h kind) are drawn by Hypothesis, so that it can steer and
shrink them; bulk values come from a NumPy generator seeded by a drawn integer.

Group kinds and their weights (``GROUP_KINDS``):

=================  ==  =========================================================================
grid               3   exact E2M1 grid points times one or two ladder scales
ties               3   elements exactly on E2M1 midpoints, or one ulp (in the input dtype) off
e4m3-midpoint      2   the group maximum on the midpoint of two ladder values (+-1 ulp),
                       subnormal ladder bytes and the ladder's top favoured
ladder-ends        2   initial bytes near 0x01 (windows clip at the bottom) or 0x7E (the top)
random             2   normal values at a random scale
zero               1   every element +0.0 or -0.0
constant           1   one magnitude repeated, random signs
dynamic-range      1   magnitudes spread over 2^-40 .. 2^40
=================  ==  =========================================================================

On top: -0.0 and +0.0 sprinkled into any group; inputs in float32 (most), float16, bfloat16;
the global scale given (a power of two, a few-bit or a random fp32 value), computed from an
anchor element ``6 C s_g`` or computed freely; scale ceilings 448, 256 and odd ones; windows
the default and random (K, U); h all ones, random, with zeros, with a huge spread, all zero,
powers of two.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from hscale.judge.builders import BF16, F16, F32, L
from hscale.judge.cases import Case
from hscale.judge.independent import GROUP, MAGNITUDES, MIDPOINTS

DTYPE_CHOICES = [F32, F32, F32, F16, BF16]
_UINT = {2: np.uint16, 4: np.uint32}
GROUP_KINDS = (["grid"] * 3 + ["ties"] * 3 + ["e4m3-midpoint"] * 2 + ["ladder-ends"] * 2
               + ["random"] * 2 + ["zero", "constant", "dynamic-range"])
H_KINDS = ["ones", "uniform", "uniform", "with-zeros", "huge-spread", "all-zero", "powers-of-two",
           "small-integers"]


def dtype_max(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).max)


def to_dtype(values: np.ndarray, dtype) -> np.ndarray:
    """Cast float64 values to ``dtype``, clipping to its finite range (never inf)."""
    top = dtype_max(dtype)
    return np.clip(values, -top, top).astype(dtype)


def ulp_step(values: np.ndarray, ulps: np.ndarray, dtype) -> np.ndarray:
    """Values (float64) moved by ``ulps`` units in the last place of ``dtype`` (magnitude-wise)."""
    v = to_dtype(values, dtype)
    uint = _UINT[np.dtype(dtype).itemsize]
    bits = v.view(uint).astype(np.int64)
    mag = bits & ((1 << (8 * v.itemsize - 1)) - 1)
    sign = bits - mag
    moved = np.clip(mag + ulps, 0, None)
    top = int(np.array(dtype_max(dtype), dtype=dtype).view(uint))
    moved = np.minimum(moved, top)
    return (sign + moved).astype(uint).view(dtype).astype(np.float64)


@st.composite
def global_scales(draw, dtype=F32) -> float:
    """A positive normal fp32 s_g such that 2688 s_g stays inside ``dtype``'s range."""
    lo, hi = (-24, 3) if np.dtype(dtype) == F16 else (-110, 100)
    e = draw(st.integers(lo, hi))
    kind = draw(st.sampled_from(["pow2", "pow2", "few-bits", "random"]))
    if kind == "pow2":
        m = 1.0
    elif kind == "few-bits":
        m = draw(st.sampled_from([1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875, 1.3125, 1.03125]))
    else:
        m = 1.0 + draw(st.integers(0, 2 ** 23 - 1)) / 2 ** 23
    return float(np.float32(m * 2.0 ** e))


def _byte(draw, bias="any") -> int:
    if bias == "ends":
        return draw(st.one_of(st.integers(1, 10), st.integers(116, 126)))
    return draw(st.one_of(st.integers(1, 126), st.integers(1, 9), st.integers(56, 72),
                          st.integers(118, 126)))


@st.composite
def group_values(draw, sg: float, dtype, rng: np.random.Generator, kind: str | None = None):
    """16 float64 values of one group, of a drawn kind (already representable in ``dtype``)."""
    kind = kind or draw(st.sampled_from(GROUP_KINDS))
    signs = np.where(rng.random(GROUP) < 0.5, -1.0, 1.0)
    if kind == "grid":
        c = _byte(draw)
        scales = np.array([L(c), L(min(126, max(1, c + draw(st.integers(-3, 3)))))]) * sg
        v = rng.choice(MAGNITUDES, GROUP) * rng.choice(scales, GROUP) * signs
        if draw(st.booleans()):
            v[rng.integers(GROUP)] = 6.0 * scales[0]
    elif kind == "ties":
        c = _byte(draw)
        s = L(c) * sg
        mids = rng.choice(MIDPOINTS, GROUP) * s
        offsets = rng.choice(np.array(draw(st.sampled_from([[0], [0, -1, 1], [-1, 1], [0, 0, 1]]))),
                             GROUP)
        v = ulp_step(mids, offsets, dtype) * signs
        if draw(st.booleans()):
            v[rng.integers(GROUP)] = 6.0 * s * signs[0]  # pin c0 to c
    elif kind == "e4m3-midpoint":
        c = draw(st.one_of(st.integers(1, 125), st.integers(1, 9), st.integers(118, 125)))
        amax = 6.0 * sg * (L(c) + L(c + 1)) / 2
        amax = float(ulp_step(np.array([amax]), np.array([draw(st.integers(-1, 1))]), dtype)[0])
        v = rng.uniform(-1, 1, GROUP) * amax
        v[rng.integers(GROUP)] = amax * signs[0]
    elif kind == "ladder-ends":
        c = _byte(draw, "ends")
        amax = 6.0 * L(c) * sg * float(rng.uniform(0.9, 1.1))
        v = rng.uniform(-1, 1, GROUP) * amax * rng.choice([1.0, 0.1, 0.01], GROUP)
        v[rng.integers(GROUP)] = amax * signs[0]
    elif kind == "random":
        v = rng.standard_normal(GROUP) * sg * 2.0 ** draw(st.integers(-4, 12))
    elif kind == "zero":
        v = np.where(rng.random(GROUP) < 0.5, -0.0, 0.0)
    elif kind == "constant":
        mag = (float(rng.choice(MAGNITUDES[1:])) * L(_byte(draw)) * sg
               if draw(st.booleans()) else abs(float(rng.standard_normal())) * sg * 100)
        v = mag * signs
    else:  # dynamic-range
        v = signs * 2.0 ** rng.uniform(-40, 40, GROUP) * sg * 100
    v = to_dtype(np.asarray(v, dtype=np.float64), dtype).astype(np.float64)
    if kind != "zero" and draw(st.integers(0, 3)) == 0:
        at = rng.random(GROUP) < 0.2
        v[at] = np.where(rng.random(GROUP) < 0.5, -0.0, 0.0)[at]
    return v


@st.composite
def hessians(draw, n: int, rng: np.random.Generator, kind: str | None = None) -> np.ndarray:
    kind = kind or draw(st.sampled_from(H_KINDS))
    if kind == "ones":
        return np.ones(n)
    if kind == "uniform":
        return rng.random(n) * 10.0 ** draw(st.integers(-3, 6))
    if kind == "with-zeros":
        return np.where(rng.random(n) < 0.4, 0.0, rng.random(n))
    if kind == "huge-spread":
        return 10.0 ** rng.uniform(-30, 30, n)
    if kind == "all-zero":
        return np.zeros(n)
    if kind == "powers-of-two":
        return 2.0 ** rng.integers(-20, 21, n).astype(float)
    return rng.integers(0, 4, n).astype(float)  # small-integers


@st.composite
def windows(draw) -> tuple[int, int]:
    if draw(st.integers(0, 2)):
        return 16, 6
    K = draw(st.integers(1, 24))
    return K, draw(st.integers(0, K - 1))


@st.composite
def cases(draw, methods, inits, max_rows: int = 4, max_groups: int = 4, method: str | None = None,
          init: str | None = None, dtype=None, h_kind: str | None = None, sg_mode: str | None = None,
          window: tuple[int, int] | None = None, ceiling: float | None = None,
          dtypes=None) -> Case:
    """A small layer and the options of one quantize call, its weight in ``dtype`` or drawn
    from ``dtypes`` (default: every input dtype, float32 the most often)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    choices = [d for d in DTYPE_CHOICES if dtypes is None or d in [np.dtype(x) for x in dtypes]]
    dtype = np.dtype(dtype or draw(st.sampled_from(choices or list(dtypes))))
    sg = draw(global_scales(dtype))
    rows = draw(st.integers(1, max_rows))
    gcols = draw(st.integers(1, max_groups))
    w = np.stack([draw(group_values(sg, dtype, rng)) for _ in range(rows * gcols)])
    w = w.reshape(rows, gcols * GROUP)
    C = ceiling if ceiling is not None else draw(st.sampled_from([448.0, 448.0, 256.0, 300.5, 7.0]))
    mode = sg_mode or draw(st.sampled_from(["given", "given", "anchored", "free"]))
    given = None
    if mode == "given":
        given = sg
    elif mode == "anchored":
        anchor = float(to_dtype(np.array([6.0 * C * sg]), dtype)[0])
        w = np.clip(w, -anchor, anchor)
        w[rng.integers(rows), rng.integers(gcols * GROUP)] = anchor * (1 if rng.random() < .5 else -1)
    if given is None:
        # NVFP4-GS-2: a computed s_g must dequantize finitely, fp32(6 * 448 * s_g) < inf
        limit = float(np.finfo(np.float32).max) * C / 448.0 * 0.99
        w = np.clip(w, -limit, limit)
    weight = to_dtype(w, dtype)
    method = method or draw(st.sampled_from(methods))
    init = init or draw(st.sampled_from(inits))
    K, U = window or draw(windows())
    h = draw(hessians(gcols * GROUP, rng, h_kind))
    return Case(weight, h, method=method, init=init, K=K, U=U, scale_ceiling=C,
                global_scale=given, title=f"hypothesis ({mode} s_g)")
