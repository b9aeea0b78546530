"""Golden vectors of the rht kind (docs/spec.md section 12, docs/vectors.md): bfloat16 tensors
and, for each variant (TransformerEngine's sign mask 0xD7E8 or a plain transform, the ``exact``
or ``fast-math`` rounding profile; the column-wise copy), the transformed values and their
quantization (global scale, scale bytes, codes); token counts not a multiple of 16 padded with
zero tokens (NVFP4-RHT-1, ``rht_padding = zeros``). One set, ``rht_16x16``, as JSON; ``hscale
vectors check --rht VARIANT`` reads the group lines of ``hscale.vectors.group_lines``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hscale.judge.findings import fp32_hex, plural
from hscale.judge.rht import RhtCase, RhtDomain, diagnose_rht
from hscale.judge.activation_domain import ObservedActivations
from hscale.reference.hadamard import TE_SIGN_MASK
from hscale.reference.rht_quantize import quantize_rht, source_of, transformed

from . import hexio
from .families import SetChoice, case_reader, coverage
from .group_lines import assembled, read_group_lines, write_group_lines

FORMAT_NAME = "hscale-nvfp4-rht-vectors"
#: The clauses of the kind no vector case holds, and why (hscale.vectors.docs' clause table).
NO_VECTOR_CASE = {"NVFP4-RHT-4": (
    "the algebraic check multiplies a kernel's own two quantizations (whatever orthogonal "
    "transform it applies) and compares with dY^T X within a bound: there are no expected codes "
    "to store; the suite judges it (conformance/test_rht.py: the identity probe and wgrad "
    "operands) and tests/judge/test_rht_gemm_judge.py checks what it refuses and admits")}
SET_PREFIX = "rht_"
SET_NAME = "rht_16x16"
FORMAT_VERSION = 1
#: The sets' token counts that are no multiple of 16 are padded with zero tokens (NVFP4-RHT-1).
PADDING = "zeros"
#: variant -> (sign mask, rounding profile); the column-wise axis throughout.
VARIANTS = {"te-exact": (TE_SIGN_MASK, "exact"), "te-fast-math": (TE_SIGN_MASK, "fast-math"),
            "plain-exact": (0, "exact"), "plain-fast-math": (0, "fast-math")}
CHOICE = SetChoice(
    "--rht", "variant", lambda: tuple(VARIANTS),
    "judge the RHT sets' cases (rht_*) as a kernel of this variant: te-exact, te-fast-math, "
    "plain-exact, plain-fast-math (sign mask 0xD7E8 or none, docs/spec.md section 12); the "
    "observed file holds 'CASE row group byte packed' and 'CASE gs g' lines of the "
    "transformed (column-wise) tensor",
    "write what an RHT kernel of this variant produces for the rht_* sets")


def _bf16(rows) -> np.ndarray:
    return np.asarray(rows, np.float32).astype(ml_dtypes.bfloat16)


def level0_cases(seed: int = 0) -> list[RhtCase]:
    rng = np.random.default_rng(seed)
    outliers = np.full((32, 32), 0.5, np.float32)
    outliers[::16] = 40.0
    ties = np.zeros((16, 16), np.float32)
    ties[0], ties[1] = 1.0, 2.0 ** -8  # y = (1 +- 2^-8) / 4: a bfloat16 tie in every column
    mixed = rng.standard_normal((32, 32)) * np.exp(2 * rng.standard_normal((32, 1)))
    return [
        RhtCase(_bf16(outliers), "rht-outliers", "one outlier of 40 per block of 16 tokens",
                ("NVFP4-RHT-1", "NVFP4-RHT-3")),
        RhtCase(_bf16(ties), "rht-bf16-ties", "transformed values on bfloat16 ties: the exact "
                "profile rounds them to even, fast-math keeps them", ("NVFP4-RHT-2",)),
        RhtCase(_bf16(mixed), "rht-mixed-magnitudes", "tokens of magnitudes e^(2z)",
                ("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")),
        RhtCase(_bf16(rng.standard_normal((16, 48))), "rht-wide", "16 tokens, 48 features: "
                "one block along the transformed axis", ("NVFP4-RHT-1",)),
        RhtCase(_bf16(rng.standard_normal((20, 32))), "rht-padded-20-tokens", "20 tokens: "
                "padded with 12 zero tokens to 32 (rht_padding = zeros)",
                ("NVFP4-RHT-1", "NVFP4-RHT-3")),
        RhtCase(_bf16(np.exp(rng.standard_normal((40, 16))) * 8), "rht-padded-40-tokens",
                "40 tokens of one sign: the 8 zero tokens of the last block transformed with "
                "it (rht_padding = zeros)", ("NVFP4-RHT-1",)),
    ]


def padded_source(case: RhtCase) -> np.ndarray:
    """The transformed tensor's source (features, tokens), tokens padded with zeros."""
    return source_of(case.x, "columnwise", PADDING)


def _expected(case: RhtCase) -> dict:
    out = {}
    for variant, (mask, profile) in VARIANTS.items():
        y = transformed(case.x, mask=mask, profile=profile, padding=PADDING)
        result = quantize_rht(case.x, mask=mask, profile=profile, padding=PADDING)
        out[variant] = (y, result)
    return out


