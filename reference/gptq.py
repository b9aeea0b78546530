"""A GPTQ-like pipeline with a pluggable local scale selector (spec clause HSCALE-GPTQ-1).

GPTQ (Frantar et al.) quantizes columns left to right and pushes each column's rounding error
onto the columns not yet quantized, through the upper Cholesky factor of the damped inverse
Hessian. H-Scale replaces only its local step: when a 16-column group is reached, the group's
scale byte is chosen by rtn, scale-only or H-Scale with ``h = diag(H)`` on the group's current
(error-updated) weights; the group's columns are then rounded with that byte one at a time, and
the error propagation is unchanged (the paper's Algorithm 3).

This is a readable reference of the pipeline's semantics, not a bit-exact contract: the
Cholesky factorisation and the error updates are floating-point linear algebra whose rounding
is not specified. The spec pins what happens inside each group (HSCALE-WIN-1..ARGMIN-1).
"""

from __future__ import annotations

import numpy as np

from .e2m1 import E2M1_VALUES
from .global_scale import DEFAULT_SCALE_CEILING
from .objective import GROUP_SIZE
from .quantize import (QuantizedWeight, check_arguments, encode_groups, resolve_global_scale,
                       select_scale_bytes)
from .search import effective_scale
from .validation import check_hessian_diag

DEFAULT_DAMP = 0.01  # GPTQ's relative dampening of the Hessian diagonal


def check_hessian(hessian, cols: int) -> np.ndarray:
    """The full Hessian ``X^T X`` as float64 (n, n): symmetric, finite, non-negative diagonal."""
    H = np.asarray(hessian)
    if H.shape != (cols, cols):
        raise ValueError(f"hessian: shape {H.shape}, expected ({cols}, {cols}) "
                         "(spec HSCALE-GPTQ-1)")
    H = H.astype(np.float64)
    check_hessian_diag(np.diag(H).copy(), cols)  # finite, >= 0 (NVFP4-IN-2)
    bad = ~np.isfinite(H)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"hessian[{r}, {c}] = {H[r, c]}: must be finite (spec HSCALE-GPTQ-1)")
    asymmetric = H != H.T
    if asymmetric.any():
        r, c = (int(i) for i in np.argwhere(asymmetric)[0])
        raise ValueError(f"hessian[{r}, {c}] != hessian[{c}, {r}]: X^T X is symmetric "
                         "(spec HSCALE-GPTQ-1)")
    return H


def inverse_cholesky_factor(H: np.ndarray, damp: float) -> np.ndarray:
    """Upper factor ``U`` with ``U^T U = (H + damp * mean(diag H) * I)^-1`` (GPTQ's Hinv).

    A channel that never fires (``H_jj == 0``) gets a unit diagonal so the factorisation exists;
    its weights are kept (unlike the original GPTQ, which zeroes them) and, with ``h_j = 0``,
    do not count in H-Scale's objective.
    """
    damped = H.copy()
    dead = np.diag(H) == 0
    damped[dead, dead] = 1.0
    mean_diag = float(np.mean(np.diag(damped)))
    damped[np.diag_indices_from(damped)] += damp * mean_diag
    inverse = np.linalg.inv(damped)
    inverse = (inverse + inverse.T) / 2  # remove the asymmetry inv() leaves behind
    return np.linalg.cholesky(inverse).T


def gptq_quantize(weight, hessian, *, method="hscale", init="maxabs", K=16, U=6,
                  scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None,
                  damp=DEFAULT_DAMP) -> QuantizedWeight:
    """GPTQ with the local scale selector ``method`` (HSCALE-GPTQ-1).

    ``hessian`` is the full ``X^T X`` (n, n); H-Scale uses ``h = diag(hessian)``. The global
    scale comes from the original weight (NVFP4-GS-1) unless given.
    """
    weight, method, init, K, U, scale_ceiling = check_arguments(weight, method, init, K, U,
                                                                scale_ceiling)
    rows, cols = weight.shape
    H = check_hessian(hessian, cols)
    if not (np.isfinite(damp) and damp >= 0):
        raise ValueError(f"damp = {damp!r}: must be finite and >= 0 (spec HSCALE-GPTQ-1)")
    global_scale = resolve_global_scale(weight, global_scale, scale_ceiling)
    h = np.diag(H).copy()  # HSCALE-GPTQ-1: h = diag(H)
    factor = inverse_cholesky_factor(H, damp)

    remaining = weight.astype(np.float64)  # columns not yet quantized carry the pushed errors
    codes = np.empty((rows, cols), dtype=np.uint8)
    group_cols = cols // GROUP_SIZE
    scale_bytes = np.empty((rows, group_cols), dtype=np.uint8)
    initial_bytes = np.empty((rows, group_cols), dtype=np.uint8)
    for i in range(group_cols):
        first = i * GROUP_SIZE
        group = remaining[:, first:first + GROUP_SIZE]
        initial_byte, scale_byte = select_scale_bytes(group, h[first:first + GROUP_SIZE], method,
                                                      init, K, U, global_scale)
        initial_bytes[:, i], scale_bytes[:, i] = initial_byte, scale_byte
        scale = effective_scale(scale_byte, global_scale)  # 0 for a zero group
        for j in range(first, first + GROUP_SIZE):
            column = remaining[:, j]
            column_codes = encode_groups(column[:, None], scale_byte, global_scale)[:, 0]
            codes[:, j] = column_codes
            dequantized = E2M1_VALUES[column_codes] * scale
            error = (column - dequantized) / factor[j, j]
            remaining[:, j + 1:] -= np.outer(error, factor[j, j + 1:])  # GPTQ's propagation

    return QuantizedWeight.from_bytes(codes, scale_bytes, initial_bytes, global_scale,
                                      method=method, init=init, K=K, U=U,
                                      scale_ceiling=scale_ceiling)
