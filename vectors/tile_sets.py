"""Golden vectors of the tile kind (docs/spec.md section 13, docs/vectors.md): weights and their
16 x 16-tile quantization, and the quantization of their transpose (NVFP4-2D-2: the transpose of
the first). One set, ``tile_16x16``, as JSON; ``hscale vectors
check --tiles exact`` reads the group lines of ``hscale.vectors.group_lines`` (of W, and of W^T
under the case id with ``-T``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hscale.judge.activation_domain import ObservedActivations
from hscale.judge.findings import fp32_hex, plural
from hscale.judge.tiles import TileCase, diagnose_2d
from hscale.reference.tile_scaling import TILE_RECIPES, quantize_2d

from . import hexio
from .families import SetChoice, case_reader, coverage
from .group_lines import assembled, read_group_lines, write_group_lines

FORMAT_NAME = "hscale-nvfp4-tile-vectors"
SET_PREFIX = "tile_"
SET_NAME = "tile_16x16"
FORMAT_VERSION = 1
CHOICE = SetChoice(
    "--tiles", "tile recipe", lambda: TILE_RECIPES,
    "judge the 2D sets' cases (tile_*) as a 16 x 16 tile quantizer (docs/spec.md section 13); "
    "the observed file holds 'CASE row group byte packed' and 'CASE gs g' lines, of W under "
    "CASE and of W^T under CASE-T",
    "write what a 16 x 16 tile quantizer produces for the tile_* sets (W, and W^T as CASE-T)")


def level0_cases(seed: int = 0) -> list[TileCase]:
    rng = np.random.default_rng(seed)
    outlier = np.full((32, 32), 0.25, np.float32)
    outlier[5, 3], outlier[20, 30] = 96.0, -7.0
    rows = rng.standard_normal((48, 32)) * np.exp(2 * rng.standard_normal((48, 1)))
    cols = rng.standard_normal((32, 64)) * np.exp(2 * rng.standard_normal((1, 64)))
    return [TileCase(outlier.astype(ml_dtypes.bfloat16), "tile-one-outlier-per-tile",
                     "one large element per tile sets the tile's byte", ("NVFP4-2D-1",)),
            TileCase(rows.astype(np.float32).astype(ml_dtypes.bfloat16), "tile-row-magnitudes",
                     "rows of magnitudes e^(2z): 1 x 16 scaling would differ",
                     ("NVFP4-2D-1", "NVFP4-2D-2")),
            TileCase(cols.astype(np.float32).astype(ml_dtypes.bfloat16), "tile-column-magnitudes",
                     "columns of magnitudes e^(2z), a wide tensor", ("NVFP4-2D-1", "NVFP4-2D-2"))]


def _flipped(case: TileCase) -> TileCase:
    return TileCase(np.ascontiguousarray(np.asarray(case.w).T), case.id + "-T",
                    case.title + ", transposed", case.clauses)


def _result_json(result) -> dict:
    return {"global_scale": hexio.scalar_word(result.global_scale),
            "scale_bytes": [bytes(row.astype(np.uint8)).hex() for row in result.scale_bytes],
            "codes": [hexio.nibble_groups(row) for row in result.codes]}


def case_json(case: TileCase) -> dict:
    w = np.asarray(case.w)
    return {"id": case.id, "title": case.title, "clauses": list(case.clauses),
            "inputs": {"dtype": hexio.dtype_name(w.dtype), "shape": list(w.shape),
                       "w": hexio.matrix_rows(w)},
            "expected": {"w": _result_json(quantize_2d(w)),
                         "w_transposed": _result_json(quantize_2d(_flipped(case).w))}}


def case_from_json(entry: dict) -> TileCase:
    inputs = entry["inputs"]
    w = hexio.matrix_from_rows(inputs["w"], inputs["dtype"], tuple(inputs["shape"]))
    return TileCase(w, entry["id"], entry.get("title", ""), tuple(entry.get("clauses", ())))


#: case ``number`` of a set file (``families.case_reader``)
read_case = case_reader(case_from_json)


def render_files(cases, level: int, seed: int, spec_version: str) -> dict[str, bytes]:
    from .formats import dumps
    document = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                "spec_version": spec_version, "level": level, "seed": seed, "set": SET_NAME,
                "kind": "tile", "cases": [case_json(case) for case in cases]}
    return {f"{SET_NAME}.json": dumps(document).encode("ascii")}


def verify_document(name: str, document: dict, level: int, seed: int, spec_version: str):
    """``(problems, the set's files as its stored inputs render, its cases)``."""
    from .verify import verify_cases
    return verify_cases(name, document, "tile", case_from_json, case_json,
                        lambda cases: render_files(cases, level, seed, spec_version))


def expect_lines(cases, recipe: str = "exact", with_global_scale: bool = True) -> list[str]:
    lines = []
    for case in cases:
        for one in (case, _flipped(case)):
            result = quantize_2d(one.w)
            lines += write_group_lines(one.id, result.codes, result.scale_bytes,
                                       result.global_scale)
    return lines


def check_lines(cases, lines: list[str], choice: str, max_errors: int = 20,
                require_all: bool = False, declared=None) -> tuple[list, int]:
    """``(report lines, errors)``: each case the observed lines cover (W under its id, W^T under
    ``<id>-T``) judged as a 16 x 16 tile quantizer's (hscale.judge.tiles; ``choice``: its one
    recipe, exact); ``declared`` limits what ``require_all`` asks for (``families.coverage``)."""
    by_id = {one.id: one for case in cases for one in (case, _flipped(case))}
    seen = read_group_lines(lines, set(by_id), "tile")
    report, errors = [], 0
    for case_id, entry in seen.items():
        case = by_id[case_id]
        expected = quantize_2d(case.w)
        codes, scale_bytes, missing = assembled(entry, expected.codes, expected.scale_bytes)
        if missing:
            report.append(f"{case_id}: {plural(len(missing), 'group')} missing from the file "
                          "(not judged)")
        g = expected.global_scale if entry["gs"] is None else entry["gs"]
        observed = ObservedActivations(codes, scale_bytes, np.float32(g),
                                       np.float32(1) / np.float32(g))
        for finding in diagnose_2d(case, observed).findings:
            errors += 1
            if errors <= max_errors:
                report.append(f"{case_id} {finding.render()}")
    tail, missing = coverage(list(by_id.values()),
                             {i: len(entry["groups"]) for i, entry in seen.items()},
                             lambda case: np.asarray(case.w).size // 16, "group", "tile vectors",
                             require_all, declared)
    return report + tail, errors + missing


def explain(file_name: str, case: TileCase, row: int, group: int) -> str:
    """One 1 x 16 group of W: its tile, the tile's amax and byte, the codes."""
    w = np.asarray(case.w).astype(np.float32)
    m, n = w.shape
    if not (0 <= row < m and 0 <= group < n // 16):
        raise ValueError(f"case {case.id} has {m} rows and {n // 16} groups")
    result = quantize_2d(case.w)
    tile = w[16 * (row // 16):16 * (row // 16 + 1), 16 * group:16 * (group + 1)]
    return "\n".join([
        f"{file_name}: case {case.id} ({case.title}), group (r={row}, i={group}), tile "
        f"({row // 16}, {group})",
        f"  g = {float(result.global_scale)!r} ({fp32_hex(result.global_scale)}), tile amax "
        f"{float(np.abs(tile).max())!r}, byte 0x{int(result.scale_bytes[row, group]):02X} "
        f"(the same on the tile's 16 rows)",
        "  codes " + hexio.nibble_groups(result.codes[row, 16 * group:16 * (group + 1)])])
