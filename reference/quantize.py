"""The public entry point, ``quantize``, and the steps it is made of.

This module only wires the clauses together. ``Quantizer`` is the pipeline of docs/spec.md as
named steps, each a method that calls the function implementing its clause in the module named
beside it:

    validate          NVFP4-IN-1 .. -5                       validation.py
    global_scale      NVFP4-GS-1 .. -3                       global_scale.py
    group_maxima      amax_g of NVFP4-INIT-1                 (here)
    initial_bytes     NVFP4-INIT-1, NVFP4-INIT-2             initial_scale.py
    window_table      HSCALE-WIN-1 and the priority order    window.py, search.py
    encode            NVFP4-E2M1-2, NVFP4-E2M1-3             e2m1.py
    objective         HSCALE-OBJ-1                           objective.py
    block_objective   HSCALE-BLOCK-1 (method hscale-block)   objective.py
    search            HSCALE-ARGMIN-1 over the window        search.py
    select_bytes      HSCALE-METHOD-1, NVFP4-ZERO-1          zero_groups.py
    group_objectives  HSCALE-OBJ-1 at the chosen and initial byte (a caller's report)
    encode_at         codes at the chosen bytes              e2m1.py, zero_groups.py
    dequantize        NVFP4-DEQ-1                            dequantize.py

A backend subclasses ``Quantizer`` and replaces only its hot steps (``candidate_objectives``,
``encode``, ``group_maxima``, ``load_groups``, ``map_blocks``); a conformance mutant replaces
one step. ``quantize()`` is ``Quantizer().quantize()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import validation
from .dequantize import dequantize, effective_scale
from .e2m1 import encode_e2m1
from .constants import (DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U, FIRST_NORMAL_BYTE,
                        GROUP_SIZE, LADDER_FIRST_BYTE, LADDER_LAST_BYTE)
from .global_scale import compute_global_scale
from .initial_scale import FOUR_OVER_SIX_TOPS, TOP_MAGNITUDE, four_over_six_choice, range_fitting_byte
from .objective import UNIT_WEIGHTS, block_error, weighted_error
from .packing import pack_codes, swizzle_scale_bytes
from .search import first_minimum, priority_order, reported_delta
from .window import window_bytes
from .zero_groups import ZERO_GROUP_BYTE, is_zero_group, zero_group_codes

# A block of the weight is processed at once: whole rows of about this many groups (or a part
# of one row when a row has more), so that the float64 temporaries stay at a few tens of MB
# whatever the layer size.
BLOCK_GROUPS = 1 << 15


@dataclass(frozen=True, eq=False)
class GroupObjectives:
    """Each group's objective (HSCALE-OBJ-1) at its chosen byte (``[..., 0]``) and at its
    initial byte (``[..., 1]``), float64 (m, n/16, 2): ``squared`` with h = 1 (the squared
    error), ``weighted`` with the h the caller named (None without one). The values of the
    weighting the search ranked the window by (h = 1 for scale-only, h for hscale) are the
    search's own; the others are computed at those two bytes only (rtn searches nothing,
    hscale-block ranks by ``dw^T B dw``). A zero group's are 0: it has no error at any scale
    (NVFP4-ZERO-1). What the quantization report sums (``hscale.evaluation.quality``)."""

    squared: np.ndarray
    weighted: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """An NVFP4 tensor and how it was made.

    ``codes`` uint8 (m, n), 4-bit E2M1 codes; ``packed`` uint8 (m, n/2), element 2i in the low
    nibble; ``scale_bytes`` uint8 (m, n/16), E4M3 bytes, row-major; ``global_scale`` np.float32,
    the dequantization multiplier; ``delta`` int8 (m, n/16), the chosen shift from the initial
    byte (0 for rtn and for zero groups), and ``initial_bytes`` uint8 (m, n/16): both None for a
    result that does not say (a third-party implementation without a search).
    ``stored_global_scale``: for a result that stores its global scale as the reciprocal
    ``r = 6C/amax`` (NVFP4-GS-4), the fp32 value stored (``global_scale`` is then the multiplier
    it reads back as, ``fp32(1/r)``); None for a result that stores the multiplier itself.
    ``objectives``: each group's objectives at its chosen and initial byte
    (``GroupObjectives``), for a call that asked for them (``quantize(objectives=True)``).
    """

    codes: np.ndarray
    packed: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32
    delta: np.ndarray | None
    method: str = "hscale"
    init: str = "maxabs"
    K: int = DEFAULT_K
    U: int = DEFAULT_U
    scale_ceiling: float = DEFAULT_SCALE_CEILING
    initial_bytes: np.ndarray | None = field(default=None, repr=False)
    stored_global_scale: np.float32 | None = field(default=None, repr=False)
    objectives: GroupObjectives | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    def dequantize(self) -> np.ndarray:
        """float32 (m, n): ``fp32_rne(code_value * e4m3(scale_byte) * s_g)`` (NVFP4-DEQ-1)."""
        return dequantize(self.codes, self.scale_bytes, self.global_scale)

    @classmethod
    def from_bytes(cls, codes, scale_bytes, initial_bytes, global_scale, *, method="hscale",
                   init="maxabs", K=DEFAULT_K, U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING,
                   objectives=None) -> "QuantizedWeight":
        """The result of any quantizer from its codes and bytes: packing (NVFP4-PACK-1) and
        ``delta = chosen byte - initial byte`` (HSCALE-ARGMIN-1) are derived here, once.
        ``initial_bytes`` None: a result that does not report them (delta None too)."""
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        scale_bytes = np.ascontiguousarray(scale_bytes, dtype=np.uint8)
        delta = None
        if initial_bytes is not None:
            initial_bytes = np.ascontiguousarray(initial_bytes, dtype=np.uint8)
            delta = reported_delta(scale_bytes, initial_bytes)
        return cls(codes=codes, packed=pack_codes(codes), scale_bytes=scale_bytes,
                   global_scale=np.float32(global_scale), delta=delta, method=method, init=init,
                   K=K, U=U, scale_ceiling=scale_ceiling, initial_bytes=initial_bytes,
                   objectives=objectives)

    def swizzled_scale_bytes(self) -> np.ndarray:
        """The scale bytes in the 128x4 tiled layout of block-scaled GEMMs (NVFP4-PACK-3)."""
        return swizzle_scale_bytes(self.scale_bytes)


@dataclass(frozen=True)
class Options:
    """The validated parameters of one call (NVFP4-IN-3 .. -5)."""

    method: str = "hscale"
    init: str = "maxabs"
    K: int = DEFAULT_K
    U: int = DEFAULT_U
    scale_ceiling: float = DEFAULT_SCALE_CEILING


class ObjectiveRequest:
    """The group objectives one call was asked for (``quantize(objectives=True)``): h = 1
    always, the caller's ``objectives_h`` (n,) too where given; which of them the search itself
    ranks by (``searched``: ``"squared"`` for scale-only, ``"weighted"`` for hscale when the
    caller's h is the search's); the (m, n/16, 2) arrays block by block (``store``)."""

    def __init__(self, shape, h, searched: str | None):
        self.h = h
        self.searched = searched
        self.squared = np.empty(shape + (2,))
        self.weighted = None if h is None else np.empty(shape + (2,))

    @classmethod
    def of(cls, objectives: bool, objectives_h, h, options: Options, shape):
        """The request of a call, or None where it asked for none; ``h`` the search's."""
        if not objectives:
            return None
        objectives_h = check_objectives_h(objectives_h, shape[1] * GROUP_SIZE)
        searched = None
        if options.method == "scale-only":
            searched = "squared"  # HSCALE-METHOD-1: the search's h = 1
        elif (options.method == "hscale" and objectives_h is not None
              and np.array_equal(objectives_h, h)):
            searched = "weighted"
        return cls(shape, objectives_h, searched)

    def weightings(self, i0: int, i1: int) -> list:
        """The h of each requested weighting over group columns i0..i1 ((i1-i0, 16), or
        ``UNIT_WEIGHTS``), None for the one the search computes."""
        out = [None if self.searched == "squared" else UNIT_WEIGHTS]
        if self.h is not None:
            out.append(None if self.searched == "weighted"
                       else self.h[GROUP_SIZE * i0:GROUP_SIZE * i1].reshape(-1, GROUP_SIZE))
        return out

    def store(self, block, values) -> None:
        r0, r1, i0, i1 = block
        for array, v in zip((self.squared, self.weighted), values):
            array[r0:r1, i0:i1] = np.reshape(v, (r1 - r0, i1 - i0, 2))

    def record(self) -> GroupObjectives:
        return GroupObjectives(self.squared, self.weighted)


