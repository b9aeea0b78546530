"""A session fixture's value built once per test session, however many pytest-xdist workers
run it: the first worker to ask builds it under a file lock in the session's shared temporary
directory and keeps it there (pickled); the others wait for the lock and load it.

(pytest-xdist's ``--dist loadgroup`` would send every test of a fixture to one worker, but with
pytest 9.2 its group names no longer reach the scheduler: xdist sets ``item._nodeid``, which
pytest no longer reads. Each worker then built the self-tests' runs, twice the CPU.)
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Callable, TypeVar

from filelock import FileLock

T = TypeVar("T")


def session_root(tmp_path_factory) -> Path:
    """The session's temporary directory every worker shares (a worker's own is a folder of
    it, ``popen-gw0``; without xdist, the session's own)."""
    own = tmp_path_factory.getbasetemp()
    return own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own


def once_per_session(tmp_path_factory, name: str, build: Callable[[Path], T]) -> T:
    """``build(directory)`` once per session, its value shared by every worker."""
    root = session_root(tmp_path_factory)
    kept = root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if kept.is_file():
            return pickle.loads(kept.read_bytes())
        directory = root / name
        directory.mkdir(exist_ok=True)
        value = build(directory)
        partial = kept.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(value))
        partial.replace(kept)
        return value
