"""An activation quantizer's declared interface (the activation kind's declarations,
``hscale.judge.kinds``), and how the judges read what it returns.

A run-time kernel takes bfloat16 or float16, is given the global scale as the quantization
multiplier ``g`` (or, torchao, as ``a = 1/g``), may compute it itself from the tensor, and lays
its scale bytes out for its GEMM (128x4, 8x4, or row-major). None of that is numerics: the
kernel declares it and the suite adapts (NVFP4-ACT-1, -10, -11).

``observe_activations`` reads a result: ``codes`` (tokens, n) or ``packed`` (tokens, n/2),
``scale_bytes`` in the declared layout (unswizzled by the judges' own statement of each layout,
``hscale.judge.domain``, with the padding required to be 0x00), and ``global_scale`` in the
declared convention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hscale.reference.constants import GROUP_SIZE

from .diagnose import result_array
from .domain import INPUT_DTYPES, unswizzle_layout
from .findings import Finding

ACTIVATION_DTYPE_NAMES = tuple(INPUT_DTYPES)  # float32, float16, bfloat16 (NVFP4-ACT-11)
ACTIVATION_LAYOUTS = ("row-major", "swizzled-128x4", "swizzled-8x4")  # NVFP4-ACT-10
#: ``divisor``: the kernel takes and returns g (SFScaleVal, what compressed-tensors stores);
#: ``multiplier``: a = 1/g (torchao's per_tensor_scale, ModelOpt's input_scale).
SCALE_CONVENTIONS = ("divisor", "multiplier")
LAYOUT_CLAUSE = "NVFP4-ACT-10"


@dataclass(frozen=True)
class ActivationDomain:
    """What an activation quantizer declared: its recipe, its global-scale modes and
    convention, its scale layout, its input dtypes (the kinds table reads and checks them)."""

    recipe: str
    modes: tuple[str, ...] = ("static",)
    convention: str = "divisor"
    layout: str = "row-major"
    dtypes: tuple[str, ...] = ACTIVATION_DTYPE_NAMES

    @classmethod
    def of(cls, declarations: dict) -> "ActivationDomain":
        """From the checked declarations of the activation kind (``Declared.declarations``)."""
        return cls(declarations["activation_recipe"],
                   tuple(declarations["activation_global_scale"]),
                   declarations["activation_scale_convention"],
                   declarations["activation_scale_layout"],
                   tuple(d for d in ACTIVATION_DTYPE_NAMES
                         if d in declarations["activation_dtypes"]))

    def describe(self) -> str:
        return (f"recipe {self.recipe}; global scale {'/'.join(self.modes)} as the "
                f"{self.convention}; scale bytes {self.layout}; inputs {'/'.join(self.dtypes)}")

    @property
    def numpy_dtypes(self) -> list[np.dtype]:
        return [INPUT_DTYPES[d] for d in self.dtypes]

    def accepts_dtype(self, dtype) -> bool:
        return np.dtype(dtype).name in self.dtypes

    def given_scale(self, g: np.float32) -> np.float32:
        """What the kernel is handed for the quantization multiplier ``g``: g, or fp32(1/g)."""
        return np.float32(g) if self.convention == "divisor" else np.float32(1) / np.float32(g)


@dataclass(frozen=True)
class ObservedActivations:
    """What a kernel returned, read: codes uint8 (tokens, n), scale bytes uint8 (tokens, n/16)
    row-major, and the global scale it reports as g and as a (None where it reports none), the
    one it stores being ``convention``'s (the other its fp32 reciprocal)."""

    codes: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32 | None
    multiplier: np.float32 | None
    convention: str = "divisor"

    @property
    def stored(self) -> np.float32 | None:
        """The global scale as the kernel returned it (g, or a)."""
        return self.global_scale if self.convention == "divisor" else self.multiplier


