"""The H-Scale NVFP4 conformance suite: ``pytest conformance --backend NAME``.

See docs/conformance.md. The suite judges through the judging library (``hscale.judge``:
the case model, the diagnoser, the profiles, the clause registry); the modules here are
the suite's own:

- ``conftest``: the pytest plugin (options, backends, the JSON report);
- ``checker``: how a test runs one case on the backend under test and fails with the
  diagnoser's findings;
- ``strategies``: Hypothesis strategies, a weighted mix in the manner of TestFloat;
- ``mutants``: deliberately wrong backends that the suite must reject (its teeth);
- ``selftest``: running the suite on mutants and adapters in subprocesses;
- ``test_*``: the tests, each marked with the clauses it checks.
"""
