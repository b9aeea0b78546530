"""GPTQ's group step in a backend (``backend.group_quantizer()``), bit for bit the reference's.

GPTQ chooses each group's bytes from error-compensated float64 weights, which have 53
significant bits where a user's weights have at most 24. The torch kernel's rounding by a magic
constant needs 24 bits, so it has a ``wide`` form (``torch_kernels.eager_objectives``); these
tests put it on the float64 inputs where the 24-bit form fails and compare every objective with
the reference's, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from hscale.reference import SCALE_BYTE_VALUES, Quantizer, gptq_quantize
from hscale.reference.e2m1 import E2M1_MAGNITUDES, E2M1_MIDPOINTS
from hscale.reference.objective import UNIT_WEIGHTS
from hscale.reference.quantize import select_scale_bytes

torch = pytest.importorskip("torch")

S_G = np.float32(0.0137)  # 24 significant bits, like any global scale
ALL_BYTES = np.arange(1, 127, dtype=np.uint8)  # every positive E4M3 scale byte


@pytest.fixture(scope="module", params=["torch", "torch-cuda"])
def backend(request, runnable_backend):
    return runnable_backend(request.param)


def nudged(value: np.ndarray, ulps: np.ndarray) -> np.ndarray:
    """``value`` moved by ``ulps`` float64 units in the last place (towards +inf if > 0)."""
    out = value.copy()
    for _ in range(int(np.abs(ulps).max())):
        step = np.abs(ulps) > 0
        out[step] = np.nextafter(out[step], np.where(ulps[step] > 0, np.inf, -np.inf))
        ulps = ulps - np.sign(ulps)
    return out


def hard_float64_groups(count=1500, seed=7) -> np.ndarray:
    """Groups (count, 16) of float64 weights at E2M1 midpoints, grid points and 2 and 4 times
    one of the ladder's scales, each moved by -3..3 float64 ulps, and a few ordinary ones."""
    rng = np.random.default_rng(seed)
    points = np.array(E2M1_MIDPOINTS + E2M1_MAGNITUDES[1:] + (2.0, 4.0, 2.0, 4.0))
    scale = SCALE_BYTE_VALUES[rng.integers(1, 127, (count, 1))] * np.float64(S_G)
    on_point = rng.choice(points, (count, 16)) * scale  # exact: 3 x 28 significant bits
    weights = nudged(on_point, rng.integers(-3, 4, (count, 16)))
    ordinary = rng.random((count, 16)) < 0.1
    weights[ordinary] = rng.standard_normal(int(ordinary.sum())) * scale.repeat(16, 1)[ordinary]
    return weights * rng.choice([-1.0, 1.0], (count, 16))


def test_what_the_float64_kernel_relies_on_and_guards_against():
    """Counted with numpy on the hard groups at every ladder scale, independently of the
    kernels: quotients within 2^-49 of 2 or 4 (not equal) do occur, which is why the kernel's
    magic constant follows T's binade; a quotient rounded onto a midpoint it does not equal
    never occurs (the kernel's docstring proves it), though every midpoint is hit exactly."""
    magnitudes = np.abs(hard_float64_groups())[:, None, :]
    scales = (SCALE_BYTE_VALUES[ALL_BYTES] * np.float64(S_G))[None, :, None]
    quotient = magnitudes / scales
    on_midpoint = np.isin(quotient, np.array(E2M1_MIDPOINTS))
    # quotient == m there, so quotient * scale is m * s, a product exact in float64
    assert on_midpoint.sum() > 100
    every_magnitude = np.broadcast_to(magnitudes, quotient.shape)
    assert np.array_equal(every_magnitude[on_midpoint], (quotient * scales)[on_midpoint])
    near_a_binade_edge = np.zeros_like(on_midpoint)
    for edge in (2.0, 4.0):
        near_a_binade_edge |= (quotient != edge) & (np.abs(quotient - edge) < 2.0 ** -49)
    assert near_a_binade_edge.sum() > 100, near_a_binade_edge.sum()


