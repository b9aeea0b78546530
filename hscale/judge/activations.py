"""Judging a run-time activation quantizer (the activation kind, docs/spec.md section 8).

A kernel is certified under the recipe it declares (NVFP4-ACT-5):

- ``exact`` and ``torchao`` are bit-exact recipes: every scale byte and code must be the
  recipe's (NVFP4-ACT-6, -7);
- ``fast-math`` multiplies by ``rcp.approx`` reciprocals, which PTX states to within one ulp.
  A result is accepted when *some* reciprocal within that error gives it: the reciprocal of 6
  and of ``g`` are one value each for the whole tensor (each is one instruction on one
  operand), the output scale's reciprocal one value per group; ``.ftz`` flushes subnormal
  operands and results to zero (NVFP4-ACT-2, -3, -5). Among the choices for the whole tensor
  the one that explains the most groups is taken, and the others' groups are reported.

Each difference is a finding in the spec's terms: a scale byte or code that no admissible
arithmetic gives cites its recipe's clause (NVFP4-ACT-2 / -3, -6, -7); a NaN byte, a zero
group's byte, a saturated group and a lost sign cite NVFP4-ACT-8; the global scale
NVFP4-ACT-1. Groups holding a NaN or an infinity are not judged (NVFP4-ACT-9).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hscale.reference.activation_recipes import (ONE, SIX, e2m1_satfinite,
                                                 e4m3_satfinite, exact_codes, exact_scale_bytes,
                                                 group_maxima, per_element, torchao_codes,
                                                 torchao_scale_bytes)
from hscale.reference.activations import QuantizedActivations, dynamic_global_scale
from hscale.reference.constants import E4M3_MAX, FP32_SMALLEST_NORMAL, GROUP_SIZE
from hscale.reference.e4m3 import decode_e4m3

from .activation_domain import ObservedActivations
from .diagnose import value_hex
from .findings import Finding, fp32_hex

#: The clause of each recipe's scale bytes and codes.
BYTE_CLAUSE = {"fast-math": "NVFP4-ACT-2", "exact": "NVFP4-ACT-6", "torchao": "NVFP4-ACT-7"}
CODE_CLAUSE = {"fast-math": "NVFP4-ACT-3", "exact": "NVFP4-ACT-6", "torchao": "NVFP4-ACT-7"}
SPECIAL_CLAUSE = "NVFP4-ACT-8"

#: Differences listed per clause; the rest are counted.
LISTED = 12
NAN_BYTES = (0x7F, 0xFF)


def judged_under(recipe: str, clauses) -> list[str]:
    """The clauses that a test naming several recipes' clauses (a golden-vector case names
    every recipe's) judges on a kernel of ``recipe``: its own, not the others' (which stay not
    applicable). A test of one recipe keeps its clauses: skipped on a kernel of another, it
    says why."""
    named = {r for r in BYTE_CLAUSE if {BYTE_CLAUSE[r], CODE_CLAUSE[r]} & set(clauses)}
    if len(named) < 2:
        return list(clauses)
    others = {c for r in BYTE_CLAUSE if r != recipe for c in (BYTE_CLAUSE[r], CODE_CLAUSE[r])}
    return [c for c in clauses if c not in others]


@dataclass(frozen=True, eq=False)
class ActivationCase:
    """One activation tensor and how it is quantized: ``x`` (tokens, n) in its dtype,
    ``global_scale`` the g given (None: the kernel computes it, the dynamic mode), what the
    case is and exercises; ``expected`` the stored results per recipe (golden vectors), else
    the reference's."""

    x: np.ndarray
    global_scale: np.float32 | None = None
    id: str = ""
    title: str = ""
    clauses: tuple = ()
    notes: tuple = ()
    expected: dict | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(np.shape(self.x))

    def describe(self) -> str:
        shape = "x".join(str(s) for s in self.shape)
        g = ("computed by the kernel (dynamic)" if self.global_scale is None
             else f"g = {float(self.global_scale)!r} ({fp32_hex(self.global_scale)})")
        text = f"{shape} {np.asarray(self.x).dtype.name}, {g}"
        label = self.id or self.title
        return f"{label}: {text}" if label else text

    def expected_for(self, recipe: str) -> QuantizedActivations:
        from hscale.reference.activations import quantize_activations
        if self.expected and recipe in self.expected:
            return self.expected[recipe]
        x = np.asarray(self.x)
        live = _finite_groups(x.astype(np.float32))
        clean = np.where(np.repeat(live, GROUP_SIZE, axis=1), x, np.zeros_like(x))
        return quantize_activations(clean, self.global_scale, recipe=recipe)


