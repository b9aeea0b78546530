"""Evaluation: how far a quantized model is from its original, measured where its users would.

- ``quality``: a layer's weight error, H-weighted diagonal error and output error
  ``Tr(dW G dW^T)``, each beside RTN's at the same s_g;
- ``embeddings``: a quantized sentence encoder's held-out sentence-embedding cosine to the
  float32 model's, through the spec's decoding and through the library's own loading.
"""

from .quality import cosine_stats, layer_quality

__all__ = ["cosine_stats", "layer_quality"]
