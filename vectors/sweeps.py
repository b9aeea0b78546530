"""Levels 1 and 2: generated sweeps (not committed; ``hscale vectors generate --level N``).

Level 1, exhaustive over small spaces:

* ``l1-e2m1-*``: every scale byte 0x01..0x7e x every E2M1 code value (both signs, -0.0), every
  midpoint (exact ties) and every midpoint +-1 ulp, for fp32, bf16 and fp16 weights at s_g = 1,
  and for fp32 at a global scale that is not a power of two (the fp32 neighbours of each exact
  threshold);
* ``l1-e4m3-*``: every E4M3 rounding midpoint of the baseline byte (between bytes c and c+1
  for c = 0..125, and 448/480), exactly and +-1 ulp;
* ``l1-tie-*``: every pair (a, b) of shifts of the default window whose objectives tie exactly
  at the minimum (120 pairs; the tie rule alone decides);
* ``l1-window-*``: every baseline byte 0x01..0x7e under several windows (clipping at both ends);
* ``l1-4over6-every-byte``: the 4over6 baseline around every byte.

Level 2: ``cases`` seeded random tensors (shapes, dtypes, distributions, methods, inits,
windows, ceilings drawn at random), for soak testing.
"""

from __future__ import annotations

import numpy as np

from hscale.judge.cases import Case
from hscale.reference import E2M1_MAGNITUDES, SCALE_BYTE_VALUES

from . import hexio
from .catalogue import BF16, F16, F32, MIDPOINTS, ONE, exact, scale_value, ulp_step
from .rand import CaseRandom
from .ties import TIE_K, TIE_U, load_tie_table

LADDER_BYTES = range(1, 127)


def _e2m1_values(byte: int, dtype) -> list:
    """The test values of one scale byte at s_g = 1: codes, midpoints, midpoints +-1 ulp."""
    s = scale_value(byte)
    grid = E2M1_MAGNITUDES
    values = [g * s for g in grid] + [-g * s for g in grid]
    values = list(exact(values, dtype))
    values[8] = np.array(-0.0, dtype=dtype)  # -0 * s is -0.0 already; kept explicit
    mids = exact([m * s for m in MIDPOINTS] + [-m * s for m in MIDPOINTS], dtype)
    values += list(mids) + list(ulp_step(mids, -1)) + list(ulp_step(mids, +1))
    return values


def _e2m1_bracket_values(byte: int, s_g: np.float32) -> list:
    """fp32 neighbours just below / above every exact threshold mid * s (s = s_g e4m3(byte))."""
    s = float(s_g) * scale_value(byte)
    values = []
    for m in MIDPOINTS:
        t = m * s
        near = np.float32(t)
        lo = near if float(near) < t else np.nextafter(near, np.float32(0))
        hi = near if float(near) > t else np.nextafter(near, np.float32(np.inf))
        values += [lo, hi, -lo, -hi]
    return values


def _pack_groups(anchor, values, dtype) -> np.ndarray:
    """Rows of 16: element 0 the anchor (the group maximum), 15 test values after it."""
    rows = []
    for start in range(0, len(values), 15):
        chunk = list(values[start:start + 15])
        chunk += [np.array(0, dtype=dtype)] * (15 - len(chunk))
        rows.append(np.array([anchor] + chunk, dtype=dtype))
    return np.stack(rows)


