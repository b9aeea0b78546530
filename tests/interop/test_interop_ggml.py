"""ggml's own NVFP4 quantizer (``hscale.backends.interop.ggml_nvfp4``), pinned on hand-worked
groups where it departs from the spec, beside what the spec says for the same group
(``hscale.reference.quantize`` at s_g = 1, the global scale ggml does not have). Skips where
llama-cpp-python is not installed."""

from __future__ import annotations

import numpy as np
import pytest

from hscale.backends import get
from hscale.reference import quantize

ADAPTER = "hscale.backends.interop.ggml_nvfp4:create"


@pytest.fixture(scope="module")
def ggml():
    backend = get(ADAPTER)
    ok, why = backend.available()
    if not ok:
        pytest.skip(why)
    return backend


def one_group(*values) -> np.ndarray:
    group = np.zeros((1, 16), np.float32)
    group[0, : len(values)] = values
    return group


def codes_of(packed: np.ndarray) -> list:
    return np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(-1).tolist()


@pytest.mark.clause("NVFP4-E4M3-2", "NVFP4-INIT-1")
@pytest.mark.parametrize("values, ggml_byte, spec_byte, why", [
    ((102.0,), 0x59, 0x58, "amax/6 = 17, the midpoint of 16 and 18: half up, not to even"),
    ((1800.0,), 0x7E, 0x79, "amax/6 = 300: every scale in [256, 448) becomes 448; RNE gives 288"),
    ((0.09,), 0x07, 0x08, "amax/6 = 0.015 = 7.68 * 2^-9: the subnormal mantissa 8 is clamped to "
                          "7 instead of carrying into 2^-6"),
    ((6e-4,), 0x00, 0x01, "amax/6 = 1e-4 rounds to zero: byte 0x00, no 0x01 floor"),
])
def test_the_scale_byte(ggml, values, ggml_byte, spec_byte, why):
    weight = one_group(*values)
    assert ggml.quantize(weight, method="rtn").scale_bytes.tolist() == [[ggml_byte]], why
    assert quantize(weight, method="rtn", global_scale=1.0).scale_bytes.tolist() == \
        [[spec_byte]], why


@pytest.mark.clause("NVFP4-E2M1-2", "NVFP4-E2M1-3")
def test_element_ties_go_toward_zero_and_negative_zeros_lose_their_sign(ggml):
    """amax 6 gives byte 0x38 (scale 1) in both; 0.75, 1.75 and 3.5 are E2M1 ties: ggml takes
    the first (smaller) of two equal errors, 0.5, 1.5 and 3, the spec the even code, 1, 2 and 4;
    -0.25 rounds to zero, code 0x0 in ggml, 0x8 (-0) in the spec."""
    weight = one_group(6.0, 0.75, 1.75, 3.5, -0.75, -1.75, -3.5, -0.25)
    ours = ggml.quantize(weight, method="rtn")
    spec = quantize(weight, method="rtn", global_scale=1.0)
    assert ours.scale_bytes.tolist() == spec.scale_bytes.tolist() == [[0x38]]
    assert codes_of(ours.packed)[:8] == [0x7, 0x1, 0x3, 0x5, 0x9, 0xB, 0xD, 0x0]
    assert codes_of(spec.packed)[:8] == [0x7, 0x2, 0x4, 0x6, 0xA, 0xC, 0xE, 0x8]


@pytest.mark.clause("NVFP4-GGUF-1", "NVFP4-E2M1-2")
def test_away_from_ties_ggml_is_the_spec_at_s_g_1(ggml):
    """Random float32 weights (no ties, scales in the normal range below 256): every byte and
    code equals the spec's with s_g = 1, in rows that are not a multiple of 64 too (48 here: the
    adapter pads with zeros)."""
    rng = np.random.default_rng(5)
    weight = (rng.standard_normal((32, 48)) * 3).astype(np.float32)
    ours = ggml.quantize(weight, method="rtn")
    spec = quantize(weight, method="rtn", global_scale=1.0)
    assert ours.global_scale == np.float32(1.0)
    np.testing.assert_array_equal(ours.scale_bytes, spec.scale_bytes)
    magnitude = np.array(codes_of(ours.packed)) & 7
    np.testing.assert_array_equal(np.array(codes_of(ours.packed))[magnitude != 0],
                                  np.array(codes_of(spec.packed))[magnitude != 0])
