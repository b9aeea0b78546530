"""The rht kind's judge (docs/spec.md section 12): a kernel that quantizes after the 16 x 16
random Hadamard transform, judged bit for bit under its declared sign mask, rounding profile
and axis.

A result is first compared with what the reference makes of the same input under the
declared options and under each single departure from them, so that a finding names the rule
broken: another sign vector (a plain one, TransformerEngine's, or the declared one with one sign
flipped), axis, or padding (a short block filled with copies of its last token) (NVFP4-RHT-1), the transformed values rounded otherwise
(NVFP4-RHT-2), the global amax taken before the transform (NVFP4-RHT-3); anything else is
judged by the activation judge on the transformed values under the profile's recipe (its
findings cited as NVFP4-RHT-3, with the recipe's clause in their text).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hscale.reference.activations import RANGE, quantize_activations
from hscale.reference.hadamard import PROFILES, TE_SIGN_MASK
from hscale.reference.rht_quantize import AXES, RECIPE_OF_PROFILE, quantize_rht, transformed

from .activation_domain import ObservedActivations
from .activations import ActivationCase, diagnose_activations
from .findings import Finding, Findings, fp32_hex
from .quantized_result import read_quantized


@dataclass(frozen=True)
class RhtDomain:
    mask: int = TE_SIGN_MASK
    profile: str = "exact"
    axis: str = "columnwise"
    padding: str = "refuse"

    @classmethod
    def of(cls, declarations: dict) -> "RhtDomain":
        return cls(int(declarations["rht_sign_mask"]), declarations["rht_profile"],
                   declarations["rht_axis"], declarations.get("rht_padding", "refuse"))

    def describe(self) -> str:
        return (f"sign mask 0x{self.mask:04X}, profile {self.profile}, axis {self.axis}, "
                f"padding {self.padding}")

    def options(self, **changed) -> dict:
        """The reference's keyword arguments under this domain, with ``changed`` ones."""
        return {"mask": self.mask, "profile": self.profile, "axis": self.axis,
                "padding": self.padding, **changed}


@dataclass(frozen=True)
class RhtCase:
    x: np.ndarray  # (tokens, n) bfloat16 or float32
    id: str = ""
    title: str = ""
    clauses: tuple = ()

    def describe(self) -> str:
        return f"case {self.id or '(generated)'} ({self.title or 'rht'}), x {np.shape(self.x)}"


def read_rht_mask(backend, label: str) -> int:
    """``rht_sign_mask``: a 16-bit integer (default TransformerEngine's 0xD7E8)."""
    value = getattr(backend, "rht_sign_mask", TE_SIGN_MASK)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not \
            0 <= int(value) <= 0xFFFF:
        raise ValueError(f"{label}: rht_sign_mask = {value!r}: a 16-bit integer, bit i set where "
                         "s_i = -1 (NVFP4-RHT-1)")
    return int(value)


def observe_rht(result, shape) -> tuple[ObservedActivations | None, list]:
    """What the kernel returned for the transformed tensor of ``shape``."""
    return read_quantized(result, shape, "NVFP4-RHT-1", "the transformed tensor")


def _same(observed: ObservedActivations, result) -> bool:
    return (np.float32(observed.global_scale) == np.float32(result.global_scale)
            and np.array_equal(observed.scale_bytes, result.scale_bytes)
            and np.array_equal(observed.codes, result.codes))


def _clamped(x, domain: RhtDomain) -> np.ndarray | None:
    """``x`` with its transformed axis filled to a multiple of 16 by copies of its last
    element, or None when nothing is padded."""
    x = np.asarray(x)
    axis = 0 if domain.axis == "columnwise" else 1
    short = -x.shape[axis] % 16
    if domain.padding != "zeros" or not short:
        return None
    last = np.take(x, [-1], axis=axis)
    return np.concatenate([x, np.repeat(last, short, axis=axis)], axis=axis)


def departures(case: RhtCase, domain: RhtDomain) -> list[tuple[str, str, object]]:
    """``(clause, what, result)`` for each single departure from the declared options."""
    out = []
    # a plain transform, TransformerEngine's vector, and the declared one with one sign flipped
    flips = {domain.mask ^ (1 << i) for i in range(16)}
    for mask in sorted({0, TE_SIGN_MASK, *flips} - {domain.mask}):
        out.append(("NVFP4-RHT-1", f"the sign mask 0x{mask:04X}, not the declared "
                    f"0x{domain.mask:04X}", quantize_rht(case.x, **domain.options(mask=mask))))
    for axis in AXES:
        if axis != domain.axis:
            try:
                other = quantize_rht(case.x, **domain.options(axis=axis))
            except ValueError:  # that axis is no multiple of 16, and the kernel refuses
                continue
            out.append(("NVFP4-RHT-1", f"the transform along the {axis} axis, not the declared "
                        f"{domain.axis}", other))
    clamped = _clamped(case.x, domain)
    if clamped is not None:
        out.append(("NVFP4-RHT-1", "the padded tokens not zero: the last block filled with "
                    "copies of the last token (a clamped load)",
                    quantize_rht(clamped, **domain.options())))
    for profile in PROFILES:
        if profile != domain.profile:
            y = transformed(case.x, **domain.options(profile=profile))
            out.append(("NVFP4-RHT-2", f"the transformed values rounded as {profile} ("
                        f"{np.dtype(PROFILES[profile]).name}), not {domain.profile}",
                        quantize_activations(y, None,
                                             recipe=RECIPE_OF_PROFILE[domain.profile])))
    source = np.asarray(case.x).astype(np.float32)
    amax = np.float32(np.max(np.abs(source)))
    if amax > 0:
        y = transformed(case.x, **domain.options())
        out.append(("NVFP4-RHT-3", "the global scale from the amax before the transform "
                    f"(2688 / {float(amax)!r})", quantize_activations(
                        y, RANGE / amax, recipe=RECIPE_OF_PROFILE[domain.profile])))
    return out


def diagnose_rht(case: RhtCase, observed: ObservedActivations, domain: RhtDomain) -> Findings:
    diagnosis = Findings()
    expected = quantize_rht(case.x, **domain.options())
    if _same(observed, expected):
        return diagnosis
    for clause, what, result in departures(case, domain):
        if _same(observed, result):
            diagnosis.findings.append(Finding(
                clause, f"the result is exactly the reference's with {what} (declared: "
                f"{domain.describe()}); global scale expected {fp32_hex(expected.global_scale)} "
                f"observed {fp32_hex(observed.global_scale)}", kind="departure"))
            return diagnosis
    y = transformed(case.x, **domain.options())
    recipe = RECIPE_OF_PROFILE[domain.profile]
    judged = diagnose_activations(ActivationCase(y, None, case.id, case.title), observed, recipe)
    for finding in judged.findings:
        diagnosis.findings.append(Finding(
            "NVFP4-RHT-3", f"{finding.text} (the {recipe} recipe on the transformed values, "
            f"{finding.clause})", finding.group, finding.element, finding.kind,
            finding.expected, finding.observed))
    return diagnosis  # none: admitted by the recipe (a fast-math reciprocal within one ulp)
