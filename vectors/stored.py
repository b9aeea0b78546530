"""The vectors stored in a directory, as ``hscale vectors check``, ``expect`` and ``explain``
read them: a vector directory (its manifest's checksums verified first), a directory of set
files without a manifest, or one set's file; every set file read by its kind's family
(``hscale.vectors.families``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hscale.judge.cases import Case

from . import formats
from .families import families, kind_of
from .serialize import MalformedVectors, read_vector_document

__all__ = ["KIND", "SET_SUFFIXES", "Vectors", "load_vectors", "open_vectors", "read_manifest",
           "set_stem"]


#: The file forms of one set besides its JSON, longest suffix first.
SET_SUFFIXES = (".gs.hex", ".swz.hex", ".hex", ".npz", ".json")


def read_manifest(directory) -> dict:
    """The ``manifest.json`` of a vector directory, its ``files`` checked to map file names in
    the directory to entries with a ``sha256``; ``MalformedVectors`` naming the directory or the
    manifest when DIR is not a vector directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MalformedVectors(f"{directory}: " + ("not a directory" if directory.exists()
                                                    else "no such directory"))
    path = directory / formats.MANIFEST
    if not path.is_file():
        raise MalformedVectors(f"{directory}: no {formats.MANIFEST} (not a vector directory)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # not JSON, or not UTF-8
        raise MalformedVectors(f"{path}: not JSON ({error})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
            for entry in files.values()):
        raise MalformedVectors(f"{path}: not a vector manifest (a JSON object whose 'files' "
                               "maps each file name to its 'sha256' is expected)")
    outside = [name for name in files if "/" in name or "\\" in name or name in ("", ".", "..")]
    if outside:
        raise MalformedVectors(f"{path}: lists {outside[0]!r}, which is not a file name in the "
                               "directory")
    return manifest


def _verify_checksums(directory: Path, checksums: dict[str, str]) -> None:
    for name, checksum in sorted(checksums.items()):
        path = directory / name
        if not path.is_file():
            raise MalformedVectors(f"{path}: listed in {formats.MANIFEST} but missing")
        if formats.sha256(path.read_bytes()) != checksum:
            raise MalformedVectors(f"{path}: its SHA-256 differs from {formats.MANIFEST}: the "
                                   "file was changed or damaged; regenerate or restore it")


def set_stem(name: str) -> str | None:
    """The parameter set a vector file belongs to (its name less the form's suffix)."""
    for suffix in SET_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[:-len(suffix)]
    return None


def _set_files(path: Path) -> tuple[Path, list[str], str]:
    """(directory, the JSON set files to read, a note for the report) for VECTORS, with the
    checksums of the manifest verified where there is one."""
    if not path.exists():
        raise MalformedVectors(f"{path}: no such directory (nor set file)")
    if path.is_dir():
        if (path / formats.MANIFEST).exists():
            listed = read_manifest(path)["files"]
            _verify_checksums(path, {n: e["sha256"] for n, e in listed.items()})
            return path, sorted(n for n in listed if n.endswith(".json")), ""
        names = sorted(p.name for p in path.glob("*.json") if p.is_file())
        if not names:
            raise MalformedVectors(f"{path}: no {formats.MANIFEST} and no set file (<set>.json) "
                                   "in it: not a vector directory")
        return path, names, (f"note: {path} has no {formats.MANIFEST}: no checksum was "
                             "verified (each case's derived fields were)")
    directory, stem = path.parent, set_stem(path.name)
    if stem is None:
        raise MalformedVectors(f"{path}: not a vector set file (<set>.json, .hex, .gs.hex, "
                               ".swz.hex or .npz)")
    json_name = f"{stem}.json"
    if not (directory / json_name).is_file():
        raise MalformedVectors(f"{path}: the set is read from its {json_name} (the "
                               "authoritative form), which is not beside it")
    if (directory / formats.MANIFEST).exists():
        listed = read_manifest(directory)["files"]
        if json_name not in listed:
            raise MalformedVectors(f"{directory / json_name}: not listed in "
                                   f"{directory / formats.MANIFEST}")
        _verify_checksums(directory, {n: e["sha256"] for n, e in listed.items()
                                      if set_stem(n) == stem})
        return directory, [json_name], ""
    return directory, [json_name], (f"note: {directory} has no {formats.MANIFEST}: the "
                                    f"checksums of {stem} were not verified (its derived "
                                    "fields were)")


#: The kind whose sets this module judges (its observed-file format, docs/vectors.md).
KIND = "weight"


@dataclass
class Vectors:
    """The cases of VECTORS by kind: kind -> case id -> (file name, case); and kind -> index
    key (``<set>:<case_index>``) -> case id."""

    by_kind: dict[str, dict[str, tuple[str, object]]]
    index_keys: dict[str, dict[str, str]]
    note: str = ""

    @property
    def keys(self) -> dict[str, str]:
        """The weight sets' index keys -> case id."""
        return self.index_keys.get(KIND, {})

    @property
    def cases(self) -> dict[str, tuple[str, Case]]:
        """The weight kind's cases: case id -> (file name, case)."""
        return self.by_kind.get(KIND, {})

    @property
    def family_cases(self) -> dict:
        """The other kinds' cases: case id -> (file name, case)."""
        return {case_id: entry for kind, cases in self.by_kind.items() if kind != KIND
                for case_id, entry in cases.items()}

    @property
    def every_case(self) -> dict:
        """Every kind's cases: case id -> (file name, case), kinds in the table's order."""
        return {case_id: entry for cases in self.by_kind.values()
                for case_id, entry in cases.items()}

    def kind_of(self, case_id: str) -> str | None:
        return next((kind for kind, cases in self.by_kind.items() if case_id in cases), None)


def open_vectors(path) -> Vectors:
    """Every case of VECTORS (a vector directory, a directory of set files, or one set's file)
    with its stored expected outputs, after checking the manifest's checksums where there is a
    manifest: vectors that were edited or damaged are refused (``MalformedVectors``, naming the
    file) before anything is judged. Each set file is read by its family
    (``hscale.vectors.families``)."""
    directory, names, note = _set_files(Path(path))
    found = Vectors({kind: {} for kind in families()}, {kind: {} for kind in families()}, note)
    seen: dict[str, str] = {}
    for name in names:
        file_path = directory / name
        document, entries = read_vector_document(file_path)
        stem = name[:-len(".json")]
        kind = kind_of(document, stem)
        for number, entry in enumerate(entries):
            case = families()[kind].read_case(file_path, number, entry)
            if case.id in seen:
                raise MalformedVectors(f"{file_path}: case {case.id} is also in "
                                       f"{seen[case.id]}; case IDs are unique")
            seen[case.id] = name
            found.by_kind[kind][case.id] = (name, case)
            found.index_keys[kind][f"{stem}:{number}"] = case.id
    return found


def load_vectors(path) -> dict[str, tuple[str, Case]]:
    """case id -> (file name, case with its stored expected outputs); ``open_vectors``."""
    return open_vectors(path).cases
