"""The weight sets are a vector family like the others (hscale.vectors.weight_sets, issue 40):
every kind's row names its family, a set belongs to the family whose prefix is the longest its
name starts with, and ``hscale vectors check`` on the weight sets, now one family's
``check_lines`` among the others, prints what it printed before the weight kind had a family.

``data/weight_check_reports.json`` holds the reports of ``hscale vectors check`` made by the
code before that change (commit c323690), on observed files this module plants the same faults
in: a regression pin taken from the earlier implementation, not from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import observed_lines
from hscale.vectors.families import families, family_of, owner

from hscale.cli import main
from hscale.judge.kinds import KINDS, resolve

SET = "fp32_hscale_maxabs_K16_U6_C448"
REPORTS = json.loads((Path(__file__).parent / "data" / "weight_check_reports.json").read_text())


def test_every_kind_names_its_family_and_the_longest_prefix_owns_a_set():
    assert all(kind.family for kind in KINDS.values())
    assert set(families()) == set(KINDS)
    assert families()["weight"] is resolve("hscale.vectors.weight_sets")
    assert owner(SET) == owner("errors") == "weight"
    assert (owner("act_bf16_static"), owner("gemm_nvfp4"), owner("sr_e2m1x4"),
            owner("rht_16x16"), owner("tile_16x16")) == (
        "activation", "gemm", "stochastic", "rht", "tile")
    document = json.loads((LEVEL0_DIR / f"{SET}.json").read_text())
    assert family_of(document, "a-renamed-copy") is families()["weight"]
    act = json.loads((LEVEL0_DIR / "act_bf16_static.json").read_text())
    assert family_of(act, "a-renamed-copy") is families()["activation"]


def _planted(lines: list[str]) -> list[str]:
    """The third group line's scale byte one too high, the seventh's packed word with the
    bytes of each pair swapped (a byte-order slip at one group)."""
    out, groups = [], 0
    for line in lines:
        fields = line.split()
        if fields[1] != "gs":
            groups += 1
            if groups == 3:
                fields[3] = f"{(int(fields[3], 16) + 1) & 0xFF:02x}"
            if groups == 7:
                word = bytes.fromhex(fields[4])
                fields[4] = bytes(word[i ^ 1] for i in range(8)).hex()
        out.append(" ".join(fields))
    return out


def _reversed_words(lines: list[str]) -> list[str]:
    """Every packed word written byte-reversed (the slip said once for the file)."""
    return [" ".join(f[:4] + [bytes.fromhex(f[4])[::-1].hex()]) if f[1] != "gs" else line
            for line, f in ((line, line.split()) for line in lines)]


@pytest.mark.parametrize("name,edit,options", [
    ("check_fault", _planted, []),
    ("check_fault_faithful", _planted, ["--profile", "faithful", "--allow",
                                        "reciprocal-multiply"]),
    ("check_fileslip", _reversed_words, []),
])
def test_the_weight_check_report_is_the_one_before_the_family(name, edit, options, tmp_path,
                                                              capsys):
    observed = tmp_path / "observed.txt"
    observed.write_text("\n".join(edit(observed_lines(LEVEL0_DIR / f"{SET}.json"))) + "\n")
    status = main(["vectors", "check", str(LEVEL0_DIR / f"{SET}.json"), "--observed",
                   str(observed), *options])
    want = REPORTS[name]
    assert capsys.readouterr().out == want["stdout"].replace("{observed}", str(observed))
    assert status == want["exit"] == 1
