"""The suite's fixtures: every test that takes ``backend_id`` runs once per backend under test;
``checker`` runs a case on it and judges the result. Loaded only for the suite's own directory;
the options, the session's bookkeeping and the certificate are the plugin's
(``hscale.conformance.plugin``)."""

from __future__ import annotations

import pytest

from hscale.conformance.activation_checker import ActivationChecker
from hscale.conformance.checker import Checker
from hscale.judge.activation_domain import ActivationDomain
from hscale.conformance.plugin import STATE_KEY, BackendEntry, SuiteState
from hscale.conformance.zoo import ModelZoo


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


@pytest.fixture
def checker(request, backend, backend_entry, suite_state) -> Checker:
    marker_ids = [c for m in request.node.iter_markers("clause") for c in m.args]
    strict = True if request.config.getoption("strict_errors") else None
    return Checker(backend, backend_entry.id, suite_state.profile, suite_state.allowances,
                   backend_entry.tally, marker_ids, strict_errors=strict,
                   domain=backend_entry.domain, strict_inputs=suite_state.strict_inputs,
                   test=request.node.nodeid,
                   in_hypothesis=bool(getattr(request.function, "is_hypothesis_test", False)))


@pytest.fixture
def activation_checker(request, backend, backend_entry, suite_state) -> ActivationChecker:
    """The checker of an activation test (the kind is the backend's: a backend that does not
    declare it never reaches here, its activation tests are skipped at collection)."""
    domain = ActivationDomain.of(backend_entry.declared.declarations["activation"])
    return ActivationChecker(backend, backend_entry.id, domain, backend_entry.tally,
                             test=request.node.nodeid)


@pytest.fixture(scope="session")
def profile(suite_state) -> str:
    return suite_state.profile


@pytest.fixture(scope="session")
def zoo() -> ModelZoo:
    return ModelZoo()


@pytest.fixture
def gemm_checker(request, backend, backend_entry):
    """A GEMM case runner for the backend (its gemm kind; skips when it does not declare it)."""
    from hscale.conformance.gemm_checker import GemmChecker
    return GemmChecker(backend, backend_entry.id, backend_entry.tally.gemm,
                       test=request.node.nodeid)
