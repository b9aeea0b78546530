"""Clause IDs (read from docs/spec.md) and the named allowances of the faithful profile."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SPEC_PATH = REPO_ROOT / "docs" / "spec.md"

#: A clause ID: ``NVFP4-E2M1-1``, ``HSCALE-OBJ-1``, ...
CLAUSE_RE = re.compile(r"\b(?:NVFP4|HSCALE)-[A-Z0-9]+-\d+\b")
#: How a clause is cited in failure messages (and found again by the report): ``[HSCALE-OBJ-1]``.
CITED_RE = re.compile(r"\[((?:NVFP4|HSCALE)-[A-Z0-9]+-\d+)\]")
#: Clauses of the suite itself (its self-tests), not of the spec.
SUITE_PREFIX = "SUITE-"

#: Used only when docs/spec.md is missing (a partial checkout).
FALLBACK_CLAUSES = {
    "NVFP4-E2M1-1": "element code layout and magnitude table",
    "NVFP4-E2M1-2": "element rounding: RNE ties-to-even, saturation, threshold form",
    "NVFP4-E2M1-3": "sign bit from w, -0.0 included",
    "NVFP4-E4M3-1": "scale byte decode",
    "NVFP4-E4M3-2": "E4M3 encode, RNE satfinite",
    "NVFP4-E4M3-3": "the ladder, bytes 1..126",
    "NVFP4-GS-1": "global scale formula",
    "NVFP4-GS-2": "amax 0 -> 1.0, below min normal raised",
    "NVFP4-GS-3": "a caller-supplied s_g is used unchanged",
    "NVFP4-INIT-1": "max-abs initial byte",
    "NVFP4-INIT-2": "4over6 initial byte",
    "NVFP4-ZERO-1": "zero groups",
    "HSCALE-WIN-1": "the candidate window",
    "HSCALE-OBJ-1": "the objective",
    "HSCALE-ARGMIN-1": "argmin, tie rule, reported delta",
    "HSCALE-METHOD-1": "methods rtn / scale-only / hscale",
    "NVFP4-PACK-1": "nibble packing",
    "NVFP4-PACK-2": "row-major scale bytes",
    "NVFP4-PACK-3": "swizzled scale layout",
    "NVFP4-DEQ-1": "dequantization",
    "NVFP4-IN-1": "input validation: weight",
    "NVFP4-IN-2": "input validation: hessian_diag",
    "NVFP4-IN-3": "input validation: K, U",
    "NVFP4-IN-4": "input validation: global_scale, scale_ceiling",
    "NVFP4-IN-5": "input validation: method, init",
    "HSCALE-CAL-1": "calibration",
}

# The allowances of the faithful profile (docs/spec.md section 7, docs/conformance.md).
ALLOWANCES = {
    "zero-group-byte": "a zero group may carry any scale byte 0x00..0x7E (ModelOpt 1.0, "
                       "torchao 2^-6, compressed-tensors 0.125); its codes must still be sign "
                       "and magnitude 0, its delta is not checked",
    "negative-zero": "an element whose code is sign-and-magnitude-0 (an exact -0.0, or a "
                     "negative that rounds to 0) may be 0x0 instead of 0x8",
    "fp32-scale-rounding": "the group quotient amax_g / (6 s_g) computed in fp32 in another "
                           "order: the initial byte may be one rung off where the quotient is "
                           "within 2^-20 (relative) of an E4M3 midpoint",
    "reciprocal-multiply": "element codes from |w| * fp32(1/s): a code may be either neighbour "
                           "where |w|/s is within 2^-20 (relative) of an E2M1 midpoint",
    "no-subnormal-scales": "scale bytes clamped to the smallest normal E4M3 0x08: the initial "
                           "byte may be max(c0, 0x08) and the window is clipped at 0x08",
    "reciprocal-global-scale": "s_g derived from the stored reciprocal 6C/amax: it may be one "
                               "fp32 ulp off the spec's s_g, and initial bytes and codes near a "
                               "midpoint (2^-20 relative) may go either way",
}


def read_spec_clauses(path: Path | None = None) -> tuple[list[str], str]:
    """Every clause ID in docs/spec.md, sorted, and where they came from."""
    path = SPEC_PATH if path is None else Path(path)
    if path.is_file():
        ids = sorted(set(CLAUSE_RE.findall(path.read_text(encoding="utf-8"))))
        if ids:
            return ids, str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT)
                            else path)
    return sorted(FALLBACK_CLAUSES), "built-in clause list (docs/spec.md not found)"


def cited_clauses(text: str) -> list[str]:
    """The clause IDs a failure message cites, ``[ID]``, in order, without repeats."""
    seen = []
    for cid in CITED_RE.findall(text or ""):
        if cid not in seen:
            seen.append(cid)
    return seen
