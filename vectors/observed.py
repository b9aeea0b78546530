"""Reading an observed-result file (docs/vectors.md, "Observed-result format").

One line per group, and optionally one per case for the global scale::

    <key> <row> <group> <scale_byte: 2 hex> <packed: 16 hex, byte 0 first> [<swizzled offset: 8 hex>]
    <key> gs  <s_g: 8 hex>          the multiplier s_g (fp32 bits)
    <key> gsr <r: 8 hex>            the global scale stored as its reciprocal r (NVFP4-GS-4)

``key`` is a case id, or ``<set>:<case_index>`` (the set's file stem and the case's index in
it, decimal, as the case table of the set's .hex file lists it): what a bench that only knows
line numbers writes. Blank lines and text after ``#`` are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hscale.judge.cases import Case, Rejection

from .explain import missing_group

_HEX2 = re.compile(r"^[0-9a-fA-F]{2}$")
_HEX8 = re.compile(r"^[0-9a-fA-F]{8}$")
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")
#: The global-scale keywords and the convention each names (hscale.judge.diagnose.observe).
GS_KEYWORDS = {"gs": "multiplier", "gsr": "reciprocal"}
LINE_FORMS = ("'key row group scale_byte(2 hex) packed(16 hex) [swizzled_offset(8 hex)]', "
              "'key gs s_g(8 hex)' or 'key gsr reciprocal(8 hex)'")


class UnreadableObserved(ValueError):
    """An observed-result file that holds no result to judge (names the file)."""


@dataclass
class GroupLine:
    where: str
    byte: int
    packed: bytes
    swizzled: int | None = None


@dataclass
class ScaleLine:
    where: str
    text: str          # 8 hex digits as written
    convention: str    # multiplier or reciprocal
    keyword: str


@dataclass
class CaseObservations:
    scale: ScaleLine | None = None
    groups: dict[tuple[int, int], GroupLine] = field(default_factory=dict)


class ObservedLines(list):
    """The lines of an observed-result file, with the name a report gives it (``path``)."""

    def __init__(self, lines, path):
        super().__init__(lines)
        self.path = str(path)


def read_observed(observed_path) -> ObservedLines:
    """The lines of an observed-result file; ``UnreadableObserved`` when it is not text or
    holds no result line (empty, or only blank lines and comments); ``OSError`` when it cannot
    be read."""
    try:
        lines = Path(observed_path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UnreadableObserved(f"{observed_path}: not a text file ({error.reason} at byte "
                                 f"{error.start})") from None
    if not any(line.split("#", 1)[0].strip() for line in lines):
        what = "only comments and blank lines" if lines else "the file is empty"
        raise UnreadableObserved(f"{observed_path}: no observed results ({what}); expected "
                                 "lines 'case_id row group scale_byte packed' or 'case_id gs "
                                 "s_g' (docs/vectors.md)")
    return ObservedLines(lines, observed_path)


def resolve_key(key: str, vectors: dict, keys: dict) -> tuple[str | None, str]:
    """``(case id, '')`` for a case id or an index key, else ``(None, what is wrong)``."""
    if key in vectors:
        return key, ""
    if key in keys:
        return keys[key], ""
    set_name, colon, index = key.rpartition(":")
    if colon:
        counts = {}
        for known in keys:
            name, _, number = known.rpartition(":")
            counts[name] = max(counts.get(name, 0), int(number) + 1)
        if set_name not in counts:
            shown = ", ".join(sorted(counts)) or "none"
            return None, f"unknown set {set_name!r} in the index key {key!r} (sets: {shown})"
        return None, (f"no case {index!r} in set {set_name} (it has case indices 0.."
                      f"{counts[set_name] - 1}, decimal)")
    return None, f"unknown case id {key!r}"


def parse_line(line: str, raw: str, where: str, vectors: dict, keys: dict,
               observations: dict) -> str | None:
    """Record one observed line in ``observations`` (case id -> CaseObservations); a problem
    with the line itself is returned as text."""
    fields = line.split()
    case_id, problem = resolve_key(fields[0], vectors, keys)
    if case_id is None:
        return f"{where}: {problem}"
    case: Case = vectors[case_id][1]
    if isinstance(case.expected, Rejection):
        return (f"{where}: case {case_id} is an expected-error case ({case.expected.clause}); "
                "it has no outputs")
    obs = observations.setdefault(case_id, CaseObservations())
    if len(fields) == 3 and fields[1] in GS_KEYWORDS:
        if not _HEX8.match(fields[2]):
            return (f"{where}: malformed global scale {fields[2]!r} (8 hex digits of fp32 bits "
                    f"after '{fields[1]}')")
        obs.scale = ScaleLine(where, fields[2], GS_KEYWORDS[fields[1]], fields[1])
        return None
    if len(fields) not in (5, 6) or not _HEX2.match(fields[3]) or not _HEX16.match(fields[4]) \
            or not fields[1].isdigit() or not fields[2].isdigit() \
            or (len(fields) == 6 and not _HEX8.match(fields[5])):
        return f"{where}: malformed line {raw.strip()!r}; expected {LINE_FORMS}"
    row, group = int(fields[1]), int(fields[2])
    missing = missing_group(case, row, group)
    if missing:
        return f"{where}: {missing}"
    obs.groups[(row, group)] = GroupLine(where, int(fields[3], 16), bytes.fromhex(fields[4]),
                                         int(fields[5], 16) if len(fields) == 6 else None)
    return None
