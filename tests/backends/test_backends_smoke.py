"""Quick checks of the torch and CuPy backends against the reference (bit for bit).

The conformance suite proper lives in conformance/; these are the backend author's smoke tests:
a few seeded layers through every method/init combination and the corner cases that exercise
the vectorised code paths (zero groups, -0.0, window clipping at bytes 1 and 126, saturation,
exact ties, non-default K/U, chunking and threading), and the CUDA backends' availability.
"""

from __future__ import annotations

import os
import shutil

import ml_dtypes
import numpy as np
import pytest

from hscale.backends import get
from hscale.reference import quantize as reference_quantize

from helpers.backend_checks import assert_identical, assert_rejected_like_the_reference, layer

torch = pytest.importorskip("torch")

@pytest.fixture(scope="module")
def torch_backend():
    backend = get("torch")
    ok, why = backend.available()
    assert ok, why
    return backend


@pytest.fixture(scope="module", params=["torch", "torch-cuda", "cupy"])
def fast_backend(request, runnable_backend):
    """Each fast backend; the CUDA ones skip where they cannot run, saying why (no device)."""
    return runnable_backend(request.param)


COMBOS = [(m, i) for m in ("rtn", "scale-only", "hscale") for i in ("maxabs", "4over6")]


@pytest.mark.parametrize("method,init", COMBOS)
def test_backend_equals_reference_all_combinations(fast_backend, method, init):
    for seed in (1, 2):
        w, h = layer(seed)
        expected = reference_quantize(w, h, method=method, init=init)
        assert_identical(expected, fast_backend.quantize(w, h, method=method, init=init),
                         f"{fast_backend.name} seed {seed} {method}/{init}")


@pytest.mark.parametrize("options", [
    dict(K=5, U=1), dict(K=1, U=0), dict(K=16, U=15), dict(K=16, U=0), dict(K=7, U=3),
    dict(K=24, U=10), dict(K=300, U=120),  # wider than the ladder: clipped repeats
    dict(scale_ceiling=256.0), dict(scale_ceiling=256.0, init="4over6"),
    dict(global_scale=np.float32(1e-3)),  # a pipeline's own s_g
    dict(global_scale=np.float32(1e-6)),  # every c0 saturates at 0x7E: window clipped above
    dict(global_scale=np.float32(2.0 ** -126)),  # smallest normal s_g, huge quotients
])
def test_backend_equals_reference_options(fast_backend, options):
    w, h = layer(3)
    for method in ("scale-only", "hscale"):
        expected = reference_quantize(w, h, method=method, **options)
        assert_identical(expected, fast_backend.quantize(w, h, method=method, **options),
                         f"{fast_backend.name} {method} {options}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_backend_equals_reference_low_precision_inputs(fast_backend, dtype):
    w, h = layer(4)
    w = w.astype(dtype)
    for init in ("maxabs", "4over6"):
        expected = reference_quantize(w, h, method="hscale", init=init)
        assert_identical(expected, fast_backend.quantize(w, h, method="hscale", init=init),
                         f"{fast_backend.name} {np.dtype(dtype).name} {init}")


def test_backend_exact_ties_on_midpoints(fast_backend):
    """Weights exactly on E2M1 midpoints and grid points times the baseline scale, so that
    the element rounding ties (0.25->0, 0.75->1, ..., 5->4) decide the objectives."""
    grid = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0,
                     0.0, 6.0], dtype=np.float32)
    rows = []
    for e in range(-3, 5):
        for sign in (1.0, -1.0):
            rows.append(np.concatenate([sign * grid * np.float32(2.0 ** e),
                                        grid[::-1] * np.float32(1.125 * 2.0 ** e)]))
    w = np.stack(rows).astype(np.float32)
    h = np.ones(w.shape[1])
    for method in ("rtn", "scale-only", "hscale"):
        for init in ("maxabs", "4over6"):
            for sg in (None, np.float32(2.0 ** -4), np.float32(1.0 / 48)):
                expected = reference_quantize(w, h, method=method, init=init, global_scale=sg)
                got = fast_backend.quantize(w, h, method=method, init=init, global_scale=sg)
                assert_identical(expected, got, f"{fast_backend.name} ties {method}/{init} "
                                 f"s_g={sg}")