def bits(errors: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(errors, dtype=np.float64).view(np.uint64)


@pytest.mark.clause("HSCALE-OBJ-1")
@pytest.mark.parametrize("weighting", ["h", "unit"])
def test_every_objective_on_the_whole_ladder_equals_the_reference(backend, weighting):
    groups = hard_float64_groups()
    rng = np.random.default_rng(3)
    h = UNIT_WEIGHTS if weighting == "unit" else rng.random(16) * 10.0 ** rng.uniform(-8, 8, 16)
    candidates = np.broadcast_to(ALL_BYTES, (len(groups), len(ALL_BYTES)))
    expected = Quantizer().candidate_objectives(groups, h, candidates, S_G)
    got = backend.group_quantizer().candidate_objectives(groups, h, candidates, S_G)
    differ = bits(expected) != bits(got)
    assert not differ.any(), (f"{backend.name}: {int(differ.sum())} objectives differ, first at "
                              f"(group, byte index) {tuple(np.argwhere(differ)[0])}")


@pytest.mark.clause("HSCALE-OBJ-1")
def test_objectives_under_several_weightings_at_once_are_the_references(backend):
    """``candidate_objectives_weighted`` (the report's errors: one rounding, then h and h = 1)
    gives each weighting's objectives bit for bit as the reference's separate calls, in any
    order and with a weighting repeated."""
    groups = hard_float64_groups(count=600, seed=9)
    rng = np.random.default_rng(4)
    h = rng.random(16) * 10.0 ** rng.uniform(-8, 8, 16)
    candidates = np.broadcast_to(ALL_BYTES, (len(groups), len(ALL_BYTES)))
    weightings = [h, UNIT_WEIGHTS, h]
    got = backend.group_quantizer().candidate_objectives_weighted(groups, weightings,
                                                                  candidates, S_G)
    assert len(got) == 3
    for count, (weights, values) in enumerate(zip(weightings, got)):
        expected = Quantizer().candidate_objectives(groups, weights, candidates, S_G)
        differ = bits(expected) != bits(values)
        assert not differ.any(), f"weighting {count}: {int(differ.sum())} objectives differ"


def test_the_24_bit_kernel_would_get_some_of_them_wrong():
    """The reason the float64 kernel exists: the kernel for users' weights, given these float64
    groups, disagrees with the reference (so the test above can fail)."""
    from hscale.backends import torch_kernels
    groups = hard_float64_groups()
    candidates = np.broadcast_to(ALL_BYTES, (len(groups), len(ALL_BYTES)))
    expected = Quantizer().candidate_objectives(groups, UNIT_WEIGHTS, candidates, S_G)
    aw_t = torch.from_numpy(np.abs(groups).T.copy())
    scales = torch.from_numpy(SCALE_BYTE_VALUES[candidates.astype(np.intp)] * np.float64(S_G))
    buffers = torch_kernels.Buffers(torch, "cpu")
    narrow = torch_kernels.eager_objectives(torch, aw_t, scales, None, buffers).numpy().copy()
    wide = torch_kernels.eager_objectives(torch, aw_t, scales, None, buffers, wide=True).numpy()
    assert (bits(narrow) != bits(expected)).sum() > 0
    assert (bits(wide) == bits(expected)).all()


@pytest.mark.clause("HSCALE-GPTQ-1")
@pytest.mark.parametrize("method", ["rtn", "scale-only", "hscale"])
@pytest.mark.parametrize("init", ["maxabs", "4over6"])
def test_group_selection_equals_the_reference(backend, method, init):
    groups = hard_float64_groups(count=600, seed=11)
    groups[:5] = 0.0  # zero groups: byte 0x00, not searched
    h = np.random.default_rng(5).random(16)
    h[3] = 0.0
    expected = select_scale_bytes(groups, h, method, init, 16, 6, S_G)
    got = select_scale_bytes(groups, h, method, init, 16, 6, S_G, backend.group_quantizer())
    for name, e, g in zip(("initial", "chosen"), expected, got):
        assert np.array_equal(e, g), (f"{backend.name} {method}/{init}: {name} bytes differ in "
                                      f"{int((e != g).sum())} groups")


def gptq_layer(seed=0, rows=48, cols=128, tokens=400):
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((cols, cols)) * 0.3 + np.eye(cols)
    X = rng.standard_normal((tokens, cols)) @ mixing * rng.uniform(0.2, 3.0, cols)
    W = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    W[rng.random(W.shape) < 0.01] *= 30.0
    W[0, :16] = 0.0
    X[:, 40] = 0.0  # a channel that never fires: H_jj = 0
    return W, X.T @ X


OPTIONS = [dict(method=m, init=i) for m in ("rtn", "scale-only", "hscale")
           for i in ("maxabs", "4over6")] + [
    dict(method="hscale", act_order=True), dict(method="hscale", static_groups=True),
    dict(method="hscale", act_order=True, static_groups=True, block_size=32),
    dict(method="hscale", K=8, U=3)]


@pytest.mark.clause("HSCALE-GPTQ-1")
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}"
                                                                      for k, v in o.items()))
