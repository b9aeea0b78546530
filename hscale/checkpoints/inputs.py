"""Reading the files of a checkpoint before trusting them: regular files only, and JSON documents
whose types are checked where they are used.

A checkpoint is data from anywhere, so nothing is opened before it is known to be a regular
file (following symbolic links, as model caches use them): a FIFO would block the reader
forever, a device could be read without end. JSON documents (config.json, hf_quant_config.json,
the shard index) are read as UTF-8 and every field a reader uses is checked for its JSON type
(``field``), so that a wrong type is one line naming the file and the field, never a
traceback deep inside the code that trusted it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path



class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written as asked: says which file and why."""


class ConfigDoesNotBuild(ValueError):
    """A config naming an architecture transformers knows, from which it cannot build it: an
    engine cannot either (for ``hscale check`` a finding, where an architecture it does not
    know at all is a note)."""


#: The JSON name of each Python type a document holds (for messages).
JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
              int: "an integer", float: "a number", type(None): "null"}


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words."""
    return ("a regular file" if stat.S_ISREG(mode) else
            "a directory" if stat.S_ISDIR(mode) else
            "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


def require_regular(path, what: str = "") -> Path:
    """``path`` (links followed) is a regular file, else a CheckpointError naming it and what it
    is; it is not opened."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise CheckpointError(f"{path}: {what + ' ' if what else ''}cannot be read "
                              f"({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path}: {what + ' ' if what else ''}is {kind_of(mode)}, not a "
                              "regular file: refused, not read (spec NVFP4-CKPT-5)")
    return path


def open_regular(path, what: str = "", buffering: int = -1):
    """``path`` opened for binary reading, only if it is a regular file: checked before it is
    opened, and the opened descriptor checked again (so a file swapped in between is refused
    too); opened without blocking, so that not even a FIFO swapped in can hang the open."""
    path = require_regular(path, what)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise CheckpointError(f"{path}: is {kind_of(mode)}, not a regular file: refused, not "
                              "read (spec NVFP4-CKPT-5)")
    return os.fdopen(descriptor, "rb", buffering=buffering)


def read_json(path, what: str = ""):
    """The JSON document of a regular file, read as UTF-8, or a CheckpointError naming the file
    and where it breaks."""
    with open_regular(path, what) as handle:
        try:
            raw = handle.read()
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02X} at offset "
                              f"{exc.start})") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None


def json_type(value) -> str:
    return JSON_TYPES.get(type(value), type(value).__name__)


def field(document, key: str, types, where, default=None, clause: str = ""):
    """``document[key]`` checked for its JSON type (``types``: a type or a tuple of them, with
    ``type(None)`` where null is allowed; an integer never passes for a boolean, nor a boolean
    for an integer), ``default`` when the key is absent. Otherwise a CheckpointError naming the
    place (``where``: "FILE" or "FILE: a.b"), the field, and what it holds."""
    if not isinstance(document, dict):
        raise CheckpointError(f"{where}: is {json_type(document)}, not a JSON object"
                              + (f" (spec {clause})" if clause else ""))
    if key not in document:
        return default
    value = document[key]
    wanted = types if isinstance(types, tuple) else (types,)
    if not _is(value, wanted):
        names = " or ".join(JSON_TYPES.get(t, t.__name__) for t in wanted)
        raise CheckpointError(f"{where}: {key} is {json_type(value)} ({_shown(value)}), where "
                              f"{names} belongs" + (f" (spec {clause})" if clause else ""))
    return value


def string_list(document, key: str, where, clause: str = "") -> list[str]:
    """``document[key]`` as a list of strings ([] when absent or null), else a CheckpointError
    naming the file, the field and the first item that is not a string."""
    value = field(document, key, (list, type(None)), where, [], clause)
    for i, item in enumerate(value or []):
        if not isinstance(item, str):
            raise CheckpointError(f"{where}: {key}[{i}] is {json_type(item)} "
                                  f"({_shown(item)}), where a module name (a string) belongs"
                                  + (f" (spec {clause})" if clause else ""))
    return list(value or [])


def _is(value, wanted: tuple) -> bool:
    if isinstance(value, bool):
        return bool in wanted
    if isinstance(value, int) and float in wanted:
        return True
    return isinstance(value, wanted)


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
