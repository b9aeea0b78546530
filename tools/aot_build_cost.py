"""What building one fused-walk library costs on a cold cache: wall time, this process's CPU
seconds (export and inductor's lowering) and its children's (the C++ compiler), for the
weighted walk with the max-abs init (the library the default tier builds), with the kit's
compile settings and any inductor settings given on top.

    python tools/aot_build_cost.py [aot_inductor.precompile_headers=True ...]

Each run builds into a fresh temporary kit cache (HSCALE_CACHE_DIR), so nothing of an earlier
build is reused; inductor's own precompiled headers live outside it
(``/tmp/torchinductor_$USER/precompiled_headers``), remove them for a cold figure.
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
import time


def main(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="aot-build-cost-") as cache:
        os.environ["HSCALE_CACHE_DIR"] = cache
        import torch
        from hscale.backends import torch_aot, torch_compile
        variant = (False, False, "cpu")
        settings = torch_compile.compile_settings("cpu")
        for assignment in argv:
            key, value = assignment.split("=", 1)
            settings[key] = ast.literal_eval(value)
        package = torch_compile.package_path(variant, settings)
        start, before = time.perf_counter(), os.times()
        torch_aot.build(torch, variant, settings, package)
        after = os.times()
        own = after.user - before.user + after.system - before.system
        children = (after.children_user - before.children_user
                    + after.children_system - before.children_system)
        print(f"{' '.join(argv) or 'the kit settings'}: {time.perf_counter() - start:.1f} s "
              f"wall, {own:.1f} CPU s in this process, {children:.1f} in the compiler")


if __name__ == "__main__":
    main(sys.argv[1:])
