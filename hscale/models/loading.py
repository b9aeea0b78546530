"""Loading models with transformers: the optional dependencies, said by name when missing, and
transformers' load reports kept quiet."""

from __future__ import annotations

import contextlib
import importlib


class MissingPackage(ImportError):
    """An optional dependency that is not installed: the user's set-up, not a bug, so the
    commands say it in one line (``hscale.cli``) instead of a traceback."""


def require(module: str, extra: str = "models"):
    """``import module``, or a ``MissingPackage`` that says which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingPackage(
            f"this needs the Python package {module!r}; install the optional dependencies "
            f"with `pip install 'hscale-nvfp4[{extra}]'`") from exc


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' load report and weight-loading progress bar for one call."""
    tlog = importlib.import_module("transformers.utils.logging")
    old_verbosity = tlog.get_verbosity()
    bar_was_enabled = tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        tlog.set_verbosity(old_verbosity)
        if bar_was_enabled:
            tlog.enable_progress_bar()
