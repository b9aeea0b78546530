"""The judging library: how every judge of the project decides whether a result is NVFP4.

One of each thing, imported by the conformance suite, ``hscale vectors check``,
``hscale check``, ``hscale interop`` and ``hscale bench``:

- ``cases``: the one case model (inputs, parameters, expected outputs or the expected
  rejection, the clauses exercised);
- ``diagnose``: the one diagnoser, ``observe`` (what an implementation returned -> the one
  result record) and ``diagnose`` (a result -> findings under a profile);
- ``findings``: a finding, said in the spec's terms;
- ``profiles``: the exact, faithful and format profiles and their named allowances;
- ``clauses``: the clause registry, parsed once from docs/spec.md;
- ``independent``: a second, vectorised statement of the spec that imports nothing of the
  reference but its constants (the exact and faithful certificates);
- ``oracle``: an exact-arithmetic statement with ``fractions.Fraction``, for small cases;
- ``builders``: exact constructions (grid points, ties, midpoints) for hand-written cases.

It imports the reference (and nothing above it): ``reference <- backends <- judge``.
"""
