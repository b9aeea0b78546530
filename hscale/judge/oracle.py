"""An exact-arithmetic oracle (``fractions.Fraction``) for small cases.

Nothing here uses the reference's rules (only numbers of its ``constants``: the E2M1 grid, the
smallest normal fp32) or numpy arithmetic. Every rule is evaluated on rationals:

- E4M3 and E2M1 rounding by searching the value tables for the nearest value (ties to the
  even code / byte), not by thresholds;
- s_g as the nearest fp32 of the exact quotient, found by integer arithmetic;
- the objective twice: **as specified** (each fp64 operation simulated as the exact rational
  result rounded to the nearest float64, ties to even: ``float(Fraction)`` rounds correctly),
  and **exactly** (no rounding at all).

The spec decides by the fp64 objective; the exact one shows when (rarely) the two disagree,
and is what the faithful profile's tolerance is measured against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from hscale.reference.constants import E2M1_MAGNITUDES, FP32_SMALLEST_NORMAL

MAGNITUDES = [Fraction(v) for v in E2M1_MAGNITUDES]


def _e4m3(byte: int) -> Fraction:
    e, m = byte >> 3, byte & 7
    return Fraction(m, 512) if e == 0 else Fraction(8 + m, 8) * Fraction(2) ** (e - 7)


SCALE_VALUES = [_e4m3(b) for b in range(127)]  # 0x00 .. 0x7E
FP32_MIN_NORMAL = Fraction(FP32_SMALLEST_NORMAL)


def nearest_index(x: Fraction, table: list[Fraction]) -> int:
    """Index of the value of ``table`` (increasing) nearest to ``x``; a tie goes to the even
    index; above the last value the last index (saturation)."""
    if x >= table[-1]:
        return len(table) - 1
    best = min(range(len(table)), key=lambda i: (abs(table[i] - x), i % 2))
    return best


def fp32_nearest(x: Fraction) -> Fraction:
    """Round a positive rational (normal fp32 range) to fp32, ties to even."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    quantum = Fraction(2) ** (e - 23)
    n, rem = divmod(x, quantum)
    n = int(n)
    if rem * 2 > quantum or (rem * 2 == quantum and n % 2 == 1):
        n += 1
    return n * quantum


def global_scale(amax: Fraction, ceiling: Fraction) -> Fraction:
    if amax == 0:
        return Fraction(1)
    q = amax / (6 * ceiling)
    return FP32_MIN_NORMAL if q < FP32_MIN_NORMAL else fp32_nearest(q)


def range_byte(amax: Fraction, sg: Fraction, top: int) -> int:
    b = nearest_index(amax / (top * sg), SCALE_VALUES)
    return 1 if b == 0 and amax > 0 else b


def code(w: Fraction, negative: bool, s: Fraction) -> int:
    return (8 if negative else 0) | nearest_index(abs(w) / s, MAGNITUDES)


def value(c: int) -> Fraction:
    return -MAGNITUDES[c & 7] if c & 8 else MAGNITUDES[c & 7]


def _rnd(x: Fraction) -> Fraction | float:
    """Round to float64 (RNE); inf if it overflows."""
    try:
        return Fraction(float(x))
    except OverflowError:
        return math.inf


def objective_as_specified(w, h, codes, s) -> Fraction | float:
    """HSCALE-OBJ-1 with every fp64 operation simulated: d = fp64(w - q s), e = fp64(h fp64(d d)),
    the pairwise tree of fp64 adds."""
    terms = []
    for wj, hj, cj in zip(w, h, codes):
        d = _rnd(wj - value(cj) * s)
        if d == math.inf:
            return math.inf
        sq = _rnd(d * d)
        if sq == math.inf:
            terms.append(math.inf if hj else Fraction(0))
            continue
        terms.append(_rnd(hj * sq))
    while len(terms) > 1:
        nxt = []
        for a, b in zip(terms[0::2], terms[1::2]):
            nxt.append(math.inf if math.inf in (a, b) else _rnd(a + b))
        terms = nxt
    return terms[0]


def objective_exact(w, h, codes, s) -> Fraction:
    return sum((hj * (wj - value(cj) * s) ** 2 for wj, hj, cj in zip(w, h, codes)), Fraction(0))


def priority(K: int, U: int) -> list[int]:
    D = K - 1 - U
    out = [0]
    for step in range(1, K):
        out += [d for d in (step, -step) if -D <= d <= U]
    return out


@dataclass
class GroupVerdict:
    initial: int
    chosen: int  # the spec's choice (fp64 objective, tie rule)
    codes: list[int]
    exact_best: int  # the byte minimising the exact objective (tie rule)
    candidates: list[tuple[int, int, object, Fraction]]  # (delta, byte, E fp64, E exact)


def group_verdict(w: list[float], h: list[float], sg: Fraction, method: str, init: str,
                  K: int, U: int) -> GroupVerdict:
    """What the spec says for one group (``w`` the exact input values as floats)."""
    W = [Fraction(x) for x in w]
    neg = [math.copysign(1.0, x) < 0 for x in w]
    H = [Fraction(x) for x in h] if method == "hscale" else [Fraction(1)] * len(w)
    amax = max(abs(x) for x in W)
    if amax == 0:
        return GroupVerdict(0, 0, [8 if n else 0 for n in neg], 0, [])

    def codes_at(byte):
        s = sg * SCALE_VALUES[byte]
        return [code(x, n, s) for x, n in zip(W, neg)], s

    c6 = range_byte(amax, sg, 6)
    c0 = c6
    if init == "4over6":
        c4 = range_byte(amax, sg, 4)
        one = [Fraction(1)] * len(W)
        e6 = objective_as_specified(W, one, *codes_at(c6))
        e4 = objective_as_specified(W, one, *codes_at(c4))
        c0 = c4 if e4 < e6 else c6
    if method == "rtn":
        return GroupVerdict(c0, c0, codes_at(c0)[0], c0, [])
    rows = []
    for d in priority(K, U):
        b = min(126, max(1, c0 + d))
        cs, s = codes_at(b)
        rows.append((d, b, objective_as_specified(W, H, cs, s), objective_exact(W, H, cs, s)))
    best = min(rows, key=lambda r: r[2])  # min() keeps the first of equals: the tie rule
    best_exact = min(rows, key=lambda r: r[3])
    return GroupVerdict(c0, best[1], codes_at(best[1])[0], best_exact[1], rows)