def e2m1_sweeps(seed: int) -> list[Case]:
    cases = []
    for dtype, tag in ((F32, "fp32"), (BF16, "bf16"), (F16, "fp16")):
        rows = [_pack_groups(np.array(6 * scale_value(b), dtype=dtype), _e2m1_values(b, dtype),
                             dtype) for b in LADDER_BYTES]
        cases.append(Case(
            id=f"l1-e2m1-{tag}", method="rtn", global_scale=ONE,
            title=f"every scale byte x every E2M1 value, midpoint and midpoint +-1 ulp ({tag}); "
                  "rows 4(b-1) .. 4(b-1)+3 have baseline byte b",
            clauses=("NVFP4-E2M1-1", "NVFP4-E2M1-2", "NVFP4-E2M1-3", "NVFP4-E4M3-1",
                     "NVFP4-INIT-1", "NVFP4-DEQ-1", "NVFP4-PACK-1"),
            weight=np.concatenate(rows)))
    for sg_hex in ("3dcccccd", "3eaaaaab", "3a8b4391"):
        s_g = hexio.scalar_from_hex(sg_hex)
        rows = [_pack_groups(np.float32(6 * float(s_g) * scale_value(b)),
                             _e2m1_bracket_values(b, s_g), F32) for b in LADDER_BYTES]
        cases.append(Case(
            id=f"l1-e2m1-brackets-sg-{sg_hex}", method="rtn", global_scale=s_g,
            title=f"s_g = fp32 0x{sg_hex}: every scale byte x the fp32 neighbours of every exact "
                  "E2M1 threshold",
            clauses=("NVFP4-E2M1-2", "NVFP4-GS-3", "NVFP4-INIT-1"),
            weight=np.concatenate(rows)))
    return cases


def e4m3_sweeps(seed: int) -> list[Case]:
    cases = []
    for dtype, tag in ((F32, "fp32"), (BF16, "bf16")):
        rows = []
        for lo in range(0, 127):
            hi_value = 480.0 if lo == 126 else scale_value(lo + 1)
            midpoint = (scale_value(lo) + hi_value) / 2
            anchor = exact([6 * midpoint], dtype)
            filler = (np.array([0.5, -0.25, 1.0, -1.5, 2.0, 0.75, -0.125, 3.0, -2.5, 1.25, 0.0,
                                -0.0, 0.375, -3.5, 2.75]) * max(scale_value(lo), scale_value(1))
                      / 2).astype(dtype)
            for anchor_value in (anchor, ulp_step(anchor, -1), ulp_step(anchor, +1)):
                rows.append(np.concatenate([anchor_value, filler]).astype(dtype))
        cases.append(Case(
            id=f"l1-e4m3-midpoints-{tag}", method="rtn", global_scale=ONE,
            title=f"every E4M3 rounding midpoint of the baseline ({tag}): row 3c is the group "
                  "maximum 6 * (e4m3(c) + e4m3(c+1)) / 2, rows 3c+1 / 3c+2 one ulp below / above",
            clauses=("NVFP4-E4M3-2", "NVFP4-INIT-1"), weight=np.stack(rows)))
    return cases


def tie_sweeps(seed: int) -> list[Case]:
    cases = []
    for (a, b), (c0, group, h) in load_tie_table().items():
        cases.append(Case(
            id=f"l1-tie-{a:+d}-{b:+d}", global_scale=ONE, K=TIE_K, U=TIE_U, hessian_diag=h,
            title=f"shifts {a:+d} and {b:+d} tie exactly at the minimum (c0 = 0x{c0:02x})",
            clauses=("HSCALE-ARGMIN-1", "HSCALE-OBJ-1"), weight=group[None, :]))
    return cases


def window_sweeps(seed: int) -> list[Case]:
    cases = []
    for K, U in ((16, 6), (16, 0), (16, 15), (4, 1)):
        rnd = CaseRandom(seed, f"l1-window-{K}-{U}")
        rows = []
        for byte in LADDER_BYTES:
            row = (rnd.uniform((16,)) * 2 - 1) * 6 * scale_value(byte)
            row[int(rnd.integers(0, 16, (1,))[0])] = 6 * scale_value(byte)
            rows.append(row)
        cases.append(Case(
            id=f"l1-window-K{K}-U{U}", K=K, U=U, global_scale=ONE,
            hessian_diag=rnd.log_uniform((16,), -6, 6),
            title=f"window K = {K}, U = {U} around every baseline byte 0x01..0x7e (row b-1)",
            clauses=("HSCALE-WIN-1", "HSCALE-ARGMIN-1"),
            weight=np.array(rows).astype(np.float32)))
    rnd = CaseRandom(seed, "l1-4over6")
    rows = []
    for byte in LADDER_BYTES:
        row = (rnd.uniform((16,)) * 2 - 1) * 6 * scale_value(byte)
        row[0] = 6 * scale_value(byte)
        rows.append(row)
    for method in ("rtn", "hscale"):
        cases.append(Case(
            id=f"l1-4over6-every-byte-{method}", method=method, init="4over6", global_scale=ONE,
            hessian_diag=rnd.log_uniform((16,), -6, 6) if method == "hscale" else None,
            title="4over6 baseline for a group maximum at every ladder byte",
            clauses=("NVFP4-INIT-2",), weight=np.array(rows).astype(np.float32)))
    return cases


