"""The GEMM / MMA golden vectors (vectors/gemm.py, vectors/gemm_files.py; docs/vectors.md):
their numbers checked by a route of their own (the operands decoded with ml_dtypes, sums with
fractions, roundings with numpy's single-rounding casts), and hscale vectors verify / expect /
check / explain on them."""

from __future__ import annotations

import itertools
import json
import shutil
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.verify import verify_dir

from helpers.cli import Run, hscale_here

LEVEL0 = LEVEL0_DIR
E2M1 = [Fraction(float(v)) for v in
        np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)]
E4M3 = [Fraction(float(v)) for v in
        np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)]


def _cases(set_name: str) -> dict[str, dict]:
    document = json.loads((LEVEL0 / f"{set_name}.json").read_text())
    assert document["format"] == "hscale-nvfp4-gemm-vectors"
    return {entry["id"]: entry for entry in document["cases"]}


def _codes(packed_row: str) -> list[int]:
    out = []
    for byte in bytes.fromhex(packed_row):
        out += [byte & 0xF, byte >> 4]  # element 2k in the low nibble (NVFP4-PACK-1)
    return out


def _operand_values(entry: dict) -> tuple[list[list[Fraction]], Fraction]:
    """Each element's exact value (without the global scale), and the global scale."""
    if entry["kind"] == "activations":
        dtype = {"float32": np.float32}[entry["dtype"]]
        rows = [[Fraction(float(np.array(int(w, 16), np.uint32).view(dtype)))
                 for w in row.split()] for row in entry["values"]]
        return rows, Fraction(1)
    rows = []
    for packed, scales in zip(entry["packed"], entry["scale_bytes"]):
        scale_bytes = bytes.fromhex(scales)
        rows.append([E2M1[c] * E4M3[scale_bytes[k // 16]] for k, c in enumerate(_codes(packed))])
    g = Fraction(float(np.array(int(entry["global_scale"], 16), np.uint32).view(np.float32)))
    return rows, g


def _bits(value: float, dtype) -> str:
    array = np.array(value, dtype=np.float64).astype(np.float32).astype(dtype)
    return format(int(array.view({2: np.uint16, 4: np.uint32}[array.itemsize])),
                  f"0{2 * array.itemsize}x")


@pytest.mark.clause("NVFP4-GEMM-1", "NVFP4-GEMM-3", "NVFP4-GEMM-7")
def test_exact_sums_and_the_reference_by_another_route():
    """exact_sum is the sum of the decoded products (fractions); where fp32 holds it, the
    spec's result is fp32(fp32(gA gB) * S) cast to the output dtype (numpy's casts from fp32 round
    once), and every model admits exactly that where the vector says every partial sum is
    exact and the global scales are powers of two."""
    for set_name in ("gemm_nvfp4", "gemm_weightonly"):
        for case_id, entry in _cases(set_name).items():
            a, g_a = _operand_values(entry["inputs"]["a"])
            b, g_b = _operand_values(entry["inputs"]["b"])
            out = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16,
                   "float16": np.float16}[entry["inputs"]["out_dtype"]]
            alpha = np.float32(np.float32(float(g_a)) * np.float32(float(g_b)))
            for i, row_a in enumerate(a):
                for j, row_b in enumerate(b):
                    s = sum((x * y for x, y in zip(row_a, row_b)), Fraction(0))
                    numerator, _, exponent = entry["expected"]["exact_sum"][i][j].partition("p")
                    assert Fraction(int(numerator)) * Fraction(2) ** int(exponent) == s, case_id
                    if Fraction(float(np.float32(float(s)))) != s:
                        continue  # S itself rounds: the reference rounds it once, as numpy does
                    with np.errstate(over="ignore"):
                        d32 = np.float32(alpha * np.float32(float(s)))
                        want = _bits(float(d32), out)
                    assert entry["expected"]["reference"][i][j] == want, (case_id, i, j)
                    power_of_two = g_a.numerator == 1 or g_a.denominator == 1
                    if entry["expected"]["models"]["fp32"]["exact"][i][j] == "1" \
                            and power_of_two and (g_b.numerator == 1 or g_b.denominator == 1):
                        assert entry["expected"]["models"]["fp32"]["low"][i][j] == want
                        assert entry["expected"]["models"]["fp32"]["high"][i][j] == want


@pytest.mark.clause("NVFP4-GEMM-4")
def test_block_orders_are_every_order_of_the_block_values():
    """gemm-order-2p24: the fp32 sums of 2^24, 1, 1, -2^24 in every order and grouping are 0,
    1 and 2, each inside the fp32 model's interval; recomputed here with numpy's fp32 adds."""
    entry = _cases("gemm_nvfp4")["gemm-order-2p24"]
    blocks = [np.float32(2 ** 24), np.float32(1), np.float32(1), np.float32(-2 ** 24)]
    results = set()

    def every(values):
        if len(values) == 1:
            results.add(format(int(np.array(values[0]).view(np.uint32)), "08x"))
            return
        for x, y in itertools.combinations(range(len(values)), 2):
            rest = [v for k, v in enumerate(values) if k not in (x, y)]
            every(rest + [np.float32(values[x] + values[y])])
    every(blocks)
    assert sorted(results) == entry["expected"]["block_orders"]["0,0"] == \
        ["00000000", "3f800000", "40000000"]
    low = np.array(int(entry["expected"]["models"]["fp32"]["low"][0][0], 16), np.uint32)
    high = np.array(int(entry["expected"]["models"]["fp32"]["high"][0][0], 16), np.uint32)
    assert low.view(np.float32) <= 0 and high.view(np.float32) >= 2


@pytest.mark.clause("NVFP4-GEMM-4", "NVFP4-GEMM-7")
def test_every_mma_line_by_another_route():
    """Each line of gemm_nvfp4.hex from its own fields: the step's terms from the scale bytes
    and nibbles (ml_dtypes' decoders), c + their exact sum rounded once to fp32 is rn (numpy's
    float64 -> float32 cast rounds once; the sums are exact in float64 here), and low <= rn <=
    high."""
    lines = [l for l in (LEVEL0 / "gemm_nvfp4.hex").read_text().splitlines()
             if l and not l.startswith("//")]
    assert len(lines) > 1000
    for line in lines:
        fields = line.split("_")
        sa, a, sb, b = (bytes.fromhex(f) for f in fields[4:8])
        c, rn, low, high = (np.array(int(f, 16), np.uint32).view(np.float32)[()]
                            for f in fields[8:12])
        a_codes, b_codes = _codes(a.hex()), _codes(b.hex())
        total = Fraction(float(c)) + sum(E2M1[x] * E4M3[sa[k // 16]] * E2M1[y] * E4M3[sb[k // 16]]
                                         for k, (x, y) in enumerate(zip(a_codes, b_codes)))
        assert float(total) == total  # exact in float64
        assert np.float32(float(total)) == rn, line
        assert low <= rn <= high, line


def test_verify_names_a_gemm_case_whose_stored_result_was_edited(tmp_path):
    copy = tmp_path / "v"
    shutil.copytree(LEVEL0, copy)
    path = copy / "gemm_nvfp4.json"
    document = json.loads(path.read_text())
    entry = next(e for e in document["cases"] if e["id"] == "gemm-fp32-not-fp16")
    entry["expected"]["reference"][0][0] = "45000000"
    path.write_text(json.dumps(document, sort_keys=True, indent=1) + "\n")
    problems = verify_dir(copy)
    assert any("gemm_nvfp4.json: SHA-256" in p for p in problems), problems
    assert any("gemm_nvfp4.json: case gemm-fp32-not-fp16: expected differs" in p
               for p in problems), problems


def _check(lines, model="fp32", max_errors=20) -> tuple[list, int]:
    from hscale.vectors.gemm_files import check_lines, stored_cases
    return check_lines(list(stored_cases().values()), lines, model, max_errors)


def _expected() -> list[str]:
    from hscale.vectors.gemm_files import observed_lines, stored_cases
    return observed_lines(list(stored_cases().values()), "fp32")


@pytest.mark.clause("NVFP4-GEMM-5", "NVFP4-GEMM-4")
def test_check_judges_gemm_lines_and_names_the_clause():
    lines = _expected()
    # 837 elements of gemm_nvfp4 and gemm_weightonly, 512 + 5 * 130 of gemm_bookkeeping
    assert len(lines) == 1999 and all(len(l.split()) == 4 for l in lines)
    report, errors = _check(lines)
    assert (report, errors) == (["1999 of 1999 output elements of the GEMM vectors observed"], 0)
    wrong = [l.replace(" 4441", " 4440") if l.startswith("gemm-global-scales-3x1 0 0") else
             l.replace(" 45001000", " 45000000") if l.startswith("gemm-fp32-not-fp16 0 0")
             else l for l in lines]
    report, errors = _check(wrong)
    text = "\n".join(report)
    assert errors == 2
    assert "gemm-global-scales-3x1 0 0 => 0x4440  expected: 0x4441" in text
    assert "[NVFP4-GEMM-5] output element (i=0, j=0): bfloat16 expected 0x4441 (772.0) " \
           "observed 0x4440 (768.0)" in text
    assert "[NVFP4-GEMM-4] output element (i=0, j=0): float32 expected 0x45001000 (2049.0) " \
           "observed 0x45000000 (2048.0)" in text and "the fp16 accumulation model" in text
    # under the fp16 model the 2048 is admissible (the sum is not exact in fp16)
    report, errors = _check([l for l in wrong if l.startswith("gemm-fp32-not-fp16")], "fp16")
    assert errors == 0 and not any("=>" in line for line in report), report
    # elements left out are not judged, and said to be missing; the last line counts what the
    # file held, and with require_all each missing element is an error
    report, errors = _check(lines[:10])
    assert errors == 0 and any("missing from the file (not judged)" in line for line in report)
    assert report[-1].startswith("10 of 1999 output elements of the GEMM vectors observed; "), \
        report
    from hscale.vectors.gemm_files import check_lines, stored_cases
    report, errors = check_lines(list(stored_cases().values()), lines[:10], "fp32", 20, True)
    assert errors == 1989 and "1989 output elements of the vectors are missing" in report[-1]


def test_a_malformed_gemm_line_is_a_line_error():
    for line, words in (
            ("gemm-fp32-not-fp16 0 0 4500", "expected 'CASE i j OUT' with OUT the float32 bits "
                                            "(8 hex digits)"),
            ("gemm-fp32-not-fp16 0 5 45001000", "case gemm-fp32-not-fp16 is 1 x 1: there is no "
                                                "output element (0, 5)"),
            ("e2m1-all-codes 0 0 45001000", "no GEMM case 'e2m1-all-codes'")):
        with pytest.raises(ValueError) as error:
            _check([line])
        assert words in str(error.value) and str(error.value).startswith("line 1: ")


def _hscale(*args, cwd) -> Run:
    return hscale_here(args, cwd=cwd)


def test_the_commands_on_gemm_vectors(tmp_path):
    """expect --gemm-model writes the GEMM lines, check --gemm-model judges them (exit 1 naming
    the clause), explain works one output element; a bad --gemm-model is one line and exit 2."""
    done = _hscale("vectors", "expect", "--gemm-model", "fp32", "--out", "gemm.txt",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "gemm.txt").read_text().splitlines()
    assert "gemm-order-2p24 0 0 40000000" in lines and len(lines) == 1999
    done = _hscale("vectors", "check", "--gemm-model", "fp32", "--observed", "gemm.txt",
                   cwd=tmp_path)
    assert done.returncode == 0 and "conforms to the gemm vectors of" in done.stdout, done.stdout
    (tmp_path / "bad.txt").write_text("gemm-fp32-not-fp16 0 0 45000000\n")
    done = _hscale("vectors", "check", "--gemm-model", "fp32", "--observed", "bad.txt",
                   cwd=tmp_path)
    assert done.returncode == 1 and "[NVFP4-GEMM-4]" in done.stdout
    assert "bad.txt: 1 error (accumulation model fp32)" in done.stdout, done.stdout
    done = _hscale("vectors", "check", "--gemm-model", "fp16", "--observed", "bad.txt",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    for where in ([str(LEVEL0)], []):  # DIR may be left out before CASE I J
        done = _hscale("vectors", "explain", *where, "gemm-order-2p24", "0", "0", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        for needle in ("block 0: sA 0x70 sB 0x78 -> 16777216.0", "S = 2.0 exactly",
                       "fp32 sums of the block values in every order and grouping: 00000000, "
                       "3f800000, 40000000", "observed-file line: gemm-order-2p24 0 0 40000000"):
            assert needle in done.stdout, done.stdout
    done = _hscale("vectors", "explain", "gemm-swizzle-130-rows", "129", "2", cwd=tmp_path)
    assert done.returncode == 0 and "output element (i=129, j=2)" in done.stdout, done.stderr
    for args, words in ((["--gemm-model", "fp8"], "--gemm-model fp8: one of fp32, "
                                                  "fp32-faithful, fp16"),
                        (["--gemm-model", "fp32", "--recipe", "exact"],
                         "--recipe and --gemm-model: one kind's sets at a time")):
        done = _hscale("vectors", "check", "--observed", "bad.txt", *args, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.count("\n") == 1
        assert words in done.stderr, done.stderr


def test_the_committed_gemm_sets_are_what_the_reference_renders():
    from hscale.vectors.gemm_files import level0_cases, render_files
    from hscale.vectors.catalogue import clause_index
    cases = level0_cases(20240601)
    files = render_files(cases, 0, 20240601, json.loads(
        (LEVEL0 / "manifest.json").read_text())["spec_version"])
    # 24 cases of gemm_nvfp4 and gemm_weightonly, 6 of gemm_bookkeeping
    assert len(cases) == 30 and set(clause_index(cases)) == {f"NVFP4-GEMM-{k}"
                                                             for k in range(1, 9)}
    for name, data in files.items():
        assert (LEVEL0 / name).read_bytes() == data, name
    assert Path(LEVEL0 / "gemm_nvfp4.hex").stat().st_size < 400_000
