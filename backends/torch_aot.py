"""The fused walk compiled ahead of time: ``torch.export`` of ``torch_walk.walk`` (the block's
rows, groups per row and window length dynamic) compiled by AOTInductor into a shared library
kept in the kit's cache directory, so that a process loads it in milliseconds instead of
tracing the walk again (``torch.compile`` re-traces every process, tens of seconds on two busy
cores).

On the CPU the library is run through the AOTInductor runtime's C interface
(``torch/csrc/inductor/aoti_runtime/interface.h``: ``AOTInductorModelContainerCreateWithDevice``,
``AOTInductorModelContainerRun``) by ``ctypes``, which releases the GIL during the call, so that
the backend's worker threads run blocks in parallel (torch's own Python runner holds the GIL for
the whole run); the tensors cross as ``AtenTensorHandle``s (``torch._C._aoti``'s helpers). A
container holds one model instance per worker thread. On CUDA the package is run by
``torch._inductor.package.load_package`` (one thread).

A package's file name carries a digest of the walk's source and this module's (the graph, its
outputs and how it is exported), the variant and the inductor settings, so that a change of any of them compiles afresh (the directory already carries the
torch version: ``torch_compile.fused_cache_dir``). Two processes that need the same package at
once: one compiles it (inductor in a scratch directory of its own), the other waits on a lock
beside the package and loads it; the files are renamed into place when complete.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import tempfile
import warnings
import weakref
import zipfile
from pathlib import Path

from . import torch_walk

INPUTS = ("w", "h", "scales", "recips", "deltas", "tops")
# packed, chosen, initial, the group objectives and the three arrays torch_walk.walk keeps as
# outputs
OUTPUTS = 7


def package_name(variant, settings: dict) -> str:
    """``<name>-<digest>``: the variant and a digest of everything the library is made of."""
    block_objective, four_over_six, device = variant
    name = (f"walk-{'block' if block_objective else 'weighted'}-"
            f"{'4over6' if four_over_six else 'maxabs'}-{device}")
    # the walk's graph and how it is exported (its inputs, outputs and dynamic sizes)
    source = Path(torch_walk.__file__).read_bytes() + Path(__file__).read_bytes()
    digest = hashlib.sha256(source + repr((variant, sorted(settings.items()), OUTPUTS)).encode())
    return f"{name}-{digest.hexdigest()[:16]}"


def build(torch, variant, settings: dict, package: Path) -> bool:
    """Export and compile the walk into ``package`` (a .pt2) and its library (``package`` with
    the suffix .so); False where another process built them while this one waited. Inductor works in a scratch directory of its own (no file of it is shared
    with another process compiling at the same time), the two files are renamed into place
    (library first: a reader that sees the package sees its library), and a lock beside them
    makes a second process wait for the first instead of compiling the same again."""
    package.parent.mkdir(parents=True, exist_ok=True)
    with _lock(package.with_suffix(".lock")):
        if package.exists() and package.with_suffix(".so").exists():
            return False  # another process built it while this one waited
        with tempfile.TemporaryDirectory(dir=package.parent, prefix=".build-") as tmp:
            with _inductor_scratch(Path(tmp) / "inductor"), warnings.catch_warnings():
                # torch's own export pickles its tree specs through a deprecated isinstance
                # check (torch.utils._pytree's LeafSpec): its FutureWarning is no user's concern
                warnings.filterwarnings("ignore", category=FutureWarning,
                                        message=r".*LeafSpec.*")
                program = export(torch, variant)
                staged = Path(tmp) / package.name
                torch._inductor.aoti_compile_and_package(program, package_path=str(staged),
                                                         inductor_configs=dict(settings))
            library = Path(tmp) / (package.stem + ".so")
            with zipfile.ZipFile(staged) as archive:
                member = next(n for n in archive.namelist() if n.endswith(".so"))
                library.write_bytes(archive.read(member))
            os.replace(library, package.with_suffix(".so"))
            os.replace(staged, package)
    return True


def export(torch, variant):
    """``torch.export`` of the walk of ``variant``, its rows, groups and window dynamic."""
    block_objective, four_over_six, device = variant

    class FusedWalk(torch.nn.Module):
        def forward(self, w, h, scales, recips, deltas, tops):
            return torch_walk.walk(w, h, scales, recips, deltas, tops, block_objective,
                                   four_over_six)

    rows = torch.export.Dim("rows", min=2)
    groups = torch.export.Dim("groups", min=2)
    window = torch.export.Dim("window", min=2)
    dynamic = {"w": {0: rows, 1: groups}, "h": {0: groups}, "scales": None, "recips": None,
               "deltas": {0: window}, "tops": None}
    return torch.export.export(FusedWalk(), example_args(torch, block_objective, device),
                               dynamic_shapes=dynamic)


@contextlib.contextmanager
def _inductor_scratch(directory: Path, clear: bool = True):
    """``TORCHINDUCTOR_CACHE_DIR`` pointed at ``directory`` for the calls inside (inductor
    memoises paths under it: cleared on the way in and out where ``clear``; a directory that
    stays the same in a process need not be), restored after."""
    from torch._inductor.utils import clear_caches
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    if clear:
        clear_caches()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
        if clear:
            clear_caches()


@contextlib.contextmanager
def _lock(path: Path):
    """An exclusive lock on ``path`` (flock; none where the platform has no fcntl)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def example_args(torch, block_objective: bool, device):
    """Inputs of the walk's types, every dynamic size 2 or 3 (export specialises sizes 0 and 1,
    and a size equal to another would be assumed equal)."""
    rows, groups, window = 3, 2, 4
    f64 = {"dtype": torch.float64, "device": device}
    w = torch.zeros((rows, groups, torch_walk.GROUP), dtype=torch.float32, device=device)
    h = (torch.ones((groups, torch_walk.GROUP, torch_walk.GROUP), **f64) if block_objective
         else torch.ones((groups, torch_walk.GROUP), **f64))
    scales = torch.ones(127, **f64)
    return (w, h, scales, scales.clone(), torch.zeros(window, dtype=torch.int64, device=device),
            torch.ones(2, **f64))


