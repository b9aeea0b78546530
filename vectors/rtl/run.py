#!/usr/bin/env python3
"""Run the H-Scale NVFP4 RTL (vectors/rtl/src) on the golden vectors and judge it.

    python vectors/rtl/run.py [--bench sv|cocotb|both] [--sim icarus|verilator|all]
                              [--bug NAME] [--out DIR] [--vectors DIR] [--sets NAME ...]
                              [--jobs N]

For every parameter set of the vector directory (default: the committed level-0 set,
vectors/level0/*.hex, listed in its manifest.json) and every chosen bench and simulator, this
compiles the RTL, runs the set, writes one observed-result file per set, runs
`hscale vectors check DIR --observed FILE` on it, and prints the simulator's name and version,
the groups and mismatches per set, the clauses `check` cited, and the wall times. Sets the RTL
cannot run are listed as not run, with the reason. Exit status 0 when every set that ran
matched (and the benches' own comparisons of c0, dequantized values, amax and s_g agreed),
1 otherwise (so 1 is the expected status with --bug), 2 when nothing could run.

Benches:
  sv      tb/tb_vectors.sv: $readmemh of <set>.hex / <set>.gs.hex, $fwrite of the observed file
          keyed `<set>:<case_index>` (read by `hscale vectors check` as is); compiled once per
          line layout (the
          line width LINE_W, weight width W_BITS and HAS_H are parameters passed from the set's
          header), run once per set with plusargs.
  cocotb  tb/cocotb_vectors.py: one cocotb simulation per simulator streams every set through
          hscale_nvfp4_top and writes observed files with case ids; then tb/cocotb_sr.py, one
          more simulation, streams every stochastic set (sr_*.hex) through the stochastic-
          rounding unit nvfp4_sr_e2m1x4 under its three routing profiles and writes one
          observed file per profile, judged by `check DIR --routing P --require-all`. An sr-*
          bug (SR_BUGS) is planted in that unit and runs that bench only.

This file is also the machinery tests/vectors/test_rtl.py imports (by file path): run_bench(),
run_sr_bench(), discover_sets(), discover_sr_sets(), simulators(), BUGS, SR_BUGS.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LEVEL0 = REPO / "vectors" / "level0"
SRC = HERE / "src"
TB = HERE / "tb"
DEFAULT_OUT = HERE / "build"

# compile order: the package first
RTL_SOURCES = [SRC / name for name in (
    "hscale_nvfp4_pkg.sv", "nvfp4_e2m1_encode.sv", "hscale_objective.sv", "hscale_candidate.sv",
    "nvfp4_quantizer.sv",
    "hscale_search.sv", "nvfp4_global_scale.sv", "nvfp4_amax.sv", "nvfp4_dequant.sv",
    "hscale_nvfp4_top.sv")]
SV_BENCH = TB / "tb_vectors.sv"
COCOTB_MODULE = "cocotb_vectors"

# planted bugs: name -> BUG parameter value (hscale_nvfp4_pkg::BUG_*)
BUGS = {
    "none": 0,
    "ties-away": 1,              # E2M1 ties away from zero instead of to even
    "first-in-window": 2,        # argmin: first minimum in window order -D..+U
    "little-endian-packed": 3,   # packed word with byte 0 at [7:0]
    "truncated-e4m3": 4,         # initial byte truncated, not rounded
    "no-subnormal-scale": 5,     # E4M3 subnormal scales flushed (then the min-byte rule: 0x01)
}

DTYPES = {"float32": (0, 32), "bfloat16": (1, 16), "float16": (2, 16)}
METHODS = {"rtn": 0, "scale-only": 1, "hscale": 2}
INITS = {"maxabs": 0, "4over6": 1}
MAX_LINES_DEFAULT = 1024     # tb_vectors MAX_LINES (raised per build when a set needs more)
MAX_CASES_DEFAULT = 256
SIMULATORS = ("icarus", "verilator")
GS_FIELDS = {"case": (183, 168), "amax": (167, 136), "ceiling": (135, 72), "given": (71, 64),
             "s_g": (63, 32), "r": (31, 0)}


# ---- the vector sets ----------------------------------------------------------------------------

@dataclass
class VectorSet:
    """One parameter set: <name>.hex and <name>.gs.hex, as their // headers describe them."""
    name: str
    hex_path: Path
    gs_path: Path
    parameters: dict
    line_width: int
    fields: dict                 # field name -> (hi, lo)
    case_ids: dict               # case index -> case id
    nlines: int
    ncases: int
    gs_line_width: int = 0
    gs_fields: dict = field(default_factory=dict)

    @property
    def weight_dtype(self) -> str:
        return self.parameters.get("weight_dtype", "?")

    @property
    def w_bits(self) -> int:
        return DTYPES.get(self.weight_dtype, (None, 0))[1]

    @property
    def has_h(self) -> int:
        return int("h0" in self.fields)

    @property
    def layout(self) -> tuple[int, int, int]:
        return (self.line_width, self.w_bits, self.has_h)


