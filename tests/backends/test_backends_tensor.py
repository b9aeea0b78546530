"""The torch backends' whole-tensor pipeline (``hscale.backends.torch_tensor``) and its
``quantize_on_device`` entry: the same bits as the reference for every method, init and weight
dtype, the reference's checks word for word, the E4M3 rounding against ml_dtypes' own. The
CUDA cases skip here, saying why; on a GPU they run (tools/gpu_ondevice_session.sh)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.reference import quantize as reference_quantize
from hscale.reference.e4m3 import E4M3_VALUES

from helpers.backend_checks import assert_identical, assert_rejected_like_the_reference, layer

torch = pytest.importorskip("torch")

METHODS = ("rtn", "scale-only", "hscale", "hscale-block")
TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                np.dtype(ml_dtypes.bfloat16): torch.bfloat16}


def blocks_for(h, seed=5):
    """Seeded symmetric positive semi-definite 16 x 16 blocks with h on the diagonal added, one
    of them all zeros (every candidate ties)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((h.size // 16, 16, 16)) * 10.0 ** rng.uniform(-3, 3, (h.size // 16,
                                                                                   1, 1))
    blocks = a @ a.transpose(0, 2, 1)
    blocks[:, np.arange(16), np.arange(16)] += h.reshape(-1, 16)
    blocks[1] = 0.0
    return blocks


def second_argument(method, h):
    return blocks_for(h) if method == "hscale-block" else h


def as_torch(weight, device):
    """A numpy weight as a torch tensor of its own dtype, bit for bit."""
    if weight.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(weight.view(np.uint16).view(np.int16)).view(
            torch.bfloat16).to(device)
    return torch.from_numpy(weight).to(device)


@pytest.fixture(params=["torch", "torch-cuda"])
def tensor_backend(request, runnable_backend):
    return runnable_backend(request.param)


def device_of(backend):
    return backend.device_name


def test_e4m3_bytes_against_ml_dtypes():
    """``e4m3_bytes`` (frexp, 16 f, round half to even) against ml_dtypes' float8_e4m3fn
    conversion, an independent implementation of the rounding: every ladder value, every
    midpoint between neighbours (ties) and a float32 ulp either side of each, values below the
    smallest subnormal, and saturation at 0x7E above 448 (NVFP4-E4M3-2)."""
    from hscale.backends.torch_tensor import e4m3_bytes
    ladder = E4M3_VALUES[:0x7F]
    mid = (ladder[:-1] + ladder[1:]) / 2
    f32 = mid.astype(np.float32)
    near = np.concatenate([np.nextafter(f32, np.float32(0)), np.nextafter(f32, np.float32(1e9))])
    tiny = np.array([0.0, 2.0 ** -12, 2.0 ** -11, 3 * 2.0 ** -12, 2.0 ** -10, 2.0 ** -10 * 1.0001])
    values = np.concatenate([ladder, mid, near.astype(np.float64), tiny])
    below = values[values < 464.0]  # ml_dtypes has no satfinite: beyond 464 it gives NaN
    expected = below.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    got = e4m3_bytes(torch, torch.from_numpy(below)).numpy()
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (f"{bad.size} differ, first {below[bad[0]]!r}: "
                           f"{got[bad[0]]:#x}, ml_dtypes {expected[bad[0]]:#x}")
    huge = torch.tensor([448.0, 463.9, 464.0, 480.0, 1e30, 2.0 ** 300], dtype=torch.float64)
    assert e4m3_bytes(torch, huge).tolist() == [0x7E] * 6


@pytest.mark.parametrize("method", METHODS)
def test_quantize_on_device_equals_reference(tensor_backend, method):
    """A torch weight on the backend's device in, tensors on that device out, the reference's
    bits, for both inits and every weight dtype; ``codes=False`` leaves out only the codes."""
    w, h = layer(11, rows=8)
    arg = second_argument(method, h)
    device = device_of(tensor_backend)
    for init in ("maxabs", "4over6"):
        for dtype in TORCH_DTYPES:
            weight = w.astype(dtype)
            expected = reference_quantize(weight, arg, method=method, init=init)
            from hscale.backends.torch_tensor import to_host
            got = tensor_backend.quantize_on_device(as_torch(weight, device), arg,
                                                    method=method, init=init, codes=True)
            assert isinstance(got.packed, torch.Tensor) and got.packed.device.type == \
                torch.device(device).type
            assert_identical(expected, to_host(got), f"{method}/{init} {dtype}")
        packed_only = tensor_backend.quantize_on_device(as_torch(weight, device), arg,
                                                        method=method, init=init)
        assert packed_only.codes is None
        assert_identical(expected, to_host(packed_only), f"{method}/{init} {dtype}, packed")


def test_quantize_on_device_takes_h_as_a_tensor_and_the_options(tensor_backend):
    """h on the device, K, U, the scale ceiling and a caller's s_g: the reference's bits."""
    from hscale.backends.torch_tensor import to_host
    w, h = layer(12, rows=6, cols=512)
    device = device_of(tensor_backend)
    h_tensor = torch.from_numpy(h).to(device)
    for options in (dict(K=3, U=1), dict(K=300, U=200), dict(scale_ceiling=256.0),
                    dict(global_scale=np.float32(0.01))):
        expected = reference_quantize(w, h, **options)
        got = to_host(tensor_backend.quantize_on_device(as_torch(w, device), h_tensor,
                                                        **options))
        assert_identical(expected, got, str(options))


def test_whole_tensor_blocks_and_threads(torch_backend_small_blocks):
    """Many blocks, a row split over blocks, worker threads: the same bits."""
    w, h = layer(13, rows=6, cols=512)
    for method in METHODS:
        arg = second_argument(method, h)
        assert_identical(reference_quantize(w, arg, method=method, init="4over6"),
                         torch_backend_small_blocks.quantize(w, arg, method=method,
                                                             init="4over6"), method)


@pytest.fixture
def torch_backend_small_blocks():
    from hscale.backends.torch_backend import TorchBackend
    saved = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        yield TorchBackend("cpu", chunk_groups=5)  # 32 groups a row: parts of rows, 7 blocks
    finally:
        torch.set_num_threads(saved)


def test_quantize_on_device_checks_like_the_reference(tensor_backend):
    """The reference's messages, word for word: non-finite values (found on the device, the
    first index named), dtype, shape, the options and h; a numpy weight or one on another
    device is refused with a message saying where it belongs."""
    w, h = layer(14)
    device = device_of(tensor_backend)
    call = tensor_backend.quantize_on_device

    def on_device(weight, *args, **options):
        return call(as_torch(weight, device), *args, **options)

    for bad in (np.nan, np.inf, -np.inf):
        broken = w.copy()
        broken[3, 40] = bad
        broken[5, 2] = bad
        assert_rejected_like_the_reference(on_device, broken, h)
        assert_rejected_like_the_reference(on_device, broken.astype(ml_dtypes.bfloat16), h)
    for args, options in (((w[:, :24], h[:24]), {}), ((w.astype(np.float64), h), {}),
                          ((w[0], h), {}), ((w, None), {}), ((w, h), dict(K=0)),
                          ((w, h), dict(method="gptq")), ((w, h), dict(scale_ceiling=449.0)),
                          ((w, h[:-1]), {}), ((w, h), dict(global_scale=0.1)),
                          ((w, h), dict(method="hscale-block"))):
        assert_rejected_like_the_reference(on_device, *args, **options)
    with pytest.raises(ValueError, match="expected a torch tensor.*quantize()"):
        call(w, h)
    if device != "cpu":
        with pytest.raises(ValueError, match="move it with"):
            call(torch.from_numpy(w), h)