def check_objectives_h(objectives_h, cols: int):
    """The h of a caller's objectives as float64 (n,), checked as h is (NVFP4-IN-2) and named as
    the caller passed it; None stays None."""
    if objectives_h is None:
        return None
    try:
        return validation.check_hessian_diag(objectives_h, cols)
    except ValueError as exc:
        raise ValueError(str(exc).replace("hessian_diag", "objectives_h", 1)) from None


def plan_blocks(rows: int, group_cols: int, block_groups: int) -> list[tuple[int, int, int, int]]:
    """``(r0, r1, i0, i1)`` blocks covering the (rows, group_cols) groups: whole rows while a row
    has at most ``block_groups`` groups, else parts of one row. Every block's groups are
    contiguous in a row-major weight."""
    if group_cols <= block_groups:
        step = max(1, block_groups // group_cols)
        return [(r0, min(rows, r0 + step), 0, group_cols) for r0 in range(0, rows, step)]
    return [(r, r + 1, i0, min(group_cols, i0 + block_groups))
            for r in range(rows) for i0 in range(0, group_cols, block_groups)]


class Quantizer:
    """``quantize()`` as named steps (see the module docstring for the clause of each).

    Groups are float64 arrays (..., 16) in the reference (``load_groups`` widens exactly); a
    backend may hand its own representation between its own steps. ``h`` is the Hessian
    diagonal of each group, broadcastable against the groups: (group_cols, 16) for a block of
    whole rows, or ``UNIT_WEIGHTS`` (16,) for scale-only.
    """

    block_groups = BLOCK_GROUPS
    # The ends of the E4M3 ladder (NVFP4-E4M3-3): where the initial byte of a non-zero group
    # (NVFP4-INIT-1) and the window (HSCALE-WIN-1) are clipped.
    first_scale_byte = LADDER_FIRST_BYTE
    last_scale_byte = LADDER_LAST_BYTE
    zero_group_byte = ZERO_GROUP_BYTE  # NVFP4-ZERO-1

    # -- the whole call ------------------------------------------------------------------------
    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K, U=DEFAULT_U,
                 scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None, objectives=False,
                 objectives_h=None) -> QuantizedWeight:
        weight, h, options, given_scale = self.validate(weight, hessian_diag, method, init, K, U,
                                                        scale_ceiling, global_scale)
        # NVFP4-GS-3: a caller's s_g is used unchanged; else NVFP4-GS-1 from the tensor's amax
        s_g = given_scale if given_scale is not None else self.global_scale(weight, options)
        rows, cols = weight.shape
        group_cols = cols // GROUP_SIZE
        codes = np.empty((rows, cols), dtype=np.uint8)
        chosen = np.empty((rows, group_cols), dtype=np.uint8)  # NVFP4-PACK-2: (m, n/16), row-major
        initial = np.empty((rows, group_cols), dtype=np.uint8)
        context = self.prepare(options)
        scoring = ObjectiveRequest.of(objectives, objectives_h, h, options, (rows, group_cols))

        def run_block(block):
            r0, r1, i0, i1 = block
            cols_ = slice(GROUP_SIZE * i0, GROUP_SIZE * i1)
            groups = self.load_groups(weight[r0:r1, cols_])
            if h is None:
                group_h = None
            elif options.method == "hscale-block":
                group_h = h[i0:i1]  # HSCALE-BLOCK-1: B[i] of each group column (i1-i0, 16, 16)
            else:
                group_h = h[cols_].reshape(-1, GROUP_SIZE)
            searched = {} if scoring else None
            block_initial, block_chosen = self.select_bytes(
                groups, group_h, s_g, options, context,
                **({"searched": searched} if scoring else {}))
            codes[r0:r1, cols_] = self.encode_at(groups, block_chosen, s_g).reshape(r1 - r0, -1)
            chosen[r0:r1, i0:i1] = block_chosen
            initial[r0:r1, i0:i1] = block_initial
            if scoring:
                scoring.store(block, self.group_objectives(
                    groups, block_chosen, block_initial, s_g, searched.get("objectives"),
                    scoring.weightings(i0, i1)))

        self.map_blocks(run_block, plan_blocks(rows, group_cols, self.block_groups))
        return QuantizedWeight.from_bytes(codes, chosen, initial, s_g, method=options.method,
                                          init=options.init, K=options.K, U=options.U,
                                          scale_ceiling=options.scale_ceiling,
                                          objectives=scoring.record() if scoring else None)

    def validate(self, weight, hessian_diag, method, init, K, U, scale_ceiling, global_scale):
        """``(weight, h, options, caller's s_g or None)``, each checked (NVFP4-IN-1 .. -6): h as
        float64 (n,) for hscale, the blocks (n/16, 16, 16) for hscale-block, None for the
        methods that do not read it (HSCALE-METHOD-1)."""
        weight, method, init, K, U, scale_ceiling = check_arguments(weight, method, init, K, U,
                                                                    scale_ceiling)
        h = validation.check_method_hessian(hessian_diag, method, weight.shape[1])
        if global_scale is not None:
            global_scale = validation.check_global_scale(global_scale)
        return weight, h, Options(method, init, K, U, scale_ceiling), global_scale

    def global_scale(self, weight, options: Options) -> np.float32:
        """s_g from the tensor's amax (NVFP4-GS-1, -2); max |W| without a |W| temporary, exact
        in the weight's own dtype."""
        amax = max(float(np.max(weight)), -float(np.min(weight)))
        return compute_global_scale(amax, options.scale_ceiling)

    def prepare(self, options: Options) -> dict:
        """What every block of one call shares: the window of every initial byte."""
        return {"window": self.window_table(options.K, options.U)}

    def map_blocks(self, function, blocks) -> None:
        """``function(block)`` for every block, in order (a backend may run them in parallel)."""
        for block in blocks:
            function(block)

    # -- the steps of a block -------------------------------------------------------------------
    def load_groups(self, block_weight: np.ndarray) -> np.ndarray:
        """The block's groups (rows, group_cols, 16) as float64: an exact widening."""
        rows, cols = block_weight.shape
        return block_weight.astype(np.float64).reshape(rows, cols // GROUP_SIZE, GROUP_SIZE)

    def group_maxima(self, groups) -> np.ndarray:
        """amax_g = max_j |w_j| of each group (...), float64 (NVFP4-INIT-1)."""
        return np.max(np.abs(groups), axis=-1).astype(np.float64, copy=False)

    def select_bytes(self, groups, h, s_g, options: Options, context: dict, searched=None):
        """``(initial bytes, chosen bytes)`` (...) of the groups: zero groups get 0x00 and are
        neither initialised nor searched (NVFP4-ZERO-1); rtn keeps the initial byte, scale-only
        searches with h = 1, hscale with h (HSCALE-METHOD-1). ``searched`` (a dict): the
        search's objectives at the chosen and the initial byte go under ``"objectives"``
        (..., 2), 0 for zero groups, where the search ranks by HSCALE-OBJ-1."""
        amax = self.group_maxima(groups)
        zero = is_zero_group(amax)  # NVFP4-ZERO-1
        live_groups, live_h, live_amax = _live(~zero, groups, h, amax,
                                               block=options.method == "hscale-block")
        live_initial = self.initial_bytes(live_groups, live_amax, s_g, options.init)
        if options.method == "rtn":
            live_chosen = live_initial  # HSCALE-METHOD-1: no search
        elif options.method == "hscale-block":  # HSCALE-METHOD-1, HSCALE-BLOCK-1
            live_chosen = self.block_search(live_groups, live_h, live_initial, s_g, context)
        else:
            weights = UNIT_WEIGHTS if options.method == "scale-only" else live_h  # HSCALE-METHOD-1
            live_chosen = self.search(live_groups, weights, live_initial, s_g, context,
                                      **({} if searched is None else {"searched": searched}))
            if searched is not None and zero.any():
                scored = np.zeros(amax.shape + (2,))  # a zero group has no error (NVFP4-ZERO-1)
                scored[~zero] = searched["objectives"]
                searched["objectives"] = scored
        if not zero.any():
            return live_initial, live_chosen
        initial = np.full(amax.shape, self.zero_group_byte, dtype=np.uint8)
        chosen = initial.copy()
        initial[~zero] = live_initial
        chosen[~zero] = live_chosen
        return initial, chosen

    def range_bytes(self, group_amax, s_g, top_magnitude) -> np.ndarray:
        """The byte mapping each group maximum onto ``top_magnitude`` (NVFP4-INIT-1)."""
        return range_fitting_byte(group_amax, s_g, top_magnitude, self.first_scale_byte)

    def initial_bytes(self, groups, group_amax, s_g, init: str) -> np.ndarray:
        """The baseline byte of each (non-zero) group: max-abs (NVFP4-INIT-1) or 4over6, the
        better of the bytes at 6 and at 4 by the unweighted objective (NVFP4-INIT-2)."""
        if init == "maxabs":
            return self.range_bytes(group_amax, s_g, TOP_MAGNITUDE)  # NVFP4-INIT-1
        pair = np.stack([self.range_bytes(group_amax, s_g, top) for top in FOUR_OVER_SIX_TOPS],
                        axis=-1)
        errors = self.candidate_objectives(groups, UNIT_WEIGHTS, pair, s_g)
        return four_over_six_choice(pair, errors)  # NVFP4-INIT-2

    def window_table(self, K: int, U: int) -> np.ndarray:
        """Row c: the window around initial byte c, ``clip(c + delta, 0x01, 0x7E)`` for the
        shifts in priority order (HSCALE-WIN-1, HSCALE-ARGMIN-1); (127, k) uint8."""
        every_byte = np.arange(self.last_scale_byte + 1)
        return window_bytes(every_byte, priority_order(K, U), self.first_scale_byte,
                            self.last_scale_byte)

    def search(self, groups, h, initial, s_g, context: dict, searched=None) -> np.ndarray:
        """The candidate of least objective in the window of each initial byte; on equal
        objectives the earlier one in priority order (HSCALE-WIN-1 .. HSCALE-ARGMIN-1).
        ``searched`` (a dict): the objectives at the chosen byte and at the initial byte
        (shift 0, the first in priority order) go under ``"objectives"`` (..., 2)."""
        window = context["window"][initial]  # (..., k) in priority order
        errors = self.candidate_objectives(groups, h, window, s_g)
        best = first_minimum(errors)  # HSCALE-ARGMIN-1
        if searched is not None:
            searched["objectives"] = np.stack(
                (np.take_along_axis(errors, best[..., None], axis=-1)[..., 0], errors[..., 0]),
                axis=-1)
        return np.take_along_axis(window, best[..., None], axis=-1)[..., 0]

    def block_search(self, groups, blocks, initial, s_g, context: dict) -> np.ndarray:
        """The search of ``search`` (same window, same first minimum) scored by the
        block-Hessian objective (HSCALE-BLOCK-1); ``blocks`` (..., 16, 16)."""
        window = context["window"][initial]  # HSCALE-WIN-1, in priority order
        errors = np.empty(window.shape, dtype=np.float64)
        for k in range(window.shape[-1]):
            scale = effective_scale(window[..., k], s_g)  # NVFP4-DEQ-1
            codes = self.encode(groups, scale[..., None])  # NVFP4-E2M1-2
            errors[..., k] = self.block_objective(groups, blocks, codes, scale)
        best = first_minimum(errors)  # HSCALE-ARGMIN-1
        return np.take_along_axis(window, best[..., None], axis=-1)[..., 0]

    def block_objective(self, groups, blocks, codes, scale) -> np.ndarray:
        """``E = dw^T B dw`` of each group, as HSCALE-BLOCK-1 evaluates it."""
        return block_error(np.asarray(groups, dtype=np.float64), blocks, codes, scale)

    def candidate_objectives(self, groups, h, candidates, s_g) -> np.ndarray:
        """The objective (..., k) of each group at each of its candidate bytes (..., k): the
        codes by ``encode`` at the candidate's scale, scored by ``objective``."""
        errors = np.empty(candidates.shape, dtype=np.float64)
        for k in range(candidates.shape[-1]):
            scale = effective_scale(candidates[..., k], s_g)  # NVFP4-DEQ-1
            codes = self.encode(groups, scale[..., None])
            errors[..., k] = self.objective(groups, h, codes, scale)
        return errors

    def candidate_objectives_weighted(self, groups, weightings, candidates, s_g) -> list:
        """``candidate_objectives`` of the same candidates under each of ``weightings`` (each an
        ``h`` as above: the report scores its results with h and with ``UNIT_WEIGHTS``), each
        array the caller's own. A backend may round once for all of them; the values are those
        of separate calls."""
        return [np.array(self.candidate_objectives(groups, h, candidates, s_g))
                for h in weightings]

    def group_objectives(self, groups, chosen, initial, s_g, searched, weightings) -> list:
        """Each group's objectives at its chosen and initial byte (..., 2) under each of
        ``weightings`` (``ObjectiveRequest.weightings``): an h is scored here, at those two
        bytes only (one where they are the same byte, as for rtn), a zero group at a live
        stand-in byte, where its objective is exactly 0; None is the search's own weighting,
        whose values ``searched`` (..., 2) are taken as they are."""
        scored = [h for h in weightings if h is not None]
        values = []
        if scored:
            same = np.array_equal(chosen, initial)
            candidates = np.stack((chosen,) if same else (chosen, initial), axis=-1)
            candidates[candidates == ZERO_GROUP_BYTE] = FIRST_NORMAL_BYTE
            values = [np.broadcast_to(v, v.shape[:-1] + (2,)) for v in
                      self.candidate_objectives_weighted(groups, scored, candidates, s_g)]
        values = iter(values)
        return [searched if h is None else next(values) for h in weightings]

    def encode(self, groups, scale) -> np.ndarray:
        """E2M1 codes of the groups at the effective scales (broadcastable) (NVFP4-E2M1-2, -3)."""
        return encode_e2m1(groups, scale)

    def objective(self, groups, h, codes, scale) -> np.ndarray:
        """``E = sum_j h_j (w_j - q_j s)^2`` of each group, as HSCALE-OBJ-1 evaluates it."""
        return weighted_error(groups, h, codes, scale)

    def encode_at(self, groups, scale_bytes, s_g) -> np.ndarray:
        """Codes (..., 16) of the groups at their chosen bytes; zero groups (byte 0x00, which
        no other group has, NVFP4-E4M3-3) keep only their signs (NVFP4-ZERO-1)."""
        zero = scale_bytes == ZERO_GROUP_BYTE
        if not zero.any():
            return self.encode(groups, effective_scale(scale_bytes, s_g)[..., None])
        codes = np.empty(np.shape(groups), dtype=np.uint8)
        live_groups = _live(~zero, groups)[0]
        codes[~zero] = self.encode(live_groups, effective_scale(scale_bytes[~zero], s_g)[..., None])
        codes[zero] = zero_group_codes(np.asarray(groups)[zero])  # NVFP4-ZERO-1
        return codes


def _live(live, groups, h=None, amax=None, block=False):
    """``(groups, h, amax)`` of the groups selected by ``live``: the arrays themselves when
    every group is live (no copy), else the live ones, (L, 16) and (L,); ``block``: h holds a
    16 x 16 block per group column (L, 16, 16)."""
    if live.all():
        return groups, h, amax
    if h is not None:
        h = np.broadcast_to(h, np.shape(groups)[:-1] + np.shape(h)[-2 if block else -1:])[live]
    return np.asarray(groups)[live], h, None if amax is None else amax[live]


_REFERENCE = Quantizer()


def quantize(weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K, U=DEFAULT_U,
             scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None, objectives=False,
             objectives_h=None) -> QuantizedWeight:
    """Quantize ``weight`` (m, n) to NVFP4.

    method: ``"rtn"`` keeps the initial byte (ignores K, U and the Hessian); ``"scale-only"``
    searches the window with h = 1 (ignores the Hessian); ``"hscale"`` searches it with
    ``hessian_diag`` (required), the diagonal of X^T X; ``"hscale-block"`` searches the same
    window scored by ``dw^T B dw``, the second argument then the diagonal 16 x 16 blocks of
    X^T X, (n/16, 16, 16) (HSCALE-BLOCK-1, HSCALE-METHOD-1).
    init: ``"maxabs"`` (NVFP4-INIT-1) or ``"4over6"`` (NVFP4-INIT-2).
    K, U: window size and upward shifts (HSCALE-WIN-1).
    scale_ceiling: C of NVFP4-GS-1 (448 default, 256 for the 4over6 convention).
    global_scale: a pipeline's own s_g (positive normal fp32), else computed (NVFP4-GS-1).
    objectives: the result's ``objectives`` holds each group's objective at its chosen and its
    initial byte (``GroupObjectives``), with h = 1 and, where ``objectives_h`` (n,) is given,
    with that h: the search's own values where it ranked by the same weighting.
    """
    return _REFERENCE.quantize(weight, hessian_diag, method=method, init=init, K=K, U=U,
                               scale_ceiling=scale_ceiling, global_scale=global_scale,
                               objectives=objectives, objectives_h=objectives_h)


# -- the steps as functions, for pipelines that compose them (reference/gptq.py) ---------------

def check_arguments(weight, method, init, K, U, scale_ceiling):
    """The arguments every quantizer shares, checked (NVFP4-IN-1, -3, -4, -5)."""
    method = validation.check_choice("method", method, validation.METHODS)
    init = validation.check_choice("init", init, validation.INITS)
    weight = validation.check_weight(weight)
    K, U = validation.check_window(K, U)
    scale_ceiling = validation.check_scale_ceiling(scale_ceiling)
    return weight, method, init, K, U, scale_ceiling


def resolve_global_scale(weight, global_scale, scale_ceiling) -> np.float32:
    """The caller's s_g checked (NVFP4-GS-3, NVFP4-IN-4), or s_g computed (NVFP4-GS-1)."""
    if global_scale is not None:
        return validation.check_global_scale(global_scale)
    return _REFERENCE.global_scale(weight, Options(scale_ceiling=scale_ceiling))


def select_scale_bytes(groups, group_h, method, init, K, U, global_scale, quantizer=None,
                       context=None):
    """(initial byte, chosen byte) of each group (rows of ``groups``, float64 (G, 16));
    ``group_h`` (16,) or (G, 16), read by hscale only. ``quantizer``: whose steps (the
    reference's by default). ``context``: what ``quantizer.prepare`` made for these options (the
    window table), for a caller choosing many sets of groups with one set of options."""
    options = Options(method, init, K, U)
    quantizer = quantizer or _REFERENCE
    if context is None:
        context = quantizer.prepare(options)
    return quantizer.select_bytes(groups, group_h, global_scale, options, context)


def encode_groups(groups, scale_byte, global_scale):
    """Codes of each group at its chosen byte; a zero group keeps only signs (NVFP4-ZERO-1)."""
    return _REFERENCE.encode_at(groups, scale_byte, global_scale)
