"""Exact constructions for the stochastic kind (docs/spec.md section 11), shared by the suite's
tests and the golden vectors: every grid cell with every byte, the specials with the bytes
0x00, 0xFF and random ones, the inputs where a carry computed by ``fmaf`` to nearest goes
wrong, and random words over the whole range. Each value is exact in fp32; each construction
but the last uses words that give every element every byte it is meant to meet under any
routing of NVFP4-SR-4 (a byte repeated four times is the same byte in every slot, and 0x00 and
0xFF are their own bit reversals).
"""

from __future__ import annotations

import numpy as np

from hscale.reference.e2m1 import E2M1_MAGNITUDES
from hscale.reference.random_bits import PER_WORD

from .stochastic import EVERY_BYTE, StochasticCase

#: The points of the sweep: D_top and the residue below its 8 bits, in units of 1/256 of the
#: cell (a residue of 3/4 is where rounding the discarded bits to nearest, not truncating them,
#: carries one early).
SWEEP_POINTS = ((0, 1 / 16), (1, 0.0), (64, 0.75), (128, 0.0), (254, 0.75), (255, 1 / 16))


def cell_values() -> list[float]:
    """Per cell [lo, hi) of E2M1 and per point of :data:`SWEEP_POINTS`, ``lo + (D + residue) /
    256 * (hi - lo)``, both signs: 84 values, exact in fp32."""
    values = []
    for lo, hi in zip(E2M1_MAGNITUDES[:-1], E2M1_MAGNITUDES[1:]):
        for top, residue in SWEEP_POINTS:
            v = lo + (top + residue) / 256 * (hi - lo)
            assert float(np.float32(v)) == v
            values += [v, -v]
    return values


#: The block of the wide exhaustion: 4,096 elements (32 rows of 128), a thread block's lanes.
LANES = (32, 128)


def lane_values() -> np.ndarray:
    """The values of :func:`cell_values` whose ``D_top`` is not 0, cycled over a :data:`LANES`
    block: whatever few positions a fault is confined to (one lane in 256), each holds a value
    that must round up on some bytes and down on others (NVFP4-SR-5)."""
    tops = [top for _ in E2M1_MAGNITUDES[:-1] for top, _ in SWEEP_POINTS for _ in (0, 1)]
    values = [v for v, top in zip(cell_values(), tops) if top]
    return np.resize(np.asarray(values, np.float32), LANES)


def every_byte_rows(values) -> tuple[np.ndarray, np.ndarray]:
    """Four values to a row, each row 256 words ``b * 0x01010101`` (b = 0 .. 255), the row's four
    values repeated under each word, so that every value meets every byte in its slot."""
    values = list(values) + [0.0] * (-len(values) % PER_WORD)
    quads = np.asarray(values, np.float32).reshape(-1, PER_WORD)
    x = np.tile(quads, (1, 256))
    words = np.tile(np.arange(256, dtype=np.uint32) * np.uint32(EVERY_BYTE), (len(quads), 1))
    return x, words


def cell_sweep_case() -> StochasticCase:
    x, words = every_byte_rows(cell_values())
    return StochasticCase(x, words, None, "sr-every-cell-every-byte",
                          "every E2M1 cell at D_top 0, 1, 64, 128, 254, 255 (with and without "
                          "bits below the top 8), each with all 256 bytes, both signs",
                          ("NVFP4-SR-2", "NVFP4-SR-4", "NVFP4-SR-5"))


def random_words_case(seed: int = 0) -> StochasticCase:
    """Values over the whole range (tiny, subnormal, past 6) with random words: what tells the
    routings apart (a word of one repeated byte does not)."""
    rng = np.random.default_rng(seed)
    magnitude = rng.standard_normal((8, 64)) * 2.0 ** rng.integers(-12, 3, (8, 64))
    magnitude[0] = rng.standard_normal(64) * 2.0 ** -140
    x = magnitude.astype(np.float32)
    words = rng.integers(0, 2 ** 32, (8, 16), dtype=np.uint32)
    return StochasticCase(x, words, None, "sr-random-words",
                          "values over the range with random words (tells the routings apart)",
                          ("NVFP4-SR-1", "NVFP4-SR-2", "NVFP4-SR-4"))


SPECIALS = (np.nan, -np.nan, np.inf, -np.inf, 6.0, -6.0, 6.5, -7.0, 1e30, -3.4028234663852886e38,
            0.0, -0.0, -2.0 ** -20, 2.0 ** -149, -2.0 ** -126, 5.99999952316284)


def specials_case(seed: int = 0) -> StochasticCase:
    """Every special with the words 0x00000000, 0xFFFFFFFF and a random one: 3 rows."""
    values = np.asarray(SPECIALS, np.float32)
    x = np.tile(np.repeat(values, PER_WORD)[None], (3, 1))
    rng = np.random.default_rng(seed)
    count = len(SPECIALS)
    words = np.stack([np.zeros(count, np.uint32), np.full(count, 0xFFFFFFFF, np.uint32),
                      rng.integers(0, 2 ** 32, count, dtype=np.uint32)])
    return StochasticCase(x, words, None, "sr-specials",
                          "NaN, infinities, |v| >= 6, signed zeros, tiny negatives, with the "
                          "bytes 0x00, 0xFF and random", ("NVFP4-SR-3",))


def false_carry_values() -> list[float]:
    """The fp32 predecessor of every ``k / 512`` in (0, 0.25], ``D_top = k - 1``: with the byte
    ``r = 256 - k`` the exact sum ``|v| + r/512`` lies just below 0.5 (no carry), where
    ``fmaf`` to nearest lands on 0.5 (TransformerEngine's software fallback, NVFP4-SR-2)."""
    return [float(np.nextafter(np.float32(k / 512), np.float32(0))) for k in range(1, 129)]


def false_carry_case() -> StochasticCase:
    """Each value of :func:`false_carry_values` in a word of its byte ``256 - k`` (4 copies)."""
    values = false_carry_values()
    x = np.repeat(np.asarray(values, np.float32), PER_WORD)[None]
    words = np.asarray([(256 - k) * EVERY_BYTE for k in range(1, len(values) + 1)],
                       np.uint32)[None]
    return StochasticCase(x, words, None, "sr-fmaf-false-carries",
                          "just below k/512 on (0, 0.25] with the byte 256 - k: the exact rule "
                          "does not carry, fmaf to nearest does", ("NVFP4-SR-2",))


def level0_cases(seed: int = 0) -> list[StochasticCase]:
    return [cell_sweep_case(), specials_case(seed), false_carry_case(), random_words_case(seed)]
