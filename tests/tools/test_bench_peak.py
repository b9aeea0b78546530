"""``hscale.bench.peak.measured_run``: a command's peak resident memory is its own, not its
parent's. Linux-only (VmHWM and ru_maxrss semantics); skipped elsewhere with the reason."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hscale.bench.peak import measured_run, vm_hwm_kib

pytestmark = pytest.mark.skipif(vm_hwm_kib() is None, reason="no /proc/self/status VmHWM")

MiB = 1 << 20
#: The child touches this much; the parent holds PARENT_MIB more while it starts the child.
CHILD_MIB, PARENT_MIB = 64, 400
CHILD = ("import sys; block = bytearray(%d); block[::4096] = b'x' * len(block[::4096]); "
         "sys.exit(int(sys.argv[1]))" % (CHILD_MIB * MiB))


def child_argv(tmp_path, code):
    (tmp_path / "fatchild.py").write_text(CHILD)
    return [sys.executable, "-m", "fatchild", str(code)]


def test_the_childs_peak_excludes_what_the_parent_holds(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    held = bytearray(PARENT_MIB * MiB)
    held[::4096] = b"y" * len(held[::4096])  # resident in this process
    result = measured_run(child_argv(tmp_path, 3), env=env)
    assert result["returncode"] == 3  # the command's own exit status
    # its own image: the interpreter (some tens of MiB) and its 64 MiB, never this process's
    assert CHILD_MIB <= result["peak_rss_mib"] < CHILD_MIB + 150, result
    # what wait4's ru_maxrss says of the same command: at least what the parent held
    process = subprocess.Popen(child_argv(tmp_path, 0), env=env)
    _, _, usage = os.wait4(process.pid, 0)
    assert usage.ru_maxrss // 1024 >= PARENT_MIB, usage.ru_maxrss
    del held


def test_only_python_modules_are_measured():
    with pytest.raises(ValueError, match="module"):
        measured_run(["/bin/true"])
