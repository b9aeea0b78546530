"""Run-time activation quantization, the engines' W4A4 profile (docs/spec.md section 8,
NVFP4-ACT-1 .. -4), against an independent route: the kernel's steps written again with torch
float32 tensors, torch's own float8_e4m3fn cast (RNE, saturating on the CPU) for the byte,
ml_dtypes' float4_e2m1fn cast for the codes, and fractions.Fraction for the decoded values;
plus hand-worked groups."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from hscale.reference.activations import (dequantize_activations, fake_quantize_activations,
                                          quantize_activations)

torch = pytest.importorskip("torch")

E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def engine_route(x: np.ndarray, g: float):
    """(codes, scale bytes) by the kernels' recipe (vLLM nvfp4_utils.cuh cvt_warp_fp16_to_fp4),
    step by step in torch float32, with casts that are not the reference's encoders."""
    xt = torch.from_numpy(np.asarray(x, np.float32))
    gt = torch.tensor(g, dtype=torch.float32)
    one = torch.tensor(1.0, dtype=torch.float32)
    amax = xt.abs().reshape(xt.shape[0], -1, 16).amax(dim=-1)
    sf = gt * (amax * (one / torch.tensor(6.0, dtype=torch.float32)))
    fp8 = sf.to(torch.float8_e4m3fn)
    byte_values = fp8.float()
    out = torch.where(byte_values != 0, one / (byte_values * (one / gt)),
                      torch.zeros_like(byte_values))
    products = (xt * out.repeat_interleave(16, dim=1)).numpy()
    codes = products.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    return codes, fp8.view(torch.uint8).numpy()


