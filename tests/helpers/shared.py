"""A session fixture's value built once per test session, however many pytest-xdist workers
run it, and built in the background while the tests that do not need it run.

``start_in_background(tmp_path_factory, name, build)`` is called by every worker early (an
autouse session fixture): the first to claim ``name`` (an exclusive create in the session's
shared temporary directory) runs ``build(directory)`` in a thread and keeps its value there,
pickled; the others do nothing. ``background_result(tmp_path_factory, name)`` waits for that
value (the builder joins its thread; the others wait for the file) and returns it, or fails
with the builder's error. The self-tests' subprocess runs are built so (minutes of CPU on two
threads): the worker that builds them goes on running other tests meanwhile, and the tests that
read them come last in the session (tests/conftest.py).

(pytest-xdist's ``--dist loadgroup`` would send every test of a fixture to one worker, but with
pytest 9.2 its group names no longer reach the scheduler: xdist sets ``item._nodeid``, which
pytest no longer reads. Each worker then built the self-tests' runs, twice the CPU.)
"""

from __future__ import annotations

import os
import pickle
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

#: name -> the thread building it in this process
_BUILDS: dict[str, threading.Thread] = {}


def session_root(tmp_path_factory) -> Path:
    """The session's temporary directory every worker shares (a worker's own is a folder of
    it, ``popen-gw0``; without xdist, the session's own)."""
    own = tmp_path_factory.getbasetemp()
    return own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own


def _files(tmp_path_factory, name: str) -> tuple[Path, Path, Path]:
    root = session_root(tmp_path_factory)
    return root / f"{name}.claim", root / f"{name}.pickle", root / f"{name}.error"


def start_in_background(tmp_path_factory, name: str, build: Callable[[Path], object]) -> None:
    """Start ``build`` in a thread of this process if no worker of the session has."""
    claim, kept, failed = _files(tmp_path_factory, name)
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # claimed already, by another worker or by this one

    def run():
        try:
            directory = claim.parent / name
            directory.mkdir(exist_ok=True)
            partial = kept.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(build(directory)))
            partial.replace(kept)
        except BaseException:  # noqa: BLE001 - the waiting workers must see it, not hang
            failed.write_text(traceback.format_exc())

    _BUILDS[name] = threading.Thread(target=run, name=f"build-{name}", daemon=True)
    _BUILDS[name].start()


def background_result(tmp_path_factory, name: str, timeout: float = 3600):
    """The value ``start_in_background`` built, once it is there."""
    claim, kept, failed = _files(tmp_path_factory, name)
    if name in _BUILDS:
        _BUILDS[name].join(timeout)
    deadline = time.monotonic() + timeout
    while not kept.is_file():
        if failed.is_file():
            raise RuntimeError(f"building {name!r} failed:\n{failed.read_text()}")
        if not claim.is_file():
            raise RuntimeError(f"{name!r} was never started (start_in_background)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name!r} not built in {timeout} s")
        time.sleep(0.5)
    return pickle.loads(kept.read_bytes())
