"""The GEMM judge (spec section 10): what a GEMM kernel declares, the operands as it receives
them, what it returned, and every output element outside the admissible interval of its
declared accumulation model, as findings naming the clause.

- ``GemmDomain``: the declarations of a kernel of the gemm kind (its accumulation model, output
  dtypes, first operand, scale layout, shape multiples), read from the adapter and checked;
- ``GemmOperand`` / ``gemm_arguments``: a case's operands as the kernel receives them
  (packed codes, scale bytes in the declared layout, the global scale);
- ``observe_gemm``: what the kernel returned, as an array of output-dtype values, or findings
  about its structure;
- ``judge_gemm``: every element outside the admissible interval (NVFP4-GEMM-7), each with the
  clause that the observation breaks: the judge tries the slips the field makes (the nibble
  order and the scale layout, NVFP4-GEMM-2; another global-scale placement, -5; another output
  rounding, -6; a narrower or truncating accumulator, -4) and names the one that explains the
  value.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hscale.reference import pack_codes
from hscale.reference.accumulation import PRESETS, GemmModel, reference_output
from hscale.reference.constants import GROUP_SIZE
from hscale.reference.float_formats import DTYPES
from hscale.reference.gemm import Nvfp4Tensor
from hscale.reference.float_formats import FORMATS, float_format

from .cases import GemmCase
from .diagnose import LISTED, value_hex
from .findings import Finding, plural
from .gemm_slips import attribute

SCALE_LAYOUTS = ("row-major", "swizzled-128x4")
#: The first operand a kernel takes: NVFP4 (W4A4), or activations of a dtype, or ggml's Q8_0
#: blocks (judged on the fp32 values they decode to, NVFP4-GEMM-8).
ACTIVATIONS = ("nvfp4", "float32", "bfloat16", "float16", "q8_0")
OUT_DTYPES = tuple(FORMATS)
#: Q8_0 (ggml): 32 activations per block, int8 values times one fp16 scale.
Q8_0_BLOCK = 32


# -- the declarations of the gemm kind, each read and checked by one function ---------------
# (hscale.judge.kinds's row of the gemm kind and GemmDomain.of use the same ones.)

def parse_model(value) -> GemmModel:
    """``gemm_model``: a preset name (``fp32``, ``fp16``, ...), a mapping of ``GemmModel``'s
    fields, or a ``GemmModel`` (NVFP4-GEMM-4, -5)."""
    return GemmModel.parse(value)


def parse_out_dtypes(value) -> tuple[str, ...]:
    """``gemm_out_dtypes``: the output dtypes, a tuple of float32, bfloat16, float16."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names:
        raise ValueError(f"no output dtype; one or several of {', '.join(OUT_DTYPES)}")
    return tuple(float_format(name).name for name in names)


