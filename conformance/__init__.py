"""The H-Scale NVFP4 conformance suite, installed: ``hscale conform --backend NAME`` or
``pytest --pyargs hscale.conformance --backend NAME`` from any directory.

See docs/conformance.md (``hscale docs conformance``). The suite judges through the judging
library (``hscale.judge``: the case model, the declared domain, the diagnoser, the profiles, the
clause registry); the modules here are the suite's own:

- ``plugin``: the pytest plugin, registered on install (entry point ``pytest11``): the options,
  the backends under test, progress lines, the certificates; it acts only in sessions that run
  the suite;
- ``conftest``: the fixtures the tests use (the backend, its checker, the profile, the models);
- ``certificate``: the certificate's clause statuses, verdicts and summary;
- ``checker``: how a test runs one case on the backend under test, in the backend's declared
  domain, and fails with the diagnoser's findings;
- ``strategies``: Hypothesis strategies, a weighted mix in the manner of TestFloat;
- ``zoo``: the calibrated full models, built once per session;
- ``mutants``: deliberately wrong backends that the suite must reject (its teeth; the kit's own
  tests run them, tests/judge/test_selftest_mutants.py in the repository);
- ``test_*``: the tests, each marked with the clauses it checks.
"""
