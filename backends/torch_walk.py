"""The fused H-Scale walk: every step of one block of groups (the group maxima, the initial
byte, the window, the K candidates' objectives, the first minimum, the codes at the chosen byte
and their packing) as one pure function of torch ops, which ``torch_aot`` exports and compiles
ahead of time into one graph per block (AOTInductor: C++ on the CPU, Triton on CUDA) and
``torch_compile.CompiledWalk`` checks against the eager pipeline of ``torch_tensor`` on every
new shape. Nothing here imports torch
at module load; the functions take ``torch`` from their tensors' module.

Layout. A block is ``w`` (R, C, 16): R whole rows of C groups (or a part of one row, R = 1),
as float32 (bfloat16 and float16 widened exactly by the caller: one graph for every dtype). The graph first writes ``w_t`` = w as float64 (16, C, R) (exact),
so that every per-group quantity is a (C, R) plane contiguous in R and every reduction over
the 16 elements or over the K candidates runs across groups (vectorised over R), never inside
one group. h is (C, 16): the row's pattern, the same for every row of the block (ones for
scale-only and rtn, whose objective is h = 1: 1 * (d*d) is d*d; rtn searches a window of its
initial byte alone); hscale-block's blocks are (C, 16, 16). Outputs are in that layout too (packed bytes (8, C, R), scale bytes
(C, R)); the caller writes them into the row-major result.

Exactness (all float64; ``torch_kernels`` has the arguments for the rounding trick and the
objective's order, which are the same here):

* the initial byte (NVFP4-INIT-1): ``v = amax_g / (top * s_g)`` is the reference's quotient
  (``top * s_g`` exact, passed in). Its E4M3 byte is ``8 e + rne(v * 2^(9 - e))`` where ``e``
  (0..14) counts the powers of two 2^-5 .. 2^8 that ``v`` reaches: ``v * 2^(9 - e)`` is ``v`` in
  quanta of its binade (2^-9 below 2^-5, the subnormal and first normal binade alike), a
  power-of-two rescaling and so exact; ``rne`` is ``torch.round`` (half to even, NVFP4-E4M3-2);
  16 quanta are the next binade's 8, which the formula gives; the byte saturates at 0x7E. This
  is ``torch_tensor.e4m3_bytes`` without ``frexp`` or bit casts, which inductor's vectorised C++
  either miscompiles (frexp's int32 exponent, torch 2.13) or runs element by element.
* the window (HSCALE-WIN-1): candidate k is ``clip(c0 + delta_k, 0x01, 0x7E)`` with the shifts
  in priority order (HSCALE-ARGMIN-1), the reference's ``window_bytes`` of ``priority_order``.
* the candidates' objectives (HSCALE-OBJ-1): ``x = |w| * r`` with ``r = fl(1 / s)`` from a
  table, not ``|w| / s``. ``|x - |w|/s| <= 2^-52 |w|/s`` (two roundings), and ``|w|/s`` is either
  exactly an E2M1 midpoint or grid point or more than 2^-29 (relative) from every one
  (``torch_kernels``), so off the midpoints ``x`` rounds on the E2M1 grid to the code of the
  exact quotient, and on a grid point to that point. On a midpoint ``m`` (an exact tie) it may
  round to either neighbour ``q`` or ``q'``; the objective does not see which: ``m - q`` and
  ``m - q'`` are opposite halves of the spacing, so ``d = |w| - q s`` is ``+-(spacing / 2) s``,
  exact either way (Sterbenz, or ``d = |w|`` at ``q = 0``), and ``d * d`` is the same number. So E
  is the reference's bit for bit while the search needs no division. The final codes, where a
  tie's side matters, use the exact quotient ``|w| / s`` (one division per element, not per
  element and candidate).
* hscale-block (HSCALE-BLOCK-1): ``d_j = sign(w_j) (|w_j| - q_j s)``, which is the reference's
  ``w_j - v_j s`` (the code's sign is w's, rounding is sign-symmetric), up to the sign of a zero,
  which no product, sum or comparison that follows can tell from the other zero except as the
  sign of a zero E (equal to +0 for the minimum). Then the reference's order: ``a_jk = B_jk d_k``,
  ``t_j`` by adjacent pairs over k, ``e_j = d_j t_j``, E by adjacent pairs over j, NaN as +inf
  (``E != E``: inductor runs ``isnan`` element by element).
* the first minimum: ``torch.argmin`` over the candidates, which returns the first minimal
  index (HSCALE-ARGMIN-1); E is never NaN (HSCALE-OBJ-1; hscale-block's NaN is made +inf).
* the codes (NVFP4-E2M1-2, -3): ``torch_kernels.eager_encode``'s rounding of ``|w| / s`` and
  magnitude code ``min(q, 2) + min(q, 5)``; the sign bit from ``copysign(1, w)`` (-0.0 too,
  NVFP4-E2M1-3); zero groups at the stand-in scale 1 keep only their signs (NVFP4-ZERO-1).
  Packing (NVFP4-PACK-1): element 2i in the low nibble, ``code_2i + 16 code_2i+1``.

Floating-point contraction is off in the compiled code (``torch_compile.compile_settings``):
the only products followed by an addition are exact (``q * s``, ``T * 2^51``, ``16 * code``)
except ``h_j * (d_j * d_j)`` and ``B_jk * d_k`` before the pairwise sums, where a fused
multiply-add would change E; tests/backends/test_fused_walk.py reads the compiled kernel's
machine code for fused multiply-adds.
"""

