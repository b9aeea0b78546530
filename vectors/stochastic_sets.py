"""Golden vectors of the stochastic kind (docs/spec.md section 11, docs/vectors.md): fp32 values
and the random words they are rounded with, explicit, with the E2M1 codes of every routing
profile (NVFP4-SR-4: ``straight``, ``ptx-e2m1x4``, ``sm103a``).

A case is the judge's :class:`~hscale.judge.stochastic.StochasticCase` of the element
conversion (no scaling: the values are what ``cvt.rs.satfinite.e2m1x4.f32`` rounds): every grid
cell with all 256 bytes, the specials with 0x00, 0xFF and random bytes, the inputs where
``fmaf`` to nearest carries falsely, random words over the range. One set, ``sr_e2m1x4``, in
two forms: JSON (authoritative) and ``.hex`` (one line per word: four values, the word, the
four codes under each profile, for ``$readmemh`` and the RTL bench).
"""

from __future__ import annotations

import numpy as np

from hscale.judge.findings import fp32_hex, plural
from hscale.judge.stochastic import (ObservedStochastic, StochasticCase, StochasticDomain,
                                     diagnose_stochastic)
from hscale.judge.stochastic_builders import level0_cases  # noqa: F401 - the family's cases
from hscale.reference.random_bits import PER_WORD, ROUTINGS, element_bytes
from hscale.reference.stochastic_rounding import discarded_top_array

from . import hexio
from .families import SetChoice, case_reader, coverage

FORMAT_NAME = "hscale-nvfp4-stochastic-vectors"
SET_PREFIX = "sr_"
SET_NAME = "sr_e2m1x4"
FORMAT_VERSION = 1
CHOICE = SetChoice(
    "--routing", "routing", lambda: ROUTINGS,
    "judge the stochastic-rounding sets' cases (sr_*) as a kernel of this byte routing "
    "(docs/spec.md section 11, NVFP4-SR-4); the observed file then holds 'CASE row word "
    "codes_hex' lines, the word's four codes, element 4*word first",
    "write what a stochastic-rounding kernel of this byte routing produces for the sr_* sets: "
    "'CASE row word codes_hex' per random word")
#: The clauses of the kind no vector case holds, and why (hscale.vectors.docs' clause table).
NO_VECTOR_CASE = {"NVFP4-SR-6": (
    "a kernel whose random stream is hidden has no expected codes to store: it is judged by the "
    "acceptance test of the suite (conformance/test_stochastic.py) and "
    "tests/judge/test_stochastic_judge.py checks that test's rates over seeds")}
CONVENTIONS = {
    "x": "the fp32 values rounded (no scaling), (rows, n) row-major, hex bits, one string per row",
    "words": "the random words, uint32 (rows, n/4), one per 4 consecutive elements of a row, "
             "hex, one string per row",
    "expected": "per routing profile: the E2M1 codes, one hex digit per element, 16 per group",
}


def expected_codes(case: StochasticCase) -> dict[str, np.ndarray]:
    return {routing: case.expected_for("none", routing).codes for routing in ROUTINGS}


def _word_rows(words: np.ndarray) -> list[str]:
    return [" ".join(f"{int(w):08x}" for w in row) for row in words]


def case_json(case: StochasticCase, expected: dict) -> dict:
    x = np.asarray(case.x, np.float32)
    return {"id": case.id, "title": case.title, "clauses": list(case.clauses),
            "inputs": {"shape": list(x.shape), "x": hexio.matrix_rows(x),
                       "words": _word_rows(case.words)},
            "expected": {routing: [hexio.nibble_groups(row) for row in expected[routing]]
                         for routing in ROUTINGS}}