def observe_activations(result, shape, domain: ActivationDomain):
    """``(ObservedActivations or None, findings)``: the result of a kernel for an input of
    ``shape`` (tokens, n), read as the domain declares it; findings about what cannot be read
    (a missing member, a shape, a dtype, a layout of the wrong size, non-zero padding)."""
    tokens, n = shape
    findings: list[Finding] = []
    if not hasattr(result, "scale_bytes") or not (hasattr(result, "codes")
                                                  or hasattr(result, "packed")):
        missing = ["scale_bytes"] if not hasattr(result, "scale_bytes") else []
        missing += [] if (hasattr(result, "codes") or hasattr(result, "packed")) else \
            ["codes or packed"]
        return None, [Finding("NVFP4-ACT-3", f"the result ({type(result).__name__}) lacks "
                              f"{', '.join(missing)}", kind="structure")]
    codes = _array(result, "codes", (tokens, n), findings)
    packed = _array(result, "packed", (tokens, n // 2), findings)
    if codes is not None and codes.size and int(codes.max()) > 0xF:
        findings.append(Finding("NVFP4-ACT-3", f"codes: a code is a 4-bit value 0x0..0xF, "
                                f"observed 0x{int(codes.max()):X}", kind="structure"))
    if codes is None and packed is not None:
        codes = np.empty((tokens, n), np.uint8)
        codes[:, 0::2], codes[:, 1::2] = packed & 0xF, packed >> 4
    elif codes is not None and packed is not None:
        repacked = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        if not np.array_equal(repacked, packed):
            r, b = (int(v) for v in np.argwhere(repacked != packed)[0])
            findings.append(Finding("NVFP4-ACT-3", f"packed byte [{r}, {b}] is not codes "
                                    f"{2 * b} and {2 * b + 1} packed (element 2i in the low "
                                    "nibble)", kind="pack"))
    scale_bytes = _scale_bytes(result, tokens, n // GROUP_SIZE, domain.layout, findings)
    g, a = _global_scale(result, domain.convention, findings)
    if findings or codes is None or scale_bytes is None:
        return None, findings
    return ObservedActivations(codes, scale_bytes, g, a, domain.convention), []


def _array(result, name, shape, findings):
    """``result.name`` as a uint8 array of ``shape``, or None (absent, or a finding)."""
    before = len(findings)
    array = result_array(result, name, tuple(shape), "NVFP4-ACT-3", "uint8", findings)
    return array if len(findings) == before else None


def _scale_bytes(result, tokens, scale_cols, layout, findings):
    try:
        raw = np.asarray(result.scale_bytes)
    except Exception as exc:  # noqa: BLE001
        findings.append(Finding(LAYOUT_CLAUSE, f"scale_bytes: cannot be read as a numpy array "
                                f"({exc})", kind="structure"))
        return None
    if raw.dtype != np.uint8:
        findings.append(Finding(LAYOUT_CLAUSE, f"scale_bytes: dtype expected uint8 observed "
                                f"{raw.dtype}", kind="structure"))
        return None
    try:
        scale_bytes, padding = unswizzle_layout(raw, layout, tokens, scale_cols)
    except ValueError as exc:
        findings.append(Finding(LAYOUT_CLAUSE, f"scale_bytes (declared {layout}): {exc}",
                                kind="structure"))
        return None
    if np.any(padding):
        findings.append(Finding(LAYOUT_CLAUSE, f"scale_bytes (declared {layout}): "
                                f"{int(np.count_nonzero(padding))} of {padding.size} padding "
                                "bytes are not 0x00 (a GEMM reads them)", kind="layout"))
        return None
    return scale_bytes


def _global_scale(result, convention, findings):
    """(g, a) from the result's ``global_scale`` in the declared convention, or (None, None)."""
    value = getattr(result, "global_scale", None)
    if value is None:
        return None, None
    try:
        number = float(np.asarray(value).reshape(()))
    except Exception:  # noqa: BLE001
        findings.append(Finding("NVFP4-ACT-1", f"global_scale: {value!r} is not one number",
                                kind="structure"))
        return None, None
    if math.isfinite(number) and float(np.float32(number)) != number:
        findings.append(Finding("NVFP4-ACT-1", f"global_scale: {number!r} is not an fp32 value",
                                kind="structure"))
        return None, None
    one, stored = np.float32(1), np.float32(number)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        other = one / stored
    return (stored, other) if convention == "divisor" else (other, stored)
