"""Generate a level of golden vectors: cases -> reference outputs -> files + manifest."""

from __future__ import annotations

import json
from pathlib import Path

from hscale import SPEC_VERSION
from hscale import files as output_files

from . import formats
from .catalogue import DEFAULT_SEED, clause_index, level0_cases
from hscale.judge.cases import Case

from .families import families, level0_family_cases
from .formats import Record
from .serialize import ERROR_SET, set_name

LEVELS = (0, 1, 2)


def level_cases(level: int, seed: int = DEFAULT_SEED, **options) -> list[Case]:
    if level == 0:
        return level0_cases(seed)
    from . import sweeps
    if level == 1:
        return sweeps.level1_cases(seed, **options)
    if level == 2:
        return sweeps.level2_cases(seed, **options)
    raise ValueError(f"level {level}: levels are {LEVELS}")


def group_sets(records: list[Record]) -> dict[str, list[Record]]:
    """Parameter set name -> its records, sets in name order (errors last), cases in
    catalogue order."""
    sets: dict[str, list] = {}
    for case, outputs in records:
        sets.setdefault(set_name(case), []).append((case, outputs))
    names = sorted(n for n in sets if n != ERROR_SET) + ([ERROR_SET] if ERROR_SET in sets else [])
    return {name: sets[name] for name in names}


def render_level(records: list[Record], level: int, seed: int,
                 spec_version: str = SPEC_VERSION, family_cases: dict | None = None
                 ) -> dict[str, bytes]:
    """Every file of a level (sets in all formats, manifest.json, SHA256SUMS), stamped with the
    spec version they are made under (this kit's, unless re-rendering older vectors);
    ``family_cases``: kind -> the cases of that vector family (``families``) to add."""
    files: dict[str, bytes] = {}
    for name, set_records in group_sets(records).items():
        header = formats.set_header(name, level, seed, set_records[0][0], spec_version)
        files.update(formats.render_set(header, set_records))
    cases = [case for case, _ in records]
    for kind, members in (family_cases or {}).items():
        files.update(families()[kind].render_files(members, level, seed, spec_version))
        cases += members
    files.update(formats.manifest_files(files, level, seed, clause_index(cases), len(cases),
                                        spec_version))
    return files


def generate_files(level: int = 0, seed: int = DEFAULT_SEED, **options) -> dict[str, bytes]:
    cases = level_cases(level, seed, **options)
    records = [(case, case.reference_outputs) for case in cases]
    return render_level(records, level, seed,
                        family_cases=level0_family_cases(seed) if level == 0 else None)


def write_files(out: Path, files: dict[str, bytes], clean: bool = True) -> None:
    """Write the files; with ``clean`` remove the files an older run listed in DIR's manifest
    that this run does not write (nothing else in DIR is touched)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in files:  # before writing anything: no link, device or directory is replaced
        output_files.check_target(out / name, "--out")
    if clean:
        for name in _previous_files(out):
            old = out / name
            if name not in files and old.is_file() and not old.is_symlink() \
                    and _is_vector_file(name):
                old.unlink()
    for name, data in files.items():
        path = out / name
        if path.is_file() and path.read_bytes() == data:
            continue  # leave the mtime of unchanged files alone
        output_files.write_bytes(path, data)


def _previous_files(out: Path) -> list[str]:
    try:
        manifest = json.loads((out / formats.MANIFEST).read_text())
        return [n for n in manifest["files"] if "/" not in n and "\\" not in n]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _is_vector_file(name: str) -> bool:
    return name in (formats.MANIFEST, formats.SHA256SUMS) or name.endswith(
        (".json", ".npz", ".hex"))  # .gs.hex and .swz.hex included
