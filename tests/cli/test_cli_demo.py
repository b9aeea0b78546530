"""``hscale demo``: the main job prints the three methods side by side and can plot them."""

import subprocess
import sys

import numpy as np
import pytest

from hscale.cli import main


def _write_layer(path, seed=0):
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((8, 64)) * 0.05).astype(np.float32)
    hessian_diag = rng.uniform(0, 10, 64)
    np.savez(path, weight=weight, hessian_diag=hessian_diag, name="toy")
    return weight, hessian_diag


@pytest.mark.clause("HSCALE-METHOD-1")
def test_demo_on_a_given_layer_reports_every_method(tmp_path, capsys):
    from hscale.demo import layer_errors
    from hscale.reference import quantize

    layer = tmp_path / "layer.npz"
    weight, h = _write_layer(layer)
    assert main(["demo", "--layer", str(layer), "--plot", str(tmp_path / "demo.png")]) == 0
    out = capsys.readouterr().out
    lines = {}
    for line in out.splitlines():  # the error table comes first, the histogram rows after it
        if line.strip():
            lines.setdefault(line.split()[0], line.split())
    for method in ("rtn", "scale-only", "hscale"):
        dequantized = quantize(weight, h, method=method).dequantize()
        weighted = ((weight.astype(np.float64) - dequantized) ** 2 * h).sum()
        assert layer_errors(weight, dequantized, h)[0] == pytest.approx(weighted, rel=1e-12)
        assert float(lines[method][1]) == pytest.approx(weighted, rel=1e-5), method
    # H-Scale searches a window that contains the RTN byte, so it cannot do worse on its
    # own objective, summed over groups.
    assert float(lines["hscale"][1]) <= float(lines["rtn"][1])
    assert (tmp_path / "demo.png").stat().st_size > 10_000


def test_demo_default_layer_runs_as_a_console_command():
    result = subprocess.run([sys.executable, "-m", "hscale.cli", "demo"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "hscale" in result.stdout and "shift histogram" in result.stdout


def test_demo_rejects_a_bad_layer_with_a_clear_error(tmp_path, capsys):
    layer = tmp_path / "bad.npz"
    np.savez(layer, weight=np.zeros((2, 20), np.float32), hessian_diag=np.ones(20))
    assert main(["demo", "--layer", str(layer)]) == 2
    assert "not a multiple of the group size" in capsys.readouterr().err


def test_bench_command_prints_throughput_and_ratio_against_the_reference(capsys):
    assert main(["bench", "--rows", "64", "--cols", "256", "--repeat", "1", "--no-memory"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("rtn", "hscale"))]
    assert {(r[0], r[1]) for r in rows} == {("rtn", "numpy"), ("rtn", "torch"),
                                            ("hscale", "numpy"), ("hscale", "torch")}
    for row in rows:
        assert row[5] == "Mweights/s" and float(row[4]) > 0
        assert row[-1] in ("reference", "bit-identical"), row
