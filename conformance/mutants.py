"""Mutant backends: deliberately wrong implementations that the suite must reject.

Each mutant is the reference pipeline (``hscale.reference.Quantizer``) with ONE step replaced by
a plausible bug, reachable as ``--backend hscale.conformance.mutants:NAME`` (or
``conformance.mutants:NAME`` from the repository). ``identity`` is the unmutated pipeline: it
must pass, which shows that the failures of the others come from their one change.

====================  =======================================================  ===========================
name                  the bug (the step replaced)                              clause it breaks
====================  =======================================================  ===========================
identity              none                                                     -
round_half_away       element ties rounded half away from zero (encode)        NVFP4-E2M1-2
first_candidate_tie   exact ties broken by the first candidate in window       HSCALE-ARGMIN-1
                      order, -D first, instead of the priority order
                      (window_table)
fp32_objective        the objective evaluated in float32 (objective)           HSCALE-OBJ-1
no_clip               window shifts not clipped to the ladder (window_table):  HSCALE-WIN-1
                      the walk runs off the ladder into 0x7F (NaN) and, below
                      0x00, wraps to 0xFF (NaN) and the negative bytes
sliding_window        window slid to stay inside the ladder, K candidates      HSCALE-WIN-1
                      always, instead of clipped (window_table)
negative_zero         a negative that rounds to magnitude 0 (-0.0 included)   NVFP4-E2M1-3
                      coded 0x0 (encode; ModelOpt, TE reference)               (allowance negative-zero)
reciprocal_multiply   codes from fp32(|w| * (1/s)) (encode; torchao,           NVFP4-E2M1-2
                      FlashInfer)                                              (allowance reciprocal-multiply)
sequential_sum        objective summed left to right, not by the pairwise      HSCALE-OBJ-1
                      tree (objective)
fp32_scale_division   the group quotient amax_g / (6 s_g) divided in fp32      NVFP4-INIT-1
                      (range_bytes)                                            (allowance fp32-scale-rounding)
reciprocal_global_    s_g = fp32(1 / fp32(6C / amax)) (global_scale;           NVFP4-GS-1
scale                 compressed-tensors stores the reciprocal)                (allowance reciprocal-global-scale)
zero_group_byte_one   zero groups get byte 0x38 = 1.0 (zero_group_byte;        NVFP4-ZERO-1
                      ModelOpt)                                                (allowance zero-group-byte)
no_subnormal_scales   the ladder starts at 0x08 (first_scale_byte; torchao)    NVFP4-INIT-1
                                                                               (allowance no-subnormal-scales)
low_precision_        s_g = fp32(1 / r), r = 6C / amax computed in bfloat16    NVFP4-GS-1
global_scale          (global_scale; compressed-tensors in a bf16 model)       (allowance low-precision-
                                                                               global-scale)
underflow_zero_       a non-zero group whose amax_g / (6 s_g) rounds to E4M3   NVFP4-E4M3-3
groups                zero stored as a zero group (select_bytes;               (allowance underflow-zero-
                      fouroversix, AutoRound)                                  group)
====================  =======================================================  ===========================
"""

from __future__ import annotations

import numpy as np

from hscale.backends import CAPABILITIES
from hscale.reference import (E2M1_MIDPOINTS, E2M1_VALUES, Quantizer, pairwise_sum,
                              priority_order, window_bytes, window_deltas)
from hscale.reference.e4m3 import encode_e4m3
from hscale.reference.e2m1 import SIGN_BIT


class Mutant(Quantizer):
    """The reference pipeline behind the backend protocol; subclasses replace one step."""

    name = "mutant-identity"
    capabilities = CAPABILITIES

    @property
    def version(self) -> str:
        return f"hscale.conformance.mutants ({type(self).__name__})"

    def available(self):
        return True, ""


class RoundHalfAway(Mutant):
    name = "mutant-round-half-away"

    def encode(self, groups, scale):
        code = sum((np.abs(groups) >= mid * scale).astype(np.uint8) for mid in E2M1_MIDPOINTS)
        return (np.signbit(groups).astype(np.uint8) << 3) | code  # every tie goes up


class FirstCandidateTie(Mutant):
    name = "mutant-first-candidate-tie"

    def window_table(self, K, U):
        every_byte = np.arange(self.last_scale_byte + 1)
        return window_bytes(every_byte, window_deltas(K, U))  # -D, ..., +U: smallest byte first


class Fp32Objective(Mutant):
    name = "mutant-fp32-objective"

    def objective(self, groups, h, codes, scale):
        f = np.float32
        q = E2M1_VALUES[codes.astype(np.intp)].astype(f)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            d = np.asarray(groups).astype(f) - q * np.asarray(scale).astype(f)[..., None]
            return pairwise_sum(np.asarray(h).astype(f) * (d * d)).astype(np.float64)


class NoClip(Mutant):
    name = "mutant-no-clip"

    def window_table(self, K, U):
        every_byte = np.arange(self.last_scale_byte + 1)
        # c0 + delta unclipped, in byte arithmetic: below 0x00 it wraps to 0xFF, 0xFE, ...
        return window_bytes(every_byte, priority_order(K, U), -(1 << 20), 1 << 20)