from __future__ import annotations

from hscale.reference.constants import (GROUP_SIZE, LADDER_FIRST_BYTE, LADDER_LAST_BYTE)

from .torch_kernels import MAGIC

GROUP = GROUP_SIZE
# The E4M3 binades above the first: v >= 2^-5 .. 2^8 each add 8 to the byte (0x10 .. 0x78).
BINADE_EDGES = tuple(2.0 ** e for e in range(-5, 9))
SUBNORMAL_QUANTA = 512.0  # 2^9: v in quanta of 2^-9



def e4m3_bytes(torch, value):
    """E4M3 byte (int64) of each non-negative finite float64 ``value``: round to nearest,
    ties to even, saturating at 0x7E (NVFP4-E4M3-2), by counting binades (module docstring)."""
    rescale = None
    binades = None
    for edge in BINADE_EDGES:
        up = value >= edge
        half = torch.where(up, 0.5, 1.0)
        rescale = half if rescale is None else rescale * half  # a power of two: exact
        count = up.to(torch.float64)
        binades = count if binades is None else binades + count
    quanta = (value * (rescale * SUBNORMAL_QUANTA)).round()  # exact rescaling, then RNE
    return (8.0 * binades + quanta).clamp_max(float(LADDER_LAST_BYTE)).to(torch.int64)


def range_bytes(torch, amax, top):
    """NVFP4-INIT-1's byte mapping each group maximum onto the top magnitude (``top`` is
    ``top_magnitude * s_g``, a 0-d float64 tensor); a non-zero group below the ladder gets 0x01,
    a zero group 0x00."""
    byte = e4m3_bytes(torch, amax / top)
    return torch.where(amax > 0, byte.clamp_min(LADDER_FIRST_BYTE), byte)


def e2m1_round(torch, x):
    """x (>= 0, not NaN) rounded on the E2M1 grid, saturating at 6 (NVFP4-E2M1-2):
    ``torch_kernels``' "add and subtract 2^51 * clamp(x, 1, 6)"."""
    x = torch.clamp_max(x, 6.0)
    c = torch.clamp_min(x, 1.0) * MAGIC  # exact
    return (x + c) - c


def pairwise(terms):
    """The balanced sum of adjacent pairs, level by level (HSCALE-OBJ-1's order)."""
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] for i in range(0, len(terms), 2)]
    return terms[0]


def residuals(torch, w_t, scale, recip):
    """``|w_j| - q_j s`` of each element j (a list of 16 (k, C, R) tensors) at each candidate's
    scale ``scale`` (k, C, R) and its reciprocal table value ``recip``."""
    out = []
    for j in range(GROUP):
        a = w_t[j].abs()  # (C, R)
        q = e2m1_round(torch, a * recip)  # the exact quotient's code off the ties (docstring)
        out.append(a - q * scale)  # q*s exact: one rounding
    return out


