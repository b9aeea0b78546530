"""What calibration hands the quantizer: one typed record per set of weights (a decoder block,
the head, a whole model, a Hessian or importance-matrix file), whichever route computed it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LayerStatistics:
    """The statistics of the inputs of a set of matmul weights, each keyed by the weight's
    module (its checkpoint name); modules that read one input (q/k/v, gate/up) share the same
    arrays. A module absent from ``h`` got no statistics (no calibration token reached it)."""

    h: dict = field(default_factory=dict)  # diag(X^T X), float64 (n,) (HSCALE-CAL-1)
    H: dict = field(default_factory=dict)  # X^T X, float64 (n, n), where collected (GPTQ)
    blocks: dict = field(default_factory=dict)  # its diagonal 16 x 16 blocks (n/16, 16, 16)
    tokens: dict = field(default_factory=dict)  # calibration tokens that reached it
    fallbacks: dict = field(default_factory=dict)  # why its statistics are not its own
    amax: dict = field(default_factory=dict)  # max |x| of its input (HSCALE-CAL-2)
