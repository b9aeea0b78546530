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
from .constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, GROUP_SIZE
from .quantize import (Options, QuantizedWeight, Quantizer, check_arguments, encode_groups,
                       resolve_global_scale, select_scale_bytes)
from .search import effective_scale
from .validation import check_hessian_diag

DEFAULT_DAMP = 0.01  # GPTQ's relative dampening of the Hessian diagonal
DEFAULT_BLOCK_SIZE = 128  # GPTQ's lazy batch: columns whose errors are applied to the rest at once


def check_hessian(hessian, cols: int) -> np.ndarray:
    """The full Hessian ``X^T X`` as float64 (n, n): symmetric, finite, non-negative diagonal."""
    H = np.asarray(hessian)
    if H.shape != (cols, cols):
        raise ValueError(f"hessian: shape {H.shape}, expected ({cols}, {cols}) "
                         "(spec HSCALE-GPTQ-1)")
    H = np.asarray(H, dtype=np.float64)  # read only: no copy of a float64 H (n^2 x 8 bytes)
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


def damped_hessian(H: np.ndarray, damp: float) -> np.ndarray:
    """``H + damp * mean(diag H) * I`` (a new array), the matrix GPTQ's factor inverts.

    A channel that never fires (``H_jj == 0``) gets a unit diagonal first so the factorisation
    exists; its weights are kept (unlike the original GPTQ, which zeroes them) and, with
    ``h_j = 0``, do not count in H-Scale's objective.
    """
    damped = H.copy()
    dead = np.diag(H) == 0
    damped[dead, dead] = 1.0
    mean_diag = float(np.mean(np.diag(damped)))
    damped[np.diag_indices_from(damped)] += damp * mean_diag
    return damped


def inverse_cholesky_factor(H: np.ndarray, damp: float) -> np.ndarray:
    """Upper factor ``U`` with ``U^T U = damped_hessian(H, damp)^-1`` (GPTQ's Hinv)."""
    damped = damped_hessian(H, damp)
    inverse = np.linalg.inv(damped)
    del damped  # each n x n float64 copy freed as soon as it is done with (GPTQ's peak memory)
    symmetric = inverse + inverse.T  # remove the asymmetry inv() leaves behind
    del inverse
    symmetric /= 2
    return np.linalg.cholesky(symmetric).T


def sweep_order(H: np.ndarray, act_order: bool) -> np.ndarray:
    """The order in which columns are quantized: left to right, or by descending ``H_jj`` (GPTQ's
    act-order, the columns that matter most first; ties keep the left-to-right order)."""
    cols = H.shape[0]
    if not act_order:
        return np.arange(cols)
    return np.argsort(-np.diag(H), kind="stable")