def case_from_json(entry: dict) -> StochasticCase:
    inputs = entry["inputs"]
    shape = tuple(inputs["shape"])
    x = hexio.matrix_from_rows(inputs["x"], "float32", shape)
    words = np.array([[int(w, 16) for w in row.split()] for row in inputs["words"]], np.uint32)
    if words.shape != (shape[0], shape[1] // PER_WORD):
        raise ValueError(f"words: shape {words.shape}, not {(shape[0], shape[1] // PER_WORD)}")
    return StochasticCase(x, words, None, entry["id"], entry.get("title", ""),
                          tuple(entry.get("clauses", ())))


#: case ``number`` of a set file (``families.case_reader``)
read_case = case_reader(case_from_json)


def set_header(level: int, seed: int, spec_version: str) -> dict:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "spec_version": spec_version, "level": level, "seed": seed, "set": SET_NAME,
            "kind": "stochastic", "routings": list(ROUTINGS), "conventions": CONVENTIONS}


def hex_text(header: dict, records) -> str:
    """One line per random word, fields MSB first, ``_``-separated, for ``$readmemh``."""
    fields = ([("case", 4), ("row", 4), ("word", 4)] + [(f"v{i}", 8) for i in range(PER_WORD)]
              + [("rbits", 8)] + [(f"{routing}", 4) for routing in ROUTINGS])
    lines = [f"// {FORMAT_NAME} {FORMAT_VERSION}, spec version {header['spec_version']}, "
             f"level {header['level']}, seed {header['seed']}, set {SET_NAME}",
             "// one line per random word: four fp32 values (element 4*word + i is v_i), the "
             "word, and under each routing profile the four E2M1 codes, v3's first (v0 in the "
             "low nibble); fields, MSB first:"]
    lines += [f"//   {name:<12} {width:>2} hex digits" for name, width in fields]
    lines += ["// cases:"] + [f"//   {k:04x} {case.id}" for k, (case, _) in enumerate(records)]
    for k, (case, expected) in enumerate(records):
        x = hexio.bits(np.asarray(case.x, np.float32))
        rows, n = x.shape
        for r in range(rows):
            for w in range(n // PER_WORD):
                span = slice(PER_WORD * w, PER_WORD * (w + 1))
                parts = [f"{k:04x}", f"{r:04x}", f"{w:04x}"]
                parts += [f"{int(v):08x}" for v in x[r, span]]
                parts.append(f"{int(case.words[r, w]):08x}")
                parts += ["".join(format(int(c), "x") for c in expected[routing][r, span][::-1])
                          for routing in ROUTINGS]
                lines.append("_".join(parts))
    return "\n".join(lines) + "\n"


def render_files(cases, level: int, seed: int, spec_version: str) -> dict[str, bytes]:
    from .formats import dumps
    records = [(case, expected_codes(case)) for case in cases]
    document = set_header(level, seed, spec_version)
    document["cases"] = [case_json(case, expected) for case, expected in records]
    return {f"{SET_NAME}.json": dumps(document).encode("ascii"),
            f"{SET_NAME}.hex": hex_text(document, records).encode("ascii")}


def verify_document(name: str, document: dict, level: int, seed: int, spec_version: str):
    """``(problems, the set's files as its stored inputs render, its cases)``."""
    from .verify import verify_cases
    return verify_cases(name, document, "stochastic", case_from_json,
                        lambda case: case_json(case, expected_codes(case)),
                        lambda cases: render_files(cases, level, seed, spec_version))


# ------------------------------------------------------------------------------------------
# Third-party results: check, expect, explain
# ------------------------------------------------------------------------------------------

def expect_lines(cases, routing: str, with_global_scale: bool = True) -> list[str]:
    """What a conforming kernel of ``routing`` writes: ``CASE row word codes`` per word, the
    four codes as hex digits, element 4*word first."""
    lines = []
    for case in cases:
        codes = case.expected_for("none", routing).codes
        rows, n = codes.shape
        for r in range(rows):
            for w in range(n // PER_WORD):
                quad = codes[r, PER_WORD * w:PER_WORD * (w + 1)]
                lines.append(f"{case.id} {r} {w} " + "".join(format(int(c), "x") for c in quad))
    return lines


def check_lines(cases, lines: list[str], choice: str, max_errors: int = 20,
                require_all: bool = False, declared=None) -> tuple[list, int]:
    """``(report lines, errors)``: each case the observed lines cover (keyed by case id, or
    ``sr_e2m1x4:K`` for the K-th case of the set), judged bit for bit as the result of a
    kernel of the routing ``choice`` (hscale.judge.stochastic); ``declared`` limits what
    ``require_all`` asks for (``families.coverage``)."""
    by_id = {case.id: case for case in cases}
    by_index = {f"{SET_NAME}:{k}": case.id for k, case in enumerate(cases)}
    seen: dict[str, dict] = {}
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or line.lstrip().startswith(("#", "//")):
            continue
        words[0] = by_index.get(words[0], words[0])  # SET:INDEX, as the RTL bench keys lines
        if words[0] not in by_id:
            raise ValueError(f"line {number}: no stochastic case {words[0]!r} (hscale vectors "
                             "expect --routing R lists them)")
        if len(words) != 4 or len(words[3]) != PER_WORD:
            raise ValueError(f"line {number}: expected 'CASE row word codes' with four hex "
                             f"digits, found {line.strip()!r}")
        seen.setdefault(words[0], {})[(int(words[1]), int(words[2]))] = [
            int(c, 16) for c in words[3]]
    report, errors = [], 0
    domain = StochasticDomain("none", "given", choice)
    for case_id, quads in seen.items():
        case = by_id[case_id]
        codes = case.expected_for("none", choice).codes.copy()
        rows, n = case.shape
        missing = 0
        for r in range(rows):
            for w in range(n // PER_WORD):
                if (r, w) in quads:
                    codes[r, PER_WORD * w:PER_WORD * (w + 1)] = quads[(r, w)]
                else:
                    missing += 1
        if missing:
            report.append(f"{case_id}: {plural(missing, 'word')} missing from the file "
                          "(not judged)")
        diagnosis = diagnose_stochastic(case, ObservedStochastic(codes, None), domain)
        for finding in diagnosis.findings:
            errors += 1
            if errors <= max_errors:
                report.append(f"{case_id} {finding.render()}")
        errors += diagnosis.unlisted
    tail, missing = coverage(cases, {i: len(quads) for i, quads in seen.items()},
                             lambda case: case.shape[0] * case.shape[1] // PER_WORD, "word",
                             "stochastic vectors", require_all, declared)
    return report + tail, errors + missing


def explain(file_name: str, case: StochasticCase, row: int, word: int) -> str:
    """One random word worked through: its four values, D_top, the byte each routing gives
    each element, and the codes."""
    rows, n = case.shape
    if not (0 <= row < rows and 0 <= word < n // PER_WORD):
        raise ValueError(f"case {case.id} has {rows} rows and {n // PER_WORD} words")
    span = slice(PER_WORD * word, PER_WORD * (word + 1))
    values = np.asarray(case.x, np.float32)[row, span]
    tops = discarded_top_array(values[None])[0]
    lines = [f"{file_name}: case {case.id} ({case.title}), row {row}, word {word}: "
             f"0x{int(case.words[row, word]):08X}"]
    for i, (v, top) in enumerate(zip(values, tops)):
        lines.append(f"  v{i} = {float(v)!r} ({fp32_hex(v)}), D_top = "
                     + (str(int(top)) if top >= 0 else "- (a special)"))
    for routing in ROUTINGS:
        bytes_ = element_bytes(case.words[row:row + 1, word:word + 1], routing)[0]
        codes = case.expected_for("none", routing).codes[row, span]
        lines.append(f"  {routing:<10} bytes " + " ".join(f"{int(b):3d}" for b in bytes_)
                     + "  codes " + " ".join(f"0x{int(c):X}" for c in codes))
    return "\n".join(lines)
