"""The GEMM vector sets in their files (docs/vectors.md, "GEMM / MMA vectors"): JSON (the
authoritative form: operands in hex, the exact sums, the spec's result and each model's
admissible interval per output element), ``.npz``, and for the NVFP4 x NVFP4 set a ``.hex``
file of MMA steps for ``$readmemh``; and what ``hscale vectors verify / check --gemm-model /
expect --gemm-model / explain`` do with them.

The gemm kind's vector family (``hscale.vectors.families``): a GEMM set's JSON has the format
``FORMAT_NAME`` and a name starting ``gemm_``.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from hscale import SPEC_VERSION, files
from hscale.judge.cases import GemmCase
from hscale.judge.gemm import GemmDomain, judge_gemm, out_hex
from hscale.reference import pack_codes
from hscale.reference.accumulation import PRESETS, GemmModel, accumulator_interval, bound_factor
from hscale.reference.float_formats import FLOAT32, float_format
from hscale.reference.gemm import Nvfp4Tensor, decoded_units

from . import hexio
from .domains import GemmVectorDomain
from .families import DomainOption, SetChoice, case_reader, coverage
from .formats import CONVENTIONS, dumps
from .gemm import NVFP4_SET, WEIGHT_ONLY_SET, gemm_sets
from .gemm_bookkeeping import BOOKKEEPING_SET, PatternOperand

KIND = "gemm"
FORMAT_NAME = "hscale-nvfp4-gemm-vectors"
#: Every GEMM set's name starts so (``gemm_nvfp4``, ``gemm_weightonly``).
SET_PREFIX = "gemm_"
CHOICE = SetChoice(
    "--gemm-model", "accumulation model", lambda: tuple(PRESETS),
    "judge the GEMM sets' cases (gemm_*) as a GEMM of this accumulation model: fp32 (the "
    "spec's), fp32-faithful, fp16, fp16-faithful, bf16, bf16-faithful (docs/spec.md section "
    "10); the observed file then holds 'CASE i j OUT_hex' lines, one per output element",
    "write what a GEMM of this accumulation model produces for the GEMM sets (gemm_*): the "
    "spec's result, 'CASE i j OUT_hex' per element",
    (DomainOption("--gemm-activations", "LIST",
                  "with --gemm-model: the GEMM's first operands, comma-separated, of nvfp4, "
                  "float32, bfloat16, float16, q8_0 (default nvfp4: the weight-only cases are "
                  "not required)"),
     DomainOption("--gemm-out-dtypes", "LIST",
                  "with --gemm-model: the output dtypes it produces (default float32)")),
    GemmVectorDomain.parse)
FORMAT_VERSION = 1
#: The accumulation models whose admissible intervals every GEMM vector lists.
MODELS = ("fp32", "fp32-faithful", "fp16", "bf16")
#: Elements with at most this many blocks list every result of summing their block values in
#: fp32 in every order and grouping (``block_orders``).
ORDER_BLOCKS = 5
#: Elements of one MMA step (the PTX block-scale MMA's K: four blocks of 16).
MMA_K = 64
GEMM_CONVENTIONS = {
    "operands": "an NVFP4 operand: packed (a row's bytes, element 2k in the low nibble, "
                "NVFP4-PACK-1), scale_bytes (a row's E4M3 bytes, NVFP4-PACK-2), "
                "swizzled_scale_bytes (the 128x4 layout of NVFP4-PACK-3, 32 bytes per string), "
                "global_scale (fp32 bits); activations: their native bits per row",
    "exact_sum": "S = sum of the terms before the global scales, exactly: '<integer>p<exponent>' "
                 "(the integer times 2^exponent); sum_of_magnitudes likewise",
    "reference": "the spec's result: S rounded once to fp32, times fp32(gA gB) in fp32, rounded "
                 "to the output dtype (NVFP4-GEMM-5, -6), as output-dtype bits",
    "models": "per accumulation model (NVFP4-GEMM-4): low and high, the admissible ends as "
              "output-dtype bits (global scales on the fp32 accumulator); exact: 1 where every "
              "partial sum is exact (NVFP4-GEMM-7); judged: 0 where the model's range is left "
              "(a narrow accumulator may overflow)",
    "block_orders": "for output elements of at most 5 blocks: every fp32 value (bits) that "
                    "summing the exact block values in some order and grouping gives",
}


# ------------------------------------------------------------------------------------------
# JSON
# ------------------------------------------------------------------------------------------

def _exact_text(numerator: int, exponent: int) -> str:
    return f"{int(numerator)}p{int(exponent)}"


def _parse_exact(text: str) -> Fraction:
    numerator, _, exponent = text.partition("p")
    return Fraction(int(numerator)) * Fraction(2) ** int(exponent)


def operand_json(operand) -> dict:
    if isinstance(operand, PatternOperand):  # given by its rules (vectors/gemm_bookkeeping.py)
        return operand.as_json()
    if isinstance(operand, np.ndarray):
        return {"kind": "activations", "dtype": hexio.dtype_name(operand.dtype),
                "values": hexio.matrix_rows(operand)}
    codes = np.asarray(operand.codes, np.uint8)
    swizzled = _swizzled(np.asarray(operand.scale_bytes, np.uint8))
    return {"kind": "nvfp4", "rows": int(codes.shape[0]), "cols": int(codes.shape[1]),
            "packed": [row.tobytes().hex() for row in pack_codes(codes)],
            "scale_bytes": [row.tobytes().hex() for row in np.asarray(operand.scale_bytes,
                                                                      np.uint8)],
            "swizzled_scale_bytes": [swizzled[k:k + 32].tobytes().hex()
                                     for k in range(0, swizzled.size, 32)],
            "global_scale": hexio.scalar_word(np.float32(operand.global_scale))}


def _swizzled(scale_bytes: np.ndarray) -> np.ndarray:
    from hscale.reference import swizzle_scale_bytes
    return swizzle_scale_bytes(scale_bytes)


def operand_from_json(entry: dict):
    if entry["kind"] == "nvfp4-pattern":
        return PatternOperand.from_json(entry)
    if entry["kind"] == "activations":
        return hexio.matrix_from_rows(entry["values"], entry["dtype"],
                                      (len(entry["values"]), -1))
    packed = np.stack([np.frombuffer(bytes.fromhex(row), np.uint8) for row in entry["packed"]])
    scale_bytes = np.stack([np.frombuffer(bytes.fromhex(row), np.uint8)
                            for row in entry["scale_bytes"]])
    return Nvfp4Tensor.from_packed(packed, scale_bytes,
                                   hexio.scalar_from_hex(entry["global_scale"]))


def _words(values: np.ndarray, out_dtype: str) -> list[list[str]]:
    dtype = float_format(out_dtype).dtype
    with np.errstate(over="ignore"):
        array = np.asarray(values, dtype=np.float64).astype(dtype)
    return [hexio.to_words(row) for row in array]


def block_orders(case: GemmCase, i: int, j: int) -> list[str] | None:
    """Every fp32 result (bits) of summing the exact block values of element (i, j) in some
    order and grouping, each addition rounded to nearest; None for weight-only cases and for
    more than ORDER_BLOCKS blocks."""
    if case.weight_only or case.shape[2] // 16 > ORDER_BLOCKS:
        return None
    a = decoded_units(case.a.codes[i:i + 1], case.a.scale_bytes[i:i + 1])[0]
    b = decoded_units(case.b.codes[j:j + 1], case.b.scale_bytes[j:j + 1])[0]
    blocks = [int(np.dot(a[k:k + 16], b[k:k + 16])) for k in range(0, a.size, 16)]
    results = set()

    def every(values: tuple[int, ...]):  # values in units of 2^-20, each exact in fp32
        if len(values) == 1:
            results.add(values[0])
            return
        for x, y in itertools.combinations(range(len(values)), 2):
            rest = tuple(v for k, v in enumerate(values) if k not in (x, y))
            total = FLOAT32.round(values[x] + values[y], -20)
            every(rest + (int(Fraction(total) * 2 ** 20),))
    every(tuple(blocks))
    return sorted(hexio.scalar_word(np.float32(math.ldexp(v, -20))) for v in results)


def case_json(case: GemmCase) -> dict:
    product = case.exact
    m, n, _ = case.shape
    models = {}
    for name in MODELS:
        allowed = case.admissible(name)
        models[name] = {"low": _words(allowed.low, case.out_dtype),
                        "high": _words(allowed.high, case.out_dtype),
                        "exact": ["".join(str(int(v)) for v in row) for row in allowed.exact],
                        "judged": ["".join(str(int(v)) for v in row) for row in allowed.judged]}
    expected = {
        "exact_sum": [[_exact_text(v, product.exponent) for v in row]
                      for row in product.numerators],
        "sum_of_magnitudes": [[_exact_text(v, product.exponent) for v in row]
                              for row in product.magnitudes],
        "reference": _words(case.reference_outputs, case.out_dtype),
        "models": models}
    orders = {f"{i},{j}": block_orders(case, i, j) for i in range(m) for j in range(n)
              if m * n <= 16}
    if any(v is not None for v in orders.values()):
        expected["block_orders"] = {k: v for k, v in orders.items() if v is not None}
    return {"id": case.id, "title": case.title, "clauses": list(case.clauses),
            "inputs": {"a": operand_json(case.a), "b": operand_json(case.b),
                       "out_dtype": case.out_dtype},
            "expected": expected}


def case_from_json(entry: dict) -> GemmCase:
    inputs = entry["inputs"]
    return GemmCase(operand_from_json(inputs["a"]), operand_from_json(inputs["b"]),
                    inputs["out_dtype"], id=entry["id"], title=entry.get("title", ""),
                    clauses=tuple(entry.get("clauses", ())))


#: case ``number`` of a set file (``families.case_reader``)
read_case = case_reader(case_from_json)


def header(set_name: str, level: int, seed: int, spec_version: str = SPEC_VERSION) -> dict:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "kind": KIND,
            "spec_version": spec_version, "level": level, "seed": seed, "set": set_name,
            "parameters": {"models": list(MODELS), "global_scales": "accumulator"},
            "conventions": {**{k: CONVENTIONS[k] for k in ("hex",)}, **GEMM_CONVENTIONS}}


# ------------------------------------------------------------------------------------------
# The MMA steps as $readmemh text
# ------------------------------------------------------------------------------------------

MMA_FIELDS = [
    ("case", 4, "case index in this file (table below)"),
    ("i", 4, "row i of A (output row)"),
    ("j", 4, "row j of B (output column)"),
    ("step", 4, "the 64-element step of K (elements 64 step .. 64 step + 63)"),
    ("sa", 8, "A's four scale bytes of the step, byte 0 leftmost"),
    ("a", 64, "A's 32 packed code bytes of the step, byte 0 leftmost (element 2k low nibble)"),
    ("sb", 8, "B's four scale bytes of the step"),
    ("b", 64, "B's 32 packed code bytes of the step"),
    ("c", 8, "fp32 accumulator entering the step: the exact sum of the earlier steps rounded "
             "once (0 for step 0)"),
    ("rn", 8, "expected: c plus the step's exact sum, rounded once to fp32 (a fused MMA)"),
    ("low", 8, "admissible low end for the step's fp32 result, any order of fp32 additions "
               "(NVFP4-GEMM-4, d = 64: the 64 terms and c)"),
    ("high", 8, "admissible high end"),
]


def mma_hex_text(head: dict, cases: list[GemmCase]) -> str:
    """One line per (case, output element, 64-element step) of the NVFP4 x NVFP4 set: what a
    block-scale MMA with an fp32 accumulator input computes (no global scales: alpha is the
    epilogue's, NVFP4-GEMM-5). Cases with K not a multiple of 64 are padded with zero blocks
    (zero terms)."""
    from .formats import _field_table
    width = sum(d for _, d, _ in MMA_FIELDS)
    lines = [f"// {FORMAT_NAME} v{FORMAT_VERSION}: one line per MMA step of 64 elements",
             f"// spec version {head['spec_version']}, level {head['level']}, seed {head['seed']},"
             f" set {head['set']} (docs/vectors.md, GEMM / MMA vectors)"]
    lines += _field_table(MMA_FIELDS)
    lines += ["// cases: index (the case field, hex), case id, M x N x K, clauses"]
    for index, case in enumerate(cases):
        m, n, k = case.shape
        lines.append(f"//   {index:04x}  {case.id}  {m}x{n}x{k}  [{' '.join(case.clauses)}]")
    body = []
    factor = bound_factor(GemmModel.parse("fp32"), MMA_K)
    for index, case in enumerate(cases):
        m, n, k = case.shape
        steps = -(-k // MMA_K)
        pad = steps * MMA_K - k
        a_codes = np.pad(case.a.codes, ((0, 0), (0, pad)))
        a_bytes = np.pad(case.a.scale_bytes, ((0, 0), (0, pad // 16)))
        b_codes = np.pad(case.b.codes, ((0, 0), (0, pad)))
        b_bytes = np.pad(case.b.scale_bytes, ((0, 0), (0, pad // 16)))
        a_units, b_units = decoded_units(a_codes, a_bytes), decoded_units(b_codes, b_bytes)
        a_packed, b_packed = pack_codes(a_codes), pack_codes(b_codes)
        for i in range(m):
            for j in range(n):
                before = 0  # the exact sum of the earlier steps, in units of 2^-20
                for step in range(steps):
                    part = slice(step * MMA_K, (step + 1) * MMA_K)
                    terms = a_units[i, part] * b_units[j, part]
                    c = FLOAT32.round(before, -20)
                    c_units = int(Fraction(c) * 2 ** 20)
                    total = c_units + int(terms.sum())
                    nonzero = [int(t) for t in terms if t] + ([c_units] if c_units else [])
                    valuation = min(((v & -v).bit_length() - 1 for v in nonzero),
                                    default=1 << 20) - 20
                    one = accumulator_interval(total, sum(abs(v) for v in nonzero), -20,
                                               valuation, FLOAT32, factor, True)
                    blocks = slice(step * 4, step * 4 + 4)
                    fields = [format(index, "04x"), format(i, "04x"), format(j, "04x"),
                              format(step, "04x"), a_bytes[i, blocks].tobytes().hex(),
                              a_packed[i, step * 32:step * 32 + 32].tobytes().hex(),
                              b_bytes[j, blocks].tobytes().hex(),
                              b_packed[j, step * 32:step * 32 + 32].tobytes().hex(),
                              hexio.scalar_word(np.float32(c)),
                              hexio.scalar_word(np.float32(FLOAT32.round(total, -20))),
                              hexio.scalar_word(np.float32(one.low)),
                              hexio.scalar_word(np.float32(one.high))]
                    body.append("_".join(fields))
                    before += int(terms.sum())
    lines.append(f"// line width: {4 * width} bits; {len(body)} lines follow")
    return "\n".join(lines + body) + "\n"


# ------------------------------------------------------------------------------------------
# A set in all its forms
# ------------------------------------------------------------------------------------------

def npz_bytes(head: dict, cases: list[GemmCase]) -> bytes:
    arrays = {"header": np.array(dumps(head)), "case_ids": np.array([c.id for c in cases])}
    for index, case in enumerate(cases):
        p = f"c{index:03d}_"
        for side in ("a", "b"):
            operand = getattr(case, side)
            if isinstance(operand, np.ndarray):
                arrays[p + f"{side}_bits"] = hexio.bits(operand)
                arrays[p + f"{side}_dtype"] = np.array(hexio.dtype_name(operand.dtype))
            else:
                arrays[p + f"{side}_packed"] = pack_codes(np.asarray(operand.codes, np.uint8))
                arrays[p + f"{side}_scale_bytes"] = np.asarray(operand.scale_bytes, np.uint8)
                arrays[p + f"{side}_global_scale"] = np.array(operand.global_scale, np.float32)
        arrays[p + "reference_bits"] = hexio.bits(case.reference_outputs)
    return files.npz_bytes(arrays)


def render_set(name: str, cases: list[GemmCase], level: int, seed: int,
               spec_version: str = SPEC_VERSION) -> dict[str, bytes]:
    head = header(name, level, seed, spec_version)
    document = dict(head, cases=[case_json(case) for case in cases])
    if name == BOOKKEEPING_SET:  # operands given by rules: the JSON alone (megabytes listed)
        return {f"{name}.json": dumps(document).encode("ascii")}
    out = {f"{name}.json": dumps(document).encode("ascii"), f"{name}.npz": npz_bytes(head, cases)}
    if name == NVFP4_SET:
        out[f"{name}.hex"] = mma_hex_text(head, cases).encode("ascii")
    return out


def level0_cases(seed: int) -> list[GemmCase]:
    """The level-0 GEMM cases (the GEMM sets have no level 1 or 2)."""
    return [case for cases in gemm_sets(seed).values() for case in cases]


def stored_cases(directory=None) -> dict[str, GemmCase]:
    """case id -> GEMM case of the sets stored in ``directory`` (default: the committed level
    0), as ``hscale vectors check`` reads them: what the suite and ``hscale interop`` run."""
    from .catalogue import LEVEL0_DIR
    from .stored import open_vectors
    opened = open_vectors(LEVEL0_DIR if directory is None else directory)
    return {case_id: case for case_id, (_, case) in opened.by_kind["gemm"].items()}


def set_name(case: GemmCase) -> str:
    if isinstance(case.a, PatternOperand):
        return BOOKKEEPING_SET
    return WEIGHT_ONLY_SET if case.weight_only else NVFP4_SET


def render_files(cases, level: int, seed: int, spec_version: str) -> dict[str, bytes]:
    """File name -> bytes of every GEMM set of ``cases``."""
    sets: dict[str, list] = {}
    for case in cases:
        sets.setdefault(set_name(case), []).append(case)
    out = {}
    for name, members in sorted(sets.items()):
        out.update(render_set(name, members, level, seed, spec_version))
    return out


# ------------------------------------------------------------------------------------------
# verify, expect, check, explain
# ------------------------------------------------------------------------------------------

def verify_document(name: str, document: dict, level: int, seed: int, spec_version: str
                    ) -> tuple[list[str], dict[str, bytes], list[GemmCase]]:
    """(problems, the files the set's stored inputs render to, its cases)."""
    problems = []
    try:
        cases = [case_from_json(entry) for entry in document["cases"]]
    except (KeyError, ValueError, TypeError) as error:
        return [f"{name}: not a GEMM vector set ({error})"], {}, []
    for entry, case in zip(document["cases"], cases):
        fresh = case_json(case)
        if fresh != entry:
            where = next((k for k in fresh if fresh.get(k) != entry.get(k)), "?")
            problems.append(f"{name}: case {case.id}: {where} differs from what the reference "
                            "computes from its stored inputs")
    head = header(name[:-len(".json")], level, seed, spec_version)
    for key in head:
        if document.get(key) != head[key]:
            problems.append(f"{name}: header {key}: stored {document.get(key)!r}, expected "
                            f"{head[key]!r}")
    return problems, render_set(name[:-len(".json")], cases, level, seed, spec_version), cases


def observed_lines(cases, recipe: str = "fp32") -> list[str]:
    """What a conforming GEMM writes for ``cases``: ``CASE i j OUT`` per output element, OUT
    the spec's result in the case's output dtype (admissible under every accumulation model:
    ``recipe``, the model, changes nothing but is checked)."""
    GemmModel.parse(recipe)
    lines = []
    for case in cases:
        for i, row in enumerate(_words(case.reference_outputs, case.out_dtype)):
            lines += [f"{case.id} {i} {j} {word}" for j, word in enumerate(row)]
    return lines


def _read_lines(by_id: dict, lines: list[str]) -> dict[str, dict]:
    """case id -> {(i, j): output word} of the observed lines; a ValueError names a line that
    is not ``CASE i j OUT`` of a GEMM case."""
    seen: dict[str, dict] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words or line.lstrip().startswith("//"):
            continue
        if words[0] not in by_id:
            raise ValueError(f"line {number}: no GEMM case {words[0]!r} (hscale vectors expect "
                             "--gemm-model M lists them)")
        case = by_id[words[0]]
        m, n, _ = case.shape
        digits = hexio.word_digits(case.out_dtype)
        if (len(words) != 4 or not all(w.isdigit() for w in words[1:3])
                or len(words[3]) != digits
                or any(c not in "0123456789abcdefABCDEF" for c in words[3])):
            raise ValueError(f"line {number}: expected 'CASE i j OUT' with OUT the "
                             f"{case.out_dtype} bits ({digits} hex digits), found "
                             f"{line.strip()!r}")
        i, j = int(words[1]), int(words[2])
        if not (i < m and j < n):
            raise ValueError(f"line {number}: case {case.id} is {m} x {n}: there is no output "
                             f"element ({i}, {j})")
        seen.setdefault(case.id, {})[(i, j)] = words[3].lower()
    return seen


def expect_lines(cases, model: str, with_global_scale: bool = True) -> list[str]:
    """``hscale vectors expect --gemm-model M``: :func:`observed_lines` (a GEMM's output has
    no global-scale line)."""
    return observed_lines(cases, model)


def check_lines(cases, lines: list[str], choice: str, max_errors: int = 20,
                require_all: bool = False, declared=None) -> tuple[list, int]:
    """``(report lines, errors)``: each case the observed lines cover, judged under the
    accumulation model ``choice`` (hscale.judge.gemm), TestFloat-style: each wrong output
    element with its expected and observed bits and its finding. The report says how many of
    the vectors' output elements the file held; an element it lacks is not judged (its expected
    value stands in, so that the case's others can be), and with ``require_all`` each one
    missing is an error, as for the weight and activation sets: of the cases of the
    ``declared`` domain (``hscale.vectors.domains``; None: every case)."""
    recipe = choice
    domain = GemmDomain(GemmModel.parse(recipe))
    by_id = {case.id: case for case in cases}
    report, errors = [], 0
    seen = _read_lines(by_id, lines)
    for case_id, values in seen.items():
        case = by_id[case_id]
        m, n, _ = case.shape
        result = case.reference_outputs.astype(np.float64)
        for (i, j), word in values.items():
            result[i, j] = hexio.from_words([word], hexio.dtype_name(
                float_format(case.out_dtype).dtype))[0]
        if len(values) < m * n:
            report.append(f"{case_id}: {m * n - len(values)} of {m * n} output elements "
                          "missing from the file (not judged)")
        diagnosis = judge_gemm(case, result, recipe, domain)
        for finding in diagnosis.findings:
            errors += 1
            if errors <= max_errors:
                i, j = finding.output
                report.append(f"{case_id} {i} {j} => {finding.observed}  expected: "
                              f"{finding.expected}\n  {finding.render()}")
        errors += diagnosis.unlisted.get("NVFP4-GEMM-7", 0)
    # --require-all asks for the declared domain's cases (vectors/domains.py), not all of them
    tail, missing = coverage(cases, {i: len(elements) for i, elements in seen.items()},
                             lambda case: case.shape[0] * case.shape[1], "output element",
                             "GEMM vectors", require_all, declared)
    return report + tail, errors + missing


def explain(file_name: str, case: GemmCase, i: int, j: int) -> str:
    """Output element (i, j) of a GEMM vector worked end to end (``hscale vectors explain CASE
    I J``)."""
    m, n, k = case.shape
    if not (0 <= i < m and 0 <= j < n):
        raise ValueError(f"case {case.id} is {m} x {n}: there is no output element ({i}, {j})")
    lines = [f"case {case.id} ({file_name}), output element (i={i}, j={j}): {case.describe()}",
             ""]
    b_units = decoded_units(case.b.codes[j:j + 1], case.b.scale_bytes[j:j + 1])[0]
    if case.weight_only:
        lines.append("terms x[i,k] * b[j,k] * sB: activations (bits), weight codes and blocks:")
        x = np.asarray(case.a)[i]
        for start in range(0, k, 16):
            block = start // 16
            lines.append(f"  block {block}: x = {' '.join(hexio.to_words(x[start:start + 16]))}; "
                         f"sB byte 0x{int(case.b.scale_bytes[j, block]):02X}")
    else:
        a_units = decoded_units(case.a.codes[i:i + 1], case.a.scale_bytes[i:i + 1])[0]
        lines.append("per block: sA, sB (bytes), P = sum of the 16 code products, the block value "
                     "sA sB P (exact, NVFP4-GEMM-3):")
        for start in range(0, k, 16):
            block = start // 16
            value = Fraction(int(np.dot(a_units[start:start + 16], b_units[start:start + 16])),
                             2 ** 20)
            lines.append(f"  block {block}: sA 0x{int(case.a.scale_bytes[i, block]):02X} sB "
                         f"0x{int(case.b.scale_bytes[j, block]):02X} -> {float(value)!r}")
    s, total = case.exact.value(i, j), case.exact.magnitude(i, j)
    lines += ["", f"S = {float(s)!r} exactly ({s.numerator}/{s.denominator}); sum |t| = "
              f"{float(total)!r}",
              f"the spec's result (S rounded once to fp32, times fp32(gA gB), to "
              f"{case.out_dtype}): {out_hex(float(case.reference_outputs[i, j]), case.out_dtype)}",
              "", "admissible per accumulation model (NVFP4-GEMM-7):"]
    for name in MODELS:
        allowed = case.admissible(name)
        state = ("one value: every partial sum exact" if allowed.exact[i, j] else
                 f"|S - Ŝ| <= {float(allowed.bound[i, j])!r} (d = {allowed.roundings})")
        if not allowed.judged[i, j]:
            state = f"not judged: {allowed.reason[i, j]}"
        lines.append(f"  {name:<14} {out_hex(allowed.low[i, j], case.out_dtype)} .. "
                     f"{out_hex(allowed.high[i, j], case.out_dtype)}  ({state})")
    orders = block_orders(case, i, j)
    if orders:
        lines += ["", f"fp32 sums of the block values in every order and grouping: "
                  f"{', '.join(orders)}"]
    lines += ["", f"observed-file line: {case.id} {i} {j} "
              f"{_words(case.reference_outputs, case.out_dtype)[i][j]}"]
    return "\n".join(lines)
