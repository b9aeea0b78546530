"""The ``hscale`` command as a test runs it, at two costs.

``hscale_here(args)`` runs it in this process (``hscale.cli.main``, the imports already warm):
what the command prints and its exit code, a traceback escaping it recorded as the outcome
``"traceback"``, a run past its time cut by SIGALRM as ``"hang"``. It is the command's whole
behaviour but for the interpreter around it, at a few milliseconds instead of the second or
more (and several with torch) a fresh interpreter spends importing.

``hscale_process(args)`` runs ``python -m hscale`` in a fresh process: for what only a process
shows (the entry point, the exit status the shell sees, environment variables, the encoding of
the real standard streams, signals). Each command keeps at least one such test.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

#: Seconds a command run in this process may take before it counts as a hang.
TIMEOUT_S = 120


@dataclass
class Run:
    returncode: object  # the exit code, or "traceback" / "hang"
    stdout: str
    stderr: str
    trace: str = ""  # the traceback that escaped the command, where one did

    # the names subprocess.CompletedProcess uses, for tests written against either
    @property
    def code(self):
        return self.returncode

    @property
    def out(self) -> str:
        return self.stdout

    @property
    def err(self) -> str:
        return self.stderr


def _stream(errors: str = "backslashreplace") -> io.TextIOWrapper:
    """A text stream over bytes, as sys.stdout is: writers of binary output reach ``.buffer``;
    ``errors="strict"`` is the stream ``PYTHONIOENCODING=utf-8:strict`` gives a process."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8", "backslashreplace")


def hscale_here(arguments, cwd=None, timeout: int = TIMEOUT_S,
                stream_errors: str = "backslashreplace") -> Run:
    """``hscale ARGUMENTS`` in this process, from ``cwd`` (restored after); its standard
    streams UTF-8 with ``stream_errors`` (``"strict"``: as ``PYTHONIOENCODING=utf-8:strict``
    makes a process's)."""
    from hscale.cli import main
    out, err = _stream(stream_errors), _stream(stream_errors)

    def alarm(*_):
        raise TimeoutError(f"no answer in {timeout} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    here = os.getcwd()
    trace = ""
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in arguments])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            err.write(f"{exc.code}\n")
    except TimeoutError:
        code = "hang"
    except BaseException:  # noqa: BLE001 - a traceback is what a test looks for
        code, trace = "traceback", traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(here)
    return Run(code, _text(out), _text(err), trace)


def hscale_process(arguments, cwd=None, env=None, timeout: int = 600,
                   **options) -> subprocess.CompletedProcess:
    """``python -m hscale ARGUMENTS`` in a fresh process, output captured as text."""
    return subprocess.run([sys.executable, "-m", "hscale", *[str(a) for a in arguments]],
                          cwd=None if cwd is None else Path(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout, **options)
