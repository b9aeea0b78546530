"""The stochastic-rounding golden vectors (the sr_e2m1x4 set of vectors/level0,
hscale.vectors.stochastic_sets): what they store against independent derivations (the
independent kernel of tests/helpers, D_top by hand), that verify finds a tampered file, that
check --routing judges a result file as the suite would (and names the clause), expect and
explain; the committed files are what the reference renders."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors
from hscale.vectors.verify import verify_dir

from helpers.cli import Run, hscale_here
from helpers.stochastic_kernels import CarryExact, codes as independent_codes, routed_bytes

SET = LEVEL0_DIR / "sr_e2m1x4.json"
ROUTINGS = ("straight", "ptx-e2m1x4", "sm103a")


def _cases() -> dict:
    return {case_id: case for case_id, (name, case) in open_vectors(LEVEL0_DIR).family_cases.items()
            if name.startswith("sr_")}


def _hscale(*args, cwd) -> Run:
    return hscale_here(["vectors", *args], cwd=cwd)


@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-3", "NVFP4-SR-4")
def test_the_stored_codes_are_the_independent_kernels_under_every_routing():
    document = json.loads(SET.read_text())
    cases = _cases()
    assert set(cases) == {"sr-every-cell-every-byte", "sr-specials", "sr-fmaf-false-carries",
                          "sr-random-words"}
    for entry in document["cases"]:
        case = cases[entry["id"]]
        for routing in ROUTINGS:
            stored = np.stack([np.array([int(c, 16) for c in row.replace(" ", "")])
                               for row in entry["expected"][routing]])
            mine = independent_codes(case.x, routed_bytes(case.words, routing))
            assert np.array_equal(stored, mine), (entry["id"], routing)


@pytest.mark.clause("NVFP4-SR-2")
def test_the_false_carry_inputs_and_their_d_top_worked_by_hand(tmp_path):
    """The stored values are the fp32 predecessors of k/512 (numpy's nextafter), with the word
    (256 - k) * 0x01010101; explain says D_top = floor(512 v) = k - 1."""
    case = _cases()["sr-fmaf-false-carries"]
    for k in (1, 2, 128):
        v = case.x[0, 4 * (k - 1)]
        assert v == np.nextafter(np.float32(k / 512), np.float32(0))
        assert int(case.words[0, k - 1]) == (256 - k) * 0x01010101
        done = _hscale("explain", "sr-fmaf-false-carries", "0", str(k - 1), cwd=tmp_path)
        assert int(np.floor(np.float64(v) * 512)) == k - 1  # D_top in the cell [0, 0.5)
        assert f"D_top = {k - 1}" in done.stdout, done.stdout


@pytest.mark.clause("NVFP4-SR-2")
def test_verify_names_an_edited_code(tmp_path):
    copy = tmp_path / "v"
    shutil.copytree(LEVEL0_DIR, copy)
    path = copy / "sr_e2m1x4.json"
    document = json.loads(path.read_text())
    row = document["cases"][2]["expected"]["straight"][0]
    document["cases"][2]["expected"]["straight"][0] = ("1" if row[0] == "0" else "0") + row[1:]
    path.write_text(json.dumps(document, sort_keys=True, indent=1) + "\n")
    problems = verify_dir(copy)
    assert any("sr_e2m1x4.json: case sr-fmaf-false-carries" in p for p in problems), problems


@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-4")
def test_the_commands_on_stochastic_vectors(tmp_path):
    """expect --routing writes the words' codes; check --routing accepts them and refuses them
    under another routing naming NVFP4-SR-4, and refuses the fmaf model naming NVFP4-SR-2;
    explain works one word."""
    done = _hscale("expect", "--routing", "sm103a", "--out", "sm103a.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "sm103a.txt").read_text().splitlines()
    assert len(lines) == 21 * 256 + 3 * 16 + 128 + 8 * 16
    done = _hscale("check", "--routing", "sm103a", "--observed", "sm103a.txt", cwd=tmp_path)
    assert done.returncode == 0 and "conforms to the stochastic vectors" in done.stdout, \
        done.stdout
    done = _hscale("check", "--routing", "straight", "--observed", "sm103a.txt", cwd=tmp_path)
    assert done.returncode == 1 and "[NVFP4-SR-4]" in done.stdout, done.stdout
    model = CarryExact(fault="fmaf-nearest")
    case = _cases()["sr-fmaf-false-carries"]
    got = model.quantize_stochastic(case.x, random_bits=case.words)["codes"][0]
    (tmp_path / "fmaf.txt").write_text("".join(
        f"sr-fmaf-false-carries 0 {w} " + "".join(f"{int(c):x}" for c in got[4 * w:4 * w + 4])
        + "\n" for w in range(128)))
    done = _hscale("check", "--routing", "straight", "--observed", "fmaf.txt", cwd=tmp_path)
    assert done.returncode == 1 and "[NVFP4-SR-2]" in done.stdout and "no carry" in done.stdout
    done = _hscale("explain", "sr-fmaf-false-carries", "0", "0", cwd=tmp_path)
    assert done.returncode == 0 and "D_top = 0" in done.stdout and "0x3AFFFFFF" in done.stdout
    done = _hscale("check", "--routing", "sm104", "--observed", "fmaf.txt", cwd=tmp_path)
    assert done.returncode == 2 and "--routing sm104: one of straight" in done.stderr


def test_the_committed_set_is_what_the_reference_renders():
    from hscale.vectors.stochastic_sets import level0_cases, render_files
    manifest = json.loads((LEVEL0_DIR / "manifest.json").read_text())
    files = render_files(level0_cases(manifest["seed"]), 0, manifest["seed"],
                         manifest["spec_version"])
    for name, data in files.items():
        assert (LEVEL0_DIR / name).read_bytes() == data, name
