"""``hscale vectors check VECTORS --observed FILE``: compare a third party's results with the
vectors, TestFloat style.

The observed file (docs/vectors.md, "Observed-result format"; read by ``observed.py``) has one
line per group, keyed by case id or by ``<set>:<case_index>``, and optionally one line per case
for the global scale, as the multiplier (``gs``) or as the stored reciprocal (``gsr``,
NVFP4-GS-4). Each mismatch is printed as::

    <case> r<row> g<group>  s_g=<hex> w=<16 words> [h=<16 words>] => <observed>  expected: <expected>
      [<clause>] <place>: <what is wrong, in spec terms>

The lines under it are the findings of the project's one diagnoser
(``hscale.judge.diagnose``) under the chosen profile and allowances, word for word what the
conformance suite prints for the same defect. Before the diagnoser sees the packed words, a
byte-order or nibble-order slip (``slips.py``) is named and undone: said once for the file when
the writer made it on every word, else at the group.

VECTORS is a vector directory (its manifest's checksums are verified first), a directory of
set files without a manifest, or one set's file (``<set>.json``, or its ``.hex``, ``.gs.hex``,
``.swz.hex`` or ``.npz`` beside the ``.json``).
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from hscale.judge.cases import Case, Rejection
from hscale.judge.diagnose import diagnose, observe
from hscale.judge.findings import Finding, fp32_hex, plural
from hscale.judge.profiles import EXACT, check_profile
from hscale.reference import SCALE_BYTE_VALUES, QuantizedWeight, encode_e2m1, pack_codes
from hscale.reference.constants import GROUP_SIZE as GROUP
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier
from hscale.reference.packing import swizzle_offset

from . import hexio
from .observed import CaseObservations, UnreadableObserved, parse_line, read_observed
from .serialize import set_name
from .slips import GroupWord, file_slip, group_slip
from .stored import load_vectors, open_vectors  # noqa: F401 (load_vectors re-exported)

__all__ = ["UnreadableObserved", "check", "check_lines", "expect_lines", "load_vectors",
           "observed_lines", "open_vectors"]

def _inputs_text(case: Case, expected: QuantizedWeight, row: int, group: int) -> str:
    words = hexio.to_words(np.asarray(case.weight)[row, group * GROUP:(group + 1) * GROUP])
    text = f"s_g={fp32_hex(expected.global_scale, prefix='')} w={' '.join(words).upper()}"
    if case.method == "hscale":
        h = hexio.to_words(case.group_h(group))
        text += f" h={' '.join(h).upper()}"
    return text


class _Report:
    """Collects the report's lines, its errors stopping after ``max_errors``; counts the observed
    lines that are wrong."""

    def __init__(self, max_errors):
        self.max_errors = max_errors
        self.lines: list[str] = []
        self.errors = 0       # entries printed
        self.wrong = 0        # observed lines that are wrong (each entry's, and the slipped)
        self.slipped = 0      # wrong only by the file's byte order, said once
        self.allowance_uses: Counter = Counter()

    @property
    def stopped(self) -> bool:
        return self.errors >= self.max_errors

    def error(self, text: str, lines: int = 1) -> bool:
        """Print one error entry standing for ``lines`` wrong lines; True when the report
        must stop."""
        self.errors += 1
        self.wrong += lines
        self.lines.append(text)
        return self.stopped

    def say(self, text: str) -> None:
        self.lines.append(text)


@dataclass
class _Judging:
    profile: str
    allowances: frozenset
    observed_path: str


def check(vectors_path, observed_path, max_errors: int = 20, out=None,
          require_all: bool = False, profile: str = EXACT, allowances=()) -> int:
    """Print mismatches under ``profile`` (exact, faithful, format) and ``allowances``; return
    0 when every observed line conforms, 1 otherwise. Before anything is judged: a bad profile
    or allowance raises ``ValueError``, unreadable or damaged vectors ``MalformedVectors``, an
    observed file that holds no result ``UnreadableObserved``, one that cannot be read
    ``OSError``."""
    profile, allowances = check_profile(profile, tuple(allowances))
    out = out or sys.stdout
    source = open_vectors(vectors_path)
    lines = read_observed(observed_path)
    if source.note:
        print(source.note, file=out)
    report, errors = check_lines([case for _, case in source.cases.values()], lines, profile,
                                 max_errors, require_all, allowances)
    for line in report:
        print(line, file=out)
    return 1 if errors else 0


def _stored(cases) -> tuple[dict, dict]:
    """(case id -> (set file name, case), index key ``<set>:<case_index>`` -> case id) of the
    weight cases, each in its parameter set's file (``serialize.set_name``), in order."""
    stored, keys, counts = {}, {}, Counter()
    for case in cases:
        name = set_name(case)
        stored[case.id] = (f"{name}.json", case)
        keys[f"{name}:{counts[name]}"] = case.id
        counts[name] += 1
    return stored, keys


