"""tools/real_decoder_table.py end to end, at a small size, on SmolLM2-135M-Instruct: the Debian
texts (their calibration and evaluation parts disjoint), RTN and H-Scale through hscale quantize
in fresh processes over 5 calibration subsets, every checkpoint scored against the original's
kept logits, and the rendered table. Opt-in (``pytest -m table``: about 40 minutes on 2 shared
cores; tests/conftest.py skips it otherwise); the full table's command is in docs/results.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from helpers.paths import REPO_ROOT

pytestmark = pytest.mark.table
TOOL = REPO_ROOT / "tools" / "real_decoder_table.py"


def test_the_table_tool_measures_h_scale_against_rtn_on_smollm2(tmp_path):
    from hscale.models.smollm2 import smollm2_gguf
    try:
        model = smollm2_gguf()
    except ImportError as exc:
        pytest.skip(str(exc))
    if shutil.which("dpkg-query") is None or subprocess.run(
            ["dpkg-query", "-W", "debian-handbook", "debian-policy"],
            capture_output=True).returncode:
        pytest.skip("the texts come from Debian's documentation: apt-get install "
                    "debian-handbook debian-policy")
    work = tmp_path / "work"
    run = [sys.executable, str(TOOL)]
    subprocess.run([*run, "texts", "--work", work, "--subsets", "5", "--per-subset", "8"],
                   check=True, timeout=600)
    texts = json.loads((work / "texts.json").read_text())
    assert [s["paragraphs"] for s in texts["calibration"]["subsets"]] == [8] * 5
    assert len({s["sha256"] for s in texts["calibration"]["subsets"]}) == 5
    subprocess.run([*run, "run", "--work", work, "--model", model, "--rows", "rtn,hscale",
                    "--subsets", "5", "--per-subset", "8", "--context", "256", "--windows",
                    "2"], check=True, timeout=7200)
    results = json.loads((work / "results.json").read_text())
    assert set(results["runs"]["hscale"]["transformers"]) == {"0", "1", "2", "3", "4"}
    assert len(results["calibration"]) == 5
    rendered = subprocess.run([*run, "render", "--work", work], check=True, timeout=600,
                              capture_output=True, text=True).stdout
    assert "| H-Scale | W4A16 | transformers | 5 |" in rendered
    subprocess.run([*run, "memory", "--work", work, "--model", model, "--rows", "rtn,hscale",
                    "--per-subset", "8"], check=True, timeout=1800)
    memory = json.loads((work / "results.json").read_text())["memory"]
    assert set(memory) == {"calibrate --full", "rtn transformers", "hscale transformers"}
    assert all(100 < m["peak_rss_mib"] < 20000 for m in memory.values()), memory
    rendered = subprocess.run([*run, "render", "--work", work], check=True, timeout=600,
                              capture_output=True, text=True).stdout
    row = next(line for line in rendered.splitlines()
               if line.startswith("| H-Scale | W4A16 | transformers |"))
    peak = row.rstrip(" |").rsplit("| ", 1)[1]  # the peak column, from the memory pass
    assert int(peak.replace(",", "")) == max(memory["hscale transformers"]["peak_rss_mib"],
                                             memory["calibrate --full"]["peak_rss_mib"])
    rtn = results["runs"]["rtn"]["transformers"]["None"]["kld"]["mean"]
    hscale = [r["kld"]["mean"] for r in results["runs"]["hscale"]["transformers"].values()]
    assert 0 < sum(hscale) / 5 < rtn  # H-Scale nearer the original than RTN, on average