def decoded_exactly(codes, scale_bytes, multiplier) -> np.ndarray:
    """q * e4m3(c) * a with fractions, each rounded once to fp32 (by way of float64, exact here:
    a product of a 2-bit, a 4-bit and a 24-bit significand)."""
    values = np.empty(codes.shape, np.float32)
    for (r, j), code in np.ndenumerate(codes):
        q = Fraction(E2M1[code & 7]) * (-1 if code & 8 else 1)
        byte = int(scale_bytes[r, j // 16])
        e4m3 = Fraction(float(np.array(byte, np.uint8).view(ml_dtypes.float8_e4m3fn)))
        values[r, j] = np.float32(float(q * e4m3 * Fraction(float(multiplier))))
    return values


@pytest.mark.clause("NVFP4-ACT-2", "NVFP4-ACT-3")
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("g", [2688 / 3.7, 1.0, 37.25, 2688 / 0.013])
def test_bytes_and_codes_are_the_kernels_recipe(dtype, g):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((24, 128)) * rng.uniform(0.001, 4, (24, 1))).astype(dtype)
    x[3, :16] = 0.0  # a zero group
    x[5, 16:32] *= 1e-6  # a group whose SF underflows to byte 0x00 at small g
    g = float(np.float32(g))
    result = quantize_activations(x, g)
    codes, scale_bytes = engine_route(np.asarray(x, np.float32), g)
    np.testing.assert_array_equal(result.scale_bytes, scale_bytes)
    np.testing.assert_array_equal(result.codes, codes)


@pytest.mark.clause("NVFP4-ACT-2", "NVFP4-ACT-3")
def test_a_hand_worked_group():
    """amax 6, g = 1: SF = fp32(1 * fp32(6 * fp32(1/6))) = 1.0 (6 * 0.16666667163... =
    1.0000000298, which rounds to 1.0), byte 0x38; o = 1; the codes are the values' own."""
    x = np.array([[6, -3, 0.5, 1.25, -0.25, 2.5, 5, 0.74, -0.0, 1.75, 3.5, -6, 4, 1, 0.1, 2]],
                 np.float32)
    q = quantize_activations(x, 1.0)
    assert q.scale_bytes.tolist() == [[0x38]]
    # 1.25 -> 1 (tie to even), -0.25 -> -0 (0x8), 2.5 -> 2, 5 -> 4, 0.74 -> 0.5, 1.75 -> 2,
    # 3.5 -> 4, 0.1 -> 0
    assert q.codes.tolist() == [[0x7, 0xD, 0x1, 0x2, 0x8, 0x4, 0x6, 0x1, 0x8, 0x4, 0x6, 0xF,
                                 0x6, 0x2, 0x0, 0x4]]


@pytest.mark.clause("NVFP4-ACT-2")
def test_the_reciprocal_of_six_moves_a_byte_across_a_tie():
    """amax_g = 3.5625 - 2^-22, g = 1: the exact amax_g / 6 lies just below the E4M3 midpoint
    0.59375 (byte 0x31, 0.5625, as NVFP4-INIT-1 would choose), but fp32(amax_g * fp32(1/6)) is
    0.59375 exactly (3.5625 - 2^-22 = 14942207 / 2^22 and fp32(1/6) = 11184811 / 2^26: their
    product is 0.59375 + 3.6e-9, within half an ulp), which ties to the even byte 0x32."""
    amax = Fraction(14942207, 2 ** 22)
    assert float(amax) == 3.5625 - 2.0 ** -22 and Fraction(float(np.float32(1 / 6))) == \
        Fraction(11184811, 2 ** 26)
    assert abs(amax * Fraction(11184811, 2 ** 26) - Fraction(19, 32)) < Fraction(1, 2 ** 25)
    x = np.zeros((1, 16), np.float32)
    x[0, 0] = float(amax)
    assert quantize_activations(x, 1.0).scale_bytes.tolist() == [[0x32]]


@pytest.mark.clause("NVFP4-ACT-2", "NVFP4-ACT-3")
def test_no_floor_at_0x01_and_saturation_at_448():
    """A group whose SF rounds to zero gets byte 0x00 and signed-zero codes (unlike the weights'
    0x01 floor, NVFP4-INIT-1); a group whose SF passes 448 gets 0x7E and codes saturate at 6."""
    x = np.zeros((2, 16), np.float32)
    x[0, :3] = [1e-4, -2e-4, 3e-5]  # SF = 2e-4 / 6 < 2^-10: rounds to zero
    x[1, :3] = [3000.0, -1.0, 2900.0]  # SF = 500 > 448
    q = quantize_activations(x, 1.0)
    assert q.scale_bytes[:, 0].tolist() == [0x00, 0x7E]
    assert q.codes[0, :4].tolist() == [0x0, 0x8, 0x0, 0x0]
    assert q.codes[1, 0] == 0x7 and q.codes[1, 2] == 0x7  # 3000 / 448 and 2900 / 448 > 6
    assert not q.dequantize()[0].any()


@pytest.mark.clause("NVFP4-ACT-4", "NVFP4-ACT-1")
def test_the_emulated_activation_is_one_rounding_of_the_exact_product():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    g = np.float32(2688 / 2.9)
    q = quantize_activations(x, g)
    for multiplier in (np.float32(1) / g, np.float32(2.9 / 2688)):  # CT's fp32(1/g), a stored a
        expected = decoded_exactly(q.codes, q.scale_bytes, multiplier)
        np.testing.assert_array_equal(dequantize_activations(q.codes, q.scale_bytes, multiplier),
                                      expected)
    np.testing.assert_array_equal(fake_quantize_activations(x, g),
                                  decoded_exactly(q.codes, q.scale_bytes, np.float32(1) / g))


@pytest.mark.clause("NVFP4-ACT-1", "NVFP4-ACT-9", "NVFP4-ACT-11")
@pytest.mark.parametrize("x, g, match", [
    (np.ones((2, 16), np.float32), 0.0, "NVFP4-ACT-1"),
    (np.ones((2, 16), np.float32), float("nan"), "NVFP4-ACT-1"),
    (np.ones((2, 16), np.float32), 0.1, "NVFP4-ACT-1"),  # not an fp32 value
    (np.ones((2, 16), np.float32), 2.0 ** 127, "NVFP4-ACT-1"),  # its reciprocal is subnormal
    (np.ones((2, 16), np.float64), 1.0, "NVFP4-ACT-11"),
    (np.ones((2, 24), np.float32), 1.0, "NVFP4-ACT-11"),
    (np.array([[1.0] * 15 + [np.inf]], np.float32), 1.0, "NVFP4-ACT-9"),
    ([[1.0] * 16], 1.0, "NVFP4-ACT-11"),
    (np.full((2, 16), 1e-36, np.float32), None, "NVFP4-ACT-1"),  # no dynamic scale
])
def test_bad_input_is_refused_citing_the_clause(x, g, match):
    with pytest.raises(ValueError, match=match):
        quantize_activations(x, g)