def check_lines(cases, lines: list[str], choice: str = EXACT, max_errors: int = 20,
                require_all: bool = False, declared=None) -> tuple[list[str], int]:
    """``(report lines, errors)``: the observed ``lines`` (``read_observed``: they name their
    file) judged against the weight ``cases`` under the profile ``choice`` with the allowances
    ``declared`` (checked: ``check_profile``); the report ends with the verdict line. The errors
    are the wrong lines, the groups missing under ``require_all``, at least one when no line
    could be read as a result."""
    profile, allowances = check_profile(choice, tuple(declared or ()))
    observed_path = getattr(lines, "path", "observed")
    vectors, keys = _stored(cases)
    report = _Report(max_errors)
    observations: dict[str, CaseObservations] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        problem = parse_line(line, raw, f"{observed_path}:{number}", vectors, keys,
                             observations)
        if problem and report.error(problem):
            break

    judging = _Judging(profile, allowances, str(observed_path))
    checked = sum(len(o.groups) + (o.scale is not None) for o in observations.values())
    if not report.stopped:
        unslipped = _undo_file_slip(vectors, observations, judging, report)
        for case_id, obs in observations.items():
            if report.stopped or _judge_case(vectors[case_id], obs, unslipped, judging, report):
                break
    total = sum(int(np.prod(case.shape)) // GROUP for _, case in vectors.values()
                if not isinstance(case.expected, Rejection))
    seen = sum(len(o.groups) for o in observations.values())
    if report.stopped:
        report.say(f"stopped after {plural(report.errors, 'error')} (--errors {max_errors})")
    slipped = f" ({report.slipped} of them only the byte order above)" if report.slipped else ""
    report.say(f"{plural(checked, 'observed line')} checked, {plural(report.wrong, 'error')}"
               f"{slipped}; {seen} of {plural(total, 'group')} of the vectors observed")
    if checked == 0:  # every line was malformed: each is an error above
        report.say(f"{observed_path}: no line could be read as a result")
        return report.lines, max(report.wrong, 1)
    missing = total - seen if require_all and seen < total and not report.stopped else 0
    if missing:
        report.say(f"{plural(missing, 'group')} of the vectors are missing from the observed "
                   "file (--require-all)")
    report.say(_verdict(judging, report, bool(missing)))
    return report.lines, report.wrong + missing


def _verdict(judging: _Judging, report: _Report, missing: bool) -> str:
    allowed = ", ".join(sorted(judging.allowances)) or "none"
    head = (f"profile {judging.profile}" if judging.profile == EXACT else
            f"profile {judging.profile}, allowances: {allowed}")
    if report.stopped:
        return f"{head}: does not conform (checking stopped early)"
    verdict = "does not conform" if report.wrong or missing else "conforms"
    used = ", ".join(f"{name} {count}" for name, count in sorted(report.allowance_uses.items()))
    return f"{head}: {verdict}" + (f" (allowances used: {used})" if used else "")


# ------------------------------------------------------------------------------------------
# Byte order (slips.py)
# ------------------------------------------------------------------------------------------

def _words(case: Case, row: int, group: int, byte: int, packed: bytes) -> GroupWord:
    """The observed word and the words it may rightly be: the expected one, and where the byte
    differs, the exact rounding at the observed byte."""
    expected = case.expected
    rights = [expected.packed[row, group * 8:(group + 1) * 8].tobytes()]
    if byte != int(expected.scale_bytes[row, group]) and 1 <= byte <= 0x7E:
        w = case.exact_weight()[row, group * GROUP:(group + 1) * GROUP]
        scale = float(expected.global_scale) * float(SCALE_BYTE_VALUES[byte])
        rights.append(pack_codes(encode_e2m1(w[None, :], np.array([[scale]])))[0].tobytes())
    return GroupWord(packed, tuple(rights))


def _undo_file_slip(cases, observations, judging: _Judging, report: _Report) -> dict:
    """(case id, row, group) -> the packed word put back in order, when the file's writer
    rearranged every word (said in one line); else {}."""
    words = {(case_id, r, i): _words(cases[case_id][1], r, i, line.byte, line.packed)
             for case_id, obs in observations.items() for (r, i), line in obs.groups.items()}
    found = file_slip(list(words.values()))
    if found is None:
        return {}
    slip, explained = found
    report.error(f"[NVFP4-PACK-1] {judging.observed_path}: {slip.words} ({explained} "
                 f"{'group reads right once its bytes are' if explained == 1 else 'groups read right once their bytes are'} "
                 "put back in order; every group is judged so below)", lines=0)
    return {key: slip(word.observed) for key, word in words.items()}


