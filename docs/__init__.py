"""docs/ ships as ``hscale.docs`` so that the normative text, spec.md, travels with the package:
the clause registry (``hscale.judge.clauses``) reads the clause IDs from it."""
