"""A pytest plugin (``-p mutant_kernels.profile``) for the mutation harness's sessions:

- the Hypothesis profile ``mutation-ci``: the suite's ``ci`` profile (200 derandomized
  examples, the default budget of a certificate) without the shrink phase. Derandomized, the
  examples drawn are the same with or without it, so what is detected is the same; a killed
  mutant does not spend minutes shrinking the example that killed it;
- once a mutant has failed a test citing the clause the session selected (``--clause``), or
  the clause named for its backend id in the environment variable ``HSCALE_KILLED_BY`` (JSON,
  ``{backend id: clause}``: the self-tests' runs of several mutants, tests/helpers/selftest.py),
  its remaining tests are skipped: it is killed, naming its clause, and the rest of its run
  could only add to what is already decided. A failure citing another clause, or an error on
  valid input, does not stop it; a backend without a clause runs every test;
- so that a kill comes early, each such backend's tests that carry its clause's marker run
  first (a stable sort: the order is otherwise pytest's).
"""

import json
import os

import pytest
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "mutation-ci", max_examples=200, derandomize=True, database=None, deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    print_blob=True)

#: backend ids already killed naming the session's clause
KILLED: set = set()
#: backend id -> the clause whose citation kills it (HSCALE_KILLED_BY)
KILLED_BY: dict = json.loads(os.environ.get("HSCALE_KILLED_BY", "{}"))


def _backend(item):
    return getattr(getattr(item, "callspec", None), "params", {}).get("backend_id")


def pytest_collection_modifyitems(session, config, items):
    def later(item) -> bool:
        clause = KILLED_BY.get(_backend(item))
        wanted = [clause] if clause else list(config.getoption("clause", None) or [])
        marked = {c for m in item.iter_markers("clause") for c in m.args}
        return not (wanted and marked.intersection(wanted))
    items.sort(key=later)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _backend(item) in KILLED:
        pytest.skip("mutation harness: killed already, naming its clause")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    backend = _backend(item)
    clauses = list(item.config.getoption("clause", None) or [])
    clauses += [c for b, c in KILLED_BY.items() if b == backend]
    if report.failed and any(f"[{c}]" in report.longreprtext for c in clauses):
        KILLED.add(backend)
    return report
