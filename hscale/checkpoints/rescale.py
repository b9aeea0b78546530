"""Changing a quantized Linear's global scale exactly, or requantizing it when that is not
possible (``hscale convert``: fused sets given one s_g, and s_g a reciprocal layout cannot
store)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from hscale.reference import GROUP_SIZE

from .safetensors import CheckpointError


def _ladder() -> dict:
    """E4M3 value (exact) -> ladder byte 0x01..0x7E."""
    from hscale.reference import SCALE_BYTE_VALUES
    return {Fraction(float(SCALE_BYTE_VALUES[b])): b for b in range(0x01, 0x7F)}


def exact_byte_map(scale_bytes: np.ndarray, global_scale, target) -> np.ndarray | None:
    """New byte of each byte value 0..255 so that ``e4m3(new) * target == e4m3(old) * s_g``
    exactly for every byte the tensor holds (0x00 stays 0x00), or None if some byte has no
    such E4M3 value (or is NaN or negative)."""
    from hscale.reference import SCALE_BYTE_VALUES
    ladder = _ladder()
    ratio = Fraction(float(global_scale)) / Fraction(float(target))
    mapping = np.zeros(256, np.uint8)
    for byte in np.unique(scale_bytes):
        byte = int(byte)
        if byte == 0:
            continue
        if byte > 0x7E:
            return None
        new = ladder.get(Fraction(float(SCALE_BYTE_VALUES[byte])) * ratio)
        if new is None:
            return None
        mapping[byte] = new
    return mapping


def requantized(codes: np.ndarray, scale_bytes: np.ndarray, global_scale, target):
    """(codes, scale bytes) of the decoded weights (NVFP4-DEQ-1) requantized at the ``target``
    s_g keeping each group's scale: its byte the E4M3 rounding of e4m3(old) s_g / target
    (NVFP4-E4M3-2; a non-zero byte stays at least 0x01), its codes the rounding of the decoded
    weights at that byte (NVFP4-E2M1-2); a zero group keeps byte 0x00 and its signs."""
    from hscale.reference import decode_e4m3, dequantize, encode_e2m1, encode_e4m3
    if np.any(scale_bytes > 0x7E):
        raise CheckpointError("NaN or negative scale bytes cannot be requantized (hscale check "
                              "names them)")
    decoded = dequantize(codes, scale_bytes, global_scale)
    rows, cols = codes.shape
    # e4m3(old) * s_g is exact in float64; dividing by the target rounds once, and no quotient
    # of a 28-bit by a 24-bit number lies within 2^-53 of an E4M3 midpoint without being on it.
    value = decode_e4m3(scale_bytes) * float(global_scale) / float(target)
    new_bytes = encode_e4m3(value)
    new_bytes = np.where((scale_bytes != 0) & (new_bytes == 0), 1, new_bytes).astype(np.uint8)
    groups = decoded.reshape(rows, cols // GROUP_SIZE, GROUP_SIZE)
    scale = float(target) * decode_e4m3(new_bytes)
    live = new_bytes != 0
    new_codes = np.where(live[..., None],
                         encode_e2m1(groups, np.where(live, scale, 1.0)[..., None]),
                         np.signbit(groups).astype(np.uint8) << 3)
    return new_codes.reshape(rows, cols).astype(np.uint8), new_bytes
