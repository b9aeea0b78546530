"""Golden vectors (vectors/, docs/vectors.md): the committed level-0 set is what the reference
generates, every clause has a level-0 case, and the verify / check commands catch drift and
wrong results."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from hscale.reference import SCALE_BYTE_VALUES, candidate_errors, priority_order
from hscale.reference.e2m1 import E2M1_VALUES, encode_e2m1
from hscale.reference.window import window_bytes
from hscale import files
from hscale.vectors import formats, hexio
from hscale.judge.clauses import clause_ids
from hscale.vectors.catalogue import DEFAULT_SEED, ORDER_TRAPS, clause_index, level0_cases
from hscale.vectors.check import check, load_vectors, observed_lines
from hscale.cli.vectors import add_parser as add_vectors_parser, run_vectors
from hscale.vectors.docs import (BEGIN, END, EXAMPLE_BEGIN, EXAMPLE_END, block, clause_table,
                                 worked_example)
from hscale.vectors.generate import generate_files, write_files
from hscale.vectors.ties import load_tie_table, tie_pattern
from hscale.vectors.verify import verify_dir

from helpers.cli import hscale_here
from helpers.paths import REPO_ROOT

LEVEL0 = REPO_ROOT / "vectors" / "level0"
DOC = REPO_ROOT / "docs" / "vectors.md"


@pytest.fixture(scope="module")
def level0_files():
    return generate_files(0, DEFAULT_SEED)


@pytest.fixture()
def level0_copy(tmp_path):
    target = tmp_path / "level0"
    shutil.copytree(LEVEL0, target)
    return target


# ------------------------------------------------------------------------------------------
# The committed set
# ------------------------------------------------------------------------------------------

def test_committed_level0_is_what_the_reference_generates(level0_files):
    committed = {p.name: p.read_bytes() for p in LEVEL0.iterdir() if p.is_file()}
    missing = sorted(set(level0_files) - set(committed))
    extra = sorted(set(committed) - set(level0_files))
    changed = sorted(n for n in set(level0_files) & set(committed)
                     if level0_files[n] != committed[n])
    assert not (missing or extra or changed), (
        f"vectors/level0 drifted from the reference and catalogue: missing {missing}, extra "
        f"{extra}, changed {changed}. If the change is intended, regenerate with "
        f"`hscale vectors generate --out vectors/level0` and review the diff.")


def test_committed_level0_verifies():
    """``hscale vectors verify`` on the committed set: no problem, exit 0 (in this process;
    tests/cli/test_cli_errors.py runs it in a fresh one)."""
    done = hscale_here(["vectors", "verify", LEVEL0])
    assert done.returncode == 0 and done.stdout.startswith(f"{LEVEL0}: OK"), (
        done.stdout + done.stderr + done.trace)


def test_committed_level0_is_small():
    total = sum(p.stat().st_size for p in LEVEL0.iterdir())
    assert total < 5 * 1024 * 1024, total


def test_manifest_lists_every_file_with_its_sha256():
    manifest = json.loads((LEVEL0 / formats.MANIFEST).read_text())
    import hscale
    assert manifest["spec_version"] == hscale.SPEC_VERSION
    on_disk = {p.name for p in LEVEL0.iterdir()} - {formats.MANIFEST, formats.SHA256SUMS}
    assert set(manifest["files"]) == on_disk
    for name, info in manifest["files"].items():
        assert formats.sha256((LEVEL0 / name).read_bytes()) == info["sha256"], name
    sums = (LEVEL0 / formats.SHA256SUMS).read_text().splitlines()
    assert sorted(line.split("  ")[1] for line in sums) == sorted(on_disk)


# ------------------------------------------------------------------------------------------
# Clause coverage
# ------------------------------------------------------------------------------------------

def test_every_clause_has_a_level0_case():
    """Every clause has a case, or a stated reason (the checkpoint layouts only)."""
    from hscale.vectors.catalogue import NO_VECTOR_CASE, DEFAULT_SEED
    from hscale.vectors.families import level0_family_cases
    every = level0_cases() + [c for cases in level0_family_cases(DEFAULT_SEED).values()
                              for c in cases]
    covered = clause_index(every)
    from hscale.vectors.families import no_vector_case
    missing = [c for c in clause_ids() if c not in covered and c not in NO_VECTOR_CASE
               and c not in no_vector_case()]
    assert not missing, f"clauses without a level-0 vector case: {missing}"
    assert set(NO_VECTOR_CASE) == {"NVFP4-CKPT-1", "NVFP4-CKPT-2", "NVFP4-CKPT-3",
                                   "NVFP4-ACT-4", "NVFP4-ACT-9", "NVFP4-GGUF-1", "NVFP4-CKPT-4",
                                   "HSCALE-CAL-2", "NVFP4-CKPT-5", "NVFP4-CKPT-6",
                                   "NVFP4-GGUF-2", "HSCALE-CAL-3"}
    assert not set(NO_VECTOR_CASE) & set(covered), "a clause with a case needs no reason"
    assert "NVFP4-GS-4" in covered


def test_cases_cite_only_known_clauses():
    known = set(clause_ids())
    unknown = {c for case in level0_cases() for c in case.clauses if c not in known}
    assert not unknown, f"cases cite clause IDs that docs/spec.md does not define: {unknown}"


def test_every_input_clause_has_an_expected_error_case():
    errors = {case.expect_error for case in level0_cases() if case.expect_error}
    for clause in ("NVFP4-IN-1", "NVFP4-IN-2", "NVFP4-IN-3", "NVFP4-IN-4", "NVFP4-IN-5"):
        assert clause in errors, clause


def test_docs_generated_blocks_are_current():
    from hscale.vectors.docs import WIDTHS_BEGIN, WIDTHS_END, line_width_table
    text = DOC.read_text()
    assert block(text, BEGIN, END) == clause_table(), (
        "docs/vectors.md clause table is stale; run `python tools/vectors_maintain.py docs`")
    assert block(text, WIDTHS_BEGIN, WIDTHS_END) == line_width_table(), (
        "docs/vectors.md line-width table is stale; run `python tools/vectors_maintain.py docs`")
    assert block(text, EXAMPLE_BEGIN, EXAMPLE_END) == worked_example(), (
        "docs/vectors.md worked example is stale; run `python -m hscale.vectors.maintain docs`")


# ------------------------------------------------------------------------------------------
# Determinism
# ------------------------------------------------------------------------------------------

def test_same_seed_gives_byte_identical_files(tmp_path, level0_files):
    """A second generation with the same seed gives the same bytes, written twice the same
    files; another seed reaches the random cases (two generations, not five: each is seconds)."""
    again = generate_files(0, DEFAULT_SEED)
    assert again == level0_files
    first, second = tmp_path / "a", tmp_path / "b"
    write_files(first, again)
    write_files(second, level0_files)
    for path in first.iterdir():
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name
    name = "fp32_hscale_maxabs_K16_U6_C448.json"
    assert generate_files(0, DEFAULT_SEED + 1)[name] != level0_files[name]


def test_npz_has_no_timestamps_and_matches_json():
    import zipfile
    path = LEVEL0 / "fp32_hscale_maxabs_K16_U6_C448.npz"
    with zipfile.ZipFile(path) as archive:
        assert {info.date_time for info in archive.infolist()} == {files.ZIP_DATE}
    vectors = load_vectors(LEVEL0)
    with np.load(path, allow_pickle=False) as data:
        ids = list(data["case_ids"])
        for index, case_id in enumerate(ids):
            case = vectors[case_id][1]
            p = f"c{index:03d}_"
            assert np.array_equal(data[p + "weight_bits"], hexio.bits(case.weight))
            assert np.array_equal(data[p + "scale_bytes"], case.expected.scale_bytes)
            assert np.array_equal(data[p + "packed"], case.expected.packed)
            assert np.array_equal(data[p + "dequantized"].view(np.uint32),
                                  case.expected.dequantize().view(np.uint32))


def _readmemh_words(text: str) -> list[int]:
    """What $readmemh reads: // comments dropped, '_' ignored, one word per token."""
    words = []
    for line in text.splitlines():
        line = line.split("//", 1)[0]
        words += [int(token.replace("_", ""), 16) for token in line.split()]
    return words


