"""Which random bits each element receives: one 32-bit word per 4 consecutive elements of a
row, and the byte-routing profiles of the field (spec clause NVFP4-SR-4, docs/spec.md section
11).

Element ``4k + i`` of a row (``i`` in 0..3, its place in the word's group of four, which is its
nibble's place in the packed output, low nibble first) takes byte ``ROUTES[profile][i]`` of
word ``k`` (byte 0 the least significant), bit-reversed where the profile says so:

- ``straight``: byte ``i`` (Dao-AILab/quack's emulation, TransformerEngine's software
  fallback, sm_100a's ``f8x4``);
- ``ptx-e2m1x4``: the PTX ISA's text for ``cvt.rs.satfinite.e2m1x4.f32 d, {a, b, e, f}``
  (``a`` the high nibble): the high byte of each 16-bit half feeds ``a`` and ``b``, the low
  byte ``e`` and ``f``; with the elements in memory order ``{a, b, e, f} = {v3, v2, v1, v0}``,
  bytes 0, 2, 1, 3;
- ``sm103a``: as probed on B300 (quack ``quack/rounding.py``, ``cvt_f32x4_e2m1x4_rs``): bytes
  2, 0, 3, 1, the odd elements' bytes consumed bit-reversed.
"""

from __future__ import annotations

import numpy as np

#: profile -> (the byte of the word each of the four elements takes, whether it is reversed)
ROUTES = {
    "straight": ((0, 1, 2, 3), (False, False, False, False)),  # NVFP4-SR-4
    "ptx-e2m1x4": ((0, 2, 1, 3), (False, False, False, False)),  # NVFP4-SR-4
    "sm103a": ((2, 0, 3, 1), (False, True, False, True)),  # NVFP4-SR-4
}
ROUTINGS = tuple(ROUTES)
#: Elements per random word.
PER_WORD = 4


def reverse_byte(byte: int) -> int:
    """The 8 bits of ``byte`` in the reverse order (bit 7 <-> bit 0)."""
    return int(f"{byte:08b}"[::-1], 2)


def element_bytes(words: np.ndarray, profile: str) -> np.ndarray:
    """NVFP4-SR-4: the byte each element takes from ``words`` (uint32, (rows, n/4)) under
    ``profile``: uint8 (rows, n)."""
    routes, reversed_ = ROUTES[profile]
    words = np.asarray(words, np.uint32)
    rows, count = words.shape
    out = np.empty((rows, count * PER_WORD), np.uint8)
    for i in range(PER_WORD):
        byte = (words >> np.uint32(8 * routes[i])) & np.uint32(0xFF)
        if reversed_[i]:
            byte = np.vectorize(reverse_byte, otypes=[np.uint32])(byte)
        out[:, i::PER_WORD] = byte
    return out


def words_for_bytes(bytes_: np.ndarray, profile: str) -> np.ndarray:
    """The words under which element ``e`` takes ``bytes_[..., e]`` (the inverse of
    :func:`element_bytes`): uint32 (rows, n/4)."""
    routes, reversed_ = ROUTES[profile]
    bytes_ = np.asarray(bytes_, np.uint8)
    rows, n = bytes_.shape
    words = np.zeros((rows, n // PER_WORD), np.uint32)
    for i in range(PER_WORD):
        byte = bytes_[:, i::PER_WORD].astype(np.uint32)
        if reversed_[i]:
            byte = np.vectorize(reverse_byte, otypes=[np.uint32])(byte)
        words |= byte << np.uint32(8 * routes[i])
    return words
