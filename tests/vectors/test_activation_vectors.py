"""The activation golden vectors (the act_* sets of vectors/level0, hscale.vectors.activation_sets):
what they store, against an independent derivation of the hand-worked cases; verify finds a
tampered file; check --recipe judges a third party's result file as the suite would; expect
and explain work on them; the hex lines have the documented fields."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors

from helpers.cli import Run, hscale_here

ACT_SETS = sorted(p.name for p in LEVEL0_DIR.glob("act_*.json"))


def _hscale(*args, cwd=None) -> Run:
    return hscale_here(["vectors", *args], cwd=cwd)


def _cases() -> dict:
    return {case_id: case for case_id, (_, case) in open_vectors(LEVEL0_DIR).family_cases.items()}


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-2", "NVFP4-ACT-6", "NVFP4-ACT-7")
def test_the_hand_worked_cases_store_what_the_spec_derives():
    """The stored bytes of the spec's hand-worked cases (tests/reference/test_activation_recipes.py
    derives each with fractions) and the bytes fast-math admits besides."""
    cases = _cases()
    stored = {i: {r: int(cases[i].expected[r].scale_bytes[0, 0]) for r in cases[i].expected}
              for i in ("act-recipes-association", "act-recipes-reciprocal-error",
                        "act-recipes-code-tie")}
    assert stored["act-recipes-association"] == {"fast-math": 0x0C, "exact": 0x0D,
                                                 "torchao": 0x0C}
    assert stored["act-recipes-reciprocal-error"] == {"fast-math": 0x02, "exact": 0x02,
                                                      "torchao": 0x08}
    assert stored["act-recipes-code-tie"] == {"fast-math": 0x30, "exact": 0x30, "torchao": 0x30}
    document = json.loads((LEVEL0_DIR / "act_fp32_static.json").read_text())
    entry = next(c for c in document["cases"] if c["id"] == "act-recipes-reciprocal-error")
    assert entry["fast_math_admissible_bytes"] == [[0, 0, [1, 2]]]
    under = cases["act-underflow-to-zero-byte"].expected
    assert [int(under[r].scale_bytes[0, 0]) for r in ("fast-math", "exact", "torchao")] == \
        [0x00, 0x00, 0x08]
    assert under["exact"].codes[0, :4].tolist() == [0x7, 0xF, 0x0, 0x8]
    saturated = cases["act-static-scale-below-amax"].expected
    for recipe, result in saturated.items():
        assert not np.isin(result.scale_bytes, (0x7F, 0xFF)).any(), recipe
        assert (result.scale_bytes[1:, 0] == 0x7E).all(), recipe


@pytest.mark.clause("NVFP4-ACT-10")
def test_the_stored_layouts_are_the_row_major_bytes_swizzled():
    """swizzled_128x4 and swizzled_8x4 of the padding cases, read back by the judges' own
    reshapes, are the row-major bytes, and every padding byte is 0x00."""
    from hscale.judge.domain import unswizzle_layout
    document = json.loads((LEVEL0_DIR / "act_bf16_static.json").read_text())
    for entry in document["cases"]:
        if not entry["id"].startswith("act-layout-padding"):
            continue
        tokens, n = entry["inputs"]["shape"]
        for recipe, result in entry["expected"].items():
            rows = np.array([list(bytes.fromhex(r)) for r in result["scale_bytes"]], np.uint8)
            for layout in ("swizzled-128x4", "swizzled-8x4"):
                buffer = np.frombuffer(bytes.fromhex("".join(result[layout.replace("-", "_")
                                                             .replace("swizzled_", "swizzled_")
                                                             ])), np.uint8)
                back, padding = unswizzle_layout(buffer, layout, tokens, n // 16)
                assert np.array_equal(back, rows) and not padding.any(), (entry["id"], layout)


@pytest.mark.clause("NVFP4-ACT-5")
def test_verify_finds_a_tampered_activation_file(tmp_path):
    copy = tmp_path / "level0"
    shutil.copytree(LEVEL0_DIR, copy)  # the committed set verifies (test_vectors.py)
    path = copy / "act_fp32_static.json"
    document = json.loads(path.read_text())
    entry = next(c for c in document["cases"] if c["id"] == "act-recipes-association")
    entry["expected"]["exact"]["scale_bytes"] = ["0c"]
    path.write_text(json.dumps(document, sort_keys=True, indent=1) + "\n")
    done = _hscale("verify", str(copy))
    assert done.returncode == 1, done.stdout
    assert "act_fp32_static.json: case act-recipes-association: expected.exact.scale_bytes" \
        in done.stdout, done.stdout


@pytest.mark.clause("NVFP4-ACT-5", "NVFP4-ACT-2", "NVFP4-ACT-6")
def test_check_judges_an_observed_file_under_the_recipe(tmp_path):
    """What an exact kernel writes conforms under exact and not under fast-math (the
    association case, NVFP4-ACT-2); a planted NaN byte is named NVFP4-ACT-8."""
    out = tmp_path / "exact.txt"
    assert _hscale("expect", "--recipe", "exact", "--out", str(out)).returncode == 0
    lines = out.read_text().splitlines()
    assert any(line.startswith("act-recipes-association 0 0 0d ") for line in lines), lines[:5]
    same = _hscale("check", "--recipe", "exact", "--observed", str(out))
    assert same.returncode == 0 and "conforms" in same.stdout, same.stdout + same.stderr
    other = _hscale("check", "--recipe", "fast-math", "--observed", str(out))
    assert other.returncode == 1, other.stdout
    assert "act-recipes-association [NVFP4-ACT-2] group (r=0, i=0)" in other.stdout
    planted = [line.replace(" 7e ", " 7f ", 1) if line.startswith(
        "act-static-scale-below-amax 2 0 ") else line for line in lines]
    (tmp_path / "nan.txt").write_text("\n".join(planted) + "\n")
    nan = _hscale("check", "--recipe", "exact", "--observed", str(tmp_path / "nan.txt"))
    assert nan.returncode == 1 and "[NVFP4-ACT-8]" in nan.stdout and "is NaN" in nan.stdout, \
        nan.stdout
    # a file holding part of the vectors says how much it held, and --require-all fails it
    from hscale.vectors.activation_sets import check_lines
    cases = [case for case in _cases().values() if case.id.startswith("act-")]
    total = sum(case.shape[0] * (case.shape[1] // 16) for case in cases)
    report, errors = check_lines(cases, lines[:3], "exact")
    assert errors == 0 and report[-1] == (f"2 of {total} groups of the activation vectors "
                                          f"observed; {len(cases) - 1} cases absent from the "
                                          "file"), report
    assert report[0].startswith(f"{lines[0].split()[0]}: ") and report[0].endswith(
        "groups missing from the file (not judged)"), report
    (tmp_path / "part.txt").write_text("\n".join(lines[:3]) + "\n")
    strict = _hscale("check", "--recipe", "exact", "--require-all", "--observed",
                     str(tmp_path / "part.txt"))
    assert strict.returncode == 1 and "missing from the observed file (--require-all)" in \
        strict.stdout, strict.stdout


@pytest.mark.clause("NVFP4-ACT-5")
def test_explain_works_an_activation_group_through_every_recipe():
    done = _hscale("explain", "act-recipes-reciprocal-error")
    assert done.returncode == 0, done.stderr
    assert "fast-math g = 3.0: scale byte 0x02" in done.stdout
    assert "torchao   g = 3.0: scale byte 0x08" in done.stdout
    assert "fast-math also admits the bytes 0x01, 0x02" in done.stdout


@pytest.mark.clause("NVFP4-ACT-5")
@pytest.mark.parametrize("name", ACT_SETS)
def test_each_hex_line_has_the_documented_fields(name):
    text = (LEVEL0_DIR / name.replace(".json", ".hex")).read_text().splitlines()
    fields = [line for line in text if line.startswith("//   ") and "hex digits" in line]
    data = [line for line in text if not line.startswith("//")]
    assert data, name
    for line in data:
        parts = line.split("_")
        assert len(parts) == len(fields), (name, line)
        widths = [int(f.split()[2]) for f in fields]
        assert [len(p) for p in parts] == widths, (name, line)


@pytest.mark.clause("NVFP4-ACT-5")
def test_a_case_naming_every_recipe_counts_for_the_declared_one_only():
    """A vector case names every recipe's clauses; run on a kernel of one recipe it counts for
    that recipe's clauses, and a test of one recipe keeps its clauses (skipped elsewhere, it
    says why)."""
    from hscale.judge.activations import judged_under
    every = ["NVFP4-ACT-8", "NVFP4-ACT-2", "NVFP4-ACT-3", "NVFP4-ACT-6", "NVFP4-ACT-7"]
    assert judged_under("fast-math", every) == ["NVFP4-ACT-8", "NVFP4-ACT-2", "NVFP4-ACT-3"]
    assert judged_under("exact", every) == ["NVFP4-ACT-8", "NVFP4-ACT-6"]
    assert judged_under("torchao", every) == ["NVFP4-ACT-8", "NVFP4-ACT-7"]
    assert judged_under("fast-math", ["NVFP4-ACT-1", "NVFP4-ACT-6"]) == ["NVFP4-ACT-1",
                                                                         "NVFP4-ACT-6"]