def test_torch_chunking_and_threads(torch_backend):
    """Blocks of whole rows, partial last blocks and column blocks inside one row, with the
    threaded and the single-thread paths."""
    from hscale.backends.torch_backend import TorchBackend
    w, h = layer(5, rows=13, cols=320)  # 20 groups per row
    expected = reference_quantize(w, h, method="hscale", init="4over6")
    saved = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for chunk in (1, 7, 20, 45, 4096):
                got = TorchBackend("cpu", chunk_groups=chunk).quantize(w, h, method="hscale",
                                                                       init="4over6")
                assert_identical(expected, got, f"chunk {chunk}, {threads} threads")
    finally:
        torch.set_num_threads(saved)
    assert torch.get_num_threads() == saved


def test_blocks_with_equal_numbers_of_zero_groups(fast_backend):
    """One zero group in every row, so that every block's live groups are a fresh array of one
    shape: a cache of a block's |w| keyed by address and shape (a freed array's address is
    reused) once handed a block the previous block's weights (6,804 of 8,192 bytes wrong)."""
    from hscale.backends.torch_backend import TorchBackend
    rng = np.random.default_rng(17)
    w = rng.standard_normal((512, 256)).astype(np.float32)
    h = rng.random(256)
    for r in range(512):
        g = r % 16
        w[r, 16 * g:16 * g + 16] = 0.0
    backends = [fast_backend]
    if fast_backend.name == "torch":
        backends += [TorchBackend("cpu", chunk_groups=c, compile=False) for c in (16, 64, 256)]
    for backend in backends:
        for init in ("maxabs", "4over6"):
            expected = reference_quantize(w, h, method="hscale", init=init)
            assert_identical(expected, backend.quantize(w, h, method="hscale", init=init),
                             f"{backend.name} chunk {getattr(backend, 'chunk_groups', '')} {init}")


def test_torch_min_keeps_the_first_minimum():
    """The argmin the torch backend relies on (HSCALE-ARGMIN-1): first minimal index."""
    e = torch.tensor([[3.0, 1.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0], [5.0, 4.0, 4.0, 4.0],
                      [float("inf")] * 4], dtype=torch.float64)
    assert torch.min(e, dim=1).indices.tolist() == [1, 0, 1, 0]
    big = torch.zeros(4096, 16, dtype=torch.float64)
    big[:, 5:] = -1.0
    assert bool((torch.min(big, dim=1).indices == 5).all())


def test_backend_rejects_bad_input_like_the_reference(fast_backend):
    w, h = layer(6)
    w[2, 7] = np.nan
    assert_rejected_like_the_reference(fast_backend.quantize, w, h)
    w = layer(6)[0]
    for args, options in (((w, None), {}), ((w, h), dict(K=0)), ((w, h), dict(U=16)),
                          ((w, h[:-1]), {}), ((w, h), dict(global_scale=0.1))):
        assert_rejected_like_the_reference(fast_backend.quantize, *args, **options)


@pytest.mark.parametrize("name", ["torch-cuda", "cupy"])
def test_cuda_backends_report_unavailable_here(name):
    backend = get(name)
    ok, why = backend.available()
    if ok:
        pytest.skip(f"{name} is available on this machine")
    assert "CUDA device" in why, why
    with pytest.raises(RuntimeError, match="CUDA device"):
        backend.quantize(layer(7)[0], layer(7)[1])


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None,
                               reason="no gcc for the CUDA kernel's host harness")


@needs_gcc
@pytest.mark.parametrize("method,init", COMBOS)
def test_cupy_kernel_logic_on_the_host(method, init):
    """The CUDA kernel source compiled for the host (-DHSCALE_HOST_HARNESS, -ffp-contract=off)
    against the reference: the kernel's logic, not NVRTC or the GPU (the whole conformance
    suite runs on it in test_cupy_kernel_conformance.py)."""
    from hscale.backends.cupy_backend import quantize_with_host_harness
    w, h = layer(8)
    for options in ({}, dict(K=5, U=1), dict(global_scale=np.float32(1e-6)),
                    dict(scale_ceiling=256.0), dict(K=300, U=120), dict(K=1, U=0),
                    dict(global_scale=np.float32(2.0 ** -126))):
        expected = reference_quantize(w, h, method=method, init=init, **options)
        got = quantize_with_host_harness(w, h, method=method, init=init, **options)
        assert_identical(expected, got, f"host harness {method}/{init} {options}")


