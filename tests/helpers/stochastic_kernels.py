"""Stochastic-rounding kernels written as a vendor would write them: from docs/spec.md section
11 and docs/backends.md alone, with numpy, importing nothing of hscale. The suite judges them as
it judges any third party (tests/judge/test_stochastic_certificates.py).

- ``CarryExact(routing)``: the carry rule in integer arithmetic on the fp32 bits (``|v|`` as an
  integer number of 2^-32, ``D_top`` by a shift and an integer division), the specials of
  satfinite, the bytes of each word routed by ``routing``; it may declare another routing than
  it implements;
- its faults, each one change (``fault=``): ``nearest`` (the bits ignored: round to nearest
  even), ``fmaf-nearest`` (the carry computed as ``fmaf(r/256, step, |v|)`` rounded to nearest,
  then floored: TransformerEngine's software fallback as its source describes it, see
  ``te_fallback_model``), ``dropped-carry`` (a round-up that crosses into the next binade keeps
  the old exponent bits), ``nan-not-saturated`` (NaN keeps its sign), ``zero-sign-lost`` (a
  result of zero magnitude is +0), ``biased-byte`` (a carry only when ``D_top + r > 256``),
  ``always-down``, ``zero`` (every code 0);
- ``Hidden(fault)``: the same rule with its own random words from a seed (numpy's PCG64), the
  stream hidden, with the same faults;
- ``te_fallback_model``: a MODEL of TransformerEngine's software fallback for sm_120/121
  (``common/util/ptx.cuh::stochastic_round_fp4_e2m1``: ``u = (r & 0xFF) / 256``, ``t =
  fmaf(u, step, |x|)``, the grid point at or below ``t``, at most 6), written from that published
  description: not TE's code.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
ROUTES = {"straight": ((0, 1, 2, 3), ()), "ptx-e2m1x4": ((0, 2, 1, 3), ()),
          "sm103a": ((2, 0, 3, 1), (1, 3))}
FAULTS = ("nearest", "fmaf-nearest", "dropped-carry", "nan-not-saturated", "zero-sign-lost",
          "biased-byte", "always-down", "zero")
#: Units of 2^-32: every fp32 |v| >= 2^-9 is an integer number of them (its ulp is >= 2^-32),
#: and below 2^-9 no value has a non-zero D_top.
UNIT = 32
GRID_UNITS = np.array([int(g * 2 ** UNIT) for g in GRID], np.int64)
REVERSED = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], np.int64)


def magnitude_units(x: np.ndarray) -> np.ndarray:
    """|v| in units of 2^-32 from the fp32 fields (0 for |v| < 2^-9, where only D_top = 0 and
    the cell [0, 0.5) matter)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.int64) & 0x7FFFFFFF
    exponent, mantissa = bits >> 23, bits & 0x7FFFFF
    shift = np.clip(exponent - 118, 0, 40)  # |v| * 2^32 = (1.m * 2^23) << (e - 127 - 23 + 32)
    return np.where(exponent >= 118, (mantissa | 0x800000) << shift, 0)


def round_nearest_even(units: np.ndarray) -> np.ndarray:
    code = np.zeros(units.shape, np.int64)
    for k in range(7):
        mid = (GRID_UNITS[k] + GRID_UNITS[k + 1]) // 2
        code += (units > mid) | ((units == mid) & (k % 2 == 1))
    return code


