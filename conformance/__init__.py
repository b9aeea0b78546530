"""The H-Scale NVFP4 conformance suite: ``pytest conformance --backend NAME``.

See docs/conformance.md. The modules here are the suite's machinery:

- ``clauses``: the clause IDs of docs/spec.md, and the allowances of the faithful profile;
- ``independent``: a second, vectorised statement of the spec, written only to *check* results
  (the exact certificate and the faithful certificate);
- ``oracle``: an exact-arithmetic oracle with ``fractions.Fraction`` for small cases;
- ``compare``: the one comparison helper every test uses (reference comparison under the
  ``exact`` profile, certificate under ``faithful``) and its spec-speaking failure messages;
- ``strategies``: Hypothesis strategies, a weighted mix in the manner of TestFloat;
- ``builders``: exact constructions for the hand-written tests;
- ``mutants``: deliberately wrong backends that the suite must reject (its teeth);
- ``selftest``: running the suite on mutants and adapters in subprocesses.
"""
