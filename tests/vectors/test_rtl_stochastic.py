"""The stochastic-rounding unit of the RTL bench (vectors/rtl/src/nvfp4_sr_e2m1x4.sv, bench
vectors/rtl/tb/tb_sr.sv) on the golden vectors vectors/level0/sr_e2m1x4.hex: under each
routing profile its observed file conforms (hscale vectors check --routing), and the planted
bug (a carry only when D_top + r > 256) is refused naming NVFP4-SR-2. Icarus in the default
tier (seconds); Verilator, whose build takes half a minute, behind ``extended``."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from hscale.vectors import LEVEL0_DIR

from helpers.paths import REPO_ROOT

RTL = REPO_ROOT / "vectors" / "rtl"
SOURCES = [RTL / "src" / "nvfp4_sr_e2m1x4.sv", RTL / "tb" / "tb_sr.sv"]
HEX = LEVEL0_DIR / "sr_e2m1x4.hex"
PROFILES = ("straight", "ptx-e2m1x4", "sm103a")


def _build(simulator: str, where, bug: int = 0):
    """A command running the bench, built once in ``where``."""
    if shutil.which("iverilog" if simulator == "icarus" else "verilator") is None:
        pytest.skip(f"{simulator} is not installed (apt-get install iverilog verilator)")
    if simulator == "icarus":
        binary = where / f"tb_sr_{bug}.vvp"
        subprocess.run(["iverilog", "-g2012", f"-Ptb_sr.BUG={bug}", "-o", str(binary),
                        *map(str, SOURCES)], check=True, capture_output=True, timeout=300)
        return ["vvp", "-n", str(binary)]
    out = where / f"vl_{bug}"
    subprocess.run(["verilator", "--binary", "-Wno-fatal", "-Wno-WIDTH", f"-GBUG={bug}",
                    "--top-module", "tb_sr", "-Mdir", str(out), *map(str, SOURCES)],
                   check=True, capture_output=True, timeout=600)
    return [str(out / "Vtb_sr")]


def _run(command, where, profile: int, name: str) -> str:
    observed = where / name
    done = subprocess.run([*command, f"+vectors={HEX}", f"+observed={observed}",
                           f"+profile={profile}"], capture_output=True, text=True, timeout=300)
    assert "tb_sr: 5680 words" in done.stdout, done.stdout + done.stderr
    return str(observed)


def _check(observed: str, routing: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hscale", "vectors", "check", "--routing",
                           routing, "--observed", observed, "--require-all"],
                          capture_output=True, text=True, timeout=300)


def _bench(simulator: str, tmp_path):
    command = _build(simulator, tmp_path)
    for number, routing in enumerate(PROFILES):
        observed = _run(command, tmp_path, number, f"{routing}.txt")
        done = _check(observed, routing)
        assert done.returncode == 0, done.stdout[-3000:]
        assert "5680 of 5680 words of the stochastic vectors observed" in done.stdout
    buggy = _build(simulator, tmp_path, bug=1)
    done = _check(_run(buggy, tmp_path, 0, "bug.txt"), "straight")
    assert done.returncode == 1 and "[NVFP4-SR-2]" in done.stdout, done.stdout[-3000:]


@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-3", "NVFP4-SR-4")
def test_the_sr_unit_on_icarus(tmp_path):
    _bench("icarus", tmp_path)


@pytest.mark.extended
@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-3", "NVFP4-SR-4")
def test_the_sr_unit_on_verilator(tmp_path):
    _bench("verilator", tmp_path)
