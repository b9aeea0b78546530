"""A pytest plugin that records what each test costs in CPU seconds (this process and the
children it waited for: subprocesses of ``hscale conform``, compilers, simulators), for setup,
call and teardown, so that the suite's tiers can be planned on a machine other work shares
(wall time there says little; CPU time is what a 2-core CI machine will have to spend).

    PYTHONPATH=tools python -m pytest -p pytest_costs --test-costs costs.json ...
    python tools/pytest_costs.py costs.json [--top 40]     # by file and by test, the largest first
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

_COSTS: dict = defaultdict(lambda: {"cpu": 0.0, "wall": 0.0})
#: CPU seconds of the children that threads other than the main one waited for (the
#: self-tests' runs built in the background, tests/helpers/shared.py): not the running test's
_BACKGROUND = [0.0]


def _children_cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _cpu() -> float:
    """This process's CPU seconds and its waited-for children's, less the children a
    background thread waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + _children_cpu() - _BACKGROUND[0]


def _waitpid_noting_background_children(waitpid):
    """``os.waitpid`` that adds what a child reaped by a thread other than the main one cost to
    ``_BACKGROUND`` (subprocess waits through ``os.waitpid``; two reaps at the same instant in
    two threads would blur, which costs a test at most one child's CPU)."""
    def wrapped(pid, options):
        if threading.current_thread() is threading.main_thread():
            return waitpid(pid, options)
        before = _children_cpu()
        try:
            return waitpid(pid, options)
        finally:
            _BACKGROUND[0] += _children_cpu() - before
    return wrapped


def pytest_configure(config):
    if config.getoption("--test-costs", None):
        os.waitpid = _waitpid_noting_background_children(os.waitpid)


def pytest_addoption(parser):
    parser.addoption("--test-costs", metavar="PATH", help="write per-test CPU seconds to PATH")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu(), time.perf_counter()
    try:
        return (yield)
    finally:
        entry = _COSTS[item.nodeid]
        entry["cpu"] += _cpu() - cpu
        entry["wall"] += time.perf_counter() - wall


def pytest_sessionfinish(session):
    path = session.config.getoption("--test-costs")
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if path and worker:  # under xdist: one file per worker, PATH-gw0.json ...
        path = str(Path(path).with_name(f"{Path(path).stem}-{worker}{Path(path).suffix}"))
    if path:
        Path(path).write_text(json.dumps({"session_cpu": _cpu() + _BACKGROUND[0],
                                          "background_cpu": _BACKGROUND[0],
                                          "tests": dict(_COSTS)}, indent=0))


def report(path: str, top: int = 40) -> None:
    """The costs in ``path`` and in every per-worker file beside it (``PATH-gw*.json``); under
    xdist the controller's own file holds no tests and the session's whole CPU time."""
    workers = sorted(Path(path).parent.glob(f"{Path(path).stem}-gw*{Path(path).suffix}"))
    data = {"session_cpu": 0.0, "background_cpu": 0.0, "tests": {}}
    for file in workers:
        part = json.loads(file.read_text())
        data["session_cpu"] += part["session_cpu"]
        data["background_cpu"] += part.get("background_cpu", 0.0)
        data["tests"].update(part["tests"])
    if Path(path).exists():  # a serial run's file, or an xdist controller's: its children
        part = json.loads(Path(path).read_text())  # are the workers, so its CPU is the total
        data["session_cpu"] = part["session_cpu"]
        data["tests"].update(part["tests"])
    tests = data["tests"]
    by_file: dict = defaultdict(float)
    for nodeid, entry in tests.items():
        by_file[nodeid.split("::")[0]] += entry["cpu"]
    total = sum(e["cpu"] for e in tests.values())
    print(f"{len(tests)} tests, {total:.0f} CPU s in tests, {data['background_cpu']:.0f} CPU s "
          f"in background builds' children, {data['session_cpu']:.0f} CPU s in the session "
          "(collection and imports included)")
    for name, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{cpu:8.1f}  {name}")
    print()
    for nodeid, entry in sorted(tests.items(), key=lambda kv: -kv[1]["cpu"])[:top]:
        print(f"{entry['cpu']:8.1f}  {nodeid}")


if __name__ == "__main__":
    report(sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