@dataclass
class ActivationDiagnosis:
    findings: list[Finding] = field(default_factory=list)
    unlisted: Counter = field(default_factory=Counter)
    groups: int = 0
    skipped_groups: int = 0  # holding a NaN or an infinity (NVFP4-ACT-9)

    @property
    def ok(self) -> bool:
        return not self.findings

    def render(self, case: ActivationCase | None = None, shown: int = 3) -> list[str]:
        lines, by_clause = [], {}
        for finding in self.findings:
            by_clause.setdefault(finding.clause, []).append(finding)
        for clause, items in by_clause.items():
            for finding in items[:shown]:
                lines.append("  " + finding.render())
                if case is not None and finding.group is not None:
                    lines.append(group_context(case, *finding.group))
            more = len(items) - shown + self.unlisted.get(clause, 0)
            if more > 0:
                lines.append(f"  [{clause}] ... and {more} more")
        return lines


def group_context(case: ActivationCase, r: int, i: int) -> str:
    x = np.asarray(case.x)[r, GROUP_SIZE * i:GROUP_SIZE * (i + 1)]
    return ("      x = [" + ", ".join(value_hex(v, x.dtype) for v in x) + f"] ({x.dtype.name} bits)"
            "\n        = [" + ", ".join(repr(float(v)) for v in x) + "]")


# ------------------------------------------------------------------------------------------
# The reciprocals fast-math admits (NVFP4-ACT-5)
# ------------------------------------------------------------------------------------------

