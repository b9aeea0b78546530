"""The RHT golden vectors (the rht_16x16 set of vectors/level0, hscale.vectors.rht_sets): the
stored transformed values are an independent kernel's (tests/helpers/rht_kernels.py: a float64
product and ml_dtypes' rounding), the bfloat16 ties split the profiles, check --rht judges a
result file and names the clause, expect and explain work; the padded cases (token counts not
a multiple of 16) are exact sums over zero tokens, computed here with fractions.Fraction."""

from __future__ import annotations

import json
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors
from hscale.vectors.group_lines import write_group_lines
from hscale.vectors.rht_sets import case_from_json, check_lines, explain

from helpers.cli import Run, hscale_here
from helpers.rht_kernels import Rht, hadamard16

SET = LEVEL0_DIR / "rht_16x16.json"


def _hscale(*args, cwd) -> Run:
    return hscale_here(["vectors", *args], cwd=cwd)


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")
def test_the_stored_results_are_the_independent_kernels():
    document = json.loads(SET.read_text())
    cases = {i: c for i, (n, c) in open_vectors(LEVEL0_DIR).family_cases.items()
             if n.startswith("rht_")}
    for entry in document["cases"]:
        x = cases[entry["id"]].x
        for variant, mask in (("te-exact", 0xD7E8), ("plain-exact", 0)):
            result = Rht(mask, padding="zeros").quantize_rht(x)
            stored = entry["expected"][variant]
            assert stored["scale_bytes"] == [bytes(r.astype(np.uint8)).hex()
                                             for r in result.scale_bytes], (entry["id"], variant)
            signs = np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])
            t = signs[:, None] * hadamard16() / 4
            source = np.asarray(x).T.astype(np.float64)
            source = np.pad(source, ((0, 0), (0, -source.shape[1] % 16)))  # zero tokens
            y = (source.reshape(source.shape[0], -1, 16) @ t).reshape(source.shape)
            words = [" ".join(f"{int(w):04x}" for w in r)
                     for r in y.astype(ml_dtypes.bfloat16).view(np.uint16)]
            assert stored["y"] == words, (entry["id"], variant)


@pytest.mark.clause("NVFP4-RHT-2")
def test_the_ties_split_the_profiles():
    entry = next(e for e in json.loads(SET.read_text())["cases"] if e["id"] == "rht-bf16-ties")
    exact, fast = entry["expected"]["te-exact"]["y"][0].split(), \
        entry["expected"]["te-fast-math"]["y"][0].split()
    # (1 + 2^-8) / 4 is a bfloat16 tie: 0.25 (0x3e80) under exact, kept in fp32 under fast-math
    assert exact[0] == "3e80" and fast[0] == "3e808000"


@pytest.mark.clause("NVFP4-RHT-1")
def test_the_commands_on_rht_vectors(tmp_path):
    done = _hscale("expect", "--rht", "te-exact", "--out", "te.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = _hscale("check", "--rht", "te-exact", "--observed", "te.txt", cwd=tmp_path)
    assert done.returncode == 0 and "conforms to the rht vectors" in done.stdout, done.stdout
    done = _hscale("check", "--rht", "plain-exact", "--observed", "te.txt", cwd=tmp_path)
    assert done.returncode == 1 and "[NVFP4-RHT-1]" in done.stdout, done.stdout
    assert "the sign mask 0xD7E8, not the declared 0x0000" in done.stdout
    done = _hscale("explain", "rht-bf16-ties", "0", "0", cwd=tmp_path)
    assert done.returncode == 0 and "te-fast-math" in done.stdout, done.stdout


def _sylvester_fractions() -> list[list[Fraction]]:
    h = [[Fraction(1)]]
    while len(h) < 16:
        h = [row + row for row in h] + [row + [-v for v in row] for row in h]
    return h


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2")
@pytest.mark.parametrize("case_id", ["rht-padded-20-tokens", "rht-padded-40-tokens"])
def test_the_padded_cases_are_exact_sums_over_zero_tokens(case_id):
    """Tokens not a multiple of 16 padded with zero tokens: every stored transformed value is
    the exact sum (fractions.Fraction over the Sylvester matrix and TE's signs) rounded once to
    bfloat16 (the exact sum fits a float64, so ml_dtypes rounds it once), and the bytes and
    codes are the independent kernel's on the zero-padded tensor."""
    entry = next(e for e in json.loads(SET.read_text())["cases"] if e["id"] == case_id)
    x = hexio_rows(entry)
    tokens, features = x.shape
    padded = -tokens % 16
    assert padded, case_id
    h = _sylvester_fractions()
    signs = [-1 if (0xD7E8 >> i) & 1 else 1 for i in range(16)]
    source = [[Fraction(float(v)) for v in col] + [Fraction(0)] * padded for col in x.T]
    stored = entry["expected"]["te-exact"]
    for row in range(features):
        words = stored["y"][row].split()
        assert len(words) == tokens + padded
        for block in range(len(words) // 16):
            part = source[row][16 * block:16 * block + 16]
            for j in range(16):
                exact = sum(part[i] * signs[i] * h[i][j] for i in range(16)) / 4
                assert Fraction(float(exact)) == exact
                want = np.array([float(exact)]).astype(ml_dtypes.bfloat16).view(np.uint16)[0]
                assert words[16 * block + j] == f"{int(want):04x}", (case_id, row, block, j)
    result = Rht(padding="zeros").quantize_rht(x)
    assert stored["scale_bytes"] == [bytes(r.astype(np.uint8)).hex() for r in result.scale_bytes]
    assert Rht().quantize_rht(np.zeros((32, 16), ml_dtypes.bfloat16)) is not None
    with pytest.raises(ValueError):  # the kernel that refuses (rht_padding = refuse)
        Rht().quantize_rht(x)


def hexio_rows(entry) -> np.ndarray:
    """The case's bfloat16 input from its stored hex words (bit patterns, read here)."""
    words = [[int(w, 16) for w in row.split()] for row in entry["inputs"]["x"]]
    return np.array(words, np.uint16).view(ml_dtypes.bfloat16).reshape(entry["inputs"]["shape"])


@pytest.mark.clause("NVFP4-RHT-1")
def test_check_and_explain_on_the_padded_cases():
    """A kernel that pads with copies of the last token (a clamped load) is refused on the
    padded case naming NVFP4-RHT-1, one that pads with zeros conforms; explain shows the padded
    block. (In process: the commands themselves run in test_the_commands_on_rht_vectors, whose
    expect and check cover these cases too.)"""
    cases = [case_from_json(e) for e in json.loads(SET.read_text())["cases"]
             if e["id"] == "rht-padded-20-tokens"]
    x = cases[0].x
    for fault, conforms in ((None, True), ("pads-clamped", False)):
        result = Rht(fault=fault, padding="zeros").quantize_rht(x)
        lines = write_group_lines(cases[0].id, result.codes, result.scale_bytes,
                                  result.global_scale)
        report, errors = check_lines(cases, lines, "te-exact", require_all=True)
        assert (errors == 0) == conforms, (fault, report)
        if not conforms:
            assert "[NVFP4-RHT-1]" in report[0] and "copies of the last token" in report[0]
    text = explain("rht_16x16.json", cases[0], 3, 1)
    assert "tokens 16..31" in text
    x_line = next(line for line in text.splitlines() if line.strip().startswith("x:"))
    assert x_line.split()[-12:] == ["0"] * 12  # the 12 zero tokens of the padded block
