"""``hscale vectors check DIR --observed FILE``: compare a third party's results with the
vectors, TestFloat style.

The observed file (docs/vectors.md, "Observed-result format") has one line per group::

    <case_id> <row> <group> <scale_byte: 2 hex> <packed: 16 hex, byte 0 first>

and optionally one line per case for the global scale::

    <case_id> gs <s_g: 8 hex, fp32 bits>

Blank lines and text after ``#`` are ignored. Each mismatch is printed as::

    <case> r<row> g<group>  s_g=<hex> w=<16 words> [h=<16 words>] => <observed>  expected: <expected>
      [<clause>] <place>: <what is wrong, in spec terms>

The lines under it are the findings of the project's one diagnoser
(``hscale.judge.diagnose``), word for word what the conformance suite prints for the same
defect.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from hscale.judge.cases import Case, Rejection
from hscale.judge.diagnose import diagnose
from hscale.judge.findings import plural
from hscale.reference import QuantizedWeight, unpack_codes
from hscale.reference.constants import GROUP_SIZE as GROUP

from . import formats, hexio
from .explain import missing_group
from .serialize import MalformedVectors, read_case, read_vector_document

_HEX2 = re.compile(r"^[0-9a-fA-F]{2}$")
_HEX8 = re.compile(r"^[0-9a-fA-F]{8}$")
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")


def read_manifest(directory) -> dict:
    """The ``manifest.json`` of a vector directory, its ``files`` checked to map file names in
    the directory to entries with a ``sha256``; ``MalformedVectors`` naming the directory or the
    manifest when DIR is not a vector directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MalformedVectors(f"{directory}: " + ("not a directory" if directory.exists()
                                                    else "no such directory"))
    path = directory / formats.MANIFEST
    if not path.is_file():
        raise MalformedVectors(f"{directory}: no {formats.MANIFEST} (not a vector directory)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # not JSON, or not UTF-8
        raise MalformedVectors(f"{path}: not JSON ({error})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
            for entry in files.values()):
        raise MalformedVectors(f"{path}: not a vector manifest (a JSON object whose 'files' "
                               "maps each file name to its 'sha256' is expected)")
    outside = [name for name in files if "/" in name or "\\" in name or name in ("", ".", "..")]
    if outside:
        raise MalformedVectors(f"{path}: lists {outside[0]!r}, which is not a file name in the "
                               "directory")
    return manifest


def load_vectors(directory) -> dict[str, tuple[str, Case]]:
    """case id -> (file name, case with its stored expected outputs), from every JSON file of
    the manifest, after checking every listed file's SHA-256: vectors that were edited or
    damaged are refused (``MalformedVectors``, naming the file) before anything is judged."""
    directory = Path(directory)
    listed = read_manifest(directory)["files"]
    checksums = {name: entry["sha256"] for name, entry in listed.items()}
    for name, checksum in sorted(checksums.items()):
        path = directory / name
        if not path.is_file():
            raise MalformedVectors(f"{path}: listed in {formats.MANIFEST} but missing")
        if formats.sha256(path.read_bytes()) != checksum:
            raise MalformedVectors(f"{path}: its SHA-256 differs from {formats.MANIFEST}: the "
                                   "file was changed or damaged; regenerate or restore it")
    found: dict[str, tuple[str, Case]] = {}
    for name in sorted(n for n in checksums if n.endswith(".json")):
        path = directory / name
        _, entries = read_vector_document(path)
        for number, entry in enumerate(entries):
            case = read_case(path, number, entry)
            if case.id in found:
                raise MalformedVectors(f"{path}: case {case.id} is also in {found[case.id][0]}; "
                                       "case IDs are unique")
            found[case.id] = (name, case)
    return found


def _inputs_text(case: Case, expected: QuantizedWeight, row: int, group: int) -> str:
    words = hexio.to_words(np.asarray(case.weight)[row, group * GROUP:(group + 1) * GROUP])
    text = f"s_g={hexio.fp32_hex(expected.global_scale).upper()} w={' '.join(words).upper()}"
    if case.method == "hscale":
        h = hexio.to_words(case.group_h(group))
        text += f" h={' '.join(h).upper()}"
    return text


class _Report:
    """Counts and prints errors, stopping after ``max_errors``."""

    def __init__(self, out, max_errors):
        self.out, self.max_errors = out, max_errors
        self.errors = 0

    @property
    def stopped(self) -> bool:
        return self.errors >= self.max_errors

    def error(self, text: str) -> bool:
        """Print one error; True when the report must stop."""
        self.errors += 1
        print(text, file=self.out)
        return self.stopped


class UnreadableObserved(ValueError):
    """An observed-result file that holds no result to judge (names the file)."""


def read_observed(observed_path) -> list[str]:
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
    return lines


def check(directory, observed_path, max_errors: int = 20, out=None,
          require_all: bool = False) -> int:
    """Print mismatches; return 0 when everything observed matches, 1 otherwise. Before
    anything is judged: unreadable or damaged vectors raise ``MalformedVectors``, an observed
    file that holds no result ``UnreadableObserved``, one that cannot be read ``OSError``."""
    out = out or sys.stdout
    vectors = load_vectors(directory)
    lines = read_observed(observed_path)
    report = _Report(out, max_errors)
    observations: dict[str, dict] = {}  # case id -> {"gs": (line, hex), (r, i): (line, byte, packed)}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        problem = _parse_line(line, vectors, observations, f"{observed_path}:{number}", raw)
        if problem and report.error(problem):
            break

    checked = sum(len(obs) for obs in observations.values())
    if not report.stopped:
        for case_id, obs in observations.items():
            if _judge_case(vectors[case_id], obs, report):
                break
    total = sum(int(np.prod(case.shape)) // GROUP for _, case in vectors.values()
                if not isinstance(case.expected, Rejection))
    seen = sum(1 for obs in observations.values() for key in obs if key != "gs")
    if report.stopped:
        print(f"stopped after {plural(report.errors, 'error')} (--errors {max_errors})", file=out)
    print(f"{plural(checked, 'observed line')} checked, {plural(report.errors, 'error')}; "
          f"{seen} of {plural(total, 'group')} of the vectors observed", file=out)
    if checked == 0:  # every line was malformed: each is an error above
        print(f"{observed_path}: no line could be read as a result", file=out)
        return 1
    if require_all and seen < total and not report.stopped:
        print(f"{plural(total - seen, 'group')} of the vectors are missing from the observed "
              "file (--require-all)", file=out)
        return 1
    return 1 if report.errors else 0


def _parse_line(line, vectors, observations, where, raw) -> str | None:
    """Record one observed line; a problem with the line itself is returned as text."""
    fields = line.split()
    entry = vectors.get(fields[0])
    if entry is None:
        return f"{where}: unknown case id {fields[0]!r}"
    case = entry[1]
    if isinstance(case.expected, Rejection):
        return (f"{where}: case {fields[0]} is an expected-error case ({case.expected.clause}); "
                "it has no outputs")
    obs = observations.setdefault(fields[0], {})
    if len(fields) == 3 and fields[1] == "gs":
        if not _HEX8.match(fields[2]):
            return f"{where}: malformed global scale {fields[2]!r} (8 hex digits)"
        obs["gs"] = (where, fields[2])
        return None
    if len(fields) != 5 or not _HEX2.match(fields[3]) or not _HEX16.match(fields[4]) \
            or not fields[1].isdigit() or not fields[2].isdigit():
        return (f"{where}: malformed line {raw.strip()!r}; expected 'case_id row group "
                "scale_byte(2 hex) packed(16 hex)'")
    row, group = int(fields[1]), int(fields[2])
    missing = missing_group(case, row, group)
    if missing:
        return f"{where}: {missing}"
    obs[(row, group)] = (where, int(fields[3], 16), bytes.fromhex(fields[4]))
    return None


def _judge_case(entry: tuple[str, Case], obs: dict, report: _Report) -> bool:
    """Diagnose one case's observations; print each mismatching line with its findings.
    True when the report must stop."""
    file_name, case = entry
    expected: QuantizedWeight = case.expected
    if "gs" in obs:
        where, text = obs["gs"]
        observed_sg = np.array(int(text, 16), dtype=np.uint32).view(np.float32)[()]
        if text.lower() != hexio.fp32_hex(expected.global_scale):
            with_sg = _substitute(expected, {}, observed_sg)
            findings = diagnose(case, with_sg).findings
            amax = np.max(np.abs(case.exact_weight()))
            line = (f"{case.id} gs  amax={hexio.fp32_hex(np.float32(amax)).upper()} "
                    f"C={float(case.scale_ceiling):g} => {text.upper()}  expected: "
                    f"{hexio.fp32_hex(expected.global_scale).upper()}")
            if report.error("\n".join([line] + ["  " + f.render() for f in findings])):
                return True
    groups = {key: value for key, value in obs.items() if key != "gs"}
    if not groups:
        return False
    observed = _substitute(expected, groups, expected.global_scale)
    by_group: dict[tuple[int, int], list] = {}
    for finding in diagnose(case, observed).findings:
        by_group.setdefault(finding.group, []).append(finding)
    for (row, group), (where, byte, packed) in groups.items():
        want_byte = int(expected.scale_bytes[row, group])
        want_packed = expected.packed[row, group * 8:(group + 1) * 8].tobytes()
        if byte == want_byte and packed == want_packed:
            continue
        text = (f"{case.id} r{row} g{group}  {_inputs_text(case, expected, row, group)}"
                f" => {byte:02X} {packed.hex().upper()}"
                f"  expected: {want_byte:02X} {want_packed.hex().upper()}")
        text += "".join(f"\n  {f.render()}" for f in by_group.get((row, group), []))
        text += f"\n    (case {case.id} in {file_name}: [{' '.join(case.clauses)}])"
        if report.error(text):
            return True
    return False


def _substitute(expected: QuantizedWeight, groups: dict, global_scale) -> QuantizedWeight:
    """The expected result with the observed groups (byte, packed codes) put in: what an
    implementation reported, the groups it did not report taken as expected. It reports no
    initial bytes (the observed file has none)."""
    scale_bytes = expected.scale_bytes.copy()
    packed = expected.packed.copy()
    for (row, group), (_, byte, group_packed) in groups.items():
        scale_bytes[row, group] = byte
        packed[row, group * 8:(group + 1) * 8] = np.frombuffer(group_packed, dtype=np.uint8)
    observed = QuantizedWeight.from_bytes(unpack_codes(packed), scale_bytes, None, global_scale,
                                          method=expected.method, init=expected.init,
                                          K=expected.K, U=expected.U,
                                          scale_ceiling=expected.scale_ceiling)
    object.__setattr__(observed, "packed", packed)
    return observed


def observed_lines(directory, with_global_scale: bool = True) -> list[str]:
    """The correct observed file for DIR (what a conforming implementation would write)."""
    lines = []
    for case_id, (_, case) in load_vectors(directory).items():
        expected = case.expected
        if isinstance(expected, Rejection):
            continue
        if with_global_scale:
            lines.append(f"{case_id} gs {hexio.fp32_hex(expected.global_scale)}")
        rows, cols = case.shape
        for r in range(rows):
            for i in range(cols // GROUP):
                lines.append(f"{case_id} {r} {i} {int(expected.scale_bytes[r, i]):02x} "
                             f"{expected.packed[r, i * 8:(i + 1) * 8].tobytes().hex()}")
    return lines
