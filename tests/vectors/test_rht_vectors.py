"""The RHT golden vectors (the rht_16x16 set of vectors/level0, hscale.vectors.rht_sets): the
stored transformed values are an independent kernel's (tests/helpers/rht_kernels.py: a float64
product and ml_dtypes' rounding), the bfloat16 ties split the profiles, check --rht judges a
result file and names the clause, expect and explain work."""

from __future__ import annotations

import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors

from helpers.rht_kernels import Rht, hadamard16

SET = LEVEL0_DIR / "rht_16x16.json"


def _hscale(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hscale", "vectors", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.clause("NVFP4-RHT-1", "NVFP4-RHT-2", "NVFP4-RHT-3")
def test_the_stored_results_are_the_independent_kernels():
    document = json.loads(SET.read_text())
    cases = {i: c for i, (n, c) in open_vectors(LEVEL0_DIR).family_cases.items()
             if n.startswith("rht_")}
    for entry in document["cases"]:
        x = cases[entry["id"]].x
        for variant, mask in (("te-exact", 0xD7E8), ("plain-exact", 0)):
            result = Rht(mask).quantize_rht(x)
            stored = entry["expected"][variant]
            assert stored["scale_bytes"] == [bytes(r.astype(np.uint8)).hex()
                                             for r in result.scale_bytes], (entry["id"], variant)
            signs = np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])
            t = signs[:, None] * hadamard16() / 4
            source = np.asarray(x).T.astype(np.float64)
            y = (source.reshape(source.shape[0], -1, 16) @ t).reshape(source.shape)
            words = [" ".join(f"{int(w):04x}" for w in r)
                     for r in y.astype(ml_dtypes.bfloat16).view(np.uint16)]
            assert stored["y"] == words, (entry["id"], variant)


@pytest.mark.clause("NVFP4-RHT-2")
def test_the_ties_split_the_profiles():
    entry = next(e for e in json.loads(SET.read_text())["cases"] if e["id"] == "rht-bf16-ties")
    exact, fast = entry["expected"]["te-exact"]["y"][0].split(), \
        entry["expected"]["te-fast-math"]["y"][0].split()
    # (1 + 2^-8) / 4 is a bfloat16 tie: 0.25 (0x3e80) under exact, kept in fp32 under fast-math
    assert exact[0] == "3e80" and fast[0] == "3e808000"


@pytest.mark.clause("NVFP4-RHT-1")
def test_the_commands_on_rht_vectors(tmp_path):
    done = _hscale("expect", "--rht", "te-exact", "--out", "te.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = _hscale("check", "--rht", "te-exact", "--observed", "te.txt", cwd=tmp_path)
    assert done.returncode == 0 and "conforms to the rht vectors" in done.stdout, done.stdout
    done = _hscale("check", "--rht", "plain-exact", "--observed", "te.txt", cwd=tmp_path)
    assert done.returncode == 1 and "[NVFP4-RHT-1]" in done.stdout, done.stdout
    assert "the sign mask 0xD7E8, not the declared 0x0000" in done.stdout
    done = _hscale("explain", "rht-bf16-ties", "0", "0", cwd=tmp_path)
    assert done.returncode == 0 and "te-fast-math" in done.stdout, done.stdout