# ------------------------------------------------------------------------------------------
# Judging one case
# ------------------------------------------------------------------------------------------

def _observed_scale(case: Case, obs: CaseObservations):
    """(the value as written, its convention) of the case's global-scale line, else the
    expected multiplier."""
    if obs.scale is None:
        return np.float32(case.expected.global_scale), "multiplier"
    return np.array(int(obs.scale.text, 16), dtype=np.uint32).view(np.float32)[()], \
        obs.scale.convention


def _result(case: Case, groups: dict, scale, convention: str):
    """The one result record (``diagnose.observe``) of the expected outputs with the observed
    groups (byte, packed word) put in, and the global scale as observed: what the
    implementation reported, the groups it did not report taken as expected."""
    expected = case.expected
    scale_bytes, packed = expected.scale_bytes.copy(), expected.packed.copy()
    for (row, group), (byte, word) in groups.items():
        scale_bytes[row, group] = byte
        packed[row, group * 8:(group + 1) * 8] = np.frombuffer(word, dtype=np.uint8)
    return observe(SimpleNamespace(scale_bytes=scale_bytes, packed=packed, global_scale=scale),
                   case, convention)


def _judge_case(entry, obs: CaseObservations, unslipped: dict, judging: _Judging,
                report: _Report) -> bool:
    """Diagnose one case's observations; print each wrong line with its findings. True when
    the report must stop."""
    file_name, case = entry
    expected: QuantizedWeight = case.expected
    scale, convention = _observed_scale(case, obs)
    slip_findings: dict[tuple[int, int], list[Finding]] = {}
    groups = {}
    for (row, group), line in obs.groups.items():
        word = unslipped.get((case.id, row, group), line.packed)
        words = _words(case, row, group, line.byte, word)
        if words.wrong:
            found = group_slip(words)
            if found:
                slip_findings[(row, group)] = [Finding("NVFP4-PACK-1", found[0], (row, group),
                                                       kind="pack")]
                word = found[1]
        groups[(row, group)] = (line.byte, word)

    tensor_findings: list[Finding] = []
    by_group: dict[tuple[int, int], list[Finding]] = {}
    if judging.profile == EXACT:
        # The global scale with the expected groups, the groups with the expected global
        # scale: a wrong s_g is said once, not again by every byte that follows from it.
        if obs.scale is not None:
            tensor_findings = _diagnosis(case, {}, scale, convention, judging)[0]
        findings = _diagnosis(case, groups, np.float32(expected.global_scale), "multiplier",
                              judging)[0] if groups else []
    else:
        findings, uses = _diagnosis(case, groups, scale, convention, judging)
        report.allowance_uses.update(uses)
    for finding in findings:
        if finding.group is None:
            tensor_findings.append(finding)
        else:
            by_group.setdefault(finding.group, []).append(finding)

    if tensor_findings and report.error(_scale_text(case, obs, scale, tensor_findings)):
        return True
    for (row, group), line in obs.groups.items():
        listed = slip_findings.get((row, group), []) + by_group.get((row, group), []) \
            + _swizzle_findings(case, row, group, line)
        want_byte = int(expected.scale_bytes[row, group])
        want_packed = expected.packed[row, group * 8:(group + 1) * 8].tobytes()
        differs = line.byte != want_byte or line.packed != want_packed
        word = groups[(row, group)][1]
        if not listed and not (judging.profile == EXACT and differs and word == line.packed):
            if word != line.packed and differs and (row, group) not in slip_findings:
                report.wrong += 1  # wrong only by the file's byte order, said once above
                report.slipped += 1
            continue
        text = (f"{case.id} r{row} g{group}  {_inputs_text(case, expected, row, group)}"
                f" => {line.byte:02X} {line.packed.hex().upper()}{_offset(line.swizzled)}"
                f"  expected: {want_byte:02X} {want_packed.hex().upper()}"
                f"{_offset(None if line.swizzled is None else _want_offset(case, row, group))}")
        if word != line.packed and (row, group) not in slip_findings:
            text += f"\n  (the packed word read as {word.hex().upper()}: the byte order above)"
        text += "".join(f"\n  {f.render()}" for f in listed)
        text += f"\n    (case {case.id} in {file_name}: [{' '.join(case.clauses)}])"
        if report.error(text):
            return True
    return False


def _diagnosis(case, groups, scale, convention, judging: _Judging):
    """(findings, allowance uses) of the one diagnoser."""
    observed, structure = _result(case, groups, scale, convention)
    if structure:
        return structure, Counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an objective may overflow to +inf
        diagnosis = diagnose(case, observed, profile=judging.profile,
                             allowances=judging.allowances)
    return diagnosis.findings, diagnosis.allowance_uses


