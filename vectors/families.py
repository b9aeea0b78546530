"""The vector families: one per kind of implementation the suite certifies, named by the kind's
row of ``hscale.judge.kinds`` (``family``), each a module of this package with the same
members, so that ``generate``, ``verify``, ``check`` and ``explain`` treat them alike:

- ``FORMAT_NAME``: the ``format`` of its JSON set files (how a file says which family it is),
  and ``SET_PREFIX``, how its sets' names start (the weight sets', ``weight_sets``, is empty:
  the longest prefix a set's name starts with names its family, :func:`owner`);
- ``read_case(path, number, entry)``: case ``number`` of a set file, ``MalformedVectors``
  naming the file and the case when it cannot be read (:func:`case_reader` of
  ``case_from_json`` for most);
- ``NO_VECTOR_CASE`` (optional): its kind's clauses no vector case holds, and why;
- ``CHOICE``: a :class:`SetChoice`, what ``hscale vectors check`` and ``expect`` judge its sets
  as (a profile, a recipe, an accumulation model, a routing) and the option that says so;
- ``level0_cases(seed)``: its level-0 cases (each with ``id``, ``title``, ``clauses``);
- ``render_files(cases, level, seed, spec_version)``: file name -> bytes of its sets;
- ``verify_document(name, document, level, seed, spec_version)``: ``(problems, files as the
  stored inputs render, cases)`` for one of its set files;
- ``case_from_json(entry)``, ``expect_lines(cases, choice, with_global_scale)`` (and, as
  keywords, the ``expect`` flags its ``CHOICE`` names in ``expect_options``),
  ``check_lines(cases, lines, choice, max_errors, require_all, declared)`` (one signature for
  every family: ``declared`` is the domain its ``CHOICE`` reads from the command line, None for
  a family whose ``CHOICE`` declares no domain options; ``lines`` as ``observed.read_observed``
  gives them, which name their file), ``explain(file_name, case, row, group)``;
  ``check_lines`` ends its report with :func:`coverage`'s lines (the weight sets' with their
  verdict), and the command adds ``CHOICE.verdict``'s.

A kind's family is its row's ``family``: adding one touches no list here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from hscale.judge.kinds import KINDS

from .serialize import MalformedVectors


@dataclass(frozen=True)
class DomainOption:
    """An option of ``hscale vectors check`` declaring part of an implementation's domain
    (``--dtypes LIST``): its flag, the placeholder of its value and its help line."""

    option: str
    metavar: str
    help: str
    #: given more than once (``--allow A --allow B``): its value is the list of them
    repeatable: bool = False

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class SetChoice:
    """What a family's sets are judged as by ``hscale vectors check`` / ``expect``: the option
    (``--recipe``), what its value is called (``recipe``), the values it takes, and the help
    lines of the two commands; ``domain_options``, the options of ``check`` that declare the
    implementation's domain (``--dtypes``), and ``domain``, which reads their values (each None
    when not given, in that order) into the ``declared`` domain its ``check_lines`` takes.

    ``default``: the value its sets are judged under when no family's option is given (the
    family judged then is the one whose ``default`` is set, the weight kind's); ``check``: how
    the value is checked with the declared domain (default: one of ``choices``); ``verdict``:
    the closing lines of ``check`` after the report (:func:`closing_lines`; none for a family
    whose report ends with its own)."""

    option: str
    name: str
    choices: Callable[[], tuple]
    check_help: str
    expect_help: str
    domain_options: tuple[DomainOption, ...] = ()
    domain: Callable | None = None
    default: str | None = None
    check: Callable | None = None
    #: the flags of ``expect`` its ``expect_lines`` takes as keywords (``index_keys``)
    expect_options: tuple[str, ...] = ()
    verdict: Callable = field(default=lambda *report: closing_lines(*report))

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

    def accept(self, value: str, declared) -> None:
        """A ValueError, in one line naming the option, when ``value`` (with the ``declared``
        domain) is not one the family judges under."""
        if self.check is not None:
            self.check(value, declared)
        elif value not in self.choices():
            raise ValueError(f"{self.option} {value}: one of {', '.join(self.choices())}")


def closing_lines(observed: str, vectors: str, kind: str, choice: SetChoice, value: str,
                  errors: int) -> list[str]:
    """The last line of ``hscale vectors check``'s report on a family's sets: the errors, or
    that the observed file conforms."""
    from hscale.judge.findings import plural
    if errors:
        return [f"{observed}: {plural(errors, 'error')} ({choice.name} {value})"]
    return [(f"{observed}: conforms to the {kind} vectors of {vectors} under the {value} "
             f"{choice.name}")]


def families() -> dict:
    """kind -> the module of its vector sets, imported, in the table's order."""
    return {name: importlib.import_module(kind.family) for name, kind in KINDS.items()}


def owner(set_name: str) -> str:
    """The kind whose set ``set_name`` (a set file's name less its suffix) is by its name: the
    family with the longest ``SET_PREFIX`` it starts with (the weight sets' prefix is empty)."""
    prefixed = [(len(module.SET_PREFIX), kind) for kind, module in families().items()
                if set_name.startswith(module.SET_PREFIX)]
    return max(prefixed)[1]


def kind_of(document, set_name: str) -> str:
    """The kind of a set file: the one whose family's ``FORMAT_NAME`` its ``format``
    (``document``, the parsed file) names, else the one that owns its name (:func:`owner`)."""
    fmt = document.get("format") if isinstance(document, dict) else None
    for kind, module in families().items():
        if fmt == module.FORMAT_NAME:
            return kind
    return owner(set_name)


def family_of(document, set_name: str):
    """The family (module) of a set file (:func:`kind_of`)."""
    return families()[kind_of(document, set_name)]


def case_reader(case_from_json: Callable) -> Callable:
    """A family's ``read_case(path, number, entry)`` from its ``case_from_json(entry)``."""
    def read_case(path, number: int, entry):
        try:
            return case_from_json(entry)
        except (KeyError, ValueError, TypeError, IndexError) as error:
            raise MalformedVectors(f"{path}: cases[{number}]: unreadable ({error})") from None
    return read_case


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