def test_gptq_with_the_backend_group_step_equals_the_reference(backend, options):
    W, H = gptq_layer()
    expected = gptq_quantize(W, H, **options)
    got = gptq_quantize(W, H, **options, group_quantizer=backend.group_quantizer())
    for name in ("codes", "scale_bytes", "initial_bytes", "delta"):
        e, g = getattr(expected, name), getattr(got, name)
        assert np.array_equal(e, g), f"{backend.name} {options}: {name} differs"
    assert got.global_scale == expected.global_scale


@pytest.mark.clause("HSCALE-GPTQ-1")
def test_gptq_with_a_zero_group_in_every_group_column(backend):
    """Every group column has one zero row-group, so each group step selects from a fresh array
    of live groups of one shape (the case a cache keyed by address once got wrong)."""
    W, H = gptq_layer(seed=6, rows=40, cols=128)
    for g in range(8):
        W[g, 16 * g:16 * g + 16] = 0.0
        W[8 + g, 16 * g:16 * g + 16] = 0.0
    X_dead = np.diag(H) == 0
    assert X_dead.any()
    for static in (False, True):
        expected = gptq_quantize(W, H, method="hscale", init="4over6", static_groups=static)
        got = gptq_quantize(W, H, method="hscale", init="4over6", static_groups=static,
                            group_quantizer=backend.group_quantizer())
        assert np.array_equal(expected.scale_bytes, got.scale_bytes), static
        assert np.array_equal(expected.codes, got.codes), static