def test_hex_file_columns_match_the_header_and_json():
    path = LEVEL0 / "fp32_hscale_maxabs_K16_U6_C448.hex"
    text = path.read_text()
    fields = {}
    for match in re.finditer(r"^//\s+(\w+)\s+(\d+)\s+\[\s*(\d+):\s*(\d+)\]", text, re.M):
        fields[match.group(1)] = (int(match.group(3)), int(match.group(4)))
    words = _readmemh_words(text)
    document = json.loads((LEVEL0 / "fp32_hscale_maxabs_K16_U6_C448.json").read_text())
    vectors = load_vectors(LEVEL0)

    def field(word, name):
        hi, lo = fields[name]
        return (word >> lo) & ((1 << (hi - lo + 1)) - 1)

    expected_count = sum(vectors[c["id"]][1].shape[0] * c["inputs"]["shape"][1] // 16
                         for c in document["cases"])
    assert len(words) == expected_count
    for word in words[::37]:
        case = vectors[document["cases"][field(word, "case")]["id"]][1]
        r, i = field(word, "row"), field(word, "group")
        assert field(word, "scale") == case.expected.scale_bytes[r, i]
        assert field(word, "c0") == case.expected.initial_bytes[r, i]
        assert field(word, "packed") == int(case.expected.packed[r, 8 * i:8 * i + 8].tobytes()
                                            .hex(), 16)
        assert field(word, "w5") == hexio.bits(case.weight)[r, 16 * i + 5]
        assert field(word, "h15") == hexio.bits(case.hessian_diag)[16 * i + 15]
        assert field(word, "deq0") == case.expected.dequantize().view(np.uint32)[r, 16 * i]


# ------------------------------------------------------------------------------------------
# verify
# ------------------------------------------------------------------------------------------