def weighted_objectives(torch, residual, h):
    """E (k, C, R) of HSCALE-OBJ-1: ``sum_j h_j d_j^2`` by adjacent pairs of the ``residuals``
    ``d_j``, h (C, 16) or None (h = 1, and 1 * (d*d) is d*d)."""
    terms = []
    for j, d in enumerate(residual):
        e = d * d
        terms.append(e if h is None else e * h[:, j].unsqueeze(1))  # h*(d*d): two roundings
    return pairwise(terms)


def block_objectives(torch, w_t, residual, blocks):
    """E (k, C, R) of HSCALE-BLOCK-1: ``d^T B d`` with B (C, 16, 16), in the reference's order,
    from the ``residuals``."""
    d = [r * torch.copysign(torch.ones_like(w_t[j]), w_t[j])
         for j, r in enumerate(residual)]  # w_j - v_j s (docstring), exact
    e = []
    for j in range(GROUP):
        row = [blocks[:, j, k].unsqueeze(1) * d[k] for k in range(GROUP)]  # a_jk = B_jk d_k
        e.append(d[j] * pairwise(row))  # e_j = d_j t_j
    total = pairwise(e)
    return torch.where(total != total, float("inf"), total)  # NaN counts as +inf


def walk(w, h, scales, recips, deltas, tops, block_objective: bool, four_over_six: bool):
    """One block through the pipeline. ``w`` (R, C, 16) float32; ``h`` (C, 16) the weights of
    the objective (h for hscale, ones for scale-only and rtn) or, with ``block_objective``,
    hscale-block's blocks (C, 16, 16); ``scales`` (127,) the effective scale ``s_g * value`` of
    each byte and ``recips`` (127,) ``fl(1 / scale)`` (byte 0's entry unused); ``deltas`` (k,)
    int64 the window's shifts in priority order (rtn: ``[0, 0]``, a window of the initial byte
    alone, two long so that k is never the size 1 a compiler specialises on); ``tops`` (2,)
    ``6 s_g`` and ``4 s_g``. Returns ``packed`` (8, C, R) uint8, the chosen and initial bytes
    (C, R) uint8 (0x00 for zero groups), ``scored`` (4, C, R) float64: each group's objective
    under the search's weighting at the chosen and at the initial byte, then with h = 1 at the
    same two (0 for zero groups), and, for the caller to drop, the float64 copy ``w_t``
    and the candidates' scales and reciprocals: outputs, so that inductor keeps them as arrays
    in this layout instead of recomputing them inside every loop that reads them."""
    import torch
    w_t = w.permute(2, 1, 0).to(torch.float64).contiguous()  # (16, C, R): exact widening
    amax = w_t.abs().amax(0)  # (C, R)
    zero = amax == 0  # NVFP4-ZERO-1
    at6 = range_bytes(torch, amax, tops[0])  # NVFP4-INIT-1
    if four_over_six:  # NVFP4-INIT-2: the byte at 4 only where strictly better than at 6
        at4 = range_bytes(torch, amax, tops[1])
        pair = torch.stack((at6, at4)).clamp_min(LADDER_FIRST_BYTE)  # (2, C, R)
        errors = weighted_objectives(torch, residuals(torch, w_t, scales[pair], recips[pair]),
                                     None)
        initial = torch.where(errors[1] < errors[0], at4, at6)
    else:
        initial = at6
    c0 = initial.clamp_min(LADDER_FIRST_BYTE)  # zero groups: a stand-in byte
    window = (c0.unsqueeze(0) + deltas.view(-1, 1, 1)).clamp(LADDER_FIRST_BYTE,
                                                              LADDER_LAST_BYTE)  # HSCALE-WIN-1
    scale, recip = scales[window], recips[window]  # (k, C, R)
    residual = residuals(torch, w_t, scale, recip)
    if block_objective:
        errors = block_objectives(torch, w_t, residual, h)  # HSCALE-BLOCK-1
    else:
        errors = weighted_objectives(torch, residual, h)  # HSCALE-OBJ-1
    rank = torch.argmin(errors, dim=0)  # HSCALE-ARGMIN-1: the first minimum
    chosen = (c0 + deltas[rank]).clamp(LADDER_FIRST_BYTE, LADDER_LAST_BYTE)
    s = torch.where(zero, 1.0, scales[chosen]).unsqueeze(0)  # zero groups: any positive scale
    aw_t = w_t.abs()
    q = e2m1_round(torch, aw_t / s)  # NVFP4-E2M1-2: the exact quotient
    sign = 4.0 - 4.0 * torch.copysign(torch.ones_like(w_t), w_t)  # 0 or 8 (NVFP4-E2M1-3)
    code = torch.clamp_max(q, 2.0) + torch.clamp_max(q, 5.0) + sign  # (16, C, R)
    packed = (code[0::2] + 16.0 * code[1::2]).to(torch.uint8)  # NVFP4-PACK-1
    # The objectives at the chosen and at the initial byte (shift 0, the first candidate): the
    # search's own, and h = 1 (the squared error: at the chosen byte from the codes' quotient,
    # at the initial byte from the search's residuals), for the quantization report.
    chosen_residual = aw_t - q * s  # q*s exact: one rounding, as in ``residuals``
    scored = torch.stack((errors.gather(0, rank.unsqueeze(0))[0], errors[0],
                          weighted_objectives(torch, chosen_residual.unbind(0), None),
                          weighted_objectives(torch, [d[0] for d in residual], None)))
    return (packed, torch.where(zero, 0, chosen).to(torch.uint8),
            torch.where(zero, 0, initial).to(torch.uint8), scored, w_t, scale, recip)