def case_json(case: RhtCase) -> dict:
    x = np.asarray(case.x)
    return {"id": case.id, "title": case.title, "clauses": list(case.clauses),
            "inputs": {"dtype": "bfloat16", "shape": list(x.shape), "x": hexio.matrix_rows(x)},
            "expected": {variant: {
                "y": hexio.matrix_rows(y),
                "global_scale": hexio.scalar_word(result.global_scale),
                "scale_bytes": [bytes(row.astype(np.uint8)).hex() for row in result.scale_bytes],
                "codes": [hexio.nibble_groups(row) for row in result.codes]}
                for variant, (y, result) in _expected(case).items()}}


def case_from_json(entry: dict) -> RhtCase:
    inputs = entry["inputs"]
    x = hexio.matrix_from_rows(inputs["x"], inputs["dtype"], tuple(inputs["shape"]))
    return RhtCase(x, entry["id"], entry.get("title", ""), tuple(entry.get("clauses", ())))


#: case ``number`` of a set file (``families.case_reader``)
read_case = case_reader(case_from_json)


def render_files(cases, level: int, seed: int, spec_version: str) -> dict[str, bytes]:
    from .formats import dumps
    document = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                "spec_version": spec_version, "level": level, "seed": seed, "set": SET_NAME,
                "kind": "rht", "variants": {v: {"sign_mask": f"0x{m:04X}", "profile": p}
                                            for v, (m, p) in VARIANTS.items()},
                "axis": "columnwise: the transposed copy (features, tokens) is transformed and "
                        "quantized", "padding": "zeros: a token count not a multiple of 16 is "
                        "padded with zero tokens (a kernel that refuses such tensors, "
                        "rht_padding = refuse, is not judged on the rht-padded-* cases)",
                "cases": [case_json(case) for case in cases]}
    return {f"{SET_NAME}.json": dumps(document).encode("ascii")}


def verify_document(name: str, document: dict, level: int, seed: int, spec_version: str):
    """``(problems, the set's files as its stored inputs render, its cases)``."""
    from .verify import verify_cases
    return verify_cases(name, document, "rht", case_from_json, case_json,
                        lambda cases: render_files(cases, level, seed, spec_version))


def expect_lines(cases, variant: str, with_global_scale: bool = True) -> list[str]:
    mask, profile = VARIANTS[variant]
    lines = []
    for case in cases:
        result = quantize_rht(case.x, mask=mask, profile=profile, padding=PADDING)
        lines += write_group_lines(case.id, result.codes, result.scale_bytes,
                                   result.global_scale)
    return lines


def check_lines(cases, lines: list[str], choice: str, max_errors: int = 20,
                require_all: bool = False, declared=None) -> tuple[list, int]:
    """``(report lines, errors)``: each case the observed lines cover judged as a kernel of the
    variant ``choice`` (hscale.judge.rht); ``declared`` limits what ``require_all`` asks for
    (``families.coverage``)."""
    mask, profile = VARIANTS[choice]
    domain = RhtDomain(mask, profile, "columnwise", PADDING)
    by_id = {case.id: case for case in cases}
    seen = read_group_lines(lines, set(by_id), "rht")
    report, errors = [], 0
    for case_id, entry in seen.items():
        case = by_id[case_id]
        expected = quantize_rht(case.x, mask=mask, profile=profile, padding=PADDING)
        codes, scale_bytes, missing = assembled(entry, expected.codes, expected.scale_bytes)
        if missing:
            report.append(f"{case_id}: {plural(len(missing), 'group')} missing from the file "
                          "(not judged)")
        g = expected.global_scale if entry["gs"] is None else entry["gs"]
        observed = ObservedActivations(codes, scale_bytes, np.float32(g),
                                       np.float32(1) / np.float32(g))
        for finding in diagnose_rht(case, observed, domain).findings:
            errors += 1
            if errors <= max_errors:
                report.append(f"{case_id} {finding.render()}")
    tail, missing = coverage(cases, {i: len(entry["groups"]) for i, entry in seen.items()},
                             lambda case: padded_source(case).size // 16, "group", "rht vectors",
                             require_all, declared)
    return report + tail, errors + missing


def explain(file_name: str, case: RhtCase, row: int, group: int) -> str:
    """One group of the transformed tensor (row = feature, group = 16 tokens) under every
    variant: the 16 inputs, the transformed values, the byte and codes."""
    x = padded_source(case).T  # (tokens padded to a multiple of 16, features)
    features, tokens = x.shape[1], x.shape[0]
    if not (0 <= row < features and 0 <= group < tokens // 16):
        raise ValueError(f"case {case.id}: the transformed tensor has {features} rows and "
                         f"{tokens // 16} groups")
    span = slice(16 * group, 16 * (group + 1))
    lines = [f"{file_name}: case {case.id} ({case.title}), transformed row {row} (feature), "
             f"group {group} (tokens {16 * group}..{16 * group + 15})",
             "  x: " + " ".join(f"{float(v):g}" for v in x[span, row].astype(np.float32))]
    for variant, (y, result) in _expected(case).items():
        lines.append(f"  {variant:<16} y: " + " ".join(
            f"{float(v):g}" for v in np.asarray(y)[row, span].astype(np.float32)))
        lines.append(f"  {'':<16} g {fp32_hex(result.global_scale)}, byte "
                     f"0x{int(result.scale_bytes[row, group]):02X}, codes "
                     f"{hexio.nibble_groups(result.codes[row, span])}")
    return "\n".join(lines)