def test_vectors_made_under_an_earlier_minor_spec_version_still_verify(tmp_path):
    """docs/spec.md, How the version changes: vectors apply within one major version. A set
    stamped with another minor version verifies (its headers as made); another major is named."""
    import hscale
    from hscale.vectors.generate import render_level
    major, minor = (int(part) for part in hscale.SPEC_VERSION.split("."))
    cases = {"weight": level0_cases(DEFAULT_SEED)[:12]}
    for version, ok in ((f"{major}.{minor + 7}", True), (f"{major + 1}.0", False)):
        out = tmp_path / version
        write_files(out, render_level(cases, 0, DEFAULT_SEED, spec_version=version))
        problems = verify_dir(out)
        if ok:
            assert problems == [], problems
        else:
            assert "apply within one major version" in problems[0], problems


def test_verify_names_file_and_case_on_drift(level0_copy):
    name = "fp32_rtn_maxabs_C448.json"
    document = json.loads((level0_copy / name).read_text())
    case = next(c for c in document["cases"] if c["id"] == "e2m1-midpoint-ties")
    case["expected"]["scale_bytes"][1] = "3c"
    (level0_copy / name).write_text(formats.dumps(document))
    problems = verify_dir(level0_copy)
    assert any(name in p and "e2m1-midpoint-ties" in p and "scale_bytes" in p for p in problems)
    assert any("SHA-256" in p for p in problems)


def test_verify_catches_a_changed_hex_file_even_with_a_fixed_manifest(level0_copy):
    name = "fp32_rtn_maxabs_C448.hex"
    text = (level0_copy / name).read_text().replace("_38_38_00_", "_38_39_00_", 1)
    (level0_copy / name).write_text(text)
    manifest = json.loads((level0_copy / formats.MANIFEST).read_text())
    manifest["files"][name]["sha256"] = formats.sha256(text.encode())
    (level0_copy / formats.MANIFEST).write_text(formats.dumps(manifest))
    problems = verify_dir(level0_copy)
    assert any(p.startswith(name) and "case " in p for p in problems), problems


def test_verify_cli_exit_status(level0_copy):
    """A directory with drift: exit 1, each problem on a DRIFT line (exit 0 on the committed
    set: test_committed_level0_verifies)."""
    (level0_copy / "errors.json").write_text("{}")
    bad = hscale_here(["vectors", "verify", level0_copy])
    assert bad.returncode == 1
    assert "DRIFT errors.json" in bad.stdout


# ------------------------------------------------------------------------------------------
# check (third-party results)
# ------------------------------------------------------------------------------------------

def _observed(tmp_path, lines) -> Path:
    path = tmp_path / "observed.txt"
    path.write_text("# a third party's results\n" + "\n".join(lines) + "\n")
    return path


def _run_check(path, **kwargs) -> tuple[int, str]:
    out = io.StringIO()
    status = check(LEVEL0, path, out=out, **kwargs)
    return status, out.getvalue()


def test_check_passes_a_correct_result_file(tmp_path):
    status, text = _run_check(_observed(tmp_path, observed_lines(LEVEL0)), require_all=True)
    assert status == 0, text
    assert ", 0 errors;" in text


def test_check_catches_a_single_flipped_nibble(tmp_path):
    lines = observed_lines(LEVEL0)
    index = lines.index(next(l for l in lines if l.startswith("e2m1-midpoint-ties 0 0 ")))
    case_id, row, group, byte, packed = lines[index].split()
    # element 3 is the high nibble of byte 1 (hex digits 2..3: high digit first)
    flipped = packed[:2] + format(int(packed[2], 16) ^ 0x1, "x") + packed[3:]
    lines[index] = " ".join((case_id, row, group, byte, flipped))
    status, text = _run_check(_observed(tmp_path, lines))
    assert status == 1
    assert f"=> {byte.upper()} {flipped.upper()}  expected: {byte.upper()} {packed.upper()}" in text
    assert "[NVFP4-E2M1-2] group (r=0, i=0) element j=3: " in text
    assert "w=" in text and "s_g=3F800000" in text


def test_check_catches_a_single_wrong_scale_byte(tmp_path):
    lines = observed_lines(LEVEL0)
    index = lines.index(next(l for l in lines if l.startswith("random-normal-hscale 2 3 ")))
    case_id, row, group, byte, packed = lines[index].split()
    wrong = format(int(byte, 16) + 1, "02x")
    lines[index] = " ".join((case_id, row, group, wrong, packed))
    status, text = _run_check(_observed(tmp_path, lines))
    assert status == 1
    assert f"=> {wrong.upper()} {packed.upper()}  expected: {byte.upper()} {packed.upper()}" in text
    assert re.search(r"scale byte expected 0x.. \(delta [+-]\d+, E = .*\) observed 0x.. "
                     r"\(delta [+-]\d+, E = ", text)  # both candidates' objectives are shown
    assert "h=" in text