def fp32_sum_nearest(byte: np.ndarray, step: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """``fmaf(byte / 256, step, |v|)`` rounded to nearest in fp32: the float64 sum is exact
    where |v| >= 2^-29 (at most 53 significant bits), rounded once more to fp32; below, the sum
    is rounded exactly with fractions."""
    exact = byte.astype(np.float64) / 256 * step + magnitude
    out = exact.astype(np.float32).astype(np.float64)
    for index in np.argwhere((magnitude < 2.0 ** -29) & (byte > 0)):
        index = tuple(index)
        q = Fraction(int(byte[index]), 256) * Fraction(float(step[index])) \
            + Fraction(float(magnitude[index]))
        out[index] = float(_fp32_nearest(q))
    return out


def _fp32_nearest(q: Fraction) -> Fraction:
    """The fp32 value nearest ``q`` (q >= 0), ties to even, exactly."""
    f = np.float32(float(q))
    best = None
    for c in (np.nextafter(f, np.float32(0)), f, np.nextafter(f, np.float32(np.inf))):
        key = (abs(Fraction(float(c)) - q), int(np.asarray(c).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, Fraction(float(c)))
    return best[1]


def codes(x, byte, fault: str | None = None) -> np.ndarray:
    """E2M1 codes of the fp32 ``x`` rounded stochastically with ``byte`` per element."""
    x = np.asarray(x, np.float32)
    byte = np.asarray(byte, np.int64)
    sign = np.where(np.signbit(x), 8, 0)
    units = magnitude_units(x)
    low = np.clip(np.searchsorted(GRID_UNITS[:7], units, side="right") - 1, 0, 6)
    top = ((units - GRID_UNITS[low]) << 8) // (GRID_UNITS[low + 1] - GRID_UNITS[low])
    if fault == "nearest":
        code = round_nearest_even(units)
    elif fault == "fmaf-nearest":
        magnitude = np.abs(x.astype(np.float64))
        step = np.asarray(GRID)[low + 1] - np.asarray(GRID)[low]
        t = fp32_sum_nearest(byte, step, magnitude)
        code = np.searchsorted(np.asarray(GRID), t, side="right") - 1
    elif fault == "always-down":
        code = low
    elif fault == "biased-byte":
        code = low + (top + byte > 256)
    else:
        code = low + (top + byte >= 256)
        if fault == "dropped-carry":  # the exponent bits of the lower code kept
            crossing = (code != low) & (low % 2 == 1)
            code = np.where(crossing, (low & ~1) | (code & 1), code)
    special = ~np.isfinite(x) | (np.abs(x) >= 6)
    code = np.where(special, 7, code)
    out = sign | code
    if fault == "zero-sign-lost":
        out = np.where(code == 0, 0, out)
    nan = np.isnan(x)
    out = np.where(nan, (sign | 7) if fault == "nan-not-saturated" else 7, out)
    if fault == "zero":
        out = np.zeros_like(out)
    return out.astype(np.uint8)


def routed_bytes(words: np.ndarray, routing: str) -> np.ndarray:
    order, reversed_slots = ROUTES[routing]
    words = np.asarray(words, np.uint32).astype(np.int64)
    rows, count = words.shape
    out = np.zeros((rows, count * 4), np.int64)
    for i in range(4):
        byte = (words >> (8 * order[i])) & 0xFF
        out[:, i::4] = REVERSED[byte] if i in reversed_slots else byte
    return out


def _codes(x, bytes_, fault) -> np.ndarray:
    return codes(x, bytes_, fault)


class CarryExact:
    """Takes the random bits; rounds its fp32 inputs as they are."""

    version = "independent stochastic kernel 1"
    kinds = frozenset({"stochastic"})
    sr_scaling = "none"
    sr_random_bits = "given"

    def __init__(self, routing: str = "straight", declared: str | None = None,
                 fault: str | None = None):
        self.routing = routing
        self.sr_routing = declared or routing
        self.fault = fault
        self.name = f"sr-{routing}" + (f"-as-{declared}" if declared else "") \
            + (f"-{fault}" if fault else "")

    def available(self):
        return True, ""

    def quantize_stochastic(self, x, global_scale=None, random_bits=None, seed=None):
        if random_bits is None:
            raise ValueError("random_bits: this kernel takes the random bits")
        return {"codes": _codes(x, routed_bytes(random_bits, self.routing), self.fault)}


class Hidden(CarryExact):
    """Draws its own words from ``seed``; the stream is not exported."""

    sr_random_bits = "hidden"

    def __init__(self, fault: str | None = None):
        super().__init__("straight", None, fault)
        self.name = "sr-hidden" + (f"-{fault}" if fault else "")

    def quantize_stochastic(self, x, global_scale=None, random_bits=None, seed=None):
        x = np.asarray(x, np.float32)
        rng = np.random.Generator(np.random.PCG64(seed))
        words = rng.integers(0, 2 ** 32, (x.shape[0], x.shape[1] // 4), dtype=np.uint32)
        return {"codes": _codes(x, routed_bytes(words, "straight"), self.fault)}


def te_fallback_model():
    """A MODEL of TransformerEngine's software fallback (see the module docstring)."""
    kernel = CarryExact("straight", fault="fmaf-nearest")
    kernel.name = "te-sm120-fallback-model"
    return kernel


# -- factories for --backend tests.helpers... ---------------------------------------------------

def carry_exact():
    return CarryExact()


def carry_exact_sm103a():
    return CarryExact("sm103a")


def straight_as_ptx():
    return CarryExact("straight", declared="ptx-e2m1x4")


def straight_as_sm103a():
    return CarryExact("straight", declared="sm103a")


def hidden():
    return Hidden()


def _mutant(fault):
    def create():
        return CarryExact(fault=fault)
    create.__name__ = fault.replace("-", "_")
    return create


def _hidden_mutant(fault):
    def create():
        return Hidden(fault)
    create.__name__ = "hidden_" + fault.replace("-", "_")
    return create


for _fault in FAULTS:
    globals()[_fault.replace("-", "_")] = _mutant(_fault)
    globals()["hidden_" + _fault.replace("-", "_")] = _hidden_mutant(_fault)