@needs_gcc
def test_cupy_kernel_at_the_float32_limits():
    """Weights at both ends of float32, read by the kernel as bit patterns: near its largest
    finite value, with the largest s_g that NVFP4-GS-2 allows, and subnormals down to 2^-149
    (groups of them are not zero groups), with the smallest s_g, against the reference."""
    from hscale.backends.cupy_backend import quantize_with_host_harness
    big = np.float32(3.0e38)
    w = np.array([[big, -big / 3, big / 7, 1e30] + [1e38] * 12,
                  [2.0 ** -149, 2.0 ** -148, 3 * 2.0 ** -149, 0.0] + [2.0 ** -140] * 12],
                 dtype=np.float32)
    h = np.linspace(0.0, 2.0, 16)
    from hscale.reference.global_scale import dequantizes_finitely
    largest_global_scale = np.uint32(0x79C30C30).view(np.float32)
    assert dequantizes_finitely(largest_global_scale)
    assert not dequantizes_finitely(np.nextafter(largest_global_scale, np.float32(np.inf)))
    for options in ({}, dict(global_scale=np.float32(2.0 ** -126)), dict(K=40, U=20),
                    dict(global_scale=largest_global_scale, K=40, U=20)):
        for method, init in COMBOS:
            expected = reference_quantize(w, h, method=method, init=init, **options)
            got = quantize_with_host_harness(w, h, method=method, init=init, **options)
            assert_identical(expected, got, f"float32 limits {method}/{init} {options}")


@needs_gcc
def test_cupy_kernel_does_no_float32_arithmetic():
    """CuPy compiles every kernel with -ftz=true (cupy/cuda/compiler.py appends it whatever
    the caller asks), so any float32 instruction would flush subnormal weights to zero: on an
    H100 a group of subnormals came out as a zero group. The kernel source, comments aside,
    names no float32 type, literal or function."""
    import re
    from hscale.backends.cupy_backend import KERNEL_SOURCE
    code = re.sub(r"//[^\n]*", "", KERNEL_SOURCE)
    found = re.findall(r"\b(?:float\w*|half\w*|__half\w*|\w+f\(|\d+\.\d*f)\b|fabsf|__float", code)
    assert not found, f"float32 in the CUDA kernel source: {sorted(set(found))}"


@needs_gcc
def test_cupy_float16_widening_is_exact_for_every_bit_pattern():
    """The kernel's float16 -> float32 widening (integer work, immune to flush-to-zero) against
    numpy's conversion, for all 65536 patterns: subnormals, zeros, Inf and NaN included."""
    from hscale.backends.cupy_backend import HostRuntime, host_harness_library
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    widened = HostRuntime(host_harness_library()).upload_weight(every)
    assert widened.dtype == np.uint32
    expected = every.astype(np.float32).view(np.uint32)
    bad = np.flatnonzero(widened != expected)
    first = bad[0] if bad.size else 0
    assert bad.size == 0, (f"{bad.size} patterns differ, first 0x{first:04x}: "
                           f"0x{widened[first]:08x}, numpy 0x{expected[first]:08x}")


@needs_gcc
def test_cupy_device_entry_checks_like_the_reference():
    """``quantize_on_device`` checks the dtype and shape before reading the weight, and its
    values on the device (the amax pass counts NaN and Inf as +Inf); a bad weight gets the
    reference's own message, first bad index included. Run here on the host runtime."""
    from hscale.backends.cupy_backend import FusedQuantizer, HostRuntime, host_harness_library
    quantizer = FusedQuantizer(HostRuntime(host_harness_library()))
    w, h = layer(9)
    for bad in (np.nan, np.inf, -np.inf):
        broken = w.copy()
        broken[3, 40] = bad
        broken[5, 2] = bad
        assert_rejected_like_the_reference(quantizer.quantize_on_device, broken, h)
        assert_rejected_like_the_reference(quantizer.quantize_on_device,
                                           broken.astype(np.float16), h)
    for args, options in (((w[:, :24], h[:24]), {}), ((w.astype(np.float64), h), {}),
                          ((w[0], h), {}), ((w, None), {}), ((w, h), dict(K=0)),
                          ((w, h), dict(method="gptq")), ((w, h), dict(scale_ceiling=449.0)),
                          ((w, h[:-1]), {}), ((w, h), dict(global_scale=0.1))):
        assert_rejected_like_the_reference(quantizer.quantize_on_device, *args, **options)
    got = quantizer.quantize_on_device(w, h, method="hscale", init="4over6", codes=False)
    assert_identical(reference_quantize(w, h, method="hscale", init="4over6"),
                     got.to_host(quantizer.runtime), "on-device entry, codes unpacked")


