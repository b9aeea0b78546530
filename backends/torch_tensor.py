"""The whole-tensor pipeline of the torch backends (``torch`` on the CPU, ``torch-cuda``): the
weight, h (or hscale-block's 16 x 16 blocks), every intermediate and the result stay torch
tensors on the backend's device; nothing goes to the host but the tensor's amax (one scalar,
for s_g) unless the caller asks for the result there.

Each block of groups (whole rows, or a part of one row: ``plan_blocks``) goes through the
reference's steps, in its order, as vectorised torch ops over every group of the block:

    amax_g, zero groups          ``torch.aminmax`` per group                   NVFP4-ZERO-1
    initial byte                 ``e4m3_bytes`` of amax_g / (top * s_g)        NVFP4-INIT-1, -2
    window, objectives, argmin   the reference's window table, ``torch_kernels``  HSCALE-WIN-1 ..
                                 objectives, ``torch.min``'s first minimum     HSCALE-ARGMIN-1
    codes at the chosen byte     ``torch_kernels.eager_encode``                NVFP4-E2M1-2, -3
    packing                      two codes per byte                            NVFP4-PACK-1

Exactness, beyond ``torch_kernels``' own argument (the objectives and the codes):

* ``e4m3_bytes``: ``value = f * 2^e`` (``torch.frexp``, f in [0.5, 1)); in a normal E4M3 binade
  the quantum is ``2^(e-4)``, so the number of quanta is ``16 f``, exact; below the smallest
  normal (2^-6) it is ``value * 2^9``, exact. ``torch.round`` rounds half to even
  (NVFP4-E4M3-2), as ``np.rint`` in ``hscale.reference.e4m3.encode_e4m3``. The quotient
  ``amax_g / (top * s_g)`` is the reference's IEEE float64 division (``top * s_g`` exact).
* zero groups are computed with a stand-in byte (0x01, any positive scale) and then given
  0x00; ``eager_encode`` at any positive scale gives a zero group's codes of NVFP4-ZERO-1 (the
  sign bits, magnitude 0), so they need no step of their own.
* 4over6 takes the byte at 4 only where its unweighted objective is strictly smaller (a tie
  keeps 6, NVFP4-INIT-2): the objectives are never NaN for a non-zero group (HSCALE-OBJ-1).
* the search: ``torch.min(dim=1).indices`` is the first minimal index (HSCALE-ARGMIN-1;
  tests/backends/test_backends_smoke.py checks it on both devices it runs on).

``TensorRun`` is one call; ``TorchQuantizer.quantize`` (numpy in and out) and
``TorchBackend.quantize_on_device`` (tensors in and out) both run it.
"""

from __future__ import annotations

import numpy as np

from hscale.reference import E2M1_VALUES, SCALE_BYTE_VALUES, QuantizedWeight
from hscale.reference.constants import LADDER_FIRST_BYTE, LADDER_LAST_BYTE
from hscale.reference.e4m3 import SMALLEST_NORMAL
from hscale.reference.initial_scale import FOUR_OVER_SIX_TOPS, TOP_MAGNITUDE
from hscale.reference.quantize import Options, plan_blocks
from hscale.reference.search import priority_order
from hscale.reference.zero_groups import ZERO_GROUP_BYTE

from . import torch_kernels as kernels
from . import torch_walk as walk

GROUP = kernels.GROUP
# rtn on CUDA: 4x the blocks of a search (524288 groups), 2.7x faster on an H200 at 8192^2
CUDA_RTN_BLOCK_FACTOR = 4


def e4m3_bytes(torch, value):
    """The E4M3 byte (int64) of each non-negative finite float64 ``value``: round to nearest,
    ties to even, saturating at 0x7E (NVFP4-E4M3-2), by the reference's formula
    ``8 * (quantum exponent + 9) + quanta`` (module docstring)."""
    mantissa, exponent = torch.frexp(value)
    subnormal = value < SMALLEST_NORMAL
    quantum_exponent = torch.where(subnormal, -9, exponent.to(torch.int64) - 4)
    quanta = torch.where(subnormal, value * 512.0, mantissa * 16.0).round().to(torch.int64)
    return (8 * (quantum_exponent + 9) + quanta).clamp_max_(LADDER_LAST_BYTE)


