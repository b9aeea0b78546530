"""Bit-for-bit comparisons of a backend's result with the reference's, and the seeded layer
whose groups exercise the vectorised code paths (zero groups, -0.0, constant groups, window
clipping at byte 0x01, fp32 subnormals, h with zeros and a huge spread)."""

from __future__ import annotations

import numpy as np
import pytest

from hscale.reference import quantize as reference_quantize

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
