#!/usr/bin/env python3
"""An fp32-quotient NVFP4 datapath: a model of what most hardware and GPU kernels do, writing an
observed-result file for `hscale vectors check`.

    python vectors/rtl/fp32_quotient.py [--vectors DIR] [--out FILE|-]

Where the spec divides exactly (docs/spec.md: the initial byte from the exact real quotient
amax_g / (6 s_g), NVFP4-INIT-1; each code from the exact |w| / s, NVFP4-E2M1-2), this datapath
divides in fp32, each operation rounded to nearest even as an fp32 divider or multiplier does:

    s_g = fp32(amax / fp32(6 C))                   (or the supplied s_g)
    c0  = E4M3_RNE( fp32( fp32(amax_g) / fp32(6 * s_g) ) ), raised to 0x01 if it is 0x00
    s   = fp32(s_g * e4m3(c0))
    q_j = fp32(|w_j| / s);   code_j = sign(w_j) | RNE of q_j on the E2M1 grid, saturating at 6

Its results differ from the spec's where an fp32 rounding crosses a midpoint: `check` under the
exact profile says it does not conform, and under `--profile faithful --allow
reciprocal-multiply --allow fp32-scale-rounding` (the allowances that name this arithmetic,
docs/spec.md section 7) that it conforms. It covers the rtn max-abs sets (no search); lines are
keyed <set>:<case_index>, as a bench writes them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
LEVEL0 = HERE.parent / "level0"
E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_rne(q: np.ndarray) -> np.ndarray:
    """Magnitude codes 0..7 of non-negative fp32 values q: nearest on the E2M1 grid, ties to
    the even code, saturating at 6 (q compared with the midpoints, exact in float64)."""
    q = q.astype(np.float64)
    codes = np.zeros(q.shape, dtype=np.uint8)
    for k in range(7):
        mid = (E2M1_GRID[k] + E2M1_GRID[k + 1]) / 2
        codes += ((q > mid) if k % 2 == 0 else (q >= mid)).astype(np.uint8)
    return codes


def e4m3_rne(x: float) -> int:
    """E4M3 byte of a non-negative value: nearest of the 127 finite values, ties to the even
    byte, saturating at 0x7E (448)."""
    values = np.array([(m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
                       for e in range(16) for m in range(8)][:127])
    if x >= 448:
        return 0x7E
    upper = int(np.searchsorted(values, x))
    if values[upper] == x:
        return upper
    below, above = values[upper - 1], values[upper]
    if x - below < above - x or (x - below == above - x and (upper - 1) % 2 == 0):
        return upper - 1
    return upper


def quantize_fp32(weight32: np.ndarray, ceiling: float, supplied) -> tuple:
    """(s_g, scale bytes, codes) of a weight already converted to fp32."""
    f32 = np.float32
    absw = np.abs(weight32)
    amax = f32(absw.max())
    if supplied is not None:
        sg = f32(supplied)
    elif amax == 0:
        sg = f32(1.0)
    else:
        sg = max(f32(amax / f32(6 * ceiling)), f32(2.0 ** -126))
    m, n = weight32.shape
    groups = absw.reshape(m, n // 16, 16)
    bytes_ = np.zeros((m, n // 16), dtype=np.uint8)
    codes = np.zeros((m, n), dtype=np.uint8)
    sign = np.signbit(weight32).astype(np.uint8) << 3
    six_sg = f32(f32(6) * sg)
    for r in range(m):
        for i in range(n // 16):
            amax_g = f32(groups[r, i].max())
            cols = slice(16 * i, 16 * i + 16)
            if amax_g == 0:
                codes[r, cols] = sign[r, cols]
                continue
            c0 = max(e4m3_rne(float(f32(amax_g / six_sg))), 1)
            e4m3 = e4m3_value(c0)
            s = f32(sg * f32(e4m3))
            q = (groups[r, i] / s).astype(f32)
            bytes_[r, i] = c0
            codes[r, cols] = sign[r, cols] | e2m1_rne(q)
    return sg, bytes_, codes


def e4m3_value(byte: int) -> float:
    e, m = byte >> 3, byte & 7
    return (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


def pack(codes_row: np.ndarray) -> bytes:
    return bytes(int(codes_row[2 * k]) | int(codes_row[2 * k + 1]) << 4 for k in range(8))


def weight_to_fp32(bits: list[str], dtype: str, shape) -> np.ndarray:
    words = [int(w, 16) for row in bits for w in row.split()]
    if dtype == "float32":
        return np.array(words, dtype=np.uint32).view(np.float32).reshape(shape)
    if dtype == "float16":
        return np.array(words, dtype=np.uint16).view(np.float16).astype(np.float32).reshape(shape)
    if dtype == "bfloat16":  # the 16 high bits of an fp32
        return (np.array(words, dtype=np.uint32) << 16).view(np.float32).reshape(shape)
    raise ValueError(dtype)


def observed_lines(vectors: Path = LEVEL0) -> list[str]:
    """Observed lines of this datapath for every rtn max-abs set of a vector directory."""
    lines = ["# fp32-quotient datapath (vectors/rtl/fp32_quotient.py)"]
    for path in sorted(Path(vectors).glob("*_rtn_maxabs_*.json")):
        document = json.loads(path.read_text())
        for index, case in enumerate(document["cases"]):
            inputs = case["inputs"]
            shape = inputs["shape"]
            w = weight_to_fp32(inputs["weight"], inputs["weight_dtype"], shape)
            ceiling = float(np.array(int(inputs["scale_ceiling"], 16), np.uint64).view(np.float64))
            given = inputs["global_scale"]
            supplied = None if given is None else \
                np.array(int(given, 16), dtype=np.uint32).view(np.float32)[()]
            sg, scale_bytes, codes = quantize_fp32(w, ceiling, supplied)
            key = f"{path.stem}:{index}"
            lines.append(f"{key} gs {int(np.float32(sg).view(np.uint32)):08x}")
            for r in range(shape[0]):
                for i in range(shape[1] // 16):
                    lines.append(f"{key} {r} {i} {int(scale_bytes[r, i]):02x} "
                                 f"{pack(codes[r, 16 * i:16 * i + 16]).hex()}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=Path, default=LEVEL0)
    parser.add_argument("--out", default="-", help="observed file to write ('-': stdout)")
    args = parser.parse_args(argv)
    from hscale.files import write_text  # '-' is stdout; never replaces a link or a device
    write_text(args.out, "\n".join(observed_lines(args.vectors)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