def load(torch, package: Path, models: int):
    """A callable ``fn(w, h, scales, recips, deltas, tops) -> outputs`` running the CPU
    library."""
    return LibraryRunner(torch, package.with_suffix(".so"), models)


def jit(torch, variant, settings: dict, cache: Path):
    """The walk of ``variant`` compiled by ``torch.compile`` (CUDA), a callable like ``load``'s:
    the first call compiles (inductor's caches in ``cache``), a new size may compile again."""
    block_objective, four_over_six, _ = variant

    def walk(w, h, scales, recips, deltas, tops):
        return torch_walk.walk(w, h, scales, recips, deltas, tops, block_objective,
                               four_over_six)

    compiled = torch.compile(walk, dynamic=True, fullgraph=True)

    def run(*args):
        # inductor reads its settings and its cache directory when it compiles, on any call
        with torch._inductor.config.patch(dict(settings)), _inductor_scratch(cache, clear=False):
            return compiled(*args)
    return run


class LibraryRunner:
    """The AOTInductor library of one package, run through its C interface with the GIL
    released; ``models`` instances may run at once."""

    def __init__(self, torch, library: Path, models: int):
        self.torch = torch
        self.path = library
        self.library = ctypes.CDLL(str(library))
        self.handle = ctypes.c_void_p()
        create = self.library.AOTInductorModelContainerCreateWithDevice
        create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_char_p,
                           ctypes.c_char_p]
        _check(create(ctypes.byref(self.handle), max(1, models), b"cpu", None), "create")
        self.run = self.library.AOTInductorModelContainerRun
        self.run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
        delete = self.library.AOTInductorModelContainerDelete
        delete.argtypes = [ctypes.c_void_p]
        # the container freed with the runner (not in __del__: at interpreter exit ctypes may
        # already be gone)
        weakref.finalize(self, delete, self.handle.value)

    def __call__(self, *args):
        aoti = self.torch._C._aoti
        # the library assumes the example's (contiguous) strides; the handles are stolen by the
        # run, which frees them
        handles = [_capsule_pointer(c, None) for c in aoti.unsafe_alloc_void_ptrs_from_tensors(
            [a.contiguous() for a in args])]
        inputs = (ctypes.c_void_p * len(handles))(*handles)
        outputs = (ctypes.c_void_p * OUTPUTS)()
        _check(self.run(self.handle, inputs, len(handles), outputs, OUTPUTS, None, None), "run")
        return aoti.alloc_tensors_by_stealing_from_void_ptrs(
            [_capsule_new(outputs[i], None, None) for i in range(OUTPUTS)])


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"AOTInductor {what} failed (error {code})")


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
