"""What every interop adapter shares: the arguments checked, the weight handed to the library
without changing a value, and the record of what the library produced.

Nothing here computes a scale or a code: that is the library's job, and the point of an adapter
is to measure what the library does. The one exception is written down where it happens
(``ceiling_global_scale``): a library with no scale-ceiling parameter is given the spec's s_g for
a ceiling other than 448, through the library's own argument for a caller's global scale.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings

import ml_dtypes
import numpy as np

from hscale.reference.global_scale import DEFAULT_SCALE_CEILING, compute_global_scale
from hscale.reference.quantize import Quantizer

RTN_ONLY = frozenset({"rtn"})


class LibraryResult:
    """What a library produced, as ``hscale.judge.diagnose.observe`` reads it: exactly the
    members the library produced (observe derives the rest: packed from codes or codes from
    packed). ``scale_bytes`` uint8 (m, n/16), the library's E4M3 bytes; ``global_scale``
    np.float32 as the library stores it (the multiplier, or the reciprocal for a backend whose
    ``global_scale_convention`` says so); ``packed`` uint8 (m, n/2), element 2i in the low
    nibble, as the library packed it, or ``codes`` uint8 (m, n) where it does not pack; and any
    ``extra`` the library stored (kept for the notes, not judged)."""

    def __init__(self, scale_bytes, global_scale, *, packed=None, codes=None, **extra):
        self.scale_bytes = np.ascontiguousarray(scale_bytes, dtype=np.uint8)
        self.global_scale = np.float32(global_scale)
        if packed is not None:
            self.packed = np.ascontiguousarray(packed, dtype=np.uint8)
        if codes is not None:
            self.codes = np.ascontiguousarray(codes, dtype=np.uint8)
        self.extra = extra

    def __repr__(self):
        return f"LibraryResult({', '.join(k for k in vars(self) if k != 'extra')})"


_CHECKER = Quantizer()


def check_arguments(backend, weight, hessian_diag, method, init, K, U, scale_ceiling,
                    global_scale):
    """The arguments checked as the spec says (NVFP4-IN-1 .. -5, with the reference's own
    checks), then restricted to what the library implements. Returns ``(weight,
    scale_ceiling, caller's s_g or None)``.

    The weight's values are not the adapter's to police: a weight with NaN or Inf is handed to
    the library as it is, and whether the library rejects it (NVFP4-IN-1) is measured. Only
    what the adapter itself needs (a numpy array of a float dtype it can hand over, 2-D, n a
    multiple of 16) and the options the library has no equivalent for are checked here."""
    finite = weight
    if isinstance(weight, np.ndarray) and weight.dtype.kind == "f" or (
            isinstance(weight, np.ndarray) and weight.dtype == np.dtype(ml_dtypes.bfloat16)):
        finite = np.where(np.isfinite(weight), weight, 0).astype(weight.dtype)
    _, _h, options, given = _CHECKER.validate(finite, hessian_diag, method, init, K, U,
                                              scale_ceiling, global_scale)
    if options.method not in backend.capabilities:
        raise ValueError(f"method = {options.method!r}: {backend.name} implements only "
                         f"{', '.join(sorted(backend.capabilities))} (HSCALE-METHOD-1)")
    if options.init != "maxabs" and options.init not in backend.capabilities:
        raise ValueError(f"init = {options.init!r}: {backend.name} implements only the maxabs "
                         "init (NVFP4-INIT-2)")
    return weight, options.scale_ceiling, given


def torch_weight(weight: np.ndarray, accepts=("float32", "bfloat16", "float16")):
    """The numpy weight as a torch tensor of the same values: bfloat16 (ml_dtypes) becomes
    torch.bfloat16 bit for bit; a dtype the library does not accept becomes float32, which is
    exact for float16 and bfloat16."""
    import torch

    if weight.dtype == np.dtype(ml_dtypes.bfloat16):
        if "bfloat16" in accepts:
            return torch.from_numpy(weight.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(weight.astype(np.float32))
    if weight.dtype == np.float16 and "float16" not in accepts:
        return torch.from_numpy(weight.astype(np.float32))
    return torch.from_numpy(np.ascontiguousarray(weight).copy())


def tensor_amax(weight: np.ndarray) -> float:
    """max |W|, exact (for the ceiling fallback only)."""
    return max(float(np.max(weight)), -float(np.min(weight)))


def ceiling_global_scale(weight: np.ndarray, scale_ceiling: float, given):
    """The s_g to pass through the library's caller-global-scale argument, or None to let the
    library compute its own.

    A caller's s_g (NVFP4-GS-3) is passed unchanged. The libraries compute s_g only for the
    ceiling 448 (amax / (6 * 448)); for any other ceiling they have no parameter, so the adapter
    passes the spec's s_g for that ceiling (NVFP4-GS-1) as a pipeline's own global scale: the
    library's scale rule is then measured on its group path, and its own s_g only at C = 448."""
    if given is not None:
        return np.float32(given)
    if float(scale_ceiling) != DEFAULT_SCALE_CEILING:
        amax = tensor_amax(weight)
        if not np.isfinite(amax):  # a bad input (NVFP4-IN-1): what the library does with it is
            return None            # what is measured, not what this helper would raise
        return compute_global_scale(amax, scale_ceiling)
    return None


def fp8_bytes(tensor) -> np.ndarray:
    """The bytes of a torch float8_e4m3fn tensor (or of a uint8 one) as a numpy uint8 array."""
    import torch

    t = tensor.detach().cpu().contiguous()
    if t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    return t.numpy().copy()


def module_status(*modules: str, quiet: bool = False) -> tuple[bool, str]:
    """``(True, "")`` when every module imports, else ``(False, reason)`` with the exception.
    ``quiet``: the imports' warnings are not shown (ModelOpt warns on import that the installed
    transformers "is not tested with modelopt", which says nothing about the kernels judged)."""
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any import failure makes it unavailable
                return False, f"cannot import {name}: {type(exc).__name__}: {exc}"
    return True, ""


def dist_version(*distributions: str) -> str:
    """'name X.Y' for each installed distribution ('name not installed' otherwise), and torch's."""
    parts = []
    for dist in distributions + ("torch",):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return ", ".join(parts)
