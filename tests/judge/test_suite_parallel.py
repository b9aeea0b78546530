"""The suite under pytest-xdist (conformance/parallel.py): the controller's certificate is the
one a serial run writes, whatever worker ran which test; the workers' counts add up."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from hscale.conformance.checker import GemmTally, Tally
from hscale.conformance.parallel import add_counts, merge_record, worker_record

pytestmark = pytest.mark.clause("SUITE-CLAUSES-1")


def test_two_workers_counts_add_up_field_by_field():
    one = GemmTally(allowance_uses=Counter({"negative-zero": 2}), checks=3, groups=10,
                    contract=[{"clause": "NVFP4-IN-1"}], elements=64, exact=60,
                    not_judged=Counter({"vacuous bound": 4}), vacuous=8, vacuous_k=4096)
    two = GemmTally(allowance_uses=Counter({"negative-zero": 1, "zero-group-byte": 5}),
                    checks=1, groups=2, contract=[{"clause": "NVFP4-IN-2"}], elements=16,
                    exact=16, vacuous=2, vacuous_k=2048)
    add_counts(one, two)
    assert one == GemmTally(
        allowance_uses=Counter({"negative-zero": 3, "zero-group-byte": 5}), checks=4, groups=12,
        contract=[{"clause": "NVFP4-IN-1"}, {"clause": "NVFP4-IN-2"}], elements=80, exact=76,
        not_judged=Counter({"vacuous bound": 4}), vacuous=10, vacuous_k=2048)


def test_the_smallest_vacuous_k_is_kept_when_one_worker_saw_none():
    """vacuous_k is the smallest K where a bound was vacuous, 0 meaning none: not a count."""
    for mine, theirs, merged in ((0, 2048, 2048), (4096, 0, 4096), (0, 0, 0)):
        one, two = GemmTally(vacuous_k=mine), GemmTally(vacuous_k=theirs)
        add_counts(one, two)
        assert one.vacuous_k == merged


def test_a_test_reported_by_two_workers_is_refused():
    items, outcomes, cited, tallies = {"t": ("numpy", ["NVFP4-E2M1-1"])}, {}, {}, {}
    record = worker_record(items, {"t": ("passed", "")}, {}, {"numpy": {"weight": Tally()}})
    merge_record(record, items, outcomes, cited, tallies)
    assert outcomes == {"t": ("passed", "")} and tallies["numpy"]["weight"] == Tally()
    with pytest.raises(RuntimeError, match="reported by two xdist workers"):
        merge_record(record, items, outcomes, cited, tallies)


def test_a_run_on_two_workers_certifies_what_a_serial_run_does(tmp_path):
    """The installed suite, one kind's quick tests on the numpy backend, run twice from outside
    the repository: serially and with ``-n 2``; the certificates agree but for the command line
    and the duration."""
    pytest.importorskip("xdist")
    runs = {}
    for name, extra in (("serial", []), ("parallel", ["-n", "2"])):
        path = tmp_path / f"{name}.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--pyargs", "hscale.conformance", "-q", "-p",
             "no:cacheprovider", "--backend", "numpy", "-k", "test_formats or test_scales",
             "--certificate", str(path), *extra], cwd=tmp_path, capture_output=True, text=True,
            timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        runs[name] = json.loads(path.read_text())
    serial, parallel = runs["serial"], runs["parallel"]
    assert serial["tests"]["passed"] > 100
    differ = sorted(k for k in serial if serial[k] != parallel.get(k))
    assert differ == ["command", "duration_s"], differ
