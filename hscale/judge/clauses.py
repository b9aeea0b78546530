"""The clause registry: every clause of docs/spec.md, parsed once from the spec itself.

A clause is defined by a heading ``### ID: title`` of docs/spec.md (``NVFP4-...`` for the
storage format, ``HSCALE-...`` for the scale search). Everything that lists clauses reads this
registry: the conformance suite's meta-test, its ``--clause`` selector and JSON report, and the
golden vectors' manifest and clause table. The spec is shipped inside the package
(``hscale.docs``), so the registry works in an installed copy as in the repository.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass
from functools import cache

#: A clause ID: ``NVFP4-E2M1-1``, ``HSCALE-OBJ-1``, ...
CLAUSE_RE = re.compile(r"\b(?:NVFP4|HSCALE)-[A-Z0-9]+-\d+\b")
#: Clauses of the suite itself (its self-tests), not of the spec.
SUITE_PREFIX = "SUITE-"
_HEADING_RE = re.compile(r"^(#{2,3})\s+(.*?)\s*$", re.M)


@dataclass(frozen=True)
class Clause:
    id: str
    title: str
    section: str  # the "## N. ..." heading it sits under


def spec_text() -> str:
    """docs/spec.md, the normative text."""
    return importlib.resources.files("hscale.docs").joinpath("spec.md").read_text(encoding="utf-8")


@cache
def registry() -> dict[str, Clause]:
    """Every clause of the spec, in the order of its headings."""
    clauses: dict[str, Clause] = {}
    section = ""
    for level, text in _HEADING_RE.findall(spec_text()):
        if level == "##":
            section = text
            continue
        ident, sep, title = text.partition(":")
        if sep and CLAUSE_RE.fullmatch(ident.strip()):
            clauses[ident.strip()] = Clause(ident.strip(), title.strip(), section)
    if not clauses:
        raise RuntimeError("docs/spec.md defines no clause (no '### ID: title' heading)")
    return clauses


def clause_ids() -> list[str]:
    """The spec's clause IDs in spec order."""
    return list(registry())


def is_known(ident: str) -> bool:
    return ident in registry() or ident.startswith(SUITE_PREFIX)
