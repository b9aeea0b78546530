"""Host-side steps shared by the ``torch``, ``torch-cuda`` and ``cupy`` backends.

Everything here that the spec defines is delegated to ``hscale.reference``: input validation
(NVFP4-IN-*), the global scale (NVFP4-GS-*), the range-fitting initial bytes (NVFP4-INIT-*),
the window and its priority order (HSCALE-WIN-1, HSCALE-ARGMIN-1), packing (NVFP4-PACK-1) and
the result type. The backends only replace the two hot loops, the per-group candidate search and
the element encoding, and they get the same bits because they evaluate the same fp64 expressions
(see ``torch_backend`` and ``cupy_backend`` for the arguments).

Nothing in this module imports torch or cupy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hscale.reference import QuantizedWeight, compute_global_scale, priority_order, window_bytes
from hscale.reference.e4m3 import LADDER_LAST_BYTE
from hscale.reference.quantize import check_arguments, resolve_global_scale
from hscale.reference.validation import check_method_hessian


@dataclass(frozen=True)
class Request:
    """A validated call: what ``hscale.reference.quantize`` checks, checked by the reference."""

    weight: np.ndarray  # (m, n) float32, float16 or bfloat16, checked by check_weight
    h: np.ndarray | None  # float64 (n,) for hscale, else None (HSCALE-METHOD-1)
    method: str
    init: str
    K: int
    U: int
    scale_ceiling: float
    global_scale: np.float32 | None  # a caller's s_g, checked; None: compute from amax


def validate(weight, hessian_diag, method, init, K, U, scale_ceiling, global_scale) -> Request:
    """Validate exactly as ``hscale.reference.quantize`` does, in the same order and with the
    reference's own checks (``check_arguments``, ``check_hessian_diag``,
    ``resolve_global_scale`` for a caller's s_g), so that every backend raises the reference's
    error messages."""
    weight, method, init, K, U, scale_ceiling = check_arguments(weight, method, init, K, U,
                                                                scale_ceiling)
    h = check_method_hessian(hessian_diag, method, weight.shape[1])
    if global_scale is not None:
        global_scale = resolve_global_scale(weight, global_scale, scale_ceiling)
    return Request(weight, h, method, init, K, U, scale_ceiling, global_scale)


def global_scale_for(request: Request, amax: float) -> np.float32:
    """The caller's s_g (checked in ``validate``), or the reference's ``compute_global_scale``
    (NVFP4-GS-1) of the tensor's amax. ``amax`` may come from any exact reduction: the largest
    group maximum, which the backends have anyway, is the number ``resolve_global_scale`` gets
    from ``np.max(np.abs(weight))`` without a full |W| temporary."""
    if request.global_scale is not None:
        return request.global_scale
    return compute_global_scale(float(amax), request.scale_ceiling)


def window_table(K: int, U: int) -> np.ndarray:
    """(127, K) uint8: row c holds the window around initial byte c in priority order,
    ``clip(c + delta, 1, 126)`` by the reference's ``candidate_byte`` (HSCALE-WIN-1). Row 0 is
    never used (a zero group is searched at 0x01)."""
    initial = np.arange(LADDER_LAST_BYTE + 1, dtype=np.uint8)
    return window_bytes(initial, priority_order(K, U))


def finish(request: Request, codes: np.ndarray, scale_bytes: np.ndarray,
           initial_bytes: np.ndarray, global_scale) -> QuantizedWeight:
    """The result, built as the reference builds it: packing by ``pack_codes`` and ``delta`` as
    the chosen byte minus the initial byte (zero groups: 0x00 - 0x00)."""
    return QuantizedWeight.from_bytes(codes, scale_bytes, initial_bytes, global_scale,
                                      method=request.method, init=request.init, K=request.K,
                                      U=request.U, scale_ceiling=request.scale_ceiling)
