"""The suite under pytest-xdist (``pytest -n N``, or ``hscale conform ... -- -n N``): each
worker runs part of the tests and keeps its own outcomes and tallies; the controller, which
collects and runs no test, merges what every worker sent back and writes the one certificate
per backend. A worker writes none: each would hold only its share of the run.

What travels is the run's record (the suite's items, their outcomes, each backend's tally),
pickled into the worker's ``workeroutput`` (execnet carries bytes, not objects)."""

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter

#: The key of the record in a worker's ``workeroutput``.
WORKER_RECORD = "hscale_conformance_record"


def is_worker(config) -> bool:
    """Whether this process is an xdist worker (it runs tests and reports to a controller)."""
    return hasattr(config, "workerinput")


def is_controller(config) -> bool:
    """Whether this process is an xdist controller: it runs no test, and the reports it sees
    are the workers' replayed (their outcomes arrive whole in the workers' records)."""
    return not is_worker(config) and getattr(config.option, "dist", "no") != "no"


def worker_record(items: dict, outcomes: dict, cited: dict, tallies: dict) -> bytes:
    """What a worker sends back: ``items`` (nodeid -> (backend id, clauses)), ``outcomes``
    (nodeid -> (outcome, text)) and ``cited`` (nodeid -> the findings a failure cites) of the
    tests it ran, ``tallies`` (backend id -> kind -> its Tally)."""
    return pickle.dumps({"items": items, "outcomes": outcomes, "cited": cited,
                         "tallies": tallies})


def merge_record(record: bytes, items: dict, outcomes: dict, cited: dict,
                 tallies: dict) -> None:
    """Merge one worker's record into the controller's ``items``, ``outcomes``, ``cited`` and
    ``tallies`` (backend id -> kind -> Tally; in place). Every worker collects the same items;
    each test ran on one worker, so its outcome comes from that one (a test reported by two
    would be a scheduling fault: refused)."""
    sent = pickle.loads(record)
    items.update(sent["items"])
    twice = set(outcomes) & set(sent["outcomes"])
    if twice:
        raise RuntimeError(f"conformance: {len(twice)} tests reported by two xdist workers, "
                           f"e.g. {sorted(twice)[0]}")
    outcomes.update(sent["outcomes"])
    cited.update(sent["cited"])
    for ident, kinds in sent["tallies"].items():
        mine = tallies.setdefault(ident, {})
        for kind, tally in kinds.items():
            if kind in mine:
                add_counts(mine[kind], tally)
            else:
                mine[kind] = tally


def add_counts(into, other) -> None:
    """``into += other`` field by field for the tally records (dataclasses of counters, ints
    and lists, nested; a field whose metadata names a ``merge`` function meets by it): what two
    workers counted is what one process would have counted."""
    for f in dataclasses.fields(into):
        mine, theirs = getattr(into, f.name), getattr(other, f.name)
        if "merge" in f.metadata:  # a field that is not a count says how two values meet
            setattr(into, f.name, f.metadata["merge"](mine, theirs))
        elif dataclasses.is_dataclass(mine):
            add_counts(mine, theirs)
        elif isinstance(mine, Counter):
            mine.update(theirs)
        elif isinstance(mine, list):
            mine.extend(theirs)
        elif isinstance(mine, (int, float)) and not isinstance(mine, bool):
            setattr(into, f.name, mine + theirs)
        else:
            raise TypeError(f"tally field {type(into).__name__}.{f.name} of type "
                            f"{type(mine).__name__}: no rule to merge two workers' values")
