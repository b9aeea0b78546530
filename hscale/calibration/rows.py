"""The two reductions over a layer's input rows (tokens x n) that calibration takes, written
once for both collectors (the whole model's ``HessianDiagCollector`` and the blocks'
``BlockStatistics``), so that they compute the same bits."""

from __future__ import annotations


def widened(rows):
    """The rows as float64, always a copy (``column_square_sums`` squares it in place, and the
    rows may be the Linear's own input)."""
    import torch
    return rows.to(torch.float64, copy=True)


def column_square_sums(x64):
    """HSCALE-CAL-1: ``sum over the rows of x_j^2`` per column, in float64. ``x64`` (from
    ``widened``) is squared in place: the same products as ``x64 * x64`` without a second
    tokens x n float64 array, which the hooks of a forward paid for in time."""
    return x64.square_().sum(dim=0)


def rows_amax(rows) -> float:
    """HSCALE-CAL-2: ``max |x|`` over the rows, exact in their own dtype, from one
    ``aminmax`` pass (no |x| array); NaN if the rows hold one."""
    import torch
    low, high = torch.aminmax(rows)
    if bool(torch.isnan(high)):
        return float("nan")
    return abs(max(float(high), -float(low)))  # abs: an all-zero input's -0.0 is 0.0


def token_index(mask):
    """The flat positions ``[batch * seq]`` of a token mask's counted tokens, in the row-major
    order ``x[mask]`` takes them in; computed once per batch, so that each hook gathers its
    rows with ``select_rows`` (an ``index_select``: the same rows in the same order as boolean
    indexing, without a nonzero pass per hook)."""
    return mask.reshape(-1).nonzero().squeeze(1)


def select_rows(flat, index):
    """The rows ``index`` (``token_index``) of ``flat`` (tokens x n)."""
    return flat.index_select(0, index.to(flat.device))
