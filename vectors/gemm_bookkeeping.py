"""The scale-bookkeeping GEMM vectors (set ``gemm_bookkeeping``, docs/vectors.md): exactly
summable NVFP4 x NVFP4 products whose every K block and every 128-row M band has its own
power-of-two scale, large enough that a kernel's split-K slices and M waves exist, so that a
kernel that applies one block's, slice's or band's scale bytes to another returns another
value, bit for bit:

- ``gemm-bookkeeping-k8192``: M = 512 (four 128-row bands), K = 8192 (512 blocks): CUTLASS
  #3615 (every split-K slice applying slice 0's scales), #3596 (a later M wave reusing the
  previous wave's A scales);
- ``gemm-bookkeeping-tp2-rank0`` / ``-rank1``: the two tensor-parallel shards of a K = 2080 GEMM,
  1040 per rank (65 blocks: not a multiple of 32, so the 128x4 layout pads a scale column),
  vLLM #48898 (stale padded scale columns read as a block's); M = 130, two bands;
- ``gemm-bookkeeping-k16``, ``-k32``, ``-k48``: K below one MMA step of 64, FlashInfer #4090;
  M = 130.

One column of output each (N = 1): the bookkeeping is A's and B's along K, and A's across M.

The operands are too large to list (a K = 8192 operand is 2 MB of codes), so each is stored as
the rule that makes it (:class:`Pattern`); ``hscale vectors verify`` expands and recomputes it.
Every code is +-0.5 or +-1 and every scale a power of two from 2^-2 to 2^2, so a term is a
multiple of 2^-6 and the sum of the magnitudes at most K * 2^4 <= 2^18: every partial sum is
exact in fp32 (NVFP4-GEMM-7), and with power-of-two global scales the output has one admissible
value under the fp32 model. The 128x4 layout's padding of these operands holds the byte 0x7F (a
NaN scale, "stale"), which a kernel never reads (NVFP4-GEMM-2): one that does returns NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hscale.judge.cases import GemmCase

BOOKKEEPING_SET = "gemm_bookkeeping"
#: Rows of an M band (a CTA tile's M, the 128x4 layout's row tile).
BAND = 128
#: What the 128x4 layout's padding of these operands holds: a NaN scale byte, as stale memory
#: may (vllm#37564, the padding a kernel must never read).
STALE_PADDING = 0x7F
#: E4M3 bytes of 2^-2 .. 2^2 (NVFP4-E4M3-1: 0x38 is 1.0, eight bytes a binade).
POWER_OF_TWO_BYTES = (0x38, 0x40, 0x30, 0x48, 0x28)
#: E2M1 codes of +-0.5 and +-1 (NVFP4-E2M1-1).
SMALL_CODES = (0x2, 0x9, 0x1, 0xA, 0x2, 0x1, 0x9, 0xA, 0x1, 0x2, 0xA, 0x9)


@dataclass(frozen=True)
class Pattern:
    """A matrix from a table: ``value[r, c] = table[(offset + r * row_step + (r // 128) *
    band_step + c * col_step) mod len(table)]`` (docs/vectors.md, "Scale bookkeeping")."""

    table: tuple[int, ...]
    row_step: int = 0
    band_step: int = 0
    col_step: int = 1
    offset: int = 0

    def expand(self, rows: int, cols: int) -> np.ndarray:
        r, c = np.indices((rows, cols))
        index = self.offset + r * self.row_step + (r // BAND) * self.band_step + c * self.col_step
        return np.asarray(self.table, np.uint8)[index % len(self.table)]

    def as_json(self) -> dict:
        return {"table": bytes(self.table).hex(), "row_step": self.row_step,
                "band_step": self.band_step, "col_step": self.col_step, "offset": self.offset}

    @classmethod
    def from_json(cls, entry: dict) -> "Pattern":
        return cls(tuple(bytes.fromhex(entry["table"])), int(entry["row_step"]),
                   int(entry["band_step"]), int(entry["col_step"]), int(entry["offset"]))


@dataclass(frozen=True, eq=False)
class PatternOperand:
    """An NVFP4 operand given by rules: ``rows`` x ``cols`` codes from ``codes``, the
    (rows, cols/16) scale bytes from ``scales``, the global scale, and the byte its 128x4
    layout's padding holds (``padding_byte``, read by ``hscale.judge.gemm.wire_operand``)."""

    rows: int
    cols: int
    code_pattern: Pattern
    scale_pattern: Pattern
    global_scale: np.float32
    padding_byte: int = STALE_PADDING
    note: str = field(default="", compare=False)

    @cached_property
    def codes(self) -> np.ndarray:
        return self.code_pattern.expand(self.rows, self.cols)

    @cached_property
    def scale_bytes(self) -> np.ndarray:
        return self.scale_pattern.expand(self.rows, self.cols // 16)

    def as_json(self) -> dict:
        return {"kind": "nvfp4-pattern", "rows": self.rows, "cols": self.cols,
                "codes": self.code_pattern.as_json(), "scale_bytes": self.scale_pattern.as_json(),
                "global_scale": f"{int(np.float32(self.global_scale).view(np.uint32)):08x}",
                "padding_byte": f"{self.padding_byte:02x}"}

    @classmethod
    def from_json(cls, entry: dict) -> "PatternOperand":
        return cls(int(entry["rows"]), int(entry["cols"]), Pattern.from_json(entry["codes"]),
                   Pattern.from_json(entry["scale_bytes"]),
                   np.uint32(int(entry["global_scale"], 16)).view(np.float32),
                   int(entry["padding_byte"], 16))


def _a(rows: int, cols: int, offset: int = 0) -> PatternOperand:
    """A: rows step through the code table; every K block and every 128-row band its own
    power-of-two scale (the band moves the scale table by two)."""
    return PatternOperand(rows, cols, Pattern(SMALL_CODES, row_step=5, offset=offset),
                          Pattern(POWER_OF_TWO_BYTES, band_step=2, offset=offset // 16),
                          np.float32(2.0 ** -3))


def _b(rows: int, cols: int, offset: int = 0) -> PatternOperand:
    return PatternOperand(rows, cols,
                          Pattern(SMALL_CODES[:11], row_step=7, col_step=3, offset=3 * offset),
                          Pattern(POWER_OF_TWO_BYTES, row_step=1, col_step=3,
                                  offset=3 * (offset // 16)), np.float32(4.0))


def bookkeeping_cases(seed: int) -> list[GemmCase]:
    """The set's cases (``seed`` changes nothing: the operands are rules)."""
    del seed
    cases = [GemmCase(_a(512, 8192), _b(1, 8192), "float32", id="gemm-bookkeeping-k8192",
                      title="M = 512 (four 128-row bands) by K = 8192 (512 blocks), every "
                            "block and band its own power-of-two scale, exactly summable: "
                            "split-K slices and M waves must each apply their own scales",
                      clauses=("NVFP4-GEMM-1", "NVFP4-GEMM-2", "NVFP4-GEMM-7"))]
    for rank in (0, 1):
        cases.append(GemmCase(
            _a(130, 1040, 1040 * rank), _b(1, 1040, 1040 * rank), "float32",
            id=f"gemm-bookkeeping-tp2-rank{rank}",
            title=f"rank {rank} of a K = 2080 GEMM split over two ranks: K = 1040 per rank (65 "
                  "blocks, not a multiple of 32: a padded scale column holding stale 0x7F)",
            clauses=("NVFP4-GEMM-1", "NVFP4-GEMM-2", "NVFP4-GEMM-7")))
    for k in (16, 32, 48):
        cases.append(GemmCase(
            _a(130, k), _b(1, k), "float32", id=f"gemm-bookkeeping-k{k}",
            title=f"K = {k}, below one MMA step of 64: the 128x4 layout's padded columns hold "
                  "stale 0x7F, and two 128-row bands their own scales",
            clauses=("NVFP4-GEMM-1", "NVFP4-GEMM-2", "NVFP4-GEMM-7")))
    return cases
