"""The text of the findings and command reports: numbers as Python writes them (never a numpy
repr), no doubled text, one hex case per kind (bytes, codes and bit patterns in upper case,
0x7E), correct plurals, and exact ties said to be ties, for E4M3 as for E2M1. Each message is
produced by a wrong result (a mutant of conformance/mutants.py, or a reference result edited)."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import numpy as np
import pytest

from hscale.bench import identical
from hscale.cli import main as hscale_main
from hscale.judge.cases import Rejection
from hscale.judge.diagnose import diagnose, observe
from hscale.conformance.mutants import MUTANTS, Mutant, RoundHalfAway
from hscale.reference import quantize
from hscale.reference.e4m3 import encode_e4m3
from hscale.vectors import check, load_vectors, observed_lines
from hscale.vectors.explain import explain_group
from hscale.vectors.generate import generate_files, write_files
from hscale.vectors import LEVEL0_DIR as DEFAULT_LEVEL0_DIR

VECTORS = load_vectors(DEFAULT_LEVEL0_DIR)

NUMPY_REPR = re.compile(r"np\.\w+\(|array\(|dtype=")
# A byte, code or bit pattern written 0x... with a lower-case digit (a float's hex form,
# 0x1.8p+3, is Python's own and is left alone).
LOWER_HEX = re.compile(r"0x[0-9A-Fa-f]*[a-f][0-9A-Fa-f]*(?![.\w])")
DOUBLED_PLACE = re.compile(r"element j=(\d+): element \1\b")


def case(case_id):
    return VECTORS[case_id][1]


def findings_of(implementation, the_case, profile="exact", reported=None) -> list[str]:
    """The rendered findings of ``implementation``'s result for ``the_case``; ``reported``:
    only these attributes of the result are handed over (as an implementation that reports
    less would)."""
    args, kwargs = the_case.call_args()
    result = implementation.quantize(*args, **kwargs)
    if reported is not None:
        result = SimpleNamespace(**{name: getattr(result, name) for name in reported})
    observed, structure = observe(result, the_case)
    if structure:
        return [f.render() for f in structure]
    return [f.render() for f in diagnose(the_case, observed, profile=profile).findings]


def assert_well_written(text: str) -> None:
    assert not NUMPY_REPR.search(text), f"a numpy repr in: {text}"
    assert not LOWER_HEX.search(text), f"lower-case hex in: {text}"
    assert not DOUBLED_PLACE.search(text), f"the place said twice in: {text}"


class E4M3HalfUp(Mutant):
    """Initial bytes whose E4M3 rounding sends exact ties up instead of to the even mantissa
    (NVFP4-E4M3-2)."""

    name = "mutant-e4m3-half-up"

    def range_bytes(self, group_amax, s_g, top_magnitude):
        quotient = np.asarray(group_amax) / (top_magnitude * float(s_g))
        byte = encode_e4m3(np.nextafter(quotient, np.inf))  # a tie lands above the midpoint
        return np.where((byte == 0) & (np.asarray(group_amax) > 0), 1, byte).astype(np.uint8)


# -- every finding of every mutant on every level-0 case ---------------------------------------

def test_every_exact_finding_is_well_written():
    """The exact profile's findings (the suite's failures, vectors check) of every mutant on
    every level-0 case: no numpy repr, upper-case hex, the place said once."""
    rendered = []
    for mutant in [cls() for cls in MUTANTS.values()] + [E4M3HalfUp()]:
        for file_name, the_case in VECTORS.values():
            if isinstance(the_case.expected, Rejection) or the_case.pipeline != "quantize":
                continue
            with np.errstate(all="ignore"):
                rendered += findings_of(mutant, the_case)
    assert len(rendered) > 300, "the mutants should have produced findings"
    for text in rendered:
        assert_well_written(text)


def test_every_faithful_finding_is_well_written():
    the_case = case("e2m1-midpoint-ties")
    rendered = findings_of(RoundHalfAway(), the_case, profile="faithful")
    assert rendered
    for text in rendered:
        assert_well_written(text)


# -- numbers as Python writes them ------------------------------------------------------------

@pytest.mark.parametrize("global_scale,words", [
    (np.float64(0.1), "global_scale: 0.1 is not one fp32 value"),
    (np.array([1.0, 2.0], dtype=np.float32), "global_scale: an array of shape (2,), not one "
                                             "fp32 value"),
    ("one", "global_scale: str 'one' is not a number"),
], ids=["float64", "array", "text"])
def test_a_global_scale_that_is_not_one_fp32_is_shown_without_numpy_repr(global_scale, words):
    the_case = case("random-normal-rtn")
    expected = the_case.expected
    result = SimpleNamespace(scale_bytes=expected.scale_bytes, packed=expected.packed,
                             global_scale=global_scale)
    _, structure = observe(result, the_case)
    assert [f.clause for f in structure] == ["NVFP4-GS-1"]
    assert words in structure[0].text
    assert_well_written(structure[0].render())


def test_bench_mismatch_shows_plain_numbers_and_upper_case_hex():
    weight = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    expected = quantize(weight, None, method="rtn")
    other_scale = quantize(weight, None, method="rtn", global_scale=np.float32(1.0))
    text = identical(expected, other_scale)
    assert text.startswith("scale_bytes[") or text.startswith("codes["), text
    same_codes = quantize(weight * 2, None, method="rtn")
    object.__setattr__(same_codes, "initial_bytes", expected.initial_bytes)
    object.__setattr__(same_codes, "scale_bytes", expected.scale_bytes)
    object.__setattr__(same_codes, "codes", expected.codes)
    object.__setattr__(same_codes, "packed", expected.packed)
    object.__setattr__(same_codes, "delta", expected.delta)
    text = identical(expected, same_codes)
    sg, want = float(same_codes.global_scale), float(expected.global_scale)
    assert text.startswith(f"global_scale {sg!r} (0x"), text
    assert f"expected {want!r} (0x" in text
    assert_well_written(text)
    wrong_byte = expected.scale_bytes.copy()
    wrong_byte[1, 1] = 0x7E
    object.__setattr__(same_codes, "scale_bytes", wrong_byte)
    object.__setattr__(same_codes, "global_scale", expected.global_scale)
    assert identical(expected, same_codes) == (
        f"scale_bytes[1, 1] = 0x7E, expected 0x{int(expected.scale_bytes[1, 1]):02X} "
        "(1 element differ)")


# -- ties --------------------------------------------------------------------------------------

def test_an_e4m3_tie_rounded_the_wrong_way_is_said_to_be_an_exact_tie():
    the_case = case("e4m3-amax-midpoints")  # group maxima on E4M3 midpoints (s_g = 1)
    rendered = findings_of(E4M3HalfUp(), the_case)
    assert rendered
    for text in rendered:
        assert text.startswith("[NVFP4-INIT-1] group (r="), text
        assert re.search(r"initial byte expected 0x([0-9A-F]{2}) observed 0x[0-9A-F]{2}; "
                         r"amax_g / \(6 s_g\) = [0-9.e-]+ exactly, the E4M3 midpoint between "
                         r"0x[0-9A-F]{2} and 0x[0-9A-F]{2}: an exact tie, which goes to the "
                         r"even mantissa \(NVFP4-E4M3-2\)", text), text


def test_a_tie_behind_a_searched_byte_is_named():
    """An implementation that reports only its bytes and codes, whose window starts from the
    wrong neighbour of a tie: the finding names the window rule and the tie behind it."""
    the_case = case("e4m3-amax-midpoints").with_(method="hscale", hessian_diag=np.ones(16),
                                                 K=1, U=0)
    rendered = findings_of(E4M3HalfUp(), the_case,
                           reported=("scale_bytes", "codes", "global_scale"))
    assert rendered
    for text in rendered:
        assert text.startswith("[HSCALE-WIN-1] "), text
        assert "; the initial byte comes from a tie: amax_g / (6 s_g) = " in text
        assert "an exact tie, which goes to the even mantissa (NVFP4-E4M3-2)" in text


def test_a_wrong_initial_byte_under_the_same_chosen_byte_is_an_init_finding():
    """The search ends on the right byte from the wrong initial byte: the reported delta is
    wrong because the initial byte is, and the finding says so, with the tie."""
    the_case = case("e4m3-amax-midpoints").with_(method="hscale", hessian_diag=np.ones(16))
    rendered = findings_of(E4M3HalfUp(), the_case)
    assert rendered
    for text in rendered:
        assert text.startswith("[NVFP4-INIT-1] "), text
        assert re.search(r"reported delta expected [+-]\d+ observed [+-]\d+ though the scale "
                         r"byte 0x[0-9A-F]{2} agrees: initial byte expected", text), text
        assert "an exact tie" in text


def test_an_e2m1_tie_rounded_the_wrong_way_is_said_to_be_an_exact_tie():
    rendered = findings_of(RoundHalfAway(), case("e2m1-midpoint-ties"))
    ties = [text for text in rendered if "exactly, an E2M1 midpoint: an exact tie, which goes "
            "to the even code" in text]
    assert ties, rendered
    assert all(text.startswith("[NVFP4-E2M1-2] group (r=") and " element j=" in text
               for text in ties)


def test_a_4over6_initial_byte_shows_both_quotients():
    the_case = case("init-4over6-rtn-C448")
    expected = the_case.expected
    wrong = expected.scale_bytes.copy()
    wrong[0, 0] ^= 1
    observed, _ = observe(SimpleNamespace(scale_bytes=wrong, codes=expected.codes,
                                          global_scale=expected.global_scale), the_case)
    text = diagnose(the_case, observed).findings[0].render()
    assert text.startswith("[NVFP4-INIT-2] group (r=0, i=0): rtn's scale byte: initial byte "
                           f"expected 0x{int(expected.scale_bytes[0, 0]):02X} observed "
                           f"0x{int(wrong[0, 0]):02X}; amax_g / (6 s_g) = "), text
    assert "; amax_g / (4 s_g) = " in text


# -- the command reports ----------------------------------------------------------------------

def test_check_report_counts_in_the_singular_and_writes_hex_in_upper_case(tmp_path):
    line = next(l for l in observed_lines(DEFAULT_LEVEL0_DIR, False)
                if l.startswith("e2m1-midpoint-ties 0 0 "))
    case_id, row, group, byte, packed = line.split()
    wrong = " ".join((case_id, row, group, byte, packed[:-1] + format(int(packed[-1], 16) ^ 1,
                                                                       "x")))
    observed = tmp_path / "observed.txt"
    observed.write_text(wrong + "\n")
    out = io.StringIO()
    assert check(DEFAULT_LEVEL0_DIR, observed, out=out) == 1
    text = out.getvalue()
    assert "1 observed line checked, 1 error; 1 of " in text
    assert f"=> {byte.upper()} {packed[:-1].upper()}" in text
    for report_line in text.splitlines():
        assert_well_written(report_line)


def test_explain_counts_in_the_singular_and_writes_hex_in_upper_case():
    file_name, one_group = VECTORS["argmin-tie-keeps-baseline-0"]  # one row, one group
    with pytest.raises(ValueError) as error:
        explain_group(file_name, one_group, 1, 0)
    assert str(error.value) == ("case argmin-tie-keeps-baseline-0 has 1 row and 1 group per "
                                "row: there is no group (row 1, group 0)")
    text = explain_group(file_name, one_group, 0, 0)
    for line in text.splitlines():
        if not line.startswith("observed-file line:"):  # the file's own form, as expect writes
            assert_well_written(line)
    assert re.search(r"chosen byte 0x[0-9A-F]{2}, delta", text)


def test_verify_counts_one_problem_in_the_singular(tmp_path, capsys):
    directory = tmp_path / "vectors"
    write_files(directory, generate_files(1, subset="l1-window-K16-U6"))  # a small set
    (directory / "stray.json").write_text("{}\n")  # a vector file the manifest does not list
    assert hscale_main(["vectors", "verify", str(directory)]) == 1
    out = capsys.readouterr().out
    assert "DRIFT stray.json: not listed in manifest.json" in out
    assert f"{directory}: 1 problem; the vectors do not match the reference" in out


def test_demo_explains_its_columns(tmp_path, capsys):
    rng = np.random.default_rng(0)
    layer = tmp_path / "layer.npz"
    np.savez(layer, weight=(rng.standard_normal((4, 64)) * 0.05).astype(np.float32),
             hessian_diag=rng.uniform(0, 10, 64))
    assert hscale_main(["demo", "--layer", str(layer)]) == 0
    out = capsys.readouterr().out
    for column in ("weighted error", "weight error", "vs rtn"):
        assert re.search(rf"^{column}\s+\S", out, re.M), f"column {column!r} is not explained"
    assert "Why H-Scale's weight error can exceed scale-only's" in out
    assert "H-Scale for the smallest weighted error" in out


@pytest.mark.slow  # the peak-memory step starts a fresh interpreter per method
def test_bench_reports_progress_and_what_takes_the_time(capsys):
    assert hscale_main(["bench", "--rows", "8", "--cols", "32", "--repeat", "1", "--methods",
                        "rtn,hscale", "--backends", "numpy"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "hscale bench: the peak-memory measurement takes most of the time (--no-memory skips "
        "it)",
        "hscale bench [1/4] rtn: timing the reference against no backend, 1 round",
        "hscale bench [2/4] rtn: peak memory, one call per backend in a fresh process (most of "
        "the run's time; --no-memory skips it)",
        "hscale bench [3/4] hscale: timing the reference against no backend, 1 round",
        "hscale bench [4/4] hscale: peak memory, one call per backend in a fresh process (most "
        "of the run's time; --no-memory skips it)"]
    assert [line.split()[:2] for line in captured.out.splitlines() if not line.startswith("#")] \
        == [["rtn", "numpy"], ["hscale", "numpy"]]
