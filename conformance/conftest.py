"""The suite's fixtures: every test that takes ``backend_id`` runs once per backend under test;
each kind's checker (``checker``, ``activation_checker``, ``gemm_checker``, ...: the fixture its
row of ``hscale.judge.kinds`` names) runs a case on it and judges the result. Loaded only for
the suite's own directory; the options, the session's bookkeeping and the certificate are the
plugin's (``hscale.conformance.plugin``)."""

from __future__ import annotations

import pytest

from hscale.conformance.plugin import STATE_KEY, BackendEntry, SuiteState
from hscale.conformance.zoo import ModelZoo
from hscale.judge.kinds import KINDS, Kind, resolve


def pytest_generate_tests(metafunc):
    st = metafunc.config.stash.get(STATE_KEY, None)
    if st is not None and "backend_id" in metafunc.fixturenames:
        ids = list(st.backends)
        metafunc.parametrize("backend_id", ids, ids=ids, scope="session")


@pytest.fixture(scope="session")
def suite_state(request) -> SuiteState:
    st = request.config.stash.get(STATE_KEY, None)
    if st is None:
        pytest.skip("the conformance suite is not active in this session (name a --backend)")
    return st


@pytest.fixture(scope="session")
def backend_entry(backend_id, suite_state) -> BackendEntry:
    return suite_state.backends[backend_id]


@pytest.fixture(scope="session")
def backend(backend_entry):
    if not backend_entry.available:
        pytest.skip(f"backend {backend_entry.id!r} unavailable: {backend_entry.reason}")
    return backend_entry.backend


def kind_checker_fixture(kind: Kind):
    """The fixture of ``kind``'s checker: its row's class, built for the test from the
    backend's entry (the kind's domain, built once, and its tally). A backend that does not
    declare the kind never reaches here: the plugin deselects its tests of the kind."""

    @pytest.fixture(name=kind.fixture)
    def fixture(request, backend, backend_entry, suite_state):
        if kind.name not in backend_entry.declared.kinds:
            pytest.skip(f"backend {backend_entry.id!r} does not declare the kind {kind.name!r}")
        return resolve(kind.checker).for_test(request, backend, backend_entry, suite_state)

    fixture.__doc__ = f"The checker of the {kind.name} kind ({kind.checker})."
    return fixture


for _kind in KINDS.values():  # one fixture per kind, named by its row
    globals()[f"_{_kind.fixture}_fixture"] = kind_checker_fixture(_kind)


@pytest.fixture(scope="session")
def profile(suite_state) -> str:
    return suite_state.profile


@pytest.fixture(scope="session")
def zoo() -> ModelZoo:
    return ModelZoo()
