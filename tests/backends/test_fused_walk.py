"""The fused H-Scale walk of the torch backend (backends/torch_walk.py, compiled and checked by
backends/torch_compile.py) against the reference, bit for bit, on the groups where a wrong
rounding, a contracted multiply-add or a reordered sum would show: exact E2M1 ties, zero groups
(+0 and -0.0), E4M3-subnormal scales, windows clipped at bytes 0x01 and 0x7E, saturation, fp32
subnormal weights, h with zeros. Three routes: the walk's torch ops run eagerly (its arithmetic,
no compiler), the walk compiled on the CPU through the backend (two graphs for the session:
the weighted objective, which serves rtn, scale-only and hscale, and the block objective of
hscale-block; inductor's disk cache makes later sessions cheap), and its guards (a compile
refused, a compiled function that differs from the eager pipeline). The compiled kernels'
machine code is read for fused multiply-adds, and a second process must find the compilation
in the disk cache. The CUDA form (Triton kernels compiled in the process by torch.compile) runs
the same hard groups where a GPU is present (tools/gpu_fused_session.sh on a lent one); without
one those tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.builders import L
from hscale.reference import quantize as reference_quantize
from hscale.reference.e4m3 import encode_e4m3

from helpers.backend_checks import S_G, assert_identical, assert_objectives_identical, hard_layer

torch = pytest.importorskip("torch")

from hscale.backends import torch_compile, torch_walk  # noqa: E402
from hscale.backends.torch_backend import TorchBackend  # noqa: E402
from hscale.backends.torch_tensor import walk_blocks  # noqa: E402


@pytest.fixture(autouse=True)
def fused_walk_switch(monkeypatch):
    """The fused walk as a user gets it: tests/conftest.py turns it off for the other tests."""
    monkeypatch.delenv(torch_compile.ENV_SWITCH, raising=False)


METHODS = ("rtn", "scale-only", "hscale", "hscale-block")


def second_argument(method, h, blocks):
    return blocks if method == "hscale-block" else h


# -- the walk's arithmetic, no compiler -----------------------------------------------------------

def test_e4m3_bytes_by_binades_equal_the_reference_rounding():
    """``torch_walk.e4m3_bytes`` (binade counting, no frexp) against the reference's
    ``encode_e4m3`` on every ladder value, every rounding midpoint, their one-ulp neighbours,
    values below the ladder and above 448."""
    ladder = np.array([L(b) for b in range(1, 127)])
    midpoints = (ladder[1:] + ladder[:-1]) / 2
    values = np.concatenate([ladder, midpoints, [0.0, 2.0 ** -12, 2.0 ** -10, 464.0, 480.0,
                                                 1e6, 2.0 ** 300, 2.0 ** -300]])
    values = np.concatenate([values, np.nextafter(values, 0), np.nextafter(values, np.inf)])
    got = torch_walk.e4m3_bytes(torch, torch.from_numpy(values)).numpy()
    np.testing.assert_array_equal(got, encode_e4m3(values).astype(np.int64))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("init", ["maxabs", "4over6"])
def test_walk_run_eagerly_equals_reference(method, init):
    """The walk's torch ops without torch.compile (the backend's eager pipeline never calls
    them): the reciprocal search, the binade byte, the packing, on the hard layer; and the
    group objectives it hands back for the report, against the old route's rescoring."""
    from hscale.evaluation.quality import score_objectives
    w, h, blocks = hard_layer()
    backend = TorchBackend("cpu", compile=True)
    eager = torch_walk.make_walk(method == "hscale-block", init == "4over6")
    backend.fused.walk.functions = _EveryVariant(eager)
    for options in ({"global_scale": S_G}, {"global_scale": S_G, "K": 5, "U": 1}, {}):
        expected = reference_quantize(w, second_argument(method, h, blocks), method=method,
                                      init=init, **options)
        got = backend.quantize(w, second_argument(method, h, blocks), method=method, init=init,
                               objectives=True, objectives_h=h, **options)
        assert_identical(expected, got, f"eager walk {method}/{init} {options}")
        assert_objectives_identical(score_objectives(w, expected, h), got.objectives,
                                    f"eager walk {method}/{init} {options}")
    assert backend.fused.disabled is None
    assert backend.fused.walk.verified


