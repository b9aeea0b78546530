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
from dataclasses import dataclass, field, replace

import numpy as np

from hscale.reference import pack_codes, unpack_codes
from hscale.reference.accumulation import PRESETS, GemmModel, admissible, reference_output
from hscale.reference.constants import GROUP_SIZE
from hscale.reference.float_formats import FORMATS, float_format
from hscale.reference.gemm import Nvfp4Tensor, exact_sum
from hscale.reference.packing import swizzle_offset

from .cases import GemmCase
from .diagnose import LISTED, value_hex
from .findings import Finding, plural

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
    """``operand`` (codes, row-major scale bytes, global scale) in the form of ``layout``."""
    codes = np.asarray(operand.codes, dtype=np.uint8)
    scale_bytes = np.asarray(operand.scale_bytes, dtype=np.uint8)
    if layout == "swizzled-128x4":
        from .domain import swizzle
        scale_bytes = swizzle(scale_bytes)
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
    the declared ``model`` admits (NVFP4-GEMM-7), each explained (the module docstring)."""
    model = GemmModel.parse(model)
    allowed = case.admissible(model)
    diagnosis = GemmDiagnosis(elements=int(allowed.judged.sum()),
                              exact=int((allowed.exact & allowed.judged).sum()))
    for reason in allowed.reason[~allowed.judged]:
        diagnosis.not_judged[reason] += 1
    inside = (observed >= allowed.low) & (observed <= allowed.high)
    bad = allowed.judged & ~inside  # NaN is never inside
    hits = np.argwhere(bad)
    for i, j in hits[:LISTED]:
        diagnosis.findings.append(_element_finding(case, observed, model, domain, int(i), int(j)))
    if len(hits) > LISTED:
        diagnosis.unlisted["NVFP4-GEMM-7"] += len(hits) - LISTED
    return diagnosis


def out_hex(value: float, dtype: str) -> str:
    """The bits of an output-dtype value, and its value."""
    if math.isnan(value):
        return "NaN"
    return f"{value_hex(value, float_format(dtype).dtype)} ({value!r})"


def _element_finding(case: GemmCase, observed: np.ndarray, model: GemmModel, domain,
                     i: int, j: int) -> Finding:
    allowed = case.admissible(model)
    value = float(observed[i, j])
    expected = float(reference_output(case.a, case.b, case.out_dtype, model, case.exact)[i, j])
    exact_s = case.exact.value(i, j)
    ends = (f"admissible {out_hex(allowed.low[i, j], case.out_dtype)} .. "
            f"{out_hex(allowed.high[i, j], case.out_dtype)}")
    why = ("every partial sum is exact (NVFP4-GEMM-7): one admissible accumulator"
           if allowed.exact[i, j] else
           f"S = {float(exact_s)!r}, |S - Ŝ| <= {allowed.bound[i, j]!r} with d = "
           f"{allowed.roundings}")
    clause, explanation = explain(case, value, model, domain, i, j)
    text = (f"{case.out_dtype} expected {out_hex(expected, case.out_dtype)} observed "
            f"{out_hex(value, case.out_dtype)}; {ends} under {model.describe()}; {why}; "
            f"{explanation}")
    return Finding(clause, text, output=(i, j), kind="gemm",
                   expected=value_hex(expected, float_format(case.out_dtype).dtype),
                   observed="NaN" if math.isnan(value) else
                   value_hex(value, float_format(case.out_dtype).dtype))


# ------------------------------------------------------------------------------------------
# Which clause an inadmissible value breaks
# ------------------------------------------------------------------------------------------

def _own_form(operand) -> Nvfp4Tensor:
    return Nvfp4Tensor(np.asarray(operand.codes, np.uint8), np.asarray(operand.scale_bytes, np.uint8),
                     np.float32(operand.global_scale))


def _element_interval(a, b, out_dtype: str, model: GemmModel) -> tuple[float, float]:
    allowed = admissible(a, b, out_dtype, model, exact_sum(a, b))
    return float(allowed.low[0, 0]), float(allowed.high[0, 0])


def _swap_pairs(codes: np.ndarray) -> np.ndarray:
    swapped = np.empty_like(codes)
    swapped[:, 0::2], swapped[:, 1::2] = codes[:, 1::2], codes[:, 0::2]
    return swapped


def _misread_scales(rows: Nvfp4Tensor, full_rows: int, declared: str) -> dict[str, np.ndarray]:
    """Scale bytes a kernel would read for ``rows`` (the first ``full_rows`` of the operand's
    layout) if it read the buffer of the declared layout in another one (NVFP4-GEMM-2)."""
    from .domain import swizzle
    scale_bytes = rows.scale_bytes
    r_count, cols = scale_bytes.shape
    r = np.arange(r_count)[:, None]
    c = np.arange(cols)[None, :]
    padded_cols = -(-cols // 4) * 4
    out = {}
    if declared == "swizzled-128x4":
        buffer = swizzle(scale_bytes)

        def take(offsets):
            return np.where(offsets < buffer.size, buffer[np.minimum(offsets, buffer.size - 1)],
                            0).astype(np.uint8)
        out["the swizzled buffer read as row-major (rows x K/16)"] = take(r * cols + c)
        out["the swizzled buffer read as row-major, padded (rows x ceil(K/64)*4)"] = take(
            r * padded_cols + c)
        tiles = -(-cols // 4)
        exchanged = ((r // 128) * tiles + c // 4) * 512 + (r % 32) * 4 + ((r % 128) // 32) * 16 \
            + c % 4
        out["the 128x4 tile read with its 32-row blocks and 4-row-block index exchanged"] = \
            take(exchanged)
    else:
        flat = scale_bytes.reshape(-1)
        offsets = swizzle_offset(r, c, cols)
        out["the row-major bytes read as the swizzled 128x4 layout"] = np.where(
            offsets < flat.size, flat[np.minimum(offsets, flat.size - 1)], 0).astype(np.uint8)
    return out


def explain(case: GemmCase, value: float, model: GemmModel, domain, i: int, j: int
            ) -> tuple[str, str]:
    """``(clause, why)`` for an inadmissible ``value`` of element (i, j): the first slip of
    the operands' layouts that makes it admissible (NVFP4-GEMM-2), else the narrowest of the
    numerical alternatives that admits it (NVFP4-GEMM-6 output rounding, -4 placement, -3
    accumulator), else NVFP4-GEMM-1."""
    out = case.out_dtype
    if math.isnan(value):
        return "NVFP4-GEMM-6", "NaN is never admissible: the operands are finite"
    b = _own_form(case.b).rows(j, j + 1)
    a = case.a[i:i + 1] if case.weight_only else _own_form(case.a).rows(i, i + 1)

    def admits(a_, b_, model_=model):
        lo, hi = _element_interval(a_, b_, out, model_)
        return lo <= value <= hi, hi - lo

    # the layout: the codes' nibble order, the scale bytes' layout
    slips = [("the weight's codes read with the two nibbles of each byte exchanged (not "
              "NVFP4-PACK-1's order)", a, replace(b, codes=_swap_pairs(b.codes)))]
    if not case.weight_only:
        slips.append(("the first operand's codes read with the two nibbles of each byte "
                      "exchanged (not NVFP4-PACK-1's order)",
                      replace(a, codes=_swap_pairs(a.codes)), b))
        slips.append(("both operands' codes read with their nibbles exchanged (not "
                      "NVFP4-PACK-1's order)", replace(a, codes=_swap_pairs(a.codes)),
                      replace(b, codes=_swap_pairs(b.codes))))
    layout = domain.scale_layout if domain is not None else "row-major"
    for name, operand, rows in (("weight", "b", j), ("first operand", "a", i)):
        if operand == "a" and case.weight_only:
            continue
        whole = _own_form(getattr(case, operand))
        for how, misread in _misread_scales(whole, whole.codes.shape[0], layout).items():
            changed = replace(whole, scale_bytes=misread).rows(rows, rows + 1)
            pair = (a, changed) if operand == "b" else (changed, b)
            slips.append((f"the {name}'s scale bytes read as {how}, not the declared "
                          f"{layout} layout", *pair))
    for how, a_, b_ in slips:
        if admits(a_, b_)[0]:
            return "NVFP4-GEMM-2", f"the value is what {how} gives (NVFP4-GEMM-2)"

    # the numbers: output rounding, placement, accumulator
    candidates = []
    toward_zero = _toward_zero_output(a, b, out, model)
    if toward_zero[0] <= value <= toward_zero[1]:
        candidates.append((toward_zero[1] - toward_zero[0], "NVFP4-GEMM-6",
                           "admissible if the output were rounded toward zero instead of to "
                           "nearest (NVFP4-GEMM-6)"))
    for other in _placements(model, out):
        ok, width = admits(a, b, other)
        if ok:
            candidates.append((width, "NVFP4-GEMM-5", f"admissible with the global scales "
                               f"placed '{other.global_scales}' ({other.describe()}), not as "
                               "declared (NVFP4-GEMM-5)"))
    for name, preset in PRESETS.items():
        other = replace(preset, global_scales=model.global_scales,
                        element_dtype=model.element_dtype,
                        element_roundings=model.element_roundings)
        if other == model:
            continue
        ok, width = admits(a, b, other)
        if ok:
            candidates.append((width, "NVFP4-GEMM-4", f"admissible under the {name} "
                               f"accumulation model, not under the declared one: an accumulator "
                               f"narrower or rounding otherwise than declared (NVFP4-GEMM-4)"))
    if candidates:
        _, clause, why = min(candidates, key=lambda c: c[0])
        return clause, why
    return "NVFP4-GEMM-1", ("no accumulation model, placement or layout slip admits it: not the "
                            "product of these operands (NVFP4-GEMM-1)")


def _placements(model: GemmModel, out_dtype: str) -> list[GemmModel]:
    """The other global-scale placements of NVFP4-GEMM-5 with the declared accumulator: on the
    accumulator, after the output rounding, folded into elements of the output dtype (or fp32)
    after up to three roundings (a dequantize-then-matmul)."""
    base = replace(model, global_scales="accumulator", element_dtype=None, element_roundings=0)
    others = [base, replace(base, global_scales="output")]
    others += [replace(base, global_scales="elements", element_dtype=dtype, element_roundings=3)
               for dtype in dict.fromkeys((out_dtype, "float32"))]
    return [other for other in others if other != model]


def _toward_zero_output(a, b, out_dtype: str, model: GemmModel) -> tuple[float, float]:
    """The output interval if the last rounding (to the output dtype) went toward zero."""
    allowed = admissible(a, b, "float32", model, exact_sum(a, b))
    fmt = float_format(out_dtype)
    return (fmt.round_float(float(allowed.low[0, 0]), "toward-zero"),
            fmt.round_float(float(allowed.high[0, 0]), "toward-zero"))
