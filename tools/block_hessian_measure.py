"""Maintainer measurement of hscale-block (docs/fidelity.md, "Block-Hessian H-Scale"): on every
bundled MiniLM Linear, the output error of H-Scale and hscale-block over min-max (calibration
and held-out text), seconds and peak traced memory (tracemalloc) per layer, bit-identity of the
torch backend with the reference, and whether K = 16 saturates (windows (6, 16), (10, 24) and
the whole ladder on every 4th Linear). One JSON line per Linear; usage:

    python tools/block_hessian_measure.py OUT.json
"""
import json
import sys
import time
import tracemalloc

import numpy as np
from hscale.report import pipelines
from hscale.reference import quantize, diagonal_blocks, DEFAULT_SCALE_CEILING
from hscale.evaluation.quality import output_error
from hscale.backends import get
m = pipelines.calibrated_model(progress=False)
scales = pipelines.global_scales(m, DEFAULT_SCALE_CEILING)
torch_backend = get("torch")
rows = []
def timed(f):
    tracemalloc.start(); t = time.perf_counter(); r = f(); dt = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop(); return r, dt, peak
for idx, (mod, w) in enumerate(m.weights.items()):
    G, Gh, s_g = m.G[mod], m.G_heldout[mod], scales[mod]
    h = np.diag(G).copy(); B = diagonal_blocks(G)
    rtn = quantize(w, method="rtn", global_scale=s_g).dequantize()
    er, erh = output_error(w, rtn, G), output_error(w, rtn, Gh)
    hs, t_hs, m_hs = timed(lambda: quantize(w, h, global_scale=s_g))
    bl, t_bl, m_bl = timed(lambda: quantize(w, B, method="hscale-block", global_scale=s_g))
    t = time.perf_counter(); bt = torch_backend.quantize(w, B, method="hscale-block", global_scale=s_g); t_bt = time.perf_counter() - t
    same = bool(np.array_equal(bt.scale_bytes, bl.scale_bytes) and np.array_equal(bt.codes, bl.codes))
    row = {"module": mod, "shape": list(w.shape),
           "hscale": [output_error(w, hs.dequantize(), G) / er, output_error(w, hs.dequantize(), Gh) / erh],
           "block": [output_error(w, bl.dequantize(), G) / er, output_error(w, bl.dequantize(), Gh) / erh],
           "seconds": {"hscale": t_hs, "block": t_bl, "block_torch": t_bt},
           "peak_bytes": {"hscale": m_hs, "block": m_bl}, "torch_identical": same,
           "bytes_differ": float(np.mean(hs.scale_bytes != bl.scale_bytes))}
    if idx % 4 == 0:
        sat = {}
        for U, K in ((6, 16), (10, 24), (125, 251)):
            r, dt, _ = timed(lambda: quantize(w, B, method="hscale-block", K=K, U=U, global_scale=s_g))
            sat[f"{U},{K}"] = [output_error(w, r.dequantize(), G) / er, dt]
        row["saturation"] = sat
    rows.append(row)
    print(json.dumps(row), flush=True)
json.dump(rows, open(sys.argv[1] if len(sys.argv) > 1 else "block_measure.json", "w"), indent=1)
