"""NVFP4 checkpoints on disk: the one reader and writer of each layout (``hscale quantize``,
``hscale check``, ``hscale convert``).

- ``safetensors``: the container, read lazily and written tensor by tensor (``ShardWriter``),
  every header (``safetensors_header``) and shard index validated before it is trusted, regular
  files only and JSON fields typed (``inputs``) (NVFP4-CKPT-5);
- ``layout_base``: what every layout shares (the tensor roles, ``Layout``, ``CheckpointFormat``);
- ``layouts``: the layouts engines load, one class each (compressed-tensors, ModelOpt): tensor
  names, the global scale's convention, the quantization config (NVFP4-CKPT-1, -2);
- ``stored``: the quantized Linears of a checkpoint as stored, and decoded (NVFP4-DEQ-1);
- ``convert``: one layout to the other, losslessly (``hscale convert``), its configs in
  ``convert_configs``;
- ``gguf_file``: the one reader of GGUF files, its header from one memory map validated as
  llama.cpp's loader validates it (NVFP4-GGUF-2); ``gguf``, ``to_gguf``: llama.cpp's GGUF NVFP4
  read through it (NVFP4-GGUF-1) and written; ``gguf_transformers``: transformers' GGUF config
  and tokenizer routes answering from that one reading.

Everything else a model directory holds (other tensors, tokenizer, configs, sentence-transformers
modules) is carried over unchanged. Outputs are written under a hidden temporary name and
renamed when complete (``hscale.files.OutputDirectory``).
"""

from .layout_base import (MODELOPT_CONFIG, ROLE_DTYPES, CheckpointFormat, Layout,
                          reciprocals_of)
from .layouts import FORMATS, LAYOUTS, detect_format, layout_named
from .safetensors import (DEFAULT_MAX_SHARD_BYTES, CheckpointError, SafetensorsModel,
                          ShardWriter, TensorInfo, copy_side_files, read_header)
from .stored import (StoredLinear, checkpoint_weights, open_checkpoint, quantized_modules,
                     read_stored_linear)

__all__ = ["DEFAULT_MAX_SHARD_BYTES", "FORMATS", "LAYOUTS", "MODELOPT_CONFIG", "ROLE_DTYPES",
           "CheckpointError", "CheckpointFormat", "Layout", "SafetensorsModel", "ShardWriter",
           "StoredLinear", "TensorInfo", "checkpoint_weights", "copy_side_files",
           "detect_format", "layout_named", "open_checkpoint", "quantized_modules", "read_header",
           "read_stored_linear", "reciprocals_of"]
