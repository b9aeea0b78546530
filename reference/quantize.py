"""The public entry point: quantize a weight matrix to NVFP4 with RTN, scale-only or H-Scale.

This module only wires the clauses together; each step is implemented, with its clause ID, in
the module named beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .e2m1 import E2M1_VALUES, encode_e2m1, sign_only_codes
from .global_scale import DEFAULT_SCALE_CEILING, compute_global_scale
from .initial_scale import four_over_six_byte, maxabs_byte
from .objective import GROUP_SIZE, UNIT_WEIGHTS
from .packing import pack_codes, swizzle_scale_bytes
from .search import effective_scale, search_scale_byte
from .validation import (INITS, METHODS, check_choice, check_global_scale, check_hessian_diag,
                         check_scale_ceiling, check_weight, check_window)

# Rows are processed in chunks of about this many groups, so that the float64 temporaries of
# one chunk stay at a few tens of MB whatever the layer size.
CHUNK_GROUPS = 1 << 15


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """An NVFP4 tensor and how it was made.

    ``codes`` uint8 (m, n), 4-bit E2M1 codes; ``packed`` uint8 (m, n/2), element 2i in the low
    nibble; ``scale_bytes`` uint8 (m, n/16), E4M3 bytes, row-major; ``global_scale`` np.float32,
    the dequantization multiplier; ``delta`` int8 (m, n/16), the chosen shift from the initial
    byte (0 for rtn and for zero groups).
    """

    codes: np.ndarray
    packed: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32
    delta: np.ndarray
    method: str = "hscale"
    init: str = "maxabs"
    K: int = 16
    U: int = 6
    scale_ceiling: float = DEFAULT_SCALE_CEILING
    initial_bytes: np.ndarray | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    def dequantize(self) -> np.ndarray:
        """float32 (m, n): ``fp32_rne(code_value * e4m3(scale_byte) * s_g)`` (NVFP4-DEQ-1).

        The product is exact in float64 (2 + 4 + 24 significant bits); one rounding to fp32.
        """
        code_value = E2M1_VALUES[self.codes.astype(np.intp)]
        group_scale = effective_scale(self.scale_bytes, self.global_scale)  # exact
        element_scale = np.repeat(group_scale, GROUP_SIZE, axis=1)
        return (code_value * element_scale).astype(np.float32)  # NVFP4-DEQ-1

    @classmethod
    def from_bytes(cls, codes, scale_bytes, initial_bytes, global_scale, *, method, init, K, U,
                   scale_ceiling) -> "QuantizedWeight":
        """The result of any quantizer from its codes and bytes: packing (NVFP4-PACK-1) and
        ``delta = chosen byte - initial byte`` (HSCALE-ARGMIN-1) are derived here, once."""
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        scale_bytes = np.ascontiguousarray(scale_bytes, dtype=np.uint8)
        initial_bytes = np.ascontiguousarray(initial_bytes, dtype=np.uint8)
        delta = (scale_bytes.astype(np.int16) - initial_bytes.astype(np.int16)).astype(np.int8)
        return cls(codes=codes, packed=pack_codes(codes), scale_bytes=scale_bytes,
                   global_scale=np.float32(global_scale), delta=delta, method=method, init=init,
                   K=K, U=U, scale_ceiling=scale_ceiling, initial_bytes=initial_bytes)

    def swizzled_scale_bytes(self) -> np.ndarray:
        """The scale bytes in the 128x4 tiled layout of block-scaled GEMMs (NVFP4-PACK-3)."""
        return swizzle_scale_bytes(self.scale_bytes)


def quantize(weight, hessian_diag=None, *, method="hscale", init="maxabs", K=16, U=6,
             scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None) -> QuantizedWeight:
    """Quantize ``weight`` (m, n) to NVFP4.

    method: ``"rtn"`` keeps the initial byte (ignores K, U and the Hessian); ``"scale-only"``
    searches the window with h = 1 (ignores the Hessian); ``"hscale"`` searches it with
    ``hessian_diag`` (required), the diagonal of X^T X (HSCALE-METHOD-1).
    init: ``"maxabs"`` (NVFP4-INIT-1) or ``"4over6"`` (NVFP4-INIT-2).
    K, U: window size and upward shifts (HSCALE-WIN-1).
    scale_ceiling: C of NVFP4-GS-1 (448 default, 256 for the 4over6 convention).
    global_scale: a pipeline's own s_g (positive normal fp32), else computed (NVFP4-GS-1).
    """
    weight, method, init, K, U, scale_ceiling = check_arguments(weight, method, init, K, U,
                                                                scale_ceiling)
    rows, cols = weight.shape
    h = check_method_hessian(hessian_diag, method, cols)
    global_scale = resolve_global_scale(weight, global_scale, scale_ceiling)

    group_cols = cols // GROUP_SIZE
    codes = np.empty((rows, cols), dtype=np.uint8)
    scale_bytes = np.empty((rows, group_cols), dtype=np.uint8)
    initial_bytes = np.empty((rows, group_cols), dtype=np.uint8)
    rows_per_chunk = max(1, CHUNK_GROUPS // group_cols)
    for start in range(0, rows, rows_per_chunk):
        stop = min(rows, start + rows_per_chunk)
        exact_rows = weight[start:stop].astype(np.float64)  # exact widening
        chunk = _quantize_rows(exact_rows, h, method, init, K, U, global_scale)
        codes[start:stop], scale_bytes[start:stop], initial_bytes[start:stop] = chunk

    return QuantizedWeight.from_bytes(codes, scale_bytes, initial_bytes, global_scale,
                                      method=method, init=init, K=K, U=U,
                                      scale_ceiling=scale_ceiling)


def check_arguments(weight, method, init, K, U, scale_ceiling):
    """The arguments every quantizer shares, checked (NVFP4-IN-1, -3, -4, -5)."""
    method = check_choice("method", method, METHODS)
    init = check_choice("init", init, INITS)
    weight = check_weight(weight)
    K, U = check_window(K, U)
    scale_ceiling = check_scale_ceiling(scale_ceiling)
    return weight, method, init, K, U, scale_ceiling


def check_method_hessian(hessian_diag, method, cols):
    """h as float64 (n,) for hscale, where it is required (NVFP4-IN-2); None for rtn and
    scale-only, which do not read it (HSCALE-METHOD-1)."""
    if method != "hscale":
        return None
    if hessian_diag is None:
        raise ValueError("hessian_diag: method 'hscale' needs the Hessian diagonal h, got "
                         "None (spec NVFP4-IN-2, HSCALE-METHOD-1)")
    return check_hessian_diag(hessian_diag, cols)


def resolve_global_scale(weight, global_scale, scale_ceiling) -> np.float32:
    """The caller's s_g checked (NVFP4-GS-3, NVFP4-IN-4), or s_g computed (NVFP4-GS-1)."""
    if global_scale is not None:
        return check_global_scale(global_scale)
    # max |W| without a full |W| temporary; exact in the weight's own dtype.
    amax = max(float(np.max(weight)), -float(np.min(weight)))
    return compute_global_scale(amax, scale_ceiling)


