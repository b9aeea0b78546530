"""What a kernel of the rht or tile kind returned, read: codes (or packed codes), row-major
scale bytes (one per 1 x 16 group) and the global scale g it quantized with: the one reader of
that result's form."""

from __future__ import annotations

import numpy as np

from hscale.reference.packing import unpack_codes

from .activation_domain import ObservedActivations
from .findings import Finding


def read_quantized(result, shape, clause: str, what: str = "") -> tuple:
    """``(ObservedActivations or None, findings)`` for a tensor of ``shape`` (rows, n): a
    finding of ``clause`` when the result is not codes, scale bytes and a global scale of that
    shape."""
    rows, n = shape

    def member(name):
        return result.get(name) if isinstance(result, dict) else getattr(result, name, None)

    codes = member("codes")
    if codes is None and member("packed") is not None:
        codes = unpack_codes(np.asarray(member("packed")).astype(np.uint8))
    scale_bytes, g = member("scale_bytes"), member("global_scale")
    if codes is None or np.shape(codes) != (rows, n) or scale_bytes is None \
            or np.shape(scale_bytes) != (rows, n // 16) or g is None:
        return None, [Finding(clause, f"the result is not codes {(rows, n)}, scale bytes "
                              f"{(rows, n // 16)} (one per 1 x 16 group) and a global scale"
                              + (f" of {what}" if what else ""))]
    g = np.float32(g)
    return ObservedActivations(np.asarray(codes).astype(np.uint8),
                               np.asarray(scale_bytes).astype(np.uint8), g,
                               np.float32(1) / g), []
