"""Real stochastic-rounding implementations behind the stochastic kind (docs/spec.md section
11), for ``hscale interop --stochastic`` and docs/interop.md.

gfloat (``gfloat.round_float``, its production function for every format and rounding mode)
rounds one value to OCP E2M1 (``format_info_ocp_e2m1``) with ``srbits``/``srnumbits = 8`` in its
four stochastic modes, with ``sat=True`` (satfinite):

- ``Stochastic``: the discarded fraction rounded to nearest (ties to even) to 8 bits, then the
  carry of ``d + srbits >= 256``;
- ``StochasticOdd``: the same with ties to odd;
- ``StochasticFast``: ``delta + (0.5 + srbits) / 256 >= 1``;
- ``StochasticFastest``: ``delta + srbits / 256 >= 1``.

Each element of a row takes byte ``i`` of its word (``straight``, NVFP4-SR-4: gfloat takes one
value and its bits, so the adapter routes the word); the value gfloat returns is read back as
its E2M1 code (the sign bit from the value's sign, -0.0 included). gfloat's E2M1 has no NaN:
it raises on a NaN input, which the suite records as an error on valid input (nothing judged).
"""

from __future__ import annotations

import numpy as np

from hscale.backends.interop import common

MODES = ("Stochastic", "StochasticOdd", "StochasticFast", "StochasticFastest")
MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


class GfloatStochastic:
    kinds = frozenset({"stochastic"})
    sr_scaling = "none"
    sr_random_bits = "given"
    sr_routing = "straight"

    def __init__(self, mode: str):
        self.mode = mode
        self.name = f"gfloat-e2m1-{mode.lower()}"

    @property
    def version(self) -> str:
        return common.dist_version("gfloat")

    def available(self):
        return common.module_status("gfloat")

    def quantize_stochastic(self, x, global_scale=None, random_bits=None, seed=None):
        from gfloat import RoundMode, round_float
        from gfloat.formats import format_info_ocp_e2m1
        if random_bits is None:
            raise ValueError("random_bits: gfloat takes the random bits (srbits)")
        x = np.asarray(x, np.float32)
        words = np.asarray(random_bits, np.uint32)
        mode = getattr(RoundMode, self.mode)
        codes = np.zeros(x.shape, np.uint8)
        for (r, j), value in np.ndenumerate(x):
            byte = (int(words[r, j // 4]) >> (8 * (j % 4))) & 0xFF
            rounded = round_float(format_info_ocp_e2m1, float(value), mode, sat=True,
                                  srbits=byte, srnumbits=8)
            codes[r, j] = (0x8 if np.signbit(rounded) else 0) | MAGNITUDES.index(abs(rounded))
        return {"codes": codes}


def _factory(mode: str):
    def create():
        return GfloatStochastic(mode)
    create.__name__ = f"gfloat_{mode.lower()}"
    return create


for _mode in MODES:
    globals()[f"gfloat_{_mode.lower()}"] = _factory(_mode)
del _mode
