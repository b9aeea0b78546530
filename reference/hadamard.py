"""The 16 x 16 random Hadamard transform of NVFP4 training (spec clauses NVFP4-RHT-1 ..
NVFP4-RHT-3, docs/spec.md section 12).

``x' = x_block @ T`` for every block of 16 consecutive elements along the transformed axis,
with ``T = diag(s) H16 / 4``: ``H16`` the Sylvester (natural-order) Hadamard matrix, ``s`` the
sign vector (``s_i = -1`` where bit ``i`` of the mask is set: TransformerEngine's 0xD7E8, or 0
for a plain transform). ``T`` is orthogonal (``T T^T = I``). Every element of ``x'`` is computed
exactly (integers times powers of two) and rounded once: to bfloat16 (the ``exact`` profile,
what TransformerEngine's fused kernel does before the amax and the scaling) or to fp32 (the
``fast-math`` profile).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

#: TransformerEngine's sign vector as a mask: bit i set where s_i = -1 (NVFP4-RHT-1).
TE_SIGN_MASK = 0xD7E8
SIZE = 16
#: How the transformed values are rounded (NVFP4-RHT-3): to bfloat16 or to fp32.
PROFILES = {"exact": ml_dtypes.bfloat16, "fast-math": np.float32}


def sylvester(size: int = SIZE) -> np.ndarray:
    """NVFP4-RHT-1: ``H_1 = [1]``, ``H_2n = [[H_n, H_n], [H_n, -H_n]]`` (entries +-1)."""
    h = np.ones((1, 1), np.int64)
    while h.shape[0] < size:
        h = np.block([[h, h], [h, -h]])
    return h


def sign_vector(mask: int) -> np.ndarray:
    """NVFP4-RHT-1: ``s_i = -1`` where bit ``i`` of ``mask`` is set, else 1."""
    return np.array([-1 if (mask >> i) & 1 else 1 for i in range(SIZE)], np.int64)


def signed_hadamard(mask: int) -> np.ndarray:
    """``diag(s) H16``, integers +-1: ``T`` times 4."""
    return sign_vector(mask)[:, None] * sylvester()


def _exact_parts(values: np.ndarray) -> tuple[list[int], int]:
    """Each finite fp32 value as an integer times ``2^e_min`` (one exponent for all)."""
    parts = []
    for v in values:
        mantissa, exponent = np.frexp(np.float64(v))
        parts.append((int(mantissa * 2 ** 53), int(exponent) - 53))
    e_min = min(e for _, e in parts)
    return [m << (e - e_min) for m, e in parts], e_min


def _round_exact(numerator: int, exponent: int, dtype) -> np.floating:
    """``numerator * 2^exponent`` rounded once, to nearest even, to ``dtype``."""
    info = ml_dtypes.finfo(dtype)
    if numerator == 0:
        return dtype(0.0)
    sign, n = (-1 if numerator < 0 else 1), abs(numerator)
    precision = info.nmant + 1
    top = n.bit_length() + exponent - 1  # the exponent of the leading bit
    keep_exponent = max(top, int(info.minexp)) - (precision - 1)  # the ulp's exponent
    shift = keep_exponent - exponent
    if shift > 0:
        kept, rest = n >> shift, n & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and kept & 1):
            kept += 1
    else:
        kept = n << -shift
    with np.errstate(over="ignore"):
        return dtype(sign * float(np.ldexp(np.float64(kept), keep_exponent)))


def rotate(x: np.ndarray, mask: int = TE_SIGN_MASK, profile: str = "exact") -> np.ndarray:
    """NVFP4-RHT-1 .. -3: every block of 16 consecutive elements of each row of ``x`` (finite
    values exact in fp32) times ``T``, each element exact and rounded once by ``profile``."""
    dtype = PROFILES[profile]
    x = np.asarray(x).astype(np.float32)
    rows, n = x.shape
    if n % SIZE:
        raise ValueError(f"x: {n} columns, not a multiple of {SIZE} (spec NVFP4-RHT-1)")
    signed = signed_hadamard(mask)
    out = np.empty((rows, n), dtype)
    for r in range(rows):
        for b in range(n // SIZE):
            integers, e_min = _exact_parts(x[r, SIZE * b:SIZE * (b + 1)])
            for j in range(SIZE):
                total = sum(int(signed[i, j]) * integers[i] for i in range(SIZE))
                out[r, SIZE * b + j] = _round_exact(total, e_min - 2, dtype)  # / 4
    return out
