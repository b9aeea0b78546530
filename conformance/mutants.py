"""Mutant backends: deliberately wrong implementations that the suite must reject.

Each mutant is :class:`Pipeline` (a compact re-statement of ``hscale.reference.quantize`` built
on the reference's primitives) with one step replaced by a plausible bug, reachable as
``--backend conformance.mutants:NAME``. ``identity`` is the unmutated pipeline: it must pass,
which shows that the failures of the others come from their one change.

====================  =======================================================  ===========================
name                  the bug                                                  clause it breaks
====================  =======================================================  ===========================
identity              none                                                     -
round_half_away       element ties rounded half away from zero                 NVFP4-E2M1-2
first_candidate_tie   exact ties broken by the first candidate in window       HSCALE-ARGMIN-1
                      order (-D first) instead of the priority order
fp32_objective        the objective evaluated in float32                       HSCALE-OBJ-1
no_clip               window shifts not clipped: byte indices below 0x01 wrap  HSCALE-WIN-1
                      (Python negative indexing), above 0x7E raise IndexError
sliding_window        window slid to stay inside the ladder (K candidates      HSCALE-WIN-1
                      always) instead of clipped
negative_zero         an exact -0.0 (and any negative rounding to 0) coded     NVFP4-E2M1-3
                      0x0 (ModelOpt, TE reference)                             (allowance negative-zero)
reciprocal_multiply   codes from fp32(|w| * (1/s)) (torchao, FlashInfer)       NVFP4-E2M1-2
                                                                               (allowance reciprocal-multiply)
sequential_sum        objective summed left to right, not by the pairwise tree  HSCALE-OBJ-1
fp32_scale_division   the group quotient amax_g / (6 s_g) divided in fp32      NVFP4-INIT-1
                                                                               (allowance fp32-scale-rounding)
reciprocal_global_    s_g = fp32(1 / fp32(6C / amax)) (compressed-tensors       NVFP4-GS-1
scale                 stores the reciprocal)                                   (allowance reciprocal-global-scale)
zero_group_byte_one   zero groups get byte 0x38 = 1.0 (ModelOpt)               NVFP4-ZERO-1
                                                                               (allowance zero-group-byte)
no_subnormal_scales   bytes below 0x08 raised to 0x08, window clipped there    NVFP4-INIT-1
                      (torchao)                                                (allowance no-subnormal-scales)
====================  =======================================================  ===========================
"""

from __future__ import annotations

import numpy as np

from hscale.backends import CAPABILITIES
from hscale.reference import (GROUP_SIZE, QuantizedWeight, compute_global_scale, pack_codes,
                              priority_order, window_deltas)
from hscale.reference.e2m1 import E2M1_MIDPOINTS, E2M1_VALUES, encode_e2m1
from hscale.reference.e4m3 import SCALE_BYTE_VALUES, encode_e4m3
from hscale.reference.objective import pairwise_sum, weighted_error
from hscale.reference.validation import (INITS, METHODS, check_choice, check_global_scale,
                                         check_hessian_diag, check_scale_ceiling, check_weight,
                                         check_window)

LADDER = SCALE_BYTE_VALUES[1:]  # bytes 0x01..0x7E at indices 0..125


