"""The CuPy backend's kernels are a CUDA source file (backends/cupy_kernel.cu), declared as
package data so the wheel ships it, and read by the backend from the installed package."""

from __future__ import annotations

import tomllib

from helpers.paths import REPO_ROOT


def test_the_kernels_are_the_cu_file_the_wheel_ships():
    from hscale.backends import cupy_backend
    source = (REPO_ROOT / "backends" / cupy_backend.KERNEL_FILE).read_text(encoding="utf-8")
    assert cupy_backend.KERNEL_SOURCE == source
    for name in cupy_backend.KERNELS:
        assert f"{name}_kernel" in source and f"{name}_host" in source
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    data = pyproject["tool"]["setuptools"]["package-data"]["hscale.backends"]
    assert cupy_backend.KERNEL_FILE in data
