"""The SystemVerilog H-Scale NVFP4 RTL (vectors/rtl) on the level-0 golden vectors.

Runs the machinery of vectors/rtl/run.py (loaded from its file path: vectors/rtl is not a
Python package): every level-0 parameter set through the plain SystemVerilog bench and the
cocotb bench, under each simulator installed (Icarus Verilog, Verilator), judged by
`hscale vectors check`; then each planted RTL bug must make check fail, citing its clause.
The stochastic-rounding unit's cocotb bench (run_sr_bench) runs the stochastic sets under
every routing profile, with its own planted bugs.
A simulator that is not installed skips its tests with a one-line reason; nothing passes
without running.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO_ROOT

RUN_PY = REPO_ROOT / "vectors" / "rtl" / "run.py"


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
    implements every set's dtype, method, init and window: no set is left out but the
    block-Hessian method's (HSCALE-BLOCK-1, spec 1.3), which the RTL does not implement and
    which says so."""
    sets = rtl.discover_sets()
    assert len(sets) >= 20
    block = "method 'hscale-block' unknown to the RTL"
    assert {vs.name: rtl.unsupported_reason(vs) for vs in sets} == {
        vs.name: block if vs.parameters["method"] == "hscale-block" else None for vs in sets}
    assert {vs.weight_dtype for vs in sets} == {"float32", "bfloat16", "float16"}
    assert {vs.parameters["init"] for vs in sets} == {"maxabs", "4over6"}


def test_the_sv_bench_observed_file_is_checked_as_written(out):
    """The SV bench writes `<set>:<case_index>` keys and `hscale vectors check` reads them
    natively: run.py passes the bench's own file (no translated copy)."""
    assert not hasattr(rtl, "translate_index_keys")
    sim = _bug_simulator()
    result = rtl.run_bench("sv", sim, out=out, sets=["fp32_rtn_maxabs_C448"], log=_quiet)
    [s] = result.sets
    assert s.passed and s.observed.name == "fp32_rtn_maxabs_C448.observed.txt"
    lines = [l for l in s.observed.read_text().splitlines() if l and not l.startswith("#")]
    assert lines and all(l.startswith("fp32_rtn_maxabs_C448:") for l in lines)


#: The default run: each bench once, on the simulator where it is quickest to build and run
#: (the SV bench compiles once per line layout: Icarus in a second, Verilator in ~35 s; the
#: cocotb bench builds the DUT once). HSCALE_RTL_MATRIX=1 runs every bench on every simulator.
PREFERRED = {"sv": ("icarus", "verilator"), "cocotb": ("verilator", "icarus")}
MATRIX = os.environ.get("HSCALE_RTL_MATRIX", "") not in ("", "0")


def _default_sim(bench: str) -> str:
    """The simulator a bench runs on by default: the first of its preferred ones installed."""
    return next((sim for sim in PREFERRED[bench] if SIMULATORS.get(sim)), PREFERRED[bench][0])


@pytest.mark.parametrize("sim", rtl.SIMULATORS)
# the cocotb bench (Verilator's build, about 50 CPU s) is in the extended tier; the SV bench
# judges the same RTL against every level-0 group in the default one
@pytest.mark.parametrize("bench", ["sv", pytest.param("cocotb", marks=pytest.mark.extended)])
def test_rtl_matches_level0(bench, sim, out, capsys):
    """The conforming RTL: every level-0 group and global scale matches (0 mismatches), and
    the benches' own comparisons (initial byte, dequantized values, amax, s_g) agree."""
    if sim != _default_sim(bench) and not MATRIX:
        pytest.skip(f"the {bench} bench runs on {_default_sim(bench)} by default; "
                    "HSCALE_RTL_MATRIX=1 runs every bench on every simulator")
    _need(sim)
    if bench == "cocotb" and rtl.cocotb_version() is None:
        pytest.skip("cocotb is not installed (pip install -e '.[rtl]': cocotb==1.8.1)")
    result = rtl.run_bench(bench, sim, out=out, log=_quiet)
    with capsys.disabled():  # the simulator's name and version, in the test log
        print(f"\n  RTL {bench} bench on {result.sim_version.splitlines()[0]}"
              + (f", cocotb {rtl.cocotb_version()}" if bench == "cocotb" else "")
              + f": {len(result.sets)} sets, {sum(s.groups for s in result.sets)} groups, "
              f"{result.mismatches} mismatches, {result.wall_s:.1f} s")
    assert result.error == ""
    # the one set the RTL does not implement (hscale-block), left out with its reason
    block = [vs.name for vs in rtl.discover_sets() if vs.parameters["method"] == "hscale-block"]
    assert [name for name, _ in result.not_run] == block
    assert {s.name: s.error for s in result.sets if s.error} == {}
    assert sum(s.groups for s in result.sets) == sum(vs.nlines for vs in rtl.discover_sets()
                                                     if vs.name not in block)
    assert {s.name: s.mismatches for s in result.sets if s.mismatches} == {}
    assert {s.name: s.bench for s in result.sets if not s.passed} == {}
    assert result.passed


