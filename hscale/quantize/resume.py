"""Resuming an interrupted block-by-block run from its last completed block.

The output is written under a hidden directory beside ``--out`` (``hscale.files``), renamed when
complete. After each block the sequential path makes what it wrote durable (the shard writer
flushed and synced), saves each batch's hidden states after that block (``hidden/``), and then
records in ``hscale-resume.json``: the run's fingerprint, the blocks done, the writer's
position, the report so far. A run killed at any moment (SIGKILL, the machine gone) or stopped
by SIGINT or SIGTERM (Ctrl-C, Slurm's preemption) leaves that directory; the next run of the
same command (same source files, same options, same hscale) adopts it and goes on from the next
block: the bytes of the finished checkpoint are those of an uninterrupted run. A run with other
options removes it and starts afresh, as any stale partial output is removed.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import secrets
import shutil
import signal
from pathlib import Path

from hscale.files import OutputDirectory, hidden_name

STATE_NAME = "hscale-resume.json"
HIDDEN_DIR = "hidden"


class Interrupted(BaseException):
    """SIGTERM during a run (a scheduler's preemption): stop like Ctrl-C, keeping what is done."""


def fingerprint(source_files, options: dict, version: str) -> str:
    """What must be the same for a partial output to be resumed: the source's weight files
    (path, size, modification time), every option that changes the output, hscale's version."""
    files = [(str(Path(f).resolve()), os.stat(f).st_size, os.stat(f).st_mtime_ns)
             for f in source_files]
    text = json.dumps({"files": files, "options": options, "version": version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


#: Partial outputs this process is writing now (a partial of this process's id that is not
#: here was left by an interrupted run of it: a notebook's Ctrl-C).
ACTIVE: set = set()


def _pid_alive(pid: int, partial: Path) -> bool:
    if pid == os.getpid():
        return partial.resolve() in ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ResumableOutput(OutputDirectory):
    """An ``OutputDirectory`` that adopts the partial output of an interrupted run with the same
    fingerprint (``state`` is then its saved state, else None), and keeps its own when the run
    is interrupted after a completed block."""

    def __init__(self, target, force: bool, print_id: str, enabled: bool = True):
        self.print_id = print_id
        self.state = None
        target = Path(target)
        parent = target.absolute().parent
        held = original = None
        if enabled and parent.is_dir():
            for partial in sorted(parent.glob(glob.escape(hidden_name(target.name, "partial-"))
                                              + "*")):
                try:
                    pid = int(partial.name.rsplit(".partial-", 1)[1].split("-")[0])
                    state = json.loads((partial / STATE_NAME).read_text())
                except (ValueError, IndexError, OSError):
                    continue
                if _pid_alive(pid, partial) or state.get("fingerprint") != print_id:
                    continue
                # held under this process's partial name: out of reach of the stale-partial
                # cleanup while it runs, and adopted by the next run if this one is killed
                # before the output takes it over (a name of its own was lost work then)
                held = parent / hidden_name(target.name,
                                            f"partial-{os.getpid()}-{secrets.token_hex(4)}")
                original = partial
                os.rename(partial, held)
                self.state = state
                break
        try:
            super().__init__(target, force)
        except BaseException:
            if held is not None:
                os.rename(held, original)  # left as it was found
            raise
        if held is not None:
            self.path.rmdir()
            os.rename(held, self.path)
        self.keep = False
        ACTIVE.add(self.path.resolve())
        for partial in parent.glob(glob.escape(hidden_name(target.name,
                                                           f"partial-{os.getpid()}-")) + "*"):
            if partial.resolve() not in ACTIVE:  # left by an interrupted run of this process,
                shutil.rmtree(partial, ignore_errors=True)  # not adopted: stale like any other

    def __exit__(self, exc_type, exc, tb):
        ACTIVE.discard(self.path.resolve())
        if not self.committed and self.keep and exc_type is not None and \
                issubclass(exc_type, (KeyboardInterrupt, Interrupted)):
            return False  # left for the next run of the same command to resume
        return super().__exit__(exc_type, exc, tb)

    # -- the state -------------------------------------------------------------------------
    def save_state(self, state: dict) -> None:
        """Written to a temporary name and renamed: never half a state."""
        temporary = self.path / f".{STATE_NAME}.tmp"
        temporary.write_text(json.dumps({**state, "fingerprint": self.print_id}))
        os.replace(temporary, self.path / STATE_NAME)
        self.keep = True

    def finish(self) -> None:
        """Remove what only a resumed run needs, before the output is committed."""
        (self.path / STATE_NAME).unlink(missing_ok=True)
        hidden = self.path / HIDDEN_DIR
        if hidden.is_dir():
            for entry in hidden.iterdir():
                entry.unlink()
            hidden.rmdir()


class HiddenStore:
    """Each batch's hidden states after a block, under the partial output's ``hidden/`` (every
    process writes its own batches; several machines need a shared filesystem to resume)."""

    def __init__(self, output_path):
        self.directory = Path(output_path) / HIDDEN_DIR

    def path(self, after_block: int, batch: int) -> Path:
        return self.directory / f"after-{after_block:05d}-batch-{batch:05d}.pt"

    def save(self, after_block: int, batches: dict) -> None:
        import torch
        self.directory.mkdir(parents=True, exist_ok=True)
        for batch, hidden in batches.items():
            path = self.path(after_block, batch)
            temporary = path.with_name(path.name + ".tmp")
            torch.save(hidden.cpu(), temporary)
            os.replace(temporary, path)

    def drop_before(self, after_block: int) -> None:
        if self.directory.is_dir():
            for entry in self.directory.glob("after-*-batch-*.pt"):
                if int(entry.name.split("-")[1]) < after_block:
                    entry.unlink(missing_ok=True)

    def load(self, after_block: int, batch: int):
        import torch
        path = self.path(after_block, batch)
        return torch.load(path) if path.is_file() else None


class TermAsInterrupt:
    """SIGTERM raises ``Interrupted`` while the block runs (the main thread only), so that a
    preempted run stops as Ctrl-C stops it and keeps its completed blocks."""

    def __enter__(self):
        import threading
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise Interrupted(f"signal {signum}")
            self.previous = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False
