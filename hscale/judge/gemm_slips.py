"""Which clause a GEMM's wrong outputs break (spec section 10, NVFP4-GEMM-7's last sentence).

An output outside the admissible interval of the declared model is wrong; what makes it wrong
is read from the slips the field makes, each a hypothesis that would make the value admissible:

- NVFP4-GEMM-2, the operands read otherwise: a packed byte's nibbles exchanged (one operand or
  both), the scale bytes read in another layout than declared (a swizzled buffer read as
  row-major, with or without its padding, or with a tile's 32-row blocks and 4-row-block index
  exchanged; row-major bytes read as swizzled), for one operand or both; the scale bytes'
  bookkeeping (split-K slices applying slice 0's, a later M band reading the previous band's A
  scales, the layout's stale padding read as blocks beyond K);
- NVFP4-GEMM-5, the global scales placed otherwise (on the accumulator, after the output
  rounding, folded into the elements of a dequantize-then-matmul);
- NVFP4-GEMM-4, another accumulator (a narrower one, or faithful rounding): an fp16 accumulator
  that may overflow explains an infinite output, and a NaN where its positive and its negative
  terms can each overflow (inf - inf);
- NVFP4-GEMM-6, the output rounded toward zero instead of to nearest.

The hypotheses are weighed on all the wrong elements of the case together, from the most
specific to the loosest: the first that explains every one of them names their clause; if none
does, the one that explains the most names theirs (ties go to the earlier), then the next for
those left, and so on; an element none explains breaks NVFP4-GEMM-1 (not the product of these
operands). A systematic slip shows on many elements, which is what tells a late global scale
from a truncated output where one element alone could be either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hscale.reference.accumulation import PRESETS, GemmModel, admissible
from hscale.reference.float_formats import float_format
from hscale.reference.gemm import Nvfp4Tensor, exact_sum
from hscale.reference.packing import swizzle_offset

#: Rows of an M band: a CTA tile's M, the 128x4 layout's row tile.
BAND = 128


@dataclass(frozen=True)
class Slip:
    """One hypothesis: the clause it breaks, what it is, and how it changes the case (other
    operands, another model, or the output rounded toward zero)."""

    clause: str
    text: str
    a: object = None
    b: object = None
    model: GemmModel | None = None
    toward_zero: bool = False


def own_form(operand) -> Nvfp4Tensor:
    return Nvfp4Tensor(np.asarray(operand.codes, np.uint8),
                       np.asarray(operand.scale_bytes, np.uint8), np.float32(operand.global_scale))


def swap_nibbles(tensor: Nvfp4Tensor) -> Nvfp4Tensor:
    """The codes a kernel reads when it takes element 2k from the high nibble."""
    codes = tensor.codes
    swapped = np.empty_like(codes)
    swapped[:, 0::2], swapped[:, 1::2] = codes[:, 1::2], codes[:, 0::2]
    return replace(tensor, codes=swapped)


def misread_scales(tensor: Nvfp4Tensor, declared: str) -> dict[str, np.ndarray]:
    """The scale bytes a kernel reads when it takes the buffer of the ``declared`` layout in
    another one (bytes beyond the buffer read as 0x00)."""
    from .domain import swizzle
    rows, cols = tensor.scale_bytes.shape
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]

    def take(buffer, offsets):
        buffer = np.asarray(buffer, np.uint8).reshape(-1)
        inside = offsets < buffer.size
        return np.where(inside, buffer[np.where(inside, offsets, 0)], 0).astype(np.uint8)

    if declared == "swizzled-128x4":
        buffer = swizzle(tensor.scale_bytes)
        padded = -(-cols // 4) * 4
        exchanged = (((r // 128) * -(-cols // 4) + c // 4) * 512 + (r % 32) * 4
                     + ((r % 128) // 32) * 16 + c % 4)
        return {"row-major (rows x K/16)": take(buffer, r * cols + c),
                "row-major with its padded width": take(buffer, r * padded + c),
                "128x4 tiles with the 32-row blocks and 4-row-block index exchanged":
                    take(buffer, exchanged)}
    return {"the swizzled 128x4 layout": take(tensor.scale_bytes, swizzle_offset(r, c, cols))}


def layout_slips(case, layout: str) -> list[Slip]:
    """NVFP4-GEMM-2's hypotheses for the case's operands."""
    b = own_form(case.b)
    a = case.a if case.weight_only else own_form(case.a)
    slips = [Slip("NVFP4-GEMM-2", "the weight's codes read with the nibbles of each byte "
                  "exchanged (not NVFP4-PACK-1's order)", a, swap_nibbles(b))]
    if not case.weight_only:
        slips += [Slip("NVFP4-GEMM-2", "the first operand's codes read with the nibbles of each "
                       "byte exchanged", swap_nibbles(a), b),
                  Slip("NVFP4-GEMM-2", "both operands' codes read with their nibbles exchanged",
                       swap_nibbles(a), swap_nibbles(b))]
    b_reads = misread_scales(b, layout)
    a_reads = {} if case.weight_only else misread_scales(a, layout)
    for how, bytes_b in b_reads.items():
        other_b = replace(b, scale_bytes=bytes_b)
        slips.append(Slip("NVFP4-GEMM-2", f"the weight's scale bytes read as {how}, not the "
                          f"declared {layout}", a, other_b))
        if how in a_reads:
            other_a = replace(a, scale_bytes=a_reads[how])
            slips += [Slip("NVFP4-GEMM-2", f"the first operand's scale bytes read as {how}, not "
                           f"the declared {layout}", other_a, b),
                      Slip("NVFP4-GEMM-2", f"both operands' scale bytes read as {how}, not the "
                           f"declared {layout}", other_a, other_b)]
    return slips


def bookkeeping_slips(case) -> list[Slip]:
    """NVFP4-GEMM-2's hypotheses of scale bytes read at another block's or row's place (the
    field's bookkeeping slips): the K blocks split into S slices each applying slice 0's scale
    bytes (split-K, CUTLASS #3615), the rows of a later 128-row M band reading the previous
    band's A scale bytes (a later M wave, #3596), each for the operands whose scales change."""
    if case.weight_only:
        return []
    a, b = own_form(case.a), own_form(case.b)
    m, _, k = case.shape
    blocks = k // 16
    slips = []
    for count in (2, 4, 8):
        if blocks % count or blocks // count < 1 or blocks == count:
            continue
        width = blocks // count
        first = np.arange(blocks) % width  # block beta reads the scales of beta mod width

        def slice0(t):
            return replace(t, scale_bytes=t.scale_bytes[:, first])

        slips.append(Slip("NVFP4-GEMM-2", f"split-K over {count} slices of {width} blocks, "
                          "every slice applying slice 0's scale bytes (not its own)",
                          slice0(a), slice0(b)))
    if m > BAND:
        rows = np.arange(m)
        earlier = np.where(rows >= BAND, rows - BAND, rows)
        slips.append(Slip("NVFP4-GEMM-2", f"the rows of each later {BAND}-row M band reading "
                          "the previous band's A scale bytes (an M wave reusing the last "
                          "wave's)", replace(a, scale_bytes=a.scale_bytes[earlier]), b))
    return slips


def padding_read(case, observed: np.ndarray) -> np.ndarray:
    """Which outputs are NaN because the kernel read the 128x4 layout's padding as the scale
    bytes of blocks beyond K (K rounded up to 32 or to an MMA step of 64, the blocks beyond
    given zero codes): where the case's padding holds a NaN byte, 0 times NaN is NaN."""
    _, _, k = case.shape
    stale = [int(getattr(t, "padding_byte", 0)) for t in (case.a, case.b)
             if not isinstance(t, np.ndarray)]
    if not k % 64 or not any(byte in (0x7F, 0xFF) for byte in stale):
        return np.zeros(observed.shape, bool)
    return np.isnan(observed)


def numeric_slips(model: GemmModel, out_dtype: str) -> list[Slip]:
    """NVFP4-GEMM-5, -6 and -4's hypotheses, from the narrowest to the loosest: the global
    scales on the accumulator or after the output rounding, the output rounded toward zero,
    the declared accumulator with faithful rounding, the global scales folded into the
    elements of a dequantize-then-matmul (held in the output dtype, fp32, bfloat16 or
    float16), an fp16 accumulator, a bf16 one."""
    base = replace(model, global_scales="accumulator", element_dtype=None, element_roundings=0)

    def placement(other):
        return Slip("NVFP4-GEMM-5", f"the global scales placed '{other.global_scales}' "
                    f"({other.describe()}), not as declared", model=other)

    def accumulator(name):
        other = replace(PRESETS[name], global_scales=model.global_scales,
                        element_dtype=model.element_dtype,
                        element_roundings=model.element_roundings)
        return Slip("NVFP4-GEMM-4", f"the {name} accumulation model, not the declared one "
                    f"({other.describe()})", model=other)

    narrow = [placement(base), placement(replace(base, global_scales="output")),
              Slip("NVFP4-GEMM-6", "the output rounded toward zero instead of to nearest",
                   model=model, toward_zero=True)]
    loose = [accumulator(name) for name in ("fp32", "fp32-faithful")]
    # the global scales folded into the elements before a narrower accumulator: a lossy early
    # global scale (torchao's weight-only path rounds its elements to bfloat16) errs by a few
    # element roundings, which a narrow accumulator's wider bound would also admit and so
    # misname (issue 39)
    loose += [placement(replace(base, global_scales="elements", element_dtype=dtype,
                                element_roundings=3))
              for dtype in dict.fromkeys((out_dtype, "float32", "bfloat16", "float16"))]
    loose += [accumulator(name) for name in ("fp16", "fp16-faithful", "bf16", "bf16-faithful")]
    return [slip for slip in narrow + loose
            if slip.model != model or slip.toward_zero]


def _explained(case, slip: Slip, model: GemmModel, observed: np.ndarray, rows, cols
               ) -> np.ndarray:
    """(len(rows), len(cols)) bool: which of the elements the slip makes admissible."""
    a = slip.a if slip.a is not None else (case.a if case.weight_only else own_form(case.a))
    b = slip.b if slip.b is not None else own_form(case.b)
    a = a[rows] if isinstance(a, np.ndarray) else _take_rows(a, rows)
    b = _take_rows(b, cols)
    other = slip.model or model
    values = observed[np.ix_(rows, cols)]
    if slip.toward_zero:
        fmt = float_format(case.out_dtype)
        allowed = admissible(a, b, "float32", other, exact_sum(a, b))
        low = np.vectorize(lambda v: fmt.round_float(v, "toward-zero"))(allowed.low)
        high = np.vectorize(lambda v: fmt.round_float(v, "toward-zero"))(allowed.high)
        return (values >= low) & (values <= high)
    product = exact_sum(a, b)
    allowed = admissible(a, b, case.out_dtype, other, product)
    inside = (values >= allowed.low) & (values <= allowed.high)
    overflow = np.vectorize(lambda text: "overflow" in text)(allowed.reason) if \
        allowed.reason.size else np.zeros(values.shape, bool)
    # an accumulator that may overflow explains an infinite output, and a NaN where the
    # positive terms and the negative terms can each overflow (inf - inf)
    nan = np.isnan(values) & _both_signs_overflow(case, other, product)
    return inside | (~allowed.judged & overflow & (np.isinf(values) | nan))


def _both_signs_overflow(case, model: GemmModel, product) -> np.ndarray:
    """Per element of ``product``: whether the sum of its positive terms and that of its
    negative terms can each reach the overflow of the model's accumulator (within the bound's
    factor), so that an evaluation may meet +inf and -inf."""
    fmt = model.format
    _, _, k = case.shape
    grown = (1 + float(model.unit_roundoff())) ** (k + 1)
    scale = 1.0
    if model.global_scales == "elements":
        scale = float(np.float32(case.b.global_scale)) * (
            1.0 if case.weight_only else float(np.float32(case.a.global_scale)))

    def reaches(part) -> bool:
        return math.ldexp(float(part), product.exponent) * scale * grown >= fmt.largest

    signed = np.vectorize(lambda n, m: reaches((int(m) + int(n)) // 2)
                          and reaches((int(m) - int(n)) // 2), otypes=[bool])
    return signed(product.numerators, product.magnitudes)


def _take_rows(tensor, rows) -> Nvfp4Tensor:
    tensor = own_form(tensor)
    return Nvfp4Tensor(tensor.codes[rows], tensor.scale_bytes[rows], tensor.global_scale)


def attribute(case, observed: np.ndarray, model: GemmModel, bad: np.ndarray,
              layout: str = "row-major") -> dict[tuple[int, int], tuple[str, str]]:
    """(i, j) -> (clause, why) for every wrong element ``bad`` (M, N) of the case."""
    hits = [tuple(int(v) for v in hit) for hit in np.argwhere(bad)]
    if not hits:
        return {}
    rows = sorted({i for i, _ in hits})
    cols = sorted({j for _, j in hits})
    position = {(i, j): (rows.index(i), cols.index(j)) for i, j in hits}
    slips = (layout_slips(case, layout) + bookkeeping_slips(case)
             + numeric_slips(model, case.out_dtype))
    explains = [_explained(case, slip, model, observed, rows, cols) for slip in slips]
    slips.append(Slip("NVFP4-GEMM-2", "the 128x4 layout's padding (stale bytes) read as the "
                      "scale bytes of blocks beyond K: K rounded up to 32 or to an MMA step of "
                      "64 (a kernel never reads the padding)"))
    explains.append(padding_read(case, observed)[np.ix_(rows, cols)])
    left, found = set(hits), {}
    # one slip that explains every wrong element: the first such, in the order above
    wholes = [k for k, mask in enumerate(explains) if all(mask[position[h]] for h in left)]
    if wholes:
        slip = slips[wholes[0]]
        also = "; ".join(f"{slips[k].text} ({slips[k].clause})" for k in wholes[1:4])
        why = f"explained by {slip.text} ({slip.clause})" + (
            f"; also admissible under: {also}" if also else "")
        return {hit: (slip.clause, why) for hit in hits}
    while left:
        counts = [sum(bool(mask[position[h]]) for h in left) for mask in explains]
        best = max(range(len(slips)), key=lambda k: (counts[k], -k))
        if counts[best] == 0:
            break
        slip = slips[best]
        for hit in [h for h in left if explains[best][position[h]]]:
            found[hit] = (slip.clause, f"explained by {slip.text} ({slip.clause})")
            left.discard(hit)
    for hit in left:
        found[hit] = ("NVFP4-GEMM-1", "no accumulation model, global-scale placement, output "
                      "rounding or reading of the operands admits it: not the product of these "
                      "operands (NVFP4-GEMM-1)")
    return found