class Pipeline:
    """``hscale.reference.quantize`` in one class, each step a method a mutant can replace."""

    name = "mutant-identity"
    capabilities = CAPABILITIES

    @property
    def version(self) -> str:
        return f"conformance.mutants ({type(self).__name__})"

    def available(self):
        return True, ""

    # -- the steps --------------------------------------------------------------------------
    def encode(self, groups, scale):
        """Codes of ``groups`` (G, 16) at effective scales ``scale`` (G, 1)."""
        return encode_e2m1(groups, scale)

    def objective(self, groups, h, codes, scale):
        return weighted_error(groups, h, codes, scale)

    def order(self, K, U):
        return priority_order(K, U)

    def candidate(self, c0, delta):
        """(bytes, scale values) of the candidate ``delta`` for initial bytes ``c0``."""
        byte = np.clip(c0.astype(np.int64) + delta, 1, 126)
        return byte, SCALE_BYTE_VALUES[byte]

    def range_byte(self, amax, sg, top):
        byte = encode_e4m3(amax / (top * float(sg))).astype(np.int64)
        return np.where((byte == 0) & (amax > 0), 1, byte)

    def zero_group_byte(self):
        return 0

    def global_scale(self, amax, scale_ceiling):
        return compute_global_scale(amax, scale_ceiling)

    # -- the pipeline -----------------------------------------------------------------------
    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        method = check_choice("method", method, METHODS)
        init = check_choice("init", init, INITS)
        w = np.asarray(check_weight(weight)).astype(np.float64)  # exact widening
        rows, cols = w.shape
        K, U = check_window(K, U)
        scale_ceiling = check_scale_ceiling(scale_ceiling)
        if method == "hscale":
            if hessian_diag is None:
                raise ValueError("hessian_diag: method 'hscale' needs the Hessian diagonal h "
                                 "(spec HSCALE-METHOD-1)")
            h = check_hessian_diag(hessian_diag, cols)
        sg = (self.global_scale(float(np.max(np.abs(w))), scale_ceiling) if global_scale is None
              else check_global_scale(global_scale))
        groups = w.reshape(-1, GROUP_SIZE)
        G = groups.shape[0]
        amax = np.abs(groups).max(axis=1)
        gh = (np.tile(h.reshape(-1, GROUP_SIZE), (rows, 1)) if method == "hscale"
              else np.ones((G, GROUP_SIZE)))

        c6 = self.range_byte(amax, sg, 6.0)
        if init == "maxabs":
            c0 = c6
        else:
            c4 = self.range_byte(amax, sg, 4.0)
            e6 = self._score(groups, np.ones_like(groups), c6, sg)
            e4 = self._score(groups, np.ones_like(groups), c4, sg)
            c0 = np.where(e4 < e6, c4, c6)
        c0 = np.where(amax > 0, c0, 1)

        if method == "rtn":
            chosen = c0.copy()
        else:
            chosen, best = None, None
            for delta in self.order(K, U):
                byte, value = self.candidate(c0, delta)
                err = self._score(groups, gh, byte, sg, value)
                if chosen is None:
                    chosen, best = byte.copy(), err
                    continue
                better = err < best
                chosen = np.where(better, byte, chosen)
                best = np.where(better, err, best)

        zero = amax == 0
        chosen = np.where(zero, self.zero_group_byte(), chosen)
        c0 = np.where(zero, chosen, c0)
        scale = float(sg) * SCALE_BYTE_VALUES[np.clip(chosen, 0, 126)]
        codes = self.encode(groups, np.where(zero, 1.0, scale)[:, None])
        codes = np.where(zero[:, None], np.signbit(groups).astype(np.uint8) << 3, codes)
        codes = self.final_codes(groups, codes, zero)
        codes = codes.astype(np.uint8).reshape(rows, cols)
        scale_bytes = (chosen.astype(np.int64) & 0xFF).astype(np.uint8).reshape(rows, -1)
        delta = (chosen.astype(np.int64) - c0.astype(np.int64)).astype(np.int8).reshape(rows, -1)
        return QuantizedWeight(codes=codes, packed=pack_codes(codes), scale_bytes=scale_bytes,
                               global_scale=np.float32(sg), delta=delta, method=method,
                               init=init, K=K, U=U, scale_ceiling=scale_ceiling,
                               initial_bytes=(c0.astype(np.int64) & 0xFF).astype(np.uint8).reshape(rows, -1))

    def final_codes(self, groups, codes, zero):
        return codes

    def _score(self, groups, h, byte, sg, value=None):
        value = SCALE_BYTE_VALUES[byte] if value is None else value
        scale = float(sg) * value
        codes = self.encode(groups, scale[:, None])
        return self.objective(groups, h, codes, scale)


# ------------------------------------------------------------------------------------------
# The mutants
# ------------------------------------------------------------------------------------------

class RoundHalfAway(Pipeline):
    name = "mutant-round-half-away"

    def encode(self, groups, scale):
        magnitude = np.abs(groups)
        code = np.zeros(groups.shape, dtype=np.uint8)
        for mid in E2M1_MIDPOINTS:
            code += magnitude >= mid * scale  # every tie goes up, away from zero
        return (np.signbit(groups).astype(np.uint8) << 3) | code


class FirstCandidateTie(Pipeline):
    name = "mutant-first-candidate-tie"

    def order(self, K, U):
        return window_deltas(K, U)  # -D, ..., +U: a tie keeps the smallest byte


class Fp32Objective(Pipeline):
    name = "mutant-fp32-objective"

    def objective(self, groups, h, codes, scale):
        f = np.float32
        q = E2M1_VALUES[codes.astype(np.intp)].astype(f)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            d = groups.astype(f) - q * np.asarray(scale, dtype=np.float64).astype(f)[..., None]
            e = np.asarray(h).astype(f) * (d * d)
            return pairwise_sum(e).astype(np.float64)


