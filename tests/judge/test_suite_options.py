"""``hscale conform`` and the suite's pytest plugin take the suite's options from one table
(hscale.judge.options): every value given to the command reaches pytest as the plugin reads it."""

from __future__ import annotations

import argparse

import pytest

from hscale.cli.conform import build_parser, pytest_arguments
from hscale.judge.options import suite_options

ARGV = ["--backend", "numpy", "--backend", "pkg.mod:make", "--profile", "faithful",
        "--allow", "fp32-scale-rounding", "--allow", "reciprocal-multiply",
        "--clause", "NVFP4-E2M1-2", "--certificate", "out/{backend}.json", "--strict-inputs",
        "--strict-errors", "--allow-unavailable"]


def _plugin_parser() -> argparse.ArgumentParser:
    """The plugin's declarations, as pytest's parser (argparse underneath) reads them."""
    parser = argparse.ArgumentParser()
    for option in suite_options():
        parser.add_argument(option.flag, *option.aliases, **option.settings)
    return parser


def test_every_value_of_the_command_reaches_the_suite():
    args = build_parser().parse_args(ARGV)
    forwarded = pytest_arguments(args, [])
    suite, rest = _plugin_parser().parse_known_args(forwarded)
    assert rest == ["--pyargs", "hscale.conformance", "-q", "-p", "no:cacheprovider", "-W",
                    "ignore::pytest.PytestAssertRewriteWarning"]
    assert suite.backend == ["numpy", "pkg.mod:make"]
    assert suite.profile == "faithful"
    assert suite.allow == ["fp32-scale-rounding", "reciprocal-multiply"]
    assert suite.clause == ["NVFP4-E2M1-2"]
    assert suite.conformance_report == "out/{backend}.json"
    assert suite.strict_inputs and suite.strict_errors and suite.allow_unavailable
    assert vars(suite) == {option.dest: getattr(args, option.dest) for option in suite_options()}


def test_defaults_forward_nothing_the_suite_would_not_assume():
    args = build_parser().parse_args(["--backend", "numpy"])
    suite = _plugin_parser().parse_known_args(pytest_arguments(args, []))[0]
    defaults = _plugin_parser().parse_args([])
    assert {k: v for k, v in vars(suite).items() if k != "backend"} == \
        {k: v for k, v in vars(defaults).items() if k != "backend"}


def test_the_command_requires_a_backend_the_plugin_does_not():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--profile", "exact"])
    assert _plugin_parser().parse_args([]).backend is None


def test_the_plugin_declares_the_table_to_pytest(pytestconfig):
    """This session's own pytest has the plugin loaded: each option is known with its default."""
    for option in suite_options():
        assert pytestconfig.getoption(option.dest) == option.settings.get("default", False) \
            or option.dest == "backend"


def test_a_run_without_backend_leaves_out_what_cannot_run_here_in_one_line(tmp_path):
    """Without --backend the suite judges the built-ins that can run here: the others are not
    collected at all (no skipped test per unavailable backend), and one line of the header says
    which were left out and why."""
    import subprocess
    import sys

    from hscale.backends import get

    unavailable = {}
    for name in ("numpy", "torch", "torch-cuda", "cupy"):
        try:
            ok, reason = get(name).available()
        except ValueError as exc:
            ok, reason = False, f"cannot be loaded: {exc}"
        if not ok:
            unavailable[name] = reason
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs",
                           "hscale.conformance.test_formats", "-q", "-p", "no:cacheprovider",
                           "--collect-only", "-k", "test_elements_saturate_at_six"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    header = [line for line in done.stdout.splitlines() if "left out" in line]
    if not unavailable:
        assert header == [], header
        return
    assert len(header) == 1, done.stdout[-3000:]
    for name, reason in unavailable.items():
        assert f"{name}: {reason}" in header[0], header[0]
        assert f"[{name}" not in done.stdout and f"-{name}]" not in done.stdout, done.stdout[-3000:]
    assert "test_elements_saturate_at_six[numpy" in done.stdout, done.stdout[-3000:]


def test_profiles_and_allowances_are_refused_on_kinds_they_do_not_judge(tmp_path):
    """`--profile faithful --allow negative-zero` on an activation quantizer: a usage error in one
    line naming the backend and why (issue 39: the certificate recorded them and they did
    nothing); the options' help says they are the weight kind's."""
    import os
    import subprocess
    import sys

    from helpers.selftest import tests_on_path

    done = subprocess.run(
        [sys.executable, "-m", "hscale", "conform", "--backend", "activation_kernels:fast_math",
         "--profile", "faithful", "--allow", "negative-zero"],
        cwd=tmp_path, env=dict(os.environ, **tests_on_path()), capture_output=True, text=True,
        timeout=600)
    said = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]
    assert len(said) == 1 and "backend 'vendor-act-fast-math' declares activation" in said[0] \
        and "judge a weight quantizer" in said[0], said
    assert not (tmp_path / "reports").exists()
    helps = {option.flag: option.settings["help"] for option in suite_options()}
    assert "weight quantizer" in helps["--profile"] and "weight quantizer" in helps["--allow"]
