"""GPTQ + H-Scale on one seeded layer: the reference's factor against a backend's, timed (figures
for docs/performance.md; a maintainer script, never run by the test suite or CI).

    python tools/gptq_bench.py --rows 4096 --cols 4096 [--tokens 1856] [--backend torch]

W (rows, cols) and X (tokens, cols) are seeded normals (float32, as a model's weights and
activations are), H = X^T X in float64. The layer is quantized twice by
``hscale.reference.gptq_quantize`` with the backend's group step (what ``hscale quantize
--pipeline gptq`` runs): with the reference's factor U (``inverse_cholesky_factor``), then with
the backend's own (``gptq_inverse_factor``), which HSCALE-GPTQ-1 lets differ by rounding.
Printed: each run's wall time and its factor's, and how many codes and scale bytes the two runs
disagree on. One JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=1856)
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from hscale.backends import get
    from hscale.reference import gptq_quantize
    from hscale.reference.gptq import inverse_cholesky_factor

    rng = np.random.default_rng(args.seed)
    weight = (rng.standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    X = rng.standard_normal((args.tokens, args.cols)).astype(np.float32).astype(np.float64)
    H = X.T @ X
    del X
    backend = get(args.backend)
    factor_seconds = {}

    def timed(name, factor):
        def run(*call):
            started = time.perf_counter()
            result = factor(*call)
            factor_seconds[name] = time.perf_counter() - started
            return result
        return run

    results, walls = {}, {}
    for name, factor in (("reference factor", inverse_cholesky_factor),
                         ("backend factor", backend.gptq_inverse_factor)):
        started = time.perf_counter()
        results[name] = gptq_quantize(weight, H, group_quantizer=backend.group_quantizer(),
                                      inverse_factor=timed(name, factor))
        walls[name] = time.perf_counter() - started
    a, b = results["reference factor"], results["backend factor"]
    figures = {
        "shape": [args.rows, args.cols], "tokens": args.tokens, "backend": backend.name,
        "wall_s": {k: round(v, 1) for k, v in walls.items()},
        "factor_s": {k: round(v, 1) for k, v in factor_seconds.items()},
        "codes_differing": int((a.codes != b.codes).sum()), "codes": int(a.codes.size),
        "scale_bytes_differing": int((a.scale_bytes != b.scale_bytes).sum()),
        "scale_bytes": int(a.scale_bytes.size),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
