"""What every command shares: one-line usage errors with exit code 2, and the checks of the
arguments commands have in common. Nothing here imports a command or the work behind one.

Exit codes: 0 success; 1 the work ran and found a difference (a mismatch, vectors that drifted,
a result that does not conform); 2 a user error (a bad argument, an input that cannot be read,
a backend or library that is missing), said in one line on stderr before any work starts.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from hscale.files import OutputError, check_target

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


PLOT_INSTALL_HINT = 'pip install "hscale-nvfp4[plot]" (or pip install matplotlib)'


class UsageError(ValueError):
    """A user's mistake (a bad argument, an input that cannot be read): one line, exit 2."""


class CommandParser(argparse.ArgumentParser):
    """argparse with its errors in one line, ``<prog>: <what is wrong> (see <prog> --help)``,
    and exit code 2, instead of the usage block followed by the error."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def fail(prog: str, message: str) -> int:
    """Print ``<prog>: <message>`` on stderr; the exit code of a user error."""
    print(f"{prog}: {message}", file=sys.stderr)
    return EXIT_USAGE


def error_text(error: BaseException) -> str:
    """The one-line text of an error: a file error as ``<path>: <why>``."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}"
    return str(error)


def plain_text(docstring: str) -> str:
    """A docstring without its reST markup (``x``, **x**, :func:`x`, `x`), for --help."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", docstring)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    return text.replace("``", "").replace("`", "")


def comma_separated(option: str, text: str) -> list[str]:
    """The non-empty items of a comma-separated option value; at least one."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option} {text!r}: no value given (a comma-separated list)")
    return items


def check_at_least(option: str, value, least) -> None:
    if value < least:
        raise UsageError(f"{option} {value}: must be at least {least}")


def check_layer_rows(option: str, rows: int) -> None:
    if rows < 1:
        raise UsageError(f"{option} {rows}: a layer needs at least one row (spec NVFP4-IN-1)")


def check_layer_cols(option: str, cols: int) -> None:
    from hscale.reference import GROUP_SIZE
    if cols < GROUP_SIZE or cols % GROUP_SIZE:
        raise UsageError(f"{option} {cols}: not a positive multiple of the group size "
                         f"{GROUP_SIZE}, as a layer's columns must be (spec NVFP4-IN-1)")


def check_method(option: str, method: str) -> None:
    from hscale.reference.validation import METHODS
    if method not in METHODS:
        raise UsageError(f"{option}: {method!r} is not a method; the methods are "
                         f"{', '.join(METHODS)} (spec NVFP4-IN-5)")


def check_init(option: str, init: str) -> None:
    from hscale.reference.validation import INITS
    if init not in INITS:
        raise UsageError(f"{option}: {init!r} is not an init; the inits are {', '.join(INITS)} "
                         "(spec NVFP4-IN-5)")


def load_backend(name: str):
    """The backend ``name`` (built-in or module:factory); a name that cannot be loaded is a
    UsageError. Whether it can run here is the caller's question (``available()``)."""
    from hscale import backends
    try:
        return backends.get(name)
    except ValueError as error:
        raise UsageError(str(error)) from None  # it names the backend and the forms


def check_output_file(option: str, path) -> None:
    """``path`` can be written as a regular file (``-``, standard output, always can): its
    directory exists and is writable, and it is not a device, a symbolic link or anything else
    that must not be replaced (``hscale.files.check_target``)."""
    if str(path) == "-":
        return
    try:
        check_target(path, option)
    except OutputError as error:
        raise UsageError(str(error)) from None


def check_plot_file(option: str, path) -> str:
    """Before any work: matplotlib is installed and can write ``path`` in the format its suffix
    names (png without one). Returns the format."""
    if str(path) == "-":
        raise UsageError(f"{option} -: a plot is written to a file, not to standard output")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise UsageError(f"{option} needs matplotlib, which is not installed: "
                         f"{PLOT_INSTALL_HINT}") from None
    check_output_file(option, path)
    image_format = Path(path).suffix[1:].lower() or "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if image_format not in formats:
        raise UsageError(f"{option} {path}: matplotlib cannot write .{image_format} files; "
                         f"use one of .{', .'.join(sorted(formats))}")
    return image_format


def size(text: str) -> int:
    """``2GB``, ``512MB``, ``1.5GiB`` or a number of bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?i?B?)\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 2GB or 512MB")
    number, unit = float(match.group(1)), match.group(2).upper().rstrip("B").rstrip("I")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
    return int(number * scale)


def require_models_extra() -> None:
    """quantize and calibrate need torch, transformers and safetensors: say how to get them."""
    import importlib.util
    missing = [m for m in ("torch", "transformers", "safetensors")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"needs {', '.join(missing)}, not installed: pip install "
                         '"hscale-nvfp4[models]" (install the CPU torch first where there is '
                         "no GPU, e.g. pip install torch==2.13.0)")
