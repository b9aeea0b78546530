"""The level-0 GEMM / MMA cases (spec section 10): named block-scaled products, each citing the
clauses it exercises, in two sets: ``gemm_nvfp4`` (both operands NVFP4, what a tensor core's
block-scale MMA computes) and ``gemm_weightonly`` (activations times an NVFP4 weight).

Every case is defined by its operands alone (codes, scale bytes, global scales; activations in
their dtype) and the output dtype; the expected results are whatever the reference computes:
the exact sum, the spec's own result, and the admissible interval of each accumulation model
(NVFP4-GEMM-7). Operands with chosen block values (the order-sensitive and cancelling sums)
are built by ``hscale.judge.gemm_builders.block_values_pair``; random operands come from a
generator seeded by the case's name.
"""

from __future__ import annotations

import numpy as np

from hscale.judge.cases import GemmCase
from hscale.judge.gemm_builders import activations, block_values_pair, from_values, nvfp4
from hscale.reference.gemm import Nvfp4Tensor

from .rand import CaseRandom

NVFP4_SET, WEIGHT_ONLY_SET = "gemm_nvfp4", "gemm_weightonly"


def _random_nvfp4(rnd: CaseRandom, rows: int, cols: int, low: int = 0x01, high: int = 0x7E,
                  global_scale=1.0) -> Nvfp4Tensor:
    """Random codes (all 16) and scale bytes in [low, high], from the case's own stream (raw
    PCG64 bits only: the same on every machine and NumPy version)."""
    codes = rnd.integers(0, 16, (rows, cols)).astype(np.uint8)
    scale_bytes = (low + rnd.integers(0, 1 << 16, (rows, cols // 16)) % (high - low + 1))
    return nvfp4(codes, scale_bytes.astype(np.uint8), global_scale)


def _q8_0_activations(rnd: CaseRandom, rows: int, cols: int, low_exp: int, span: int
                      ) -> np.ndarray:
    """float32 activations exact in bfloat16, float16 and ggml's Q8_0: per block of 32 a
    power-of-two scale 2^e (e in [low_exp, low_exp + span)) times int8 values in [-127, 127],
    one of them +-127 (so ggml's amax / 127 is the scale itself)."""
    blocks = rows * cols // 32
    q = np.clip(rnd.integers(0, 256, (blocks, 32)) - 128, -127, 127)
    where = rnd.integers(0, 32, (blocks,))
    q[np.arange(blocks), where] = np.where(rnd.integers(0, 2, (blocks,)) == 1, 127, -127)
    exponents = low_exp + rnd.integers(0, 1 << 16, (blocks,)) % span
    return (q * np.exp2(exponents)[:, None]).reshape(rows, cols).astype(np.float32)


def _stack(pairs) -> tuple[Nvfp4Tensor, Nvfp4Tensor]:
    """A and B whose row k is the k-th pair's (one row each), padded to one K with zero
    blocks: S[k, k] is the k-th pair's sum."""
    width = max(a.codes.shape[1] for a, _ in pairs)

    def pad(t):
        extra = width - t.codes.shape[1]
        return (np.pad(t.codes, ((0, 0), (0, extra))),
                np.pad(t.scale_bytes, ((0, 0), (0, extra // 16)), constant_values=0x38))
    a_parts, b_parts = [pad(a) for a, _ in pairs], [pad(b) for _, b in pairs]
    return (nvfp4(np.concatenate([c for c, _ in a_parts]), np.concatenate([s for _, s in a_parts])),
            nvfp4(np.concatenate([c for c, _ in b_parts]), np.concatenate([s for _, s in b_parts])))


def _with_scales(pair, g_a, g_b):
    a, b = pair
    return nvfp4(a.codes, a.scale_bytes, g_a), nvfp4(b.codes, b.scale_bytes, g_b)


def nvfp4_cases(seed: int) -> list[GemmCase]:
    cases = []

    def add(ident, title, clauses, a, b, out="float32"):
        cases.append(GemmCase(a, b, out, id=ident, title=title, clauses=clauses))

    codes = np.repeat(np.arange(16, dtype=np.uint8)[:, None], 16, axis=1)
    every = nvfp4(codes, 0x38)
    add("gemm-every-code-product", "row r of A and of B hold code r sixteen times: "
        "D[i, j] = 16 a_i b_j, all 256 E2M1 products, exact", ("NVFP4-GEMM-1", "NVFP4-GEMM-3"),
        every, every)
    values = np.tile([1.0, -0.5, 2.0, 0.0, 1.5, -3.0, 0.5, 4.0], 8)[None, :]
    bytes_a, bytes_b = [0x38, 0x07, 0x48, 0x55], [0x3C, 0x20, 0x08, 0x38]
    add("gemm-per-block-scales", "four blocks, each with its own scale bytes in A and B "
        "(1.0 x 1.5, the subnormal 7 * 2^-9 x 2^-3, 4 x 2^-6, 13 x 1): each block's code sums "
        "meet the product of its own two scales, exactly", ("NVFP4-GEMM-1",),
        from_values(values, [bytes_a]),
        from_values(np.stack([np.roll(values[0], s) for s in (0, 3)]), [bytes_b, bytes_b]))
    largest_a = nvfp4(np.full((2, 64), 0x7, np.uint8), 0x7E)
    largest_b = nvfp4(np.stack([np.full(64, 0x7, np.uint8), np.full(64, 0xF, np.uint8)]), 0x7E)
    for out in ("float32", "bfloat16", "float16"):
        add(f"gemm-largest-terms-{out}", "every code +-6 at scale 448: block values 448^2 * 576, "
            f"the sum 441 * 2^20 exact in fp32, in {out}: "
            + {"float32": "itself", "bfloat16": "440 * 2^20 (a tie, to even)",
               "float16": "+-inf (overflow)"}[out],
            ("NVFP4-GEMM-3", "NVFP4-GEMM-6"), largest_a, largest_b, out)
    subnormal = list(range(0x01, 0x08))
    add("gemm-subnormal-scale-products", "every pair of subnormal scale bytes 0x01..0x07, code "
        "products 0.25: scale products down to 2^-18, terms down to 2^-20, all exact",
        ("NVFP4-GEMM-3",), from_values(np.full((7, 16), 0.5), [[b] for b in subnormal]),
        from_values(np.full((7, 16), 0.5), [[b] for b in subnormal]))
    rnd = CaseRandom(seed, "gemm-exactly-summable")
    add("gemm-exactly-summable", "random codes, scale bytes 0x30..0x40, K = 64: every partial "
        "sum a multiple of the terms' quantum below 2^24 of it, one admissible result per model",
        ("NVFP4-GEMM-7", "NVFP4-GEMM-3"), _random_nvfp4(rnd, 6, 64, 0x30, 0x40),
        _random_nvfp4(rnd, 5, 64, 0x30, 0x40))
    add("gemm-cancellation", "block values 448^2 * 576 and -448^2 * 564 cancel to 12 * 448^2 "
        "= 2408448, exactly in fp32 in any order", ("NVFP4-GEMM-4", "NVFP4-GEMM-7"),
        *block_values_pair([448 ** 2 * 576, -448 ** 2 * 564], prefer=(0x7E,)))
    add("gemm-order-2p24", "block values 2^24, 1, 1, -2^24: in fp32 the orders give 0, 1 or 2 "
        "(the exact sum); the interval holds them all", ("NVFP4-GEMM-4",),
        *block_values_pair([2 ** 24, 1, 1, -2 ** 24]))
    add("gemm-order-cancel-large", "block values 2^25, 3, -2^25, 0.5, 1.75: absorbed or kept by "
        "the large terms depending on the order", ("NVFP4-GEMM-4",),
        *block_values_pair([2 ** 25, 3, -2 ** 25, 0.5, 1.75]))
    add("gemm-fp32-not-fp16", "2048 + 1 = 2049 (12 bits): exact in an fp32 accumulator in any "
        "order, 2048 or 2050 in an fp16 one", ("NVFP4-GEMM-4", "NVFP4-GEMM-7"),
        *block_values_pair([2048, 1]))
    for g_a, g_b, tag in ((3.0, 1.0, "3x1"), (0.75, 2.0 ** -3, "0.75x2^-3"),
                          (np.float32(1 / 3), np.float32(0.1), "third-x-tenth")):
        add(f"gemm-global-scales-{tag}", f"S = 257 exactly, gA = {float(g_a)!r}, gB = "
            f"{float(g_b)!r}, bfloat16 out: bf16(fp32(fp32(gA gB) * 257)); rounding 257 to "
            "bfloat16 first (256) gives another value", ("NVFP4-GEMM-5",),
            *_with_scales(block_values_pair([257]), g_a, g_b), "bfloat16")
    add("gemm-output-ties-bfloat16", "diagonal sums 257, 259, -257, 255: bfloat16 ties go to "
        "even (256, 260, -256), 255 is exact", ("NVFP4-GEMM-6",),
        *_stack([block_values_pair([s]) for s in (257, 259, -257, 255)]), "bfloat16")
    add("gemm-output-ties-float16", "diagonal sums 2049, 2051, 4095, -2049: float16 ties go to "
        "even (2048, 2052, 4096, -2048)", ("NVFP4-GEMM-6",),
        *_stack([block_values_pair([s]) for s in (2049, 2051, 4095, -2049)]), "float16")
    add("gemm-float16-overflow", "diagonal sums 65520 (float16's largest plus half an ulp: "
        "+inf), 65519 (65504), -65520 (-inf)", ("NVFP4-GEMM-6",),
        *_stack([block_values_pair([65520]), block_values_pair([65536, -17]),
                 block_values_pair([-65520])]), "float16")
    add("gemm-nibble-order", "even elements 1.0 and odd 6.0 (B: the reverse, and 0.5 / -2.0): "
        "reading a byte's nibbles the other way round changes the products",
        ("NVFP4-GEMM-2",), from_values(np.tile([1.0, 6.0], 16)[None, :], 0x38),
        from_values(np.stack([np.tile([6.0, 1.0], 16), np.tile([0.5, -2.0], 16)]), 0x38))
    rnd = CaseRandom(seed, "gemm-swizzle")
    add("gemm-swizzle-130-rows", "130 rows of A (two 128-row tiles), 5 scale columns (padded to "
        "8 in the 128x4 layout): every row and block its own scale byte", ("NVFP4-GEMM-2",),
        _random_nvfp4(rnd, 130, 80, 0x30, 0x48), _random_nvfp4(rnd, 3, 80, 0x30, 0x48))
    for k in (256, 4096):
        rnd = CaseRandom(seed, f"gemm-random-k{k}")
        add(f"gemm-random-k{k}", f"random codes and scale bytes over the ladder, K = {k}, "
            "global scales 0.0123 and 7.5e-4: judged by the interval of each model",
            ("NVFP4-GEMM-4", "NVFP4-GEMM-7"),
            _random_nvfp4(rnd, 2, k, global_scale=np.float32(0.0123)),
            _random_nvfp4(rnd, 3, k, high=0x60, global_scale=np.float32(7.5e-4)))
    return cases


def weight_only_cases(seed: int) -> list[GemmCase]:
    """Activations that bfloat16, float16 and ggml's Q8_0 blocks all hold exactly (a power of
    two times int8 values reaching +-127 per block of 32), stored as float32, times NVFP4
    weights; and float32 activations whose products are not exact."""
    cases = []
    weight_values = np.tile([6.0, -1.5, 0.5, 4.0], 16)[None, :]
    q = np.concatenate([np.arange(-127, 1, 4), np.arange(127, -1, -4)]).astype(np.float64)
    x = np.stack([q * 2.0 ** -4, -q[::-1] * 2.0 ** -7])  # each block of 32 reaches +-127
    cases.append(GemmCase(
        activations(x), from_values(np.concatenate([weight_values, -weight_values]),
                                    [[0x38, 0x40, 0x38, 0x40]] * 2),
        "float32", id="gemm-weight-only-exact", clauses=("NVFP4-GEMM-8", "NVFP4-GEMM-7"),
        title="activations exact in bfloat16, float16 and Q8_0 (int8 times 2^-4 and 2^-7) times "
              "an NVFP4 weight (scales 1 and 2): every partial sum exact, one admissible result"))
    rnd = CaseRandom(seed, "gemm-weight-only-random")
    cases.append(GemmCase(_q8_0_activations(rnd, 4, 256, -10, 8),
                          _random_nvfp4(rnd, 5, 256, global_scale=np.float32(0.02)),
                          "float32", id="gemm-weight-only-random", clauses=("NVFP4-GEMM-8",),
                          title="random activations exact in bfloat16, float16 and Q8_0 "
                                "(power-of-two block scales), K = 256"))
    rnd = CaseRandom(seed, "gemm-weight-only-float32")
    cases.append(GemmCase(rnd.normalish((3, 128)).astype(np.float32),
                          _random_nvfp4(rnd, 4, 128, global_scale=np.float32(0.05)), "float32",
                          id="gemm-weight-only-float32", clauses=("NVFP4-GEMM-8",),
                          title="float32 activations (24 bits): their products with the weight "
                                "round in fp32, d = K + 1"))
    return cases


def gemm_sets(seed: int) -> dict[str, list[GemmCase]]:
    """Set name -> its cases, in catalogue order (the scale-bookkeeping set's in
    ``gemm_bookkeeping``)."""
    from .gemm_bookkeeping import BOOKKEEPING_SET, bookkeeping_cases
    return {NVFP4_SET: nvfp4_cases(seed), WEIGHT_ONLY_SET: weight_only_cases(seed),
            BOOKKEEPING_SET: bookkeeping_cases(seed)}