_FIELD_RE = re.compile(r"^//\s+(\w+)\s+(\d+)\s+\[\s*(\d+):\s*(\d+)\]")
# the case table: index (hex), the observed-line key <set>:<index>, case id, shape, ...
_CASE_RE = re.compile(r"^//\s+([0-9a-f]{4})\s+\S+:\d+\s+(\S+)\s+(\d+)x(\d+)\s")


def _read_header(path: Path) -> tuple[dict, int, dict, dict, int]:
    """(parameters, line width, fields, case table, number of data lines) of a .hex file."""
    parameters, fields, cases = {}, {}, {}
    width, nlines = 0, 0
    for line in path.read_text(encoding="ascii").splitlines():
        if not line.startswith("//"):
            if line.strip():
                nlines += 1
            continue
        if line.startswith("// parameters:"):
            for item in line[len("// parameters:"):].split(","):
                key, _, value = item.strip().partition("=")
                parameters[key] = value
        elif line.startswith("// line width:"):
            width = int(line.split()[3])
        elif (m := _FIELD_RE.match(line)):
            fields[m.group(1)] = (int(m.group(3)), int(m.group(4)))
        elif (m := _CASE_RE.match(line)):
            cases[int(m.group(1), 16)] = m.group(2)
    return parameters, width, fields, cases, nlines


def read_set(hex_path: Path) -> VectorSet:
    hex_path = Path(hex_path)
    name = hex_path.name[:-len(".hex")]
    gs_path = hex_path.with_name(name + ".gs.hex")
    parameters, width, fields, cases, nlines = _read_header(hex_path)
    vs = VectorSet(name, hex_path, gs_path, parameters, width, fields, cases, nlines, len(cases))
    if gs_path.exists():
        _, vs.gs_line_width, vs.gs_fields, _, ncases = _read_header(gs_path)
        vs.ncases = ncases
    return vs


def discover_sets(directory: Path = LEVEL0) -> list[VectorSet]:
    """Every weight-quantizer parameter set of a vector directory: the .hex files its manifest
    lists (all *.hex files when there is no manifest), sorted by name. The other kinds' sets
    (run-time activation quantizers ``act_*``, GEMMs ``gemm_*``) are not the RTL quantizer's."""
    from hscale.vectors.families import owner
    directory = Path(directory)
    manifest = directory / "manifest.json"
    if manifest.exists():
        names = sorted(n for n in json.loads(manifest.read_text())["files"]
                       if n.endswith(".hex") and not n.endswith((".gs.hex", ".swz.hex")))
    else:
        names = sorted(p.name for p in directory.glob("*.hex")
                       if not p.name.endswith((".gs.hex", ".swz.hex")))
    return [read_set(directory / n) for n in names if owner(n[:-len(".hex")]) == "weight"]


def bench_layout(w_bits: int, has_h: int) -> dict:
    """The field ranges tb_vectors.sv (and the cocotb bench) assume for a line layout."""
    fields = {f"deq{j}": (511 - 32 * j, 480 - 32 * j) for j in range(16)}
    fields.update(packed=(575, 512), delta=(583, 576), scale=(591, 584), c0=(599, 592))
    pos = 600
    if has_h:
        fields.update({f"h{j}": (pos + 64 * (16 - j) - 1, pos + 64 * (15 - j)) for j in range(16)})
        pos += 1024
    fields.update({f"w{j}": (pos + w_bits * (16 - j) - 1, pos + w_bits * (15 - j))
                   for j in range(16)})
    pos += 16 * w_bits
    for name, bits in (("s_g", 32), ("group", 16), ("row", 16), ("case", 16)):
        fields[name] = (pos + bits - 1, pos)
        pos += bits
    fields["_width"] = (pos, 0)
    return fields


def unsupported_reason(vs: VectorSet) -> str | None:
    """Why the RTL benches cannot run this set, or None."""
    p = vs.parameters
    if not vs.gs_path.exists():
        return f"no {vs.gs_path.name} (the global-scale file)"
    if vs.weight_dtype not in DTYPES:
        return f"weight dtype {vs.weight_dtype!r} is not one of the RTL's fp32 / bf16 / fp16"
    if p.get("method") not in METHODS:
        return f"method {p.get('method')!r} unknown to the RTL"
    if p.get("init") not in INITS:
        return f"init {p.get('init')!r} unknown to the RTL"
    try:
        k, u = int(p["K"]), int(p["U"])
    except (KeyError, ValueError):
        return "K / U missing from the header"
    if not (k >= 1 and 0 <= u <= k - 1 and k < 2 ** 32):
        return f"window K={k} U={u} outside the RTL's 32-bit configuration (NVFP4-IN-3)"
    if p["method"] == "hscale" and not vs.has_h:
        return "hscale set without h fields"
    want = bench_layout(vs.w_bits, vs.has_h)
    if want.pop("_width")[0] != vs.line_width:
        return (f"line width {vs.line_width} is not the bench layout's "
                f"{bench_layout(vs.w_bits, vs.has_h)['_width'][0]}")
    for name, rng in want.items():
        if vs.fields.get(name) != rng:
            return f"field {name} at {vs.fields.get(name)} where the benches expect {rng}"
    if set(vs.fields) - set(want):
        return f"fields the benches do not know: {sorted(set(vs.fields) - set(want))}"
    if vs.gs_fields != GS_FIELDS:
        return f"{vs.gs_path.name} layout {vs.gs_fields} is not the benches' {GS_FIELDS}"
    if vs.ncases > MAX_CASES_DEFAULT:
        return f"{vs.ncases} cases, more than the bench's MAX_CASES {MAX_CASES_DEFAULT}"
    return None


