"""Calibration: the Hessian diagonal h of every Linear layer from a real forward pass
(HSCALE-CAL-1).

- ``collector``: the forward pre-hooks that accumulate ``h = diag(X^T X)`` (and the full H for
  GPTQ) in float64, padding excluded (``collect_hessian_diag``, ``collect_hessian``);
- ``texts``: the bundled calibration and held-out texts, and batches made from texts;
- ``passes``: calibration of the bundled MiniLM and of the seeded tiny decoder;
- ``hessians``: the file ``hscale calibrate`` writes (h and H per Linear);
- ``statistics``: ``LayerStatistics``, what calibration hands the quantizer (h, H, tokens,
  fallbacks, amax per weight), whichever route computed it.

numpy is the only import at module load; torch, transformers and tqdm are imported when needed.
"""

from .collector import CalibrationBatch, HessianDiagCollector, collect_hessian, collect_hessian_diag
from .hessians import load_hessians, save_hessians
from .passes import calibrate_minilm, calibrate_tiny_decoder
from .statistics import LayerStatistics
from .texts import (calibration_text_sha256, calibration_texts, heldout_texts,
                    minilm_calibration_batches, text_batches, tiny_decoder_batches)

__all__ = ["CalibrationBatch", "HessianDiagCollector", "LayerStatistics", "calibrate_minilm",
           "calibrate_tiny_decoder",
           "calibration_text_sha256", "calibration_texts", "collect_hessian", "collect_hessian_diag",
           "heldout_texts", "load_hessians", "minilm_calibration_batches", "save_hessians",
           "text_batches", "tiny_decoder_batches"]