def level1_cases(seed: int, subset: str | None = None) -> list[Case]:
    """All level-1 sweeps (``subset``: only those whose ID starts with it)."""
    cases = e2m1_sweeps(seed) + e4m3_sweeps(seed) + tie_sweeps(seed) + window_sweeps(seed)
    if subset:
        cases = [c for c in cases if c.id.startswith(subset)]
    return cases


# ------------------------------------------------------------------------------------------
# Level 2
# ------------------------------------------------------------------------------------------

L2_SETS = (
    # (method, init, K, U, scale_ceiling)
    ("rtn", "maxabs", 16, 6, 448.0),
    ("rtn", "4over6", 16, 6, 256.0),
    ("scale-only", "maxabs", 16, 6, 448.0),
    ("hscale", "maxabs", 16, 6, 448.0),
    ("hscale", "4over6", 16, 6, 256.0),
    ("hscale", "maxabs", 8, 3, 448.0),
)


def level2_cases(seed: int, cases: int = 64, max_rows: int = 64, max_groups: int = 16) -> list[Case]:
    out = []
    dtypes = (F32, F32, BF16, F16)
    for index in range(cases):
        rnd = CaseRandom(seed, f"l2-{index}")
        pick = rnd.integers(0, 1 << 16, (8,))
        rows = int(pick[0] % max_rows) + 1
        cols = 16 * (int(pick[1] % max_groups) + 1)
        dtype = dtypes[int(pick[2] % len(dtypes))]
        method, init, K, U, ceiling = L2_SETS[int(pick[3] % len(L2_SETS))]
        kind = int(pick[4] % 4)
        magnitude = 2.0 ** (int(pick[5] % 24) - 16)
        if kind == 0:
            values = rnd.normalish((rows, cols)) * magnitude
        elif kind == 1:
            values = rnd.heavy((rows, cols)) * magnitude
        elif kind == 2:  # exact E2M1 grid values times random scale bytes
            codes = rnd.integers(0, 16, (rows, cols))
            grid = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
            byte = rnd.integers(0, 128, (rows, cols // 16)) % 126 + 1
            values = grid[codes] * np.repeat(SCALE_BYTE_VALUES[byte], 16, axis=1) * magnitude
        else:  # zero and constant groups mixed in
            values = rnd.normalish((rows, cols)) * magnitude
            groups = values.reshape(-1, 16)
            which = rnd.integers(0, 4, (groups.shape[0],))
            groups[which == 0] = 0.0
            groups[which == 1] = groups[which == 1][:, :1]
        limit = float(np.finfo(np.float16).max if dtype == F16 else 1e30)
        weight = np.clip(values, -limit, limit).astype(dtype)
        h = None
        if method == "hscale":
            h = rnd.log_uniform((cols,), -int(pick[6] % 30) - 1, int(pick[6] % 30) + 1)
            h[rnd.integers(0, 8, (cols,)) == 0] = 0.0
        supplied = None
        if int(pick[7] % 4) == 0 and np.any(weight.astype(np.float64) != 0):
            amax = float(np.max(np.abs(weight.astype(np.float64))))
            supplied = np.float32(amax / (6 * 448.0) * (1 + rnd.uniform((1,))[0]))
            if not np.isfinite(supplied) or supplied < 2.0 ** -126:
                supplied = None
        out.append(Case(
            id=f"l2-{index:05d}", method=method, init=init, K=K, U=U, scale_ceiling=ceiling,
            hessian_diag=h, global_scale=supplied,
            title=f"seeded random {rows}x{cols} {hexio.dtype_name(dtype)} tensor "
                  f"(distribution {('normal', 'heavy', 'e2m1-grid', 'zero+constant')[kind]})",
            clauses=("HSCALE-METHOD-1",), weight=weight))
    return out