def config_of(vs: VectorSet) -> dict:
    """The hscale_nvfp4_top configuration inputs for a set."""
    p = vs.parameters
    return {"dtype": DTYPES[vs.weight_dtype][0], "method": METHODS[p["method"]],
            "init": INITS[p["init"]], "K": int(p["K"]), "U": int(p["U"])}


# ---- simulators ---------------------------------------------------------------------------------

def simulators() -> dict[str, str | None]:
    """name -> version line, or None when the simulator is not installed."""
    found: dict[str, str | None] = {}
    if shutil.which("iverilog") and shutil.which("vvp"):
        out = subprocess.run(["iverilog", "-V"], capture_output=True, text=True).stdout
        found["icarus"] = out.splitlines()[0].strip() if out else "Icarus Verilog (version ?)"
    else:
        found["icarus"] = None
    if shutil.which("verilator"):
        out = subprocess.run(["verilator", "--version"], capture_output=True, text=True).stdout
        found["verilator"] = out.strip() or "Verilator (version ?)"
    else:
        found["verilator"] = None
    return found


def cocotb_version() -> str | None:
    try:
        import cocotb  # noqa: PLC0415
    except ImportError:
        return None
    return cocotb.__version__


def _run(cmd, cwd=None, env=None, timeout=None, record: Path | None = None
         ) -> subprocess.CompletedProcess:
    """Run a command; with `record`, append its command line to that file first."""
    cmd = [str(c) for c in cmd]
    if record is not None:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(" ".join(cmd) + "\n")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


