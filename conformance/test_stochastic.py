"""The stochastic kind (docs/spec.md section 11): a kernel that takes the random bits is judged
bit for bit under its declared scaling and routing, on every grid cell with every byte, the
specials, the inputs where a carry in floating point goes wrong, generated tensors, and without
a model of its routing by exhaustion; a kernel whose stream is hidden by the acceptance test
fixed in advance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hscale.judge.stochastic import StochasticCase
from hscale.judge.stochastic_builders import (cell_sweep_case, cell_values, false_carry_case,
                                              false_carry_values, lane_values, specials_case)
from hscale.reference.random_bits import PER_WORD


@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-4")
def test_every_cell_with_every_byte(stochastic_checker):
    stochastic_checker.require_scaling("none")
    stochastic_checker.check(cell_sweep_case())


@pytest.mark.clause("NVFP4-SR-3")
@pytest.mark.parametrize("seed", [0, 1])
def test_specials_with_bytes_zero_ones_and_random(stochastic_checker, seed):
    stochastic_checker.require_scaling("none")
    stochastic_checker.check(specials_case(seed))


@pytest.mark.clause("NVFP4-SR-2")
def test_no_carry_just_below_a_boundary(stochastic_checker):
    """The fp32 predecessor of k/512 with the byte 255: the exact sum stays below the next grid
    point; ``fmaf`` to nearest rounds it onto it (a false carry)."""
    stochastic_checker.require_scaling("none")
    stochastic_checker.check(false_carry_case())


@pytest.mark.clause("NVFP4-SR-5")
@pytest.mark.parametrize("which", ["cells", "boundaries", "lanes"])
def test_unbiased_by_exhaustion(stochastic_checker, which):
    """Every element rounds up D_top times over the 256 words b * 0x01010101, whatever the
    kernel's routing (a model-free check). ``lanes``: 4,096 elements, none on a grid point, so
    that a bias confined to a few positions (one lane in 256) shows."""
    if which == "lanes":
        x = lane_values()
        stochastic_checker.exhaust(x, f"{x.size} elements of {x.shape[0]} rows ({which})")
        return
    values = cell_values() if which == "cells" else false_carry_values()[::8]
    x = np.repeat(np.asarray(values, np.float32), PER_WORD)[None]
    stochastic_checker.exhaust(x, f"{len(values)} values ({which})")


@pytest.mark.clause("NVFP4-SR-1", "NVFP4-SR-2", "NVFP4-SR-4")
@given(data=st.data())
def test_generated_values_and_words(stochastic_checker, data):
    stochastic_checker.require_given()
    stochastic_checker.require_scaling("none")
    rows = data.draw(st.integers(1, 4))
    words_per_row = data.draw(st.integers(1, 16))
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    spread = data.draw(st.sampled_from([0.5, 2.0, 6.0, 20.0]))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, words_per_row * PER_WORD)) * spread).astype(np.float32)
    words = rng.integers(0, 2 ** 32, (rows, words_per_row), dtype=np.uint32)
    stochastic_checker.check(StochasticCase(x, words, None, title=f"generated, seed {seed}"))


@pytest.mark.clause("NVFP4-SR-1", "NVFP4-SR-2")
@given(data=st.data())
def test_generated_tensors_scaled_by_the_recipe(stochastic_checker, data):
    """A scaling kernel: the recipe's scale bytes (no random bit reaches them) and each product
    rounded stochastically."""
    stochastic_checker.require_given()
    stochastic_checker.require_scaling("fast-math", "exact", "torchao")
    rows = data.draw(st.integers(1, 4))
    groups = data.draw(st.integers(1, 4))
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, 16 * groups)) * rng.choice([1e-3, 1.0, 50.0])) \
        .astype(np.float32)
    g = np.float32(2688.0 / max(float(np.abs(x).max()), 1e-30)
                   * data.draw(st.sampled_from([1.0, 0.5, 4.0])))
    words = rng.integers(0, 2 ** 32, (rows, 4 * groups), dtype=np.uint32)
    stochastic_checker.check(StochasticCase(x, words, float(g), title=f"generated, seed {seed}"))


@pytest.mark.clause("NVFP4-SR-6")
@pytest.mark.parametrize("seeds", [(1, 2), (1234, 98765)])
def test_hidden_stream_acceptance(stochastic_checker, seeds):
    stochastic_checker.acceptance(seeds)
