"""tests/helpers/shared.py: a session fixture built once per session under pytest-xdist, in the
background of the worker that claims it, its value the same on every worker (the self-tests'
runs cost minutes; built by each worker, they doubled the default tier's largest cost); a
failed build fails the tests waiting for it instead of hanging them."""

from __future__ import annotations

import subprocess
import sys

from helpers.paths import TESTS

CONFTEST = f"""
import os, sys, time, pytest
sys.path.insert(0, {str(TESTS)!r})
from helpers.shared import background_result, start_in_background

@pytest.fixture(scope="session", autouse=True)
def started(tmp_path_factory, worker_id):
    def build(directory):
        with open("builds.txt", "a") as out:
            out.write(worker_id + "\\n")
        time.sleep(1)
        if os.environ.get("FAIL_THE_BUILD"):
            raise ValueError("the build broke")
        return {{"by": worker_id}}
    start_in_background(tmp_path_factory, "thing", build)

@pytest.fixture(scope="session")
def built(tmp_path_factory, started):
    return background_result(tmp_path_factory, "thing", timeout=60)
"""

TESTS_OF_IT = "".join(f"""
def test_{i}(built, worker_id):
    with open("seen.txt", "a") as out:
        out.write(worker_id + " " + built["by"] + "\\n")
""" for i in range(6)) + "".join(f"""
def test_other_{i}():
    import time; time.sleep(0.1)
""" for i in range(6))


def _session(tmp_path, **env):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(TESTS_OF_IT)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p",
                           "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, **env})


def test_a_session_fixture_is_built_once_across_two_workers(tmp_path):
    done = _session(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:]
    assert len((tmp_path / "builds.txt").read_text().split()) == 1
    seen = [line.split() for line in (tmp_path / "seen.txt").read_text().splitlines()]
    assert len(seen) == 6 and len({by for _, by in seen}) == 1


def test_a_failed_build_fails_the_tests_waiting_for_it(tmp_path):
    done = _session(tmp_path, FAIL_THE_BUILD="1")
    assert done.returncode == 1 and "6 errors" in done.stdout and "6 passed" in done.stdout, \
        done.stdout[-2000:]
    assert "ValueError: the build broke" in done.stdout
