"""Golden vectors of the activation kind (docs/spec.md section 8, docs/vectors.md): activation
tensors and a global scale, with what each recipe of the field (NVFP4-ACT-5) makes of them.

A case is the judge's :class:`~hscale.judge.activations.ActivationCase`: inputs ``x`` (tokens, n)
in their dtype and ``g`` (None: the kernel computes it, NVFP4-ACT-1), and the expected results
of the three recipes (``fast-math``, ``exact``, ``torchao``), each its scale bytes, codes and
global scale. A fast-math group whose byte another admissible reciprocal moves lists the bytes
it admits (NVFP4-ACT-5).

Sets are one per input dtype and global-scale mode (``act_bf16_static``, ...), in three forms
like the weight sets: JSON (authoritative, hex words), ``.hex`` (one line per group, for
``$readmemh``) and ``.npz``. Registered in ``hscale.vectors.families``: ``hscale vectors
generate / verify / check --recipe / expect --recipe / explain`` read them.
"""

from __future__ import annotations

import numpy as np

from hscale import files

from hscale.judge.activation_domain import ObservedActivations
from hscale.judge.activations import (ActivationCase, admissible_bytes, diagnose_activations,
                                      group_context)
from hscale.judge.findings import fp32_hex, plural
from hscale.reference.activation_recipes import group_maxima
from hscale.reference.activations import ACTIVATION_RECIPES, QuantizedActivations
from hscale.reference.constants import GROUP_SIZE
from hscale.reference.packing import (pack_codes, swizzle_scale_bytes, swizzle_scale_bytes_8x4,
                                      unpack_codes)

from . import hexio
from .domains import ActivationVectorDomain
from .families import DomainOption, SetChoice, case_reader, coverage
from .group_lines import assembled, read_group_lines
from .activation_catalogue import level0_cases  # noqa: F401 - the family's cases

FORMAT_NAME = "hscale-nvfp4-activation-vectors"
#: Every activation set's name starts so (``act_bf16_static``).
SET_PREFIX = "act_"
FORMAT_VERSION = 1
CHOICE = SetChoice(
    "--recipe", "recipe", lambda: ACTIVATION_RECIPES,
    "judge the activation sets' cases (act_*) as a run-time kernel of this recipe "
    "(docs/spec.md section 8); the observed file then holds 'CASE row group scale_byte "
    "packed_hex' and 'CASE gs g_hex' lines of activation cases",
    "write what a run-time activation kernel of this recipe produces for the activation sets "
    "(act_*) instead of the weight sets",
    (DomainOption("--dtypes", "LIST",
                  "with --recipe: the input dtypes the kernel takes, comma-separated (default "
                  "float32,float16,bfloat16); --require-all asks only for the cases it can run"),
     DomainOption("--global-scale", "LIST",
                  "with --recipe: static, dynamic or both, as the kernel declares (default "
                  "static: the dynamic cases are not required)")),
    ActivationVectorDomain.parse)
CONVENTIONS = {
    "x": "the activations, (tokens, n) row-major, each value the hex of its bits in the set's "
         "dtype, one string per token",
    "global_scale": "g, the quantization multiplier the kernel is given (fp32 bits), null: the "
                    "kernel computes it from x (dynamic, NVFP4-ACT-1)",
    "expected": "per recipe: scale_bytes (E4M3, one string per token, row-major), codes (one "
                "hex digit per element, 16 per group), packed (element 2k in the low nibble), "
                "swizzled_128x4 and swizzled_8x4 (NVFP4-ACT-10, zero padded, 32 bytes per "
                "string), global_scale g and multiplier a (fp32 bits)",
    "fast_math_admissible_bytes": "[row, group, [bytes]]: the groups whose fast-math byte "
                                  "another reciprocal within one ulp moves (NVFP4-ACT-5)",
}


# ------------------------------------------------------------------------------------------
# Sets and JSON
# ------------------------------------------------------------------------------------------

def set_name(case: ActivationCase) -> str:
    dtype = hexio.SHORT_NAMES[hexio.dtype_name(np.asarray(case.x).dtype)]
    return f"{SET_PREFIX}{dtype}_{'dynamic' if case.global_scale is None else 'static'}"


def expected_results(case: ActivationCase) -> dict[str, QuantizedActivations]:
    return {recipe: case.expected_for(recipe) for recipe in ACTIVATION_RECIPES}


def _rows(array: np.ndarray) -> list[str]:
    return hexio.matrix_rows(np.asarray(array))


