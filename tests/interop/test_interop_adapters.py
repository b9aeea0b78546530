"""The interop adapters (``hscale.backends.interop``) pinned on hand-built groups.

Each library's observed bytes are written here in hex, once observed and then explained by the
rule the library applies (its test's docstring says which); a change in a library's numerics
fails here. Where the library follows the spec, the expected values are also the reference's
(``hscale.reference.quantize``) and the test says so by comparing with it. Every test skips,
with the adapter's own reason, where its library is not installed (the libraries are the
``interop`` extra, docs/interop-notes.md).

The hand-built groups (float32 bit patterns; "s_g given" is a caller's global scale, NVFP4-GS-3):

- ``zero``: 1x32, group 0 all zero with a -0.0 at j = 1, group 1 = [6, -3, 1, 0.5, 0 ...];
  s_g computed (amax 6: s_g = fp32(6 / 2688) = 0x3B124925);
- ``subnormal``: 1x48, s_g given 1.0: group 0 has amax 6 * 2^-8 (quotient 2^-8: byte 0x02, a
  subnormal E4M3), group 1 has amax 6 * 2^-11 (quotient 2^-11 rounds to 0: byte 0x01 by
  NVFP4-INIT-1's floor), group 2 has amax 6 (byte 0x38);
- ``midpoint``: 1x32, s_g given 1.0: amax 6.375 (quotient 1.0625, the midpoint of 0x38 and
  0x39: ties to even 0x38) and 7.125 (1.1875, midpoint of 0x39 and 0x3A: to even 0x3A);
- ``ties``: 1x16, s_g given 1.0, byte 0x38 (s = 1): every E2M1 midpoint with both signs, 6 and
  -0.0;
- ``reciprocal``: 1x16, s_g given 1.0, amax 2688 (byte 0x7E, s = 448): elements one fp32 ulp
  below the midpoints 1.75 s and 3.5 s (0x4443FFFF, 0x44C3FFFF), where ``w * fp32(1/s)``
  rounds up onto the midpoint and then to even.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.backends import get
from hscale.reference import quantize

ADAPTERS = "hscale.backends.interop."


def _f32(*bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _groups(*groups):
    return np.concatenate(groups)[None, :]


ZERO16 = [0x00000000] * 16
#: name -> (weight (1, n) float32, caller's s_g or None)
CASES = {
    "zero": (_groups(_f32(0x00000000, 0x80000000, *[0x00000000] * 14),
                     _f32(0x40C00000, 0xC0400000, 0x3F800000, 0x3F000000, *[0x00000000] * 12)),
             None),
    "subnormal": (_groups(_f32(0x3CC00000, 0xBC400000, 0x3B800000, *[0x00000000] * 13),
                          _f32(0x3B400000, 0xBA000000, *[0x00000000] * 14),
                          _f32(0x40C00000, 0x3F800000, *[0x00000000] * 14)),
                  1.0),
    "midpoint": (_groups(_f32(0x40CC0000, 0x3F800000, *[0x00000000] * 14),
                         _f32(0x40E40000, 0xBF800000, *[0x00000000] * 14)),
                 1.0),
    "ties": (_groups(_f32(0x40C00000, 0x3E800000, 0x3F400000, 0x3FA00000, 0x3FE00000,
                          0x40200000, 0x40600000, 0x40A00000, 0xBE800000, 0xBF400000,
                          0xBFA00000, 0xBFE00000, 0xC0200000, 0xC0600000, 0xC0A00000,
                          0x80000000)),
             1.0),
    "reciprocal": (_groups(_f32(0x45280000, 0x4443FFFF, 0x44C3FFFF, 0xC443FFFF, 0xC4C3FFFF,
                                0x44440000, 0x44C40000, *[0x00000000] * 9)),
                   1.0),
    "all-zero": (_groups(_f32(*[0x00000000] * 16)), None),
    "bf16-amax": (np.array([[81.0, -27.0, 13.5, 6.75] + [0.0] * 12], dtype=ml_dtypes.bfloat16),
                  None),
    "fp16-small-amax": (np.array([[0.03125, -0.0078125, 0.01171875] + [0.0] * 13],
                                 dtype=np.float16), None),
}


def run_case(backend, name):
    """``(scale bytes hex, packed bytes hex, stored global scale as fp32 hex)`` of one case."""
    weight, s_g = CASES[name]
    result = backend.quantize(weight, method="rtn", global_scale=s_g)
    scale_bytes = " ".join(f"{b:02x}" for b in np.asarray(result.scale_bytes).reshape(-1))
    packed = " ".join(f"{b:02x}" for b in np.asarray(result.packed).reshape(-1))
    stored = f"{int(np.float32(result.global_scale).view(np.uint32)):08X}"
    return scale_bytes, packed, stored


def reference_case(name):
    weight, s_g = CASES[name]
    q = quantize(weight, method="rtn", global_scale=s_g)
    return (" ".join(f"{b:02x}" for b in q.scale_bytes.reshape(-1)),
            " ".join(f"{b:02x}" for b in q.packed.reshape(-1)),
            f"{int(np.float32(q.global_scale).view(np.uint32)):08X}")


def adapter(factory):
    backend = get(ADAPTERS + factory)
    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"{backend.name} not available here: {reason}")
    return backend


#: The spec's answer for each case (hscale.reference.quantize), pinned so that a reference
#: change shows here too.
SPEC = {
    "zero": ("00 7e", "80 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "3B124925"),
    "subnormal": ("02 01 38", "d7 02 00 00 00 00 00 00 83 00 00 00 00 00 00 00 "
                  "27 00 00 00 00 00 00 00", "3F800000"),
    "midpoint": ("38 3a", "27 00 00 00 00 00 00 00 a7 00 00 00 00 00 00 00", "3F800000"),
    "ties": ("38", "07 22 44 66 a8 ca ec 8e", "3F800000"),
    "reciprocal": ("7e", "37 b5 4d 06 00 00 00 00", "3F800000"),
}


def test_reference_answers_are_pinned():
    """The hand-built groups' spec answers: zero group 0x00 with the -0.0 kept (0x8); bytes
    0x02 and 0x01 (subnormal scales, the 0x01 floor); midpoints to even (0x38, 0x3A); E2M1 ties
    to even; codes exactly at the division |w| / s."""
    for name, expected in SPEC.items():
        assert reference_case(name) == expected, name


def check_observed(factory, expected):
    """Every hand-built case through the adapter, against the pinned hex; where an entry is
    ``SPEC`` the library agrees with the reference on that case."""
    backend = adapter(factory)
    for name, want in expected.items():
        want = reference_case(name) if want is SPEC else want
        assert run_case(backend, name) == want, (backend.name, name)


def test_torchao_two_level():
    """torchao 0.18 ``NVFP4Tensor.to_nvfp4`` with ``per_tensor_amax_to_scale``.

    Rules: block scales ``fp32(amax_g / 6) / s_g`` clamped to ``[2^-6, 448]`` before the E4M3
    cast, so zero groups and every group needing a subnormal scale get 0x08 (``zero``,
    ``subnormal``; the -0.0 keeps its sign bit); codes from ``w * fp32(fp32(1 / s_g) / e4m3)``:
    one ulp below 1.75 s and 3.5 s (``reciprocal``) the product rounds onto the midpoint and
    then to even (codes 0x4 / 0xC and 0x6 instead of 0x3 / 0xB and 0x5); s_g = amax / 2688
    with no floor: an all-zero tensor gets s_g = 0, 0/0 = NaN block scales (byte 0xFF) and the
    NaN codes 0xC. Midpoints, E2M1 ties at s = 1 and the bf16 / fp16 global scales are the
    spec's."""
    check_observed("torchao_nvfp4:create", {
        "zero": ("08 7e", "80 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "3B124925"),
        "subnormal": ("08 08 38", "a3 00 00 00 00 00 00 00 80 00 00 00 00 00 00 00 "
                      "27 00 00 00 00 00 00 00", "3F800000"),
        "midpoint": SPEC, "ties": SPEC, "bf16-amax": SPEC, "fp16-small-amax": SPEC,
        "reciprocal": ("7e", "47 c6 4e 06 00 00 00 00", "3F800000"),
        "all-zero": ("ff", "cc cc cc cc cc cc cc cc", "00000000"),
    })


def test_torchao_single_level():
    """torchao 0.18 ``NVFP4Tensor.to_nvfp4`` without a per-tensor scale: the block scale
    ``amax_g / 6`` itself, clamped to ``[2^-6, 448]``, is the E4M3 byte and there is no global
    scale (reported as s_g = 1.0): the computed-s_g cases get other bytes (``zero`` 0x38 for the
    amax-6 group, ``bf16-amax`` 0x56 = 13.5 = 81 / 6, ``fp16-small-amax`` 0x08, the 2^-6 floor);
    codes as in the two-level mode."""
    check_observed("torchao_nvfp4:create_single_level", {
        "zero": ("08 38", "80 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "3F800000"),
        "subnormal": ("08 08 38", "a3 00 00 00 00 00 00 00 80 00 00 00 00 00 00 00 "
                      "27 00 00 00 00 00 00 00", "3F800000"),
        "midpoint": SPEC, "ties": SPEC,
        "reciprocal": ("7e", "47 c6 4e 06 00 00 00 00", "3F800000"),
        "all-zero": ("08", "00 00 00 00 00 00 00 00", "3F800000"),
        "bf16-amax": ("56", "c7 12 00 00 00 00 00 00", "3F800000"),
        "fp16-small-amax": ("08", "94 02 00 00 00 00 00 00", "3F800000"),
    })


#: compressed-tensors' qparams and compressor; the global scale is stored as 448 * 6 / amax.
COMPRESSED_TENSORS = {
    "zero": ("20 7e", "00 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "43E00000"),
    "subnormal": ("02 20 38", "d7 02 00 00 00 00 00 00 80 00 00 00 00 00 00 00 "
                  "27 00 00 00 00 00 00 00", "3F800000"),
    "midpoint": SPEC, "reciprocal": SPEC,
    "ties": ("38", "07 22 44 66 a8 ca ec 0e", "3F800000"),
    "all-zero": ("20", "00 00 00 00 00 00 00 00", "3F800000"),
    "bf16-amax": ("7e", "c7 12 00 00 00 00 00 00", "42050000"),
    "fp16-small-amax": ("03", "b7 04 00 00 00 00 00 00", "3F800000"),
}


def test_compressed_tensors():
    """compressed-tensors 0.19 (``generate_gparam``, ``calculate_qparams``,
    ``NVFP4PackedCompressor.compress``).

    Rules: any block scale that is 0 after the E4M3 cast becomes 0.125 (byte 0x20): zero groups
    (``zero``, ``all-zero``) and also the non-zero group of ``subnormal`` whose quotient 2^-11
    rounds to 0 (the spec's floor is 0x01); ``torch.sign(-0.0) = 0`` loses the sign of -0.0
    (code 0x0, ``zero`` and ``ties``), while a negative that rounds to 0 keeps it (0x8,
    ``subnormal``); the global scale is the reciprocal ``2688 / amax`` computed in the weight's
    dtype: bfloat16 rounds it (81 -> 0x42050000 = 33.25, so s_g = 1 / 33.25, not 81 / 2688) and
    float16 overflows for amax < 2688 / 65504 and is replaced by 1.0 (``fp16-small-amax``: r =
    1.0, byte 0x03); an all-zero tensor gets r = 1.0. Codes divide (``x / fp32(e4m3 / r)``), so
    ``reciprocal`` is the spec's."""
    check_observed("compressed_tensors_nvfp4:create", COMPRESSED_TENSORS)


def test_llmcompressor_minmax():
    """llm-compressor 0.14's default weight observer (``memoryless_minmax``) through
    ``initialize_observer`` / ``observe`` / ``update_qparams``: byte for byte the compressed-
    tensors path above (same qparams, same compressor)."""
    check_observed("llmcompressor_nvfp4:create", COMPRESSED_TENSORS)


def test_llmcompressor_mse_observers():
    """llm-compressor's MSE observers are their own scale rules (format profile): the shrink-only
    ``memoryless_mse`` moves the ``midpoint`` group to 0x39, the ``ties`` group to 0x36 and the
    ``reciprocal`` group to 0x7D; ``nvfp4_expanded_mse`` (and its alias ``fouroversix``) also
    expands the global maximum (``zero``: r = 0x43E03968 instead of 448; ``fp16-small-amax``: r =
    0x475B8000, no overflow since its statistics are float32). Zero groups, -0.0 and the
    subnormal floor as in compressed-tensors."""
    base = dict(COMPRESSED_TENSORS)
    check_observed("llmcompressor_nvfp4:create_mse", {
        **base,
        "midpoint": ("38 39", "27 00 00 00 00 00 00 00 a7 00 00 00 00 00 00 00", "3F800000"),
        "ties": ("36", "17 32 54 76 a9 cb ed 0f", "3F800000"),
        "reciprocal": ("7d", "47 c6 4e 06 00 00 00 00", "3F800000"),
    })
    expanded = {
        **base,
        "zero": ("20 7e", "00 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "43E03968"),
        "midpoint": ("38 3e", "27 00 00 00 00 00 00 00 96 00 00 00 00 00 00 00", "3F800000"),
        "ties": ("3d", "06 21 32 54 98 aa cb 0d", "3F800000"),
        "reciprocal": ("7d", "47 c6 4e 06 00 00 00 00", "3F800000"),
        "fp16-small-amax": ("7e", "a6 03 00 00 00 00 00 00", "475B8000"),
    }
    check_observed("llmcompressor_nvfp4:create_expanded_mse", expanded)
    check_observed("llmcompressor_nvfp4:create_fouroversix", expanded)


def test_llmcompressor_imatrix_observer_gathers_h_through_its_own_hook():
    """``imatrix_mse``'s importance is what its own forward pre-hook sums: one token per input
    channel, token j = sqrt(h_j) e_j, gives the sum h (float32 rounding of the square roots'
    squares) over n tokens; and the weighting matters: the channels h favours are reproduced
    better than without importance (its squared error, summed over the rows)."""
    pytest.importorskip("llmcompressor")
    from hscale.backends.interop.llmcompressor_nvfp4 import create_imatrix_mse
    from hscale.report.head_to_head import library_dequantized
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((8, 32)).astype(np.float32)
    h = np.ones(32)
    h[5] = h[21] = 1e4
    adapter = create_imatrix_mse(h)
    seen = {}
    gather = adapter.gather_importance

    def spy(linear):
        gather(linear)
        observer = linear.weight_observer
        seen.update(total=observer._imatrix_sum.double().numpy().copy(),
                    tokens=int(observer._imatrix_count))
    adapter.gather_importance = spy
    weighted = library_dequantized(adapter, adapter.quantize(weight, None, method="rtn"))
    assert seen["tokens"] == 32
    np.testing.assert_allclose(seen["total"], h, rtol=1e-6)
    plain_adapter = create_imatrix_mse(None)
    plain = library_dequantized(plain_adapter, plain_adapter.quantize(weight, None, method="rtn"))
    def favoured_error(deq):
        return float(np.sum((weight[:, [5, 21]] - deq[:, [5, 21]]) ** 2))
    assert favoured_error(weighted) < favoured_error(plain)


def test_modelopt():
    """ModelOpt 0.47 ``NVFP4QTensor.quantize``: zero groups get 1.0 (byte 0x38); block scales
    clamped to ``[2^-9, 448]``, which is the spec's 0x01 floor (``subnormal`` is the spec's);
    the sign bit is ``weight < 0``, so -0.0 gives 0x0 (``zero``, ``ties``); codes divide, so
    ``reciprocal`` is the spec's; an all-zero tensor gets ``weight_scale_2 = 0``, 0/0 = NaN
    block scales (0xFF) and NaN codes that ``searchsorted`` puts past the table (0x7)."""
    check_observed("modelopt_nvfp4:create", {
        "zero": ("38 7e", "00 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "3B124925"),
        "subnormal": SPEC, "midpoint": SPEC, "reciprocal": SPEC,
        "bf16-amax": SPEC, "fp16-small-amax": SPEC,
        "ties": ("38", "07 22 44 66 a8 ca ec 0e", "3F800000"),
        "all-zero": ("ff", "77 77 77 77 77 77 77 77", "00000000"),
    })


def test_fouroversix_static_6():
    """fouroversix 1.0.5 (PyTorch reference, ``static_6``): zero groups 0x00 as the spec, but a
    non-zero group whose scale rounds to 0 keeps byte 0x00 and all-zero codes (``subnormal``
    group 1: no 0x01 floor, the -2^-11 loses its sign); ``x.sign()`` of -0.0 is 0 (code 0x0);
    codes from ``x * fp32(1 / fp32(decode_scale * e4m3))`` (``reciprocal``: 0x4 / 0xC / 0x6).
    The stored amax 0 of an all-zero tensor reads as s_g 1.0."""
    check_observed("fouroversix_nvfp4:create", {
        "zero": ("00 7e", "00 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "3B124925"),
        "subnormal": ("02 00 38", "d7 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 "
                      "27 00 00 00 00 00 00 00", "3F800000"),
        "midpoint": SPEC, "all-zero": SPEC, "bf16-amax": SPEC, "fp16-small-amax": SPEC,
        "ties": ("38", "07 22 44 66 a8 ca ec 0e", "3F800000"),
        "reciprocal": ("7e", "47 c6 4e 06 00 00 00 00", "3F800000"),
    })


def test_autoround():
    """AutoRound ``nv_fp4`` + ``QuantLinear.pack`` (global scale stored as the reciprocal
    ``2688 * fp32(1 / amax)``): zero groups 0x00; a non-zero group whose scale rounds to 0 keeps
    0x00 and zero codes (``subnormal``); ``torch.sign(-0.0) = 0`` loses -0.0's sign; codes from
    ``w * fp32(1 / fp32(e4m3 / r))`` (``reciprocal``); an all-zero tensor stores r = 0
    (``get_reciprocal(0) = 0``), which is no valid reciprocal (the reader's s_g is infinite)."""
    check_observed("autoround_nvfp4:create", {
        "zero": ("00 7e", "00 00 00 00 00 00 00 00 d7 12 00 00 00 00 00 00", "43E00000"),
        "subnormal": ("02 00 38", "d7 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 "
                      "27 00 00 00 00 00 00 00", "3F800000"),
        "midpoint": SPEC,
        "ties": ("38", "07 22 44 66 a8 ca ec 0e", "3F800000"),
        "reciprocal": ("7e", "47 c6 4e 06 00 00 00 00", "3F800000"),
        "all-zero": ("00", "00 00 00 00 00 00 00 00", "00000000"),
        "bf16-amax": ("7e", "c7 12 00 00 00 00 00 00", "4204BDA1"),
        "fp16-small-amax": ("7e", "b7 04 00 00 00 00 00 00", "47A80000"),
    })


def test_fpquant_says_why_it_cannot_run():
    """FP-Quant's NVFP4 quantizer is QuTLASS's CUDA ``fusedQuantizeNv``: without QuTLASS or a
    CUDA device the adapter is unavailable and names what is missing."""
    backend = get(ADAPTERS + "fpquant_nvfp4:create")
    ok, reason = backend.available()
    if ok:
        pytest.skip("fp-quant with QuTLASS and a CUDA device: nothing to check here")
    assert "qutlass" in reason.lower() or "cuda" in reason.lower()
