"""The stochastic kind's judge (docs/spec.md section 11): a kernel that rounds to E2M1
stochastically, judged bit for bit when it takes the random bits (NVFP4-SR-1 .. -4), by
exhaustion over the 256 bytes without a model of its routing (NVFP4-SR-5), and by an acceptance
test fixed in advance when its random stream is hidden (NVFP4-SR-6).

- ``StochasticDomain``: what the kernel declares (its scaling, whether it takes the bits, its
  byte routing);
- ``StochasticCase``: inputs (values or activations, a global scale, the random words) and the
  reference's result under any scaling and routing;
- ``observe_stochastic``: what the kernel returned, read (codes or packed codes, scale bytes);
- ``diagnose_stochastic``: the findings of one result, each naming its clause: a scale byte
  (NVFP4-SR-1), a special (NVFP4-SR-3), the whole tensor matching another routing
  (NVFP4-SR-4), any other element (NVFP4-SR-2);
- ``exhaustion_findings``: NVFP4-SR-5 from 256 results of the words ``b * 0x01010101``;
- ``ACCEPTANCE`` and ``judge_hidden``: NVFP4-SR-6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from hscale.reference.e2m1 import E2M1_MAGNITUDES, decode_e2m1
from hscale.reference.packing import unpack_codes
from hscale.reference.random_bits import PER_WORD, ROUTINGS, element_bytes
from hscale.reference.stochastic_quantize import (StochasticResult, quantize_stochastic,
                                                  scaled_products)
from hscale.reference.stochastic_rounding import discarded_top_array

from .findings import Finding, Findings, plural

RANDOM_BITS_MODES = ("given", "hidden")
#: The word that gives every element the byte b under any byte-bijective routing.
EVERY_BYTE = 0x01010101


@dataclass(frozen=True)
class StochasticDomain:
    scaling: str = "none"
    random_bits: str = "given"
    routing: str = "straight"

    @classmethod
    def of(cls, declarations: dict) -> "StochasticDomain":
        return cls(declarations["sr_scaling"], declarations["sr_random_bits"],
                   declarations["sr_routing"])

    def describe(self) -> str:
        return (f"scaling {self.scaling}; random bits {self.random_bits}"
                + (f", routing {self.routing}" if self.random_bits == "given" else ""))


@dataclass(frozen=True)
class StochasticCase:
    """``x`` (rows, n): the values a ``none`` kernel rounds, or the activations a scaling kernel
    quantizes with ``global_scale``; ``words`` uint32 (rows, n/4) the random bits."""

    x: np.ndarray
    words: np.ndarray
    global_scale: float | None = None
    id: str = ""
    title: str = ""
    clauses: tuple = ()

    @property
    def shape(self) -> tuple:
        return tuple(np.shape(self.x))

    def describe(self) -> str:
        return f"case {self.id or '(generated)'} ({self.title or 'stochastic'}), shape {self.shape}"

    def expected_for(self, scaling: str, routing: str) -> StochasticResult:
        return _expected(self, scaling, routing)


_CACHE: dict = {}


def _expected(case: StochasticCase, scaling: str, routing: str) -> StochasticResult:
    key = (id(case), scaling, routing)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not case:
        if len(_CACHE) > 256:
            _CACHE.clear()
        result = quantize_stochastic(case.x, case.global_scale, case.words, scaling=scaling,
                                     routing=routing)
        _CACHE[key] = hit = (case, result)
    return hit[1]


@dataclass
class ObservedStochastic:
    codes: np.ndarray
    scale_bytes: np.ndarray | None


def _member(result, name):
    if isinstance(result, dict):
        return result.get(name)
    return getattr(result, name, None)


def observe_stochastic(result, shape, scaling: str) -> tuple[ObservedStochastic | None, list]:
    """What a kernel returned, read: ``codes`` (uint8 (rows, n)) or ``packed`` (rows, n/2), and
    ``scale_bytes`` (rows, n/16) for a scaling kernel; findings (NVFP4-SR-1) when unreadable."""
    rows, n = shape
    findings = []
    codes = _member(result, "codes")
    if codes is None and _member(result, "packed") is not None:
        packed = np.asarray(_member(result, "packed"))
        if packed.shape != (rows, n // 2):
            findings.append(Finding("NVFP4-SR-1", f"packed: shape expected {(rows, n // 2)} "
                                    f"observed {packed.shape}"))
            return None, findings
        codes = unpack_codes(packed.astype(np.uint8))
    if codes is None:
        return None, [Finding("NVFP4-SR-1", "the result has neither codes nor packed")]
    codes = np.asarray(codes)
    if codes.shape != (rows, n) or codes.dtype.kind not in "iu" or (codes.size and (
            codes.min() < 0 or codes.max() > 0xF)):
        return None, [Finding("NVFP4-SR-1", f"codes: 4-bit values of shape {(rows, n)}, "
                              f"observed {codes.dtype} {codes.shape}")]
    scale_bytes = None
    if scaling != "none":
        scale_bytes = _member(result, "scale_bytes")
        want = (rows, n // 16)
        if scale_bytes is None or np.shape(scale_bytes) != want:
            return None, [Finding("NVFP4-SR-1", f"scale_bytes: uint8 of shape {want}, observed "
                                  f"{None if scale_bytes is None else np.shape(scale_bytes)}")]
        scale_bytes = np.asarray(scale_bytes).astype(np.uint8)
    return ObservedStochastic(codes.astype(np.uint8), scale_bytes), findings


@dataclass
class StochasticDiagnosis(Findings):
    elements: int = 0
    unlisted: int = 0  # findings not listed (beyond the judge's limit), counted

    def render(self, shown: int = 6) -> list[str]:
        lines = ["  " + f.render() for f in self.findings[:shown]]
        more = len(self.findings) - shown + self.unlisted
        if more > 0:
            lines.append(f"  ... and {plural(more, 'more finding')}")
        return lines


def _value_text(v) -> str:
    v = np.float32(v)
    return f"{float(v)!r} (0x{int(v.view(np.uint32)):08X})"


def _place(r: int, j: int) -> tuple[tuple[int, int], int]:
    return (r, j // 16), j % 16


def diagnose_stochastic(case: StochasticCase, observed: ObservedStochastic,
                        domain: StochasticDomain, max_findings: int = 50) -> StochasticDiagnosis:
    """Every element (and scale byte) of ``observed`` against the reference under the declared
    scaling and routing, bit for bit."""
    expected = case.expected_for(domain.scaling, domain.routing)
    diagnosis = StochasticDiagnosis(elements=int(np.prod(case.shape)))
    if domain.scaling != "none":
        differ = np.argwhere(observed.scale_bytes != expected.scale_bytes)
        for r, i in differ[:max_findings]:
            diagnosis.findings.append(Finding(
                "NVFP4-SR-1", f"scale byte expected 0x{int(expected.scale_bytes[r, i]):02X} "
                f"observed 0x{int(observed.scale_bytes[r, i]):02X} (the {domain.scaling} "
                "recipe's byte, by round to nearest: the random bits never reach it)",
                group=(int(r), int(i)), kind="byte"))
        if len(differ):
            return diagnosis  # the products then differ too: the bytes are the first fault
    _, products = scaled_products(case.x, case.global_scale, domain.scaling)
    differ = np.argwhere(observed.codes != expected.codes)
    if not len(differ):
        return diagnosis
    others = [routing for routing in ROUTINGS if routing != domain.routing and np.array_equal(
        observed.codes, case.expected_for(domain.scaling, routing).codes)]
    tops = discarded_top_array(products)
    bytes_ = element_bytes(case.words, domain.routing)
    for r, j in differ[:max_findings]:
        r, j = int(r), int(j)
        group, element = _place(r, j)
        v, want, got = products[r, j], int(expected.codes[r, j]), int(observed.codes[r, j])
        if others:
            clause, why = "NVFP4-SR-4", (f"the codes are those of the routing "
                                         f"{' and '.join(others)}, not the declared "
                                         f"{domain.routing}")
        elif tops[r, j] < 0 or v == 0:
            clause, why = "NVFP4-SR-3", "a special: NaN -> 0x7, |v| >= 6 -> sign|0x7, +-0 kept"
        else:
            carries = int(tops[r, j]) + int(bytes_[r, j]) >= 256
            clause, why = "NVFP4-SR-2", (f"D_top = {int(tops[r, j])}, r = {int(bytes_[r, j])}: "
                                         f"{'a carry' if carries else 'no carry'}")
        diagnosis.findings.append(Finding(
            clause, f"v = {_value_text(v)}, word 0x{int(case.words[r, j // PER_WORD]):08X}: "
            f"code expected 0x{want:X} ({decode_e2m1(want):+g}) observed 0x{got:X} "
            f"({decode_e2m1(got):+g}); {why}", group=group, element=element, kind="code",
            expected=f"0x{want:X}", observed=f"0x{got:X}"))
    diagnosis.unlisted = max(0, len(differ) - max_findings)
    return diagnosis


# ------------------------------------------------------------------------------------------
# NVFP4-SR-5: unbiasedness by exhaustion, without a model of the routing
# ------------------------------------------------------------------------------------------

def every_byte_words(shape) -> list[np.ndarray]:
    """The 256 word arrays ``b * 0x01010101`` for ``shape`` (rows, n)."""
    rows, n = shape
    return [np.full((rows, n // PER_WORD), b * EVERY_BYTE, np.uint32) for b in range(256)]


def exhaustion_findings(values: np.ndarray, codes: list[np.ndarray]) -> list[Finding]:
    """NVFP4-SR-5: over the 256 results (the words :func:`every_byte_words`) of the same values
    (a ``none`` kernel's fp32 inputs), each element's round-ups must number its ``D_top``."""
    values = np.asarray(values, np.float32)
    tops = discarded_top_array(values)
    magnitudes = np.abs(np.stack([decode_e2m1(c) for c in codes]))  # (256, rows, n)
    low = _cell_low(values)
    ups = (magnitudes > low[None]).sum(axis=0)
    findings = []
    for r, j in np.argwhere((tops >= 0) & (ups != tops)):
        r, j = int(r), int(j)
        group, element = _place(r, j)
        findings.append(Finding(
            "NVFP4-SR-5", f"v = {_value_text(values[r, j])}: over the 256 bytes it rounds up "
            f"{int(ups[r, j])} times, D_top = {int(tops[r, j])}", group=group, element=element,
            kind="bias", expected=str(int(tops[r, j])), observed=str(int(ups[r, j]))))
    return findings


def _cell_low(values: np.ndarray) -> np.ndarray:
    """The grid point at or below each |v| (finite, below 6)."""
    magnitude = np.abs(values.astype(np.float64))
    grid = np.asarray(E2M1_MAGNITUDES, np.float64)
    index = np.clip(np.searchsorted(grid, magnitude, side="right") - 1, 0, len(grid) - 1)
    return grid[index]


# ------------------------------------------------------------------------------------------
# NVFP4-SR-6: the acceptance test of a hidden random stream
# ------------------------------------------------------------------------------------------

#: The values of the test and copies of each (fixed in advance: docs/spec.md NVFP4-SR-6).
ACCEPTANCE_VALUES = (0.25, 1.25, 5.0, -1.25, 0.5 + 2.0 ** -9, 2.0 - 2.0 ** -23, 1.875,
                     2.0 ** -9 - 2.0 ** -33)
ACCEPTANCE_COPIES = 8192
ACCEPTANCE_LEVEL = 1e-7


def _log_pmf(n: int, p: float, k: int) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


@cache
def acceptance_interval(n: int, d_top: int, level: float = ACCEPTANCE_LEVEL) -> tuple[int, int]:
    """``[q(level/2), q(1 - level/2)]`` of Binomial(n, d_top/256), its exact quantiles."""
    if d_top == 0:
        return 0, 0
    if d_top == 256:
        return n, n
    p = d_top / 256
    cdf, low, high = 0.0, None, n
    for k in range(n + 1):
        cdf += math.exp(_log_pmf(n, p, k))
        if low is None and cdf >= level / 2:
            low = k
        if cdf >= 1 - level / 2:
            high = k
            break
    return low, high


def acceptance_values() -> np.ndarray:
    """The test's input: (len(ACCEPTANCE_VALUES), ACCEPTANCE_COPIES) fp32, one row per value."""
    return np.repeat(np.asarray(ACCEPTANCE_VALUES, np.float32)[:, None], ACCEPTANCE_COPIES,
                     axis=1)


def judge_hidden(first: np.ndarray, second: np.ndarray) -> list[Finding]:
    """NVFP4-SR-6 on two calls' codes (two seeds) for :func:`acceptance_values`."""
    values = acceptance_values()
    findings = []
    low = _cell_low(values)
    tops = discarded_top_array(values[:, :1])[:, 0]
    for row, value in enumerate(ACCEPTANCE_VALUES):
        codes = first[row]
        magnitude = np.abs(decode_e2m1(codes))
        sign_ok = np.signbit(decode_e2m1(codes)) == (value < 0)
        grid = np.asarray(E2M1_MAGNITUDES)
        lo = low[row, 0]
        hi = grid[min(np.searchsorted(grid, lo, side="right"), len(grid) - 1)]
        adjacent = ((magnitude == lo) | (magnitude == hi)) & sign_ok
        where = (row, 0)
        if not adjacent.all():
            bad = int(np.argmin(adjacent))
            findings.append(Finding(
                "NVFP4-SR-6", f"v = {_value_text(value)}: code 0x{int(codes[bad]):X} "
                f"({decode_e2m1(int(codes[bad])):+g}) is not {lo:g} or {hi:g} with v's sign "
                f"(adjacency; {int((~adjacent).sum())} of {ACCEPTANCE_COPIES})", group=where,
                kind="adjacency"))
            continue
        ups = int((magnitude == hi).sum())
        interval = acceptance_interval(ACCEPTANCE_COPIES, int(tops[row]))
        if not interval[0] <= ups <= interval[1]:
            findings.append(Finding(
                "NVFP4-SR-6", f"v = {_value_text(value)}: {ups} of {ACCEPTANCE_COPIES} rounded "
                f"up; D_top = {int(tops[row])} admits {interval[0]}..{interval[1]} "
                f"(Binomial(n, D_top/256) at level {ACCEPTANCE_LEVEL:g})", group=where,
                kind="count", expected=f"{interval[0]}..{interval[1]}", observed=str(ups)))
    if np.array_equal(first, second):
        findings.append(Finding("NVFP4-SR-6", "two calls with two seeds gave the same codes "
                                "everywhere: the stream does not depend on the seed",
                                kind="seed"))
    return findings