def _scale_text(case: Case, obs: CaseObservations, scale, findings) -> str:
    expected = case.expected
    want = np.float32(expected.global_scale)
    amax = np.max(np.abs(case.exact_weight()))
    head = f"{case.id} {obs.scale.keyword if obs.scale else 'gs'}"
    what = obs.scale.text.upper() if obs.scale else "(no gs line)"
    if obs.scale is not None and obs.scale.convention == "reciprocal":
        want_r = reciprocal_from_multiplier(want)
        back = multiplier_from_reciprocal(want_r)
        text = (f"{head}  amax={fp32_hex(np.float32(amax), prefix='')} "
                f"C={float(case.scale_ceiling):g} => {what}  expected: "
                f"{fp32_hex(want_r, prefix='')} (r = fp32(1/s_g), s_g = "
                f"{fp32_hex(want, prefix='')}"
                + (")" if float(back) == float(want) else
                   f", which no fp32 r reads back as: fp32(1/r) = {fp32_hex(back, prefix='')}"
                   "; NVFP4-GS-4, and the gs4-* cases)"))
    else:
        text = (f"{head}  amax={fp32_hex(np.float32(amax), prefix='')} "
                f"C={float(case.scale_ceiling):g} => {what}  expected: "
                f"{fp32_hex(want, prefix='')}")
    return "\n".join([text] + ["  " + f.render() for f in findings])


def _want_offset(case: Case, row: int, group: int) -> int:
    return int(swizzle_offset(np.array(row), np.array(group), case.shape[1] // GROUP))


def _offset(value) -> str:
    return "" if value is None else f" {value:08X}"


def _swizzle_findings(case: Case, row: int, group: int, line) -> list[Finding]:
    """NVFP4-PACK-3: the offset the implementation gave the group's scale byte in the 128x4
    layout, when it reported one."""
    if line.swizzled is None:
        return []
    want = _want_offset(case, row, group)
    if line.swizzled == want:
        return []
    n = case.shape[1]
    return [Finding(
        "NVFP4-PACK-3", f"swizzled offset of the scale byte expected 0x{want:08X} ({want}) "
        f"observed 0x{line.swizzled:08X} ({line.swizzled}): offset(r, k) = ((r // 128) * "
        f"ceil(n / 64) + k // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + k % 4 with "
        f"r = {row}, k = {group}, n = {n}", (row, group), kind="swizzle",
        expected=f"0x{want:08X}", observed=f"0x{line.swizzled:08X}")]


# ------------------------------------------------------------------------------------------
# What a conforming implementation writes
# ------------------------------------------------------------------------------------------

def observed_lines(vectors_path, with_global_scale: bool = True, index_keys: bool = False,
                   swizzled: bool = False, reciprocal: bool = False) -> list[str]:
    """The correct observed file for the weight sets of VECTORS (``expect_lines``)."""
    cases = [case for _, case in open_vectors(vectors_path).cases.values()]
    return expect_lines(cases, EXACT, with_global_scale, index_keys=index_keys,
                        swizzled=swizzled, reciprocal=reciprocal)


def expect_lines(cases, choice: str = EXACT, with_global_scale: bool = True,
                 index_keys: bool = False, swizzled: bool = False,
                 reciprocal: bool = False) -> list[str]:
    """The correct observed file for the weight ``cases`` (what a conforming implementation
    would write, under every profile ``choice``): keyed by case id or (``index_keys``) by
    ``<set>:<case_index>``, with the swizzled offset of each scale byte (``swizzled``), the
    global scale as ``gs`` or (``reciprocal``) as the stored reciprocal ``gsr``
    (NVFP4-GS-4)."""
    stored, keys = _stored(cases)
    key_of = {case_id: key for key, case_id in keys.items()} if index_keys else {}
    lines = []
    for case_id, (_, case) in stored.items():
        expected = case.expected
        if isinstance(expected, Rejection):
            continue
        key = key_of.get(case_id, case_id)
        if with_global_scale and reciprocal:
            lines.append(f"{key} gsr "
                         f"{hexio.scalar_word(reciprocal_from_multiplier(expected.global_scale))}")
        elif with_global_scale:
            lines.append(f"{key} gs {hexio.scalar_word(expected.global_scale)}")
        rows, cols = case.shape
        for r in range(rows):
            for i in range(cols // GROUP):
                line = (f"{key} {r} {i} {int(expected.scale_bytes[r, i]):02x} "
                        f"{expected.packed[r, i * 8:(i + 1) * 8].tobytes().hex()}")
                if swizzled:
                    line += f" {_want_offset(case, r, i):08x}"
                lines.append(line)
    return lines