class _output_to:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so the simulators the
    cocotb runner starts too) to a log file for the duration of a with-block."""

    def __init__(self, path: Path, mode: str):
        self.path, self.mode = path, mode

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.handle = open(self.path, self.mode, encoding="utf-8")
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.handle.fileno(), 1)
        os.dup2(self.handle.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        self.handle.close()
        return False


def _outdated(target: Path, sources) -> bool:
    if not target.exists():
        return True
    t = target.stat().st_mtime
    return any(Path(s).stat().st_mtime > t for s in sources)


# ---- `hscale vectors check` ---------------------------------------------------------------------

def check_command(directory: Path, observed: Path, options: tuple = ()) -> list[str]:
    """The exact `hscale vectors check` command line (``options`` added, e.g. the stochastic
    sets' ``--routing R``): the `hscale` entry point beside this Python (or on PATH), else
    `python -m hscale.vectors`, the same command."""
    exe = Path(sys.executable).with_name("hscale")
    if exe.exists():
        head = [str(exe), "vectors"]
    elif shutil.which("hscale"):
        head = [shutil.which("hscale"), "vectors"]
    else:
        head = [sys.executable, "-m", "hscale.vectors"]
    return head + ["check", str(directory), "--observed", str(observed), "--errors", "100000",
                   *options]


@dataclass
class CheckResult:
    rc: int
    errors: int
    lines: int
    clauses: list[str]
    text: str
    command: list[str]


_SUMMARY_RE = re.compile(r"(\d+) observed lines? checked, (\d+) errors?")
_CLAUSE_RE = re.compile(r"^\s*\[([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+)\]", re.M)
# a family's check (--routing): "<file>: N errors (routing R)" or "<file>: conforms to ...",
# its findings "<case id> [CLAUSE] ..."
_FAMILY_ERRORS_RE = re.compile(r": (\d+) errors? \(\w+ [^)]*\)$", re.M)
_FAMILY_CLAUSE_RE = re.compile(r"^\S+ \[([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+)\]", re.M)


def run_check(directory: Path, observed: Path, options: tuple = ()) -> CheckResult:
    cmd = check_command(directory, observed, options)
    proc = _run(cmd, record=Path(observed).parent / "commands.txt")
    text = proc.stdout + proc.stderr
    if options:
        m = _FAMILY_ERRORS_RE.search(proc.stdout)
        errors = int(m.group(1)) if m else (0 if proc.returncode == 0 else -1)
        lines = sum(1 for line in Path(observed).read_text(encoding="utf-8").splitlines()
                    if line and not line.startswith("#"))
        clauses = sorted(set(_FAMILY_CLAUSE_RE.findall(text)))
        return CheckResult(proc.returncode, errors, lines, clauses, text, cmd)
    m = _SUMMARY_RE.search(text)
    lines, errors = (int(m.group(1)), int(m.group(2))) if m else (0, -1)
    clauses = sorted(set(_CLAUSE_RE.findall(text)))
    return CheckResult(proc.returncode, errors, lines, clauses, text, cmd)


# ---- results --------------------------------------------------------------------------------------

@dataclass
class SetResult:
    name: str
    groups: int = 0                  # group lines the bench wrote
    mismatches: int = -1             # check's error count (-1: not judged)
    check_rc: int | None = None
    clauses: list[str] = field(default_factory=list)
    bench: dict = field(default_factory=dict)   # c0 / deq / amax / s_g mismatches, cycles
    sim_s: float = 0.0
    observed: Path | None = None
    check_text: str = ""
    error: str = ""

    @property
    def passed(self) -> bool:
        internal = sum(v for k, v in self.bench.items() if k.endswith("mismatches"))
        return not self.error and self.check_rc == 0 and self.mismatches == 0 and internal == 0


@dataclass
class BenchResult:
    bench: str
    sim: str
    sim_version: str
    bug: str
    unit: str = "quantizer"          # or "sr": the stochastic-rounding unit
    sets: list[SetResult] = field(default_factory=list)
    not_run: list[tuple[str, str]] = field(default_factory=list)
    build_s: float = 0.0
    wall_s: float = 0.0
    error: str = ""
    check_command: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.sets) and all(s.passed for s in self.sets)

    @property
    def mismatches(self) -> int:
        return sum(max(s.mismatches, 0) for s in self.sets)

    @property
    def clauses(self) -> list[str]:
        return sorted({c for s in self.sets for c in s.clauses})


def _judge(vs: VectorSet, raw: Path, work: Path, result: SetResult) -> None:
    """Run check on a bench's observed file, as the bench wrote it (the SV bench's lines are
    keyed <set>:<case_index>, the cocotb bench's by case id)."""
    observed = raw
    text = raw.read_text(encoding="utf-8")
    result.groups = sum(1 for line in text.splitlines()
                        if line and not line.startswith("#") and " gs " not in line)
    check = run_check(vs.hex_path.parent, observed)
    result.observed, result.check_rc, result.mismatches = observed, check.rc, check.errors
    result.clauses, result.check_text = check.clauses, check.text


# ---- the SystemVerilog bench ------------------------------------------------------------------------

def _sv_build(sim: str, layout: tuple[int, int, int], bug: int, max_lines: int,
              build: Path) -> tuple[list[str], str]:
    """Compile tb_vectors for one line layout; returns (the run command head, log)."""
    line_w, w_bits, has_h = layout
    params = {"LINE_W": line_w, "W_BITS": w_bits, "HAS_H": has_h, "BUG": bug,
              "MAX_LINES": max_lines, "MAX_CASES": MAX_CASES_DEFAULT}
    build.mkdir(parents=True, exist_ok=True)
    (build / "params.json").write_text(json.dumps(params))
    sources = RTL_SOURCES + [SV_BENCH]
    if sim == "icarus":
        target = build / "tb.vvp"
        if _outdated(target, sources + [build / "params.json"]):
            cmd = (["iverilog", "-g2012", "-o", target, "-s", "tb_vectors"]
                   + [f"-Ptb_vectors.{k}={v}" for k, v in params.items()] + sources)
            proc = _run(cmd, record=build / "commands.txt")
            if proc.returncode:
                raise RuntimeError(f"iverilog failed:\n{proc.stdout}{proc.stderr}")
        return ["vvp", "-n", str(target)], ""
    target = build / "obj" / "tb"
    if _outdated(target, sources + [build / "params.json"]):
        # VM_PARALLEL_BUILDS=0: the generated C++ is compiled as one translation unit
        # (__ALL.cpp), about half the CPU of per-file compiles; the layouts build in parallel
        cmd = (["verilator", "--binary", "-Wno-fatal", "-MAKEFLAGS", "VM_PARALLEL_BUILDS=0",
                "--top-module", "tb_vectors", "--Mdir", build / "obj", "-o", "tb"]
               + [f"-G{k}={v}" for k, v in params.items()] + sources)
        proc = _run(cmd, record=build / "commands.txt")
        if proc.returncode:
            raise RuntimeError(f"verilator failed:\n{proc.stdout}{proc.stderr}")
        warnings = sorted(set(re.findall(r"%Warning-(\w+)", proc.stdout + proc.stderr)))
        return [str(target)], (f"verilator warnings: {', '.join(warnings)}" if warnings else "")
    return [str(target)], ""


_TB_SUMMARY_RE = re.compile(r"TB_SUMMARY (.*)")


def _sv_run_set(head: list[str], vs: VectorSet, out: Path) -> SetResult:
    result = SetResult(vs.name)
    cfg = config_of(vs)
    raw = out / f"{vs.name}.observed.txt"
    plus = [f"+HEX={vs.hex_path}", f"+GSHEX={vs.gs_path}", f"+OUT={raw}", f"+SET={vs.name}",
            f"+NLINES={vs.nlines}", f"+NCASES={vs.ncases}", f"+DTYPE={cfg['dtype']}",
            f"+METHOD={cfg['method']}", f"+INIT={cfg['init']}", f"+K={cfg['K']}",
            f"+U={cfg['U']}"]
    start = time.monotonic()
    proc = _run(head + plus, timeout=3600, record=out / "commands.txt")
    result.sim_s = time.monotonic() - start
    (out / f"{vs.name}.sim.log").write_text(proc.stdout + proc.stderr)
    m = _TB_SUMMARY_RE.search(proc.stdout)
    if proc.returncode or not m or not raw.exists():
        result.error = f"simulation failed (rc {proc.returncode}): {(proc.stdout + proc.stderr)[-800:]}"
        return result
    for item in m.group(1).split():
        key, _, value = item.partition("=")
        if key not in ("set",):
            result.bench[key] = int(value)
    return result


def _run_sv(sim: str, sets: list[VectorSet], bug: int, out: Path, jobs: int,
            log) -> tuple[list[SetResult], float, list[str]]:
    by_layout: dict[tuple, list[VectorSet]] = {}
    for vs in sets:
        by_layout.setdefault(vs.layout, []).append(vs)
    start = time.monotonic()
    notes: list[str] = []
    heads: dict[tuple, list[str]] = {}

    def build(layout):
        line_w, w_bits, has_h = layout
        max_lines = max([MAX_LINES_DEFAULT] + [vs.nlines for vs in by_layout[layout]])
        where = out / "build" / f"L{line_w}_W{w_bits}_H{has_h}"
        log(f"  compile tb_vectors LINE_W={line_w} W_BITS={w_bits} HAS_H={has_h} "
            f"BUG={bug} ({sim})")
        return layout, _sv_build(sim, layout, bug, max_lines, where)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for layout, (head, note) in pool.map(build, list(by_layout)):
            heads[layout] = head
            if note:
                notes.append(note)
    build_s = time.monotonic() - start

    def one(vs):
        r = _sv_run_set(heads[vs.layout], vs, out)
        if not r.error:
            _judge(vs, out / f"{vs.name}.observed.txt", out, r)
        return r

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, sets))
    return results, build_s, notes


