"""Golden vectors of the weight kind (docs/spec.md sections 1-6, docs/vectors.md): the parameter
sets of the case catalogue (``catalogue``, level 0) and of the sweeps (``sweeps``, levels 1
and 2), each as ``<set>.json`` with its ``.npz``, ``.hex``, ``.gs.hex`` and ``.swz.hex``
(``formats``). A family of ``hscale.vectors.families`` like the others: its sets' names have
no prefix of their own (``SET_PREFIX`` is empty), so a set belongs to it when no other kind's
prefix starts its name.
"""

from __future__ import annotations

from hscale import SPEC_VERSION
from hscale.judge.profiles import EXACT, PROFILES, check_profile

from . import formats
from .catalogue import NO_VECTOR_CASE, level0_cases
from .check import check_lines, expect_lines
from .explain import explain_group as explain
from .families import DomainOption, SetChoice
from .serialize import ERROR_SET, MalformedVectors, case_from_json, read_case, set_name

__all__ = ["CHOICE", "FORMAT_NAME", "NO_VECTOR_CASE", "SET_PREFIX", "case_from_json",
           "check_lines", "expect_lines", "explain", "level0_cases", "read_case",
           "render_files", "verify_document"]

FORMAT_NAME = formats.FORMAT_NAME
SET_PREFIX = ""
#: The header fields of a set file that ``verify`` compares with the ones its cases imply.
HEADER_KEYS = ("format", "format_version", "spec_version", "level", "seed", "set", "parameters",
               "conventions")


def _allowances(allow) -> tuple:
    return tuple(dict.fromkeys(allow or ()))


def _check_profile(profile: str, allowances) -> None:
    """The profile and its allowances checked together (``check_profile``): a ValueError
    naming both options."""
    allowances = tuple(allowances or ())
    try:
        check_profile(profile, allowances)
    except ValueError as error:
        raise ValueError(f"--profile {profile}" + "".join(f" --allow {a}" for a in allowances)
                         + f": {error}") from None


CHOICE = SetChoice(
    "--profile", "profile", lambda: PROFILES,
    "exact (default: bit for bit), faithful (the certificate, with the divergences --allow "
    "names) or format (the format clauses only), as the conformance suite judges",
    "", domain_options=(DomainOption(
        "--allow", "NAME", "an allowance of the faithful or format profile (repeatable), e.g. "
        "reciprocal-multiply; the names of docs/spec.md section 7", repeatable=True),),
    domain=_allowances, default=EXACT, check=_check_profile,
    expect_options=("index_keys", "swizzled", "reciprocal"),
    verdict=lambda *report: [])  # the report ends with its verdict (hscale.vectors.check)


def _sets(cases) -> dict[str, list]:
    """Parameter set name -> its records (case, reference outputs), sets in name order (the
    errors set last), cases in the order given."""
    sets: dict[str, list] = {}
    for case in cases:
        sets.setdefault(set_name(case), []).append((case, case.reference_outputs))
    names = sorted(n for n in sets if n != ERROR_SET) + ([ERROR_SET] if ERROR_SET in sets else [])
    return {name: sets[name] for name in names}


def render_files(cases, level: int, seed: int, spec_version: str = SPEC_VERSION
                 ) -> dict[str, bytes]:
    """File name -> bytes of every parameter set of ``cases`` in all its forms."""
    files: dict[str, bytes] = {}
    for name, records in _sets(cases).items():
        header = formats.set_header(name, level, seed, records[0][0], spec_version)
        files.update(formats.render_set(header, records))
    return files


def verify_document(name: str, document: dict, level: int, seed: int, spec_version: str):
    """``(problems, the set's files as its stored inputs render, its cases)`` for the weight set
    file ``name``: each case recomputed from its stored inputs and compared with what is
    stored, the header with the one its first case implies. No files when a case cannot be
    read or recomputed (its problem says why)."""
    from hscale.judge.cases import CaseError

    from .serialize import case_json
    from .verify import _first_difference
    entries = document["cases"]
    try:
        cases = [read_case(name, number, entry, with_expected=False)
                 for number, entry in enumerate(entries)]
    except MalformedVectors as error:  # it names the file (and the case)
        return [str(error)], {}, []
    problems, records = [], []
    for entry, case in zip(entries, cases):
        try:
            outputs = case.reference_outputs
        except CaseError as error:
            problems.append(f"{name}: case {case.id}: {error}")
            continue
        fresh = case_json(case, outputs)
        if fresh != entry:
            problems.append(f"{name}: case {case.id}: {_first_difference(entry, fresh)}")
        records.append((case, outputs))
    if not records or len(records) != len(cases):
        return problems, {}, cases
    header = formats.set_header(name[:-len(".json")], level, seed, records[0][0], spec_version)
    for key in HEADER_KEYS:
        if document.get(key) != header[key]:
            problems.append(f"{name}: header {key}: stored {document.get(key)!r}, "
                            f"expected {header[key]!r}")
    return problems, formats.render_set(header, records), cases