def range_bytes(torch, amax, s_g, top: float):
    """NVFP4-INIT-1's byte mapping each group maximum onto ``top``; a non-zero group below the
    ladder gets 0x01 (``hscale.reference.initial_scale.range_fitting_byte``)."""
    byte = e4m3_bytes(torch, amax / (top * float(s_g)))  # NVFP4-INIT-1, denominator exact
    return torch.where(amax > 0, byte.clamp_min(LADDER_FIRST_BYTE), byte)


class TensorRun:
    """One quantization of a weight tensor (m, n) on the quantizer's device: ``run()`` fills
    the result tensors block by block (``quantizer.map_blocks``: worker threads on the CPU),
    each block through the fused walk (``torch_walk``, compiled and checked by
    ``torch_compile.CompiledWalk``) where the quantizer uses it, else through the eager steps
    below."""

    def __init__(self, quantizer, weight, h, options: Options, s_g, codes: bool = True,
                 objectives=None):
        torch = self.torch = quantizer.torch
        self.q = quantizer
        device = quantizer.device
        self.weight, self.options, self.s_g = weight, options, np.float32(s_g)
        rows, cols = weight.shape
        self.group_cols = cols // GROUP
        # HSCALE-METHOD-1: h is read by hscale (n,) and hscale-block (n/16, 16, 16) only
        self.h = None if h is None else torch.from_numpy(np.ascontiguousarray(h)).to(device)
        self.scales = torch.from_numpy(SCALE_BYTE_VALUES * float(s_g)).to(device)  # exact
        window = quantizer.window_table(options.K, options.U)  # (127, k), the reference's
        self.window = torch.from_numpy(window.astype(np.int64)).to(device)
        self.window_scales = self.scales[self.window]  # (127, k)
        self.values = torch.from_numpy(E2M1_VALUES).to(device)
        self.chosen = torch.empty((rows, self.group_cols), dtype=torch.uint8, device=device)
        self.initial = torch.empty_like(self.chosen)
        self.packed = torch.empty((rows, cols // 2), dtype=torch.uint8, device=device)
        self.codes = (torch.empty((rows, cols), dtype=torch.uint8, device=device) if codes
                      else None)
        self.h_columns_cache = {}
        self.tables = None  # the fused walk's inputs that every block shares (walk_args)
        self.scoring = None if objectives is None else ObjectiveRun(self, *objectives)

    def run(self):
        """Every block through the steps; the result as the cupy backend's ``DeviceResult``."""
        from .cupy_backend import DeviceResult
        rows = self.weight.shape[0]
        k = self.window.shape[1]
        # the work buffers grow with the window: (16, groups, k) float64
        block_groups = self.q.block_groups
        if k > 16 and not self.q.use_compile:
            block_groups = max(1, block_groups * 16 // k)
        if self.options.method == "rtn" and self.q.device.type == "cuda":
            # no window: the blocks are launch-bound, not memory-bound (docs/performance.md)
            block_groups *= CUDA_RTN_BLOCK_FACTOR
        if not self.q.use_compile:
            self.q.map_blocks(self.run_block, plan_blocks(rows, self.group_cols, block_groups))
        else:
            blocks = walk_blocks(rows, self.group_cols, block_groups)
            first, fresh = [], set()  # the first block of each shape not yet checked
            verified = self.q.backend.fused.walk.verified
            for block in blocks:
                key = self.block_key(block)
                if key not in verified and key not in fresh:
                    fresh.add(key)
                    first.append(block)
            self.q.map_blocks(self.run_block, [b for b in blocks if b not in first], first)
        return DeviceResult(self.packed, self.chosen, self.initial, self.codes, self.s_g,
                            self.options, None if self.scoring is None else self.scoring.record())

    # -- one block -----------------------------------------------------------------------------
    def run_block(self, block):
        if self.q.use_compile:
            fused = self.q.backend.fused.walk(self, block, self.q._may_compile())
            if fused is not None:
                self.store_fused(block, *fused)
                return
        weightings = None if self.scoring is None else self.scoring.weightings(block)
        self.store(block, *self.eager_block(block, weightings))

    def store(self, block, codes, chosen, initial, objectives=None):
        """A block's codes (R, 16 C), chosen and initial bytes (R, C) into the result, and its
        group objectives ((G, 2) each) where asked for."""
        r0, r1, i0, i1 = block
        if objectives is not None:
            self.scoring.store(block, objectives)
        if self.codes is not None:
            self.codes[r0:r1, GROUP * i0:GROUP * i1] = codes
        self.packed[r0:r1, 8 * i0:8 * i1] = codes[:, 0::2] | (codes[:, 1::2] << 4)  # PACK-1
        self.chosen[r0:r1, i0:i1] = chosen
        self.initial[r0:r1, i0:i1] = initial

    def store_fused(self, block, packed_t, chosen_t, initial_t, scored_t):
        """The fused walk's outputs, (8, C, R), (C, R) and (4, C, R), into the row-major
        result."""
        r0, r1, i0, i1 = block
        if self.scoring is not None:
            self.scoring.store_fused(block, chosen_t, initial_t, scored_t)
        packed = self.packed[r0:r1, 8 * i0:8 * i1]
        packed.view(r1 - r0, i1 - i0, 8).copy_(packed_t.permute(2, 1, 0))
        self.chosen[r0:r1, i0:i1] = chosen_t.t()
        self.initial[r0:r1, i0:i1] = initial_t.t()
        if self.codes is not None:
            codes = self.codes[r0:r1, GROUP * i0:GROUP * i1]
            codes[:, 0::2] = packed & 0xF  # NVFP4-PACK-1: element 2i in the low nibble
            codes[:, 1::2] = packed >> 4

    def eager_block(self, block, weightings=None):
        """The block's (codes (R, 16 C), chosen (R, C), initial (R, C)) by the eager steps, and
        with ``weightings`` (``ObjectiveRun.weightings``) its group objectives at the chosen and
        the initial byte under each, a list of (G, 2)."""
        torch, options = self.torch, self.options
        r0, r1, i0, i1 = block
        w = self.weight[r0:r1, GROUP * i0:GROUP * i1].reshape(-1, GROUP)  # (G, 16), own dtype
        low, high = torch.aminmax(w, dim=1)
        amax = torch.maximum(high, low.neg()).to(torch.float64)  # max |w|, widened exactly
        zero = amax == 0  # NVFP4-ZERO-1
        aw_t = None
        if options.init == "maxabs":
            initial = range_bytes(torch, amax, self.s_g, TOP_MAGNITUDE)  # NVFP4-INIT-1
        else:  # NVFP4-INIT-2: the byte at 4 only where strictly better than the byte at 6
            at6, at4 = (range_bytes(torch, amax, self.s_g, top).clamp_min(LADDER_FIRST_BYTE)
                        for top in FOUR_OVER_SIX_TOPS)
            aw_t = self.abs_t(w)
            errors = self.objectives(aw_t, self.scales[torch.stack((at6, at4), dim=1)], None)
            initial = torch.where(errors[:, 1] < errors[:, 0], at4, at6)
        c0 = initial.clamp_min(LADDER_FIRST_BYTE)  # zero groups: a stand-in byte, see above
        searched = None  # the search's objectives at the chosen and the initial byte (G, 2)
        if options.method == "rtn":
            chosen = c0  # HSCALE-METHOD-1: no search
        elif options.method == "hscale-block":
            chosen = self.block_search(w, c0, r1 - r0, i0, i1)
        else:
            h_t = (self.h_columns(i0, i1, r1 - r0) if options.method == "hscale"
                   else None)  # scale-only: h = 1 (HSCALE-METHOD-1)
            if aw_t is None:
                aw_t = self.abs_t(w)
            errors = self.objectives(aw_t, self.window_scales.index_select(0, c0), h_t)
            rank = torch.min(errors, dim=1).indices  # HSCALE-ARGMIN-1: the first minimum
            if weightings is not None:  # the initial byte is the window's first (shift 0)
                searched = torch.stack((errors.gather(1, rank.unsqueeze(1))[:, 0],
                                        errors[:, 0]), dim=1)
            chosen = torch.take(self.window, c0 * self.window.shape[1] + rank)
        scale = torch.where(zero, 1.0, self.scales[chosen])  # zero groups: any positive scale
        codes = self.encode(w, scale)  # NVFP4-E2M1-2, -3; NVFP4-ZERO-1 for zero groups
        rows = r1 - r0
        out = (codes.view(rows, -1), torch.where(zero, ZERO_GROUP_BYTE, chosen).view(rows, -1),
               torch.where(zero, ZERO_GROUP_BYTE, initial).view(rows, -1))
        if weightings is None:
            return out
        aw_t = aw_t if aw_t is not None else self.abs_t(w)
        return out + (self.group_objectives(aw_t, chosen, c0, searched, weightings),)

    def group_objectives(self, aw_t, chosen, c0, searched, weightings) -> list:
        """The groups' objectives (G, 2) at the chosen byte and at the initial byte ``c0`` (a
        live stand-in for zero groups, where the objective is exactly 0) under each of
        ``weightings``: ``SEARCHED`` the search's own values ``searched``, an h (16, G) or None
        (h = 1) computed here by one rounding at those two bytes (one where they are the same
        byte everywhere, as for rtn)."""
        torch = self.torch
        computed = [h_t for h_t in weightings if h_t is not SEARCHED]
        values = []
        if computed:
            same = chosen is c0 or torch.equal(chosen, c0)
            scale = self.scales[(chosen if same else torch.stack((chosen, c0), dim=1))
                                .view(chosen.shape[0], -1)]
            values = [v.expand(-1, 2) for v in kernels.eager_objectives_weighted(
                torch, aw_t, scale, computed, self.q._buffers())]
        values = iter(values)
        return [searched if h_t is SEARCHED else next(values) for h_t in weightings]

    def block_search(self, w, c0, rows, i0, i1):
        """The window scored by HSCALE-BLOCK-1 (``torch_kernels.block_objectives``), one
        candidate position at a time; the first minimum (HSCALE-ARGMIN-1)."""
        torch = self.torch
        k = self.window.shape[1]
        w64 = w.to(torch.float64).view(rows, i1 - i0, GROUP)
        blocks = self.h[i0:i1]  # (C, 16, 16): B[i] of each group column, broadcast over rows
        bytes_ = self.window.index_select(0, c0)  # (G, k)
        errors = torch.empty(bytes_.shape, dtype=torch.float64, device=w.device)
        for j in range(k):
            scale = self.scales[bytes_[:, j]]
            codes = self.encode(w, scale).to(torch.int64)
            values = self.values[codes].view(rows, i1 - i0, GROUP)
            errors[:, j] = kernels.block_objectives(torch, w64, values,
                                                    scale.view(rows, i1 - i0), blocks).view(-1)
        rank = torch.min(errors, dim=1).indices  # HSCALE-ARGMIN-1
        return torch.take(bytes_, torch.arange(bytes_.shape[0], device=w.device) * k + rank)

    # -- the eager kernels ---------------------------------------------------------------------
    def abs_t(self, w):
        """|w|^T (16, G) float64 in the thread's buffer, as the eager objectives take it."""
        aw_t = self.q._buffers().get("aw", w.numel()).view(GROUP, w.shape[0])
        return aw_t.copy_(w.t()).abs_()

    def objectives(self, aw_t, scale, h_t):
        """E (G, k) by the eager kernel."""
        return kernels.eager_objectives(self.torch, aw_t, scale, h_t, self.q._buffers())

    def encode(self, w, scale):
        """Codes (G, 16) uint8 of the groups at their effective scales (G,) float64."""
        return kernels.eager_encode(self.torch, w, scale, self.q._buffers())

    def h_columns(self, i0, i1, rows, h=None):
        """h (the search's, else ``h`` (n,)) of the block's groups as (16, G) float64: the
        row's pattern for every row."""
        key = (i0, i1, rows, h is None)
        h_t = self.h_columns_cache.get(key)
        if h_t is None:
            h = self.h if h is None else h
            h_t = h[GROUP * i0:GROUP * i1].view(i1 - i0, GROUP).t().repeat(1, rows)
            self.h_columns_cache[key] = h_t = h_t.contiguous()
        return h_t

    # -- the fused walk (torch_walk, torch_compile.CompiledWalk) -------------------------------
    def walk_args(self, block):
        """``torch_walk.walk``'s inputs for a block: its weights (R, C, 16), its h (C, 16) or
        blocks (C, 16, 16) or None, and the tables every block shares."""
        torch = self.torch
        if self.tables is None:
            with np.errstate(divide="ignore"):
                recips = 1.0 / (SCALE_BYTE_VALUES * float(self.s_g))  # byte 0: inf, unused
            shifts = ([0] if self.options.method == "rtn"  # HSCALE-METHOD-1: no search
                      else priority_order(self.options.K, self.options.U))  # HSCALE-WIN-1
            # one shift repeated: a window of one byte, two long (a size of 1 is a shape of its
            # own to the compiler); the repeat never wins, the first minimum keeps the first
            shifts = torch.tensor(shifts * 2 if len(shifts) == 1 else shifts,
                                  dtype=torch.int64, device=self.scales.device)
            tops = np.array([top * float(self.s_g) for top in FOUR_OVER_SIX_TOPS])  # exact
            self.tables = (self.scales, torch.from_numpy(recips).to(self.scales.device),
                           shifts, torch.from_numpy(tops).to(self.scales.device))
        r0, r1, i0, i1 = block
        w = self.weight[r0:r1, GROUP * i0:GROUP * i1].view(r1 - r0, i1 - i0, GROUP)
        method = self.options.method
        if method == "hscale":
            h = self.h[GROUP * i0:GROUP * i1].view(i1 - i0, GROUP)
        elif method == "hscale-block":
            h = self.h[i0:i1]
        else:  # rtn, scale-only: h = 1 (HSCALE-METHOD-1)
            h = torch.ones((i1 - i0, GROUP), dtype=torch.float64, device=w.device)
        # float32: bfloat16 and float16 widen exactly, and one graph serves every dtype
        return (w.to(torch.float32), h) + self.tables

    def walk_key(self, args):
        """(block objective, 4over6, device, rows, groups per row, window, dtype, method): the
        first three name the compiled function, the whole key one verification."""
        w = args[0]
        return (self.options.method == "hscale-block", self.options.init == "4over6",
                w.device.type, w.shape[0], w.shape[1], args[4].shape[0], self.weight.dtype,
                self.options.method)

    def block_key(self, block):
        """``walk_key`` of a block, from its extent alone."""
        r0, r1, i0, i1 = block
        k = 2 if self.options.method == "rtn" else len(priority_order(self.options.K,
                                                                          self.options.U))
        return (self.options.method == "hscale-block", self.options.init == "4over6",
                self.weight.device.type, r1 - r0, i1 - i0, max(k, 2), self.weight.dtype,
                self.options.method)

    def walk_probe(self, block):
        """A run on ``torch_walk.probe_weight`` of the block's shape (exact ties at its initial
        bytes, zero groups, both ends of the ladder) with the block's own h, every seventh
        entry zeroed, for checking the fused walk where its roundings are decided by a hair."""
        r0, r1, i0, i1 = block
        weight = walk.probe_weight(self.torch, r1 - r0, GROUP * (i1 - i0), self.weight.device)
        h = None
        if self.options.method == "hscale":
            h = self.h[GROUP * i0:GROUP * i1].cpu().numpy().copy()
            h[::7] = 0.0
        elif self.options.method == "hscale-block":
            h = self.h[i0:i1].cpu().numpy()
        return TensorRun(self.q, weight, h, self.options, np.float32(walk.PROBE_SCALE),
                         codes=False)

    def whole_block(self):
        return (0, self.weight.shape[0], 0, self.group_cols)

    def eager_difference(self, block, fused) -> str | None:
        """None where the fused walk's bytes of a block, and its group objectives (with h = 1,
        and under the search's weighting where that is HSCALE-OBJ-1's), equal the eager steps'
        bit for bit; else the first difference: the output, the row and group in the block,
        both values, and how many groups differ."""
        torch = self.torch
        method = self.options.method
        checked = [None]  # h = 1
        if method != "hscale-block":  # rtn's walk scores its one candidate with h = 1
            checked.append(None if method == "rtn" else SEARCHED)
        codes, chosen, initial, objectives = self.eager_block(block, checked)
        packed_t, chosen_t, initial_t, scored_t = fused[:4]
        rows, groups = chosen.shape
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(rows, groups, 8)
        scored = [scored_t[2:4]] + ([scored_t[0:2]] if len(checked) > 1 else [])
        # (name, eager, fused), each (rows, groups, ...) in the block's layout
        pairs = [("packed codes", packed, packed_t.permute(2, 1, 0)),
                 ("chosen scale byte", chosen, chosen_t.t()),
                 ("initial scale byte", initial, initial_t.t())]
        for weighting, e, f in zip(("h = 1", "the search's h"), objectives, scored):
            pairs.append((f"group objectives ({weighting}; at the chosen, the initial byte)",
                          e.view(rows, groups, 2), f.permute(2, 1, 0)))
        for name, eager, got in pairs:
            differ = eager != got
            if differ.dim() > 2:
                differ = differ.flatten(2).any(dim=2)
            if bool(differ.any()):
                r, g = (int(i) for i in torch.nonzero(differ)[0])
                return (f"{name} at row {r}, group {g} of the block: fused "
                        f"{got[r, g].tolist()}, eager {eager[r, g].tolist()} "
                        f"({int(differ.sum())} of {rows * groups} groups differ)")
        return None


SEARCHED = "searched"  # a weighting whose objectives the search itself computed


class ObjectiveRun:
    """The group objectives a ``TensorRun`` was asked for (the reference's
    ``ObjectiveRequest``): h = 1 always, the caller's h (n,) where given; each from the search's
    own arithmetic where it ranked by that weighting (scale-only: h = 1; hscale: h, when the
    caller's h is the search's; the fused walk: h = 1 too, from its codes' quotient), else
    computed at the chosen and the initial byte only; kept as (m, n/16, 2) float64 tensors."""

    def __init__(self, run: "TensorRun", h=None):
        torch = run.torch
        self.run = run
        self.h = None if h is None else torch.from_numpy(
            np.ascontiguousarray(h, np.float64)).to(run.q.device)
        method = run.options.method
        self.searched = ("squared" if method == "scale-only" else
                         "weighted" if (method == "hscale" and self.h is not None
                                        and torch.equal(self.h, run.h)) else None)
        shape = tuple(run.chosen.shape) + (2,)
        self.squared = torch.empty(shape, dtype=torch.float64, device=run.q.device)
        self.weighted = None if self.h is None else torch.empty_like(self.squared)

    def weightings(self, block) -> list:
        """Each requested weighting of the block's groups for ``TensorRun.eager_block``:
        ``SEARCHED``, None (h = 1) or h (16, G)."""
        r0, r1, i0, i1 = block
        out = [SEARCHED if self.searched == "squared" else None]
        if self.h is not None:
            out.append(SEARCHED if self.searched == "weighted"
                       else self.run.h_columns(i0, i1, r1 - r0, self.h))
        return out

    def store(self, block, values) -> None:
        r0, r1, i0, i1 = block
        for array, v in zip((self.squared, self.weighted), values):
            array[r0:r1, i0:i1] = v.view(r1 - r0, i1 - i0, 2)

    def store_fused(self, block, chosen_t, initial_t, scored_t) -> None:
        """The fused walk's objectives ``scored_t`` (4, C, R): h = 1 always its own, h its own
        where the search ranked by it, else computed at the chosen and initial byte."""
        r0, r1, i0, i1 = block
        rows, groups = r1 - r0, i1 - i0
        self.squared[r0:r1, i0:i1] = scored_t[2:4].permute(2, 1, 0)
        if self.weighted is None:
            return
        if self.searched == "weighted":
            self.weighted[r0:r1, i0:i1] = scored_t[0:2].permute(2, 1, 0)
            return
        run = self.run
        w = run.weight[r0:r1, GROUP * i0:GROUP * i1].reshape(-1, GROUP)
        # zero groups (0x00) at the live stand-in byte 0x01, where their objective is 0
        chosen = chosen_t.t().reshape(-1).long().clamp_min(LADDER_FIRST_BYTE)
        c0 = initial_t.t().reshape(-1).long().clamp_min(LADDER_FIRST_BYTE)
        (values,) = run.group_objectives(run.abs_t(w), chosen, c0, None,
                                         [run.h_columns(i0, i1, rows, self.h)])
        self.weighted[r0:r1, i0:i1] = values.view(rows, groups, 2)

    def record(self):
        from hscale.reference import GroupObjectives
        return GroupObjectives(self.squared, self.weighted)


def walk_blocks(rows: int, group_cols: int, block_groups: int) -> list:
    """``plan_blocks`` for the fused walk: whole rows of about ``block_groups`` groups, the rows
    shared evenly so that no block has a single row (a dimension of 1 is a shape of its own to
    the compiler) unless the layer has one row or a row exceeds ``block_groups`` groups."""
    if group_cols > block_groups or rows == 1:
        return plan_blocks(rows, group_cols, block_groups)
    count = -(-rows // max(1, block_groups // group_cols))
    if count > 1 and rows < 2 * count:
        count = rows // 2
    step, extra = divmod(rows, count)
    blocks, r0 = [], 0
    for b in range(count):
        r1 = r0 + step + (1 if b < extra else 0)
        blocks.append((r0, r1, 0, group_cols))
        r0 = r1
    return blocks


class HostCopy:
    """``DeviceResult.to_host``'s runtime for torch tensors."""

    @staticmethod
    def to_host(tensor) -> np.ndarray:
        return tensor.cpu().numpy()


def to_host(result) -> QuantizedWeight:
    """The reference's result record of a ``TensorRun`` result, on the host."""
    return result.to_host(HostCopy)

