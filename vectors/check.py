"""``hscale vectors check DIR --observed FILE``: compare a third party's results with the
vectors, TestFloat style.

The observed file (docs/vectors.md, "Observed-result format") has one line per group::

    <case_id> <row> <group> <scale_byte: 2 hex> <packed: 16 hex, byte 0 first>

and optionally one line per case for the global scale::

    <case_id> gs <s_g: 8 hex, fp32 bits>

Blank lines and text after ``#`` are ignored. Each mismatch is printed as::

    <case> r<row> g<group>  s_g=<hex> w=<16 words> [h=<16 words>] => <observed>  expected: <expected>
        <clause>: <what is wrong, in spec terms>
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hscale.reference import candidate_errors, decode_e4m3, encode_e2m1, unpack_codes
from hscale.reference.window import window_deltas

from . import formats, hexio
from .model import Case, Outputs, case_from_json, expected_from_json

GROUP = 16
_HEX2 = re.compile(r"^[0-9a-fA-F]{2}$")
_HEX8 = re.compile(r"^[0-9a-fA-F]{8}$")
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")


@dataclass
class Stored:
    file: str
    case: Case
    expected: Outputs


def load_vectors(directory) -> dict[str, Stored]:
    """case id -> its inputs and stored expected outputs, from every JSON file in the manifest."""
    directory = Path(directory)
    manifest = json.loads((directory / formats.MANIFEST).read_text())
    found: dict[str, Stored] = {}
    for name in sorted(n for n in manifest["files"] if n.endswith(".json")):
        document = json.loads((directory / name).read_text())
        for entry in document["cases"]:
            found[entry["id"]] = Stored(name, case_from_json(entry), expected_from_json(entry))
    return found


def _group_inputs(stored: Stored, row: int, group: int) -> str:
    case = stored.case
    words = hexio.to_words(case.weight[row, group * GROUP:(group + 1) * GROUP])
    text = f"s_g={hexio.fp32_hex(stored.expected.global_scale)} w={' '.join(words)}"
    if case.method == "hscale":
        h = hexio.to_words(np.asarray(case.hessian_diag)[group * GROUP:(group + 1) * GROUP])
        text += f" h={' '.join(h)}"
    return text


def _group_h(case: Case, group: int) -> np.ndarray:
    if case.method == "hscale":
        return np.asarray(case.hessian_diag, dtype=np.float64)[group * GROUP:(group + 1) * GROUP]
    return np.ones(GROUP)


def diagnose(stored: Stored, row: int, group: int, observed_byte: int,
             observed_codes: np.ndarray) -> list[str]:
    """Explanations of a group mismatch, each starting with the clause ID it breaks."""
    case, expected = stored.case, stored.expected
    s_g = float(expected.global_scale)
    w = case.weight[row, group * GROUP:(group + 1) * GROUP].astype(np.float64)
    expected_byte = int(expected.scale_bytes[row, group])
    expected_codes = expected.codes[row, group * GROUP:(group + 1) * GROUP]
    c0 = int(expected.initial_bytes[row, group])
    notes = []
    if observed_byte != expected_byte:
        if expected_byte == 0:
            notes.append("NVFP4-ZERO-1: a zero group (every |w| = 0) has scale byte 0x00")
        elif observed_byte == 0 or observed_byte > 0x7E:
            notes.append(f"NVFP4-E4M3-3: byte 0x{observed_byte:02x} is not on the ladder "
                         "0x01..0x7e of a non-zero group")
        elif case.method == "rtn" or int(case.K) == 1:
            clause = "NVFP4-INIT-2" if case.init == "4over6" else "NVFP4-INIT-1"
            notes.append(f"{clause}: the {case.init} baseline byte of this group is "
                         f"0x{expected_byte:02x} (e4m3 {decode_e4m3(expected_byte):.9g})")
        else:
            rows = candidate_errors(w, _group_h(case, group), c0, s_g, int(case.K), int(case.U))
            by_byte = {}
            for delta, byte, error in rows:
                by_byte.setdefault(byte, (delta, error))
            if observed_byte not in by_byte:
                deltas = window_deltas(int(case.K), int(case.U))
                notes.append(f"HSCALE-WIN-1: byte 0x{observed_byte:02x} is outside the window "
                             f"c0 {deltas[0]:+d} .. c0 {deltas[-1]:+d} around c0 = 0x{c0:02x}")
            else:
                d_obs, e_obs = by_byte[observed_byte]
                d_exp, e_exp = by_byte[expected_byte]
                relation = ("equal objectives: the earlier shift in the priority order "
                            "0, +1, -1, +2, ... wins" if e_obs == e_exp else
                            "the expected byte's objective is strictly smaller")
                notes.append(f"HSCALE-ARGMIN-1: E(0x{observed_byte:02x}, shift {d_obs:+d}) = "
                             f"{e_obs.hex()} ({e_obs:.17g}), E(0x{expected_byte:02x}, shift "
                             f"{d_exp:+d}) = {e_exp.hex()} ({e_exp:.17g}); {relation}")
        if 1 <= observed_byte <= 0x7E and expected_byte != 0:
            own = encode_e2m1(w[None, :], np.array([[s_g * decode_e4m3(observed_byte)]]))[0]
            if np.array_equal(own, observed_codes):
                notes.append("(the observed codes are the correct rounding for the observed "
                             "byte: only the byte choice is wrong)")
        return notes
    if np.array_equal(observed_codes, expected_codes):
        return notes
    swapped = np.empty_like(observed_codes)
    swapped[0::2], swapped[1::2] = observed_codes[1::2], observed_codes[0::2]
    if np.array_equal(swapped, expected_codes):
        return ["NVFP4-PACK-1: nibbles swapped: element 2k belongs in the low nibble of byte k"]
    scale = s_g * decode_e4m3(max(expected_byte, 1))
    for j in np.nonzero(observed_codes != expected_codes)[0]:
        o, e = int(observed_codes[j]), int(expected_codes[j])
        if expected_byte == 0:
            clause = "NVFP4-ZERO-1"
            why = "a zero group's codes carry only the sign bit of w"
        elif (o ^ e) == 0x8:
            clause = "NVFP4-E2M1-3"
            why = f"the sign bit is the sign bit of w ({'-' if np.signbit(w[j]) else '+'})"
        else:
            clause = "NVFP4-E2M1-2"
            why = f"|w|/s = {abs(w[j]) / scale:.17g} rounds to nearest, ties to even, " \
                  "saturating at 6"
        notes.append(f"{clause}: element {group * GROUP + j} (w = {hexio.to_words(case.weight[row, group * GROUP + j:group * GROUP + j + 1])[0]}): "
                     f"observed code {o:x}, expected {e:x}; {why}")
    return notes


def check(directory, observed_path, max_errors: int = 20, out=None,
          require_all: bool = False) -> int:
    """Print mismatches; return 0 when everything observed matches, 1 otherwise."""
    out = out or sys.stdout
    vectors = load_vectors(directory)
    errors = 0
    checked = 0
    seen: set[tuple[str, int, int]] = set()
    stopped = False

    def report(text: str) -> bool:
        nonlocal errors, stopped
        errors += 1
        print(text, file=out)
        if errors >= max_errors:
            stopped = True
        return stopped

    lines = Path(observed_path).read_text().splitlines()
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{observed_path}:{number}"
        stored = vectors.get(fields[0])
        if stored is None:
            if report(f"{where}: unknown case id {fields[0]!r}"):
                break
            continue
        if stored.expected.error_clause is not None:
            if report(f"{where}: case {fields[0]} is an expected-error case "
                      f"({stored.expected.error_clause}); it has no outputs"):
                break
            continue
        if len(fields) == 3 and fields[1] == "gs":
            checked += 1
            if not _HEX8.match(fields[2]):
                if report(f"{where}: malformed global scale {fields[2]!r} (8 hex digits)"):
                    break
                continue
            expected = hexio.fp32_hex(stored.expected.global_scale)
            if fields[2].lower() != expected:
                clause = "NVFP4-GS-3" if stored.case.global_scale is not None else "NVFP4-GS-1"
                amax = np.max(np.abs(stored.case.weight.astype(np.float64)))
                if report(f"{fields[0]} gs  amax={hexio.fp32_hex(np.float32(amax))} "
                          f"C={stored.case.scale_ceiling:g} => {fields[2].lower()}  expected: "
                          f"{expected}\n    {clause}: s_g = fp32_rne(amax / (6 C)), a positive "
                          "normal fp32 (NVFP4-GS-2); a supplied s_g is used unchanged"):
                    break
            continue
        if len(fields) != 5 or not _HEX2.match(fields[3]) or not _HEX16.match(fields[4]) \
                or not fields[1].isdigit() or not fields[2].isdigit():
            if report(f"{where}: malformed line {raw.strip()!r}; expected "
                      "'case_id row group scale_byte(2 hex) packed(16 hex)'"):
                break
            continue
        row, group = int(fields[1]), int(fields[2])
        rows, cols = stored.case.weight.shape
        if row >= rows or group >= cols // GROUP:
            if report(f"{where}: case {fields[0]} has {rows} rows and {cols // GROUP} groups "
                      f"per row; there is no group ({row}, {group})"):
                break
            continue
        checked += 1
        seen.add((fields[0], row, group))
        observed_byte = int(fields[3], 16)
        observed_packed = bytes.fromhex(fields[4])
        expected = stored.expected
        expected_byte = int(expected.scale_bytes[row, group])
        expected_packed = expected.packed[row, group * 8:(group + 1) * 8].tobytes()
        if observed_byte == expected_byte and observed_packed == expected_packed:
            continue
        observed_codes = unpack_codes(np.frombuffer(observed_packed, dtype=np.uint8)[None, :])[0]
        notes = diagnose(stored, row, group, observed_byte, observed_codes)
        text = (f"{fields[0]} r{row} g{group}  {_group_inputs(stored, row, group)}"
                f" => {observed_byte:02x} {observed_packed.hex()}"
                f"  expected: {expected_byte:02x} {expected_packed.hex()}")
        text += "".join(f"\n    {note}" for note in notes)
        text += f"\n    (case {fields[0]} in {stored.file}: [{' '.join(stored.case.clauses)}])"
        if report(text):
            break

    total = sum(s.case.weight.shape[0] * s.case.weight.shape[1] // GROUP
                for s in vectors.values() if s.expected.error_clause is None)
    missing = total - len(seen)
    if stopped:
        print(f"stopped after {errors} errors (--errors {max_errors})", file=out)
    print(f"{checked} observed lines checked, {errors} errors; {len(seen)} of {total} groups of "
          f"the vectors observed", file=out)
    if require_all and missing and not stopped:
        print(f"{missing} groups of the vectors are missing from the observed file "
              "(--require-all)", file=out)
        return 1
    return 1 if errors else 0


def observed_lines(directory, with_global_scale: bool = True) -> list[str]:
    """The correct observed file for DIR (what a conforming implementation would write)."""
    lines = []
    for case_id, stored in load_vectors(directory).items():
        expected = stored.expected
        if expected.error_clause is not None:
            continue
        if with_global_scale:
            lines.append(f"{case_id} gs {hexio.fp32_hex(expected.global_scale)}")
        rows, cols = stored.case.weight.shape
        for r in range(rows):
            for i in range(cols // GROUP):
                lines.append(f"{case_id} {r} {i} {int(expected.scale_bytes[r, i]):02x} "
                             f"{expected.packed[r, i * 8:(i + 1) * 8].tobytes().hex()}")
    return lines