def _byte_rows(array: np.ndarray) -> list[str]:
    return [bytes(row.astype(np.uint8)).hex() for row in np.asarray(array)]


def _chunks(buffer: np.ndarray) -> list[str]:
    text = bytes(buffer.astype(np.uint8)).hex()
    return [text[i:i + 64] for i in range(0, len(text), 64)]


def result_json(result: QuantizedActivations) -> dict:
    return {"scale_bytes": _byte_rows(result.scale_bytes),
            "codes": [hexio.nibble_groups(row) for row in result.codes],
            "packed": _byte_rows(pack_codes(result.codes)),
            "swizzled_128x4": _chunks(swizzle_scale_bytes(result.scale_bytes)),
            "swizzled_8x4": _chunks(swizzle_scale_bytes_8x4(result.scale_bytes)),
            "global_scale": hexio.scalar_word(result.global_scale),
            "multiplier": hexio.scalar_word(result.multiplier)}


def admissible_json(case: ActivationCase, fast_math: QuantizedActivations) -> list:
    """[row, group, [bytes]] where fast-math admits more than one byte."""
    x32 = np.asarray(case.x).astype(np.float32)
    bytes_ = admissible_bytes("fast-math", group_maxima(x32), fast_math.global_scale,
                               fast_math.multiplier)
    out = []
    for r, i in np.argwhere((bytes_ != bytes_[:1]).any(axis=0)):
        out.append([int(r), int(i), sorted({int(b) for b in bytes_[:, r, i]})])
    return out


def case_json(case: ActivationCase, expected: dict[str, QuantizedActivations]) -> dict:
    x = np.asarray(case.x)
    return {
        "id": case.id, "title": case.title, "clauses": list(case.clauses),
        "notes": list(case.notes),
        "inputs": {"dtype": hexio.dtype_name(x.dtype), "shape": list(x.shape), "x": _rows(x),
                   "global_scale": (None if case.global_scale is None
                                    else hexio.scalar_word(case.global_scale))},
        "expected": {recipe: result_json(expected[recipe]) for recipe in ACTIVATION_RECIPES},
        "fast_math_admissible_bytes": admissible_json(case, expected["fast-math"]),
    }


def _result_from_json(entry: dict, shape, recipe: str) -> QuantizedActivations:
    tokens, n = shape
    scale_bytes = np.array([list(bytes.fromhex(row)) for row in entry["scale_bytes"]],
                           np.uint8).reshape(tokens, n // GROUP_SIZE)
    codes = np.stack([hexio.parse_nibbles(row) for row in entry["codes"]]).reshape(tokens, n)
    packed = np.array([list(bytes.fromhex(row)) for row in entry["packed"]], np.uint8)
    if not np.array_equal(unpack_codes(packed), codes):
        raise ValueError(f"{recipe}: packed and codes disagree")
    return QuantizedActivations(codes, scale_bytes, hexio.scalar_from_hex(entry["global_scale"]),
                                hexio.scalar_from_hex(entry["multiplier"]), recipe)


def case_from_json(entry: dict, with_expected: bool = True) -> ActivationCase:
    inputs = entry["inputs"]
    shape = tuple(inputs["shape"])
    x = hexio.matrix_from_rows(inputs["x"], inputs["dtype"], shape)
    g = inputs["global_scale"]
    expected = None
    if with_expected:
        expected = {recipe: _result_from_json(entry["expected"][recipe], shape, recipe)
                    for recipe in ACTIVATION_RECIPES}
    return ActivationCase(x, None if g is None else hexio.scalar_from_hex(g), entry["id"],
                          entry.get("title", ""), tuple(entry.get("clauses", ())),
                          tuple(entry.get("notes", ())), expected)


#: case ``number`` of a set file (``families.case_reader``)
read_case = case_reader(case_from_json)


# ------------------------------------------------------------------------------------------
# The files of a set
# ------------------------------------------------------------------------------------------

def set_header(name: str, level: int, seed: int, spec_version: str) -> dict:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "spec_version": spec_version, "level": level, "seed": seed, "set": name,
            "kind": "activation", "recipes": list(ACTIVATION_RECIPES), "conventions": CONVENTIONS}