class SlidingWindow(Mutant):
    name = "mutant-sliding-window"

    def window_table(self, K, U):
        D = K - 1 - U
        low = np.clip(np.arange(self.last_scale_byte + 1) - D, 1, max(1, 126 - (K - 1)))
        return window_bytes(low + D, priority_order(K, U))  # slid, then clipped only at the ends


class NegativeZero(Mutant):
    name = "mutant-negative-zero"

    def encode(self, groups, scale):
        codes = super().encode(groups, scale)
        return np.where(codes == SIGN_BIT, 0, codes).astype(np.uint8)


class ReciprocalMultiply(Mutant):
    name = "mutant-reciprocal-multiply"

    def encode(self, groups, scale):
        inverse = 1.0 / np.asarray(scale, dtype=np.float64)  # the reciprocal, rounded
        with np.errstate(over="ignore"):
            x = (np.abs(groups) * inverse).astype(np.float32)  # multiply, rounded to fp32
        code = sum(((x > mid) if k % 2 == 0 else (x >= mid)).astype(np.uint8)
                   for k, mid in enumerate(E2M1_MIDPOINTS))
        return (np.signbit(groups).astype(np.uint8) << 3) | code


class SequentialSum(Mutant):
    name = "mutant-sequential-sum"

    def objective(self, groups, h, codes, scale):
        d = groups - E2M1_VALUES[codes.astype(np.intp)] * np.asarray(scale)[..., None]
        terms = h * (d * d)
        total = np.zeros(terms.shape[:-1])
        for j in range(terms.shape[-1]):
            total = total + terms[..., j]  # left to right instead of the pairwise tree
        return total


class ZeroGroupByteOne(Mutant):
    name = "mutant-zero-group-byte-one"
    zero_group_byte = 0x38  # E4M3 1.0, as ModelOpt writes it


class NoSubnormalScales(Mutant):
    name = "mutant-no-subnormal-scales"
    first_scale_byte = 0x08  # torchao: no subnormal E4M3 scales


class Fp32ScaleDivision(Mutant):
    name = "mutant-fp32-scale-division"

    def range_bytes(self, group_amax, s_g, top_magnitude):
        # the group quotient divided in fp32 (one rounding) instead of exactly
        quotient = (np.asarray(group_amax).astype(np.float32)
                    / np.float32(top_magnitude * float(s_g))).astype(np.float64)
        byte = encode_e4m3(quotient)
        return np.where((byte == 0) & (np.asarray(group_amax) > 0), 1, byte).astype(np.uint8)


class ReciprocalGlobalScale(Mutant):
    """s_g read back from a stored reciprocal ``r = fp32(6C) / fp32(amax)``, as
    compressed-tensors stores it."""

    name = "mutant-reciprocal-global-scale"

    def reciprocal(self, amax: float, ceiling: float):
        return np.float32(6 * ceiling) / np.float32(amax)  # 6C / amax, fp32

    def global_scale(self, weight, options):
        from hscale.reference.global_scale import dequantizes_finitely, multiplier_from_reciprocal
        spec = super().global_scale(weight, options)  # raises where the spec raises
        amax = max(float(np.max(weight)), -float(np.min(weight)))
        if amax == 0:
            return spec
        with np.errstate(over="ignore", divide="ignore"):
            stored = np.float32(self.reciprocal(amax, options.scale_ceiling))
        if not (np.isfinite(stored) and stored >= np.float32(2.0 ** -126)):
            return spec
        s_g = multiplier_from_reciprocal(stored)  # fp32(1 / r)
        if not (s_g >= np.float32(2.0 ** -126) and dequantizes_finitely(s_g)):
            return spec
        return s_g


class LowPrecisionGlobalScale(ReciprocalGlobalScale):
    """The reciprocal computed in bfloat16, as compressed-tensors does in a bfloat16 model."""

    name = "mutant-low-precision-global-scale"

    def reciprocal(self, amax: float, ceiling: float):
        import ml_dtypes
        bf16 = ml_dtypes.bfloat16
        # torch's bfloat16 division: the operands in bfloat16, the quotient computed in
        # float32 and rounded to bfloat16
        return bf16(np.float32(bf16(6 * ceiling)) / np.float32(bf16(amax)))


class UnderflowZeroGroups(Mutant):
    name = "mutant-underflow-zero-groups"

    def select_bytes(self, groups, h, s_g, options, context):
        initial, chosen = super().select_bytes(groups, h, s_g, options, context)
        amax = self.group_maxima(groups)
        with np.errstate(divide="ignore"):
            underflow = (amax > 0) & (encode_e4m3(amax / (6.0 * float(s_g))) == 0)
        # stored as a zero group: byte 0x00, whose codes encode_at makes sign-only
        return np.where(underflow, 0, initial), np.where(underflow, 0, chosen)


MUTANTS = {
    "identity": Mutant,
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
    "low_precision_global_scale": LowPrecisionGlobalScale,
    "underflow_zero_groups": UnderflowZeroGroups,
}


def _factory(cls):
    def create():
        return cls()
    create.__name__ = f"create_{cls.__name__}"
    return create


# Factories named as the mutants: --backend hscale.conformance.mutants:round_half_away
for _name, _cls in MUTANTS.items():
    globals()[_name] = _factory(_cls)
del _name, _cls
