"""Storage layout: packed codes and the scale-byte layouts (spec clauses NVFP4-PACK-1 ..
NVFP4-PACK-3, and the 8x4 layout of NVFP4-ACT-10)."""

from __future__ import annotations

import numpy as np

SWIZZLE_ROWS = 128  # rows of one swizzle tile
SWIZZLE_COLS = 4  # scale columns of one swizzle tile
SWIZZLE_TILE = SWIZZLE_ROWS * SWIZZLE_COLS  # 512 bytes
SMALL_TILE_ROWS = 8  # rows of one 8x4 tile (NVFP4-ACT-10)
SMALL_TILE = SMALL_TILE_ROWS * SWIZZLE_COLS  # 32 bytes


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """Two codes per byte, element 2i in the low nibble and 2i+1 in the high (NVFP4-PACK-1)."""
    low = codes[..., 0::2].astype(np.uint8)
    high = codes[..., 1::2].astype(np.uint8)
    return low | (high << 4)  # NVFP4-PACK-1


def unpack_codes(packed: np.ndarray) -> np.ndarray:
    """Inverse of ``pack_codes``: (m, n/2) bytes to (m, n) codes 0..15."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.uint8)
    codes[..., 0::2] = packed & 0xF
    codes[..., 1::2] = packed >> 4
    return codes


def swizzle_offset(row: np.ndarray, col: np.ndarray, scale_cols: int) -> np.ndarray:
    """Byte offset of scale byte (row, col) in the 128x4 tiled layout (NVFP4-PACK-3).

    The cuBLAS / CUTLASS block-scaled GEMM layout: tiles of 128 rows x 4 scale columns,
    512 bytes each, tiles ordered row-tile-major; inside a tile row r and column k sit at
    ``(r % 32) * 16 + ((r % 128) // 32) * 4 + k % 4``.
    """
    col_tiles = -(-scale_cols // SWIZZLE_COLS)  # ceil(n / 64) in terms of the weight width
    tile = (row // SWIZZLE_ROWS) * col_tiles + col // SWIZZLE_COLS
    inside = (row % 32) * 16 + ((row % SWIZZLE_ROWS) // 32) * 4 + col % SWIZZLE_COLS
    return tile * SWIZZLE_TILE + inside


def swizzled_size(rows: int, scale_cols: int) -> int:
    """Bytes of the swizzled layout: rows padded to 128, scale columns padded to 4."""
    return (-(-rows // SWIZZLE_ROWS)) * (-(-scale_cols // SWIZZLE_COLS)) * SWIZZLE_TILE


def _tiled(scale_bytes: np.ndarray, size, offset) -> np.ndarray:
    """Row-major scale bytes placed at ``offset(row, col, scale_cols)`` of a zeroed buffer of
    ``size(rows, scale_cols)`` bytes: a tiled layout, its padding 0x00."""
    rows, scale_cols = scale_bytes.shape
    out = np.zeros(size(rows, scale_cols), dtype=np.uint8)
    row, col = np.indices((rows, scale_cols))
    out[offset(row, col, scale_cols)] = scale_bytes
    return out


def swizzle_scale_bytes(scale_bytes: np.ndarray) -> np.ndarray:
    """Row-major (m, n/16) scale bytes to the flat, zero-padded 128x4 layout (NVFP4-PACK-3)."""
    return _tiled(scale_bytes, swizzled_size, swizzle_offset)  # NVFP4-PACK-3


def unswizzle_scale_bytes(swizzled: np.ndarray, rows: int, scale_cols: int) -> np.ndarray:
    """Inverse of ``swizzle_scale_bytes``: back to row-major (rows, scale_cols)."""
    swizzled = np.asarray(swizzled, dtype=np.uint8).reshape(-1)
    expected = swizzled_size(rows, scale_cols)
    if swizzled.size != expected:
        raise ValueError(f"swizzled: {swizzled.size} bytes, but {rows} x {scale_cols} scale "
                         f"bytes take {expected} in the 128x4 layout (spec NVFP4-PACK-3)")
    row, col = np.indices((rows, scale_cols))
    return swizzled[swizzle_offset(row, col, scale_cols)]


def swizzle_8x4_offset(row: np.ndarray, col: np.ndarray, scale_cols: int) -> np.ndarray:
    """Byte offset of scale byte (row, col) in the 8x4 tiled layout (NVFP4-ACT-10): tiles of
    8 rows x 4 scale columns, 32 bytes each, row-tile-major; inside a tile ``(r % 8) * 4 +
    k % 4`` (FlashInfer's ``is_sf_8x4_layout``, used by vLLM's trtllm path for m <= 32)."""
    col_tiles = -(-scale_cols // SWIZZLE_COLS)
    tile = (row // SMALL_TILE_ROWS) * col_tiles + col // SWIZZLE_COLS
    return tile * SMALL_TILE + (row % SMALL_TILE_ROWS) * SWIZZLE_COLS + col % SWIZZLE_COLS


def swizzled_8x4_size(rows: int, scale_cols: int) -> int:
    """Bytes of the 8x4 layout: rows padded to 8, scale columns padded to 4."""
    return (-(-rows // SMALL_TILE_ROWS)) * (-(-scale_cols // SWIZZLE_COLS)) * SMALL_TILE


def swizzle_scale_bytes_8x4(scale_bytes: np.ndarray) -> np.ndarray:
    """Row-major (m, n/16) scale bytes to the flat, zero-padded 8x4 layout (NVFP4-ACT-10)."""
    return _tiled(scale_bytes, swizzled_8x4_size, swizzle_8x4_offset)  # NVFP4-ACT-10
