"""tests/helpers/shared.py: a session fixture built once per session under pytest-xdist, its
value the same on every worker (the self-tests' runs cost minutes; built by each worker, they
doubled the default tier's largest cost)."""

from __future__ import annotations

import subprocess
import sys

from helpers.paths import TESTS

CONFTEST = f"""
import sys, pytest
sys.path.insert(0, {str(TESTS)!r})
from helpers.shared import once_per_session

@pytest.fixture(scope="session")
def built(tmp_path_factory, worker_id):
    def build(directory):
        with open("builds.txt", "a") as out:
            out.write(worker_id + "\\n")
        return {{"by": worker_id, "where": str(directory)}}
    return once_per_session(tmp_path_factory, "thing", build)
"""

TESTS_OF_IT = "".join(f"""
def test_{i}(built, worker_id):
    import time; time.sleep(0.2)
    with open("seen.txt", "a") as out:
        out.write(worker_id + " " + built["by"] + "\\n")
""" for i in range(6))


def test_a_session_fixture_is_built_once_across_two_workers(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(TESTS_OF_IT)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p",
                           "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert len((tmp_path / "builds.txt").read_text().split()) == 1
    seen = [line.split() for line in (tmp_path / "seen.txt").read_text().splitlines()]
    assert len(seen) == 6 and len({by for _, by in seen}) == 1
    assert len({worker for worker, _ in seen}) == 2, seen  # both workers ran tests of it
