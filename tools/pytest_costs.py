"""A pytest plugin that records what each test costs in CPU seconds (this process and the
children it waited for: subprocesses of ``hscale conform``, compilers, simulators), for setup,
call and teardown, so that the suite's tiers can be planned on a machine other work shares
(wall time there says little; CPU time is what a 2-core CI machine will have to spend).

    PYTHONPATH=tools python -m pytest -p pytest_costs --test-costs costs.json ...
    python tools/pytest_costs.py costs.json [--top 40]     # by file and by test, the largest first
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

_COSTS: dict = defaultdict(lambda: {"cpu": 0.0, "wall": 0.0})


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


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
        Path(path).write_text(json.dumps({"session_cpu": _cpu(), "tests": dict(_COSTS)},
                                         indent=0))


def report(path: str, top: int = 40) -> None:
    """The costs in ``path`` and in every per-worker file beside it (``PATH-gw*.json``); under
    xdist the controller's own file holds no tests and the session's whole CPU time."""
    workers = sorted(Path(path).parent.glob(f"{Path(path).stem}-gw*{Path(path).suffix}"))
    data = {"session_cpu": 0.0, "tests": {}}
    for file in workers:
        part = json.loads(file.read_text())
        data["session_cpu"] += part["session_cpu"]
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
    print(f"{len(tests)} tests, {total:.0f} CPU s in tests, {data['session_cpu']:.0f} CPU s in "
          "the session (collection and imports included)")
    for name, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{cpu:8.1f}  {name}")
    print()
    for nodeid, entry in sorted(tests.items(), key=lambda kv: -kv[1]["cpu"])[:top]:
        print(f"{entry['cpu']:8.1f}  {nodeid}")


if __name__ == "__main__":
    report(sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