def hex_text(header: dict, records) -> str:
    """One line per group, fields left (MSB) to right, ``_``-separated, for ``$readmemh``."""
    first = np.asarray(records[0][0].x)
    digits = 2 * first.dtype.itemsize
    fields = ([("case", 4), ("row", 4), ("group", 4), ("g", 8)]
              + [(f"x{j}", digits) for j in range(GROUP_SIZE)]
              + [(f"{short}_{what}", width) for short in ("fm", "ex", "ta")
                 for what, width in (("scale", 2), ("packed", 16))])
    lines = [f"// {FORMAT_NAME} {FORMAT_VERSION}, spec version {header['spec_version']}, "
             f"level {header['level']}, seed {header['seed']}, set {header['set']}",
             "// one line per group of 16 activations; fields, MSB first:"]
    lines += [f"//   {name:<12} {width:>2} hex digits" for name, width in fields]
    lines += ["// g: the given global scale, or (dynamic) the fast-math recipe's own; fm, ex, ta:"
              " the fast-math, exact and torchao recipes (scale byte, packed codes with byte 0"
              " leftmost)", "// cases:"]
    lines += [f"//   {k:04x} {case.id}" for k, (case, _) in enumerate(records)]
    for k, (case, expected) in enumerate(records):
        x = np.asarray(case.x)
        words = hexio.bits(x)
        g = expected["fast-math"].global_scale
        for r in range(x.shape[0]):
            for i in range(x.shape[1] // GROUP_SIZE):
                parts = [f"{k:04x}", f"{r:04x}", f"{i:04x}", hexio.scalar_word(g)]
                parts += [format(int(w), f"0{digits}x")
                          for w in words[r, GROUP_SIZE * i:GROUP_SIZE * (i + 1)]]
                for recipe in ACTIVATION_RECIPES:
                    result = expected[recipe]
                    parts.append(f"{int(result.scale_bytes[r, i]):02x}")
                    parts.append(bytes(pack_codes(
                        result.codes[r, GROUP_SIZE * i:GROUP_SIZE * (i + 1)])).hex())
                lines.append("_".join(parts))
    return "\n".join(lines) + "\n"


def npz_bytes(records) -> bytes:
    arrays = {}
    for case, expected in records:
        key = case.id.replace("-", "_")
        arrays[f"{key}__x_bits"] = hexio.bits(np.asarray(case.x))
        for recipe in ACTIVATION_RECIPES:
            short = recipe.replace("-", "_")
            arrays[f"{key}__{short}__scale_bytes"] = expected[recipe].scale_bytes
            arrays[f"{key}__{short}__codes"] = expected[recipe].codes
    return files.npz_bytes(dict(sorted(arrays.items())))


def group_sets(cases) -> dict[str, list]:
    sets: dict[str, list] = {}
    for case in cases:
        sets.setdefault(set_name(case), []).append(case)
    return dict(sorted(sets.items()))


def render_files(cases, level: int, seed: int, spec_version: str) -> dict[str, bytes]:
    """File name -> bytes of every activation set of ``cases``."""
    from .formats import dumps
    out = {}
    for name, members in group_sets(cases).items():
        records = [(case, expected_results(case)) for case in members]
        document = set_header(name, level, seed, spec_version)
        document["cases"] = [case_json(case, expected) for case, expected in records]
        out[f"{name}.json"] = dumps(document).encode("ascii")
        out[f"{name}.hex"] = hex_text(document, records).encode("ascii")
        out[f"{name}.npz"] = npz_bytes(records)
    return out


def verify_document(name: str, document: dict, level: int, seed: int, spec_version: str):
    """``(problems, the set's files as its stored inputs render, its cases)``: every case
    recomputed from its stored inputs with the reference and compared with what is stored."""
    problems, cases = [], []
    for number, entry in enumerate(document.get("cases", [])):
        try:
            stored = case_from_json(entry)
        except (KeyError, ValueError, TypeError, IndexError) as error:
            problems.append(f"{name}: cases[{number}]: unreadable activation case ({error})")
            continue
        fresh = case_json(stored, {r: ActivationCase(stored.x, stored.global_scale)
                                   .expected_for(r) for r in ACTIVATION_RECIPES})
        if fresh != entry:
            from .verify import _first_difference
            problems.append(f"{name}: case {stored.id}: {_first_difference(entry, fresh)}")
        cases.append(stored)
    rendered = {}
    if cases and not problems:
        rendered = render_files(cases, level, seed, spec_version)
    return problems, rendered, cases


# ------------------------------------------------------------------------------------------
# Third-party results: check, expect, explain
# ------------------------------------------------------------------------------------------

def observed_lines(cases, recipe: str, with_global_scale: bool = True) -> list[str]:
    """What a conforming ``recipe`` kernel writes for ``cases``: ``CASE row group byte packed``
    per group, and ``CASE gs g`` (the global scale, fp32 bits)."""
    lines = []
    for case in cases:
        result = case.expected_for(recipe)
        if with_global_scale:
            lines.append(f"{case.id} gs {hexio.scalar_word(result.global_scale)}")
        tokens, n = result.codes.shape
        for r in range(tokens):
            for i in range(n // GROUP_SIZE):
                packed = pack_codes(result.codes[r, GROUP_SIZE * i:GROUP_SIZE * (i + 1)])
                lines.append(f"{case.id} {r} {i} {int(result.scale_bytes[r, i]):02x} "
                             f"{bytes(packed).hex()}")
    return lines


def expect_lines(cases, recipe: str, with_global_scale: bool = True) -> list[str]:
    """``hscale vectors expect --recipe R``: :func:`observed_lines`."""
    return observed_lines(cases, recipe, with_global_scale)


def check_lines(cases, lines: list[str], choice: str, max_errors: int = 20,
                require_all: bool = False, declared=None) -> tuple[list, int]:
    """``(report lines, errors)``: each case the observed lines cover, judged as the result of
    a kernel of the recipe ``choice`` (hscale.judge.activations), TestFloat-style. The report
    says how many of the vectors' groups the file held; a group it lacks is not judged (its
    expected result stands in, so that the case's others can be), and with ``require_all``
    each one missing is an error, as ``hscale vectors check --require-all`` makes it for the weight sets: of the
    cases of the ``declared`` domain (``hscale.vectors.domains``; None: every case)."""
    recipe = choice
    by_id = {case.id: case for case in cases}
    seen = read_group_lines(lines, set(by_id), "activation", "hscale vectors expect --recipe R")
    report, errors = [], 0
    for case_id, entry in seen.items():
        case = by_id[case_id]
        expected = case.expected_for(recipe)
        codes, scale_bytes, missing = assembled(entry, expected.codes, expected.scale_bytes)
        g = entry["gs"]
        observed = ObservedActivations(codes, scale_bytes, g,
                                       None if g is None else np.float32(1) / np.float32(g))
        diagnosis = diagnose_activations(case, observed, recipe)
        if missing:
            report.append(f"{case_id}: {plural(len(missing), 'group')} missing from the file "
                          "(not judged)")
        if diagnosis.ok:
            continue
        for finding in diagnosis.findings:
            errors += 1
            if errors <= max_errors:
                report.append(f"{case_id} {finding.render()}")
                if finding.group is not None:
                    report.append(group_context(case, *finding.group))
    # --require-all asks for the declared domain's cases (vectors/domains.py), not all of them
    tail, missing = coverage(cases, {i: len(entry["groups"]) for i, entry in seen.items()},
                             lambda case: case.shape[0] * (case.shape[1] // GROUP_SIZE),
                             "group", "activation vectors", require_all, declared)
    return report + tail, errors + missing


def explain(file_name: str, case: ActivationCase, row: int, group: int) -> str:
    """One group worked through every recipe: inputs, amax, block scale, byte, codes."""
    tokens, n = case.shape
    if not (0 <= row < tokens and 0 <= group < n // GROUP_SIZE):
        raise ValueError(f"case {case.id} has {tokens} rows and {n // GROUP_SIZE} groups")
    lines = [f"{file_name}: case {case.id} ({case.title}), group (r={row}, i={group})",
             group_context(case, row, group)]
    amax = float(group_maxima(np.asarray(case.x).astype(np.float32))[row, group])
    lines.append(f"  amax_g = {amax!r}; g = "
                 + ("computed from the tensor (dynamic)" if case.global_scale is None else
                    f"{float(case.global_scale)!r} ({fp32_hex(case.global_scale)})"))
    for recipe in ACTIVATION_RECIPES:
        result = case.expected_for(recipe)
        codes = result.codes[row, GROUP_SIZE * group:GROUP_SIZE * (group + 1)]
        lines.append(f"  {recipe:<9} g = {float(result.global_scale)!r}: scale byte "
                     f"0x{int(result.scale_bytes[row, group]):02X}, codes "
                     f"{hexio.nibble_groups(codes)}")
    admitted = [entry for entry in admissible_json(case, case.expected_for("fast-math"))
                if entry[:2] == [row, group]]
    if admitted:
        lines.append("  fast-math also admits the bytes "
                     + ", ".join(f"0x{b:02X}" for b in admitted[0][2])
                     + " (a reciprocal within one ulp, NVFP4-ACT-5)")
    return "\n".join(lines)