def test_quantize_weight_gptq_uses_the_backend_group_step(monkeypatch):
    """``hscale quantize --pipeline gptq --backend torch`` chooses the groups' bytes in torch
    (the kernel's wide form is called), with the reference's result on this layer (the
    backend's factor U differs from the reference's by rounding only)."""
    from hscale.backends import torch_kernels
    from hscale.pipelines import quantize_weight
    W, H = gptq_layer(seed=4)
    expected = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend="numpy", hessian=H)
    calls = []
    original = torch_kernels.eager_objectives

    def counted(*args, **kwargs):
        calls.append(kwargs.get("wide", False))
        return original(*args, **kwargs)
    monkeypatch.setattr(torch_kernels, "eager_objectives", counted)
    got = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend="torch", hessian=H)
    assert calls == [True] * (W.shape[1] // 16)  # one search per group, all wide
    assert np.array_equal(got.codes, expected.codes)
    assert np.array_equal(got.scale_bytes, expected.scale_bytes)


@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
def test_gptq_progress_moves_within_a_tensor_group_column_by_group_column(backend_name):
    """``on_groups`` (the progress bar of ``hscale quantize --pipeline gptq``) is told the
    weights of each group column as the sweep reaches it, and the result is unchanged."""
    from hscale.pipelines import quantize_weight
    if backend_name == "torch":
        pytest.importorskip("torch")
    W, H = gptq_layer(seed=4)
    plain = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend=backend_name,
                            hessian=H)
    told = []
    counted = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend=backend_name,
                              hessian=H, on_groups=told.append)
    assert told == [W.shape[0] * 16] * (W.shape[1] // 16)
    assert np.array_equal(counted.codes, plain.codes)
    assert np.array_equal(counted.scale_bytes, plain.scale_bytes)


def damped_by_hand(H: np.ndarray, damp: float) -> np.ndarray:
    """HSCALE-GPTQ-1's damped matrix, written from the clause: a unit diagonal where H_jj = 0,
    then damp * mean(diag) added to the diagonal."""
    damped = H.copy()
    diagonal = np.diag(H).copy()
    diagonal[diagonal == 0] = 1.0
    damped[np.diag_indices_from(damped)] = diagonal + damp * diagonal.mean()
    return damped


@pytest.mark.clause("HSCALE-GPTQ-1")
@pytest.mark.parametrize("damp", [0.01, 0.1])
def test_the_backend_factor_is_the_upper_cholesky_factor_of_the_damped_inverse(backend, damp):
    """``gptq_inverse_factor`` (LAPACK's Cholesky inverse) meets the clause's definition of U:
    upper triangular, positive diagonal, U^T U times the damped H is I; and it is the
    reference's factor up to rounding (the clause leaves the linear algebra's rounding open)."""
    from hscale.reference.gptq import inverse_cholesky_factor
    _, H = gptq_layer(cols=256, tokens=600)
    assert (np.diag(H) == 0).any()  # the dead channel's unit diagonal is exercised
    U = backend.gptq_inverse_factor(H, damp)
    assert U.dtype == np.float64 and U.shape == H.shape
    assert np.all(np.tril(U, -1) == 0) and np.all(np.diag(U) > 0)
    identity = (U.T @ U) @ damped_by_hand(H, damp)
    assert np.abs(identity - np.eye(len(H))).max() < 1e-9
    reference = inverse_cholesky_factor(H, damp)
    assert np.abs(U - reference).max() <= 1e-12 * np.abs(reference).max()


@pytest.mark.clause("HSCALE-GPTQ-1")
def test_gptq_with_the_backend_factor_and_a_diagonal_hessian_is_plain_quantization(backend):
    """With a diagonal H no error moves, so GPTQ is ``quantize(weight, diag(H))`` exactly, in
    any order (the clause's exact case), with the backend's factor as with the reference's."""
    from hscale.reference import quantize
    W, H = gptq_layer(seed=2)
    h = np.diag(H).copy()
    plain = quantize(W, h, method="hscale")
    for act_order in (False, True):
        got = gptq_quantize(W, np.diag(h), method="hscale", act_order=act_order,
                            group_quantizer=backend.group_quantizer(),
                            inverse_factor=backend.gptq_inverse_factor)
        assert np.array_equal(got.codes, plain.codes), act_order
        assert np.array_equal(got.scale_bytes, plain.scale_bytes), act_order


def test_quantize_weight_gptq_uses_the_backend_factor(monkeypatch):
    """``--pipeline gptq --backend torch`` takes U from the backend; on this layer every code
    and byte is the reference's (the factors differ by rounding only, and no weight sits close
    enough to a rounding boundary for that to move it)."""
    from hscale.backends.torch_backend import TorchBackend
    from hscale.pipelines import quantize_weight
    W, H = gptq_layer(seed=4)
    expected = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend="numpy", hessian=H)
    calls = []
    original = TorchBackend.gptq_inverse_factor

    def counted(self, *args):
        calls.append(args[1])
        return original(self, *args)
    monkeypatch.setattr(TorchBackend, "gptq_inverse_factor", counted)
    got = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend="torch", hessian=H,
                          damp=0.02)
    assert calls == [0.02]
    again = quantize_weight(W, np.diag(H).copy(), pipeline="gptq", backend="numpy", hessian=H,
                            damp=0.02)
    assert np.array_equal(got.codes, again.codes)
    assert np.array_equal(got.scale_bytes, again.scale_bytes)
    assert not np.array_equal(again.codes, expected.codes)  # the damping did reach the sweep