class _EveryVariant(dict):
    """``CompiledWalk.functions`` answering every variant with one uncompiled function."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def get(self, variant, default=None):
        return self.fn


def test_block_keys_name_the_shapes_the_walk_is_called_with():
    """``TensorRun.block_key`` (which blocks run first, on the main thread) equals the key of
    the arguments the walk gets, for every method and a window of one."""
    from hscale.backends.torch_backend import TorchQuantizer
    from hscale.reference.quantize import Options
    from hscale.backends.torch_tensor import TensorRun
    w, h, blocks = hard_layer()
    quantizer = TorchQuantizer(TorchBackend("cpu"))
    for method in METHODS:
        for K, U in ((16, 6), (1, 0)):
            run = TensorRun(quantizer, torch.from_numpy(w), second_argument(method, h, blocks)
                            if method in ("hscale", "hscale-block") else None,
                            Options(method, "maxabs", K, U), S_G, codes=False)
            for block in walk_blocks(12, 8, 32):
                assert run.block_key(block) == run.walk_key(run.walk_args(block))


def test_walk_blocks_cover_the_rows_without_single_row_blocks():
    for rows, groups, block in [(4096, 256, 16384), (576, 36, 16384), (577, 36, 256),
                                (3, 36, 36), (5, 8, 8), (1, 8, 8), (7, 40000, 16384)]:
        blocks = walk_blocks(rows, groups, block)
        covered = [r for r0, r1, _, _ in blocks for r in range(r0, r1)]
        assert covered == list(range(rows)) or groups > block, (rows, groups, block)
        if rows > 1 and groups <= block:
            assert min(r1 - r0 for r0, r1, _, _ in blocks) >= 2, (rows, groups, block, blocks)
            step = max(1, block // groups)  # plan_blocks' rows per block
            assert max(r1 - r0 for r0, r1, _, _ in blocks) <= max(step, 2) + 1, blocks


# -- the compiled walk (a library per objective and init, built once per machine) -----------------
# The default tier builds one library, the weighted objective's with the max-abs init (rtn,
# scale-only and hscale; about a minute of CPU on a cold cache, milliseconds to load after); the
# other three (hscale-block's block objective, the 4over6 init) and two processes compiling at
# once are behind ``extended`` (one to three minutes each on a cold cache).

@pytest.fixture(scope="module")
def fused():
    """A CPU backend with the fused walk forced on for any layer size."""
    return TorchBackend("cpu", compile=True)


def _compiled_equals_reference(fused, method, init="maxabs"):
    w, h, blocks = hard_layer()
    second = second_argument(method, h, blocks)
    for options in ({"global_scale": S_G}, {"global_scale": S_G, "K": 24, "U": 10}, {}):
        assert_identical(reference_quantize(w, second, method=method, init=init, **options),
                         fused.quantize(w, second, method=method, init=init, **options),
                         f"compiled walk {method}/{init} {options}")
    wb = w.astype(ml_dtypes.bfloat16)  # widened to float32 for the one graph
    assert_identical(reference_quantize(wb, second, method=method, init=init),
                     fused.quantize(wb, second, method=method, init=init),
                     f"compiled walk {method}/{init} bf16")
    assert fused.fused.disabled is None, fused.fused.disabled
    assert any(key[7] == method and key[1] == (init == "4over6")
               for key in fused.fused.walk.verified), "the walk did not run"


@pytest.mark.parametrize("method", ["rtn", "scale-only", "hscale"])
def test_compiled_walk_equals_reference_on_hard_groups(fused, method):
    _compiled_equals_reference(fused, method)


@pytest.mark.extended
@pytest.mark.parametrize("method,init", [("hscale-block", "maxabs"), ("hscale", "4over6"),
                                         ("hscale-block", "4over6")])
def test_the_other_compiled_walks_equal_reference_on_hard_groups(fused, method, init):
    _compiled_equals_reference(fused, method, init)


def _compiled_objectives_equal_the_rescoring(fused, method):
    from hscale.evaluation.quality import score_objectives
    w, h, blocks = hard_layer()
    second = second_argument(method, h, blocks)
    expected = score_objectives(w, reference_quantize(w, second, method=method,
                                                      global_scale=S_G), h)
    got = fused.quantize(w, second, method=method, global_scale=S_G, objectives=True,
                         objectives_h=h)
    assert_objectives_identical(expected, got.objectives, f"compiled walk {method}")
    assert fused.fused.disabled is None, fused.fused.disabled
    assert any(key[7] == method for key in fused.fused.walk.verified), "the walk did not run"


@pytest.mark.parametrize("method", ["rtn", "scale-only", "hscale"])
def test_compiled_walk_hands_back_the_reference_objectives(fused, method):
    """The group objectives at the chosen and initial byte the fused walk hands back for the
    report (h = 1 from its codes' quotient and its search's residuals, h from its search), bit
    for bit the old route's rescoring of the reference's bytes on the hard layer."""
    _compiled_objectives_equal_the_rescoring(fused, method)


@pytest.mark.extended
def test_the_block_walk_hands_back_the_reference_objectives(fused):
    _compiled_objectives_equal_the_rescoring(fused, "hscale-block")


@pytest.fixture(scope="module")
def fused_cuda():
    """A CUDA backend with the fused walk forced on (its Triton form)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the fused walk's Triton form runs only on a GPU")
    return TorchBackend("cuda:0", compile=True)


