"""The H-Scale objective of one group (spec clause HSCALE-OBJ-1), and its block-Hessian form
(HSCALE-BLOCK-1).

``E = sum_j h_j * (w_j - q_j * s)^2``, evaluated exactly as written in float64 with no fused
multiply-add, summed by a balanced tree of adjacent pairs so that every backend gets the same
bits: ``((e0 + e1) + (e2 + e3)) + ((e4 + e5) + (e6 + e7)) + ...``.
"""

from __future__ import annotations

import numpy as np

from .constants import GROUP_SIZE
from .e2m1 import E2M1_VALUES

UNIT_WEIGHTS = np.ones(GROUP_SIZE, dtype=np.float64)  # h = 1: the plain weight error


def pairwise_sum(terms: np.ndarray) -> np.ndarray:
    """Sum over the last axis (a power of two long) by adding adjacent pairs, level by level."""
    level = terms
    while level.shape[-1] > 1:
        level = level[..., 0::2] + level[..., 1::2]  # HSCALE-OBJ-1: one rounding per add
    return level[..., 0]


def weighted_error(weight: np.ndarray, hessian_diag: np.ndarray, codes: np.ndarray,
                   scale: np.ndarray) -> np.ndarray:
    """Objective of each group: ``weight`` and ``codes`` (..., 16), ``hessian_diag`` broadcast
    against them, ``scale`` the effective scale of each group (...)."""
    code_value = E2M1_VALUES[codes.astype(np.intp)]
    reconstruction = code_value * scale[..., None]  # HSCALE-OBJ-1: exact (2 x 28 bits)
    difference = weight - reconstruction  # HSCALE-OBJ-1: one rounding
    squared = difference * difference  # HSCALE-OBJ-1: one rounding
    with np.errstate(over="ignore"):  # HSCALE-OBJ-1: overflow to +inf is part of the arithmetic
        term = hessian_diag * squared  # HSCALE-OBJ-1: one rounding, no fused multiply-add
        return pairwise_sum(term)  # HSCALE-OBJ-1


def block_error(weight: np.ndarray, blocks: np.ndarray, codes: np.ndarray,
                scale: np.ndarray) -> np.ndarray:
    """``E = dw^T B dw`` of each group (HSCALE-BLOCK-1): ``weight`` and ``codes`` (..., 16),
    ``blocks`` (..., 16, 16) broadcast against them (the group's diagonal block of X^T X),
    ``scale`` the effective scale of each group (...)."""
    code_value = E2M1_VALUES[codes.astype(np.intp)]
    reconstruction = code_value * scale[..., None]  # HSCALE-OBJ-1: exact (2 x 28 bits)
    difference = weight - reconstruction  # HSCALE-OBJ-1: one rounding
    with np.errstate(over="ignore", invalid="ignore"):  # HSCALE-BLOCK-1: IEEE arithmetic
        products = blocks * difference[..., None, :]  # HSCALE-BLOCK-1: a_jk = B_jk d_k
        row = pairwise_sum(products)  # HSCALE-BLOCK-1: t_j, adjacent pairs over k
        term = difference * row  # HSCALE-BLOCK-1: e_j = d_j t_j, one rounding
        total = pairwise_sum(term)  # HSCALE-BLOCK-1: adjacent pairs over j
    return np.where(np.isnan(total), np.inf, total)  # HSCALE-BLOCK-1: NaN counts as +inf


def diagonal_blocks(G: np.ndarray) -> np.ndarray:
    """``B[i] = G[16i:16i+16, 16i:16i+16]``, (n/16, 16, 16): the blocks of X^T X that
    ``hscale-block`` reads (HSCALE-BLOCK-1), from the full (n, n) matrix."""
    G = np.asarray(G)
    groups = G.shape[0] // GROUP_SIZE
    blocks = G.reshape(groups, GROUP_SIZE, groups, GROUP_SIZE)
    return np.ascontiguousarray(blocks[np.arange(groups), :, np.arange(groups), :])
