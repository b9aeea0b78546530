"""cocotb bench of the stochastic-rounding unit: streams the stochastic golden-vector sets through
nvfp4_sr_e2m1x4 (src/nvfp4_sr_e2m1x4.sv, combinational) in one simulation.

Started by vectors/rtl/run.py (cocotb.runner), which writes a plan (JSON, path in the
environment variable HSCALE_RTL_PLAN): the sets' .hex paths (``sr_*.hex``: one line per random
word, ``_``-separated fields named in its ``//`` header: case, row, word, v0..v3, rbits, then
the four codes under each routing profile, v3's first), the routing profiles in the unit's
order (its ``profile`` input: 0, 1, 2) and, per profile, the observed file to write and where
to write a summary.

  per word   drive v (v_i at [32i +: 32]) and rbits; for each profile drive ``profile``, let the
             unit settle (1 ns) and read ``codes`` (the code of v_i at [4i +: 4])
  writes     per profile one observed file, ``<case_id> <row> <word> <codes>`` (the four codes
             as hex digits, element 0 first: what `hscale vectors check --routing P` reads;
             case ids from the header's case table)
  counts     per profile the words whose codes differ from the file's (the bench's own
             comparison, as tb/tb_sr.sv makes it)
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import cocotb
from cocotb.triggers import Timer

_FIELD_RE = re.compile(r"^//\s+(\S+)\s+(\d+) hex digits")
_CASE_RE = re.compile(r"^//\s+([0-9a-f]{4}) (\S+)$")


class _SrSet:
    """One ``sr_*.hex`` file: its field names (from the header, in line order), its case table
    and its data lines split into fields (hex strings)."""

    def __init__(self, path: str):
        self.fields: list[str] = []
        self.case_ids: dict[int, str] = {}
        self.words: list[dict] = []
        for line in Path(path).read_text(encoding="ascii").splitlines():
            if line.startswith("//"):
                if (m := _FIELD_RE.match(line)):
                    self.fields.append(m.group(1))
                elif (m := _CASE_RE.match(line)):
                    self.case_ids[int(m.group(1), 16)] = m.group(2)
            elif line.strip():
                parts = line.strip().split("_")
                if len(parts) != len(self.fields):
                    raise ValueError(f"{path}: {len(parts)} fields on a line whose header "
                                     f"names {len(self.fields)}")
                self.words.append(dict(zip(self.fields, parts)))


def _codes_hex(codes: int) -> str:
    """The unit's codes word as the observed format writes it: element 0 first."""
    return "".join(format((codes >> (4 * i)) & 0xF, "x") for i in range(4))


@cocotb.test()
async def stochastic_vectors(dut):
    """Every word of every set of the plan through the unit, under every routing profile."""
    plan = json.loads(Path(os.environ["HSCALE_RTL_PLAN"]).read_text())
    routings = plan["routings"]
    observed = {routing: ["# cocotb_sr (cocotb bench of nvfp4_sr_e2m1x4), routing " + routing]
                for routing in routings}
    counts = {routing: {"words": 0, "code_mismatches": 0} for routing in routings}
    start = time.monotonic()
    for path in plan["sets"]:
        vs = _SrSet(path)
        for word in vs.words:
            dut.v.value = sum(int(word[f"v{i}"], 16) << (32 * i) for i in range(4))
            dut.rbits.value = int(word["rbits"], 16)
            key = (f"{vs.case_ids[int(word['case'], 16)]} {int(word['row'], 16)} "
                   f"{int(word['word'], 16)}")
            for profile, routing in enumerate(routings):
                dut.profile.value = profile
                await Timer(1, units="ns")
                codes = int(dut.codes.value)
                observed[routing].append(f"{key} {_codes_hex(codes)}")
                counts[routing]["words"] += 1
                counts[routing]["code_mismatches"] += codes != int(word[routing], 16)
    sim_s = round(time.monotonic() - start, 3)
    for routing in routings:
        Path(plan["observed"][routing]).write_text("\n".join(observed[routing]) + "\n",
                                                   encoding="utf-8")
        counts[routing]["sim_s"] = sim_s
    Path(plan["summary"]).write_text(json.dumps(counts))
    dut._log.info("%s", counts)