def test_check_stops_after_n_errors(tmp_path):
    lines = [re.sub(r" ([0-9a-f]{2}) ", lambda m: f" {int(m.group(1), 16) ^ 1:02x} ", l, 1)
             if " gs " not in l else l for l in observed_lines(LEVEL0)]
    status, text = _run_check(_observed(tmp_path, lines), max_errors=3)
    assert status == 1
    assert text.count("  expected: ") == 3
    assert "stopped after 3 errors" in text


def test_check_reports_swapped_nibbles_and_sign_bits_and_global_scale(tmp_path):
    lines = observed_lines(LEVEL0)
    out = []
    for line in lines:
        f = line.split()
        if f[0] == "random-fp16-rtn" and f[1:3] == ["0", "0"]:
            f[4] = "".join(f[4][i + 1] + f[4][i] for i in range(0, 16, 2))
        if f[0] == "e2m1-signed-zeros" and f[1:3] == ["0", "0"]:
            f[4] = f[4][:2] + format(int(f[4][2], 16) ^ 8, "x") + f[4][3:]
        if f[0] == "gs-division-trap" and f[1] == "gs":
            f[2] = "399638af"
        out.append(" ".join(f))
    status, text = _run_check(_observed(tmp_path, out))
    assert status == 1
    assert "[NVFP4-PACK-1] group (r=0, i=0): the two codes of every byte are swapped" in text
    assert "[NVFP4-E2M1-3] group (r=0, i=0) element j=3: " in text
    assert "gs-division-trap gs" in text and "NVFP4-GS-1" in text


def test_check_cli_through_the_hscale_parser(tmp_path):
    parser = argparse.ArgumentParser(prog="hscale")
    add_vectors_parser(parser.add_subparsers(dest="command"))
    good = _observed(tmp_path, observed_lines(LEVEL0)[:50])
    args = parser.parse_args(["vectors", "check", str(LEVEL0), "--observed", str(good)])
    assert args.func is run_vectors
    assert run_vectors(args) == 0


# ------------------------------------------------------------------------------------------
# Levels 1 and 2, and the frozen constructions
# ------------------------------------------------------------------------------------------

def test_level1_subset_generates_and_verifies(tmp_path):
    files = generate_files(1, DEFAULT_SEED, subset="l1-tie")
    write_files(tmp_path, files)
    assert verify_dir(tmp_path) == []
    vectors = load_vectors(tmp_path)
    order = priority_order(16, 6)
    assert len(vectors) == 120  # every pair of shifts of the default window
    for case_id, (_, case) in vectors.items():
        a, b = (int(x) for x in re.match(r"l1-tie-([+-]\d+)-([+-]\d+)", case_id).groups())
        winner = a if order.index(a) < order.index(b) else b
        assert int(case.expected.delta[0, 0]) == winner, case_id


def test_level1_e2m1_sweep_covers_every_scale_byte(tmp_path):
    files = generate_files(1, DEFAULT_SEED, subset="l1-e2m1-fp32")
    write_files(tmp_path, files)
    case = load_vectors(tmp_path)["l1-e2m1-fp32"][1]
    assert sorted(set(case.expected.scale_bytes.ravel().tolist())) == list(range(1, 127))
    assert sorted(set(case.expected.codes.ravel().tolist())) == list(range(16))


def test_level2_small_generates(tmp_path):
    files = generate_files(2, 5, cases=6, max_rows=4, max_groups=3)
    write_files(tmp_path, files)
    assert verify_dir(tmp_path) == []


def test_tie_table_pairs_tie_exactly():
    table = load_tie_table()
    assert len(table) == 120
    for (a, b), (c0, group, h) in table.items():
        assert group.dtype == np.float32
        assert group[0] == 6 * SCALE_BYTE_VALUES[c0] and h[0] == 0  # pins c0, does not count
        assert tie_pattern(group, h, c0) == (a, b)


def _objective_variant(group, h, c0, variant):
    """The choice made by an implementation that evaluates the objective another way."""
    order = priority_order(16, 6)
    errors = []
    for delta in order:
        byte = int(window_bytes(np.array(c0), [delta])[0])
        s = float(SCALE_BYTE_VALUES[byte])
        q = E2M1_VALUES[encode_e2m1(group[None, :], np.array([[s]]))[0]]
        d = group - q * s
        if variant == "sequential":
            total = 0.0
            for term in h * (d * d):
                total += term
        elif variant == "fma":
            total = 0.0
            for hj, dj in zip(h, d):  # fma(h_j, d_j^2, total): one rounding
                total = float(Fraction(float(hj)) * Fraction(float(dj * dj)) + Fraction(total))
        elif variant == "product-order":
            terms = (h * d) * d
            while terms.size > 1:
                terms = terms[0::2] + terms[1::2]
            total = terms[0]
        else:  # fp32
            terms = (h.astype(np.float32) * (group.astype(np.float32)
                                             - (q * s).astype(np.float32)) ** 2)
            while terms.size > 1:
                terms = (terms[0::2] + terms[1::2]).astype(np.float32)
            total = float(terms[0])
        errors.append(total)
    best = 0
    for i in range(1, len(errors)):
        if errors[i] < errors[best]:
            best = i
    return order[best]