def parse_activations(value) -> tuple[str, ...]:
    """``gemm_activations``: the first operands, a tuple of nvfp4 and activation formats."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or any(name not in ACTIVATIONS for name in names):
        raise ValueError(f"one or several of {', '.join(ACTIVATIONS)}")
    return names


def parse_scale_layout(value) -> str:
    """``gemm_scale_layout``: row-major or swizzled-128x4 (NVFP4-GEMM-2)."""
    if value not in SCALE_LAYOUTS:
        raise ValueError(f"one of {', '.join(SCALE_LAYOUTS)}")
    return value


def parse_shape_multiple(value) -> tuple[int, int, int]:
    """``gemm_shape_multiple``: (M, N, K) positive integers, K a multiple of 16."""
    multiple = tuple(value)
    if (len(multiple) != 3 or any(isinstance(m, bool) or not isinstance(m, (int, np.integer))
                                  or m < 1 for m in multiple) or multiple[2] % GROUP_SIZE):
        raise ValueError(f"(M, N, K), positive integers, K a multiple of {GROUP_SIZE}")
    return tuple(int(m) for m in multiple)


#: attribute -> (its parser, its default; None: required), in the order the docs list them.
DECLARATIONS = {
    "gemm_model": (parse_model, None),
    "gemm_out_dtypes": (parse_out_dtypes, ("float32",)),
    "gemm_activations": (parse_activations, ("nvfp4",)),
    "gemm_scale_layout": (parse_scale_layout, "row-major"),
    "gemm_shape_multiple": (parse_shape_multiple, (1, 1, GROUP_SIZE)),
}


def read_declaration(backend, attribute: str, label: str = "backend"):
    """The backend's ``attribute`` (or its default), parsed: a ValueError names the attribute,
    what it holds and what it may hold."""
    parse, default = DECLARATIONS[attribute]
    if not hasattr(backend, attribute):
        if default is None:
            raise ValueError(f"{label}: declares the gemm kind but no {attribute!r} (its "
                             f"accumulation model: one of {', '.join(PRESETS)}, or a mapping of "
                             "GemmModel's fields; spec NVFP4-GEMM-4)")
        return parse(default)
    value = getattr(backend, attribute)
    try:
        return parse(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{label}: {attribute} = {value!r}: {exc}") from None


def declaration_json(backend, attribute: str, label: str = "backend"):
    """``read_declaration`` as the certificate records it (plain JSON values; the model as its
    fields and its description)."""
    value = read_declaration(backend, attribute, label)
    if isinstance(value, GemmModel):
        return {**value.as_json(), "description": value.describe()}
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class GemmDomain:
    """What a kernel of the gemm kind declares (docs/backends.md): ``gemm_model``, its
    accumulation model (required); ``gemm_out_dtypes``, the output dtypes it produces (default
    float32); ``gemm_activations``, what it takes as the first operand (default ``nvfp4``: both
    operands NVFP4; float32, bfloat16, float16, q8_0: activations of a weight-only kernel,
    NVFP4-GEMM-8); ``gemm_scale_layout``, the layout it reads scale bytes in (default
    row-major, NVFP4-GEMM-2); ``gemm_shape_multiple``, (M, N, K) its shapes must be multiples
    of (default (1, 1, 16)). Each is read by its parser above."""

    model: GemmModel
    out_dtypes: tuple[str, ...] = ("float32",)
    activations: tuple[str, ...] = ("nvfp4",)
    scale_layout: str = "row-major"
    shape_multiple: tuple[int, int, int] = (1, 1, GROUP_SIZE)

    @classmethod
    def of(cls, backend, label: str = "backend") -> "GemmDomain":
        return cls(*(read_declaration(backend, attribute, label) for attribute in DECLARATIONS))

    def describe(self) -> str:
        first = " or ".join("NVFP4 x NVFP4" if a == "nvfp4" else f"{a} activations x NVFP4"
                            for a in self.activations)
        return (f"{first}; model: {self.model.describe()}; outputs "
                f"{'/'.join(self.out_dtypes)}; scale bytes {self.scale_layout}; shapes "
                f"multiples of {' x '.join(str(m) for m in self.shape_multiple)} (M x N x K)")

    def as_json(self) -> dict:
        return {"model": self.model.as_json(), "model_text": self.model.describe(),
                "out_dtypes": list(self.out_dtypes), "activations": list(self.activations),
                "scale_layout": self.scale_layout, "shape_multiple": list(self.shape_multiple)}

    def padding(self, shape) -> tuple[int, int, int]:
        return tuple((-size) % want for size, want in zip(shape, self.shape_multiple))

    # -- a case as the kernel can take it ---------------------------------------------------
    def first_operand(self, case: GemmCase) -> str:
        """What the case's first operand is, in the declared vocabulary (nvfp4, q8_0 for
        float32 activations a Q8_0 block holds exactly where the kernel takes Q8_0, else the
        activations' dtype)."""
        if not case.weight_only:
            return "nvfp4"
        if "q8_0" in self.activations and case.a.dtype == np.float32 and q8_0_exact(case.a):
            return "q8_0"
        return np.asarray(case.a).dtype.name

    def in_domain(self, case: GemmCase) -> tuple[GemmCase | None, list[str]]:
        """``(the case as the kernel can take it, what was done)``, or ``(None, [why not])``:
        weight-only activations converted to a declared dtype where every value is exact
        there (the same numbers); shapes padded to the declared multiples with zero rows and
        zero blocks, which leave every element of the product unchanged (the result is
        cropped back); an output dtype or first operand not declared is ``None``."""
        done = []
        if case.weight_only and self.first_operand(case) not in self.activations:
            case, how = self._converted_activations(case)
            if case is None:
                return None, [how]
            done.append(how)
        if self.first_operand(case) not in self.activations:
            return None, [f"takes {'/'.join(self.activations)} as the GEMM's first operand, "
                          f"not {self.first_operand(case)}"]
        if case.out_dtype not in self.out_dtypes:
            return None, [f"outputs {'/'.join(self.out_dtypes)}, not {case.out_dtype}"]
        pad_m, pad_n, pad_k = self.padding(case.shape)
        if pad_m or pad_n or pad_k:
            def pad(operand, rows):
                codes = np.pad(np.asarray(operand.codes, np.uint8), ((0, rows), (0, pad_k)))
                scale_bytes = np.pad(np.asarray(operand.scale_bytes, np.uint8),
                                     ((0, rows), (0, pad_k // GROUP_SIZE)))
                return Nvfp4Tensor(codes, scale_bytes, np.float32(operand.global_scale))

            a = (np.pad(case.a, ((0, pad_m), (0, pad_k))) if case.weight_only
                 else pad(case.a, pad_m))
            case = case.with_(a=a, b=pad(case.b, pad_n),
                              title=f"{case.title or case.id} (padded into the declared shapes)")
            done.append("padded to multiples of "
                        f"{' x '.join(map(str, self.shape_multiple))}")
        return case, done

    def _converted_activations(self, case: GemmCase):
        values = np.asarray(case.a).astype(np.float64)
        targets = [("q8_0", np.float32)] if "q8_0" in self.activations else []
        targets += [(name, DTYPES[name]) for name in self.activations if name in DTYPES]
        for name, dtype in targets:
            with np.errstate(over="ignore"):
                converted = values.astype(dtype)
            if np.array_equal(converted.astype(np.float64), values) and (
                    name != "q8_0" or q8_0_exact(converted)):
                return case.with_(a=converted), f"activations converted exactly to {name}"
        return None, (f"takes {'/'.join(self.activations)} as the GEMM's first operand; these "
                      f"{np.asarray(case.a).dtype.name} activations are not exact in any")


# ------------------------------------------------------------------------------------------
# The operands as a kernel receives them
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmOperand:
    """An NVFP4 operand as a GEMM kernel receives it: ``packed`` uint8 (rows, K/2), element 2k
    in the low nibble (NVFP4-PACK-1); ``scale_bytes`` uint8 in ``scale_layout``: (rows, K/16)
    row-major (NVFP4-PACK-2) or the flat zero-padded 128x4 buffer (NVFP4-PACK-3);
    ``global_scale`` np.float32, the multiplier; ``rows`` and ``cols`` (= K)."""

    packed: np.ndarray
    scale_bytes: np.ndarray
    global_scale: np.float32
    rows: int
    cols: int
    scale_layout: str = "row-major"

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.cols


def wire_operand(operand, layout: str = "row-major") -> GemmOperand:
    """``operand`` (codes, row-major scale bytes, global scale; ``padding_byte``, what its
    128x4 layout's padding holds, 0x00 when absent) in the form of ``layout``."""
    codes = np.asarray(operand.codes, dtype=np.uint8)
    scale_bytes = np.asarray(operand.scale_bytes, dtype=np.uint8)
    if layout == "swizzled-128x4":
        from .domain import swizzle
        # the padding holds what the case says (0x00 unless a case fills it with stale bytes,
        # which a kernel never reads, NVFP4-GEMM-2)
        scale_bytes = swizzle(scale_bytes, int(getattr(operand, "padding_byte", 0)))
    return GemmOperand(pack_codes(codes), np.ascontiguousarray(scale_bytes),
                        np.float32(operand.global_scale), codes.shape[0], codes.shape[1], layout)


def gemm_arguments(case: GemmCase, domain: GemmDomain):
    """``(a, b)`` as the kernel receives them: NVFP4 operands in the declared layout; the
    activations of a weight-only case as an array (float32 for Q8_0: its decoded values)."""
    b = wire_operand(case.b, domain.scale_layout)
    if case.weight_only:
        return np.ascontiguousarray(case.a), b
    return wire_operand(case.a, domain.scale_layout), b


def q8_0_exact(x: np.ndarray) -> bool:
    """Whether float32 activations survive ggml's Q8_0 quantization unchanged: every block of
    32 is zero, or ``D * q`` with D an fp16 value and q int8 in [-127, 127] reaching +-127
    (then ggml's ``d = amax / 127`` is D exactly and ``round(x / d)`` is q)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] % Q8_0_BLOCK:
        return False
    blocks = x.reshape(-1, Q8_0_BLOCK)
    amax = np.abs(blocks).max(axis=1)
    scale = amax / 127
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(scale[:, None] > 0, blocks / np.where(scale > 0, scale, 1)[:, None], 0)
    fp16_scale = scale.astype(np.float16).astype(np.float64)
    return bool(np.all((amax == 0) | ((fp16_scale == scale) & np.all(q == np.rint(q), axis=1)
                                      & (scale >= 2.0 ** -14))))


# ------------------------------------------------------------------------------------------
# What a kernel returned
# ------------------------------------------------------------------------------------------

def observe_gemm(result, case: GemmCase) -> tuple[np.ndarray | None, list[Finding]]:
    """``(values as float64, [])`` of a kernel's output for ``case``: a numpy array (M, N) of
    the case's output dtype; else ``(None, findings)`` about its structure."""
    m, n, _ = case.shape
    out = float_format(case.out_dtype)
    if not isinstance(result, np.ndarray):
        return None, [Finding("NVFP4-GEMM-6", f"the result is a {type(result).__name__}, not a "
                              "numpy array (convert device tensors to numpy before returning)",
                              kind="structure")]
    if result.shape != (m, n):
        return None, [Finding("NVFP4-GEMM-1", f"the result has shape {result.shape}, the product "
                              f"of {m} x K and {n} x K operands is ({m}, {n})", kind="structure",
                              expected=str((m, n)), observed=str(result.shape))]
    if result.dtype != out.dtype:
        return None, [Finding("NVFP4-GEMM-6", f"output dtype expected {out.name} observed "
                              f"{result.dtype}", kind="structure", expected=out.name,
                              observed=str(result.dtype))]
    return result.astype(np.float64), []


# ------------------------------------------------------------------------------------------
# Judging
# ------------------------------------------------------------------------------------------

@dataclass
class GemmDiagnosis:
    """The findings about one GEMM result; ``elements`` judged, ``exact`` of them with one
    admissible value, ``not_judged`` outside the bound's range (with the reasons)."""

    findings: list[Finding] = field(default_factory=list)
    unlisted: Counter = field(default_factory=Counter)
    elements: int = 0
    exact: int = 0
    not_judged: Counter = field(default_factory=Counter)
    note: str = ""
    #: judged elements whose bound is vacuous, ``(1 + u)^d - 1 >= 1``: any value within
    #: sum |t_k| of S is admitted (an fp16 accumulator from K of about 1,420, NVFP4-GEMM-4)
    vacuous: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def render(self, shown: int = 3) -> list[str]:
        lines = [self.note] if self.note else []
        by_clause: dict[str, list[Finding]] = {}
        for finding in self.findings:
            by_clause.setdefault(finding.clause, []).append(finding)
        for clause, items in by_clause.items():
            lines += ["  " + f.render() for f in items[:shown]]
            more = len(items) - shown + self.unlisted.get(clause, 0)
            if more > 0:
                lines.append(f"  [{clause}] ... and {more} more")
        for reason, count in self.not_judged.items():
            lines.append(f"  ({plural(count, 'output element')} not judged: {reason})")
        return lines


def judge_gemm(case: GemmCase, observed: np.ndarray, model, domain: GemmDomain | None = None
               ) -> GemmDiagnosis:
    """Every element of ``observed`` (float64 values of the output dtype) outside the interval
    the declared ``model`` admits (NVFP4-GEMM-7), each with the clause it breaks
    (``gemm_slips``): at most ``LISTED`` listed, the rest counted."""
    model = GemmModel.parse(model)
    allowed = case.admissible(model)
    diagnosis = GemmDiagnosis(elements=int(allowed.judged.sum()),
                              exact=int((allowed.exact & allowed.judged).sum()),
                              vacuous=int((vacuous_bounds(case, allowed)
                                           & allowed.judged).sum()))
    for reason in allowed.reason[~allowed.judged]:
        diagnosis.not_judged[reason] += 1
    inside = (observed >= allowed.low) & (observed <= allowed.high)
    bad = allowed.judged & ~inside  # NaN is never inside
    listed = np.zeros(bad.shape, bool)
    for i, j in np.argwhere(bad)[:LISTED]:
        listed[i, j] = True
    layout = domain.scale_layout if domain is not None else "row-major"
    clauses = attribute(case, observed, model, listed, layout)
    expected = reference_output(case.a, case.b, case.out_dtype, model, case.exact)
    for (i, j), (clause, why) in sorted(clauses.items()):
        diagnosis.findings.append(_element_finding(case, allowed, expected, observed, i, j,
                                                   clause, why))
    if bad.sum() > LISTED:
        diagnosis.unlisted["NVFP4-GEMM-7"] += int(bad.sum()) - LISTED
    return diagnosis


def vacuous_bounds(case: GemmCase, allowed) -> np.ndarray:
    """(M, N) bool: the elements whose bound of NVFP4-GEMM-4 is at least ``sum_k |t_k|``, so
    that it admits any value within that of S, of either sign: the model guarantees nothing
    useful there (``(1 + u)^d - 1 >= 1``; an fp16 accumulator from K of about 1,420)."""
    magnitude = np.vectorize(lambda i, j: float(case.exact.magnitude(i, j)), otypes=[float])
    rows, cols = allowed.bound.shape
    i, j = np.indices((rows, cols))
    total = magnitude(i, j) if rows and cols else np.zeros((rows, cols))
    return ~allowed.exact & (total > 0) & (allowed.bound >= total)


def out_hex(value: float, dtype: str) -> str:
    """The bits of an output-dtype value, and its value."""
    if math.isnan(value):
        return "NaN"
    return f"{value_hex(value, float_format(dtype).dtype)} ({float(value)!r})"


def _element_finding(case: GemmCase, allowed, expected, observed, i: int, j: int, clause: str,
                     why: str) -> Finding:
    out = case.out_dtype
    value, want = float(observed[i, j]), float(expected[i, j])
    how = ("every partial sum is exact: one admissible accumulator (NVFP4-GEMM-7)"
           if allowed.exact[i, j] else
           f"S = {float(case.exact.value(i, j))!r}, |Ŝ - S| <= {float(allowed.bound[i, j])!r} "
           f"(d = {allowed.roundings}, NVFP4-GEMM-4)")
    text = (f"{out} expected {out_hex(want, out)} observed {out_hex(value, out)}; admissible "
            f"{out_hex(allowed.low[i, j], out)} .. {out_hex(allowed.high[i, j], out)} under "
            f"{allowed.model.describe()}; {how}; {why}")
    dtype = float_format(out).dtype
    return Finding(clause, text, output=(i, j), kind="gemm", expected=value_hex(want, dtype),
                   observed="NaN" if math.isnan(value) else value_hex(value, dtype))