def select_scale_bytes(groups, group_h, method, init, K, U, global_scale):
    """(initial byte, chosen byte) of each group (rows of ``groups``, float64 (G, 16)).

    ``group_h`` is the Hessian diagonal of each group, (G, 16) or (16,); read by hscale only.
    """
    group_amax = np.max(np.abs(groups), axis=1)
    if init == "maxabs":
        initial_byte = maxabs_byte(group_amax, global_scale)  # NVFP4-INIT-1
    else:
        initial_byte = four_over_six_byte(groups, group_amax, global_scale)  # NVFP4-INIT-2
    if method == "rtn":
        scale_byte = initial_byte  # HSCALE-METHOD-1: no search
    else:
        weights = UNIT_WEIGHTS if method == "scale-only" else group_h  # HSCALE-METHOD-1
        scale_byte = search_scale_byte(groups, weights, initial_byte, global_scale, K, U)
    zero_group = group_amax == 0
    initial_byte = np.where(zero_group, 0, initial_byte).astype(np.uint8)  # NVFP4-ZERO-1
    scale_byte = np.where(zero_group, 0, scale_byte).astype(np.uint8)  # NVFP4-ZERO-1
    return initial_byte, scale_byte


def encode_groups(groups, scale_byte, global_scale):
    """Codes of each group at its chosen byte; a zero group keeps only signs (NVFP4-ZERO-1)."""
    zero_group = scale_byte == 0
    scale = effective_scale(np.maximum(scale_byte, 1), global_scale)
    return np.where(zero_group[:, None], sign_only_codes(groups),
                    encode_e2m1(groups, scale[:, None]))


def _quantize_rows(weight_rows, h, method, init, K, U, global_scale):
    """Codes, scale bytes and initial bytes of a block of rows (float64 (r, n))."""
    rows, cols = weight_rows.shape
    groups = weight_rows.reshape(-1, GROUP_SIZE)  # row-major: group (r, i) is row r*n/16 + i
    group_h = None if h is None else np.tile(h.reshape(-1, GROUP_SIZE), (rows, 1))
    initial_byte, scale_byte = select_scale_bytes(groups, group_h, method, init, K, U,
                                                  global_scale)
    group_codes = encode_groups(groups, scale_byte, global_scale)
    return (group_codes.reshape(rows, cols), scale_byte.reshape(rows, -1),
            initial_byte.reshape(rows, -1))
