"""The binary floating-point formats a GEMM accumulates, scales and outputs in, and exact
rounding into them (spec section 10: NVFP4-GEMM-4's accumulators, NVFP4-GEMM-6's outputs).

A format is its precision ``p`` (significant bits, the hidden bit included) and its exponent
range: normal numbers ``m * 2^e`` with ``2^(p-1) <= m < 2^p`` and ``emin <= e + p - 1 <= emax``,
subnormals below ``2^emin`` spaced ``2^(emin - p + 1)``. Rounding here is of **exact** values
(a Python integer times a power of two): ``nearest`` is IEEE 754 round-to-nearest, ties to even,
with overflow to infinity at ``max + ulp/2``; ``down`` and ``up`` round toward -inf and +inf
(the ends of an interval). Nothing here touches hardware floating point, so each result is the
rule itself, not what a library's cast happens to do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

ROUNDING_MODES = ("nearest", "down", "up", "toward-zero")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: ``p`` significant bits, smallest normal ``2^emin``,
    largest finite ``(2 - 2^(1-p)) * 2^emax``."""

    name: str
    short: str
    p: int
    emin: int
    emax: int

    @property
    def smallest_subnormal(self) -> float:
        """eta, the spacing of the subnormals (NVFP4-GEMM-4's absolute error unit)."""
        return math.ldexp(1.0, self.emin - self.p + 1)

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def largest(self) -> float:
        """Omega, the largest finite value."""
        return math.ldexp(2 ** self.p - 1, self.emax - self.p + 1)

    def unit_roundoff(self, rounding: str = "nearest") -> Fraction:
        """u: 2^-p for round-to-nearest, 2^(1-p) for a faithful rounding (either neighbour)."""
        return Fraction(1, 2 ** (self.p if rounding == "nearest" else self.p - 1))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(DTYPES[self.name])

    # -- exact rounding ---------------------------------------------------------------------
    def round(self, numerator: int, exponent: int, mode: str = "nearest") -> float:
        """The value ``numerator * 2^exponent`` (exact) rounded into this format, returned as a
        Python float (exact: every value of these formats is a float64). Overflow gives
        +-inf in ``nearest`` (at or beyond ``max + ulp/2``) and for the direction away from
        zero of ``down`` / ``up``; the direction toward zero saturates at the largest finite.
        A zero result carries the sign of the value (+0.0 for an exact zero)."""
        if mode not in ROUNDING_MODES:
            raise ValueError(f"rounding mode {mode!r}: one of {', '.join(ROUNDING_MODES)}")
        numerator, exponent = int(numerator), int(exponent)
        if numerator == 0:
            return 0.0
        negative = numerator < 0
        magnitude = -numerator if negative else numerator
        # the quantum of the binade the value lies in (the subnormal spacing below 2^emin)
        top = magnitude.bit_length() - 1 + exponent  # value in [2^top, 2^(top+1))
        quantum = max(top, self.emin) - self.p + 1
        shift = quantum - exponent  # value / 2^quantum = magnitude / 2^shift
        if shift <= 0:
            steps, rest, half = magnitude << -shift, 0, 1
        else:
            steps, rest = divmod(magnitude, 1 << shift)
            half = 1 << (shift - 1)
        direction = mode
        if mode in ("down", "up"):  # toward -inf / +inf, read on the magnitude
            direction = "away" if (mode == "up") != negative else "toward-zero"
        if rest:
            if direction == "nearest":
                if rest > half or (rest == half and steps % 2 == 1):
                    steps += 1
            elif direction == "away":
                steps += 1
        value = math.ldexp(steps, quantum) if quantum <= 1100 else math.inf
        if value > self.largest:
            value = self.largest if direction == "toward-zero" else math.inf
        return -value if negative else value

    def round_float(self, value: float, mode: str = "nearest") -> float:
        """A float64 value (exact) rounded into this format."""
        if math.isnan(value):
            return math.nan
        if math.isinf(value):
            return value
        numerator, denominator = float(value).as_integer_ratio()
        result = self.round(numerator, -(denominator.bit_length() - 1), mode)
        return math.copysign(result, value) if result == 0 else result

    def represents(self, numerator: int, exponent: int) -> bool:
        """Whether ``numerator * 2^exponent`` is a finite value of this format."""
        value = self.round(numerator, exponent, "nearest")
        return math.isfinite(value) and Fraction(value) == Fraction(numerator) * Fraction(2) ** exponent


def _format(name: str, short: str, p: int, emin: int, emax: int) -> FloatFormat:
    return FloatFormat(name, short, p, emin, emax)


#: The formats of section 10, by numpy dtype name (the names the suite's declarations use).
FLOAT32 = _format("float32", "fp32", 24, -126, 127)
FLOAT16 = _format("float16", "fp16", 11, -14, 15)
BFLOAT16 = _format("bfloat16", "bf16", 8, -126, 127)
FORMATS = {f.name: f for f in (FLOAT32, FLOAT16, BFLOAT16)}
#: Short names accepted where a format is named (``fp32`` for ``float32``, ...).
ALIASES = {f.short: f.name for f in FORMATS.values()}
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def float_format(name) -> FloatFormat:
    """The format named ``name``: a dtype name (``float32``), its short name (``fp32``) or a
    numpy dtype; ValueError naming the choices."""
    if isinstance(name, FloatFormat):
        return name
    key = name if isinstance(name, str) else getattr(name, "name", None)
    if key is None:
        try:
            key = np.dtype(name).name
        except TypeError:
            key = repr(name)
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"format {name!r}: one of {', '.join(FORMATS)} "
                         f"(or {', '.join(ALIASES)})")
    return FORMATS[key]


def exact_parts(value: float) -> tuple[int, int]:
    """``(numerator, exponent)`` with ``value = numerator * 2^exponent`` exactly (finite)."""
    numerator, denominator = float(value).as_integer_ratio()
    return numerator, -(denominator.bit_length() - 1)
