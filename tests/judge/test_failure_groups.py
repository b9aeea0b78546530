"""A generated test that meets two faults fails with the suite's messages, not a traceback:
Hypothesis reports them as an exception group, which the suite renders as each failure's own
message (``hscale.conformance.failures``), the finding with its clause and the error on valid
input with its case (issue 39: about 60 lines of exception-group traceback through kit
frames)."""

from __future__ import annotations

import os
import subprocess
import sys

from hscale.conformance.failures import leaves, one_message
from helpers import selftest


def test_a_finding_and_an_error_in_one_generated_test_read_as_two_messages(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hscale", "conform", "--backend",
         "activation_kernels:ties_away_raising", "--certificate", str(tmp_path / "cert.json"),
         "--", "-k", "test_generated_tensors"],
        cwd=tmp_path, env=dict(os.environ, **selftest.tests_on_path()), capture_output=True,
        text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    assert "Traceback" not in out and "Exception Group" not in out, out[-4000:]
    assert "Hypothesis found 2 distinct failures" in out, out[-4000:]
    assert "--- failure 1 of 2:" in out and "--- failure 2 of 2:" in out, out[-4000:]
    assert "[NVFP4-ACT-3]" in out and "raised on valid input" in out, out[-4000:]
    assert "ValueError: one token" in out and "During handling" not in out, out[-4000:]


def test_members_that_are_not_suite_failures_keep_their_type_and_place():
    def raising():
        raise KeyError("k")

    try:
        raising()
    except KeyError as error:
        inner = error
    group = BaseExceptionGroup("Hypothesis found 2 distinct failures.",
                               [ExceptionGroup("nested", [inner]), ValueError("v")])
    assert [type(e) for e in leaves(group)] == [KeyError, ValueError]
    text = one_message(group)
    assert "KeyError: 'k' (at " in text and "test_failure_groups.py" in text
    assert "--- failure 2 of 2:\nValueError: v" in text
