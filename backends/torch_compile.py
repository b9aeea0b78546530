"""The fused path of the torch backends: the fused walk (``torch_walk.walk``: one graph per
block) compiled by inductor (``torch_aot``: ahead of time into a C++ library kept on disk on the
CPU, by ``torch.compile`` into Triton kernels in the process on CUDA), trusted only after
checking it against the eager pipeline.

Exactness. Inductor is told not to contract floating point (``-ffp-contract=off``, no unsafe
math); its vectorised C++ applies one IEEE operation per torch op (``at::vec`` operators), which
tests/backends/test_fused_walk.py checks by reading the compiled library's machine code for
fused multiply-adds. On CUDA, Triton is told not to fuse a multiply and an add
(``emulate_precision_casts``), and where this torch has the switch not to flush subnormals. Each
new block shape (rows, groups per row, dtype, method, init, window) is checked once per process
against the eager pipeline (``torch_tensor.TensorRun.eager_block``) on the real block and on a
probe of the same shape (exact E2M1 ties at each group's initial byte over the whole ladder,
one-ulp neighbours, zero groups, -0.0, saturation, h with zeros; ``walk_probe``): the bytes,
and the group objectives the walk hands back for the quantization report. A mismatch
turns the fused path off for the backend that owns it; so does a failure to compile before any
shape has worked (no C++ compiler, a torch without AOTInductor); a later failure, or a block
with a size of 1 (outside the library's shapes), sends only that shape to the eager path. A
failure that turns the path off is said once (a ``RuntimeWarning``) and in ``FusedPath.status()``.

Shapes. The walk is exported with the block's rows, groups per row and window length dynamic
(sizes >= 2), so one library serves every layer shape of a model and every K; blocks are float32
(bfloat16 and float16 widened exactly first). So there are four libraries: the weighted
objective (rtn, scale-only, hscale) and the block objective (hscale-block), each with the
max-abs or the 4over6 initial byte.

The disk cache. The libraries are kept under ``fused_cache_dir()``:
``$HSCALE_CACHE_DIR/inductor/torch-<version>`` (default ``$XDG_CACHE_HOME/hscale`` or
``~/.cache/hscale``; under a user's own ``TORCHINDUCTOR_CACHE_DIR``, when ``HSCALE_CACHE_DIR``
is not set, ``hscale/torch-<version>`` there), each named by a digest of the walk's source and
the compiler settings, so a torch upgrade or a change of the walk compiles afresh and only the
first run on a machine pays for the compilation (one to three minutes of CPU a library);
a later process loads the library in about a millisecond. Inductor compiles in a scratch
directory removed after; a library that fails to load is built again.

Policy (``FusedPath``): the fused walk runs on the CPU for layers of at least
``COMPILE_MIN_GROUPS`` groups, on CUDA only when asked for (``compile=True`` or
``HSCALE_TORCH_COMPILE=1``); ``compile=False`` or ``HSCALE_TORCH_COMPILE=0`` turns it off,
``=1`` forces it for any layer. All the state (what was built, what was verified, why the path
is off) belongs to one ``FusedPath``, owned by one ``TorchBackend``: nothing here is
process-global but the warning's once-per-reason memory.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

from . import torch_aot

# Layers of at least COMPILE_MIN_GROUPS groups use the fused walk by default: it was the faster
# at every size measured, from 64 groups (4 x 256: 1 ms against the eager kernels' 23 ms) to
# 4096 x 4096, for rtn, hscale and hscale-block (docs/performance.md, the kernel race); smaller
# layers were not measured and stay eager. Blocks of about COMPILE_BLOCK_GROUPS groups (whole
# rows): large enough that the host's few hundred microseconds per call do not count, small
# enough that a block's float64 copy and its candidates' scales stay near the caches of a small
# machine.
COMPILE_MIN_GROUPS = 1 << 6
COMPILE_BLOCK_GROUPS = 1 << 14
ENV_SWITCH = "HSCALE_TORCH_COMPILE"
ENV_CACHE = "HSCALE_CACHE_DIR"

_WARNED = set()


def fused_cache_dir(torch_version: str | None = None) -> Path:
    """Where the fused walk's libraries are kept: ``$HSCALE_CACHE_DIR`` (else
    ``$XDG_CACHE_HOME/hscale``, else ``~/.cache/hscale``) / ``inductor`` / ``torch-<version>``;
    when the user set ``TORCHINDUCTOR_CACHE_DIR`` (to anything but inductor's default) and not
    ``HSCALE_CACHE_DIR``, ``$TORCHINDUCTOR_CACHE_DIR/hscale/torch-<version>``."""
    if torch_version is None:
        import torch
        torch_version = torch.__version__
    version = "torch-" + re.sub(r"[^A-Za-z0-9._+-]", "_", torch_version)
    root = os.environ.get(ENV_CACHE)
    if not root and _users_inductor_dir():
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "hscale" / version
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "hscale") if xdg else os.path.join(Path.home(), ".cache",
                                                                    "hscale")
    return Path(root) / "inductor" / version


def _users_inductor_dir() -> bool:
    """Whether ``TORCHINDUCTOR_CACHE_DIR`` names a directory of the user's: inductor itself
    sets it to its default (``/tmp/torchinductor_<user>``) the first time it looks a cache up,
    so that value does not count."""
    value = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not value:
        return False
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    return os.path.abspath(value) != os.path.abspath(default_cache_dir())


def package_path(variant, settings: dict) -> Path:
    """The package (.pt2) of ``variant`` built with ``settings`` in the kit's cache; its library
    is the same path with the suffix .so."""
    return fused_cache_dir() / (torch_aot.package_name(variant, settings) + ".pt2")


def compile_settings(device_type: str = "cpu") -> dict:
    """Inductor settings for exact kernels. CPU: no floating-point contraction, no unsafe math,
    single-threaded kernels (the caller runs blocks on worker threads), no precompiled header.
    CUDA: Triton told not to fuse a multiply and an add (``emulate_precision_casts`` turns off
    its ``enable_fp_fusion``) and, where this torch has the switch, not to flush float32
    subnormals (the float32 weights are widened in the kernel). Both: no bounds checks on the
    table lookups (every index is clamped to the ladder in the graph itself)."""
    settings = {"assert_indirect_indexing": False}
    if device_type == "cuda":
        from torch._inductor import config
        settings["emulate_precision_casts"] = True
        if hasattr(getattr(config, "eager_numerics", None), "disable_ftz"):
            settings["eager_numerics.disable_ftz"] = True
    else:
        # no precompiled header: a library is built once per machine, and making the two
        # headers (about 11 CPU s on a cold machine) costs more than they save the compiles
        # after them: 78 against 61 CPU s for a library (tools/aot_build_cost.py). The vector
        # instruction sets the processor reports are trusted (vec_isa_ok) instead of proved by
        # compiling and loading a probe library for each, 8-11 of those CPU s; a compiler that
        # cannot target one fails the build, and the eager kernels run, as for any failed build
        settings.update({"cpp.enable_floating_point_contract_flag": "off",
                         "cpp.enable_unsafe_math_opt_flag": False, "cpp.threads": 1,
                         "aot_inductor.precompile_headers": False, "cpp.vec_isa_ok": True})
    return settings


def say_once(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"hscale torch backend: {reason}; the eager kernels run instead "
                      f"(the same bits, slower). {ENV_SWITCH}=0 turns the fused walk off.",
                      RuntimeWarning, stacklevel=4)


def say_building(package: Path | None) -> None:
    """One line on stderr before a library is built (``package``; None: the CUDA walk compiled
    in the process): the first run on a machine spends a minute or more here with its progress
    bar standing still, and should say why."""
    if package is None:
        line = ("hscale torch backend: compiling the fused walk's CUDA kernels in this process "
                f"(tens of seconds; inductor's caches in {fused_cache_dir() / 'jit'})")
    else:
        line = (f"hscale torch backend: compiling the fused walk for this machine "
                f"({package.stem.rsplit('-', 1)[0]}; once per torch version, one to three "
                f"minutes of CPU; later runs load it from {package.parent})")
    try:  # a progress bar may be drawn on stderr: tqdm puts the line above it
        from tqdm import tqdm
    except ImportError:
        print(line, file=sys.stderr, flush=True)
    else:
        tqdm.write(line, file=sys.stderr)


class CompiledWalk:
    """The fused walk compiled ahead of time (``torch_aot``), one library per (objective, init,
    device): the weighted objective serves rtn, scale-only and hscale, the block objective
    hscale-block; built on the first use on a machine, loaded by later processes; guarded by the
    eager pipeline."""

    def __init__(self, path: "FusedPath"):
        self.path = path
        self.functions = {}
        self.built = set()  # variants this process compiled (not found on disk)
        self.verified = set()  # block keys checked against eager
        self.failed = {}  # block keys sent to the eager pipeline, with why

    def function(self, torch, variant):
        """The callable walk of ``variant`` (block objective, 4over6, device): on the CPU the
        library loaded from the cache directory, or built there first; on CUDA compiled in this
        process (``torch_aot.jit``)."""
        fn = self.functions.get(variant)
        if fn is None:
            make = self._library if variant[2] == "cpu" else self._jit
            fn = make(torch, variant)
            self.functions[variant] = fn
        return fn

    def _jit(self, torch, variant):
        say_building(None)
        self.built.add(variant)
        return torch_aot.jit(torch, variant, compile_settings(variant[2]),
                             fused_cache_dir() / "jit")

    def _library(self, torch, variant):
        settings = compile_settings(variant[2])
        workers = torch.get_num_threads()
        package = package_path(variant, settings)
        if package.exists() and package.with_suffix(".so").exists():
            try:
                return torch_aot.load(torch, package, workers)
            except OSError:  # a damaged file: built afresh below
                package.with_suffix(".so").unlink(missing_ok=True)
        say_building(package)
        if torch_aot.build(torch, variant, settings, package):
            self.built.add(variant)
        return torch_aot.load(torch, package, workers)

    def __call__(self, run, block, may_compile: bool):
        """The fused outputs of ``run``'s block ``(packed (8, C, R), chosen, initial (C, R),
        scored (4, C, R))``, or None where the caller must run the eager pipeline. Only a caller
        with ``may_compile`` (the main thread) builds a library and checks a new block shape."""
        if self.path.disabled:
            return None
        args = run.walk_args(block)
        key = run.walk_key(args)
        fresh = key not in self.verified
        if key in self.failed or (fresh and not may_compile):
            return None
        if min(key[3:6]) < 2:  # a size of 1 is outside the library's shapes
            self.failed[key] = f"block of shape {key[3:6]}: the library takes sizes >= 2"
            return None
        try:
            fn = self.function(run.torch, key[:3])
            got = fn(*args)
            if fresh:
                probe = run.walk_probe(block)
                got_probe = fn(*probe.walk_args(probe.whole_block()))
        except Exception as exc:  # no compiler, a torch without AOTInductor, ...
            reason = f"the fused walk failed: {type(exc).__name__}: {exc}"
            if self.verified:  # it worked for other shapes: only this one goes eager
                self.failed[key] = reason
            else:
                self.path.disabled = reason
                say_once(reason.splitlines()[0][:300])
            return None
        if fresh:
            where, difference = "the block", run.eager_difference(block, got)
            if difference is None:
                where = "its probe (ties, zero groups, the ladder's ends)"
                difference = probe.eager_difference(probe.whole_block(), got_probe)
            if difference is not None:
                self.path.disabled = ("the fused walk's bytes or group objectives differ from "
                                      f"the eager pipeline's on a block of shape {key[3:]}, "
                                      f"on {where}: {difference}")
                say_once(self.path.disabled)
                return None
            self.verified.add(key)
        return got[:4]


class FusedPath:
    """The compiled walk of one backend, and whether the fused path is on."""

    def __init__(self, option: bool | None, device_type: str = "cpu"):
        self.option = option  # None: by layer size (CPU); False: never; True: any layer
        self.device_type = device_type
        self.disabled = None  # reason, once the path was turned off
        self.walk = CompiledWalk(self)

    def switch(self) -> str:
        return os.environ.get(ENV_SWITCH, "")

    def wanted(self, groups: int) -> bool:
        env = self.switch()
        if self.option is False or env == "0" or self.disabled:
            return False
        if self.option is True or env == "1":
            return True
        return self.device_type == "cpu" and groups >= COMPILE_MIN_GROUPS

    def status(self) -> str:
        """One line on the fused path: its policy and, once used, its state."""
        env = self.switch()
        if self.disabled:
            return f"fused walk off ({self.disabled})"
        if self.option is False or env == "0":
            return (f"fused walk off ({ENV_SWITCH}=0)" if env == "0"
                    else "fused walk off (compile=False)")
        if self.option is True or env == "1":
            policy = "any layer"
        elif self.device_type == "cpu":
            policy = f"layers of >= {COMPILE_MIN_GROUPS} groups"
        else:
            policy = f"no layer unless compile=True or {ENV_SWITCH}=1"
        how = "AOTInductor" if self.device_type == "cpu" else "torch.compile"
        return (f"fused walk ({how}) for {policy}, {len(self.walk.verified)} block "
                f"shape(s) verified, cache {fused_cache_dir()}")