def gptq_quantize(weight, hessian, *, method="hscale", init="maxabs", K=DEFAULT_K, U=DEFAULT_U,
                  scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None,
                  damp=DEFAULT_DAMP, block_size=DEFAULT_BLOCK_SIZE, act_order=False,
                  static_groups=False, group_quantizer=None,
                  inverse_factor=inverse_cholesky_factor) -> QuantizedWeight:
    """GPTQ with the local scale selector ``method`` (HSCALE-GPTQ-1).

    ``hessian`` is the full ``X^T X`` (n, n); H-Scale uses ``h = diag(hessian)``. The global
    scale comes from the original weight (NVFP4-GS-1) unless given.

    ``act_order``: columns are swept by descending ``H_jj``; a group (always 16 consecutive
    input columns, as NVFP4 stores it) gets its byte when the sweep first reaches one of its
    columns, from the group's 16 current, error-compensated columns, unless ``static_groups``,
    where every group's byte is chosen before the sweep from the original weights.
    ``block_size``: errors reach the columns of the current block at once and the rest of the
    matrix once per block (GPTQ's lazy batch update): the same arithmetic up to the order of
    floating-point additions. The error-compensated weights stay float64: the group's bytes
    and codes are the reference's rules applied to them as they are (no rounding to float32).
    ``group_quantizer``: the ``Quantizer`` whose steps choose each group's bytes, the
    reference's by default; a backend may pass its own (``backend.group_quantizer()``), which
    must give the reference's bytes bit for bit on float64 groups.
    ``inverse_factor(H, damp)``: computes ``U`` as ``inverse_cholesky_factor`` defines it; a
    backend may pass its own (``backend.gptq_inverse_factor``), equal up to the linear
    algebra's rounding, which this clause leaves unspecified.
    """
    weight, method, init, K, U, scale_ceiling = check_arguments(weight, method, init, K, U,
                                                                scale_ceiling)
    rows, cols = weight.shape
    H = check_hessian(hessian, cols)
    if not (np.isfinite(damp) and damp >= 0):
        raise ValueError(f"damp = {damp!r}: must be finite and >= 0 (spec HSCALE-GPTQ-1)")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) \
            or block_size < 1:
        raise ValueError(f"block_size = {block_size!r}: must be an integer >= 1 "
                         "(spec HSCALE-GPTQ-1)")
    global_scale = resolve_global_scale(weight, global_scale, scale_ceiling)
    h = np.diag(H).copy()  # HSCALE-GPTQ-1: h = diag(H)
    order = sweep_order(H, act_order)
    # in sweep order (no reordered copy of H when the order is the columns' own)
    factor = inverse_factor(H[np.ix_(order, order)] if act_order else H, damp)
    # Work in sweep order: column k of ``remaining`` is input column order[k]. Row-major, like
    # every update made to it (a column gather alone gives column-major, and the mixed layouts
    # cost the sweep 4x on a 4096 x 4096 layer; the values are the same either way).
    remaining = np.ascontiguousarray(weight.astype(np.float64)[:, order])
    position = np.empty(cols, dtype=np.intp)
    position[order] = np.arange(cols)  # input column -> sweep position
    group_cols = cols // GROUP_SIZE
    scale_bytes = np.empty((rows, group_cols), dtype=np.uint8)
    initial_bytes = np.empty((rows, group_cols), dtype=np.uint8)
    chosen = np.zeros(group_cols, dtype=bool)
    # The window table is the same for every group column: made once (HSCALE-WIN-1).
    context = (group_quantizer or Quantizer()).prepare(Options(method, init, K, U))

    def choose(group, block):
        """The bytes of ``group`` from its 16 columns ``block`` (rows, 16), input order."""
        first = group * GROUP_SIZE
        initial_bytes[:, group], scale_bytes[:, group] = select_scale_bytes(
            block, h[first:first + GROUP_SIZE], method, init, K, U, global_scale,
            group_quantizer, context)
        chosen[group] = True

    if static_groups:
        original = weight.astype(np.float64)
        for group in range(group_cols):
            choose(group, original[:, group * GROUP_SIZE:(group + 1) * GROUP_SIZE])

    codes = np.empty((rows, cols), dtype=np.uint8)
    for start in range(0, cols, block_size):
        stop = min(cols, start + block_size)
        errors = np.zeros((rows, stop - start))  # this block's pushed errors, not yet applied
        for k in range(start, stop):             # beyond the block
            column_index = order[k]
            group = column_index // GROUP_SIZE
            if not chosen[group]:
                members = position[group * GROUP_SIZE:(group + 1) * GROUP_SIZE]
                current = remaining[:, members].copy()
                outside = members >= stop  # not yet reached by this block's errors
                current[:, outside] -= errors[:, :k - start] @ factor[start:k, members[outside]]
                choose(group, current)
            scale_byte = scale_bytes[:, group]
            column = remaining[:, k]
            column_codes = encode_groups(column[:, None], scale_byte, global_scale)[:, 0]
            codes[:, column_index] = column_codes
            dequantized = E2M1_VALUES[column_codes] * effective_scale(scale_byte, global_scale)
            error = (column - dequantized) / factor[k, k]
            remaining[:, k + 1:stop] -= np.outer(error, factor[k, k + 1:stop])  # GPTQ's update
            errors[:, k - start] = error
        remaining[:, stop:] -= errors @ factor[start:stop, stop:]  # the lazy batch update

    return QuantizedWeight.from_bytes(codes, scale_bytes, initial_bytes, global_scale,
                                      method=method, init=init, K=K, U=U,
                                      scale_ceiling=scale_ceiling)
