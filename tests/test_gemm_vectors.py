"""The GEMM / MMA golden vectors (vectors/gemm.py, vectors/gemm_files.py; docs/vectors.md):
their numbers checked by a route of their own (the operands decoded with ml_dtypes, sums with
fractions, roundings with numpy's single-rounding casts), and hscale vectors verify / expect /
check / explain on them."""

from __future__ import annotations

import io
import itertools
import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR, check, observed_lines
from hscale.vectors.verify import verify_dir

LEVEL0 = LEVEL0_DIR
E2M1 = [Fraction(float(v)) for v in
        np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)]
E4M3 = [Fraction(float(v)) for v in
        np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)]


def _cases(set_name: str) -> dict[str, dict]:
    document = json.loads((LEVEL0 / f"{set_name}.json").read_text())
    assert document["kind"] == "gemm"
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


def _check(lines, tmp_path, **options) -> tuple[int, str]:
    observed = tmp_path / "observed.txt"
    observed.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    status = check(LEVEL0, observed, out=out, **options)
    return status, out.getvalue()


@pytest.mark.clause("NVFP4-GEMM-5", "NVFP4-GEMM-4")
def test_check_judges_gemm_lines_and_names_the_clause(tmp_path):
    lines = [l for l in observed_lines(LEVEL0, other_kinds=True) if l.startswith("gemm")]
    assert len(lines) == 837 and all(len(l.split()) == 4 for l in lines)
    status, text = _check(lines, tmp_path, require_all=True)
    assert status == 0, text[-2000:]
    assert "837 of 837 GEMM output elements observed" in text
    wrong = [l.replace(" 4441", " 4440") if l.startswith("gemm-global-scales-3x1 0 0") else
             l.replace(" 45001000", " 45000000") if l.startswith("gemm-fp32-not-fp16 0 0")
             else l for l in lines]
    status, text = _check(wrong, tmp_path)
    assert status == 1
    assert "gemm-global-scales-3x1 0 0 => 0x4440  expected: 0x4441" in text
    assert "[NVFP4-GEMM-5] output element (i=0, j=0): bfloat16 expected 0x4441 (772.0) " \
           "observed 0x4440 (768.0)" in text
    assert "[NVFP4-GEMM-4] output element (i=0, j=0): float32 expected 0x45001000 (2049.0) " \
           "observed 0x45000000 (2048.0)" in text and "the fp16 accumulation model" in text
    # under the fp16 model the 2048 is admissible (the sum is not exact in fp16)
    status, text = _check([l for l in wrong if l.startswith("gemm-fp32-not-fp16")], tmp_path,
                          gemm_model="fp16")
    assert status == 0, text
    # a weight result file need not hold GEMM outputs, even with --require-all
    weights = observed_lines(LEVEL0)
    assert _check(weights, tmp_path, require_all=True)[0] == 0
    status, text = _check(lines[:10], tmp_path, require_all=True)
    assert status == 1 and "827 GEMM output elements of the vectors are missing" in text


def test_a_malformed_gemm_line_is_a_line_error(tmp_path):
    status, text = _check(["gemm-fp32-not-fp16 0 0 4500", "gemm-fp32-not-fp16 0 5 45001000"],
                          tmp_path)
    assert status == 1
    assert "a GEMM output line is 'KEY i j OUT' with OUT the float32 bits (8 hex digits)" in text
    assert "case gemm-fp32-not-fp16 is 1 x 1: there is no output element (0, 5)" in text


def _hscale(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hscale", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_the_commands_on_gemm_vectors(tmp_path):
    """expect writes the GEMM lines too; explain works one output element; a bad
    --gemm-model is one line and exit 2."""
    done = _hscale("vectors", "expect", str(LEVEL0), "--out", "-", cwd=tmp_path)
    assert done.returncode == 0 and "gemm-order-2p24 0 0 40000000" in done.stdout
    done = _hscale("vectors", "explain", str(LEVEL0), "gemm-order-2p24", "0", "0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for needle in ("block 0: sA 0x70 sB 0x78 -> 16777216.0", "S = 2.0 exactly",
                   "fp32 sums of the block values in every order and grouping: 00000000, "
                   "3f800000, 40000000", "observed-file line: gemm-order-2p24 0 0 40000000"):
        assert needle in done.stdout, done.stdout
    done = _hscale("vectors", "check", str(LEVEL0), "--observed", str(tmp_path / "x.txt"),
                   "--gemm-model", "fp8", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--gemm-model fp8: one of fp32, fp32-faithful, fp16" in done.stderr, done.stderr


def test_the_committed_gemm_sets_are_what_the_reference_renders():
    from hscale.vectors.gemm_files import level_files
    files, index, count = level_files(0, 20240601)
    assert count == 24 and set(index) == {f"NVFP4-GEMM-{k}" for k in range(1, 9)}
    for name, data in files.items():
        assert (LEVEL0 / name).read_bytes() == data, name
    assert Path(LEVEL0 / "gemm_nvfp4.hex").stat().st_size < 400_000
