"""Seeded mutations of real checkpoints, each written by hand from the file formats' own
definitions (safetensors' header, the shard index, compressed-tensors' and ModelOpt's configs,
GGUF's container as llama.cpp's gguf.cpp reads it), not through the readers under test
(tests/helpers/checkpoint_fuzz.py runs them; tests/checkpoints/test_checkpoint_fuzz.py and
tests/checkpoints/test_checkpoint_validation.py use them).

The bases are the kit's own outputs of every layout (``bases``): compressed-tensors and
ModelOpt, W4A16 and W4A4, one file and sharded, decoders dense and MoE and the bundled MiniLM (an
encoder, with a buffer stored), and GGUF (Qwen3, and Llama with its rope-permuted rows). A mutation edits a copy of one: the safetensors container (header
entries, offsets, names, metadata, lengths, trailing bytes, what lies in the directory), the
shard index, the configs (every field of the quantization config, config.json's shape of the
model), the tensors (removed, renamed, retyped, reshaped, added; bad global and activation
scales; bad scale bytes; fused sets split), and the GGUF container (version, magic, counts,
strings, offsets, types, hyper-parameters, recorded names). A mutation ``breaks`` the
checkpoint (an engine would refuse it, or load it and compute something else) or is benign
(a change the formats allow).

One module per layout: ``safetensors`` (the container and the shard index), ``configs``
(compressed-tensors' and ModelOpt's configs, config.json), ``tensors`` (what a safetensors
checkpoint stores), ``gguf`` (the GGUF file); ``files`` and ``gguf_file`` edit the files by their
definitions, ``registry`` holds the records, ``bases`` builds what they mutate.
"""

from __future__ import annotations

from helpers.mutations import configs, gguf, safetensors, tensors  # noqa: F401 - they register
from helpers.mutations.bases import bases
from helpers.mutations.files import (GLOBAL_SUFFIX, INPUT_SUFFIX, PACKED_SUFFIX, edit_header,
                                     edit_json, edit_tensors, file_holding, layout_tag_of,
                                     linear_modules, quantization_config, raw_header,
                                     tensor_names, weight_files, write_raw)
from helpers.mutations.gguf_file import gguf_layout, gguf_tensor_data, patch, patch_uint32
from helpers.mutations.registry import MUTATIONS, SAFETENSORS, Base, Mutation, mutation

__all__ = ["GLOBAL_SUFFIX", "INPUT_SUFFIX", "MUTATIONS", "PACKED_SUFFIX", "SAFETENSORS", "Base",
           "Mutation", "bases", "edit_header", "edit_json", "edit_tensors", "file_holding",
           "gguf_layout", "gguf_tensor_data", "layout_tag_of", "linear_modules", "mutation",
           "patch", "patch_uint32", "quantization_config", "raw_header", "tensor_names",
           "weight_files", "write_raw"]
