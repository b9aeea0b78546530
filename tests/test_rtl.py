"""The SystemVerilog H-Scale NVFP4 RTL (vectors/rtl) on the level-0 golden vectors.

Runs the machinery of vectors/rtl/run.py (loaded from its file path: vectors/rtl is not a
Python package): every level-0 parameter set through the plain SystemVerilog bench and the
cocotb bench, under each simulator installed (Icarus Verilog, Verilator), judged by
`hscale vectors check`; then each planted RTL bug must make check fail, citing its clause.
A simulator that is not installed skips its tests with a one-line reason; nothing passes
without running.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

RUN_PY = Path(__file__).resolve().parent.parent / "vectors" / "rtl" / "run.py"


def _load_run_py():
    spec = importlib.util.spec_from_file_location("hscale_rtl_run", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


rtl = _load_run_py()
SIMULATORS = rtl.simulators()
INSTALL = {"icarus": "apt-get install -y iverilog", "verilator": "apt-get install -y verilator"}


def _need(sim: str) -> None:
    if SIMULATORS.get(sim) is None:
        pytest.skip(f"simulator {sim} is not installed ({INSTALL[sim]})")


def _bug_simulator() -> str:
    """The planted bugs run on one simulator: Icarus (no C++ build per bug), else Verilator."""
    for sim in ("icarus", "verilator"):
        if SIMULATORS.get(sim):
            return sim
    pytest.skip("no RTL simulator installed: neither icarus (apt-get install -y iverilog) "
                "nor verilator (apt-get install -y verilator)")


def _quiet(*_args) -> None:
    pass


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rtl")


def test_every_level0_set_is_runnable():
    """The benches' line layout matches every level-0 header, field by field, and the RTL
    implements every set's dtype, method, init and window: no set is left out."""
    sets = rtl.discover_sets()
    assert len(sets) >= 20
    assert {vs.name: rtl.unsupported_reason(vs) for vs in sets} == {vs.name: None for vs in sets}
    assert {vs.weight_dtype for vs in sets} == {"float32", "bfloat16", "float16"}
    assert {vs.parameters["init"] for vs in sets} == {"maxabs", "4over6"}


def test_translate_index_keys(tmp_path):
    """The temporary translation of `<set>:<case_index>` keys uses the .hex case table."""
    vs = rtl.read_set(rtl.LEVEL0 / "fp32_rtn_maxabs_C448.hex")
    raw = tmp_path / "raw.txt"
    raw.write_text("# comment\nfp32_rtn_maxabs_C448:0 gs 3f800000\n"
                   "fp32_rtn_maxabs_C448:1 3 0 3b 07224466a8caec0e\n")
    text = rtl.translate_index_keys(raw, vs, tmp_path / "ids.txt").read_text()
    assert text.splitlines() == ["# comment", f"{vs.case_ids[0]} gs 3f800000",
                                 f"{vs.case_ids[1]} 3 0 3b 07224466a8caec0e"]
    assert vs.case_ids[1] == "e2m1-midpoint-ties"


@pytest.mark.parametrize("sim", rtl.SIMULATORS)
@pytest.mark.parametrize("bench", ["sv", "cocotb"])
def test_rtl_matches_level0(bench, sim, out):
    """The conforming RTL: every level-0 group and global scale matches (0 mismatches), and
    the benches' own comparisons (initial byte, dequantized values, amax, s_g) agree."""
    _need(sim)
    if bench == "cocotb" and rtl.cocotb_version() is None:
        pytest.skip("cocotb is not installed (pip install cocotb==1.8.1)")
    result = rtl.run_bench(bench, sim, out=out, log=_quiet)
    assert result.error == ""
    assert result.not_run == []
    assert {s.name: s.error for s in result.sets if s.error} == {}
    assert sum(s.groups for s in result.sets) == sum(vs.nlines for vs in rtl.discover_sets())
    assert {s.name: s.mismatches for s in result.sets if s.mismatches} == {}
    assert {s.name: s.bench for s in result.sets if not s.passed} == {}
    assert result.passed


# bug -> {set: the clause IDs `hscale vectors check` cites today}; each set is one that holds
# the cases the bug breaks (a subset of level 0, to keep the run short; run.py --bug NAME runs
# them all).
BUG_CLAUSES = {
    "ties-away": {"fp32_rtn_maxabs_C448": {"NVFP4-E2M1-2"}},
    "first-in-window": {"fp32_hscale_maxabs_K16_U6_C448": {"HSCALE-ARGMIN-1"}},
    "truncated-e4m3": {"fp32_rtn_maxabs_C448": {"NVFP4-INIT-1"},
                       "fp32_rtn_4over6_C256": {"NVFP4-INIT-2"}},
    "no-subnormal-scale": {"fp32_rtn_maxabs_C448": {"NVFP4-INIT-1"}},
}


@pytest.mark.parametrize("bug", sorted(BUG_CLAUSES))
def test_planted_bug_is_caught(bug, out):
    sim = _bug_simulator()
    expected = BUG_CLAUSES[bug]
    result = rtl.run_bench("sv", sim, bug=bug, out=out, sets=sorted(expected), log=_quiet)
    assert result.error == "" and result.not_run == []
    assert not result.passed
    assert {s.name: set(s.clauses) for s in result.sets} == expected
    assert all(s.mismatches > 0 and s.check_rc == 1 for s in result.sets)


def test_planted_bug_little_endian_packed_is_caught(out):
    sim = _bug_simulator()
    result = rtl.run_bench("sv", sim, bug="little-endian-packed", out=out,
                           sets=["fp32_rtn_maxabs_C448"], log=_quiet)
    assert result.error == "" and result.not_run == []
    [s] = result.sets
    assert not s.passed and s.check_rc == 1
    assert s.mismatches >= 270          # nearly every group (a few are byte palindromes)
    # Today check reads the byte-reversed word as wrong codes: it cites NVFP4-E2M1-2 /
    # NVFP4-E2M1-3 (and NVFP4-PACK-1 for a swapped nibble pair). Once `hscale vectors check`
    # diagnoses a byte-order slip, the expected text becomes "byte order": assert it then.
    assert {"NVFP4-E2M1-2", "NVFP4-E2M1-3"} <= set(s.clauses)
