"""The scripts under .ci/ call only modules and files that exist (``.ci/gpu-session`` called
``python3 -m hscale.gpu_bench`` long after the benchmark had moved to tools/gpu_bench.py)."""

from __future__ import annotations

import importlib.util
import re

from tests.helpers.paths import REPO_ROOT

CI = REPO_ROOT / ".ci"
#: ``python -m MODULE`` and ``python3 -m MODULE``.
MODULE_CALL = re.compile(r"\bpython3?\s+-m\s+([A-Za-z_][\w.]*)")
#: ``python path/to/script.py`` and ``python3 ...``.
SCRIPT_CALL = re.compile(r"\bpython3?\s+((?:[\w.-]+/)*[\w.-]+\.py)\b")


def missing_calls(text: str) -> list[str]:
    """What a script's text calls that is not there: modules no installed package provides,
    scripts that are not files of the checkout."""
    missing = []
    for module in MODULE_CALL.findall(text):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package that is not there
            found = False
        if not found:
            missing.append(f"python -m {module}")
    missing += [f"python {script}" for script in SCRIPT_CALL.findall(text)
                if not (REPO_ROOT / script).is_file()]
    return missing


def test_every_ci_script_calls_modules_and_scripts_that_exist():
    scripts = sorted(p for p in CI.iterdir() if p.is_file())
    assert scripts, CI
    called = {p.name: MODULE_CALL.findall(p.read_text()) + SCRIPT_CALL.findall(p.read_text())
              for p in scripts}
    assert any(called.values()), called  # the patterns still see the scripts' calls
    problems = {p.name: missing_calls(p.read_text()) for p in scripts}
    assert not any(problems.values()), problems


def test_a_module_or_script_that_is_gone_is_caught():
    gone = ("timeout 300 python3 -m hscale.gpu_bench --sizes 4096\n"
            "python3 tools/no_such_bench.py --repeat 9\npython3 -m pytest tests -q\n")
    assert missing_calls(gone) == ["python -m hscale.gpu_bench", "python tools/no_such_bench.py"]