# bug -> {set: the clause IDs `hscale vectors check` cites, and nothing else}; each set holds
# the cases the bug breaks (a subset of level 0, to keep the run short; run.py --bug NAME runs
# them all: docs/performance.md lists what each bug gives on every set).
BUG_CLAUSES = {
    "ties-away": {"fp32_rtn_maxabs_C448": {"NVFP4-E2M1-2"}},
    "first-in-window": {"fp32_hscale_maxabs_K16_U6_C448": {"HSCALE-ARGMIN-1"}},
    "truncated-e4m3": {"fp32_rtn_maxabs_C448": {"NVFP4-INIT-1"},
                       "fp32_rtn_4over6_C256": {"NVFP4-INIT-2"}},
    "no-subnormal-scale": {"fp32_rtn_maxabs_C448": {"NVFP4-INIT-1"}},
    "little-endian-packed": {"fp32_rtn_maxabs_C448": {"NVFP4-PACK-1"},
                             "fp32_hscale_maxabs_K16_U6_C448": {"NVFP4-PACK-1"}},
}


# little-endian-packed over all its sets (about 12 CPU s) is in the extended tier; the test
# below plants it in the default one
@pytest.mark.parametrize("bug", [
    pytest.param(bug, marks=[pytest.mark.extended] if bug == "little-endian-packed" else [])
    for bug in sorted(BUG_CLAUSES)])
def test_planted_bug_is_caught_with_its_clause_only(bug, out):
    sim = _bug_simulator()
    expected = BUG_CLAUSES[bug]
    result = rtl.run_bench("sv", sim, bug=bug, out=out, sets=sorted(expected), log=_quiet)
    assert result.error == "" and result.not_run == []
    assert not result.passed
    assert {s.name: set(s.clauses) for s in result.sets} == expected
    assert all(s.mismatches > 0 and s.check_rc == 1 for s in result.sets)


def test_planted_bug_little_endian_packed_is_one_byte_order_line(out):
    """The packed word leaves little-endian: nearly every group is wrong, and check says so in
    one line per file, with no rounding or sign finding (it read 399 NVFP4-E2M1-2 and 75
    NVFP4-E2M1-3 findings before it knew byte order)."""
    sim = _bug_simulator()
    result = rtl.run_bench("sv", sim, bug="little-endian-packed", out=out,
                           sets=["fp32_rtn_maxabs_C448"], log=_quiet)
    [s] = result.sets
    assert not s.passed and s.check_rc == 1
    assert s.mismatches >= 270          # nearly every group (a few are byte palindromes)
    findings = [l for l in s.check_text.splitlines() if "[NVFP4-" in l or "[HSCALE-" in l]
    assert len(findings) == 1, s.check_text[:3000]
    assert "the packed words are byte-reversed: written little-endian? byte 0 is the leftmost " \
           "(most significant) byte of the hex word" in findings[0]


# -- an fp32-quotient datapath (vectors/rtl/fp32_quotient.py): faithful, not exact ----------

FP32_QUOTIENT = RUN_PY.with_name("fp32_quotient.py")