def test_cupy_on_device_equals_reference(runnable_backend):
    """On a GPU: the weight as a CuPy array in, the result on the device, the same bits."""
    backend = runnable_backend("cupy")
    import cupy
    for seed in (1, 2):
        w, h = layer(seed)
        for method, init in COMBOS:
            for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
                weight = w.astype(dtype)
                if dtype == ml_dtypes.bfloat16:  # no CuPy dtype: through the numpy entry
                    got = backend.quantize(weight, h, method=method, init=init)
                    assert_identical(reference_quantize(weight, h, method=method, init=init),
                                     got, f"cupy bfloat16 seed {seed} {method}/{init}")
                    continue
                got = backend.quantize_on_device(cupy.asarray(weight), h, method=method, init=init)
                assert isinstance(got.packed, cupy.ndarray)
                assert_identical(reference_quantize(weight, h, method=method, init=init),
                                 got.to_host(backend.runtime()),
                                 f"cupy on device seed {seed} {method}/{init} {np.dtype(dtype)}")


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("HSCALE_TEST_COMPILE") != "1",
                    reason="compiles the fused walk's four libraries (minutes on a cold cache); "
                           "set HSCALE_TEST_COMPILE=1")
def test_torch_fused_path_equals_reference(monkeypatch):
    """The fused (AOTInductor) CPU path, forced on small layers, against the reference; the
    path must really have run (not fallen back to eager)."""
    monkeypatch.delenv("HSCALE_TORCH_COMPILE", raising=False)  # tests/conftest.py's 0
    from hscale.backends import torch_backend as tbm
    backend = tbm.TorchBackend("cpu", compile=True)
    for seed in (1, 2):
        w, h = layer(seed, rows=40, cols=512)
        for method, init in COMBOS:
            for options in ({}, dict(global_scale=np.float32(1e-6)), dict(K=5, U=1)):
                expected = reference_quantize(w, h, method=method, init=init, **options)
                got = backend.quantize(w, h, method=method, init=init, **options)
                assert_identical(expected, got, f"fused {method}/{init} {options}")
        wb = w.astype(ml_dtypes.bfloat16)
        assert_identical(reference_quantize(wb, h), backend.quantize(wb, h), "fused bf16")
    assert backend.fused.disabled is None, backend.fused.disabled
    assert backend.fused.walk.verified
    # Loading the compiled code must not have switched on flush-to-zero (crtfastmath).
    assert float(np.float64(1e-300) * np.float64(1e-20)) != 0.0
    assert torch.tensor([1e-300], dtype=torch.float64).mul(1e-20).item() != 0.0


def test_cupy_wheel_for_another_cuda_major_is_reported(monkeypatch):
    """A CuPy built for CUDA 13 on a driver that supports only CUDA 12 cannot run: the backend
    says so and names the wheel (and the project extra) to install instead."""
    import types

    from hscale.backends import cupy_backend

    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 13000,
                                    driverGetVersion=lambda: 12040)
    fake = types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setattr(cupy_backend, "_import_cupy", lambda: (fake, ""))
    ok, why = cupy_backend.CupyBackend().available()
    assert not ok
    assert "CUDA 13.0" in why and "CUDA 12.4" in why and "cupy-cuda12x" in why and "cuda12" in why
    runtime.driverGetVersion = lambda: 13000
    runtime.runtimeGetVersion = lambda: 13020  # a newer minor than the driver's runs (H100 here)
    assert cupy_backend.CupyBackend().available() == (True, "")


