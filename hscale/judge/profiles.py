"""The judging profiles and the named allowances (docs/spec.md section 7, docs/conformance.md).

- ``exact``: codes, packed bytes, scale bytes, s_g and (where reported) initial bytes and delta
  are bit-identical to the reference; required of this project's own backends.
- ``faithful``: a certificate for implementations with other arithmetic: each scale byte within
  the window of an acceptable initial byte, its objective within a stated tolerance of the
  window minimum, each code the correct rounding for the byte actually chosen; each divergence
  of section 7 excused only by its named allowance, and counted.
- ``format``: for implementations with their own scale rule (an MSE observer, a 4-or-6 choice,
  an optimiser): only the format clauses are judged: s_g, zero groups, scale bytes on the
  ladder, every code the correct rounding for the byte chosen, packing. The rule itself is not
  the spec's and is described, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

EXACT, FAITHFUL, FORMAT = "exact", "faithful", "format"
PROFILES = (EXACT, FAITHFUL, FORMAT)


@dataclass(frozen=True)
class Allowance:
    name: str
    clause: str  # the clause it relaxes
    text: str


ALLOWANCES = {a.name: a for a in (
    Allowance("zero-group-byte", "NVFP4-ZERO-1",
              "a zero group may carry any scale byte 0x00..0x7E (ModelOpt 1.0, torchao 2^-6, "
              "compressed-tensors 0.125); its codes must still be sign and magnitude 0, its "
              "delta is not checked"),
    Allowance("negative-zero", "NVFP4-E2M1-3",
              "an element whose code is sign-and-magnitude-0 (an exact -0.0, or a negative that "
              "rounds to 0) may be 0x0 instead of 0x8"),
    Allowance("fp32-scale-rounding", "NVFP4-INIT-1",
              "the group quotient amax_g / (6 s_g) computed in fp32 in another order: the "
              "initial byte may be one rung off where the quotient is within 2^-20 (relative) "
              "of an E4M3 midpoint"),
    Allowance("reciprocal-multiply", "NVFP4-E2M1-2",
              "element codes from |w| * fp32(1/s): a code may be either neighbour where |w|/s "
              "is within 2^-20 (relative) of an E2M1 midpoint, unless s_g and the E4M3 scale "
              "are both powers of two (then 1/s and the product are exact: ties go to even)"),
    Allowance("no-subnormal-scales", "NVFP4-INIT-1",
              "scale bytes clamped to the smallest normal E4M3 0x08: the initial byte may be "
              "max(c0, 0x08) and the window is clipped at 0x08"),
    Allowance("reciprocal-global-scale", "NVFP4-GS-1",
              "s_g derived from the stored reciprocal 6C/amax: it may be one fp32 ulp off the "
              "spec's s_g, and initial bytes and codes near a midpoint (2^-20 relative) may go "
              "either way"),
    Allowance("low-precision-global-scale", "NVFP4-GS-1",
              "the reciprocal 6C/amax computed in the weight's bfloat16 or float16: s_g within "
              "2^-7 (relative) of the spec's; bytes and codes are judged against the stored s_g"),
    Allowance("supplied-reciprocal", "NVFP4-GS-3",
              "an implementation that stores the global scale as its reciprocal keeps a "
              "caller's s_g as the nearest fp32 reciprocal r = fp32(1/s_g); where no fp32 r "
              "reads back as s_g (about 17% of fp32 values), the multiplier it means, "
              "fp32(1/r), is one ulp from s_g, and bytes and codes are judged at it"),
    Allowance("underflow-zero-group", "NVFP4-INIT-1",
              "a non-zero group whose amax_g / (6 s_g) rounds to E4M3 zero stored as a zero "
              "group (codes of magnitude 0, byte 0x00, or another byte with zero-group-byte) "
              "instead of getting byte 0x01"),
)}


def check_profile(profile: str, allowances=()) -> tuple[str, frozenset]:
    """The profile and its allowances, checked: ValueError naming the bad one."""
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r}: must be one of {', '.join(PROFILES)}")
    unknown = [a for a in allowances if a not in ALLOWANCES]
    if unknown:
        raise ValueError(f"unknown allowance {unknown[0]!r}; known: {', '.join(ALLOWANCES)}")
    if allowances and profile == EXACT:
        raise ValueError("allowances are valid only with the faithful or format profile (the "
                         "exact profile admits no divergence)")
    return profile, frozenset(allowances)


#: The kind the profiles and allowances judge: a weight quantizer (spec sections 1-7). An
#: activation quantizer is judged under the recipe it declares (NVFP4-ACT-5), a GEMM under its
#: accumulation model (NVFP4-GEMM-4): neither has a profile or an allowance.
PROFILE_KIND = "weight"


def check_profile_applies(profile: str, allowances, kinds_by_backend: dict) -> None:
    """A profile other than exact, or an allowance, judges the weight kind only: a ValueError
    in one line when a backend of the run does not declare it (``kinds_by_backend``: backend
    id -> the kinds it declares), rather than a certificate that records a choice which did
    nothing."""
    if profile == EXACT and not allowances:
        return
    for ident, kinds in kinds_by_backend.items():
        if PROFILE_KIND not in kinds:
            chosen = " ".join([f"--profile {profile}"] + [f"--allow {a}" for a in allowances])
            raise ValueError(
                f"{chosen}: the profiles and allowances judge a weight quantizer, and backend "
                f"{ident!r} declares {', '.join(sorted(kinds))} (an activation quantizer is "
                "judged under the recipe it declares, a GEMM under its accumulation model); "
                "run it without them, or in a session of its own")
