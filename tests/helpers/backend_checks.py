"""Bit-for-bit comparisons of a backend's result with the reference's, and the seeded layer
whose groups exercise the vectorised code paths (zero groups, -0.0, constant groups, window
clipping at byte 0x01, fp32 subnormals, h with zeros and a huge spread), and the hard layer
built from exact constructions (ties, both ends of the ladder, saturation)."""

from __future__ import annotations

import numpy as np
import pytest

from hscale.judge.builders import L, group_at
from hscale.reference import quantize as reference_quantize
from hscale.reference.constants import E2M1_MIDPOINTS
from hscale.reference.objective import diagonal_blocks

FIELDS = ("codes", "packed", "scale_bytes", "delta", "initial_bytes")


def assert_identical(expected, got, context=""):
    for name in FIELDS:
        e, g = getattr(expected, name), getattr(got, name)
        assert g.dtype == e.dtype and g.shape == e.shape, (
            f"{context}: {name} is {g.dtype}{g.shape}, expected {e.dtype}{e.shape}")
        if not np.array_equal(e, g):
            bad = tuple(int(i) for i in np.argwhere(e != g)[0])
            raise AssertionError(f"{context}: {name}{list(bad)} = {int(g[bad]):#x}, "
                                 f"expected {int(e[bad]):#x} ({int((e != g).sum())} differ)")
    assert type(got.global_scale) is np.float32, context
    assert got.global_scale == expected.global_scale, context
    for name in ("method", "init", "K", "U", "scale_ceiling"):
        assert getattr(got, name) == getattr(expected, name), f"{context}: {name}"


def layer(seed, rows=24, cols=256):
    """A seeded layer with outliers, zero groups, -0.0, constant groups, tiny groups (whose
    window clips at byte 0x01) and an h with zeros and a huge spread."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    w[rng.random(w.shape) < 0.01] *= 40.0  # outliers
    w[0, :16] = 0.0  # a zero group
    w[1, 16:32] = -0.0  # a zero group of negative zeros: sign-only codes 0x8
    w[1, 0:16] = 0.0
    w[1, 3] = -0.0  # -0.0 inside a non-zero group
    w[2, 32:48] = 0.75  # a constant group
    w[3, :] *= 1e-7  # tiny groups: E4M3 byte rounds to 0, c0 = 0x01, window clipped below
    w[4, 48:64] = np.float32(2.0 ** -140)  # fp32 subnormal group
    h = rng.random(cols) * 10.0 ** rng.uniform(-6, 6, cols)
    h[:16] = 0.0  # h = 0 on a whole group column: every candidate scores 0, a tie
    h[40] = 0.0
    return w, h


def assert_rejected_like_the_reference(call, *args, **options):
    """``call(*args, **options)`` raises the ValueError the reference raises, word for word."""
    with pytest.raises(ValueError) as ref_err:
        reference_quantize(*args, **options)
    with pytest.raises(ValueError) as got_err:
        call(*args, **options)
    assert str(got_err.value) == str(ref_err.value), options


S_G = np.float32(2.0 ** -4)  # the hard layer's global scale (a caller's s_g, NVFP4-GS-3)


def hard_layer(rows: int = 12, groups: int = 8):
    """(weight float32 (rows, 16 groups), h (n,), blocks (n/16, 16, 16)) built from exact
    constructions at s_g = ``S_G``: groups whose maximum lands exactly on a byte's 6 with the
    other elements on E2M1 midpoints (ties at the initial byte) and on grid points; a group at
    byte 0x7E (the window clipped above); groups at the E4M3-subnormal bytes 0x01..0x07 and
    below the ladder (clipped below); a saturating group (7 and 6.5 times the scale); +0 and
    -0.0 zero groups; fp32 subnormal weights; the rest seeded noise with outliers. h has zeros
    on a whole group and inside groups; the blocks have a zero row and column."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((rows, 16 * groups)) * 0.05).astype(np.float32)
    w[rng.random(w.shape) < 0.02] *= 30.0
    ties = [m * (1 if k % 2 else -1) for k, m in enumerate(E2M1_MIDPOINTS)]
    grid = [0.5, -1.0, 1.5, -2.0, 3.0, -4.0, 6.0, -0.0]
    made = [group_at(0x7E, float(S_G), ties + grid),  # the ladder's top: window clipped above
            group_at(0x40, float(S_G), ties + grid),
            group_at(0x39, float(S_G), grid + ties),
            group_at(0x07, float(S_G), ties),  # E4M3-subnormal scales
            group_at(0x03, float(S_G), grid[:6]),
            group_at(0x01, float(S_G), ties[:5]),  # the ladder's bottom: clipped below
            group_at(0x01, float(S_G), []) * 2.0 ** -6,  # below the ladder: c0 = 0x01
            np.array([7.0, -6.5, 6.25, 5.0] + [0.5] * 12) * L(0x30) * float(S_G)]  # saturates
    for k, group in enumerate(made):
        r, g = divmod(k, groups)
        w[r, 16 * g:16 * g + 16] = group.astype(np.float32)  # exact: few significant bits
    w[2, 0:16] = 0.0  # zero groups: +0 and -0.0 (sign-only codes, NVFP4-ZERO-1)
    w[2, 16:32] = -0.0
    w[3, 32:48] = np.float32(2.0 ** -140) * np.arange(1, 17)  # fp32 subnormal weights
    w[3, 48:64] = -w[0, 16:32]  # a mirrored tie group
    h = rng.random(w.shape[1]) * 10.0 ** rng.uniform(-4, 4, w.shape[1])
    h[16:32] = 0.0  # every candidate scores 0: a tie the first minimum keeps at shift 0
    h[5] = h[40] = 0.0
    x = rng.standard_normal((48, w.shape[1]))
    blocks = diagonal_blocks(x.T @ x)
    blocks[1, 3, :] = blocks[1, :, 3] = 0.0
    return w, h, blocks


def assert_objectives_identical(expected, got, context=""):
    """The group objectives (``GroupObjectives``) of two results, bit for bit (as floats: +0
    and -0 would be equal, and a zero group's are +0 on every route)."""
    for name in ("squared", "weighted"):
        e, g = getattr(expected, name), getattr(got, name)
        assert (e is None) == (g is None), f"{context}: {name}"
        if e is None:
            continue
        assert g.shape == e.shape and g.dtype == np.float64, f"{context}: {name} {g.shape}"
        if not np.array_equal(e, g):
            bad = tuple(int(i) for i in np.argwhere(e != g)[0])
            raise AssertionError(f"{context}: {name}{list(bad)} = {g[bad]!r}, expected "
                                 f"{e[bad]!r} ({int((e != g).sum())} differ)")