@pytest.mark.parametrize("trap", ORDER_TRAPS, ids=[t[0] for t in ORDER_TRAPS])
def test_objective_order_traps_catch_their_variant(trap):
    case_id, c0, w_hex, h_hex, _ = trap
    group = hexio.from_row_text(w_hex, "float32").astype(np.float64)
    h = hexio.from_row_text(h_hex, "float64")
    rows = candidate_errors(group, h, c0, 1.0, 16, 6)
    reference = min(rows, key=lambda r: (r[2], priority_order(16, 6).index(r[0])))[0]
    variant = {"obj-trap-sequential-sum": "sequential", "obj-trap-fused-multiply-add": "fma",
               "obj-trap-product-order": "product-order",
               "obj-trap-fp32-arithmetic": "fp32"}[case_id]
    assert _objective_variant(group, h, c0, variant) != reference


def test_minilm_cases_carry_their_inputs_and_provenance():
    vectors = load_vectors(LEVEL0)
    minilm = [case for k, (_, case) in vectors.items() if k.startswith("minilm-")]
    assert len(minilm) >= 3
    for case in minilm:
        assert "HSCALE-CAL-1" in case.clauses
        assert case.hessian_diag is not None and case.global_scale is not None
        assert "calibration" in case.provenance
        assert np.any(case.expected.delta != 0)


def test_one_exact_construction_refuses_a_lost_zero_sign():
    """The catalogue and the suite build exact inputs with one function. The catalogue's copy
    compared values only, so a conversion that turned -0.0 into +0.0 passed; a -0.0 is an input
    of its own (NVFP4-E2M1-3: the sign bit of w, so -0.0 codes as 0x8)."""
    from hscale.judge import builders
    from hscale.judge.cases import CaseError
    from hscale.vectors import catalogue, sweeps
    assert catalogue.exact is builders.exact and sweeps.exact is builders.exact
    with pytest.raises(CaseError, match="not exact"):
        builders.exact([1.0, -0.0], np.uint8)  # -0.0 -> 0 -> +0.0
    with pytest.raises(CaseError, match="not exact"):
        builders.exact([1.0 + 2.0 ** -30], np.float32)
    kept = builders.exact([-0.0, np.nan, 1.5], builders.BF16)
    assert np.signbit(kept[0]) and np.isnan(kept[1]) and kept[2] == 1.5


# ------------------------------------------------------------------------------------------
# check for hardware (issue 23): index keys, byte order, profiles, reciprocal global scales,
# one set without a manifest, the swizzled layout, line widths
# ------------------------------------------------------------------------------------------

def _data_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("//")]


def weight_sets(directory: Path, pattern: str) -> list[Path]:
    """The weight sets' files of a vector directory (the act_* sets are the activation kind's,
    tests/vectors/test_activation_vectors.py; the gemm_* sets the gemm kind's,
    tests/vectors/test_gemm_vectors.py)."""
    from hscale.vectors.stored import set_stem
    from hscale.vectors.families import owner
    return [p for p in directory.glob(pattern) if owner(set_stem(p.name)) == "weight"]


def _hex_case_keys(directory: Path) -> dict[str, str]:
    """'<set>:<index>' -> case id, read from the .hex files themselves: the index is the
    `case` field of the data lines (hex), the id the one the case table gives that index."""
    keys = {}
    for path in sorted(weight_sets(directory, "*.hex")):
        if path.name.endswith((".gs.hex", ".swz.hex")):
            continue
        table = {}
        for line in path.read_text().splitlines():
            found = re.match(r"^//\s+([0-9a-f]{4})\s+\S+\s+(\S+)\s+\d+x\d+\s", line)
            if found:
                table[int(found.group(1), 16)] = found.group(2)
        for line in _data_lines(path):
            index = int(line.split("_", 1)[0], 16)
            keys[f"{path.name[:-len('.hex')]}:{index}"] = table[index]
    return keys


def _lines_with(transform, lines=None, **options) -> list[str]:
    """The correct observed lines with ``transform(fields) -> fields`` applied to group lines."""
    out = []
    for line in lines or observed_lines(LEVEL0, **options):
        fields = line.split()
        out.append(" ".join(transform(fields)) if fields[1] not in ("gs", "gsr") else line)
    return out


def test_index_keys_name_the_cases_of_the_hex_case_table(tmp_path):
    from hscale.vectors.check import open_vectors
    keys = open_vectors(LEVEL0).keys
    assert {k: v for k, v in keys.items() if not k.startswith("errors:")} == \
        _hex_case_keys(LEVEL0)
    lines = observed_lines(LEVEL0, index_keys=True)
    assert lines[0].split()[0] == "bf16_hscale_maxabs_K16_U6_C448:0"
    status, text = _run_check(_observed(tmp_path, lines), require_all=True)
    assert status == 0, text[-2000:]
    # one group wrong, keyed by index: reported under its case id
    keyed = next(k for k, v in _hex_case_keys(LEVEL0).items() if v == "e2m1-midpoint-ties")
    wrong = [l.replace(" 0 0 38 ", " 0 0 39 ") if l.startswith(f"{keyed} 0 0 ") else l
             for l in lines]
    status, text = _run_check(_observed(tmp_path, wrong))
    assert status == 1 and "e2m1-midpoint-ties r0 g0 " in text and "[NVFP4-INIT-1]" in text


