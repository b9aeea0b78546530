"""The one diagnoser: a case, what an implementation produced for it, and every way that breaks
the spec, as findings.

``observe(result, case)`` turns whatever an implementation returned (the reference's
``QuantizedWeight``, or any object with ``scale_bytes``, ``global_scale`` and ``packed`` or
``codes``, the global scale stored as the multiplier or as its reciprocal) into the one result
record, a ``QuantizedWeight``, deriving what it lacks (packing, codes, the initial bytes of a
method without a search) or findings about its structure.

``diagnose(case, observed, profile=..., allowances=...)`` judges it (``profiles.py``):

- ``exact``: every byte, code and packed byte against the case's expected outputs, each
  difference explained: for a scale byte the objectives of both candidates and whether they
  tie, for a code the exact quotient |w|/s and whether it was a tie, for an initial byte the
  exact quotient amax_g / (6 s_g) and whether it is an E4M3 midpoint;
- ``faithful`` and ``format``: the independent certificate (``independent.py``) with the named
  allowances, each use counted.

The suite's failure messages, ``hscale vectors check``, ``hscale check`` and the interop matrix
print these findings and nothing else.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from hscale.reference import (E2M1_MIDPOINTS, SCALE_BYTE_VALUES, QuantizedWeight,
                              candidate_errors, encode_e2m1, pack_codes, unpack_codes)
from hscale.reference.constants import FP32_SMALLEST_NORMAL
from hscale.reference.constants import GROUP_SIZE as GROUP
from hscale.reference.global_scale import multiplier_from_reciprocal
from hscale.reference.initial_scale import FOUR_OVER_SIX_TOPS, TOP_MAGNITUDE

from . import independent
from .cases import Case, Rejection
from .findings import Finding, fp32_hex
from .profiles import EXACT, FORMAT, check_profile

#: Differences analysed in detail per kind; the rest are counted.
LISTED = 24
#: Results of at most this many weights also get the independent exact certificate.
SMALL_CASE = 1 << 14
CONVENTIONS = ("multiplier", "reciprocal")
#: The E2M1 magnitudes an init maps the group maximum onto (NVFP4-INIT-1, INIT-2).
INIT_TOPS = {"maxabs": (TOP_MAGNITUDE,), "4over6": FOUR_OVER_SIX_TOPS}


@dataclass
class Diagnosis:
    """The findings about one result, and what it took to accept the rest."""

    findings: list[Finding] = field(default_factory=list)
    unlisted: Counter = field(default_factory=Counter)  # clause -> offences counted, not listed
    allowance_uses: Counter = field(default_factory=Counter)  # allowance -> groups/elements
    tolerance_uses: int = 0  # groups accepted only thanks to the objective tolerance
    groups: int = 0
    note: str = ""
    #: per finding, what would excuse it (``excusing_allowances``); None: not searched
    excused_by: list | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def clauses(self) -> list[str]:
        return list(dict.fromkeys(f.clause for f in self.findings))

    def render(self, case: Case | None = None, shown: int = 3, context: bool = True) -> list[str]:
        """Lines: each clause's first ``shown`` findings (with the group's inputs under each
        when ``context``), then how many more."""
        lines = [self.note] if self.note else []
        by_clause: dict[str, list[Finding]] = {}
        for finding in self.findings:
            by_clause.setdefault(finding.clause, []).append(finding)
        for clause, items in by_clause.items():
            for finding in items[:shown]:
                lines.append("  " + finding.render())
                if context and case is not None and finding.group is not None \
                        and finding.kind != "pack":
                    lines.append(group_context(case, *finding.group))
            more = len(items) - shown + self.unlisted.get(clause, 0)
            if more > 0:
                lines.append(f"  [{clause}] ... and {more} more")
        return lines


# ------------------------------------------------------------------------------------------
# What an implementation returned -> the one result record
# ------------------------------------------------------------------------------------------

def result_array(result, name, shape, clause, dtype, findings):
    """``result.name`` as a numpy array (None where the result has none), a finding of
    ``clause`` appended when it cannot be read or has another shape or dtype than ``shape``,
    ``dtype``."""
    value = getattr(result, name, None)
    if value is None:
        return None
    try:
        a = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - anything unreadable is a finding
        findings.append(Finding(clause, f"{name}: cannot be read as a numpy array ({exc})",
                                kind="structure"))
        return None
    if a.shape != shape:
        findings.append(Finding(clause, f"{name}: shape expected {shape} observed {a.shape}",
                                kind="structure", expected=str(shape), observed=str(a.shape)))
    elif a.dtype != np.dtype(dtype):
        findings.append(Finding(clause, f"{name}: dtype expected {dtype} observed {a.dtype}",
                                kind="structure", expected=dtype, observed=str(a.dtype)))
    return a


def observe(result, case: Case, convention: str = "multiplier", scale_layout: str = "row-major"):
    """``(QuantizedWeight or None, findings)`` from what an implementation returned for
    ``case``: its own ``QuantizedWeight`` as is; otherwise any object with ``scale_bytes``
    (uint8 (m, n/16)), ``global_scale`` (in ``convention``: the multiplier s_g, or the
    reciprocal a checkpoint stores, NVFP4-GS-4), and ``packed`` (uint8 (m, n/2)) or ``codes``
    (uint8 (m, n)); ``delta`` / ``initial_bytes`` where the implementation has a search (for
    rtn the initial byte is the chosen byte by definition, HSCALE-METHOD-1). ``scale_layout``
    ``swizzled-128x4``: ``scale_bytes`` is the 128x4 tiled buffer of NVFP4-PACK-3, read back by
    the judging library's own statement of the layout (``domain.unswizzle``), its padding
    required to be 0x00. A reciprocal global scale is kept beside the multiplier it means
    (``stored_global_scale``), so that findings about s_g show what was stored."""
    m, n = case.shape
    findings: list[Finding] = []
    if convention not in CONVENTIONS:
        raise ValueError(f"global scale convention {convention!r}: must be one of "
                         f"{', '.join(CONVENTIONS)}")
    missing = [a for a in ("scale_bytes", "global_scale") if not hasattr(result, a)]
    if not (hasattr(result, "packed") or hasattr(result, "codes")):
        missing.append("packed or codes")
    if missing:
        return None, [Finding("NVFP4-PACK-1", f"the result ({type(result).__name__}) lacks "
                              f"{', '.join(missing)}", kind="structure")]

    def array(name, shape, clause, dtype):
        return result_array(result, name, shape, clause, dtype, findings)

    codes = array("codes", (m, n), "NVFP4-E2M1-1", "uint8")
    packed = array("packed", (m, n // 2), "NVFP4-PACK-1", "uint8")
    if scale_layout == "swizzled-128x4":
        scale_bytes = _unswizzled_scale_bytes(result, m, n // GROUP, findings)
    else:
        scale_bytes = array("scale_bytes", (m, n // GROUP), "NVFP4-PACK-2", "uint8")
    delta = array("delta", (m, n // GROUP), "HSCALE-ARGMIN-1", "int8")
    initial = array("initial_bytes", (m, n // GROUP), "HSCALE-ARGMIN-1", "uint8")
    if codes is not None and not findings and codes.size and int(codes.max()) > 0xF:
        findings.append(Finding("NVFP4-E2M1-1", f"codes: a code is a 4-bit value 0x0..0xF, "
                                f"observed 0x{int(codes.max()):X}", kind="structure"))
    sg, sg_finding = _observed_global_scale(result.global_scale, convention)
    if sg_finding:
        findings.append(sg_finding)
    if findings:
        return None, findings

    if codes is None:
        codes = unpack_codes(packed)
    if packed is None:
        packed = pack_codes(codes)
    if initial is None and delta is not None:
        initial = (scale_bytes.astype(np.int16) - delta.astype(np.int16)).astype(np.uint8)
    if initial is None and case.method == "rtn":
        initial = scale_bytes  # HSCALE-METHOD-1: rtn keeps the initial byte
    observed = QuantizedWeight.from_bytes(codes, scale_bytes, initial, sg, method=case.method,
                                          init=case.init, K=case.K, U=case.U,
                                          scale_ceiling=case.scale_ceiling)
    as_returned = dict(packed=np.ascontiguousarray(packed))  # a packing fault is seen (PACK-1)
    if delta is not None and not np.array_equal(observed.delta, delta):
        as_returned["delta"] = np.ascontiguousarray(delta)
    if convention == "reciprocal":
        as_returned["stored_global_scale"] = np.float32(result.global_scale)
    return replace(observed, **as_returned), []


def _unswizzled_scale_bytes(result, rows: int, scale_cols: int, findings: list):
    """Row-major scale bytes from a result that returns them in the 128x4 layout, or None (and
    a finding) when the buffer is not that layout's: the wrong size, a dtype other than uint8,
    padding other than 0x00 (NVFP4-PACK-3)."""
    from .domain import unswizzle
    try:
        raw = np.asarray(result.scale_bytes)
    except Exception as exc:  # noqa: BLE001 - anything unreadable is a finding
        findings.append(Finding("NVFP4-PACK-3", f"scale_bytes: cannot be read as a numpy array "
                                f"({exc})", kind="structure"))
        return None
    if raw.dtype != np.uint8:
        findings.append(Finding("NVFP4-PACK-3", f"scale_bytes: dtype expected uint8 observed "
                                f"{raw.dtype}", kind="structure"))
        return None
    try:
        scale_bytes, padding = unswizzle(raw, rows, scale_cols)
    except ValueError as exc:
        findings.append(Finding("NVFP4-PACK-3", f"scale_bytes (declared swizzled 128x4): {exc}",
                                kind="structure"))
        return None
    if np.any(padding):
        findings.append(Finding("NVFP4-PACK-3", f"scale_bytes (declared swizzled 128x4): "
                                f"{int(np.count_nonzero(padding))} of {padding.size} padding bytes "
                                "are not 0x00", kind="layout"))
        return None
    return scale_bytes


def _observed_global_scale(value, convention):
    """The multiplier s_g of an observed global scale, or a finding."""
    if np.ndim(value):
        return math.nan, Finding("NVFP4-GS-1", f"global_scale: an array of shape "
                                 f"{np.shape(value)}, not one fp32 value (the stored fp32 scale)",
                                 kind="structure")
    try:
        number = float(value)
    except Exception:  # noqa: BLE001
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return math.nan, Finding("NVFP4-GS-1", f"global_scale: {type(value).__name__} {shown} "
                                 "is not a number", kind="structure")
    if float(np.float32(number)) != number and np.isfinite(number):
        return math.nan, Finding("NVFP4-GS-1", f"global_scale: {number!r} is not one fp32 value "
                                 "(the stored fp32 scale)", kind="structure")
    if convention == "reciprocal":
        if not (np.isfinite(number) and number > 0):
            return math.nan, Finding("NVFP4-GS-4", f"global scale stored as a reciprocal: "
                                     f"{number!r} is not positive and finite", kind="sg")
        return float(multiplier_from_reciprocal(np.float32(number))), None
    return number, None


# ------------------------------------------------------------------------------------------
# Judging
# ------------------------------------------------------------------------------------------

def diagnose(case: Case, observed: QuantizedWeight, *, profile: str = EXACT, allowances=(),
             independent_check: bool | None = None, name_allowances: bool = False) -> Diagnosis:
    """Every finding about ``observed`` as the result of ``case`` under ``profile``.

    ``independent_check`` (exact profile): also run the independent exact certificate; by
    default on results of at most ``SMALL_CASE`` weights. ``name_allowances``: each finding
    that one more allowance would excuse says which (``name_excusing_allowances``)."""
    profile, allowances = check_profile(profile, allowances)
    diagnosis = Diagnosis(groups=int(np.prod(case.shape)) // GROUP)
    if profile == EXACT:
        expected = expected_for(case, observed)
        if isinstance(expected, Rejection):
            diagnosis.findings.append(Finding(
                expected.clause or "NVFP4-IN-1", "the inputs break a rule of the spec and must "
                f"be rejected; the reference says: {expected.message}", kind="accepted"))
            return diagnosis
        diagnosis.findings, diagnosis.unlisted = compare_exact(case, observed, expected)
        small = int(np.prod(case.shape)) <= SMALL_CASE
        if not diagnosis.findings and (independent_check if independent_check is not None
                                       else small):
            cert = certify(case, observed, strict=True)
            if cert.findings:
                diagnosis.findings, diagnosis.unlisted = cert.findings, cert.extra
                diagnosis.note = ("  (the result equals hscale.reference.quantize but fails the "
                                  "independent certificate: the reference may be wrong, please "
                                  "report)")
    else:
        cert = certify(case, observed, strict=False, allowances=allowances,
                       judge_choice=profile != FORMAT)
        diagnosis.findings, diagnosis.unlisted = cert.findings, cert.extra
        diagnosis.allowance_uses = Counter({k: v for k, v in cert.uses.items() if v})
        diagnosis.tolerance_uses = cert.tolerance_uses
    if name_allowances and diagnosis.findings:
        diagnosis.excused_by = excusing_allowances(case, observed, diagnosis.findings, profile,
                                                   allowances)
        diagnosis.findings = name_excusing_allowances(case, observed, diagnosis.findings, profile,
                                                      allowances, diagnosis.excused_by)
    return diagnosis


#: Results of more weights than this are not searched for the allowance that would excuse a
#: finding (each allowance costs one more certificate).
NAMING_LIMIT = 1 << 20
#: Findings of each clause the naming certificates list (beyond, places are unknown: no name).
NAMING_FINDINGS = 1 << 12


#: In ``excusing_allowances``: the faithful profile itself (its tolerance) accepts the place.
THE_FAITHFUL_PROFILE = "the faithful profile"


def excusing_allowances(case: Case, observed: QuantizedWeight, findings: list[Finding],
                        profile: str, allowances) -> list[tuple[str, ...]] | None:
    """Per finding, what would excuse it: the allowances each of which, added alone, leaves the
    faithful (or format) certificate without a finding at its place (its element, its group, or
    the tensor for a finding about s_g); ``(THE_FAITHFUL_PROFILE,)`` where that certificate
    already has none there (a finding of the exact profile only); ``()`` where nothing single
    does. None when the result is too large to search, or its findings' places are unknown."""
    if int(np.prod(case.shape)) > NAMING_LIMIT:
        return None
    from .profiles import ALLOWANCES
    judge_choice = profile != FORMAT
    allowances = frozenset(allowances)

    def places(cert) -> set | None:
        if cert.extra:  # some findings only counted: their places are unknown
            return None
        return {(f.group, f.element) for f in cert.findings} | {
            (f.group, None) for f in cert.findings if f.group is not None}

    base = places(certify(case, observed, strict=False, allowances=allowances,
                          judge_choice=judge_choice, limit=NAMING_FINDINGS))
    if base is None:
        return None
    excused: dict = {}
    for name in (a for a in ALLOWANCES if a not in allowances):
        left = places(certify(case, observed, strict=False, allowances=allowances | {name},
                              judge_choice=judge_choice, limit=NAMING_FINDINGS))
        if left is None:
            continue
        for place in base - left:
            excused.setdefault(place, []).append(name)
    out = []
    for finding in findings:
        place = (finding.group, finding.element)
        if profile == EXACT and place not in base and (finding.group, None) not in base \
                and (finding.group is not None or (None, None) not in base):
            out.append((THE_FAITHFUL_PROFILE,))
            continue
        names = excused.get(place) or (excused.get((finding.group, None))
                                       if finding.group is not None else None)
        out.append(tuple(names or ()))
    return out


