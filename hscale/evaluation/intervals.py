"""Intervals of a mean: Student's t, computed (not read from a table), so that any number of
windows or calibration subsets gets its exact quantile.

``t_interval(values)``: the mean of ``values`` and its two-sided ``confidence`` interval
``mean +- t(1 - (1 - confidence) / 2, n - 1) * sd / sqrt(n)`` (``sd`` with n - 1), the values
taken as independent draws. ``student_t_quantile(p, df)``: the quantile of Student's t with
``df`` degrees of freedom, by bisection on its distribution function, written with the
regularized incomplete beta function (continued fraction, as in Numerical Recipes' ``betacf``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

#: The confidence of every interval the kit reports unless told otherwise.
CONFIDENCE = 0.95


def _incomplete_beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    tiny, eps = 1e-300, 1e-16
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return fraction


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _incomplete_beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _incomplete_beta_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0 < p < 1) of Student's t with ``df`` > 0 degrees of freedom, to
    about 1e-10 relative for df up to 1e5 (scipy.stats.t.ppf agrees to 4e-11 there; beyond,
    the log-gamma differences lose digits: 2e-7 at df = 1e9)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"student_t_quantile: p = {p} must be in (0, 1) and df = {df} above 0")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if student_t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-13 * high:
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class Interval:
    """The mean of ``n`` values and its ``confidence`` Student-t interval [low, high]
    (``half_width`` is None, and low = high = mean, for a single value: no spread to measure)."""

    mean: float
    low: float
    high: float
    half_width: float | None
    n: int
    confidence: float

    def mapped(self, function) -> "Interval":
        """The interval of ``function(mean)`` for an increasing ``function`` (exp of a mean
        log-likelihood is a perplexity): its ends mapped, the half width dropped."""
        return Interval(function(self.mean), function(self.low), function(self.high), None,
                        self.n, self.confidence)

    def as_dict(self) -> dict:
        return asdict(self)


def t_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """The mean of ``values`` (at least one, all finite) and its Student-t interval."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0 or not np.isfinite(v).all():
        raise ValueError("t_interval: needs at least one value, all finite")
    mean = float(v.mean())
    if v.size == 1:
        return Interval(mean, mean, mean, None, 1, confidence)
    t = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, v.size - 1)
    half = t * float(v.std(ddof=1)) / math.sqrt(v.size)
    return Interval(mean, mean - half, mean + half, half, int(v.size), confidence)
