"""Generate a level of golden vectors: cases -> reference outputs -> files + manifest."""

from __future__ import annotations

import json
from pathlib import Path

from hscale import SPEC_VERSION
from hscale import files as output_files

from . import formats
from .catalogue import DEFAULT_SEED, clause_index
from .families import families, level0_family_cases

LEVELS = (0, 1, 2)
#: The kind whose vectors the sweeps of levels 1 and 2 are (``sweeps``).
SWEPT_KIND = "weight"


def level_cases(level: int, seed: int = DEFAULT_SEED, **options) -> dict[str, list]:
    """kind -> its cases of a level: at level 0 every family's (``level0_cases``), at levels
    1 and 2 the sweeps of the weight kind's."""
    if level == 0:
        return level0_family_cases(seed)
    from . import sweeps
    if level == 1:
        return {SWEPT_KIND: sweeps.level1_cases(seed, **options)}
    if level == 2:
        return {SWEPT_KIND: sweeps.level2_cases(seed, **options)}
    raise ValueError(f"level {level}: levels are {LEVELS}")


def render_level(family_cases: dict, level: int, seed: int, spec_version: str = SPEC_VERSION
                 ) -> dict[str, bytes]:
    """Every file of a level (each kind's sets in all their forms, manifest.json, SHA256SUMS),
    stamped with the spec version they are made under (this kit's, unless re-rendering older
    vectors); ``family_cases``: kind -> its cases, each rendered by its family (``families``)."""
    files: dict[str, bytes] = {}
    cases = []
    for kind, members in family_cases.items():
        files.update(families()[kind].render_files(members, level, seed, spec_version))
        cases += members
    files.update(formats.manifest_files(files, level, seed, clause_index(cases), len(cases),
                                        spec_version))
    return files


def generate_files(level: int = 0, seed: int = DEFAULT_SEED, **options) -> dict[str, bytes]:
    return render_level(level_cases(level, seed, **options), level, seed)


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