@pytest.mark.parametrize("method,init", [("rtn", "maxabs"), ("scale-only", "maxabs"),
                                         ("hscale", "maxabs"), ("hscale-block", "maxabs"),
                                         ("hscale", "4over6")])
def test_cuda_compiled_walk_equals_reference_on_hard_groups(fused_cuda, method, init):
    """The Triton kernels (no multiply-add fusion, no float32 flush to zero) bit for bit the
    reference on the hard groups, as the CPU library is."""
    _compiled_equals_reference(fused_cuda, method, init)


@pytest.mark.parametrize("method", ["hscale", "hscale-block"])
def test_cuda_compiled_walk_hands_back_the_reference_objectives(fused_cuda, method):
    _compiled_objectives_equal_the_rescoring(fused_cuda, method)


def test_compiled_walk_on_device_and_row_blocks(fused, monkeypatch):
    """quantize_on_device (tensors in and out, codes on request) and a layer split into
    several blocks of rows on the worker threads (one verification per block shape)."""
    from hscale.backends import torch_backend
    from hscale.backends.torch_tensor import to_host
    w, h, _ = hard_layer(rows=42, groups=8)
    expected = reference_quantize(w, h, method="hscale")
    monkeypatch.setattr(torch_backend, "COMPILE_BLOCK_GROUPS", 64)  # 6 blocks of 7 rows
    backend = TorchBackend("cpu", compile=True)
    backend.fused = fused.fused  # the session's compiled functions
    assert backend.layer_quantizer(w.size // 16).use_compile
    saved = torch.get_num_threads()
    torch.set_num_threads(3)  # three worker threads, whatever the session's count
    try:
        got = to_host(backend.quantize_on_device(torch.from_numpy(w), h, codes=True))
    finally:
        torch.set_num_threads(saved)
    assert_identical(expected, got, "on device")
    assert any(key[3:5] == (7, 8) for key in fused.fused.walk.verified)


def test_compiled_kernels_have_no_fused_multiply_add(fused):
    """Every compiled walk library in the kit's cache, disassembled: no vfmadd / vfmsub / vfnmadd /
    vfnmsub (HSCALE-OBJ-1 forbids contracting ``h*(d*d)`` into the pairwise sum); the detector
    itself finds the FMA that gcc makes of ``a*b + c`` under -ffp-contract=fast."""
    objdump, gcc = shutil.which("objdump"), shutil.which("gcc")
    if objdump is None or gcc is None:
        pytest.skip("objdump and gcc (binutils, the compiler inductor itself needs) are needed")
    w, h, _ = hard_layer()
    fused.quantize(w, h)
    directory = torch_compile.fused_cache_dir()
    libraries = sorted(directory.glob("walk-*.so"))  # with -m extended, the others' too
    assert {fn.path for fn in fused.fused.walk.functions.values()} <= set(libraries), libraries
    assert "weighted" in {p.name.split("-")[1] for p in libraries}, libraries
    for path in libraries:
        assert _fma_count(objdump, path) == 0, path
    assert _fma_count(objdump, _compiled_snippet(gcc, directory.parent, "fast")) > 0
    assert _fma_count(objdump, _compiled_snippet(gcc, directory.parent, "off")) == 0


def _fma_count(objdump, path) -> int:
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], check=True,
                          capture_output=True, text=True).stdout
    return sum(1 for line in text.splitlines()
               if any(f"\t{op}" in line for op in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")))


def _compiled_snippet(gcc, directory, contract):
    source = directory / "fma_probe.c"
    source.write_text("double f(const double *a, const double *b, const double *c, int n) {\n"
                      "  double s = 0; for (int i = 0; i < n; i++) s += a[i] * b[i] + c[i];\n"
                      "  return s; }\n")
    out = directory / f"fma_probe_{contract}.o"
    subprocess.run([gcc, "-O3", "-march=haswell", f"-ffp-contract={contract}", "-c",
                    str(source), "-o", str(out)], check=True)
    return out


def test_a_second_process_loads_the_compilation_from_the_disk_cache(fused, tmp_path):
    """After this session built (or loaded) the weighted walk's library, a fresh process
    quantizing with it loads the library from the kit's cache and compiles nothing."""
    w, h, _ = hard_layer()
    fused.quantize(w, h)
    script = tmp_path / "second.py"
    script.write_text(
        "import json, numpy as np\n"
        "from hscale.backends.torch_backend import TorchBackend\n"
        "w = np.load('w.npy'); h = np.load('h.npy')\n"
        "b = TorchBackend('cpu', compile=True)\n"
        "b.quantize(w, h)\n"
        "print(json.dumps({'built': len(b.fused.walk.built),\n"
        "                  'loaded': len(b.fused.walk.functions),\n"
        "                  'verified': len(b.fused.walk.verified),\n"
        "                  'off': b.fused.disabled}))\n")
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "h.npy", h)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["off"] is None and seen["verified"] >= 1, seen
    assert seen["built"] == 0 and seen["loaded"] == 1, seen  # loaded, not compiled again


SECOND_COMPILER = """
import json, sys, numpy as np
from hscale.backends.torch_backend import TorchBackend
w = np.load(sys.argv[1]); h = np.load(sys.argv[2])
b = TorchBackend("cpu", compile=True)
q = b.quantize(w, h)
np.save(sys.argv[3], q.packed)
print(json.dumps({"built": len(b.fused.walk.built), "verified": len(b.fused.walk.verified),
                  "off": b.fused.disabled}))
"""


@pytest.mark.extended
def test_two_processes_compiling_at_once_leave_one_library(monkeypatch, tmp_path):
    """Two fresh processes need the weighted library of an empty cache at the same moment: one
    compiles it, the other waits on the lock and loads it (it does not compile it again); both
    run the fused walk and give the reference's bytes; the cache holds one package, its library
    and the lock, no scratch left behind."""
    w, h, _ = hard_layer()
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "h.npy", h)
    (tmp_path / "run.py").write_text(SECOND_COMPILER)
    monkeypatch.setenv("HSCALE_CACHE_DIR", str(tmp_path / "cache"))
    env = dict(os.environ)
    runs = [subprocess.Popen([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "w.npy"),
                              str(tmp_path / "h.npy"), str(tmp_path / f"packed{k}.npy")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for k in range(2)]
    seen = []
    for run in runs:
        out, err = run.communicate(timeout=1800)
        assert run.returncode == 0, err[-2000:]
        seen.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(s["built"] for s in seen) == [0, 1], seen  # one compiled, one loaded
    assert all(s["off"] is None and s["verified"] >= 1 for s in seen), seen
    expected = reference_quantize(w, h).packed
    for k in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"packed{k}.npy"), expected)
    directory = torch_compile.fused_cache_dir()
    names = sorted(p.suffix for p in directory.iterdir())
    assert names == [".lock", ".pt2", ".so"], sorted(directory.iterdir())


