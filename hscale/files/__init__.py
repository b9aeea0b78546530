"""Writing files for users: the one home of the project's output rules.

Every command that writes a file or a directory a user asked for goes through here, so that
the same rules hold everywhere:

- a file is written to a temporary name beside its target and renamed when complete, so an
  interrupted run leaves the old file (or none), never half a new one (``write_bytes``);
- a directory is written under a hidden temporary name and renamed when complete
  (``OutputDirectory``); an existing one is replaced only when the caller says so (``--force``)
  and only once the new one is complete;
- ``-`` means standard output;
- nothing that is not a regular file (a device such as ``/dev/stdout``, a FIFO, a socket, a
  directory where a file is asked for) and no symbolic link is ever replaced: such a target is
  refused in one line (``OutputError``) before any work, and left as it was;
- bytes are reproducible where that matters: ``npz_bytes`` writes an ``.npz`` whose bytes depend
  only on its arrays (no dates, no compression whose output could differ between zlib builds).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import json
import os
import secrets
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import numpy as np

#: The target that means standard output.
STDOUT = "-"
#: The fixed date of every member of a reproducible zip.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


class OutputError(ValueError):
    """A target that cannot or must not be written: says which and why, in one line."""


def is_stdout(path) -> bool:
    return str(path) == STDOUT


def check_target(path, argument: str = "--out") -> Path:
    """``path`` can be written as a regular file: it is absent or a regular file (not a
    symbolic link, a device, a FIFO, a socket or a directory), and its directory exists and is
    writable. Returns it as a Path; ``OutputError`` otherwise. Call it before the work, so that
    a mistake costs nothing."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"{argument} {path}: cannot be examined ({exc.strerror or exc})") \
            from None
    if mode is not None:
        if stat.S_ISLNK(mode):
            raise OutputError(f"{argument} {path}: is a symbolic link; refusing to replace it "
                              "(name the file it points to, or '-' for standard output)")
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                    "a FIFO" if stat.S_ISFIFO(mode) else
                    "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            hint = " ('-' writes to standard output)" if kind != "a directory" else ""
            raise OutputError(f"{argument} {path}: is {kind}; refusing to replace it{hint}")
    directory = path.absolute().parent
    if not directory.is_dir():
        raise OutputError(f"{argument} {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise OutputError(f"{argument} {path}: the directory {directory} is not writable")
    return path


#: The longest name most file systems allow (NAME_MAX), and how much of a target's name the
#: hidden names beside it keep, so that a legal target name always gives a legal hidden one.
NAME_MAX = 255
KEPT_OF_NAME = 160


def hidden_name(name: str, kind: str) -> str:
    """The hidden name of a temporary file or directory beside a target called ``name``:
    ``.NAME.KIND`` for a short name; for a long one the first KEPT_OF_NAME characters and a
    hash of the whole, so that ``.NAME.partial-PID-TOKEN`` stays within NAME_MAX bytes."""
    if len(os.fsencode(name)) > KEPT_OF_NAME:
        digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
        kept = os.fsdecode(os.fsencode(name)[:KEPT_OF_NAME]) if name.isascii() else \
            name[:KEPT_OF_NAME // 4]
        name = f"{kept}~{digest}"
    return f".{name}.{kind}"


def write_bytes(path, data: bytes, argument: str = "--out") -> Path | str:
    """``data`` to ``path`` (``-``: standard output), written to a temporary name beside it and
    renamed when complete. The target is checked first (``check_target``)."""
    if is_stdout(path):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return STDOUT
    path = check_target(path, argument)
    temporary = path.with_name(hidden_name(path.name, f"tmp-{os.getpid()}-{secrets.token_hex(4)}"))
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def replacing(path, argument: str = "--out"):
    """For a library that writes to a path itself: yields a temporary path beside ``path`` and
    renames it to ``path`` when the block completes (removes it if the block raises). The
    target is checked first (``check_target``)."""
    path = check_target(path, argument)
    temporary = path.with_name(hidden_name(path.name, f"tmp-{os.getpid()}-{secrets.token_hex(4)}"))
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(path, text: str, argument: str = "--out") -> Path | str:
    """``text`` (UTF-8) as ``write_bytes`` writes."""
    return write_bytes(path, text.encode("utf-8"), argument)


def write_json(path, document, argument: str = "--out") -> Path | str:
    """``document`` as indented JSON, as ``write_bytes`` writes."""
    return write_text(path, json.dumps(document, indent=1) + "\n", argument)


# --------------------------------------------------------------------------------------------
# a directory: hidden while being written, renamed when complete
# --------------------------------------------------------------------------------------------

def check_output_directory(target: Path, force: bool = False, argument: str = "--out") -> Path:
    """That a directory can be written at ``target`` (``OutputDirectory``'s rules: never onto a
    link or a file, an existing one only with ``force``, in a directory that exists), said
    before any work; returns its parent."""
    target = Path(target)
    if target.is_symlink():
        raise OutputError(f"{argument} {target}: is a symbolic link; refusing to replace it "
                          "(name the directory it points to)")
    if target.exists() and not target.is_dir():
        raise OutputError(f"{argument} {target}: exists and is not a directory")
    if target.exists() and not force:
        raise OutputError(f"{target} exists; choose another {argument} or pass --force to "
                          "replace it")
    parent = target.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"{parent}: no such directory (the parent of {argument})")
    return parent


class OutputDirectory:
    """A directory written under a hidden temporary name beside ``target``
    (``.NAME.partial-PID-TOKEN``) and renamed to ``target`` by ``commit()``; ``abort()`` (or an
    exception inside ``with``) removes it. An existing target is replaced only with ``force``,
    only if it is a real directory (never a symbolic link or a file), and only once the new one
    is complete. ``argument`` names the target in messages (the option that gave it)."""

    def __init__(self, target, force: bool = False, argument: str = "--out"):
        self.target = Path(target)
        parent = check_output_directory(self.target, force, argument)
        _remove_stale_partials(parent, self.target.name)
        self.path = parent / hidden_name(self.target.name,
                                         f"partial-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            self.path.mkdir()
        except OSError as exc:
            raise OutputError(f"{parent}: cannot create a directory there "
                              f"({exc.strerror or exc})") from None
        self.committed = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.committed:
            self.abort()
        return False

    def commit(self) -> Path:
        old = None
        if self.target.exists():
            old = self.target.parent / hidden_name(self.target.name,
                                                   f"replaced-{secrets.token_hex(4)}")
            os.rename(self.target, old)
        os.rename(self.path, self.target)
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.target

    def abort(self):
        shutil.rmtree(self.path, ignore_errors=True)


def _remove_stale_partials(parent: Path, name: str):
    """Partial outputs of runs that died (their process is gone) are removed."""
    for stale in parent.glob(glob.escape(hidden_name(name, "partial-")) + "*"):
        try:
            pid = int(stale.name.rsplit(".partial-", 1)[1].split("-")[0])
            os.kill(pid, 0)  # still running: leave it
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            pass


# --------------------------------------------------------------------------------------------
# reproducible .npz
# --------------------------------------------------------------------------------------------

def npy_bytes(array: np.ndarray) -> bytes:
    """One array in the ``.npy`` format, version 1.0, no pickles."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), version=(1, 0),
                              allow_pickle=False)
    return buffer.getvalue()


def deterministic_zip(members: dict[str, bytes]) -> bytes:
    """A stored (uncompressed) zip with fixed dates and attributes, members in sorted order.

    Compression is off on purpose: deflate output may differ between zlib builds."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3
            info.external_attr = 0o644 << 16
            archive.writestr(info, members[name])
    return buffer.getvalue()


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An ``.npz`` of ``arrays`` (readable with ``np.load(path, allow_pickle=False)``) whose
    bytes depend only on the arrays."""
    return deterministic_zip({name + ".npy": npy_bytes(np.asarray(a)) for name, a in
                              arrays.items()})
