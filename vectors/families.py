"""The vector families besides the weight sets of ``catalogue``: one per kind of implementation
the suite certifies, named by the kind's row of ``hscale.judge.kinds`` (``family``), each a
module of this package with the same members, so that ``generate``, ``verify``, ``check`` and
``explain`` treat them alike:

- ``FORMAT_NAME``: the ``format`` of its JSON set files (how a file says which family it is),
  and ``SET_PREFIX``, how its sets' names start;
- ``NO_VECTOR_CASE`` (optional): its kind's clauses no vector case holds, and why;
- ``CHOICE``: a :class:`SetChoice`, what ``hscale vectors check`` and ``expect`` judge its sets
  as (a recipe, an accumulation model, a routing) and the option that says so;
- ``level0_cases(seed)``: its level-0 cases (each with ``id``, ``title``, ``clauses``);
- ``render_files(cases, level, seed, spec_version)``: file name -> bytes of its sets;
- ``verify_document(name, document, level, seed, spec_version)``: ``(problems, files as the
  stored inputs render, cases)`` for one of its set files;
- ``case_from_json(entry)``, ``expect_lines(cases, choice, with_global_scale)``,
  ``check_lines(cases, lines, choice, max_errors, require_all, declared)`` (one signature for
  every family: ``declared`` is the domain its ``CHOICE`` reads from the command line, None for
  a family whose ``CHOICE`` declares no domain options), ``explain(file_name, case, row,
  group)``; ``check_lines`` ends its report with :func:`coverage`'s lines.

A kind's family is its row's ``family``: adding one touches no list here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from hscale.judge.kinds import KINDS


@dataclass(frozen=True)
class DomainOption:
    """An option of ``hscale vectors check`` declaring part of an implementation's domain
    (``--dtypes LIST``): its flag, the placeholder of its value and its help line."""

    option: str
    metavar: str
    help: str

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class SetChoice:
    """What a family's sets are judged as by ``hscale vectors check`` / ``expect``: the option
    (``--recipe``), what its value is called (``recipe``), the values it takes, and the help
    lines of the two commands; ``domain_options``, the options of ``check`` that declare the
    implementation's domain (``--dtypes``), and ``domain``, which reads their values (each None
    when not given, in that order) into the ``declared`` domain its ``check_lines`` takes."""

    option: str
    name: str
    choices: Callable[[], tuple]
    check_help: str
    expect_help: str
    domain_options: tuple[DomainOption, ...] = ()
    domain: Callable | None = None

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")

    def declared(self, values: dict):
        """The declared domain ``check_lines`` takes, from the domain options' values (option
        dest -> value or None): None for a family that declares none; a ValueError naming the
        option whose value is wrong."""
        if self.domain is None:
            return None
        return self.domain(*(values.get(o.dest) for o in self.domain_options))


def families() -> dict:
    """kind -> the module of its vector sets, imported, in the table's order."""
    return {name: importlib.import_module(kind.family) for name, kind in KINDS.items()
            if kind.family is not None}


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


def no_vector_case() -> dict:
    """clause -> why no level-0 case holds it, of every family (``NO_VECTOR_CASE``)."""
    return {clause: why for module in families().values()
            for clause, why in getattr(module, "NO_VECTOR_CASE", {}).items()}


def coverage(cases, held: dict, size: Callable, unit: str, vectors: str, require_all: bool,
             declared=None) -> tuple[list[str], int]:
    """The last lines of a family's ``check`` report: how many of the vectors' ``unit``s
    (groups, output elements, words) the observed file held (``held``: case id -> how many;
    ``size(case)``: how many the case has) and which cases it lacked, and with ``require_all``
    the missing ones counted as errors: ``(lines, errors)``. ``declared``, the implementation's
    declared domain (``hscale.vectors.domains``; None: every case), limits what is asked for to
    the cases it ``holds``; the others are named as outside it, not required."""
    from hscale.judge.findings import plural

    from .domains import outside_line
    required = [case for case in cases if declared is None or declared.holds(case)]
    total = sum(size(case) for case in required)
    observed = sum(held.get(case.id, 0) for case in required)
    absent = [case.id for case in required if case.id not in held]
    lines = [f"{observed} of {plural(total, unit)} of the {vectors} observed"
             + (f"; {plural(len(absent), 'case')} absent from the file" if absent else "")]
    errors = 0
    if require_all and observed < total:
        lines.append(f"{plural(total - observed, unit)} of the vectors are missing from the "
                     "observed file (--require-all)")
        errors = total - observed
    inside = {case.id for case in required}
    outside = [case.id for case in cases if case.id not in inside]
    return lines + outside_line(outside, declared), errors