def make_walk(block_objective: bool, four_over_six: bool):
    """``walk`` with its static choices bound (``torch_aot`` exports the same as a module)."""

    def fused_walk(w, h, scales, recips, deltas, tops):
        return walk(w, h, scales, recips, deltas, tops, block_objective, four_over_six)

    return fused_walk


PROBE_SCALE = 2.0 ** -4  # the probe's s_g: a power of two, so that every product is exact
# After the group's maximum (6, which puts the initial byte exactly on the group's byte): the
# E2M1 midpoints (ties at that byte), grid points, -0.0, and 0.
PROBE_POINTS = (0.25, -0.75, 1.25, -1.75, 2.5, -3.5, 5.0, -0.5, 1.0, -1.5, 2.0, -3.0, 4.0,
                -0.0, 0.0)


def probe_weight(torch, rows: int, cols: int, device):
    """A float32 (rows, cols) weight, at s_g = ``PROBE_SCALE``, where a mis-rounded, contracted
    or reordered operation would show: group g's maximum is ``6 L(b) s_g`` for a byte b that
    runs over the whole ladder (so the initial byte is b exactly, and the window is clipped at
    0x01 and 0x7E), the other elements are the E2M1 midpoints (exact ties at b), grid points and
    -0.0 times ``L(b) s_g``, one group in three with those elements one ulp up and one in three
    one ulp down; every fifth group is a zero group (-0.0 in every other one) and every
    seventh lies below the ladder (initial byte 0x01 from a quotient that rounds to 0). Every
    value has at most 7 significant bits: exact in float32."""
    from hscale.reference import SCALE_BYTE_VALUES
    groups = rows * cols // GROUP
    index = torch.arange(groups, device=device)
    ladder = torch.from_numpy(SCALE_BYTE_VALUES).to(device)
    byte = LADDER_FIRST_BYTE + (index * 37) % LADDER_LAST_BYTE  # every byte 0x01..0x7E
    unit = ladder[byte] * PROBE_SCALE
    unit = torch.where(index % 7 == 6, ladder[LADDER_FIRST_BYTE] * PROBE_SCALE / 8.0, unit)
    points = torch.tensor((6.0,) + PROBE_POINTS, dtype=torch.float64, device=device)
    w = (points.unsqueeze(0) * unit.unsqueeze(1)).to(torch.float32)  # exact
    bits = w.view(torch.int32)
    step = torch.where(index % 3 == 1, 1, torch.where(index % 3 == 2, -1, 0)).unsqueeze(1)
    step = step * (torch.arange(GROUP, device=device) > 0)  # the maximum stays exact
    w = torch.where(w != 0, bits + step.to(torch.int32), bits).view(torch.float32).clone()
    zero = index % 5 == 4
    w[zero] = torch.where((index[zero] % 10 == 9).unsqueeze(1), -0.0, 0.0)
    return w.view(rows, cols)
