"""The observed-file lines of a quantized tensor's groups, ``CASE row group byte packed`` and
``CASE gs g``: one reader and one writer for the families whose results are codes, scale bytes
and a global scale (the activation, rht and tile sets; docs/vectors.md)."""

from __future__ import annotations

import numpy as np

from hscale.reference.constants import GROUP_SIZE
from hscale.reference.packing import pack_codes, unpack_codes

from . import hexio


def write_group_lines(case_id: str, codes, scale_bytes, global_scale) -> list[str]:
    lines = [f"{case_id} gs {hexio.scalar_word(global_scale)}"]
    rows, n = np.shape(codes)
    for r in range(rows):
        for i in range(n // GROUP_SIZE):
            packed = pack_codes(np.asarray(codes)[r, GROUP_SIZE * i:GROUP_SIZE * (i + 1)])
            lines.append(f"{case_id} {r} {i} {int(scale_bytes[r, i]):02x} {bytes(packed).hex()}")
    return lines


def read_group_lines(lines: list[str], known: set, what: str, hint: str = "") -> dict:
    """case id -> {"groups": {(row, group): (byte, packed bytes)}, "gs": g or None}; ``hint``:
    the command that lists the cases (``hscale vectors expect --recipe R``)."""
    seen: dict[str, dict] = {}
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or line.lstrip().startswith(("#", "//")):
            continue
        if words[0] not in known:
            raise ValueError(f"line {number}: no {what} case {words[0]!r} "
                             f"({hint or 'hscale vectors expect'} lists them)")
        entry = seen.setdefault(words[0], {"groups": {}, "gs": None})
        if len(words) == 3 and words[1] == "gs":
            entry["gs"] = hexio.scalar_from_hex(words[2])
        elif len(words) == 5:
            entry["groups"][(int(words[1]), int(words[2]))] = (int(words[3], 16),
                                                              bytes.fromhex(words[4]))
        else:
            raise ValueError(f"line {number}: expected 'CASE row group byte packed' or "
                             f"'CASE gs g', found {line.strip()!r}")
    return seen


def assembled(entry: dict, expected_codes, expected_bytes) -> tuple:
    """``(codes, scale bytes, missing groups)``: the groups a file held, the expected ones in
    place of those it lacks (not judged, said to be missing)."""
    codes, scale_bytes = np.array(expected_codes), np.array(expected_bytes)
    rows, n = codes.shape
    missing = []
    for r in range(rows):
        for i in range(n // GROUP_SIZE):
            if (r, i) not in entry["groups"]:
                missing.append((r, i))
                continue
            byte, packed = entry["groups"][(r, i)]
            scale_bytes[r, i] = byte
            codes[r, GROUP_SIZE * i:GROUP_SIZE * (i + 1)] = unpack_codes(
                np.frombuffer(packed, np.uint8)[None])[0]
    return codes, scale_bytes, missing