@pytest.mark.parametrize("key,words", [
    ("fp32_rtn_maxabs_C448:999", "no case '999' in set fp32_rtn_maxabs_C448 (it has case "
                                 "indices 0.."),
    ("nosuchset:0", "unknown set 'nosuchset' in the index key 'nosuchset:0'"),
    ("nosuchcase", "unknown case id 'nosuchcase'"),
])
def test_a_bad_key_is_a_line_error(tmp_path, key, words):
    status, text = _run_check(_observed(tmp_path, [f"{key} 0 0 38 0000000000000000"]))
    assert status == 1 and words in text, text


def _reversed(fields):
    return fields[:4] + [bytes.fromhex(fields[4])[::-1].hex()] + fields[5:]


def test_a_little_endian_dump_is_one_byte_order_line(tmp_path):
    """Every packed word byte-reversed (a 64-bit word held little-endian, printed %016x): one
    line for the file, NVFP4-PACK-1, and no rounding or sign finding at all (the old check read
    it as hundreds of NVFP4-E2M1-2 / -3 findings)."""
    path = _observed(tmp_path, _lines_with(_reversed))
    status, text = _run_check(path, max_errors=100000)
    assert status == 1
    findings = re.findall(r"^\s*\[([A-Z0-9-]+)\]", text, re.M)
    assert findings == ["NVFP4-PACK-1"], text[:3000]
    [line] = [l for l in text.splitlines() if "[NVFP4-PACK-1]" in l]
    assert line.startswith(f"[NVFP4-PACK-1] {path}: the packed words are byte-reversed: written "
                           "little-endian? byte 0 is the leftmost (most significant) byte of the "
                           "hex word, docs/vectors.md")
    palindromes = sum(1 for l in observed_lines(LEVEL0) if l.split()[1] not in ("gs", "gsr")
                      and bytes.fromhex(l.split()[4]) == bytes.fromhex(l.split()[4])[::-1])
    groups = sum(1 for l in observed_lines(LEVEL0) if l.split()[1] != "gs")
    wrong = groups - palindromes
    assert f", {wrong} errors ({wrong} of them only the byte order above)" in text
    assert "profile exact: does not conform" in text


def test_a_swapped_nibble_pair_or_byte_pair_is_named_not_two_rounding_errors(tmp_path):
    lines = observed_lines(LEVEL0)
    def edit(case_id, row, group, change):
        index = next(i for i, l in enumerate(lines) if l.startswith(f"{case_id} {row} {group} "))
        fields = lines[index].split()
        word = bytearray(bytes.fromhex(fields[4]))
        change(word)
        lines[index] = " ".join(fields[:4] + [word.hex()])
    def swap_nibbles(word, k=1):
        word[k] = (word[k] & 0x0F) << 4 | word[k] >> 4
    def exchange(word):
        word[2], word[6] = word[6], word[2]
    edit("random-normal-rtn", 0, 1, swap_nibbles)
    edit("random-normal-hscale", 1, 2, exchange)
    status, text = _run_check(_observed(tmp_path, lines))
    assert status == 1
    assert "[NVFP4-PACK-1] group (r=0, i=1): the two codes of byte 1 are swapped (elements 2 " \
           "and 3)" in text
    assert "[NVFP4-PACK-1] group (r=1, i=2): bytes 2 and 6 of the packed word are exchanged" in text
    assert re.findall(r"^\s*\[([A-Z0-9-]+)\]", text, re.M) == ["NVFP4-PACK-1"] * 2, text
    assert ", 2 errors;" in text


def test_a_reversed_word_with_a_wrong_byte_reads_as_the_slip_and_that_byte(tmp_path):
    """Every word reversed, and one group's byte one rung up with the codes of that byte (as a
    design whose search picked the wrong byte writes them): the byte-order line, and that
    group's byte finding saying its codes are the right rounding for it; no code finding."""
    from hscale.reference import pack_codes, encode_e2m1
    vectors = load_vectors(LEVEL0)
    case = vectors["random-normal-hscale"][1]
    w = case.exact_weight()[2, 48:64]
    byte = int(case.expected.scale_bytes[2, 3]) + 1
    scale = float(case.expected.global_scale) * float(SCALE_BYTE_VALUES[byte])
    word = pack_codes(encode_e2m1(w[None, :], np.array([[scale]])))[0].tobytes()

    def change(fields):
        if fields[0] == "random-normal-hscale" and fields[1:3] == ["2", "3"]:
            fields = fields[:3] + [f"{byte:02x}", word.hex()]
        return _reversed(fields)
    status, text = _run_check(_observed(tmp_path, _lines_with(change)), max_errors=100000)
    assert status == 1
    findings = re.findall(r"^\s*\[([A-Z0-9-]+)\] (.*)$", text, re.M)
    assert [c for c, _ in findings] == ["NVFP4-PACK-1", "HSCALE-OBJ-1"], text[:3000]
    assert "the observed codes are the correct rounding for the observed byte" in findings[1][1]
    assert f"(the packed word read as {word.hex().upper()}: the byte order above)" in text