def name_excusing_allowances(case: Case, observed: QuantizedWeight, findings: list[Finding],
                             profile: str, allowances, excusers=None) -> list[Finding]:
    """The findings, each one that a single further allowance would excuse saying so
    (``excusing_allowances``, unless given)."""
    if excusers is None:
        excusers = excusing_allowances(case, observed, findings, profile, allowances)
    if excusers is None:
        return findings
    hint = " (--profile faithful --allow {})" if profile == EXACT else " (--allow {})"
    named = []
    for finding, names in zip(findings, excusers):
        if names and names != (THE_FAITHFUL_PROFILE,):
            finding = replace(finding, text=finding.text + f"; the allowance {' or '.join(names)} "
                              "would excuse this" + hint.format(names[0]))
        named.append(finding)
    return named


def stored_as_reciprocal(observed: QuantizedWeight) -> bool:
    """Whether the result stored its global scale as the reciprocal (``observe`` keeps it)."""
    return observed.stored_global_scale is not None


def expected_for(case: Case, observed: QuantizedWeight):
    """The spec's outputs for ``case`` as the observed result's storage makes them: an
    implementation that stores the reciprocal of its own s_g quantizes with what the stored r
    reads back as (the writer's chain of NVFP4-GS-4)."""
    expected = case.expected_outputs()
    if (isinstance(expected, Rejection) or case.global_scale is not None
            or not stored_as_reciprocal(observed)):
        return expected
    read_back = independent.nearest_reciprocal_read_back(float(expected.global_scale))
    if read_back == float(expected.global_scale):
        return expected
    return case.with_(global_scale=np.float32(read_back)).expected_outputs()


