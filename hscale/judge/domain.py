"""A backend's declared domain: what inputs it takes and how it hands its results back.

A real NVFP4 kernel is rarely a drop-in for ``hscale.reference.quantize``: it may take only
bfloat16, want rows in multiples of 128, return its scale bytes in the swizzled 128x4 layout
of block-scaled GEMMs, or store the global scale as its reciprocal. None of that is NVFP4's
numerics, so a backend declares it (docs/backends.md), and the judges adapt to it:

- ``input_dtypes``: the weight dtypes it accepts (default float32, float16, bfloat16). A case
  in another dtype is converted: exactly where its values are representable (hand-written
  constructions), or rounded for the data sets (Hypothesis, golden vectors, full models),
  whose expected outputs are then the reference's for the rounded weights;
- ``shape_multiple``: (rows, cols) its inputs must be multiples of (default (1, 16)). A case is
  padded: rows repeated cyclically (the tensor's amax, so s_g, is unchanged) and whole zero
  groups appended (zero groups are independent of every other group, NVFP4-ZERO-1); the result
  is judged whole and cropped back for the test's own expectations;
- ``scale_layout``: ``row-major`` (NVFP4-PACK-2, default) or ``swizzled-128x4`` (NVFP4-PACK-3):
  the judges unswizzle with their own formulation (``unswizzle``, below) and judge the layout
  on the backend's own bytes;
- ``global_scale_convention``: ``multiplier`` (s_g, default) or ``reciprocal`` (the ``6C/amax``
  a compressed-tensors checkpoint stores, NVFP4-GS-4). A caller-supplied s_g has no fp32
  reciprocal that reads back as itself for about 17% of values; a reciprocal backend stores the
  nearest, and the allowance ``supplied-reciprocal`` names that.

``Domain.of(backend)`` reads the attributes; a bad declaration is a ValueError naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hscale.reference.constants import FP32_SMALLEST_NORMAL, GROUP_SIZE

from .builders import exact
from .cases import CaseError

INPUT_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                "bfloat16": np.dtype(ml_dtypes.bfloat16)}
SCALE_LAYOUTS = ("row-major", "swizzled-128x4")
CONVENTIONS = ("multiplier", "reciprocal")
#: The 128x4 tile of NVFP4-PACK-3: 128 rows (4 blocks of 32) by 4 scale columns; the 8x4 tile
#: of NVFP4-ACT-10: 8 rows by 4 scale columns.
TILE_ROWS, TILE_COLS, ROW_BLOCK = 128, 4, 32
SMALL_TILE_ROWS = 8


def is_weight_dtype(dtype) -> bool:
    """One of the weight dtypes of NVFP4-IN-1 (ml_dtypes' bfloat16 has numpy kind 'V', not
    'f', so a kind test alone misses it)."""
    return np.dtype(dtype) in INPUT_DTYPES.values()


#: The magnitudes a backend supports unless it declares fewer: every s_g of NVFP4-IN-4, every
#: group maximum.
FULL_GLOBAL_SCALE_RANGE = (FP32_SMALLEST_NORMAL, float(np.finfo(np.float32).max))


@dataclass(frozen=True)
class Domain:
    input_dtypes: tuple[str, ...] = tuple(INPUT_DTYPES)
    shape_multiple: tuple[int, int] = (1, GROUP_SIZE)
    scale_layout: str = "row-major"
    global_scale_convention: str = "multiplier"
    #: the scale ceilings C it takes (None: any of NVFP4-IN-4; a kernel with 448 built in
    #: declares (448.0,))
    scale_ceilings: tuple[float, ...] | None = None
    #: the s_g (computed or supplied) it supports, and the smallest non-zero group maximum
    global_scale_range: tuple[float, float] = FULL_GLOBAL_SCALE_RANGE
    group_amax_min: float = 0.0
    #: why its magnitudes are limited (recorded in the certificate)
    magnitude_reason: str = ""

    @classmethod
    def of(cls, backend, label: str = "backend") -> "Domain":
        """The domain a backend declares (its optional attributes), checked."""
        dtypes = getattr(backend, "input_dtypes", None)
        dtypes = tuple(INPUT_DTYPES) if dtypes is None else tuple(
            np.dtype(d).name if not isinstance(d, str) else d for d in dtypes)
        unknown = [d for d in dtypes if d not in INPUT_DTYPES]
        if unknown or not dtypes:
            raise ValueError(f"{label}: input_dtypes {list(dtypes)}: each must be one of "
                             f"{', '.join(INPUT_DTYPES)} (the weight dtypes of NVFP4-IN-1), at "
                             "least one")
        multiple = tuple(getattr(backend, "shape_multiple", (1, GROUP_SIZE)) or (1, GROUP_SIZE))
        if len(multiple) != 2 or any(isinstance(m, bool) or not isinstance(m, (int, np.integer))
                                     or m < 1 for m in multiple) or multiple[1] % GROUP_SIZE:
            raise ValueError(f"{label}: shape_multiple {multiple}: (rows, cols), positive "
                             f"integers, cols a multiple of the group size {GROUP_SIZE}")
        layout = getattr(backend, "scale_layout", "row-major")
        if layout not in SCALE_LAYOUTS:
            raise ValueError(f"{label}: scale_layout {layout!r}: one of "
                             f"{', '.join(SCALE_LAYOUTS)}")
        convention = getattr(backend, "global_scale_convention", "multiplier")
        if convention not in CONVENTIONS:
            raise ValueError(f"{label}: global_scale_convention {convention!r}: one of "
                             f"{', '.join(CONVENTIONS)}")
        ceilings = getattr(backend, "scale_ceilings", None)
        if ceilings is not None:
            try:
                ceilings = tuple(float(c) for c in ceilings)
            except (TypeError, ValueError):
                ceilings = ()
            if not ceilings or not all(0 < c <= 448 for c in ceilings):
                raise ValueError(f"{label}: scale_ceilings {getattr(backend, 'scale_ceilings')!r}"
                                 ": the scale ceilings C it takes, each in (0, 448], at least one")
        low, high = _range(getattr(backend, "global_scale_range", FULL_GLOBAL_SCALE_RANGE),
                           f"{label}: global_scale_range")
        group_min = getattr(backend, "group_amax_min", 0.0)
        if isinstance(group_min, bool) or not isinstance(group_min, (int, float, np.floating)) \
                or not 0 <= float(group_min) < np.inf:
            raise ValueError(f"{label}: group_amax_min {group_min!r}: a non-negative number")
        reason = str(getattr(backend, "magnitude_reason", "") or "")
        limited = (low, high) != FULL_GLOBAL_SCALE_RANGE or group_min
        if limited and not reason:
            raise ValueError(f"{label}: a declared global_scale_range or group_amax_min needs its "
                             "magnitude_reason (why the kernel cannot take the others)")
        return cls(dtypes, (int(multiple[0]), int(multiple[1])), layout, convention, ceilings,
                   (low, high), float(group_min), reason)

    # -- describing ------------------------------------------------------------------------
    def as_json(self) -> dict:
        out = {"input_dtypes": list(self.input_dtypes),
               "shape_multiple": list(self.shape_multiple), "scale_layout": self.scale_layout,
               "global_scale_convention": self.global_scale_convention}
        if self.scale_ceilings is not None:
            out["scale_ceilings"] = list(self.scale_ceilings)
        if self.magnitude_reason:
            out.update(global_scale_range=list(self.global_scale_range),
                       group_amax_min=self.group_amax_min,
                       magnitude_reason=self.magnitude_reason)
        return out

    def describe(self) -> str:
        text = (f"inputs {'/'.join(self.input_dtypes)}, shapes multiples of "
                f"{self.shape_multiple[0]} x {self.shape_multiple[1]}, scale bytes "
                f"{self.scale_layout}, s_g as the {self.global_scale_convention}")
        if self.scale_ceilings is not None:
            text += f", C {'/'.join(f'{c:g}' for c in self.scale_ceilings)} only"
        if self.magnitude_reason:
            text += (f", s_g in [{self.global_scale_range[0]:.3g}, "
                     f"{self.global_scale_range[1]:.3g}], group maxima from "
                     f"{self.group_amax_min:.3g} ({self.magnitude_reason})")
        return text

    # -- magnitudes ------------------------------------------------------------------------
    def outside_magnitudes(self, weight: np.ndarray, global_scale, scale_ceiling=448.0) -> str:
        """Why a weight (and the s_g it gets: the caller's, else NVFP4-GS-1's) lies outside the
        declared magnitudes, or ''."""
        if not self.magnitude_reason:
            return ""
        w = np.abs(np.asarray(weight).astype(np.float64))
        if global_scale is None:
            amax = float(w.max()) if w.size else 0.0
            global_scale = (max(amax / (6 * float(scale_ceiling)), FP32_SMALLEST_NORMAL)
                            if amax else 1.0)
        low, high = self.global_scale_range
        if not low <= float(global_scale) <= high:
            return (f"s_g {float(global_scale):.4g} is outside the declared [{low:.4g}, "
                    f"{high:.4g}] ({self.magnitude_reason})")
        if self.group_amax_min and w.size and w.shape[-1] % GROUP_SIZE == 0:
            maxima = w.reshape(-1, GROUP_SIZE).max(axis=1)
            small = maxima[(maxima > 0) & (maxima < self.group_amax_min)]
            if small.size:
                return (f"a group maximum {float(small[0]):.4g} is below the declared "
                        f"{self.group_amax_min:.4g} ({self.magnitude_reason})")
        return ""

    @property
    def dtypes(self) -> list[np.dtype]:
        return [INPUT_DTYPES[d] for d in self.input_dtypes]

    # -- bringing a case into the domain ---------------------------------------------------
    def accepts_dtype(self, dtype) -> bool:
        return np.dtype(dtype).name in self.input_dtypes

    def weight_in_domain(self, weight: np.ndarray, rounding: bool):
        """``(weight, how)``: the weight in a declared dtype (unchanged if it is one), ``how``
        says what was done; None when it cannot be done (a construction not exact in any
        declared dtype, and no rounding allowed)."""
        weight = np.asarray(weight)
        if self.accepts_dtype(weight.dtype):
            return weight, ""
        for dtype in self.dtypes:
            try:
                return exact(weight.astype(np.float64), dtype), f"converted exactly to {dtype.name}"
            except CaseError:
                continue
        if not rounding:
            return None, ""
        target = self.dtypes[0]
        top = float(ml_dtypes.finfo(target).max)
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = np.clip(weight.astype(np.float64), -top, top).astype(target)
        return rounded, f"rounded to {target.name}"

    def padding(self, shape) -> tuple[int, int]:
        """(rows, cols) to append so that ``shape`` meets ``shape_multiple``."""
        rows, cols = shape
        want_r, want_c = self.shape_multiple
        return (-rows) % want_r, (-cols) % want_c

    def pad_weight(self, weight: np.ndarray, hessian_diag):
        """The weight with rows repeated cyclically and zero groups appended (s_g and every
        original group unchanged), and h extended with ones."""
        add_r, add_c = self.padding(weight.shape)
        if add_r:
            repeats = np.resize(np.arange(weight.shape[0]), add_r)
            weight = np.concatenate([weight, weight[repeats]])
        if add_c:
            weight = np.concatenate([weight, np.zeros((weight.shape[0], add_c), weight.dtype)],
                                    axis=1)
            if hessian_diag is not None:
                hessian_diag = np.concatenate([np.asarray(hessian_diag, np.float64),
                                               np.ones(add_c)])
        return weight, hessian_diag


# -- the 128x4 layout, stated again: tiles as reshapes, not the reference's offset formula -----

def _range(value, name: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} {value!r}: (lowest, highest), two numbers") from None
    if not FP32_SMALLEST_NORMAL <= low <= high:
        raise ValueError(f"{name} {value!r}: (lowest, highest) with 2^-126 <= lowest <= highest")
    return low, high


def swizzled_shape(rows: int, scale_cols: int) -> tuple[int, int]:
    """(padded rows, padded scale columns) of the 128x4 layout."""
    return -(-rows // TILE_ROWS) * TILE_ROWS, -(-scale_cols // TILE_COLS) * TILE_COLS


def swizzle(scale_bytes: np.ndarray, padding: int = 0) -> np.ndarray:
    """Row-major (m, k) scale bytes in the 128x4 layout, flat and padded with ``padding`` (0x00,
    as NVFP4-PACK-3 writes it; a GEMM case may hold another byte there, which a GEMM never
    reads, NVFP4-GEMM-2): tiles of 128 rows by 4 columns, row tiles outermost; inside a tile the
    128 rows are 4 blocks of 32, and the bytes of row 32q + p, column c sit at 16 p + 4 q + c
    (NVFP4-PACK-3)."""
    rows, cols = scale_bytes.shape
    padded_rows, padded_cols = swizzled_shape(rows, cols)
    padded = np.full((padded_rows, padded_cols), padding, np.uint8)
    padded[:rows, :cols] = scale_bytes
    tiles = padded.reshape(padded_rows // TILE_ROWS, TILE_ROWS // ROW_BLOCK, ROW_BLOCK,
                           padded_cols // TILE_COLS, TILE_COLS)  # (a, q, p, b, c)
    return tiles.transpose(0, 3, 2, 1, 4).reshape(-1)  # (a, b, p, q, c)


def unswizzle(swizzled, rows: int, scale_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(row-major (rows, scale_cols) bytes, the padding bytes) of a 128x4-layout buffer, which
    must hold exactly the padded size (a ValueError says what it holds)."""
    flat = np.asarray(swizzled, dtype=np.uint8).reshape(-1)
    padded_rows, padded_cols = swizzled_shape(rows, scale_cols)
    if flat.size != padded_rows * padded_cols:
        raise ValueError(f"{flat.size} bytes; the 128x4 layout of {rows} x {scale_cols} scale "
                         f"bytes is {padded_rows} x {padded_cols} = {padded_rows * padded_cols}")
    tiles = flat.reshape(padded_rows // TILE_ROWS, padded_cols // TILE_COLS, ROW_BLOCK,
                         TILE_ROWS // ROW_BLOCK, TILE_COLS)  # (a, b, p, q, c)
    padded = tiles.transpose(0, 3, 2, 1, 4).reshape(padded_rows, padded_cols)
    inside = np.zeros(padded.shape, bool)
    inside[:rows, :scale_cols] = True
    return padded[:rows, :scale_cols].copy(), padded[~inside]


def swizzled_8x4_shape(rows: int, scale_cols: int) -> tuple[int, int]:
    """(padded rows, padded scale columns) of the 8x4 layout."""
    return -(-rows // SMALL_TILE_ROWS) * SMALL_TILE_ROWS, -(-scale_cols // TILE_COLS) * TILE_COLS


def swizzle_8x4(scale_bytes: np.ndarray) -> np.ndarray:
    """Row-major (m, k) scale bytes in the 8x4 layout, flat and zero padded: tiles of 8 rows by
    4 columns, row tiles outermost, each tile's 8 rows of 4 bytes in order (NVFP4-ACT-10)."""
    rows, cols = scale_bytes.shape
    padded_rows, padded_cols = swizzled_8x4_shape(rows, cols)
    padded = np.zeros((padded_rows, padded_cols), np.uint8)
    padded[:rows, :cols] = scale_bytes
    tiles = padded.reshape(padded_rows // SMALL_TILE_ROWS, SMALL_TILE_ROWS,
                           padded_cols // TILE_COLS, TILE_COLS)  # (a, p, b, c)
    return tiles.transpose(0, 2, 1, 3).reshape(-1)  # (a, b, p, c)


def unswizzle_layout(buffer, layout: str, rows: int, scale_cols: int):
    """(row-major (rows, scale_cols) bytes, the padding bytes) of a buffer in ``layout``:
    ``row-major`` (no padding), ``swizzled-128x4`` or ``swizzled-8x4``; a ValueError says what
    the buffer holds when it is not that layout's size."""
    if layout == "swizzled-128x4":
        return unswizzle(buffer, rows, scale_cols)
    flat = np.asarray(buffer, dtype=np.uint8).reshape(-1)
    if layout == "row-major":
        if flat.size != rows * scale_cols:
            raise ValueError(f"{flat.size} bytes; {rows} x {scale_cols} scale bytes row-major "
                             f"are {rows * scale_cols}")
        return flat.reshape(rows, scale_cols).copy(), flat[:0]
    padded_rows, padded_cols = swizzled_8x4_shape(rows, scale_cols)
    if flat.size != padded_rows * padded_cols:
        raise ValueError(f"{flat.size} bytes; the 8x4 layout of {rows} x {scale_cols} scale "
                         f"bytes is {padded_rows} x {padded_cols} = {padded_rows * padded_cols}")
    tiles = flat.reshape(padded_rows // SMALL_TILE_ROWS, padded_cols // TILE_COLS,
                         SMALL_TILE_ROWS, TILE_COLS)  # (a, b, p, c)
    padded = tiles.transpose(0, 2, 1, 3).reshape(padded_rows, padded_cols)
    inside = np.zeros(padded.shape, bool)
    inside[:rows, :scale_cols] = True
    return padded[:rows, :scale_cols].copy(), padded[~inside]