def _fp32(value) -> Fraction:
    return Fraction(float(np.float32(value)))


def _round_fp32(value: Fraction) -> np.float32:
    """The fp32 nearest to a positive rational (ties to even), by stepping over fp32 values:
    a second statement of the rounding, not the reference's."""
    guess = np.float32(float(value))
    candidates = [np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(_fp32(c) - value),
                                          int(np.array(c).view(np.uint32)) & 1))


def test_reciprocal_global_scales_in_the_vectors_follow_nvfp4_gs4():
    """expected.global_scale_reciprocal is fp32(1/s_g) and _reads_back says whether fp32(1/r) is
    s_g, computed here with fractions; the gs4 cases are the writer's chain."""
    vectors = load_vectors(LEVEL0)
    for path in sorted(weight_sets(LEVEL0, "*.json")):
        if path.name == formats.MANIFEST:
            continue
        for entry in json.loads(path.read_text())["cases"]:
            if "error" in entry["expected"]:
                continue
            sg = hexio.scalar_from_hex(entry["expected"]["global_scale"])
            r = _round_fp32(1 / _fp32(sg))
            assert entry["expected"]["global_scale_reciprocal"] == hexio.scalar_word(r)
            back = _round_fp32(1 / _fp32(r))
            assert entry["expected"]["global_scale_reciprocal_reads_back"] == (back == sg)
    for case_id, reads_back in (("gs4-reciprocal-reads-back", True),
                                ("gs4-reciprocal-one-ulp-off", False)):
        case = vectors[case_id][1]
        amax = Fraction(float(np.max(np.abs(case.exact_weight()))))
        computed = _round_fp32(amax / 2688)                       # NVFP4-GS-1
        stored = _round_fp32(1 / _fp32(computed))                 # what the writer stores
        assert case.global_scale == _round_fp32(1 / _fp32(stored))  # quantized with fp32(1/r)
        # whether any fp32 r near 1/s_g reads back as s_g
        near = [stored]
        for _ in range(3):
            near += [np.nextafter(near[0], np.float32(0)), np.nextafter(near[-1], np.float32(9e9))]
        assert any(_round_fp32(1 / _fp32(c)) == computed for c in near) == reads_back
        assert "NVFP4-GS-4" in case.clauses
    # a writer that stores r but quantizes with the computed s_g is caught by the codes
    case = vectors["gs4-reciprocal-one-ulp-off"][1]
    from hscale.reference import quantize
    amax = float(np.max(np.abs(case.exact_weight())))
    plain = quantize(case.weight, None, method="rtn", global_scale=_round_fp32(Fraction(amax) / 2688))
    assert not np.array_equal(plain.codes, case.expected.codes)


def test_gsr_lines_are_read_as_the_stored_reciprocal(tmp_path):
    """A 'gsr' line is the stored reciprocal r: its s_g is fp32(1/r), and a device that stores
    its own s_g that way is the writer of NVFP4-GS-4 (it quantizes with fp32(1/r)), judged
    exactly at that s_g. A reciprocal one ulp away from fp32(1/s_g) is a global-scale finding,
    which the allowance reciprocal-global-scale names."""
    lines = observed_lines(LEVEL0, reciprocal=True)
    assert "gs4-reciprocal-one-ulp-off gsr 4527fff5" in lines
    not_read_back = sorted(
        entry["id"] for path in weight_sets(LEVEL0, "*.json") if path.name != formats.MANIFEST
        for entry in json.loads(path.read_text())["cases"]
        if "error" not in entry["expected"]
        and not entry["expected"]["global_scale_reciprocal_reads_back"])
    assert len(not_read_back) > 5, not_read_back  # the chain moves s_g for these
    status, text = _run_check(_observed(tmp_path, lines), max_errors=1000, require_all=True)
    assert status == 0 and "conforms" in text.splitlines()[-1], text[-3000:]
    # the next fp32 reciprocal up: it reads back as another s_g
    case = not_read_back[0]
    line = next(l for l in lines if l.startswith(f"{case} gsr "))
    r = np.frombuffer(bytes.fromhex(line.split()[-1]), ">u4").astype(np.uint32)[0]
    off = line.rsplit(" ", 1)[0] + f" {int(r) + 1:08x}"
    status, text = _run_check(_observed(tmp_path, [off if l == line else l for l in lines]))
    assert status == 1 and text.startswith(f"{case} gsr ") and "[NVFP4-GS-4]" in text, \
        text[-3000:]
    status, text = _run_check(_observed(tmp_path, [off if l == line else l for l in lines]),
                              profile="faithful", allowances=("reciprocal-global-scale",))
    assert status == 0 and "conforms" in text.splitlines()[-1], text[-2000:]
    # a reciprocal written as if it were the multiplier is a global-scale finding
    wrong = [l.replace(" gsr ", " gs ") for l in lines if l.startswith("gs-computed ")]
    status, text = _run_check(_observed(tmp_path, wrong))
    assert status == 1 and "[NVFP4-GS-1] tensor: global scale s_g expected" in text