def certify(case: Case, observed: QuantizedWeight, strict: bool, allowances=frozenset(),
            judge_choice: bool = True, limit: int = 20) -> independent.Certificate:
    """The independent certificate of ``observed`` (``independent.certify``), at most
    ``limit`` findings of each clause listed."""
    return independent.certify(
        case.exact_weight(), case.hessian_diag if case.method == "hscale" else None,
        method=case.method, init=case.init, K=case.K, U=case.U,
        scale_ceiling=case.scale_ceiling, global_scale=case.global_scale,
        codes=observed.codes, scale_bytes=observed.scale_bytes, delta=observed.delta,
        observed_global_scale=float(observed.global_scale), packed=observed.packed,
        allowances=allowances, strict=strict, limit=limit,
        # HSCALE-BLOCK-1 is not restated by the independent certificate: an hscale-block
        # choice is judged against the reference (exact profile) and, in the suite, against an
        # exact brute force (conformance/test_block_hessian.py)
        judge_choice=judge_choice and case.method != "hscale-block",
        stored_as_reciprocal=stored_as_reciprocal(observed))


def compare_exact(case: Case, observed: QuantizedWeight, expected: QuantizedWeight):
    """``(findings, unlisted)``: every difference of ``observed`` from ``expected``, explained."""
    findings: list[Finding] = []
    unlisted: Counter = Counter()
    sg, want_sg = float(observed.global_scale), float(expected.global_scale)
    if fp32_hex(sg) != fp32_hex(want_sg) or math.isnan(sg):
        findings.append(_global_scale_finding(case, sg, want_sg, observed.stored_global_scale))
        return findings, unlisted  # every byte and code below would follow from it

    w = case.exact_weight()
    m, n = w.shape
    amax_g = np.abs(w.reshape(m, n // GROUP, GROUP)).max(axis=2)
    want_init = expected.initial_bytes.astype(np.int64)
    got_init = (want_init if observed.initial_bytes is None
                else observed.initial_bytes.astype(np.int64))
    got_bytes = observed.scale_bytes.astype(np.int64)

    def listed(mask, clause):
        hits = np.argwhere(mask)
        if len(hits) > LISTED:
            unlisted[clause] += len(hits) - LISTED
        return [tuple(int(v) for v in hit) for hit in hits[:LISTED]]

    byte_differs = got_bytes != expected.scale_bytes
    for r, i in listed(byte_differs, "scale bytes"):
        finding = _byte_finding(case, w, amax_g, sg, r, i, int(expected.scale_bytes[r, i]),
                                int(got_bytes[r, i]), int(want_init[r, i]), int(got_init[r, i]))
        findings.append(_with_code_evidence(finding, w, observed, sg, r, i))

    if observed.delta is not None:
        same_byte = ~byte_differs
        for r, i in listed(same_byte & (observed.delta != expected.delta), "HSCALE-ARGMIN-1"):
            if amax_g[r, i] and got_init[r, i] != want_init[r, i]:
                findings.append(_initial_byte_finding(
                    case, amax_g[r, i], sg, (r, i), int(want_init[r, i]), int(got_init[r, i]),
                    f"reported delta expected {int(expected.delta[r, i]):+d} observed "
                    f"{int(observed.delta[r, i]):+d} though the scale byte "
                    f"0x{int(expected.scale_bytes[r, i]):02X} agrees"))
                continue
            clause = "HSCALE-ARGMIN-1" if amax_g[r, i] else "NVFP4-ZERO-1"
            findings.append(Finding(
                clause, f"reported delta expected {int(expected.delta[r, i]):+d} observed "
                f"{int(observed.delta[r, i]):+d}, though the scale byte "
                f"0x{int(expected.scale_bytes[r, i]):02X} agrees: delta = chosen byte - "
                "initial byte", (r, i), kind="delta", expected=f"{int(expected.delta[r, i]):+d}",
                observed=f"{int(observed.delta[r, i]):+d}"))

    # A code under another scale byte follows from that byte: only same-byte groups count.
    code_differs = (observed.codes != expected.codes) & np.repeat(~byte_differs, GROUP, axis=1)
    swapped = _swapped_groups(observed.codes, expected.codes) & ~byte_differs
    for r, i in listed(swapped, "NVFP4-PACK-1"):
        findings.append(Finding(
            "NVFP4-PACK-1", "the two codes of every byte are swapped: element 2k belongs in the "
            "low nibble of byte k and element 2k+1 in the high nibble", (r, i), kind="pack"))
    code_differs &= ~np.repeat(swapped, GROUP, axis=1)
    for r, col in listed(code_differs, "codes"):
        i, j = divmod(col, GROUP)
        findings.append(_code_finding(case, w, amax_g, sg, r, i, j,
                                      int(expected.scale_bytes[r, i]),
                                      int(expected.codes[r, col]), int(observed.codes[r, col])))

    want_packed = pack_codes(observed.codes)
    for r, b in listed(observed.packed != want_packed, "NVFP4-PACK-1"):
        findings.append(Finding(
            "NVFP4-PACK-1", f"packed byte {b} of row {r} expected 0x{int(want_packed[r, b]):02X} "
            f"(code[{2 * b}] | code[{2 * b + 1}] << 4) observed 0x{int(observed.packed[r, b]):02X}",
            (r, b // 8), kind="pack", expected=f"0x{int(want_packed[r, b]):02X}",
            observed=f"0x{int(observed.packed[r, b]):02X}"))
    return findings, unlisted


def _swapped_groups(codes: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Groups (m, n/16) whose codes differ from the expected ones only by the order of the two
    nibbles of each packed byte (NVFP4-PACK-1)."""
    swapped = np.empty_like(codes)
    swapped[:, 0::2], swapped[:, 1::2] = codes[:, 1::2], codes[:, 0::2]
    m, n = codes.shape
    as_groups = (lambda a: a.reshape(m, n // GROUP, GROUP))  # noqa: E731
    differ = (as_groups(codes) != as_groups(expected)).any(axis=2)
    return differ & (as_groups(swapped) == as_groups(expected)).all(axis=2)


def _global_scale_finding(case: Case, sg: float, want_sg: float, stored=None) -> Finding:
    amax = float(np.max(np.abs(case.exact_weight())))
    if case.global_scale is not None:
        clause, why = "NVFP4-GS-3", "the caller's s_g is used unchanged"
    elif amax == 0 or Fraction(amax) / (6 * Fraction(float(case.scale_ceiling))) < FP32_SMALLEST_NORMAL:
        clause, why = "NVFP4-GS-2", f"amax = {amax!r}"
    else:
        clause, why = "NVFP4-GS-1", (f"s_g = fp32(amax / (6 C)) with amax = {amax!r}, "
                                     f"C = {float(case.scale_ceiling)!r}")
    if stored is not None:  # the reciprocal convention: what was stored, and what it means
        if case.global_scale is None and clause == "NVFP4-GS-1":
            spec_sg = float(case.expected_outputs().global_scale)
            if spec_sg != want_sg:  # the writer's chain moved it
                clause = "NVFP4-GS-4"
                why += (f"; s_g = {spec_sg!r} ({fp32_hex(spec_sg)}) has no fp32 reciprocal that "
                        "reads back as itself, so a writer stores r = fp32(1/s_g) and quantizes "
                        "with fp32(1/r)")
        why += (f"; stored as the reciprocal r = {float(stored)!r} ({fp32_hex(stored)}), which "
                f"reads back as fp32(1/r) = {sg!r}")
        if case.global_scale is not None and not _reads_back(case.global_scale):
            why += ("; no fp32 reciprocal reads back as the caller's s_g (about 17% of fp32 "
                    "values have none): the allowance supplied-reciprocal names this")
    return Finding(clause, f"global scale s_g expected {want_sg!r} ({fp32_hex(want_sg)}) observed "
                   f"{sg!r} ({fp32_hex(sg) if np.isfinite(sg) else 'not finite'}); {why}",
                   kind="sg", expected=fp32_hex(want_sg),
                   observed=fp32_hex(sg) if np.isfinite(sg) else repr(sg))


def _reads_back(global_scale) -> bool:
    """Whether some fp32 r gives fp32(1/r) == s_g (NVFP4-GS-4): the nearest reciprocal, or one
    of its two neighbours, does if any does."""
    s = np.float32(global_scale)
    with np.errstate(all="ignore"):
        nearest = np.float32(1) / s
        candidates = [nearest]
        for direction in (np.float32(0), np.float32(np.inf)):
            neighbour = nearest
            for _ in range(2):  # readable reciprocals lie within two ulps of the nearest
                neighbour = np.nextafter(neighbour, direction)
                candidates.append(neighbour)
        return any(np.isfinite(c) and c > 0 and np.float32(1) / c == s for c in candidates)


def _byte_finding(case, w, amax_g, sg, r, i, want, got, want_init, got_init) -> Finding:
    where = (r, i)
    pair = dict(expected=f"0x{want:02X}", observed=f"0x{got:02X}")
    if amax_g[r, i] == 0:
        return Finding("NVFP4-ZERO-1", f"zero group: scale byte expected 0x{want:02X} observed "
                       f"0x{got:02X}", where, kind="byte", **pair)
    lo, hi = -(case.K - 1 - case.U), case.U
    if not 1 <= got <= 0x7E:
        walk = (got - want_init + 128) % 256 - 128  # the shift, read as a signed byte
        if case.method != "rtn" and lo <= walk <= hi:
            return Finding("HSCALE-WIN-1", f"scale byte expected 0x{want:02X} observed "
                           f"0x{got:02X}, which is not on the ladder: it is initial byte "
                           f"0x{want_init:02X} {walk:+d} unclipped, and the window is clipped to "
                           "the ladder, clip(c0 + delta, 0x01, 0x7E)", where, kind="window",
                           **pair)
        return Finding("NVFP4-E4M3-3", f"scale byte expected 0x{want:02X} observed 0x{got:02X}, "
                       "which is not on the ladder 0x01..0x7E", where, kind="ladder", **pair)
    if case.method == "rtn" or got_init != want_init:
        # rtn's scale byte is its initial byte (HSCALE-METHOD-1)
        if case.method == "rtn":
            return _initial_byte_finding(case, amax_g[r, i], sg, where, want_init, got,
                                         "rtn's scale byte", **pair)
        return _initial_byte_finding(case, amax_g[r, i], sg, where, want_init, got_init,
                                     f"scale byte expected 0x{want:02X} observed 0x{got:02X}",
                                     **pair)
    c0 = want_init
    in_window = lo <= got - c0 <= hi or (got == 1 and c0 + lo <= 1) or (got == 0x7E and c0 + hi >= 0x7E)
    if not in_window:
        return Finding("HSCALE-WIN-1", f"scale byte expected 0x{want:02X} observed 0x{got:02X}: "
                       f"outside the window of initial byte 0x{c0:02X}, clip(c0 + [{lo}, +{hi}], "
                       f"0x01, 0x7E) = 0x{max(1, c0 + lo):02X}..0x{min(0x7E, c0 + hi):02X}"
                       f"{_tie_note(case, amax_g[r, i], sg)}", where, kind="window", **pair)
    group = w[r, GROUP * i:GROUP * (i + 1)]
    rows = candidate_errors(group, case.group_h(i), c0, sg, case.K, case.U)
    error = {byte: E for _, byte, E in reversed(rows)}  # a clipped duplicate: its first shift
    e_want, e_got = error[want], error.get(got, math.nan)
    both = (f"scale byte expected 0x{want:02X} (delta {want - c0:+d}, E = {e_want!r} = "
            f"{e_want.hex()}) observed 0x{got:02X} (delta {got - c0:+d}, E = {e_got!r} = "
            f"{float(e_got).hex()})")
    table = ", ".join(f"{d:+d}:0x{b:02X}:{E!r}" for d, b, E in rows)
    if e_got == e_want:
        clause, why = "HSCALE-ARGMIN-1", ("an exact tie of the objectives: the earlier candidate "
                                          "in the priority order 0, +1, -1, +2, -2, ... wins")
    elif e_got > e_want:
        clause, why = "HSCALE-OBJ-1", ("the observed byte has the larger fp64 objective "
                                       "(evaluated exactly as written, pairwise, no FMA)"
                                       f"{_tie_note(case, amax_g[r, i], sg)}")
    else:
        clause, why = "HSCALE-ARGMIN-1", ("the observed byte has the SMALLER objective: the "
                                          "reference may be wrong, please report")
    return Finding(clause, f"{both}; {why}\n      candidates (delta:byte:E) {table}", where,
                   kind="choice", **pair)


def _with_code_evidence(finding: Finding, w, observed, sg, r, i) -> Finding:
    """A wrong scale byte of a non-zero group: say whether the codes are at least the correct
    rounding for the byte that was chosen (then only the choice of byte differs)."""
    byte = int(observed.scale_bytes[r, i])
    if finding.kind in ("byte", "ladder") or not 1 <= byte <= 0x7E:
        return finding
    group = w[r, GROUP * i:GROUP * (i + 1)]
    own = encode_e2m1(group, sg * float(SCALE_BYTE_VALUES[byte]))
    if np.array_equal(own, observed.codes[r, GROUP * i:GROUP * (i + 1)]):
        note = ("the observed codes are the correct rounding for the observed byte: only the "
                "choice of byte differs")
    else:
        note = "the observed codes are not the rounding for the observed byte either"
    text, sep, table = finding.text.partition("\n")
    return replace(finding, text=f"{text}; {note}{sep}{table}")


def _initial_byte_finding(case, amax, sg, where, want_init, got_init, what, **pair) -> Finding:
    """A wrong initial byte (NVFP4-INIT-1 / INIT-2), with the exact quotient of each top the
    init tries and whether it is an E4M3 rounding tie."""
    clause = "NVFP4-INIT-1" if case.init == "maxabs" else "NVFP4-INIT-2"
    pair = pair or dict(expected=f"0x{want_init:02X}", observed=f"0x{got_init & 0xFF:02X}")
    return Finding(clause, f"{what}: initial byte expected 0x{want_init:02X} observed "
                   f"0x{got_init & 0xFF:02X}; "
                   f"{quotient_evidence(amax, sg, INIT_TOPS[case.init])}", where, kind="init",
                   **pair)


def _quotient(amax, sg, top) -> Fraction:
    """amax_g / (top s_g), exactly."""
    return Fraction(float(amax)) / (Fraction(float(top)) * Fraction(float(sg)))


def _e4m3_tie(quotient: Fraction) -> int | None:
    """The byte above ``quotient`` when it is exactly the midpoint of two neighbouring scale
    bytes (a rounding tie of NVFP4-E4M3-2), else None."""
    upper = int(np.searchsorted(SCALE_BYTE_VALUES, float(quotient)))
    if 0 < upper < len(SCALE_BYTE_VALUES):
        below, above = (Fraction(float(SCALE_BYTE_VALUES[b])) for b in (upper - 1, upper))
        if quotient == (below + above) / 2:
            return upper
    return None


def quotient_evidence(amax: float, sg: float, tops=(TOP_MAGNITUDE,)) -> str:
    """``amax_g / (top s_g) = q`` for each top magnitude, and whether q is exactly an E4M3
    rounding midpoint (an exact tie)."""
    parts = []
    for top in tops:
        exact = _quotient(amax, sg, top)
        text = f"amax_g / ({float(top):g} s_g) = {float(exact)!r}"
        upper = _e4m3_tie(exact)
        if upper is not None:
            text += (f" exactly, the E4M3 midpoint between 0x{upper - 1:02X} and "
                     f"0x{upper:02X}: an exact tie, which goes to the even mantissa "
                     "(NVFP4-E4M3-2)")
        parts.append(text)
    return "; ".join(parts)


def _tie_note(case, amax, sg) -> str:
    """For a wrong byte in a searched group whose initial byte comes from an exact E4M3 tie
    (a window walked from the other neighbour is a likely cause): the tie. Else ''."""
    tops = INIT_TOPS[case.init]
    if all(_e4m3_tie(_quotient(amax, sg, top)) is None for top in tops):
        return ""
    return f"; the initial byte comes from a tie: {quotient_evidence(amax, sg, tops)}"


def _code_finding(case, w, amax_g, sg, r, i, j, byte, want, got) -> Finding:
    col = GROUP * i + j
    value = float(w[r, col])
    bits = value_hex(np.asarray(case.weight)[r, col], np.asarray(case.weight).dtype)
    pair = dict(expected=f"0x{want:X}", observed=f"0x{got:X}")
    if amax_g[r, i] == 0:
        clause = "NVFP4-E2M1-3" if want ^ got == 0x8 else "NVFP4-ZERO-1"
        return Finding(clause, f"zero group: w = {value!r} ({bits}), code expected 0x{want:X} "
                       f"observed 0x{got:X}", (r, i), j, kind="zero-code", **pair)
    if want ^ got == 0x8:
        return Finding("NVFP4-E2M1-3", f"w = {value!r} ({bits}): the sign bit of the code is the "
                       f"sign bit of w: code expected 0x{want:X} observed 0x{got:X}", (r, i), j,
                       kind="sign", **pair)
    s = sg * float(SCALE_BYTE_VALUES[byte])
    quotient = Fraction(abs(value)) / Fraction(s)
    ties = [mid for mid in E2M1_MIDPOINTS if quotient == Fraction(mid)]
    why = (f"|w|/s = {ties[0]!r} exactly, an E2M1 midpoint: an exact tie, which goes to the "
           "even code" if ties else f"|w|/s = {float(quotient)!r}")
    return Finding("NVFP4-E2M1-2", f"w = {value!r} ({bits}), s = {s!r}, {why}: code expected "
                   f"0x{want:X} observed 0x{got:X}", (r, i), j, kind="magnitude", **pair)


# ------------------------------------------------------------------------------------------
# Context lines
# ------------------------------------------------------------------------------------------

def value_hex(value, dtype) -> str:
    """Bits of ``value`` in the input dtype (fp32 / fp16 / bf16)."""
    dtype = np.dtype(dtype)
    uint = {4: np.uint32, 2: np.uint16, 8: np.uint64}[dtype.itemsize]
    return f"0x{int(np.array(value, dtype=dtype).view(uint)):0{dtype.itemsize * 2}X}"


def group_context(case: Case, r: int, i: int) -> str:
    """The inputs of group (r, i), for a reader to reproduce the finding."""
    weight = np.asarray(case.weight)
    w = weight[r, GROUP * i: GROUP * (i + 1)]
    lines = ["w = [" + ", ".join(value_hex(v, w.dtype) for v in w) + f"] ({w.dtype.name} bits)",
             "  = [" + ", ".join(repr(float(v)) for v in w) + "]"]
    if case.method == "hscale" and case.hessian_diag is not None:
        lines.append("h = [" + ", ".join(repr(float(v)) for v in case.group_h(i)) + "]")
    return "\n".join("      " + line for line in lines)
