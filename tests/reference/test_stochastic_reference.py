"""The stochastic-rounding reference (docs/spec.md section 11) against independent routes:
values worked by hand with fractions, ml_dtypes' E2M1 rounding, enumeration over the bytes, a
routed word read by hand."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from hscale.reference.random_bits import ROUTINGS, element_bytes, words_for_bytes
from hscale.reference.stochastic_quantize import quantize_stochastic
from hscale.reference.stochastic_rounding import (discarded_top, round_stochastic,
                                                  round_stochastic_array)

GRID = (0, 0.5, 1, 1.5, 2, 3, 4, 6)


@pytest.mark.clause("NVFP4-SR-2")
@pytest.mark.parametrize("cell", range(7))
@pytest.mark.parametrize("top", [0, 1, 64, 127, 128, 200, 255])
def test_the_carry_rule_at_every_cell_worked_by_hand(cell, top):
    """v = lo + (top + 1/2^10) / 256 * (hi - lo): D_top = top; the byte 256 - top carries, 255 -
    top does not (top = 0: no byte carries)."""
    lo, hi = Fraction(GRID[cell]), Fraction(GRID[cell + 1])
    v = lo + (Fraction(top) + Fraction(1, 1024)) / 256 * (hi - lo)
    assert float(np.float32(float(v))) == v  # exact in fp32
    assert discarded_top(v) == top
    for sign in (1, -1):
        code = round_stochastic(sign * float(v), 255 - top)
        assert code == (cell | (0x8 if sign < 0 else 0)), (float(v), top)
        if top:
            assert round_stochastic(sign * float(v), 256 - top) == \
                ((cell + 1) | (0x8 if sign < 0 else 0))


@pytest.mark.clause("NVFP4-SR-2")
def test_transformer_engines_false_carry_input_does_not_carry():
    """|v| = 2^-9 - 2^-33 (D_top = 0) with byte 255: the exact sum 0.5 - 2^-33 is below 0.5."""
    v = 2.0 ** -9 - 2.0 ** -33
    assert float(np.float32(v)) == v
    assert discarded_top(Fraction(v)) == 0
    assert round_stochastic(v, 255) == 0x0 and round_stochastic(-v, 255) == 0x8


@pytest.mark.clause("NVFP4-SR-3")
@pytest.mark.parametrize("value, code", [
    (float("nan"), 0x7), (-float("nan"), 0x7), (float("inf"), 0x7), (-float("inf"), 0xF),
    (6.0, 0x7), (-6.5, 0xF), (1e30, 0x7), (0.0, 0x0), (-0.0, 0x8), (-2.0 ** -20, 0x8)])
@pytest.mark.parametrize("byte", [0x00, 0x5A, 0xFF])
def test_specials(value, code, byte):
    if value == -2.0 ** -20 and byte == 0xFF:
        code = 0x8  # D_top = 0: never up, the sign kept
    assert round_stochastic(value, byte) == code


@pytest.mark.clause("NVFP4-SR-2")
def test_byte_128_is_round_half_up_which_ml_dtypes_matches_off_the_ties():
    """With r = 128 a value carries iff its fraction of the cell is >= 1/2 (in the top 8 bits):
    round to nearest with ties up; off the exact midpoints it is ml_dtypes' E2M1 rounding."""
    rng = np.random.default_rng(7)
    values = (rng.standard_normal(20000) * 2.0 ** rng.integers(-8, 3, 20000)).astype(np.float32)
    midpoints = np.isin(np.abs(values), [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    values = values[~midpoints]
    ours = round_stochastic_array(values, np.full(values.shape, 128))
    theirs = values.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    assert np.array_equal(ours, theirs)


@pytest.mark.clause("NVFP4-SR-5")
def test_round_ups_over_all_bytes_equal_the_discarded_top_by_enumeration():
    rng = np.random.default_rng(3)
    values = (rng.uniform(-6, 6, 120)).astype(np.float32)
    for v in values:
        top = int(Fraction(abs(float(v))) * 512) if abs(v) < 0.5 else None
        codes = [round_stochastic(v, b) for b in range(256)]
        ups = sum(1 for c in codes if c != codes[0])
        assert ups == discarded_top(Fraction(abs(float(v))))
        if top is not None:
            assert ups == top  # cell [0, 0.5): floor(512 |v|), by hand


@pytest.mark.clause("NVFP4-SR-2")
def test_the_array_rule_is_the_element_rule():
    rng = np.random.default_rng(11)
    values = np.concatenate([(rng.standard_normal(4000) * 2.0 ** rng.integers(-140, 4, 4000)),
                             [np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, -5.9999995]]) \
        .astype(np.float32)
    bytes_ = rng.integers(0, 256, values.size)
    array = round_stochastic_array(values, bytes_)
    assert array.tolist() == [round_stochastic(v, int(b)) for v, b in zip(values, bytes_)]


@pytest.mark.clause("NVFP4-SR-4")
def test_a_word_routed_by_hand():
    word = np.array([[0x44332211]], np.uint32)
    assert element_bytes(word, "straight").tolist() == [[0x11, 0x22, 0x33, 0x44]]
    assert element_bytes(word, "ptx-e2m1x4").tolist() == [[0x11, 0x33, 0x22, 0x44]]
    # sm103a: bytes 2, 0, 3, 1; elements 1 and 3 reversed: 0x11 -> 0x88, 0x22 -> 0x44
    assert element_bytes(word, "sm103a").tolist() == [[0x33, 0x88, 0x44, 0x44]]


@pytest.mark.clause("NVFP4-SR-4")
@pytest.mark.parametrize("routing", ROUTINGS)
def test_words_for_bytes_inverts_the_routing(routing):
    rng = np.random.default_rng(5)
    bytes_ = rng.integers(0, 256, (3, 32)).astype(np.uint8)
    assert np.array_equal(element_bytes(words_for_bytes(bytes_, routing), routing), bytes_)


@pytest.mark.clause("NVFP4-SR-1")
def test_a_scaling_kernel_rounds_the_recipes_products_and_keeps_its_bytes():
    """The exact recipe with bytes 0x00 everywhere never carries: each code is the grid point
    at or below the product; the scale bytes are the round-to-nearest recipe's."""
    from hscale.reference.activations import quantize_activations
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    g = np.float32(2688 / np.abs(x).max())
    result = quantize_stochastic(x, g, np.zeros((2, 8), np.uint32), scaling="exact")
    rn = quantize_activations(x, g, recipe="exact")
    assert np.array_equal(result.scale_bytes, rn.scale_bytes)
    down = np.abs(np.asarray(GRID)[result.codes & 7])
    up_by_rn = np.abs(np.asarray(GRID)[rn.codes & 7])
    assert (down <= up_by_rn).all()  # the grid point at or below, never above round to nearest