def test_a_set_without_a_manifest_or_given_as_one_file(tmp_path):
    name = "fp32_rtn_maxabs_C448"
    alone = tmp_path / "one-set"
    alone.mkdir()
    for suffix in (".json", ".hex", ".gs.hex", ".swz.hex", ".npz"):
        shutil.copy(LEVEL0 / f"{name}{suffix}", alone / f"{name}{suffix}")
    lines = [l for l in observed_lines(LEVEL0, index_keys=True) if l.startswith(f"{name}:")]
    observed = _observed(tmp_path, lines)
    for target in (alone, alone / f"{name}.hex", alone / f"{name}.json", LEVEL0 / f"{name}.hex"):
        out = io.StringIO()
        assert check(target, observed, out=out, require_all=True) == 0, out.getvalue()
        note = out.getvalue().splitlines()[0]
        assert ("no manifest.json" in note) == (target.parent != LEVEL0 or target == alone)
    # where a manifest exists, its checksums still apply to the set given alone
    copy = tmp_path / "copy"
    shutil.copytree(LEVEL0, copy)
    (copy / f"{name}.hex").write_text((copy / f"{name}.hex").read_text() + "// edited\n")
    with pytest.raises(ValueError, match="SHA-256 differs from manifest.json"):
        check(copy / f"{name}.json", observed, out=io.StringIO())
    (alone / f"{name}.json").unlink()
    with pytest.raises(ValueError, match=f"read from its {name}.json"):
        check(alone / f"{name}.hex", observed, out=io.StringIO())


def _spec_offset(r: int, k: int, n: int) -> int:
    """docs/spec.md NVFP4-PACK-3, written out here."""
    return (((r // 128) * (-(-n // 64)) + k // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4
            + k % 4)


def test_swizzled_offsets_in_the_swz_files_and_the_observed_field(tmp_path):
    vectors = load_vectors(LEVEL0)
    by_key = _hex_case_keys(LEVEL0)
    checked = 0
    for path in sorted(LEVEL0.glob("*.swz.hex")):
        set_name = path.name[:-len(".swz.hex")]
        group_lines = _data_lines(LEVEL0 / f"{set_name}.hex")
        for line, group_line in zip(_data_lines(path), group_lines, strict=True):
            case_f, r, k, rows, cols, offset, scale = (int(x, 16) for x in line.split("_"))
            assert group_line.split("_")[:3] == line.split("_")[:3]
            case = vectors[by_key[f"{set_name}:{case_f}"]][1]
            assert (rows, cols * 16) == case.shape
            assert offset == _spec_offset(r, k, cols * 16)
            assert scale == case.expected.scale_bytes[r, k]
            assert case.expected.swizzled_scale_bytes()[offset] == scale
            checked += 1
    assert checked == sum(len(_data_lines(p)) for p in weight_sets(LEVEL0, "*.hex")
                          if not p.name.endswith((".gs.hex", ".swz.hex")))
    lines = observed_lines(LEVEL0, swizzled=True)
    status, text = _run_check(_observed(tmp_path, lines), require_all=True)
    assert status == 0, text[-2000:]
    big = next(l for l in lines if l.startswith("swizzle-129x80 128 3 "))
    fields = big.split()
    assert int(fields[5], 16) == _spec_offset(128, 3, 80) == 1027
    wrong = [l if l != big else " ".join(fields[:5] + [f"{_spec_offset(0, 3, 80):08x}"])
             for l in lines]
    status, text = _run_check(_observed(tmp_path, wrong))
    assert status == 1
    assert "[NVFP4-PACK-3] group (r=128, i=3): swizzled offset of the scale byte expected " \
           "0x00000403 (1027) observed 0x00000003 (3)" in text


def test_line_widths_table_is_what_the_files_hold():
    """docs/vectors.md's widths against the files: hex digits of each data line counted."""
    from hscale.vectors.docs import WIDTHS_BEGIN, WIDTHS_END
    rows = block(DOC.read_text(), WIDTHS_BEGIN, WIDTHS_END).splitlines()[2:]
    assert len(rows) == len(list(LEVEL0.glob("*.swz.hex")))
    for row in rows:
        cells = [c.strip().strip("`") for c in row.strip("|").split("|")]
        name, bits, digits, gs_bits, swz_bits = cells[0], *map(int, cells[3:7])
        for suffix, width in ((".hex", bits), (".gs.hex", gs_bits), (".swz.hex", swz_bits)):
            line = _data_lines(LEVEL0 / f"{name}{suffix}")[0]
            assert 4 * len(line.replace("_", "")) == width, (name, suffix)
        assert digits * 4 == bits