class NoClip(Pipeline):
    name = "mutant-no-clip"

    def candidate(self, c0, delta):
        byte = c0.astype(np.int64) + delta
        return byte, LADDER[byte - 1]  # numpy: index -1.. wraps to the top, 126.. raises


class SlidingWindow(Pipeline):
    name = "mutant-sliding-window"

    def order(self, K, U):
        self._K, self._U = K, U
        return priority_order(K, U)

    def candidate(self, c0, delta):
        K, U = self._K, self._U
        D = K - 1 - U
        low = np.clip(c0.astype(np.int64) - D, 1, 126 - (K - 1)) if K <= 126 else c0 * 0 + 1
        byte = np.clip(low + D + delta, 1, 126)
        return byte, SCALE_BYTE_VALUES[byte]


class NegativeZero(Pipeline):
    name = "mutant-negative-zero"

    def final_codes(self, groups, codes, zero):
        return np.where(codes == 0x8, 0x0, codes)


class ReciprocalMultiply(Pipeline):
    name = "mutant-reciprocal-multiply"

    def encode(self, groups, scale):
        inverse = 1.0 / np.asarray(scale, dtype=np.float64)  # the reciprocal, rounded
        with np.errstate(over="ignore"):
            x = (np.abs(groups) * inverse).astype(np.float32)  # multiply, rounded to fp32
        code = np.zeros(groups.shape, dtype=np.uint8)
        for k, mid in enumerate(E2M1_MIDPOINTS):
            code += (x > mid) if k % 2 == 0 else (x >= mid)
        return (np.signbit(groups).astype(np.uint8) << 3) | code


class SequentialSum(Pipeline):
    name = "mutant-sequential-sum"

    def objective(self, groups, h, codes, scale):
        d = groups - E2M1_VALUES[codes.astype(np.intp)] * np.asarray(scale)[..., None]
        e = h * (d * d)
        total = np.zeros(e.shape[:-1])
        for j in range(e.shape[-1]):
            total = total + e[..., j]  # left to right instead of the pairwise tree
        return total


class ZeroGroupByteOne(Pipeline):
    name = "mutant-zero-group-byte-one"

    def zero_group_byte(self):
        return 0x38  # E4M3 1.0, as ModelOpt writes it


class NoSubnormalScales(Pipeline):
    name = "mutant-no-subnormal-scales"

    def range_byte(self, amax, sg, top):
        return np.maximum(super().range_byte(amax, sg, top), 0x08)

    def candidate(self, c0, delta):
        byte = np.clip(c0.astype(np.int64) + delta, 0x08, 126)
        return byte, SCALE_BYTE_VALUES[byte]


class Fp32ScaleDivision(Pipeline):
    name = "mutant-fp32-scale-division"

    def range_byte(self, amax, sg, top):
        # the group quotient divided in fp32 (one rounding) instead of exactly
        q = (amax.astype(np.float32) / np.float32(top * float(sg))).astype(np.float64)
        byte = encode_e4m3(q).astype(np.int64)
        return np.where((byte == 0) & (amax > 0), 1, byte)


class ReciprocalGlobalScale(Pipeline):
    name = "mutant-reciprocal-global-scale"

    def global_scale(self, amax, scale_ceiling):
        spec = super().global_scale(amax, scale_ceiling)  # raises where the spec raises
        if amax == 0:
            return spec
        with np.errstate(over="ignore", divide="ignore"):
            stored = np.float32(6 * scale_ceiling) / np.float32(amax)  # 2688 / amax, in fp32
            sg = np.float32(1) / stored
        if not (np.isfinite(stored) and np.isfinite(sg) and sg >= np.float32(2.0 ** -126)):
            return spec
        return np.float32(sg)


MUTANTS = {
    "identity": Pipeline,
    "round_half_away": RoundHalfAway,
    "first_candidate_tie": FirstCandidateTie,
    "fp32_objective": Fp32Objective,
    "no_clip": NoClip,
    "sliding_window": SlidingWindow,
    "negative_zero": NegativeZero,
    "reciprocal_multiply": ReciprocalMultiply,
    "sequential_sum": SequentialSum,
    "fp32_scale_division": Fp32ScaleDivision,
    "reciprocal_global_scale": ReciprocalGlobalScale,
    "zero_group_byte_one": ZeroGroupByteOne,
    "no_subnormal_scales": NoSubnormalScales,
}


def _factory(cls):
    def create():
        return cls()
    create.__name__ = f"create_{cls.__name__}"
    return create


# Factories named as the mutants: --backend conformance.mutants:round_half_away
for _name, _cls in MUTANTS.items():
    globals()[_name] = _factory(_cls)
del _name, _cls
