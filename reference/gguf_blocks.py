"""llama.cpp's NVFP4 block layout (spec clause NVFP4-GGUF-1): the same codes and scale bytes as
NVFP4-PACK-1 and -2, in ggml's order.

A row of ``n`` weights (``n`` a multiple of 64) is ``n / 64`` blocks of 36 bytes: the four scale
bytes of the block's four 16-element groups, then 32 code bytes, in which byte ``8 s + j``
(``s = 0..3``, ``j = 0..7``) holds element ``16 s + j`` of the block in its low nibble and
element ``16 s + j + 8`` in its high nibble.
"""

from __future__ import annotations

import numpy as np

from .constants import GROUP_SIZE

BLOCK = 64  # NVFP4-GGUF-1: weights per block
BLOCK_BYTES = 36  # NVFP4-GGUF-1: 4 scale bytes + 32 code bytes
GROUPS_PER_BLOCK = BLOCK // GROUP_SIZE
HALF_GROUP = GROUP_SIZE // 2


def to_gguf_blocks(packed: np.ndarray, scale_bytes: np.ndarray) -> np.ndarray:
    """Packed codes (out, in/2) in NVFP4-PACK-1's order and scale bytes (out, in/16) as GGUF
    NVFP4 rows, uint8 (out, in/64 * 36). Every byte and code is kept; only the order changes."""
    rows, half = packed.shape
    cols = 2 * half
    if cols % BLOCK:
        raise ValueError(f"in_features {cols} is not a multiple of {BLOCK}: a GGUF NVFP4 row is "
                         "whole blocks of 64 weights (spec NVFP4-GGUF-1)")
    codes = np.empty((rows, cols), np.uint8)
    codes[:, 0::2] = packed & 0x0F  # NVFP4-PACK-1: element 2i in the low nibble
    codes[:, 1::2] = packed >> 4  # NVFP4-PACK-1: element 2i + 1 in the high nibble
    groups = codes.reshape(rows, cols // BLOCK, GROUPS_PER_BLOCK, GROUP_SIZE)
    # NVFP4-GGUF-1: element j in the low nibble, element j + 8 in the high one
    qs = groups[..., :HALF_GROUP] | (groups[..., HALF_GROUP:] << 4)
    d = np.asarray(scale_bytes, np.uint8).reshape(rows, cols // BLOCK, GROUPS_PER_BLOCK)
    blocks = np.concatenate([d, qs.reshape(rows, cols // BLOCK, BLOCK // 2)], axis=2)
    return np.ascontiguousarray(blocks.reshape(rows, cols // BLOCK * BLOCK_BYTES))


def from_gguf_blocks(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GGUF NVFP4 rows uint8 (out, in/64 * 36) -> (packed codes (out, in/2) in NVFP4-PACK-1's
    order, scale bytes (out, in/16)): the inverse of ``to_gguf_blocks``."""
    rows = raw.shape[0]
    blocks = np.asarray(raw, np.uint8).reshape(rows, -1, BLOCK_BYTES)
    n_blocks = blocks.shape[1]
    scale_bytes = blocks[..., :GROUPS_PER_BLOCK].reshape(rows, n_blocks * GROUPS_PER_BLOCK)
    qs = blocks[..., GROUPS_PER_BLOCK:].reshape(rows, n_blocks * GROUPS_PER_BLOCK, HALF_GROUP)
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(rows, n_blocks * BLOCK)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)  # NVFP4-PACK-1
    return np.ascontiguousarray(packed), np.ascontiguousarray(scale_bytes)
