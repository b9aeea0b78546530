"""A second, vectorised statement of the spec, written only to *check* a result.

This module uses none of the reference's rules (it takes only numbers from
``hscale.reference.constants``: the group size, the E2M1 grid, the smallest normal fp32): every rule below is re-derived from docs/spec.md so that a
result can be certified without trusting the reference. It serves
three purposes:

- the **exact certificate** (``strict=True``): a result is accepted only if every initial byte,
  chosen byte (argmin with the tie rule), reported delta, element code, packed byte and zero
  group is exactly what the spec says. Used on the numpy backend (which *is* the reference, so
  comparing it with the reference would prove nothing) and on full models;
- the **faithful certificate** (``strict=False``): every scale byte within the window of an
  acceptable initial byte, its objective within ``objective_tolerance`` of the window minimum,
  every code the correct rounding for the byte actually chosen, with the named allowances;
- small helpers (E4M3 values, exact codes, the fp64 objective) for tests and messages.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from hscale.reference.constants import E2M1_MAGNITUDES, E2M1_MIDPOINTS, FP32_SMALLEST_NORMAL
from hscale.reference.constants import GROUP_SIZE as GROUP

from .findings import Finding

MAGNITUDES = np.array(E2M1_MAGNITUDES)
MIDPOINTS = np.array(E2M1_MIDPOINTS)
FIRST, LAST, FIRST_NORMAL = 0x01, 0x7E, 0x08
FP32_MIN_NORMAL = FP32_SMALLEST_NORMAL

#: How far (relative) s_g may be from the spec's under low-precision-global-scale: bfloat16's
#: rounding of amax and of 6C / amax (8 significant bits each), then fp32's reciprocal.
LOW_PRECISION_SG = 2.0 ** -7
#: Relative width of "near a midpoint" for the allowances that move decisions near midpoints.
NEAR = 2.0 ** -20
#: The faithful objective tolerance: E(chosen) <= E_min + tol, tol =
#: OBJ_REL * (E_min + sqrt(E_min * S)) + OBJ_ABS * S, S = the group's objective at all-zero codes
#: (sum h_j w_j^2). The sqrt term covers objectives evaluated in lower precision (errors of
#: order eps * sum h |d| |w|), the last covers E_min == 0.
OBJ_REL = 2.0 ** -14
OBJ_ABS = 2.0 ** -40
#: Rows of groups processed at once (keeps the (G, K, 16) temporaries small).
CHUNK = 1 << 14


def _e4m3_value(byte: int) -> float:
    exponent, mantissa = byte >> 3, byte & 7
    if exponent == 0:
        return mantissa * 2.0 ** -9
    return (8 + mantissa) * 2.0 ** (exponent - 10)


#: Value of scale bytes 0x00..0x7E (0x00 is zero), from the bit fields.
SCALE_VALUES = np.array([_e4m3_value(b) for b in range(LAST + 1)], dtype=np.float64)


def nearest_reciprocal_read_back(global_scale: float) -> float:
    """fp32(1 / fp32(1 / s_g)): the multiplier an implementation means when it stores a caller's
    s_g as the nearest fp32 reciprocal (IEEE fp32 divisions, each correctly rounded)."""
    with np.errstate(all="ignore"):
        one = np.float32(1)
        return float(one / (one / np.float32(global_scale)))


def priority_deltas(K: int, U: int) -> list[int]:
    """0, +1, -1, +2, -2, ... restricted to -D..+U (HSCALE-ARGMIN-1)."""
    D = K - 1 - U
    out = [0]
    for step in range(1, K):
        out += [d for d in (step, -step) if -D <= d <= U]
    return out


def magnitude_codes(absw: np.ndarray, scale) -> np.ndarray:
    """Magnitude code 0..7 of exact ``absw / scale``: count the midpoints passed; a value exactly
    on a midpoint goes to whichever neighbour code is even (NVFP4-E2M1-2). ``mid * scale`` is an
    exact fp64 product, so every comparison is exact."""
    code = np.zeros(np.shape(absw * scale), dtype=np.uint8)
    for k, mid in enumerate(MIDPOINTS):
        threshold = mid * scale
        code += absw > threshold
        if (k + 1) % 2 == 0:
            code += absw == threshold  # the tie goes up to the even code k + 1
    return code


def element_codes(w: np.ndarray, scale) -> np.ndarray:
    """Full 4-bit codes: sign bit of w (NVFP4-E2M1-3) and the exact magnitude code."""
    return (np.signbit(w).astype(np.uint8) << 3) | magnitude_codes(np.abs(w), scale)


def code_values(codes: np.ndarray) -> np.ndarray:
    values = MAGNITUDES[codes & 7]
    return np.where(codes & 8, -values, values)


def pairwise(terms: np.ndarray) -> np.ndarray:
    while terms.shape[-1] > 1:
        terms = terms[..., 0::2] + terms[..., 1::2]
    return terms[..., 0]


def objective(w: np.ndarray, h: np.ndarray, codes: np.ndarray, scale) -> np.ndarray:
    """HSCALE-OBJ-1 in fp64, exactly as written (no FMA: numpy rounds every operation)."""
    d = w - code_values(codes) * scale
    with np.errstate(over="ignore"):  # h near the fp64 maximum: +inf is a valid objective
        return pairwise(h * (d * d))


def e4m3_byte(amax: np.ndarray, divisor: float) -> np.ndarray:
    """``E4M3_RNE_satfinite(amax / divisor)`` of the exact quotient (NVFP4-E4M3-2); every
    decision is an exact fp64 comparison of ``amax`` with ``value * divisor`` (4 or 5 significant
    bits times at most 26: exact)."""
    amax = np.asarray(amax, dtype=np.float64)
    approx = amax / divisor
    hi = np.clip(np.searchsorted(SCALE_VALUES, approx, side="left"), 0, LAST)
    # Repair the bracket with exact products so that value[hi-1] * div < amax <= value[hi] * div.
    hi = np.where((amax > SCALE_VALUES[hi] * divisor) & (hi < LAST), hi + 1, hi)
    hi = np.where((hi > 0) & (amax <= SCALE_VALUES[np.maximum(hi - 1, 0)] * divisor), hi - 1, hi)
    lo = np.maximum(hi - 1, 0)
    threshold = (SCALE_VALUES[lo] + SCALE_VALUES[hi]) / 2 * divisor  # exact
    even = np.where(lo % 2 == 0, lo, hi)
    byte = np.where(amax > threshold, hi, np.where(amax < threshold, lo, even))
    byte = np.where(amax >= LAST_VALUE * divisor, LAST, byte)  # satfinite
    return byte.astype(np.int64)


LAST_VALUE = SCALE_VALUES[LAST]


def approx_e4m3_byte(q: np.ndarray) -> np.ndarray:
    """E4M3 RNE of an fp64 value taken as exact (for the tolerance bands)."""
    return e4m3_byte(q, 1.0)


def range_byte(amax: np.ndarray, global_scale: float, top: float) -> np.ndarray:
    """NVFP4-INIT-1 with divisor ``top * s_g``; a non-zero group never gets 0x00."""
    byte = e4m3_byte(amax, top * float(global_scale))
    return np.where((byte == 0) & (amax > 0), FIRST, byte)


def expected_global_scale(amax: float, scale_ceiling: float) -> float:
    """NVFP4-GS-1/2 by exact rationals: the fp32 nearest to amax / (6 C), ties to the even
    significand, chosen among the three fp32 values around the fp64 estimate."""
    if amax == 0:
        return 1.0
    exact = Fraction(float(amax)) / (6 * Fraction(float(scale_ceiling)))
    if exact < Fraction(FP32_MIN_NORMAL):
        return FP32_MIN_NORMAL
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf))]
    best = min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact),
                                          int(np.array(c, np.float32).view(np.uint32)) & 1))
    return float(best)


def objective_tolerance(e_min: np.ndarray, s_all_zero: np.ndarray) -> np.ndarray:
    e_min = np.asarray(e_min, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        tol = OBJ_REL * (e_min + np.sqrt(e_min * s_all_zero)) + OBJ_ABS * s_all_zero
    return np.where(np.isfinite(tol), tol, np.inf)


# ------------------------------------------------------------------------------------------
# The certificate
# ------------------------------------------------------------------------------------------

@dataclass
class Certificate:
    findings: list[Finding] = field(default_factory=list)
    uses: Counter = field(default_factory=Counter)  # allowance -> groups or elements that needed it
    extra: Counter = field(default_factory=Counter)  # clause -> offences found but not listed
    tolerance_uses: int = 0  # groups accepted only thanks to the objective tolerance
    groups: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings


def _h(v: int) -> str:
    return f"0x{int(v):02X}"


def _code(v: int) -> str:
    """A 4-bit E2M1 code, as the other reports write codes: 0xA."""
    return f"0x{int(v):X}"


def _e(v: float) -> str:
    return f"{float(v)!r} ({float(v).hex()})"


def certify(weight: np.ndarray, hessian_diag, *, method: str, init: str, K: int, U: int,
            scale_ceiling: float, global_scale, codes: np.ndarray, scale_bytes: np.ndarray,
            delta: np.ndarray | None, observed_global_scale: float,
            packed: np.ndarray | None = None, allowances=frozenset(), strict: bool = True,
            limit: int = 20, judge_choice: bool = True,
            stored_as_reciprocal: bool = False) -> Certificate:
    """Certify a result (arrays already shape-checked) for the inputs.

    ``weight`` exact float64 (m, n); ``hessian_diag`` (n,) or None; ``global_scale`` the caller's
    s_g or None. ``strict``: the exact certificate (no tolerance, tie rule, no allowances);
    otherwise the faithful one with ``allowances``. ``judge_choice`` False (the format profile):
    the initial byte, the window and the choice are not judged, only s_g, zero groups, the
    ladder, the codes at the bytes chosen and the packing. ``delta`` None: the implementation
    does not report its initial bytes; the spec's are assumed. At most ``limit`` findings of
    each clause are kept (the rest are counted in ``extra``). ``stored_as_reciprocal``: the
    implementation stores r = fp32(1/s_g) and ``observed_global_scale`` is what r reads back
    as; its own s_g is then the writer's chain of NVFP4-GS-4, fp32(1/fp32(1/s_g)).

    One function per section of the spec follows, in the spec's order: the global scale, zero
    groups, the ladder, the initial byte, the choice, the element codes, the packing."""
    judge = _Judge(Certificate(), frozenset() if strict else frozenset(allowances), strict,
                   limit)
    sg = _judge_global_scale(judge, weight, global_scale, scale_ceiling,
                             float(observed_global_scale), stored_as_reciprocal)
    if sg is None:
        return judge.cert  # nothing below can be judged against an unusable s_g
    rows, cols = weight.shape
    groups_all = weight.reshape(-1, GROUP)
    judge.cert.groups = groups_all.shape[0]
    codes_all = np.asarray(codes).reshape(-1, GROUP).astype(np.uint8)
    bytes_all = np.asarray(scale_bytes).reshape(-1).astype(np.int64)
    delta_all = None if delta is None else np.asarray(delta).reshape(-1).astype(np.int64)
    h_groups = (np.asarray(hessian_diag, dtype=np.float64).reshape(cols // GROUP, GROUP)
                if method == "hscale" else None)
    for start in range(0, groups_all.shape[0], CHUNK):
        stop = min(groups_all.shape[0], start + CHUNK)
        chunk = _Chunk.of(groups_all, codes_all, bytes_all, delta_all, h_groups, start, stop,
                          cols // GROUP)
        zero, as_zero = _judge_zero_groups(judge, chunk, sg)
        good = _judge_ladder(judge, chunk, zero, as_zero)
        base, obs_delta = _judge_initial_byte(judge, chunk, sg, good, method=method, init=init,
                                              judge_choice=judge_choice)
        if judge_choice:  # the format profile: the library's own rule chose the byte
            _judge_choice(judge, chunk, sg, good, base, obs_delta, method=method, K=K, U=U)
        _judge_element_codes(judge, chunk, sg, good, zero | as_zero)
    if packed is not None:
        _judge_packing(judge, codes, packed)
    return judge.cert


@dataclass
class _Judge:
    """What every section's judgement shares: the certificate it writes, the allowances in
    force, and how many findings of each clause it lists (the rest are counted)."""

    cert: Certificate
    allow: frozenset
    strict: bool
    limit: int
    counts: Counter = field(default_factory=Counter)

    def add(self, finding: Finding) -> None:
        self.counts[(finding.clause, finding.kind)] += 1
        if self.counts[(finding.clause, finding.kind)] <= self.limit:
            self.cert.findings.append(finding)
        else:
            self.cert.extra[finding.clause] += 1

    def first(self, mask, clause: str) -> np.ndarray:
        """Indices of the first offenders (the rest are only counted)."""
        hits = np.flatnonzero(mask)
        if len(hits) > self.limit:
            self.cert.extra[clause] += len(hits) - self.limit
        return hits[:self.limit]


@dataclass
class _Chunk:
    """A run of groups judged together: the weights ``w`` (G, 16), their maxima, what the
    implementation returned for them, and their objective weights ``h``."""

    w: np.ndarray
    gmax: np.ndarray
    codes: np.ndarray
    bytes: np.ndarray
    delta: np.ndarray | None
    h: np.ndarray
    index: np.ndarray  # the flat group index of each row
    group_cols: int

    @classmethod
    def of(cls, groups, codes, bytes_, delta, h_groups, start, stop, group_cols) -> "_Chunk":
        idx = np.arange(start, stop)
        w = groups[start:stop]
        h = h_groups[idx % group_cols] if h_groups is not None else np.ones_like(w)
        return cls(w, np.abs(w).max(axis=1), codes[start:stop], bytes_[start:stop],
                   None if delta is None else delta[start:stop], h, idx, group_cols)

    def where(self, k: int) -> tuple[int, int]:
        return int(self.index[k] // self.group_cols), int(self.index[k] % self.group_cols)


def _judge_global_scale(judge: _Judge, weight, global_scale, scale_ceiling, obs_sg: float,
                        stored_as_reciprocal: bool) -> float | None:
    """NVFP4-GS-1 .. GS-4: the observed s_g, or None when it cannot be judged against (not a
    positive normal fp32)."""
    allow = judge.allow
    amax = float(np.max(np.abs(weight)))
    if global_scale is not None:
        want_sg, gs_clause = float(np.float32(global_scale)), "NVFP4-GS-3"
    else:
        want_sg = expected_global_scale(amax, scale_ceiling)
        exact_q = (Fraction(amax) / (6 * Fraction(float(scale_ceiling)))) if amax else 0
        gs_clause = "NVFP4-GS-2" if amax == 0 or exact_q < Fraction(FP32_MIN_NORMAL) else "NVFP4-GS-1"
        if stored_as_reciprocal and nearest_reciprocal_read_back(want_sg) != want_sg:
            want_sg, gs_clause = nearest_reciprocal_read_back(want_sg), "NVFP4-GS-4"
    if obs_sg != want_sg or math.copysign(1, obs_sg) != math.copysign(1, want_sg):
        want32 = np.float32(want_sg)
        lo, hi = want32, want32
        for _ in range(2):  # within two fp32 ulps
            lo, hi = np.nextafter(lo, np.float32(0)), np.nextafter(hi, np.float32(np.inf))
        off_by_ulp = bool(np.isfinite(obs_sg) and lo <= np.float32(obs_sg) <= hi)
        low_precision = bool(np.isfinite(obs_sg) and obs_sg > 0 and want_sg > 0
                             and abs(obs_sg / want_sg - 1) <= LOW_PRECISION_SG)
        if "reciprocal-global-scale" in allow and global_scale is None and amax > 0 and off_by_ulp:
            judge.cert.uses["reciprocal-global-scale"] += 1
        elif ("supplied-reciprocal" in allow and global_scale is not None
              and obs_sg == nearest_reciprocal_read_back(want_sg)):
            judge.cert.uses["supplied-reciprocal"] += 1
        elif ("low-precision-global-scale" in allow and global_scale is None and amax > 0
              and low_precision):
            judge.cert.uses["low-precision-global-scale"] += 1
        else:
            judge.add(Finding(gs_clause, f"global scale s_g expected {_f32(want_sg)} observed "
                              f"{_f32(obs_sg)}" + (" (the caller's s_g must be used unchanged)"
                                                   if global_scale is not None else
                                                   f" (amax = {_f32(amax)}, C = "
                                                   f"{scale_ceiling!r})"), kind="sg"))
    if not (np.isfinite(obs_sg) and obs_sg >= FP32_MIN_NORMAL):
        return None
    return obs_sg


def _judge_zero_groups(judge: _Judge, chunk: _Chunk, sg: float):
    """NVFP4-ZERO-1 (scale byte and delta of a zero group; its codes are judged with the
    others). Returns ``(zero, as_zero)``: the zero groups, and the non-zero groups stored as
    zero groups under the allowance underflow-zero-group (judged below as zero groups are)."""
    allow, cert = judge.allow, judge.cert
    obs_byte, obs_delta = chunk.bytes, chunk.delta
    zero = chunk.gmax == 0
    as_zero = np.zeros_like(zero)
    if "underflow-zero-group" in allow:
        underflow = ~zero & (e4m3_byte(chunk.gmax, 6.0 * sg) == 0)
        byte_ok = (obs_byte == 0) | (("zero-group-byte" in allow) & (obs_byte <= LAST))
        as_zero = underflow & byte_ok & ((chunk.codes & 0x7) == 0).all(axis=1)
        cert.uses["underflow-zero-group"] += int(np.count_nonzero(as_zero))
        if "zero-group-byte" in allow:
            cert.uses["zero-group-byte"] += int(np.count_nonzero(as_zero & (obs_byte != 0)))
    zero_byte = zero & (obs_byte != 0)
    if "zero-group-byte" in allow:
        tolerated = zero_byte & (obs_byte <= LAST)
        cert.uses["zero-group-byte"] += int(np.count_nonzero(tolerated))
        zero_byte &= ~tolerated
    for k in judge.first(zero_byte, "NVFP4-ZERO-1"):
        judge.add(Finding("NVFP4-ZERO-1", f"zero group: scale byte expected 0x00 observed "
                          f"{_h(obs_byte[k])}", chunk.where(k), kind="byte"))
    delta_checked = zero if "zero-group-byte" not in allow else zero & (obs_byte == 0)
    if obs_delta is not None:
        for k in judge.first(delta_checked & (obs_delta != 0), "NVFP4-ZERO-1"):
            judge.add(Finding("NVFP4-ZERO-1", f"zero group: delta expected +0 observed "
                              f"{obs_delta[k]:+d}", chunk.where(k), kind="delta"))
    return zero, as_zero


def _judge_ladder(judge: _Judge, chunk: _Chunk, zero, as_zero) -> np.ndarray:
    """NVFP4-E4M3-3: the scale byte of a non-zero group is a ladder byte. Returns the non-zero
    groups whose byte is."""
    nz = ~zero & ~as_zero
    off_ladder = nz & ((chunk.bytes < FIRST) | (chunk.bytes > LAST))
    for k in judge.first(off_ladder, "NVFP4-E4M3-3"):
        judge.add(Finding("NVFP4-E4M3-3", f"scale byte {_h(chunk.bytes[k])} of a non-zero group "
                          "is not on the ladder 0x01..0x7E", chunk.where(k), kind="ladder"))
    return nz & ~off_ladder


def _judge_initial_byte(judge: _Judge, chunk: _Chunk, sg: float, good, *, method: str,
                        init: str, judge_choice: bool):
    """NVFP4-INIT-1 / INIT-2: the initial byte the result implies (its byte minus its delta;
    the spec's where it reports no delta). Returns ``(base, delta)``: the initial byte the
    choice is judged from (the implementation's own where usable) and the delta."""
    w, gmax, obs_byte, obs_delta = chunk.w, chunk.gmax, chunk.bytes, chunk.delta
    c6 = range_byte(gmax, sg, 6.0)
    if init == "maxabs":
        c0 = c6
    else:
        c4 = range_byte(gmax, sg, 4.0)
        e6 = objective(w, 1.0, element_codes(w, sg * SCALE_VALUES[c6][:, None]),
                       sg * SCALE_VALUES[c6][:, None])
        e4 = objective(w, 1.0, element_codes(w, sg * SCALE_VALUES[c4][:, None]),
                       sg * SCALE_VALUES[c4][:, None])
        c0 = np.where(e4 < e6, c4, c6)
    if obs_delta is None:  # no initial bytes reported: judged against the spec's
        obs_delta = obs_byte - c0
    implied = obs_byte - obs_delta
    init_ok = implied == c0
    init_clause = "NVFP4-INIT-1" if init == "maxabs" else "NVFP4-INIT-2"
    if not judge.strict:
        init_band = NEAR if ({"fp32-scale-rounding", "reciprocal-global-scale"} & judge.allow) else 0.0
        accept = _acceptable_initial(w, gmax, sg, init, implied, c0, init_band, judge.allow,
                                     judge.cert)
        init_ok = init_ok | accept
    if not judge_choice:
        init_ok = np.ones_like(init_ok)  # the format profile: the rule is the library's
    for k in judge.first(good & ~init_ok, init_clause):
        how = ("" if method == "rtn" else
               f" (implied by scale byte {_h(obs_byte[k])} - delta {obs_delta[k]:+d})")
        text = (f"initial byte expected {_h(c0[k])} observed {_h(implied[k])}{how}; "
                f"group amax {_f64(gmax[k])}, amax_g / (6 s_g) = {float(gmax[k] / (6 * sg))!r}")
        if init == "4over6":
            text += f"; candidates c6 = {_h(c6[k])}, c4 = {_h(c4[k])}"
        judge.add(Finding(init_clause, text, chunk.where(k), kind="init"))
    # Judge the rest against the backend's own initial byte where it is usable.
    base = np.where((implied >= FIRST) & (implied <= LAST), implied, c0)
    return base, obs_delta


def _judge_choice(judge: _Judge, chunk: _Chunk, sg: float, good, base, obs_delta, *,
                  method: str, K: int, U: int) -> None:
    """HSCALE-METHOD-1 (rtn keeps its initial byte), HSCALE-WIN-1 (the window),
    HSCALE-OBJ-1 and HSCALE-ARGMIN-1 (the chosen byte minimises the objective, the tie rule;
    faithful: within the objective tolerance of the window minimum)."""
    w, h, obs_byte = chunk.w, chunk.h, chunk.bytes
    if method == "rtn":
        for k in judge.first(good & (obs_delta != 0), "HSCALE-METHOD-1"):
            judge.add(Finding("HSCALE-METHOD-1", f"rtn keeps the initial byte: delta expected +0 "
                              f"observed {obs_delta[k]:+d}", chunk.where(k), kind="rtn"))
        return
    D = K - 1 - U
    out = good & ((obs_delta < -D) | (obs_delta > U))
    for k in judge.first(out, "HSCALE-WIN-1"):
        judge.add(Finding("HSCALE-WIN-1", f"scale byte {_h(obs_byte[k])} is outside the window "
                          f"of initial byte {_h(base[k])}: delta {obs_delta[k]:+d} not in "
                          f"[-{D}, +{U}] (K={K}, U={U})", chunk.where(k), kind="window"))
    check = good & ~out
    floor = np.full(base.shape, FIRST)
    if "no-subnormal-scales" in judge.allow:
        floor = np.where((obs_byte >= FIRST_NORMAL) & (base >= FIRST_NORMAL), FIRST_NORMAL, FIRST)
    cand = np.clip(base[:, None] + np.array(priority_deltas(K, U))[None, :], floor[:, None], LAST)
    scale = sg * SCALE_VALUES[cand]  # (Gc, K)
    cand_codes = element_codes(w[:, None, :], scale[:, :, None])
    E = objective(w[:, None, :], h[:, None, :], cand_codes, scale[:, :, None])
    best = np.argmin(E, axis=1)  # first minimum: the tie rule
    e_min = E[np.arange(len(best)), best]
    s_byte = sg * SCALE_VALUES[obs_byte.clip(0, LAST)][:, None]
    e_obs = objective(w, h, element_codes(w, s_byte), s_byte)
    best_byte = cand[np.arange(len(best)), best]
    if judge.strict:
        wrong = check & (obs_byte != best_byte)
    else:
        tol = objective_tolerance(e_min, pairwise(h * (w * w)))
        wrong = check & ~(e_obs <= e_min + tol)
        judge.cert.tolerance_uses += int(np.count_nonzero(check & ~wrong & (e_obs > e_min)))
    for k in np.concatenate([judge.first(wrong & (e_obs == e_min), "HSCALE-ARGMIN-1"),
                             judge.first(wrong & (e_obs != e_min), "HSCALE-OBJ-1")]):
        tie = e_obs[k] == e_min[k]
        clause = "HSCALE-ARGMIN-1" if tie else "HSCALE-OBJ-1"
        d_best = int(best_byte[k] - base[k])
        text = (f"scale byte expected {_h(best_byte[k])} (delta {d_best:+d}, E = "
                f"{_e(e_min[k])}) observed {_h(obs_byte[k])} (delta {obs_delta[k]:+d}, "
                f"E = {_e(e_obs[k])})")
        if tie:
            text += ("; equal objectives: the tie rule keeps the earlier candidate in "
                     "the priority order 0, +1, -1, +2, -2, ...")
        elif not judge.strict:
            text += f"; beyond the faithful tolerance {tol[k]:.3g} of the window minimum"
        else:
            text += "; the observed byte does not minimise the fp64 objective"
        judge.add(Finding(clause, text, chunk.where(k), kind="choice"))


def _judge_element_codes(judge: _Judge, chunk: _Chunk, sg: float, good, sign_only) -> None:
    """NVFP4-E2M1-2 / E2M1-3 (and a zero group's codes, NVFP4-ZERO-1): every code the
    rounding of |w| / s at the byte actually chosen, its sign w's."""
    w, obs_byte = chunk.w, chunk.bytes
    s_obs = sg * SCALE_VALUES[np.clip(obs_byte, FIRST, LAST)]
    # With s_g and the E4M3 scale both powers of two, 1/s and |w| * (1/s) are exact in any
    # order of fp32 arithmetic: a reciprocal multiply rounds no differently there.
    exact_reciprocal = (_power_of_two(sg)
                        & _power_of_two(SCALE_VALUES[np.clip(obs_byte, FIRST, LAST)]))
    want = np.where(sign_only[:, None], np.signbit(w).astype(np.uint8) << 3,
                    element_codes(w, s_obs[:, None]))
    bad = (chunk.codes != want) & (good | sign_only)[:, None]
    if bad.any():
        near_band = NEAR if ({"reciprocal-multiply", "reciprocal-global-scale"} & judge.allow) else 0.0
        _judge_codes(judge, chunk, _CodeMismatches(bad, want, s_obs, sign_only, near_band,
                                                   exact_reciprocal))


def _judge_packing(judge: _Judge, codes, packed) -> None:
    """NVFP4-PACK-1: the packed bytes are the codes, element 2i in the low nibble."""
    c = np.asarray(codes).astype(np.uint8)
    want_packed = (c[:, 0::2] & 0xF) | ((c[:, 1::2] & 0xF) << 4)
    diff = np.argwhere(np.asarray(packed) != want_packed)
    for r, b in diff[:judge.limit]:
        judge.add(Finding("NVFP4-PACK-1", f"packed byte [{r}, {b}] expected {_h(want_packed[r, b])} "
                          f"(code[{2 * b}] | code[{2 * b + 1}] << 4) observed "
                          f"{_h(np.asarray(packed)[r, b])}", (int(r), int(b) // 8), kind="pack"))


def _acceptable_initial(w, gmax, sg, init, implied, c0, band, allow, cert):
    """Faithful: which observed initial bytes are acceptable (and count the allowance used)."""
    def band_bytes(top):
        q = gmax / (top * sg)
        out = [range_byte(gmax, sg, top)]
        if band:
            for f in (1 - band, 1 + band):
                b = approx_e4m3_byte(q * f)
                out.append(np.where((b == 0) & (gmax > 0), FIRST, b))
        return out

    options = band_bytes(6.0) + (band_bytes(4.0) if init == "4over6" else [])
    if "no-subnormal-scales" in allow:
        options += [np.maximum(b, FIRST_NORMAL) for b in options]
    in_set = np.zeros(implied.shape, dtype=bool)
    for b in options:
        in_set |= implied == b
    accept = in_set & (implied != c0)
    if init == "4over6" and accept.any():
        # The side chosen must be as good as the better side, within the objective tolerance.
        ks = np.flatnonzero(accept)
        ww = w[ks]
        def unweighted(byte):
            s = sg * SCALE_VALUES[np.clip(byte, FIRST, LAST)][:, None]
            return objective(ww, 1.0, element_codes(ww, s), s)
        e_impl = unweighted(implied[ks])
        s0 = pairwise(ww * ww)
        b6, b4 = range_byte(gmax[ks], sg, 6.0), range_byte(gmax[ks], sg, 4.0)
        e_best = np.minimum(unweighted(b6), unweighted(b4))
        ok = e_impl <= e_best + objective_tolerance(e_best, s0)
        if "no-subnormal-scales" in allow:  # the two sides as such a backend sees them
            e_raised = np.minimum(unweighted(np.maximum(b6, FIRST_NORMAL)),
                                  unweighted(np.maximum(b4, FIRST_NORMAL)))
            ok |= e_impl <= e_raised + objective_tolerance(e_raised, s0)
        accept[ks] = ok
    # Count what was needed: a rung off the exact quotient, or a raised subnormal byte.
    raised = accept & (implied == np.maximum(c0, FIRST_NORMAL)) & (c0 < FIRST_NORMAL)
    cert.uses["no-subnormal-scales"] += int(np.count_nonzero(raised))
    other = int(np.count_nonzero(accept & ~raised))
    if other:
        name = "fp32-scale-rounding" if "fp32-scale-rounding" in allow else "reciprocal-global-scale"
        cert.uses[name] += other
    return accept


def _power_of_two(x) -> np.ndarray:
    mantissa, _ = np.frexp(np.asarray(x, dtype=np.float64))
    return mantissa == 0.5


@dataclass(frozen=True)
class _CodeMismatches:
    """A chunk's codes that differ from the rounding at the observed bytes, and what judging
    them needs: ``bad`` (G, 16) the differing elements, ``want`` the codes expected, ``s_obs``
    (G,) each group's observed scale, ``zero`` (G,) the groups judged by sign only (zero
    groups), ``band`` the relative band of a reciprocal multiply's rounding (0: none),
    ``exact_reciprocal`` (G,) the groups where that band does not apply (its arithmetic is
    exact there)."""

    bad: np.ndarray
    want: np.ndarray
    s_obs: np.ndarray
    zero: np.ndarray
    band: float
    exact_reciprocal: np.ndarray | None = None


def _judge_codes(judge: _Judge, chunk: _Chunk, mismatches: _CodeMismatches) -> None:
    """Classify code mismatches (vectorised), count allowances, report the rest (the first
    max(64, the judge's limit) of each kind listed, the others counted)."""
    bad, w, want, got = mismatches.bad, chunk.w, mismatches.want, chunk.codes
    s_obs, zero, band = mismatches.s_obs, mismatches.zero, mismatches.band
    exact_reciprocal = mismatches.exact_reciprocal
    allow, cert, add, where, cap = judge.allow, judge.cert, judge.add, chunk.where, \
        max(64, judge.limit)
    exp = want.astype(np.int64)
    obs = got.astype(np.int64)
    remaining = bad.copy()
    if "negative-zero" in allow:
        neg0 = remaining & (exp == 0x8) & (obs == 0x0)
        cert.uses["negative-zero"] += int(np.count_nonzero(neg0))
        remaining &= ~neg0
    if band:
        x = np.abs(w) / s_obs[:, None]
        lo = magnitude_codes(x * (1 - band), 1.0)
        hi = magnitude_codes(x * (1 + band), 1.0)
        m = obs & 7
        near = remaining & ~zero[:, None] & ((exp & 8) == (obs & 8)) & ((m == lo) | (m == hi))
        if exact_reciprocal is not None and "reciprocal-global-scale" not in allow:
            near &= ~exact_reciprocal[:, None]  # (that one quantizes at another s_g: no exclusion)
        name = "reciprocal-multiply" if "reciprocal-multiply" in allow else "reciprocal-global-scale"
        cert.uses[name] += int(np.count_nonzero(near))
        remaining &= ~near
    sign_only = (exp ^ obs) == 0x8
    for k, j in np.argwhere(remaining & zero[:, None])[:cap]:
        wv, e, o = float(w[k, j]), int(exp[k, j]), int(obs[k, j])
        add(Finding("NVFP4-E2M1-3" if sign_only[k, j] else "NVFP4-ZERO-1",
                    f"a zero group's element: w = {wv!r}, code expected {_code(e)} "
                    f"observed {_code(o)}", where(k), int(j), kind="zero-code"))
    for kind, mask in (("sign", remaining & ~zero[:, None] & sign_only),
                       ("magnitude", remaining & ~zero[:, None] & ~sign_only)):
        for n, (k, j) in enumerate(np.argwhere(mask)):
            if n >= cap:
                cert.extra["NVFP4-E2M1-3" if kind == "sign" else "NVFP4-E2M1-2"] += \
                    int(np.count_nonzero(mask)) - n
                break
            wv, e, o = float(w[k, j]), int(exp[k, j]), int(obs[k, j])
            if kind == "sign":
                add(Finding("NVFP4-E2M1-3", f"w = {wv!r} "
                            f"({'negative' if np.signbit(wv) else 'positive'} sign bit), code "
                            f"expected {_code(e)} observed {_code(o)}", where(k), int(j),
                            kind="sign"))
            else:
                on_mid = [float(mm) for mm in MIDPOINTS if abs(wv) == mm * s_obs[k]]
                why = (f"|w|/s = {on_mid[0]!r} exactly, a tie: it goes to the even code"
                       if on_mid else f"|w|/s = {float(abs(wv) / s_obs[k])!r}")
                add(Finding("NVFP4-E2M1-2", f"w = {wv!r}, s = {float(s_obs[k])!r}, {why}; "
                            f"code expected {_code(e)} observed {_code(o)}", where(k), int(j),
                            kind="magnitude"))


def _f32(v: float) -> str:
    v = float(v)
    if not np.isfinite(v):
        return repr(v)
    bits = int(np.array(v, dtype=np.float32).view(np.uint32))
    return f"{v!r} (fp32 0x{bits:08X})"


def _f64(v: float) -> str:
    return f"{float(v)!r} ({float(v).hex()})"