def _load_fp32_quotient():
    spec = importlib.util.spec_from_file_location("hscale_rtl_fp32_quotient", FP32_QUOTIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fp32_quotient_datapath_is_faithful_with_its_allowances_not_exact(tmp_path):
    """A datapath dividing in fp32 (the initial byte's quotient and each |w|/s): `check` says
    it does not conform under exact, and conforms under faithful with the allowances naming
    that arithmetic (fp32-scale-rounding, reciprocal-multiply); with one of them only, not."""
    import io

    from hscale.vectors import LEVEL0_DIR, check
    model = _load_fp32_quotient()
    observed = tmp_path / "fp32_quotient.txt"
    observed.write_text("\n".join(model.observed_lines(LEVEL0_DIR)) + "\n")

    def verdict(*allow, profile="faithful"):
        out = io.StringIO()
        status = check(LEVEL0_DIR, observed, out=out, profile=profile, allowances=allow,
                       max_errors=10000)
        return status, out.getvalue()

    status, text = verdict(profile="exact")
    assert status == 1 and text.splitlines()[-1] == "profile exact: does not conform"
    assert {"NVFP4-E2M1-2", "NVFP4-INIT-1"} == set(re.findall(r"^\s+\[([A-Z0-9-]+)\]", text,
                                                              re.M))
    status, text = verdict("reciprocal-multiply", "fp32-scale-rounding")
    last = text.splitlines()[-1]
    assert status == 0 and last.startswith("profile faithful, allowances: fp32-scale-rounding, "
                                           "reciprocal-multiply: conforms (allowances used: "), text
    status, text = verdict("reciprocal-multiply")
    assert status == 1 and "[NVFP4-INIT-1]" in text and "does not conform" in text
    # a real computation: it differs from the reference on a few groups, not on most
    lines = [l for l in observed.read_text().splitlines() if l and not l.startswith("#")]
    assert len(lines) > 900


# -- the stochastic-rounding unit's cocotb bench (tb/cocotb_sr.py) --------------------------
# (its SV bench, tb/tb_sr.sv, runs in test_rtl_stochastic.py; Icarus in the default tier)

#: planted bug -> routing -> the clauses `check --routing` cites (empty: that routing conforms)
SR_BUG_CLAUSES = {
    "none": {routing: set() for routing in rtl.SR_PROFILES},
    "sr-carry-over-256": {routing: {"NVFP4-SR-2"} for routing in rtl.SR_PROFILES},
    "sr-dropped-carry": {routing: {"NVFP4-SR-2"} for routing in rtl.SR_PROFILES},
    # straight routes as ptx-e2m1x4: the whole tensor reads as that routing's; the other two
    # profiles are untouched
    "sr-bytes-swapped": {"straight": {"NVFP4-SR-4"}, "ptx-e2m1x4": set(), "sm103a": set()},
}
#: what each simulator runs (a Verilator build per bug costs ~15 CPU s: one bug there)
SR_RUNS = [("icarus", bug) for bug in SR_BUG_CLAUSES] + [("verilator", "none"),
                                                         ("verilator", "sr-bytes-swapped")]


# one simulation of every stochastic word under the three profiles and three `check`s, about
# 7 CPU s on Icarus (a Verilator build about 15 more): the extended tier
@pytest.mark.extended
@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-3", "NVFP4-SR-4")
@pytest.mark.parametrize("sim,bug", SR_RUNS)
def test_sr_unit_cocotb_bench(sim, bug, out, capsys):
    """Every word of the stochastic sets through nvfp4_sr_e2m1x4 in one cocotb simulation,
    under every routing profile: the conforming unit matches every word under each (`check
    --routing P --require-all`, and the bench's own comparison with the file's codes); each
    planted bug is refused citing its clause, and only under the routings it breaks."""
    _need(sim)
    if rtl.cocotb_version() is None:
        pytest.skip("cocotb is not installed (pip install -e '.[rtl]': cocotb==1.8.1)")
    result = rtl.run_sr_bench(sim, bug=bug, out=out, log=_quiet)
    with capsys.disabled():
        print(f"\n  RTL SR unit, cocotb bench on {result.sim_version.splitlines()[0]}, bug {bug}: "
              f"{result.mismatches} mismatches, build {result.build_s:.1f} s, "
              f"wall {result.wall_s:.1f} s")
    assert result.error == "" and result.unit == "sr"
    words = sum(len([l for l in path.read_text().splitlines() if not l.startswith("//")])
                for path in rtl.discover_sr_sets())
    assert words >= 5680
    expected = SR_BUG_CLAUSES[bug]
    assert [s.name.rsplit(" ", 1)[1] for s in result.sets] == list(rtl.SR_PROFILES)
    for s, routing in zip(result.sets, rtl.SR_PROFILES):
        assert s.error == "" and s.groups == words, s.error
        assert set(s.clauses) == expected[routing], s.check_text[-2000:]
        if expected[routing]:
            assert s.check_rc == 1 and s.mismatches > 0 and s.bench["code_mismatches"] > 0
            assert not s.passed
        else:
            assert s.check_rc == 0 and s.mismatches == 0 and s.bench["code_mismatches"] == 0
            assert f"{words} of {words} words of the stochastic vectors observed" in s.check_text
            assert s.passed
    assert result.passed == (bug == "none")
