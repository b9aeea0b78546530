"""The vector families besides the weight sets of ``catalogue``: one per kind of implementation
the suite certifies (``hscale.judge.kinds``), each a module of this package with the same
members, so that ``generate``, ``verify``, ``check`` and ``explain`` treat them alike:

- ``FORMAT_NAME``: the ``format`` of its JSON set files (how a file says which family it is),
  and ``SET_PREFIX``, how its sets' names start;
- ``level0_cases(seed)``: its level-0 cases (each with ``id``, ``title``, ``clauses``);
- ``render_files(cases, level, seed, spec_version)``: file name -> bytes of its sets;
- ``verify_document(name, document, level, seed, spec_version)``: ``(problems, files as the
  stored inputs render, cases)`` for one of its set files;
- ``case_from_json(entry)``, ``observed_lines(cases, recipe)``, ``check_lines(cases, lines,
  recipe, max_errors)``, ``explain(file_name, case, row, group)``.

Registering a family is one line of ``FAMILIES``.
"""

from __future__ import annotations

import importlib

#: kind -> the module holding its vector sets.
FAMILIES = {
    "activation": "hscale.vectors.activation_sets",
    "gemm": "hscale.vectors.gemm_files",
}


def families() -> dict:
    """kind -> module, imported."""
    return {kind: importlib.import_module(name) for kind, name in FAMILIES.items()}


def family_of(document) -> object | None:
    """The family whose set file ``document`` (a parsed JSON set file) is, or None for a weight
    set."""
    fmt = document.get("format") if isinstance(document, dict) else None
    for module in families().values():
        if fmt == module.FORMAT_NAME:
            return module
    return None


def level0_family_cases(seed: int) -> dict:
    """kind -> its level-0 cases."""
    return {kind: module.level0_cases(seed) for kind, module in families().items()}
