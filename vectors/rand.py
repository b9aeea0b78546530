"""Seeded random inputs that are bit-identical on every machine and NumPy version.

Only the raw 64-bit output of the PCG64 bit generator behind ``np.random.default_rng`` is used
(a fixed algorithm); every value is built from it with exact integer operations and correctly
rounded IEEE basic operations, never with ``exp``/``log``/``cos`` (whose last bit may differ
between math libraries) or with the Generator's distribution methods (whose streams NumPy
does not promise to keep across versions). Each case gets its own stream,
``default_rng([seed, crc32(case id)])``, so adding a case never changes another.
"""

from __future__ import annotations

import zlib

import numpy as np


class CaseRandom:
    def __init__(self, seed: int, name: str):
        self._bits = np.random.default_rng([int(seed), zlib.crc32(name.encode())]).bit_generator

    def raw(self, n: int) -> np.ndarray:
        return np.asarray(self._bits.random_raw(int(n)), dtype=np.uint64)

    def uniform(self, shape) -> np.ndarray:
        """Uniform on [0, 1), 53 random bits each (exact)."""
        n = int(np.prod(shape))
        return ((self.raw(n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53).reshape(shape)

    def integers(self, low: int, high: int, shape) -> np.ndarray:
        """Integers in [low, high) (high - low must be a power of two: no modulo bias)."""
        span = high - low
        if span & (span - 1):
            raise ValueError("span must be a power of two")
        n = int(np.prod(shape))
        return (low + (self.raw(n) % np.uint64(span)).astype(np.int64)).reshape(shape)

    def normalish(self, shape) -> np.ndarray:
        """Approximately standard normal: (sum of 12 uniforms) - 6 (Irwin-Hall, exact adds)."""
        total = np.zeros(shape)
        for _ in range(12):
            total = total + self.uniform(shape)
        return total - 6.0

    def heavy(self, shape) -> np.ndarray:
        """Heavy-tailed: a normal-ish value divided by a uniform in (2^-12, 1]."""
        return self.normalish(shape) / (self.uniform(shape) + 2.0 ** -12)

    def log_uniform(self, shape, low_exp: int, high_exp: int) -> np.ndarray:
        """Positive values 2^k * (1 + u), k uniform in [low_exp, high_exp): a spread of many
        orders of magnitude without logarithms."""
        k = self.integers(0, 1 << 16, shape) % (high_exp - low_exp) + low_exp
        return np.ldexp(1.0 + self.uniform(shape), k.astype(np.int64))

    def signs(self, shape) -> np.ndarray:
        return np.where(self.integers(0, 2, shape) == 1, -1.0, 1.0)