def _fallback_warnings(backend, what) -> list:
    """The hard layer quantized twice by ``backend``, each time to the reference's bytes; the
    fused walk's warnings the two calls gave."""
    w, h, _ = hard_layer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert_identical(reference_quantize(w, h), backend.quantize(w, h), what)
    return [str(c.message) for c in caught if issubclass(c.category, RuntimeWarning)
            and "fused walk" in str(c.message)]


def test_a_library_that_does_not_load_is_built_again(monkeypatch, tmp_path, capfd):
    """A damaged library in the cache (a truncated file) is not trusted: the walk is built
    again (here the build is refused, as on a machine without a compiler), the layer goes to
    the eager path with the reference's bytes, and the backend says so once. Before the build
    one line on stderr says what the wait is for (a first run's progress bar stands still for a
    minute or more)."""
    from hscale.backends import torch_aot
    monkeypatch.setenv("HSCALE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch_compile, "_WARNED", set())
    package = torch_compile.package_path((False, False, "cpu"),
                                         torch_compile.compile_settings("cpu"))
    package.parent.mkdir(parents=True)
    package.write_bytes(b"PK\x03\x04 truncated")
    package.with_suffix(".so").write_bytes(b"\x7fELF truncated")
    builds = []

    def refuse(torch_, variant, settings, path):
        builds.append((variant, path))
        raise RuntimeError("no C++ compiler on this machine (test)")

    monkeypatch.setattr(torch_aot, "build", refuse)
    backend = TorchBackend("cpu", compile=True)
    said = _fallback_warnings(backend, "damaged")
    assert builds == [((False, False, "cpu"), package)]  # the damaged one was not loaded
    assert not package.with_suffix(".so").exists()  # nor kept for build to find and trust
    assert len(said) == 1 and "no C++ compiler" in said[0], said
    assert "no C++ compiler" in backend.fused.disabled
    notices = [line for line in capfd.readouterr().err.splitlines() if "compiling" in line]
    assert notices == [f"hscale torch backend: compiling the fused walk for this machine "
                       f"(walk-weighted-maxabs-cpu; once per torch version, one to three "
                       f"minutes of CPU; later runs load it from {package.parent})"], notices


def test_a_package_is_named_by_the_walks_outputs(monkeypatch):
    """A walk with other outputs (the group objectives added for the report) is another
    package: one built for the old outputs is never loaded for the new."""
    from hscale.backends import torch_aot
    settings = torch_compile.compile_settings("cpu")
    name = torch_aot.package_name((False, False, "cpu"), settings)
    monkeypatch.setattr(torch_aot, "OUTPUTS", torch_aot.OUTPUTS - 1)
    assert torch_aot.package_name((False, False, "cpu"), settings) != name


def test_the_cache_directory_is_the_kits_and_keyed_by_torch_version(monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    for name in ("HSCALE_CACHE_DIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    home = torch_compile.fused_cache_dir("2.13.0+cpu")
    assert home == tmp_path / ".cache" / "hscale" / "inductor" / "torch-2.13.0+cpu"
    assert torch_compile.fused_cache_dir("2.14.0") != home  # an upgrade compiles afresh
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # inductor's own
    assert torch_compile.fused_cache_dir("2.13.0+cpu") == home
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert torch_compile.fused_cache_dir("x") == tmp_path / "xdg" / "hscale" / "inductor" / "torch-x"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # the user's
    assert torch_compile.fused_cache_dir("x") == tmp_path / "mine" / "hscale" / "torch-x"
    monkeypatch.setenv("HSCALE_CACHE_DIR", str(tmp_path / "kit"))  # the override wins
    assert torch_compile.fused_cache_dir("x") == tmp_path / "kit" / "inductor" / "torch-x"


def test_the_fused_walk_is_the_default_for_large_cpu_layers_and_has_a_switch(monkeypatch):
    """Default (``compile=None``): the fused walk from ``COMPILE_MIN_GROUPS`` groups on, the
    eager kernels below; ``compile=False`` or ``HSCALE_TORCH_COMPILE=0`` never, ``compile=True``
    or ``=1`` for any layer. Nothing is compiled: the policy only."""
    large, small = torch_compile.COMPILE_MIN_GROUPS, torch_compile.COMPILE_MIN_GROUPS - 1
    default = TorchBackend("cpu")
    assert default.layer_quantizer(large).use_compile
    assert not default.layer_quantizer(small).use_compile
    assert not TorchBackend("cpu", compile=False).layer_quantizer(10 ** 6).use_compile
    assert TorchBackend("cpu", compile=True).layer_quantizer(16).use_compile
    assert f"fused walk (AOTInductor) for layers of >= {large} groups" in default.version
    monkeypatch.setenv(torch_compile.ENV_SWITCH, "0")
    assert not default.layer_quantizer(large).use_compile
    assert not TorchBackend("cpu", compile=True).layer_quantizer(large).use_compile
    assert "HSCALE_TORCH_COMPILE=0" in default.version
    monkeypatch.setenv(torch_compile.ENV_SWITCH, "1")
    assert default.layer_quantizer(16).use_compile


def test_on_cuda_the_fused_walk_runs_where_asked_for(monkeypatch):
    """CUDA's policy (``FusedPath``, nothing run, no GPU needed): off by default at any size,
    on with ``compile=True`` or ``HSCALE_TORCH_COMPILE=1`` (how a conformance run certifies the
    Triton form), never with ``compile=False``."""
    default = torch_compile.FusedPath(None, "cuda")
    assert not default.wanted(10 ** 6)
    assert "no layer unless compile=True or HSCALE_TORCH_COMPILE=1" in default.status()
    assert torch_compile.FusedPath(True, "cuda").wanted(16)
    monkeypatch.setenv(torch_compile.ENV_SWITCH, "1")
    assert default.wanted(16)
    assert not torch_compile.FusedPath(False, "cuda").wanted(10 ** 6)


# -- the guards -----------------------------------------------------------------------------------

def test_a_refused_compilation_falls_back_to_eager_and_says_so_once(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise RuntimeError("no C++ compiler on this machine (test)")

    monkeypatch.setenv("HSCALE_CACHE_DIR", str(tmp_path))  # nothing built there: it must compile
    monkeypatch.setattr(torch.export, "export", refuse)
    monkeypatch.setattr(torch_compile, "_WARNED", set())
    backend = TorchBackend("cpu", compile=True)
    said = _fallback_warnings(backend, "fallback")
    assert len(said) == 1 and "no C++ compiler" in said[0], said
    assert "no C++ compiler" in backend.fused.disabled
    assert "fused walk off" in backend.version and not backend.fused.walk.verified
    assert not backend.layer_quantizer(10 ** 6).use_compile  # later layers go eager at once


@pytest.mark.parametrize("mutant", ["chosen_plus_one", "ties_rounded_up", "no_saturation",
                                    "objective_one_ulp_up"])
def test_a_compiled_function_that_differs_turns_the_walk_off(monkeypatch, mutant):
    """The check on a new block shape, against the eager pipeline on the block and on the
    probe: a walk off by one byte; one whose quotients are one ulp high (right everywhere but on
    exact ties, which this layer does not have: only the probe catches it); one without E2M1
    saturation (the window's smaller candidate scales saturate, so the block itself shows it);
    one whose group objective for the report is one ulp high in one group. Each is refused, the
    result is still the reference's, and the backend says why."""
    real_round = torch_walk.e2m1_round

    def ties_rounded_up(torch_, x):
        return real_round(torch_, x * (1.0 + 2.0 ** -52))

    def no_saturation(torch_, x):
        c = torch_.clamp_min(x, 1.0) * torch_walk.MAGIC
        return (x + c) - c

    walk = torch_walk.make_walk(False, False)

    def wrong(*args):
        if mutant == "chosen_plus_one":
            out = walk(*args)
            return (out[0], torch.where(out[1] > 0, out[1] + 1, out[1])) + out[2:]
        if mutant == "objective_one_ulp_up":  # one group's squared error at its chosen byte
            out = walk(*args)
            scored = out[3].clone()
            scored[2, 0, 0] = torch.nextafter(scored[2, 0, 0], torch.tensor(np.inf,
                                                                            dtype=scored.dtype))
            return out[:3] + (scored,) + out[4:]
        with monkeypatch.context() as m:
            m.setattr(torch_walk, "e2m1_round",
                      ties_rounded_up if mutant == "ties_rounded_up" else no_saturation)
            return walk(*args)

    monkeypatch.setattr(torch_compile, "_WARNED", set())
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 64)) * 0.1).astype(np.float32)
    h = rng.random(64)
    backend = TorchBackend("cpu", compile=True)
    backend.fused.walk.functions = _EveryVariant(wrong)
    with pytest.warns(RuntimeWarning, match="differ from the eager pipeline"):
        got = backend.quantize(w, h)
    assert_identical(reference_quantize(w, h), got, mutant)
    assert "differ" in backend.fused.disabled and not backend.fused.walk.verified
    # the reason names where: the block or its probe, the output, the row and group
    where = {"chosen_plus_one": "on the block: chosen scale byte at row 0, group 0",
             "ties_rounded_up": "on its probe (ties, zero groups, the ladder's ends): packed "
                                "codes at row",
             "no_saturation": "on the block: packed codes at row 0, group 0",
             "objective_one_ulp_up": "on the block: group objectives (h = 1; at the chosen, the "
                                     "initial byte) at row 0, group 0"}[mutant]
    assert where in backend.fused.disabled, backend.fused.disabled
