"""An H-Scale NVFP4 weight quantizer written from docs/spec.md and docs/backends.md alone (numpy,
ml_dtypes and fractions; nothing of hscale), with every fault of the mutation harness as a
switch: ``WeightKernel(fault, grade)`` is the quantizer with one fault of that size
(``fault=None``: none, it conforms under exact). tools/mutation_score.py certifies each through
``hscale conform``; the catalogue (``catalogue.py``) says which clause each fault breaks.

The arithmetic is the spec's: s_g from the exact quotient (fractions), the initial byte and
codes from fp64 quotients (exact enough, NVFP4-INIT-1, NVFP4-E2M1-2), the window clipped to the
ladder, the objective in fp64 in the balanced pairwise order with its tie rule, 4over6 by the
unweighted objective, the block objective of HSCALE-BLOCK-1. Vectorised over groups.
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import ml_dtypes
import numpy as np

GROUP = 16
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
MIDS = (E2M1[1:] + E2M1[:-1]) / 2  # 0.25 .. 5: between codes k and k+1


def _e4m3(byte: int) -> float:
    exponent, mantissa = byte >> 3, byte & 7
    return mantissa / 8 * 2.0 ** -6 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7)


E4M3 = np.array([_e4m3(b) for b in range(0x7F)])  # bytes 0x00 .. 0x7E
E4M3_MIDS = (E4M3[1:] + E4M3[:-1]) / 2
FP32_TINY = 2.0 ** -126
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "bfloat16": np.dtype(ml_dtypes.bfloat16)}
METHODS = ("rtn", "scale-only", "hscale", "hscale-block")


def fp32_steps(value, ulps: int) -> np.float32:
    """``value`` (fp32) moved ``ulps`` fp32 values up (down when negative)."""
    v = np.float32(value)
    for _ in range(abs(ulps)):
        v = np.nextafter(v, np.float32(np.inf) if ulps > 0 else np.float32(0))
    return np.float32(v)


def fp32_nearest(exact: Fraction) -> np.float32:
    """fp32 round-to-nearest-even of a positive rational."""
    with np.errstate(over="ignore"):
        guess = np.float32(float(exact))
    near = [np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf))]
    return np.float32(min(near, key=lambda c: (abs(Fraction(float(c)) - exact),
                                               int(np.float32(c).view(np.uint32)) & 1)))


def pairwise(e: np.ndarray) -> np.ndarray:
    """The balanced tree of adjacent pairs over the last axis (16), every + rounded to fp64."""
    while e.shape[-1] > 1:
        e = e[..., 0::2] + e[..., 1::2]
    return e[..., 0]


def is_real(value) -> bool:
    return not isinstance(value, (bool, np.bool_)) and isinstance(
        value, (int, float, Fraction, np.integer, np.floating))


class WeightKernel:
    """The quantizer; ``fault`` / ``grade`` select one fault (docstring of ``catalogue``)."""

    version = "mutant-weight 1.0"
    capabilities = frozenset({"rtn", "scale-only", "hscale", "hscale-block", "4over6"})

    def __init__(self, name: str = "mutant-weight", fault: str | None = None, grade=0,
                 dtype: str = "float32"):
        self.name, self.fault, self.grade = name, fault, grade
        self.input_dtypes = (dtype,)
        if fault in ("swizzle-exchanged", "swizzle-dirty-padding", "swizzle-tile-64"):
            self.scale_layout = "swizzled-128x4"
        if fault in ("reciprocal-not-read-back", "reciprocal-control"):
            self.global_scale_convention = "reciprocal"

    def available(self):
        return True, ""

    def has(self, fault: str) -> bool:
        return self.fault == fault

    # -- NVFP4-IN-*: the input contract ---------------------------------------------------------
    def _reject(self, what: str, accepted: str):
        if not self.has("accept") or self.grade != accepted:
            raise ValueError(f"bad {what}")

    def validate(self, weight, h, method, init, K, U, scale_ceiling, global_scale):
        if not isinstance(method, str) or method not in METHODS or method not in self.capabilities:
            self._reject("method", "method")
            method = "rtn"  # accepted: quantized as rtn
        if not isinstance(init, str) or init not in ("maxabs", "4over6"):
            self._reject("init", "init")
        if type(weight) is not np.ndarray:
            self._reject("weight: not a numpy array", "weight-type")
            weight = np.asarray(weight, np.float32)
        if weight.dtype not in DTYPES.values():
            self._reject("weight dtype", "weight-dtype")
            weight = weight.astype(np.float32)
        if weight.ndim != 2 or weight.size == 0 or weight.shape[1] % GROUP:
            self._reject("weight shape", "weight-shape")
        w = weight.astype(np.float64)
        if not np.isfinite(w).all():
            self._reject("weight: not finite", "weight-finite")
            w = np.nan_to_num(w)
        if method in ("rtn", "scale-only") or h is None and method == "rtn":
            h = None
        elif method == "hscale":
            h = self._real_array(h, (w.shape[1],), "hessian_diag", "h")
            if h is not None and (h < 0).any():
                self._reject("hessian_diag: negative", "h")
        else:
            h = self._real_array(h, (w.shape[1] // GROUP, GROUP, GROUP), "blocks", "blocks")
        if method != "rtn":
            for name, value in (("K", K), ("U", U)):
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                    self._reject(name, "window")
            if not (K >= 1 and 0 <= U <= K - 1):
                self._reject("K, U", "window")
        try:
            ceiling_ok = is_real(scale_ceiling) and 0 < float(scale_ceiling) <= 448
        except OverflowError:
            ceiling_ok = False
        if not ceiling_ok:
            self._reject("scale_ceiling", "scales")
        if global_scale is not None:
            if not is_real(global_scale):
                self._reject("global_scale", "scales")
                global_scale = 1.0
            try:
                value = float(global_scale)
            except OverflowError:
                value = np.inf
            with np.errstate(over="ignore"):
                bad = (not np.isfinite(value) or value < FP32_TINY
                       or float(np.float32(value)) != value
                       or not np.isfinite(np.float32(2688) * np.float32(value)))
            if bad:
                self._reject("global_scale", "scales")
        return w, h

    def _real_array(self, value, shape, name, accepted):
        if value is None:
            self._reject(f"{name}: required", accepted)
            return np.ones(shape)
        array = np.asarray(value)
        if array.dtype.kind not in "iuf" and array.dtype != ml_dtypes.bfloat16:
            self._reject(name, accepted)
            return np.ones(shape)
        out = array.astype(np.float64)
        if out.shape != shape or not np.isfinite(out).all():
            self._reject(name, accepted)
            return np.ones(shape)
        if array.dtype.kind in "iu" and not np.array_equal(out.astype(array.dtype), array):
            self._reject(name, accepted)
        return out

    # -- NVFP4-GS-*: the global scale -------------------------------------------------------------
    def global_scale(self, w, scale_ceiling, given):
        if given is not None:
            s_g = np.float32(given)
            if self.has("supplied-ulps"):  # NVFP4-GS-3: the caller's s_g not used unchanged
                s_g = fp32_steps(s_g, self.grade)
            return s_g
        amax = float(np.abs(w).max())
        if amax == 0:
            return np.float32(0.5 if self.has("zero-amax-scale") else 1.0)
        ceiling = 448.0 if self.has("ceiling-ignored") else float(scale_ceiling)
        quotient = Fraction(amax) / (6 * Fraction(ceiling))
        if quotient > 2 ** 128 and not self.has("no-overflow-check"):  # NVFP4-GS-2
            raise ValueError("bad scale_ceiling: the global scale overflows")
        s_g = fp32_nearest(min(quotient, Fraction(2 ** 128)))
        if self.has("sg-ulps"):  # NVFP4-GS-1
            s_g = fp32_steps(s_g, self.grade)
        if float(s_g) < FP32_TINY and not self.has("no-normal-floor"):
            s_g = np.float32(FP32_TINY)  # NVFP4-GS-2
        with np.errstate(over="ignore"):
            if not np.isfinite(np.float32(2688) * s_g) and not self.has("no-overflow-check"):
                raise ValueError("bad weight: s_g overflows on dequantization")
        return s_g

    # -- NVFP4-E4M3-2, NVFP4-INIT-*: bytes ---------------------------------------------------------
    def encode_e4m3(self, x: np.ndarray) -> np.ndarray:
        """Nearest E4M3 byte of reals x >= 0, ties to even, saturating at 0x7E."""
        below = np.searchsorted(E4M3_MIDS, x, side="left")  # midpoints strictly below x
        on = (below < E4M3_MIDS.size) & (x == E4M3_MIDS[np.minimum(below, E4M3_MIDS.size - 1)])
        up = below % 2 == 1  # the tie goes to the even byte
        if self.has("e4m3-ties-away"):
            up = np.ones_like(up)
        elif self.has("e4m3-ties-odd"):
            up = ~up
        byte = np.where(on & up, below + 1, below)
        if self.has("no-satfinite"):
            byte = np.where(x > 464, 0x7F, byte)
        return byte.astype(np.int64)

    def range_byte(self, amax_g, s_g, divisor):
        quotient = amax_g / (divisor * float(s_g))
        if self.has("quotient-ulps"):  # the quotient off by k fp32 ulps (relative 2^-23 k)
            quotient = quotient * (1 + self.grade * 2.0 ** -23)
        byte = self.encode_e4m3(quotient)
        if self.has("wrong-way-fraction"):  # rounded the wrong way on a fraction of groups
            flat = np.arange(byte.size).reshape(byte.shape)
            picked = (flat * 2654435761 % 2 ** 32) < 2 ** 32 / self.grade
            value = E4M3[np.minimum(byte, 0x7E)]
            other = np.where(quotient > value, byte + 1, byte - 1)
            byte = np.where(picked & (amax_g > 0) & (quotient != value), np.clip(other, 1, 0x7E),
                            byte)
        if not self.has("no-floor"):
            byte = np.where((amax_g > 0) & (byte == 0), 1, byte)  # NVFP4-INIT-1
        return byte

    # -- NVFP4-E2M1-*: codes --------------------------------------------------------------------
    def magnitudes(self, byte: np.ndarray, s_g) -> np.ndarray:
        values = E4M3.copy()
        if self.has("ladder-ends"):  # 0x7F read as the next value, 480, not as NaN
            values = np.append(values, 480.0)
            return values[byte] * float(s_g)
        if self.has("e4m3-subnormal-decode"):
            values[1:8] = np.arange(1, 8) / 8 * 2.0 ** -7
        if self.has("e4m3-decode-byte"):  # one byte decoded as its neighbour
            values[self.grade] = E4M3[self.grade + 1]
        return values[np.minimum(byte, 0x7E)] * float(s_g)

    def codes(self, w: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """(G, 16) codes of weights w (G, 16) at scales (G,)."""
        live = scale > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.has("reciprocal-ulps"):  # |w| * fp32(1/s), 1/s off by k fp32 ulps
                r = np.float32(1) / np.where(live, scale, 1.0).astype(np.float32)
                for _ in range(abs(self.grade)):
                    r = np.nextafter(r, np.float32(np.inf) if self.grade > 0 else np.float32(0))
                q = (np.abs(w).astype(np.float32) * r[:, None]).astype(np.float64)
            else:
                q = np.abs(w) / np.where(live, scale, 1.0)[:, None]
        mids = MIDS.copy()
        if self.has("threshold-moved"):  # the rounding into code k starts a midpoint late
            mids[self.grade - 1] = (E2M1[self.grade] + E2M1[min(self.grade + 1, 7)]) / 2 \
                if self.grade < 7 else 5.5
        code = np.zeros(w.shape, np.int64)
        for k, mid in enumerate(mids):
            ties_up = k % 2 == 1
            if self.has("tie-flip") and k == self.grade:
                ties_up = not ties_up
            code += (q >= mid) if ties_up else (q > mid)
        code = np.where(live[:, None], code, 0)
        if self.has("e2m1-table"):  # magnitude k written with the code of bit 0 flipped
            code = np.where(code == self.grade, code ^ 1, code)
        negative = np.signbit(w)
        if self.has("sign-zero") and self.grade in ("exact", "both"):
            negative &= w != 0
        if self.has("sign-zero") and self.grade in ("rounded", "both"):
            negative &= (code != 0) | (w == 0)
        return (code | np.where(negative, 8, 0)).astype(np.uint8)

    # -- HSCALE-*: the search ----------------------------------------------------------------
    def objective(self, w, codes, scale, h, blocks=None):
        values = E2M1[codes & 7] * np.where(codes & 8, -1.0, 1.0)
        p = values * scale[:, None]
        d = w - p
        if self.has("objective-fp32"):
            d = d.astype(np.float32)
            h = None if h is None else h.astype(np.float32)
        if blocks is not None:  # HSCALE-BLOCK-1
            if self.has("block-diagonal"):
                blocks = blocks * np.eye(GROUP)
            if self.has("block-transposed"):
                blocks = np.swapaxes(blocks, 1, 2)
            with np.errstate(over="ignore", invalid="ignore"):
                t = pairwise(blocks * d[:, None, :])
                e = d * t
                total = np.sum(e, axis=1) if self.has("block-sequential") else pairwise(e)
            return np.where(np.isnan(total), np.inf, total)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.has("objective-abs"):
                e = h * np.abs(d)
            else:
                e = h * (d * d)
            if self.has("objective-sequential"):
                total = e[:, 0].copy()
                for j in range(1, GROUP):
                    total = total + e[:, j]
                return total.astype(np.float64)
            return pairwise(e).astype(np.float64)

    def shifts(self, K, U) -> list[int]:
        """The window's shifts in the priority order 0, +1, -1, +2, -2, ... (HSCALE-WIN-1,
        HSCALE-ARGMIN-1), at most 125 each way."""
        D = K - 1 - U
        if self.has("window-up"):
            U += 1
        if self.has("window-down"):
            D += 1
        order = [0]
        for k in range(1, max(min(U, 125), min(D, 125)) + 1):
            if self.has("tie-minus-first"):
                order += [-k] * (k <= min(D, 125)) + [k] * (k <= min(U, 125))
            else:
                order += [k] * (k <= min(U, 125)) + [-k] * (k <= min(D, 125))
        return order

    def clip(self, candidate: np.ndarray) -> np.ndarray:
        if self.has("window-wrap"):
            return np.where(candidate < 1, candidate + 126, np.minimum(candidate, 0x7E))
        if self.has("ladder-ends"):
            return np.clip(candidate, 0x00, 0x7F)
        return np.clip(candidate, 0x01, 0x7E)

    def search(self, w, h, blocks, c0, s_g, K, U):
        """(chosen bytes, codes) of live groups w (G, 16) from initial bytes c0 (G,)."""
        best_e = np.full(c0.shape, np.inf)
        best = c0.copy()
        found = np.zeros(c0.shape, bool)
        shifts = self.shifts(K, U)
        slide = np.zeros(c0.shape, np.int64)
        if self.has("window-slide"):  # the window slid inside the ladder instead of clipped
            D = K - 1 - U
            slide = np.where(c0 - D < 1, 1 - (c0 - D), np.where(c0 + U > 0x7E, 0x7E - (c0 + U),
                                                                 0))
        for delta in shifts:
            candidate = self.clip(c0 + slide + delta)
            scale = self.magnitudes(candidate, s_g)
            e = self.objective(w, self.codes(w, scale), scale, h, blocks)
            better = (e < best_e) | ~found
            if self.has("tie-last"):
                better = (e <= best_e) | ~found
            best = np.where(better, candidate, best)
            best_e = np.where(better, e, best_e)
            found |= True
        return best

    # -- quantize ---------------------------------------------------------------------------
    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        w, h = self.validate(weight, hessian_diag, method, init, K, U, scale_ceiling,
                             global_scale)
        if not isinstance(method, str) or method not in METHODS:
            method = "rtn"  # (the accept fault let it through)
        if not isinstance(init, str) or init not in ("maxabs", "4over6"):
            init = "maxabs"
        s_g = self.global_scale(w, scale_ceiling, global_scale)
        stored = s_g
        if self.fault in ("reciprocal-not-read-back", "reciprocal-control"):
            stored = np.float32(1) / s_g  # NVFP4-GS-4: the reciprocal is stored
            if self.has("reciprocal-control"):
                s_g = np.float32(1) / stored  # and quantized with what it reads back as
        rows, cols = w.shape
        groups = w.reshape(-1, GROUP)
        amax_g = np.abs(groups).max(axis=1)
        live = amax_g > 0
        if method == "hscale-block":
            blocks = np.broadcast_to(h[None], (rows,) + h.shape).reshape(-1, GROUP, GROUP)
            weights = None
        else:
            blocks = None
            ones = np.ones(cols)
            weights = np.broadcast_to(h if method == "hscale" else ones, (rows, cols))
            if method == "scale-only" and self.has("scale-only-uses-h") and \
                    hessian_diag is not None and np.shape(hessian_diag) == (cols,):
                weights = np.broadcast_to(np.asarray(hessian_diag, np.float64), (rows, cols))
            weights = weights.reshape(-1, GROUP)
        c0 = self.range_byte(amax_g, s_g, 6)
        if init == "4over6":  # NVFP4-INIT-2: the unweighted objective decides
            c4 = self.range_byte(amax_g, s_g, 4)
            unweighted = weights if self.has("fouroversix-weighted") and weights is not None \
                else np.ones(groups.shape)
            s6, s4 = self.magnitudes(c0, s_g), self.magnitudes(c4, s_g)
            e6 = self.objective(groups, self.codes(groups, s6), s6, unweighted)
            e4 = self.objective(groups, self.codes(groups, s4), s4, unweighted)
            take4 = (e4 <= e6) if self.has("fouroversix-tie-to-4") else (e4 < e6)
            c0 = np.where(take4, c4, c0)
        byte = c0.copy()
        searching = method != "rtn" or self.has("rtn-searches")
        if searching and live.any():
            sel = np.flatnonzero(live)
            byte[sel] = self.search(groups[sel], None if weights is None else weights[sel],
                                    None if blocks is None else blocks[sel], c0[sel], s_g,
                                    K if method != "rtn" else 16, U if method != "rtn" else 6)
        byte = np.where(live, byte, 0x38 if self.has("zero-byte") else 0)
        delta = np.where(live, byte - c0, 1 if self.has("zero-delta") else 0)
        codes = self.codes(groups, np.where(live, self.magnitudes(byte, s_g), 0.0))
        if self.has("zero-sign"):
            codes = np.where(live[:, None], codes, 0)
        codes = codes.reshape(rows, cols)
        scale_bytes = byte.reshape(rows, cols // GROUP).astype(np.uint8)
        result = SimpleNamespace(packed=self.pack(codes), scale_bytes=self.layout(scale_bytes),
                                 global_scale=stored,
                                 delta=delta.reshape(rows, cols // GROUP).astype(np.int8))
        if not (self.fault or "").startswith("nibbles"):  # else the packed bytes alone
            result.codes = codes
        return result

    # -- NVFP4-PACK-*: storage --------------------------------------------------------------
    def pack(self, codes):
        low, high = codes[:, 0::2], codes[:, 1::2]
        packed = (low | (high << 4)).astype(np.uint8)
        if self.has("nibbles-all"):
            packed = (high | (low << 4)).astype(np.uint8)
        elif self.has("nibbles-last-byte"):
            packed[:, -1] = (high[:, -1] | (low[:, -1] << 4)).astype(np.uint8)
        return packed

    def layout(self, scale_bytes):
        if self.has("scale-bytes-column-major"):
            return np.ascontiguousarray(scale_bytes.T).reshape(scale_bytes.shape)
        if getattr(self, "scale_layout", "row-major") == "row-major":
            return scale_bytes
        rows, cols = scale_bytes.shape
        r, k = np.indices((rows, cols))
        tile = 64 if self.has("swizzle-tile-64") else 128
        inner = (r % 32) * 16 + ((r % tile) // 32) * 4
        if self.has("swizzle-exchanged"):
            inner = (r % 32) * 4 + ((r % 128) // 32) * 16
        offset = ((r // tile) * -(-cols // 4) + k // 4) * 512 + inner + k % 4
        size = -(-rows // 128) * 128 * -(-cols // 4) * 4
        out = np.full(size, 0xFF if self.has("swizzle-dirty-padding") else 0, np.uint8)
        out[np.minimum(offset, size - 1)] = scale_bytes
        return out


def create():
    return WeightKernel()