# ---- the cocotb bench -------------------------------------------------------------------------------

def _cocotb_simulate(sim: str, sources: list[Path], toplevel: str, module: str, bug: int,
                     out: Path, plan: dict, log) -> tuple[float, float]:
    """Build ``toplevel`` from ``sources`` with parameter BUG for cocotb on ``sim`` (in
    ``out/build``, rebuilt when BUG changes) and run the cocotb test module ``module`` (tb/) on
    it once, with ``plan`` (JSON, its path in HSCALE_RTL_PLAN); both logs in ``out/cocotb.log``.
    Returns (build seconds, simulation seconds); what the module wrote is the caller's to read."""
    import warnings  # noqa: PLC0415
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cocotb.runner import get_runner  # noqa: PLC0415
    out.mkdir(parents=True, exist_ok=True)
    plan_path = out / "plan.json"
    plan_path.write_text(json.dumps(plan))
    runner = get_runner(sim)
    build_dir = out / "build"
    log(f"  build {toplevel} BUG={bug} for cocotb ({sim})")
    start = time.monotonic()
    build_args = ["-Wno-fatal"] if sim == "verilator" else []
    stamp = build_dir / "params.json"
    build_dir.mkdir(parents=True, exist_ok=True)
    always = not stamp.exists() or json.loads(stamp.read_text()) != {"BUG": bug}
    log_path = out / "cocotb.log"
    # the runner runs `make -f Vtop.mk` itself: VM_PARALLEL_BUILDS=0 through MAKEFLAGS compiles
    # Verilator's generated C++ as one translation unit (about half the CPU)
    saved_makeflags = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved_makeflags, "VM_PARALLEL_BUILDS=0"]))
    try:
        with _output_to(log_path, "w"):
            runner.build(verilog_sources=sources, hdl_toplevel=toplevel,
                         parameters={"BUG": bug}, build_args=build_args, build_dir=build_dir,
                         always=always)
    except SystemExit as error:      # the runner exits when the simulator's build fails
        raise RuntimeError(f"cocotb build on {sim} failed ({error}); see {log_path}") from None
    finally:
        if saved_makeflags is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved_makeflags
    stamp.write_text(json.dumps({"BUG": bug}))
    build_s = time.monotonic() - start
    env = {"HSCALE_RTL_PLAN": str(plan_path), "COCOTB_REDUCED_LOG_FMT": "1"}
    # the runner passes its own sys.path as the simulator's PYTHONPATH: put tb/ on it; and it
    # checks its results file itself under pytest: run it outside that hook (we judge here)
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    sys.path.insert(0, str(TB))
    sim_start = time.monotonic()
    try:
        with _output_to(log_path, "a"):
            runner.test(test_module=module, hdl_toplevel=toplevel,
                        hdl_toplevel_lang="verilog", build_dir=build_dir, test_dir=out,
                        extra_env=env, parameters={"BUG": bug})
    except (Exception, SystemExit) as error:  # noqa: BLE001
        with open(log_path, "a", encoding="utf-8") as handle:
            handle.write(f"\ncocotb runner: {error!r}\n")
    finally:
        sys.path.remove(str(TB))
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    return build_s, time.monotonic() - sim_start


