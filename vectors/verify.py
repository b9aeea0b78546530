"""``hscale vectors verify DIR``: recompute every stored case from its stored inputs with the
reference and compare content and checksums with what is in DIR.

Drift is anything that differs: a file whose SHA-256 is not the one in ``manifest.json``, a
file missing or not listed, a case whose recomputed outputs differ from the stored ones, a
derived file (``.npz``, ``.hex``) that is not what the stored JSON renders to, a manifest that
does not list what it should, or vectors made for another spec version.
"""

from __future__ import annotations

from pathlib import Path

from hscale import SPEC_VERSION, same_major_version
from hscale.judge.findings import plural

from . import formats
from .catalogue import clause_index
from .families import family_of
from .generate import _is_vector_file

from .stored import read_manifest
from .serialize import MalformedVectors, read_vector_document


def _first_difference(stored, fresh, path=""):
    """A short description of the first place two JSON values differ."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        for key in sorted(set(stored) | set(fresh)):
            if key not in stored:
                return f"{path}{key}: missing from the stored file"
            if key not in fresh:
                return f"{path}{key}: not produced by the reference"
            if stored[key] != fresh[key]:
                return _first_difference(stored[key], fresh[key], f"{path}{key}.")
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return (f"{path.rstrip('.')}: {plural(len(stored), 'entry', 'entries')} stored, "
                    f"{len(fresh)} recomputed")
        for index, (a, b) in enumerate(zip(stored, fresh)):
            if a != b:
                return _first_difference(a, b, f"{path}[{index}].")
    return f"{path.rstrip('.')}: stored {stored!r}, reference gives {fresh!r}"


def _where(stored: bytes, fresh: bytes, file_name: str, cases) -> str:
    """'line N (case ID): ' for the first differing line of a hex file, else '' (every .hex
    line of every family starts with its case's index in the set)."""
    if not file_name.endswith(".hex"):
        return ""
    old, new = stored.decode("ascii", "replace").splitlines(), fresh.decode("ascii").splitlines()
    for number, (a, b) in enumerate(zip(old + [""] * len(new), new), 1):
        if a != b:
            case = ""
            if not b.startswith("//"):
                try:
                    case = f" (case {cases[int(b.split('_', 1)[0], 16)].id})"
                except (ValueError, IndexError):
                    case = ""
            return f"line {number}{case}: "
    return f"{plural(len(old), 'line')} where {len(new)} are expected: "


def _differing(directory: Path, files: dict, listed: dict, name: str, cases=()) -> list[str]:
    """The files of set ``name`` that are not in the manifest, or not what its stored inputs
    render to."""
    problems = []
    for file_name, data in sorted(files.items()):
        target = directory / file_name
        if file_name not in listed:
            problems.append(f"{file_name}: belongs to {name} but is not in the manifest")
        elif target.is_file() and target.read_bytes() != data:
            where = _where(target.read_bytes(), data, file_name, cases) if cases else ""
            problems.append(f"{file_name}: {where}differs from what the stored inputs of "
                            f"{name} render to with the reference")
    return problems


def verify_dir(directory) -> list[str]:
    """Every problem found in DIR, as messages naming the file (and case); [] if none.
    ``MalformedVectors`` when DIR is not a vector directory at all."""
    directory = Path(directory)
    problems: list[str] = []
    manifest = read_manifest(directory)
    listed = manifest["files"]
    level, seed = manifest.get("level"), manifest.get("seed")
    if not isinstance(level, int) or not isinstance(seed, int):
        return [f"{formats.MANIFEST}: no 'level' and 'seed' (whole numbers) to recompute the "
                "vectors with"]
    made_under = manifest.get("spec_version")
    if not same_major_version(made_under, SPEC_VERSION):
        problems.append(f"{formats.MANIFEST}: vectors are for spec version {made_under!r}, the "
                        f"reference is {SPEC_VERSION!r}: vectors apply within one major version "
                        "(docs/spec.md, How the version changes)")
        made_under = SPEC_VERSION

    # 1. checksums
    present = {p.name for p in directory.iterdir() if p.is_file() and _is_vector_file(p.name)}
    for name in sorted(listed):
        path = directory / name
        if not path.is_file():
            problems.append(f"{name}: listed in {formats.MANIFEST} but missing")
            continue
        data = path.read_bytes()
        if formats.sha256(data) != listed[name]["sha256"]:
            problems.append(f"{name}: SHA-256 {formats.sha256(data)} differs from the manifest's "
                            f"{listed[name]['sha256']}")
    for name in sorted(present - set(listed) - {formats.MANIFEST, formats.SHA256SUMS}):
        problems.append(f"{name}: not listed in {formats.MANIFEST}")

    # 2. content: recompute every case from its stored inputs
    regenerated: dict[str, bytes] = {}
    all_cases = []
    for name in sorted(n for n in listed if n.endswith(".json")):
        path = directory / name
        if not path.is_file():
            continue
        try:
            document, _ = read_vector_document(path, name)
            found, files, cases = family_of(document, name[:-len(".json")]).verify_document(
                name, document, level, seed, made_under)
        except MalformedVectors as error:  # it names the file (and the case)
            problems.append(str(error))
            continue
        problems += found
        all_cases += cases
        regenerated.update(files)
        problems += _differing(directory, files, listed, name, cases)

    # 3. the manifest itself
    if not problems:
        expected = formats.manifest_files(regenerated, level, seed, clause_index(all_cases),
                                          len(all_cases), made_under)
        for file_name, data in expected.items():
            target = directory / file_name
            if not target.is_file():
                problems.append(f"{file_name}: missing")
            elif target.read_bytes() != data:
                problems.append(f"{file_name}: differs from the manifest the files imply")
    return problems


def verify_cases(name: str, document: dict, what: str, case_from_json, fresh_json, render):
    """The one verify step of a family's set file: ``(problems, the files the stored inputs
    render, the cases)``: each case read (``case_from_json``), recomputed from its stored inputs
    (``fresh_json(case)``) and compared with what is stored; ``render(cases)`` the set's files."""
    problems, cases = [], []
    for number, entry in enumerate(document.get("cases", [])):
        try:
            stored = case_from_json(entry)
        except (KeyError, ValueError, TypeError, IndexError) as error:
            problems.append(f"{name}: cases[{number}]: unreadable {what} case ({error})")
            continue
        fresh = fresh_json(stored)
        if fresh != entry:
            problems.append(f"{name}: case {stored.id}: {_first_difference(entry, fresh)}")
        cases.append(stored)
    return problems, (render(cases) if cases and not problems else {}), cases
