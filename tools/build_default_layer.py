"""Regenerate the demo's bundled layer, ``hscale/demo/data/default_layer.npz``: the MiniLM
layer and its h from the bundled calibration text (a maintainer command, not shipped).

    python tools/build_default_layer.py [PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

import numpy as np

from hscale import files
from hscale.calibration import calibrate_minilm, calibration_text_sha256, calibration_texts
from hscale.calibration.texts import MINILM_BATCH_SIZE, MINILM_MAX_LENGTH
from hscale.demo.default_layer import DEFAULT_LAYER_NAME, DefaultLayer
from hscale.models import minilm as _models

BUNDLED = Path(__file__).resolve().parent.parent / "hscale" / "demo" / "data" / "default_layer.npz"
_TEXT_FILE = "calibration.txt"


def make_default_layer(name: str = DEFAULT_LAYER_NAME, progress: bool = False) -> DefaultLayer:
    """Compute the default layer afresh: the MiniLM weight and its h from the bundled text."""
    stats: Dict[str, Any] = {}
    model, h = calibrate_minilm(progress=progress, stats=stats)
    weight = model.get_submodule(name).weight.detach().cpu().numpy().astype(np.float32, copy=True)
    source = (
        f"{_models.MINILM_HUB_ID} layer {name} from the Python package {_models.MINILM_PACKAGE} "
        f"{_models.minilm_package_version()}; hessian_diag = sum over non-padding tokens of x_j^2 "
        f"(fp64) from hscale.calibration.calibrate_minilm on hscale/calibration/data/{_TEXT_FILE} "
        f"(sha256 {calibration_text_sha256()}, {len(calibration_texts())} texts, "
        f"batch_size {MINILM_BATCH_SIZE}, max_length {MINILM_MAX_LENGTH})"
    )
    return DefaultLayer(name=name, weight=weight, hessian_diag=h[name], source=source, n_tokens=stats["tokens"][name])


def build_default_layer(path=BUNDLED, name: str = DEFAULT_LAYER_NAME,
                        progress: bool = False) -> Path:
    """Write the layer to ``path``: ``weight`` float32 (m, n), ``hessian_diag`` float64 (n,),
    ``name`` and ``source`` (unicode scalars), ``n_tokens`` int64; loadable with
    ``allow_pickle=False``; bytes a function of the arrays alone."""
    layer = make_default_layer(name, progress=progress)
    arrays = {"weight": layer.weight, "hessian_diag": layer.hessian_diag,
              "name": np.array(layer.name), "source": np.array(layer.source),
              "n_tokens": np.array(layer.n_tokens, dtype=np.int64)}
    return files.write_bytes(Path(path), files.npz_bytes(arrays))


if __name__ == "__main__":
    print(build_default_layer(*sys.argv[1:2], progress=True))
