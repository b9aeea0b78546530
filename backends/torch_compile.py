"""The fused path of the torch backends: ``torch.compile`` of the fused walk
(``torch_walk.walk``: one graph per block, inductor's C++ on the CPU, Triton on CUDA), its
compilation cached on disk, trusted only after checking it against the eager pipeline.

Exactness. Inductor is told not to contract floating point (``-ffp-contract=off``, no unsafe
math); its vectorised C++ applies one IEEE operation per torch op (``at::vec`` operators), which
tests/backends/test_fused_walk.py checks by reading the compiled kernel's machine code for fused
multiply-adds. On CUDA, Triton is told not to fuse a multiply and an add
(``emulate_precision_casts``), and where this torch has the switch not to flush subnormals. Each
new block shape (rows, groups per row, dtype, method, init, window) is checked once against the
eager pipeline (``torch_tensor.TensorRun.eager_block``) on the real block and on a probe of the
same shape (exact E2M1 ties and their one-ulp neighbours, zero groups, -0.0, saturation, the
window's ends at bytes 0x01 and 0x7E, h with zeros; ``walk_probe``). A mismatch turns the fused
path off for the backend that owns it; so does a failure to compile before any shape has worked
(no C++ compiler, old torch); a later failure (one shape) sends only that shape to the eager path.
Either way the backend says so once (a ``RuntimeWarning``) and in ``FusedPath.status()``.

Shapes. The graph is compiled with the block's rows, groups per row and window length dynamic
(``maybe_mark_dynamic``; duck sizing off, so that equal sizes are not assumed equal), so one
compilation serves every layer shape of a model and every K; blocks are float32 (bfloat16 and
float16 widened exactly first). So there are four graphs: the weighted objective (rtn,
scale-only, hscale) and the block objective (hscale-block), each with the max-abs or the 4over6
initial byte.

The disk cache. Inductor's caches (the FX graph cache, the AOT autograd cache, the compiled
C++ and, on CUDA, Triton's kernels and the autotune results) are kept under
``fused_cache_dir()``: ``$HSCALE_CACHE_DIR/inductor/torch-<version>`` (default
``$XDG_CACHE_HOME/hscale`` or ``~/.cache/hscale``), so a torch upgrade compiles afresh in its own
directory and only the first run on a machine pays for the compilation (a later process still
traces the function, a few seconds). A user's own ``TORCHINDUCTOR_CACHE_DIR``, when
``HSCALE_CACHE_DIR`` is not set, is used as it is. The directory is set only around the calls
that may compile, and restored after.

Policy (``FusedPath``): the fused walk runs on the CPU for layers of at least
``COMPILE_MIN_GROUPS`` groups, on CUDA only when asked for (``compile=True``; untested on a GPU
in this form); ``compile=False`` or ``HSCALE_TORCH_COMPILE=0`` turns it off, ``=1`` forces it
for any layer. All the state (what compiled, what was verified, why the path is off) belongs to
one ``FusedPath``, owned by one ``TorchBackend``: nothing here is process-global but the
warning's once-per-reason memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from pathlib import Path

from . import torch_walk

# Layers of at least COMPILE_MIN_GROUPS groups use the fused walk by default, in blocks of about
# COMPILE_BLOCK_GROUPS groups (whole rows): large enough that the host's few hundred
# microseconds per call do not count, small enough that a block's float64 copy and its
# candidates' scales stay near the caches of a small machine.
COMPILE_MIN_GROUPS = 1 << 12
COMPILE_BLOCK_GROUPS = 1 << 14
ENV_SWITCH = "HSCALE_TORCH_COMPILE"
ENV_CACHE = "HSCALE_CACHE_DIR"

_WARNED = set()


def fused_cache_dir(torch_version: str | None = None) -> Path | None:
    """Where inductor keeps the fused walk's compilation: ``$HSCALE_CACHE_DIR`` (else
    ``$XDG_CACHE_HOME/hscale``, else ``~/.cache/hscale``) / ``inductor`` / ``torch-<version>``;
    None when the user set ``TORCHINDUCTOR_CACHE_DIR`` (to anything but inductor's default) and
    not ``HSCALE_CACHE_DIR``: theirs is used."""
    root = os.environ.get(ENV_CACHE)
    if not root:
        if _users_inductor_dir():
            return None
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "hscale") if xdg else os.path.join(Path.home(), ".cache",
                                                                    "hscale")
    if torch_version is None:
        import torch
        torch_version = torch.__version__
    return Path(root) / "inductor" / ("torch-" + re.sub(r"[^A-Za-z0-9._+-]", "_", torch_version))


def _users_inductor_dir() -> bool:
    """Whether ``TORCHINDUCTOR_CACHE_DIR`` names a directory of the user's: inductor itself
    sets it to its default (``/tmp/torchinductor_<user>``) the first time it looks a cache up,
    so that value does not count."""
    value = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not value:
        return False
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    return os.path.abspath(value) != os.path.abspath(default_cache_dir())


@contextlib.contextmanager
def compile_cache():
    """Inductor's cache directory set to ``fused_cache_dir()`` for the calls inside, restored
    after (inductor reads ``TORCHINDUCTOR_CACHE_DIR`` when it looks a cache up)."""
    directory = fused_cache_dir()
    if directory is None:
        yield None
        return
    directory.mkdir(parents=True, exist_ok=True)
    from torch._inductor.utils import clear_caches
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    clear_caches()  # inductor memoises paths under the directory
    try:
        yield directory
    finally:
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
        clear_caches()


def inductor_config(device_type: str = "cpu"):
    """Inductor settings for exact kernels. CPU: no floating-point contraction, no unsafe math,
    single-threaded kernels (the caller runs blocks on worker threads) and the C++ wrapper,
    which releases the GIL while the graph runs. CUDA: Triton told not to fuse a multiply and
    an add (``emulate_precision_casts`` turns off its ``enable_fp_fusion``) and, where this
    torch has the switch, not to flush float32 subnormals (the float32 weights are widened in
    the kernel). Both: no bounds checks on the table lookups (every index is clamped to the
    ladder in the graph itself)."""
    import torch._inductor.config as config
    settings = {"assert_indirect_indexing": False}
    if device_type == "cuda":
        settings["emulate_precision_casts"] = True
        if hasattr(getattr(config, "eager_numerics", None), "disable_ftz"):
            settings["eager_numerics.disable_ftz"] = True
    else:
        settings.update({"cpp.enable_floating_point_contract_flag": "off",
                         "cpp.enable_unsafe_math_opt_flag": False,
                         "cpp.threads": 1, "cpp_wrapper": True})
    return config.patch(settings)


@contextlib.contextmanager
def tracing_config():
    """Dynamo settings while a graph may be traced: no duck sizing (a block whose rows equal
    its groups per row would otherwise be compiled for that equality only)."""
    import torch.fx.experimental._config as fx_config
    with fx_config.patch(use_duck_shape=False):
        yield


def say_once(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"hscale torch backend: {reason}; the eager kernels run instead "
                      f"(the same bits, slower). {ENV_SWITCH}=0 turns the fused walk off.",
                      RuntimeWarning, stacklevel=4)


class CompiledWalk:
    """``torch.compile`` of the fused walk, one function per (objective, init, device): the
    weighted objective serves rtn, scale-only and hscale, the block objective hscale-block;
    guarded by the eager pipeline."""

    def __init__(self, path: "FusedPath"):
        self.path = path
        self.functions = {}
        self.verified = set()  # block keys checked against eager
        self.failed = {}  # block keys that did not compile (e.g. past dynamo's recompile limit)

    def function(self, torch, variant):
        fn = self.functions.get(variant)
        if fn is None:
            block_objective, four_over_six, device = variant
            name = (f"hscale_walk_{'block' if block_objective else 'weighted'}_"
                    f"{'4over6' if four_over_six else 'maxabs'}_{device}")
            walk = torch_walk.make_walk(block_objective, four_over_six, name)
            fn = self.functions[variant] = torch.compile(walk, dynamic=False, fullgraph=True)
        return fn

    def __call__(self, run, block, may_compile: bool):
        """The fused outputs of ``run``'s block ``(packed (8, C, R), chosen, initial (C, R))``, or
        None where the caller must run the eager pipeline. Only a caller with ``may_compile``
        (the main thread) compiles and verifies a new block shape."""
        if self.path.disabled:
            return None
        torch = run.torch
        args = run.walk_args(block)
        key = run.walk_key(args)
        fresh = key not in self.verified
        if fresh and (not may_compile or key in self.failed):
            return None
        try:
            fn = self.function(torch, key[:3])
            with (compile_cache() if fresh else contextlib.nullcontext()), tracing_config():
                got = _call(torch, fn, args)
                if fresh:
                    probe = run.walk_probe(block)
                    got_probe = _call(torch, fn, probe.walk_args(probe.whole_block()))
        except Exception as exc:  # no compiler, unsupported torch, too many shapes, ...
            reason = f"torch.compile of the fused walk failed: {type(exc).__name__}: {exc}"
            if self.verified:  # it worked for other shapes: only this one goes eager
                self.failed[key] = reason
            else:
                self.path.disabled = reason
            say_once(reason.splitlines()[0][:300])
            return None
        if fresh:
            if not (run.matches_eager(block, got) and probe.matches_eager(probe.whole_block(),
                                                                           got_probe)):
                self.path.disabled = ("the fused walk's bytes differ from the eager pipeline's "
                                      f"on a block of shape {key[3:]}")
                say_once(self.path.disabled)
                return None
            self.verified.add(key)
        return got[:3]


def _call(torch, fn, args):
    """The compiled walk with the block's rows and groups per row, h's groups and the window's
    length dynamic: one graph for every layer shape and window."""
    w, h, deltas = args[0], args[1], args[4]
    torch._dynamo.maybe_mark_dynamic(w, 0)
    torch._dynamo.maybe_mark_dynamic(w, 1)
    torch._dynamo.maybe_mark_dynamic(h, 0)
    torch._dynamo.maybe_mark_dynamic(deltas, 0)
    return fn(*args)


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
            policy = "no layer unless compile=True"
        cache = fused_cache_dir()
        return (f"fused walk (torch.compile) for {policy}, {len(self.walk.verified)} block "
                f"shape(s) verified, cache {cache if cache else '$TORCHINDUCTOR_CACHE_DIR'}")