def rcp_candidates(value) -> np.ndarray:
    """Every result ``rcp.approx.ftz.f32`` may give for fp32 ``value`` > 0 (shape (4, ...)):
    the fp32 values within one ulp of the exact ``1 / v``, that is its two fp32 neighbours,
    and ``1 / v`` itself when it is an fp32 value (v a power of two: exact, as PTX's
    ``rcp.approx`` measured on an H200 is, docs/gpu/h200-act); with ``.ftz``: a subnormal (or
    zero) operand gives +inf, a result below the normal range may be flushed to 0."""
    v = np.asarray(value, dtype=np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        exact = 1.0 / v.astype(np.float64)  # the nearest double; an fp32 value only if exact
        nearest = exact.astype(np.float32)
    on = nearest.astype(np.float64) == exact
    below = np.where(nearest.astype(np.float64) > exact, np.nextafter(nearest, np.float32(0)),
                     nearest)
    above = np.where(nearest.astype(np.float64) < exact,
                     np.nextafter(nearest, np.float32(np.inf)), nearest)
    flushed = np.where(np.abs(exact) < FP32_SMALLEST_NORMAL, np.float32(0), nearest)
    out = np.stack([below, nearest, above, flushed]).astype(np.float32)
    subnormal_operand = np.abs(v) < np.float32(FP32_SMALLEST_NORMAL)
    return np.where(subnormal_operand, np.float32(np.inf), out)


# ------------------------------------------------------------------------------------------
# Judging
# ------------------------------------------------------------------------------------------

def _finite_groups(x32: np.ndarray) -> np.ndarray:
    tokens, n = x32.shape
    return np.isfinite(x32).reshape(tokens, n // GROUP_SIZE, GROUP_SIZE).all(axis=2)


class _Listing:
    def __init__(self, diagnosis: ActivationDiagnosis):
        self.diagnosis, self.counts = diagnosis, Counter()

    def add(self, finding: Finding) -> None:
        self.counts[finding.clause] += 1
        if self.counts[finding.clause] <= LISTED:
            self.diagnosis.findings.append(finding)
        else:
            self.diagnosis.unlisted[finding.clause] += 1


def diagnose_activations(case: ActivationCase, observed: ObservedActivations,
                         recipe: str) -> ActivationDiagnosis:
    """Every finding about ``observed`` as a ``recipe`` kernel's result for ``case``."""
    x32 = np.asarray(case.x).astype(np.float32)
    live = _finite_groups(x32)
    diagnosis = ActivationDiagnosis(groups=int(live.size),
                                    skipped_groups=int(np.count_nonzero(~live)))
    listing = _Listing(diagnosis)
    x32 = np.where(np.repeat(live, GROUP_SIZE, axis=1), x32, np.float32(0))
    g, a = _judge_global_scale(case, observed, recipe, x32, listing)
    amax = group_maxima(x32)
    bytes_ = observed.scale_bytes.astype(np.int64)
    admissible = admissible_bytes(recipe, amax, g, a)  # (k, tokens, n/16)
    matches = (admissible == bytes_[None]) | ~live[None]
    best = int(np.argmax(matches.reshape(len(admissible), -1).sum(axis=1)))
    for r, i in np.argwhere(~matches[best]):
        listing.add(_byte_finding(recipe, int(r), int(i), amax, g, a, admissible[:, r, i],
                                  int(bytes_[r, i])))
    judged = live & ~np.isin(bytes_, NAN_BYTES)
    for finding in _judge_codes(recipe, x32, observed, g, a, judged):
        listing.add(finding)
    return diagnosis


def _judge_global_scale(case, observed, recipe, x32, listing):
    """NVFP4-ACT-1: the (g, a) the bytes and codes are judged at."""
    if case.global_scale is not None:
        g = np.float32(case.global_scale)
        a = ONE / g
        given = g if observed.convention == "divisor" else a
        if observed.stored is not None and observed.stored != given:
            listing.add(Finding("NVFP4-ACT-1", f"global scale: given "
                                f"{'g' if observed.convention == 'divisor' else 'a'} = "
                                f"{_f32(given)}, the kernel reports {_f32(observed.stored)}: a "
                                "static scale is used unchanged", kind="sg"))
        return g, a
    want_g, want_a = dynamic_global_scale(x32, recipe)
    if observed.global_scale is None:
        listing.add(Finding("NVFP4-ACT-1", "a kernel that computes its global scale (dynamic) "
                            "returns it (global_scale); the result has none", kind="sg"))
        return want_g, want_a
    stored_ok = (observed.multiplier == want_a) if recipe == "torchao" else \
        (observed.global_scale == want_g)
    if not stored_ok:
        amax = float(np.max(np.abs(x32)))
        rule = ("a = fp32(amax_t / 2688)" if recipe == "torchao" else "g = fp32(2688 / amax_t)")
        listing.add(Finding("NVFP4-ACT-1", f"dynamic global scale expected g = {_f32(want_g)} "
                            f"(a = {_f32(want_a)}) observed g = {_f32(observed.global_scale)} "
                            f"(a = {_f32(observed.multiplier)}); {rule} with amax_t = "
                            f"{amax!r}, and g = a = 1 for an all-zero tensor", kind="sg",
                            expected=fp32_hex(want_g), observed=fp32_hex(observed.global_scale)))
        usable = np.isfinite(observed.global_scale) and np.isfinite(observed.multiplier) \
            and observed.global_scale > 0 and observed.multiplier > 0
        if usable:  # judge the rest at the kernel's own scale
            return observed.global_scale, observed.multiplier
    return want_g, want_a


def admissible_bytes(recipe, amax, g, a) -> np.ndarray:
    """(k, tokens, n/16): the scale bytes each admissible arithmetic gives."""
    if recipe == "exact":
        return exact_scale_bytes(amax, g)[None].astype(np.int64)
    if recipe == "torchao":
        return torchao_scale_bytes(amax, a)[None].astype(np.int64)
    out = []
    with np.errstate(over="ignore"):
        for r6 in _nearest_first(rcp_candidates(SIX)):  # one rcp(6) for the tensor
            out.append(e4m3_satfinite(g * (amax * r6)))
    return np.stack(out).astype(np.int64)


def _block_scale_value(recipe, amax, g, a) -> float:
    """The unrounded fp32 block scale of the recipe (correctly rounded reciprocals)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if recipe == "exact":
            return float(amax * (g * (ONE / SIX)))
        if recipe == "torchao":
            return float((amax / SIX) / a)
        return float(g * (amax * (ONE / SIX)))


def _byte_finding(recipe, r, i, amax, g, a, admissible, got) -> Finding:
    want = sorted({int(b) for b in admissible})
    amax_g = amax[r, i]
    sf = _block_scale_value(recipe, np.float32(amax_g), g, a)
    wanted = " or ".join(f"0x{b:02X}" for b in want)
    pair = dict(expected=wanted, observed=f"0x{got:02X}")
    evidence = f"amax_g = {_f32(amax_g)}, block scale {sf!r} before rounding"
    if got in NAN_BYTES:
        why = (f"a zero group gets {wanted} ({recipe})" if amax_g == 0 else
               "a block scale above 448 saturates to 0x7E (satfinite)")
        return Finding(SPECIAL_CLAUSE, f"scale byte 0x{got:02X} is NaN: a scale byte is never "
                       f"NaN, {why}; expected {wanted}; {evidence}", (r, i), kind="byte",
                       **pair)
    if amax_g == 0:
        return Finding(SPECIAL_CLAUSE, f"zero group: scale byte expected {wanted} ({recipe}) "
                       f"observed 0x{got:02X}", (r, i), kind="byte", **pair)
    if sf > E4M3_MAX:
        return Finding(SPECIAL_CLAUSE, f"saturation: the block scale {sf!r} is above 448 (a "
                       f"static global scale below the run-time amax): expected {wanted} "
                       f"observed 0x{got:02X}", (r, i), kind="byte", **pair)
    how = ("for every rcp(6) within one ulp of 1/6" if recipe == "fast-math" else
           "the recipe's arithmetic")
    return Finding(BYTE_CLAUSE[recipe], f"scale byte expected {wanted} ({recipe}, {how}) "
                   f"observed 0x{got:02X}; {evidence}, g = {_f32(g)}", (r, i), kind="byte",
                   **pair)


def _judge_codes(recipe, x32, observed, g, a, judged) -> list[Finding]:
    """The codes at the byte each group actually got (a wrong byte is its own finding)."""
    codes = observed.codes
    tokens, n = codes.shape
    groups = (lambda c: c.reshape(tokens, n // GROUP_SIZE, GROUP_SIZE))  # noqa: E731
    best_ok, best_alternatives = None, None
    for alternatives in _code_candidates(recipe, x32, observed.scale_bytes, g, a):
        ok = np.zeros(judged.shape, bool)
        for want, wildcard in alternatives:
            same = groups(want) == groups(codes)
            if wildcard is not None:
                same |= groups(wildcard)
            ok |= same.all(axis=2)
        if best_ok is None or np.count_nonzero(ok & judged) > np.count_nonzero(best_ok & judged):
            best_ok, best_alternatives = ok, alternatives
    want = best_alternatives[0][0]
    findings = []
    for r, i in np.argwhere(judged & ~best_ok):
        differs = groups(want)[r, i] != groups(codes)[r, i]
        j = int(np.flatnonzero(differs)[0]) if differs.any() else 0
        col = GROUP_SIZE * i + j
        e, o = int(want[r, col]), int(codes[r, col])
        value = float(x32[r, col])
        where = dict(group=(int(r), int(i)), element=j, expected=f"0x{e:X}", observed=f"0x{o:X}")
        if e ^ o == 0x8:
            findings.append(Finding(SPECIAL_CLAUSE, f"x = {value!r}: the sign bit of the code is "
                                    f"the sign bit of x (-0.0 and a negative that rounds to 0 "
                                    f"give 0x8): code expected 0x{e:X} observed 0x{o:X}",
                                    kind="sign", **where))
            continue
        how = ("for every admissible reciprocal" if recipe == "fast-math" else recipe)
        findings.append(Finding(CODE_CLAUSE[recipe], f"x = {value!r}, scale byte "
                                f"0x{int(observed.scale_bytes[r, i]):02X}: code expected "
                                f"0x{e:X} ({how}) observed 0x{o:X}", kind="code", **where))
    return findings


def _code_candidates(recipe, x32, bytes_, g, a) -> list[list[tuple]]:
    """The codes each admissible arithmetic gives, as [per-tensor choice][per-group
    alternative] = (codes, mask of elements any code is admitted at, or None). The first
    alternative of each choice is its correctly rounded arithmetic (what a finding shows).

    Exact and torchao: one. Fast-math (NVFP4-ACT-3, -5): rcp(g) is one value for the tensor
    (a choice); rcp of each group's ``e4m3(c) * rcp(g)`` one per group (an alternative); a group
    whose byte is 0x00 is multiplied by 0 (vLLM) or by rcp(0) = inf (TensorRT-LLM and FlashInfer
    test the unrounded scale), a zero element's NaN product then admitting any code."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if recipe == "exact":
            return [[(exact_codes(x32, bytes_, g), None)]]
        if recipe == "torchao":
            return [[(torchao_codes(x32, bytes_, a), None)]]
        byte_values = decode_e4m3(bytes_).astype(np.float32)
        zero_byte = bytes_ == 0
        choices = []
        for rg in _nearest_first(rcp_candidates(g)):
            candidates = rcp_candidates(byte_values * rg)  # (4, tokens, n/16)
            alternatives = []
            for k in (1, 0, 2, 3):  # the nearest first
                o = np.where(zero_byte, np.float32(0), candidates[k])
                products = x32 * per_element(o)
                alternatives.append((e2m1_satfinite(products), np.isnan(products)))
            products = x32 * per_element(np.where(zero_byte, np.float32(np.inf), candidates[1]))
            alternatives.append((e2m1_satfinite(products), np.isnan(products)))
            choices.append(alternatives)
        return choices


def _nearest_first(candidates: np.ndarray) -> list:
    """The distinct values of a scalar's candidates, the correctly rounded one (index 1)
    first."""
    values = [np.float32(candidates[1])]
    for value in candidates:
        if not any(value == v for v in values):
            values.append(np.float32(value))
    return values


def _f32(value) -> str:
    value = float(value)
    if not np.isfinite(value):
        return repr(value)
    return f"{value!r} ({fp32_hex(value)})"
