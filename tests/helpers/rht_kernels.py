"""Kernels of the random Hadamard transform written from docs/spec.md section 12 alone, with
numpy and ml_dtypes (and the independent exact-recipe kernel of activation_kernels), importing
nothing of hscale: the transform as a float64 matrix product (exact for the blocks used here:
16 terms of bfloat16 values within 2^40 of each other), rounded to bfloat16 by ml_dtypes, then
quantized with the dynamic global scale of the transformed amax.

``Rht(mask, fault)`` with the faults of the issue: ``signs`` (the sign vector's bit 0 flipped),
``plain`` (no sign vector), ``no-bf16`` (the bfloat16 rounding skipped), ``amax-before`` (the
global scale from the input's amax), ``rowwise`` (the rows transformed, not the column-wise
copy). The transforms of NVFP4-RHT-4 (``ALGEBRAIC``): ``entry-flipped`` (entry (3, 9) of the
matrix with the wrong sign), ``no-quarter`` (the 1/4 left out), ``quarter-ulp`` (1/4 one fp32
ulp high), ``column-swapped`` (columns 0 and 5 exchanged: orthogonal). ``padding="zeros"``:
a token count not a multiple of 16 padded with zero tokens (fault ``pads-clamped``: with copies
of the last token, as a kernel whose loads clamp the index)."""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np

from .activation_kernels import Exact

TE_MASK = 0xD7E8
FAULTS = ("signs", "plain", "no-bf16", "amax-before", "rowwise")
ALGEBRAIC = ("entry-flipped", "no-quarter", "quarter-ulp", "column-swapped")


def hadamard16() -> np.ndarray:
    h = np.array([[1.0]])
    while h.shape[0] < 16:
        h = np.vstack([np.hstack([h, h]), np.hstack([h, -h])])
    return h


class Rht:
    version = "independent rht kernel 1"
    kinds = frozenset({"rht"})
    rht_profile = "exact"
    rht_axis = "columnwise"

    def __init__(self, mask: int = TE_MASK, fault: str | None = None, padding: str = "refuse"):
        self.rht_sign_mask = mask
        self.rht_padding = padding
        self.fault = fault
        self.name = "rht" + (f"-{fault}" if fault else "")

    def available(self):
        return True, ""

    def quantize_rht(self, x):
        x = np.asarray(x)
        source = (x if self.fault == "rowwise" else x.T).astype(np.float64)
        mask = {"signs": self.rht_sign_mask ^ 1, "plain": 0}.get(self.fault, self.rht_sign_mask)
        signs = np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])
        quarter = {"no-quarter": 1.0, "quarter-ulp": 0.25 * (1 + 2.0 ** -23)}.get(self.fault,
                                                                                 0.25)
        t = signs[:, None] * hadamard16() * quarter
        if self.fault == "entry-flipped":  # one entry with the wrong sign: not orthogonal
            t[3, 9] = -t[3, 9]
        if self.fault == "column-swapped":  # columns 0 and 5 exchanged: orthogonal
            t[:, [0, 5]] = t[:, [5, 0]]
        if self.rht_padding == "zeros":  # fault "pads-clamped": the last token copied
            mode = "edge" if self.fault == "pads-clamped" else "constant"
            source = np.pad(source, ((0, 0), (0, -source.shape[1] % 16)), mode=mode)
        rows, n = source.shape
        y = (source.reshape(rows, n // 16, 16) @ t).reshape(rows, n)
        y = y.astype(np.float32) if self.fault == "no-bf16" else y.astype(ml_dtypes.bfloat16)
        g = None
        if self.fault == "amax-before":
            g = np.float32(448 * 6) / np.float32(np.abs(x.astype(np.float32)).max())
        result = Exact().quantize_activations(y, g)
        return SimpleNamespace(codes=result.codes, scale_bytes=result.scale_bytes,
                               global_scale=result.global_scale)


def rht():
    return Rht()


def declared_plain():
    """A plain transform, declared so (mask 0): it conforms (the fault ``plain`` declares
    TransformerEngine's mask)."""
    return Rht(0)


for _fault in FAULTS:
    globals()[_fault.replace("-", "_")] = (lambda f: (lambda: Rht(fault=f)))(_fault)
