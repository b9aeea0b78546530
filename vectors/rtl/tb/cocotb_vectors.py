"""cocotb bench: streams golden-vector parameter sets through hscale_nvfp4_top.

Started by vectors/rtl/run.py (cocotb.runner), which writes a plan (JSON, path in the
environment variable HSCALE_RTL_PLAN): for each set its .hex / .gs.hex paths, the field ranges
read from the .hex header, the case table, the configuration (dtype, method, init, K, U) and
where to write the observed file and a summary. One simulation runs every set of the plan:

  per case   pass 1: the case's groups through the amax unit (checked against the .gs.hex amax);
             the global-scale unit (the supplied s_g passed through when the case gives one);
             pass 2: every group with that s_g, one per clock while in_ready is high
  writes     `<case_id> gs <s_g>` and `<case_id> <row> <group> <scale> <packed>` lines (case
             ids from the header's case table; packed byte 0 first, as the DUT emits it)
  counts     what the observed format does not carry: c0, dequantized values, amax, the
             per-line s_g

Inputs are driven and outputs sampled on the falling clock edge, so nothing races the DUT's
rising-edge registers.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge


def _bits(word: int, rng) -> int:
    hi, lo = rng
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def _read_words(path: str) -> list[int]:
    words = []
    for line in Path(path).read_text(encoding="ascii").splitlines():
        line = line.split("//", 1)[0].strip()
        if line:
            words.append(int(line.replace("_", ""), 16))
    return words


class _Set:
    def __init__(self, entry: dict):
        self.entry = entry
        self.fields = {k: tuple(v) for k, v in entry["fields"].items()}
        self.gs_fields = {k: tuple(v) for k, v in entry["gs_fields"].items()}
        self.case_ids = {int(k): v for k, v in entry["case_ids"].items()}
        self.lines = _read_words(entry["hex"])
        self.gs = _read_words(entry["gs"])
        self.has_h = "h0" in self.fields

    def weights(self, word: int) -> int:
        """raw weight j in lane [32j +: 32] (16-bit dtypes zero-extended)"""
        return sum(_bits(word, self.fields[f"w{j}"]) << (32 * j) for j in range(16))

    def hessian(self, word: int) -> int:
        if not self.has_h:
            return 0
        return sum(_bits(word, self.fields[f"h{j}"]) << (64 * j) for j in range(16))

    def deq(self, word: int) -> int:
        return sum(_bits(word, self.fields[f"deq{j}"]) << (32 * j) for j in range(16))


async def _reset(dut):
    for name in ("am_clear", "am_valid", "am_w", "gs_valid", "gs_amax", "gs_ceiling", "gs_given",
                 "gs_supplied", "in_valid", "in_tag", "in_sg", "in_w", "in_h", "cfg_dtype",
                 "cfg_method", "cfg_init", "cfg_k", "cfg_u"):
        getattr(dut, name).value = 0
    dut.rst_n.value = 0
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst_n.value = 1
    await FallingEdge(dut.clk)


async def _run_set(dut, vs: _Set) -> dict:
    f, cfg = vs.fields, vs.entry["config"]
    g = vs.gs_fields
    counts = {"groups": 0, "c0_mismatches": 0, "deq_mismatches": 0, "amax_mismatches": 0,
              "sg_mismatches": 0, "gs_rejects": 0, "cycles": 0}
    dut.cfg_dtype.value = cfg["dtype"]
    dut.cfg_method.value = cfg["method"]
    dut.cfg_init.value = cfg["init"]
    dut.cfg_k.value = cfg["K"]
    dut.cfg_u.value = cfg["U"]
    await FallingEdge(dut.clk)
    cases: dict[int, list[int]] = {}
    for index, word in enumerate(vs.lines):
        cases.setdefault(_bits(word, f["case"]), []).append(index)
    observed = [f"# cocotb_vectors (cocotb bench), set {vs.entry['name']}"]
    for gs_word in vs.gs:
        case = _bits(gs_word, g["case"])
        members = cases.get(case, [])
        # pass 1: the tensor's amax (NVFP4-GS-1)
        dut.am_clear.value = 1
        await FallingEdge(dut.clk)
        dut.am_clear.value = 0
        for index in members:
            dut.am_valid.value = 1
            dut.am_w.value = vs.weights(vs.lines[index])
            await FallingEdge(dut.clk)
            counts["cycles"] += 1
        dut.am_valid.value = 0
        amax = int(dut.am_amax.value)
        if members and amax != _bits(gs_word, g["amax"]):
            counts["amax_mismatches"] += 1
        # the global scale (NVFP4-GS-1..3)
        dut.gs_valid.value = 1
        dut.gs_amax.value = amax
        dut.gs_ceiling.value = _bits(gs_word, g["ceiling"])
        dut.gs_given.value = _bits(gs_word, g["given"]) & 1
        dut.gs_supplied.value = _bits(gs_word, g["s_g"])
        await FallingEdge(dut.clk)
        dut.gs_valid.value = 0
        sg = int(dut.gs_sg.value)
        counts["gs_rejects"] += int(dut.gs_reject.value)
        observed.append(f"{vs.case_ids[case]} gs {sg:08x}")
        # pass 2: the groups
        sent = got = 0
        while got < len(members):
            await FallingEdge(dut.clk)
            counts["cycles"] += 1
            if int(dut.out_valid.value):
                word = vs.lines[int(dut.out_tag.value)]
                scale, packed = int(dut.out_scale.value), int(dut.out_packed.value)
                observed.append(f"{vs.case_ids[case]} {_bits(word, f['row'])} "
                                f"{_bits(word, f['group'])} {scale:02x} {packed:016x}")
                if int(dut.out_c0.value) != _bits(word, f["c0"]):
                    counts["c0_mismatches"] += 1
                if int(dut.out_deq.value) != vs.deq(word):
                    counts["deq_mismatches"] += 1
                got += 1
            if sent < len(members) and int(dut.in_ready.value):
                index = members[sent]
                word = vs.lines[index]
                if _bits(word, f["s_g"]) != sg:
                    counts["sg_mismatches"] += 1
                dut.in_valid.value = 1
                dut.in_tag.value = index
                dut.in_sg.value = sg
                dut.in_w.value = vs.weights(word)
                dut.in_h.value = vs.hessian(word)
                sent += 1
            else:
                dut.in_valid.value = 0
        counts["groups"] += got
    Path(vs.entry["observed"]).write_text("\n".join(observed) + "\n", encoding="utf-8")
    return counts


@cocotb.test()
async def golden_vectors(dut):
    """Every set of the plan through the DUT; one observed file and summary per set."""
    plan = json.loads(Path(os.environ["HSCALE_RTL_PLAN"]).read_text())
    cocotb.start_soon(Clock(dut.clk, 10, units="ns").start())
    await _reset(dut)
    for entry in plan["sets"]:
        start = time.monotonic()
        counts = await _run_set(dut, _Set(entry))
        counts["sim_s"] = round(time.monotonic() - start, 3)
        Path(entry["summary"]).write_text(json.dumps(counts))
        dut._log.info("%s: %d groups, %s", entry["name"], counts["groups"], counts)