def test_torch_h_cache_is_not_fooled_by_a_reused_address():
    """The torch backend caches a block's h columns per call. Two h arrays at one address but
    owned by different objects (what a freed array and its successor can be) must not share an
    entry: keyed by the address alone, the second got the first's columns."""
    import ctypes
    torch = pytest.importorskip("torch")
    from hscale.backends.torch_backend import TorchQuantizer
    quantizer = TorchQuantizer(get("torch"))
    memory = np.zeros(4 * 16)
    address = memory.ctypes.data

    def h_at_address(values):
        memory[:] = values
        owner = (ctypes.c_double * memory.size).from_address(address)  # a new owner each time
        return np.ctypeslib.as_array(owner).reshape(4, 16)

    groups = np.zeros((2, 4, 16))  # 2 whole rows of 4 groups
    first = quantizer._h_columns(h_at_address(np.arange(64.0)), groups, 8)
    first = first.clone()
    second_h = h_at_address(np.arange(64.0)[::-1].copy())
    second = quantizer._h_columns(second_h, groups, 8)
    assert second_h.__array_interface__["data"][0] == address  # the same address indeed
    expected = torch.from_numpy(second_h.copy()).t().repeat(1, 2)
    assert torch.equal(second, expected)
    assert not torch.equal(second, first)


def _worker_threads(backend, w, h) -> set:
    """The threads the call's blocks ran on."""
    import threading
    from hscale.backends import torch_backend
    threads = set()
    run_block = torch_backend.TensorRun.run_block

    def recording(run, block):
        threads.add(threading.current_thread())
        return run_block(run, block)

    torch_backend.TensorRun.run_block = recording
    try:
        backend.quantize(w, h, method="hscale")
    finally:
        torch_backend.TensorRun.run_block = run_block
    return threads


def test_torch_worker_threads_are_kept_between_calls():
    """The blocks of every call run on the same worker threads (a pool per call paid its
    threads' start-up on every layer); another thread count gets a pool of its size."""
    from hscale.backends.torch_backend import TorchBackend
    backend = TorchBackend("cpu", chunk_groups=7, compile=False)
    w, h = layer(11, rows=24, cols=320)
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        first = _worker_threads(backend, w, h)
        second = _worker_threads(TorchBackend("cpu", chunk_groups=7, compile=False), w, h)
        torch.set_num_threads(3)
        third = _worker_threads(backend, w, h)
    finally:
        torch.set_num_threads(saved)
    assert len(first) == 2, first
    assert all(t.name.startswith("hscale-torch-blocks") for t in first), first
    assert second == first  # the same two threads, for another backend object too
    assert len(third) == 3 and not third & first, (first, third)
    assert torch.get_num_threads() == saved


def test_a_pool_in_use_stays_open_when_another_thread_count_asks():
    """A call on another thread with another thread count gets its own pool and leaves this
    one open (a pool replaced and shut down under a caller that held it refused its blocks:
    "cannot schedule new futures after shutdown")."""
    from hscale.backends.torch_backend import BLOCK_WORKERS
    two = BLOCK_WORKERS.pool(torch, 2)
    three = BLOCK_WORKERS.pool(torch, 3)
    assert three is not two
    assert two.submit(int, "7").result(timeout=60) == 7
    assert BLOCK_WORKERS.pool(torch, 2) is two


def _quantize_in_child(queue, w, h):
    from hscale.backends.torch_backend import TorchBackend
    got = TorchBackend("cpu", chunk_groups=7, compile=False).quantize(w, h, method="hscale")
    queue.put((got.codes.tobytes(), got.scale_bytes.tobytes()))


def test_a_forked_child_makes_its_own_worker_threads():
    """A process forked after the parent's blocks ran has none of the parent's worker threads:
    a pool carried over by the fork would take its blocks and never run them (the call hangs);
    the child makes its own and gets the parent's result."""
    import multiprocessing
    from hscale.backends.torch_backend import TorchBackend
    w, h = layer(12, rows=24, cols=320)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        expected = TorchBackend("cpu", chunk_groups=7, compile=False).quantize(w, h,
                                                                               method="hscale")
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_quantize_in_child, args=(queue, w, h))
        child.start()
        child.join(timeout=120)
        alive = child.is_alive()
        if alive:
            child.kill()
    finally:
        torch.set_num_threads(saved)
    assert not alive, "the forked child's quantize did not finish in 120 s"
    assert child.exitcode == 0
    codes, scales = queue.get(timeout=10)
    assert codes == expected.codes.tobytes() and scales == expected.scale_bytes.tobytes()