def _run_cocotb(sim: str, sets: list[VectorSet], bug: int, out: Path, jobs: int,
                log) -> tuple[list[SetResult], float, list[str]]:
    plan = {"sets": [], "bug": bug}
    for vs in sets:
        plan["sets"].append({
            "name": vs.name, "hex": str(vs.hex_path), "gs": str(vs.gs_path),
            "config": config_of(vs), "fields": vs.fields, "gs_fields": vs.gs_fields,
            "case_ids": vs.case_ids,
            "observed": str(out / f"{vs.name}.observed.txt"),
            "summary": str(out / f"{vs.name}.summary.json")})
    for entry in plan["sets"]:
        Path(entry["summary"]).unlink(missing_ok=True)
    build_s, sim_s = _cocotb_simulate(sim, RTL_SOURCES, "hscale_nvfp4_top", COCOTB_MODULE, bug,
                                      out, plan, log)
    results = []
    for vs, entry in zip(sets, plan["sets"]):
        r = SetResult(vs.name)
        summary = Path(entry["summary"])
        if not summary.exists():
            r.error = f"the cocotb bench wrote no result for this set (see {out / 'cocotb.log'})"
            results.append(r)
            continue
        data = json.loads(summary.read_text())
        r.sim_s = data.pop("sim_s", 0.0)
        r.bench = data
        results.append(r)

    def judge(pair):
        vs, r = pair
        if not r.error:
            _judge(vs, out / f"{vs.name}.observed.txt", out, r)
        return r

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(judge, zip(sets, results)))
    notes = [f"cocotb {cocotb_version()}, one simulation for all sets: {sim_s:.1f} s"]
    return results, build_s, notes


# ---- the stochastic-rounding unit ------------------------------------------------------------------

SR_SOURCES = [SRC / "nvfp4_sr_e2m1x4.sv"]
SR_COCOTB_MODULE = "cocotb_sr"
#: the unit's ``profile`` input: 0, 1, 2 (NVFP4-SR-4's routing profiles, by name)
SR_PROFILES = ("straight", "ptx-e2m1x4", "sm103a")
# planted bugs of the stochastic-rounding unit: name -> its BUG parameter
SR_BUGS = {
    "none": 0,
    "sr-carry-over-256": 1,      # a carry only when D_top + r > 256 (a byte one short)
    "sr-bytes-swapped": 2,       # straight routes as ptx-e2m1x4: elements 1 and 2 swap bytes
    "sr-dropped-carry": 3,       # the carry out of the mantissa bit lost (1.5 rounds up to 1)
}


def discover_sr_sets(directory: Path = LEVEL0) -> list[Path]:
    """The stochastic kind's .hex sets of a vector directory (``sr_*.hex``), sorted by name."""
    from hscale.vectors.families import families
    prefix = families()["stochastic"].SET_PREFIX
    return sorted(Path(directory).glob(f"{prefix}*.hex"))


def _run_sr_cocotb(sim: str, sets: list[Path], bug: int, out: Path, jobs: int, log,
                   directory: Path) -> tuple[list[SetResult], float, list[str]]:
    """Every stochastic set through nvfp4_sr_e2m1x4 in one cocotb simulation, under the three
    profiles; each profile's observed file judged by `check --routing P --require-all`."""
    observed = {routing: out / f"sr.{routing}.observed.txt" for routing in SR_PROFILES}
    plan = {"sets": [str(path) for path in sets], "routings": list(SR_PROFILES),
            "observed": {routing: str(path) for routing, path in observed.items()},
            "summary": str(out / "sr.summary.json")}
    for path in [*observed.values(), out / "sr.summary.json"]:
        path.unlink(missing_ok=True)
    build_s, sim_s = _cocotb_simulate(sim, SR_SOURCES, "nvfp4_sr_e2m1x4", SR_COCOTB_MODULE,
                                      bug, out, plan, log)
    summary = out / "sr.summary.json"
    counts = json.loads(summary.read_text()) if summary.exists() else {}
    names = "+".join(path.name[:-len(".hex")] for path in sets)

    def judge(routing: str) -> SetResult:
        r = SetResult(f"{names} --routing {routing}")
        if routing not in counts:
            r.error = f"the cocotb bench wrote no result (see {out / 'cocotb.log'})"
            return r
        r.sim_s = counts[routing].pop("sim_s", 0.0)
        r.groups = counts[routing].pop("words")
        r.bench = counts[routing]
        check = run_check(directory, observed[routing], ("--routing", routing, "--require-all"))
        r.observed, r.check_rc, r.mismatches = observed[routing], check.rc, check.errors
        r.clauses, r.check_text = check.clauses, check.text
        return r

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(judge, SR_PROFILES))
    notes = [f"cocotb {cocotb_version()}, one simulation, every word under every profile: "
             f"{sim_s:.1f} s"]
    return results, build_s, notes


