"""The tile kind's judge (docs/spec.md section 13): a kernel that quantizes with one scale per
16 x 16 tile, judged bit for bit (NVFP4-2D-1) and by transposition (NVFP4-2D-2: the kernel's
result for ``W^T`` must be the transpose of its result for ``W``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hscale.reference.activations import quantize_activations
from hscale.reference.tile_scaling import TILE, quantize_2d, transposed

from .activation_domain import ObservedActivations
from .findings import Finding, Findings, fp32_hex
from .quantized_result import read_quantized


@dataclass(frozen=True)
class TileCase:
    w: np.ndarray  # (m, n), multiples of 16, float32 or bfloat16
    id: str = ""
    title: str = ""
    clauses: tuple = ()

    def describe(self) -> str:
        return f"case {self.id or '(generated)'} ({self.title or '2d'}), w {np.shape(self.w)}"


def observe_2d(result, shape) -> tuple[ObservedActivations | None, list]:
    return read_quantized(result, shape, "NVFP4-2D-1")


def diagnose_2d(case: TileCase, observed: ObservedActivations, limit: int = 20) -> Findings:
    """NVFP4-2D-1, bit for bit: the global scale, each tile's byte on every row of the tile,
    each code; a result that is the 1 x 16 scaling's says so."""
    diagnosis = Findings()
    expected = quantize_2d(case.w)
    if np.float32(observed.global_scale) != np.float32(expected.global_scale):
        diagnosis.findings.append(Finding(
            "NVFP4-2D-1", f"global scale expected {fp32_hex(expected.global_scale)} observed "
            f"{fp32_hex(observed.global_scale)} (2688 / the tensor's amax)", kind="sg"))
        return diagnosis
    if np.array_equal(observed.scale_bytes, expected.scale_bytes) and \
            np.array_equal(observed.codes, expected.codes):
        return diagnosis
    per_group = quantize_activations(case.w, expected.global_scale, recipe="exact")
    if not np.array_equal(observed.scale_bytes, expected.scale_bytes) and \
            np.array_equal(observed.scale_bytes, per_group.scale_bytes):
        diagnosis.findings.append(Finding(
            "NVFP4-2D-1", "the scale bytes are one per 1 x 16 group (each group's own amax), not "
            "one per 16 x 16 tile", kind="byte"))
        return diagnosis
    for r, i in np.argwhere(observed.scale_bytes != expected.scale_bytes)[:limit]:
        diagnosis.findings.append(Finding(
            "NVFP4-2D-1", f"scale byte expected 0x{int(expected.scale_bytes[r, i]):02X} (tile "
            f"({int(r) // TILE}, {int(i)})'s) observed 0x{int(observed.scale_bytes[r, i]):02X}",
            group=(int(r), int(i)), kind="byte"))
    if diagnosis.findings:
        return diagnosis
    w32 = np.asarray(case.w).astype(np.float32)
    for r, j in np.argwhere(observed.codes != expected.codes)[:limit]:
        want, got = f"0x{int(expected.codes[r, j]):X}", f"0x{int(observed.codes[r, j]):X}"
        diagnosis.findings.append(Finding(
            "NVFP4-2D-1", f"w = {float(w32[r, j])!r} ({fp32_hex(w32[r, j])}) at the tile's byte "
            f"0x{int(expected.scale_bytes[r, j // 16]):02X}: code expected {want} observed "
            f"{got}", group=(int(r), int(j) // 16), element=int(j) % 16, kind="code",
            expected=want, observed=got))
    return diagnosis


def transpose_findings(of_w: ObservedActivations, of_wt: ObservedActivations) -> list[Finding]:
    """NVFP4-2D-2: the result for ``W^T`` against the transpose of the result for ``W``."""
    from hscale.reference.activations import QuantizedActivations
    codes_t, bytes_t = transposed(QuantizedActivations(of_w.codes, of_w.scale_bytes,
                                                       of_w.global_scale, of_w.multiplier))
    findings = []
    if np.float32(of_w.global_scale) != np.float32(of_wt.global_scale):
        findings.append(Finding("NVFP4-2D-2", f"global scale of W {fp32_hex(of_w.global_scale)}"
                                f", of W^T {fp32_hex(of_wt.global_scale)}", kind="sg"))
    differ = np.argwhere(bytes_t != of_wt.scale_bytes)
    if len(differ):
        r, i = (int(v) for v in differ[0])
        findings.append(Finding(
            "NVFP4-2D-2", f"{len(differ)} scale bytes of W^T are not W's transposed: byte "
            f"0x{int(of_wt.scale_bytes[r, i]):02X}, W's tile gives 0x{int(bytes_t[r, i]):02X}",
            group=(r, i), kind="byte"))
    differ = np.argwhere(codes_t != of_wt.codes)
    if len(differ):
        r, j = (int(v) for v in differ[0])
        findings.append(Finding(
            "NVFP4-2D-2", f"{len(differ)} codes of W^T are not W's transposed: code "
            f"0x{int(of_wt.codes[r, j]):X}, W's gives 0x{int(codes_t[r, j]):X}",
            group=(r, j // 16), element=j % 16, kind="code"))
    return findings