def run_sr_bench(sim: str, bug: str = "none", out: Path | None = None,
                 vectors: Path = LEVEL0, jobs: int | None = None, log=print) -> BenchResult:
    """The cocotb bench of the stochastic-rounding unit on one simulator, on every stochastic
    set of ``vectors`` (one result per routing profile), the unit built with planted bug
    ``bug`` (one of SR_BUGS). A missing simulator, cocotb or set is .error (nothing ran)."""
    start = time.monotonic()
    jobs = jobs or min(2, os.cpu_count() or 1)
    version = simulators().get(sim)
    result = BenchResult("cocotb", sim, version or "", bug, unit="sr")
    result.check_command = " ".join(check_command(Path(vectors), Path("OBSERVED"),
                                                  ("--routing", "ROUTING", "--require-all")))
    result.error = _unavailable("cocotb", sim, version, bug, SR_BUGS)
    if result.error:
        return result
    sets = discover_sr_sets(vectors)
    if not sets:
        result.error = f"no stochastic set (sr_*.hex) in {vectors}"
        return result
    out = Path(out or DEFAULT_OUT) / (f"sr-cocotb-{sim}" + ("" if bug == "none" else f"-{bug}"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "commands.txt").unlink(missing_ok=True)
    return _completed(result, start, log, lambda: _run_sr_cocotb(
        sim, sets, SR_BUGS[bug], out, jobs, log, Path(vectors)))


# ---- one bench on one simulator ---------------------------------------------------------------------

def _completed(result: BenchResult, start: float, log, run) -> BenchResult:
    """``result`` with what ``run()`` gives (the set results, build seconds, notes to log), or
    the error that stopped it, and the wall time since ``start``."""
    try:
        result.sets, result.build_s, notes = run()
        for note in notes:
            log(f"  {note}")
    except (RuntimeError, subprocess.SubprocessError, OSError) as error:
        result.error = str(error)
    result.wall_s = time.monotonic() - start
    return result


def _unavailable(bench: str, sim: str, version: str | None, bug: str, bugs: dict) -> str:
    """Why a bench cannot run at all (an unknown bug, a simulator or cocotb not installed), or
    ""."""
    if bug not in bugs:
        return f"unknown bug {bug!r}; one of {', '.join(bugs)}"
    if version is None:
        return (f"{sim} is not installed (apt-get install -y "
                f"{'iverilog' if sim == 'icarus' else 'verilator'})")
    if bench == "cocotb" and cocotb_version() is None:
        return "cocotb is not installed (pip install cocotb==1.8.1)"
    return ""


def run_bench(bench: str, sim: str, bug: str = "none", out: Path | None = None,
              vectors: Path = LEVEL0, sets: list[str] | None = None, jobs: int | None = None,
              log=print) -> BenchResult:
    """Compile, simulate and judge every runnable set of `vectors` with one bench ('sv' or
    'cocotb') on one simulator ('icarus' or 'verilator'), the RTL built with planted bug `bug`
    ('none' for the conforming design). Sets the RTL cannot run are in .not_run with the
    reason; a missing simulator or cocotb is .error (nothing ran)."""
    start = time.monotonic()
    jobs = jobs or min(2, os.cpu_count() or 1)
    version = simulators().get(sim)
    result = BenchResult(bench, sim, version or "", bug)
    result.check_command = " ".join(check_command(Path(vectors), Path("OBSERVED")))
    result.error = _unavailable(bench, sim, version, bug, BUGS)
    if result.error:
        return result
    chosen = []
    for vs in discover_sets(vectors):
        if sets and vs.name not in sets:
            continue
        reason = unsupported_reason(vs)
        if reason:
            result.not_run.append((vs.name, reason))
        else:
            chosen.append(vs)
    if sets:
        missing = set(sets) - {vs.name for vs in chosen} - {n for n, _ in result.not_run}
        result.not_run += [(n, "no such set in the vector directory") for n in sorted(missing)]
    out = Path(out or DEFAULT_OUT) / (f"{bench}-{sim}" + ("" if bug == "none" else f"-{bug}"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "commands.txt").unlink(missing_ok=True)   # every command this run executes
    if not chosen:
        result.error = "no set to run"
        return result
    runner = _run_sv if bench == "sv" else _run_cocotb
    return _completed(result, start, log,
                      lambda: runner(sim, chosen, BUGS[bug], out, jobs, log))


# ---- report -------------------------------------------------------------------------------------------

def report(result: BenchResult, log=print) -> None:
    title = {("quantizer", "sv"): "SystemVerilog bench (tb/tb_vectors.sv)",
             ("quantizer", "cocotb"): f"cocotb bench (tb/cocotb_vectors.py, cocotb "
                                      f"{cocotb_version()})",
             ("sr", "cocotb"): f"cocotb bench of the SR unit (tb/cocotb_sr.py, cocotb "
                               f"{cocotb_version()})"}[result.unit, result.bench]
    log(f"== {title} on {result.sim}: {result.sim_version or 'not installed'}"
        + ("" if result.bug == "none" else f"  [planted bug: {result.bug}]"))
    if result.error:
        log(f"   NOT RUN: {result.error}")
    if result.sets:
        unit, own = ("groups", "c0/deq/amax/sg") if result.unit == "quantizer" else ("words", "codes")
        log(f"   {'set':42} {unit:>6} {'mism.':>6} {own:>14} {'sim s':>7}  clauses cited by check")
    for s in result.sets:
        if s.error:
            log(f"   {s.name:42} ERROR {s.error}")
            continue
        internal = ("/".join(str(s.bench.get(k, "?")) for k in
                             ("c0_mismatches", "deq_mismatches", "amax_mismatches",
                              "sg_mismatches")) if result.unit == "quantizer"
                    else str(s.bench.get("code_mismatches", "?")))
        log(f"   {s.name:42} {s.groups:>6} {s.mismatches:>6} {internal:>14} {s.sim_s:>7.1f}  "
            f"{' '.join(s.clauses) or '-'}")
    for name, reason in result.not_run:
        log(f"   {name:42} NOT RUN: {reason}")
    if result.sets:
        groups = sum(s.groups for s in result.sets)
        unit = "groups" if result.unit == "quantizer" else "words"
        log(f"   total: {len(result.sets)} {'sets' if result.unit == 'quantizer' else 'routings'}, {groups} {unit}, {result.mismatches} mismatches "
            f"(check), {sum(1 for s in result.sets if s.passed)} passed; "
            f"build {result.build_s:.1f} s, wall {result.wall_s:.1f} s")
        log(f"   check: {result.check_command.replace('OBSERVED', '<out>/<set>.observed.txt')}"
            if result.unit == "quantizer" else f"   check: {result.check_command.replace('OBSERVED', '<out>/sr.ROUTING.observed.txt')}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", choices=("sv", "cocotb", "both"), default="both")
    parser.add_argument("--sim", choices=("icarus", "verilator", "all"), default="all",
                        help="simulator (default: every one installed)")
    parser.add_argument("--bug", choices=tuple(BUGS) + tuple(b for b in SR_BUGS if b not in BUGS),
                        default="none",
                        help="planted RTL bug (default none: the conforming design); an sr-* "
                             "bug is the stochastic-rounding unit's (its cocotb bench only)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"build and result directory (default {DEFAULT_OUT})")
    parser.add_argument("--vectors", type=Path, default=LEVEL0,
                        help="vector directory (default: the committed level-0 set)")
    parser.add_argument("--sets", nargs="+", metavar="NAME", help="only these parameter sets")
    parser.add_argument("--jobs", type=int, default=None, help="parallel builds / runs (default 2)")
    args = parser.parse_args(argv)

    start = time.monotonic()
    found = simulators()
    sims = list(SIMULATORS) if args.sim == "all" else [args.sim]
    benches = ["sv", "cocotb"] if args.bench == "both" else [args.bench]
    for name in SIMULATORS:
        print(f"simulator {name}: {found[name] or 'NOT INSTALLED'}")
    print(f"cocotb: {cocotb_version() or 'NOT INSTALLED'}")
    # the quantizer's benches, unless the bug is the SR unit's; the SR unit's cocotb bench with
    # --bench cocotb, unless the bug is the quantizer's or --sets names no stochastic set
    quantizer_sets = [name for name in args.sets or () if not name.startswith("sr_")]
    quantizer = args.bug in BUGS and (not args.sets or bool(quantizer_sets))
    sr = "cocotb" in benches and args.bug in SR_BUGS and (
        not args.sets or len(quantizer_sets) < len(args.sets))
    if not quantizer and not sr:
        print(f"nothing to run: --bug {args.bug} is planted in the SR unit, whose bench is the "
              "cocotb one (--bench cocotb)" if args.bug in SR_BUGS and args.bug != "none" else
              "nothing to run: --sets names only stochastic sets (sr_*), whose bench is the "
              "cocotb one (--bench cocotb)")
        return 2
    results = []
    for bench in benches:
        for sim in sims:
            if quantizer:
                print(f"-- {bench} bench on {sim}")
                result = run_bench(bench, sim, args.bug, args.out, args.vectors,
                                   quantizer_sets or None, args.jobs)
                report(result)
                results.append(result)
            if sr and bench == "cocotb":
                print(f"-- cocotb bench of the SR unit on {sim}")
                result = run_sr_bench(sim, args.bug, args.out, args.vectors, args.jobs)
                report(result)
                results.append(result)
    ran = [r for r in results if r.sets]
    print(f"total wall time {time.monotonic() - start:.1f} s")
    if not ran:
        return 2
    return 0 if all(r.passed for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
