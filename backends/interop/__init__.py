"""Adapters that run real NVFP4 libraries through the conformance suite.

Each module here wraps ONE library's production quantization path behind the backend protocol
(docs/backends.md) and says, in its docstring, exactly which library functions it calls. None
re-implements the library's arithmetic: the adapter checks the arguments (with the reference's
own checks, so that bad input is rejected as the spec says), converts the numpy weight to the
library's tensor type without changing a value, calls the library, and reads the bytes the
library produced. When the library is not installed, ``available()`` says so and the suite
skips. Measurements and divergences: docs/interop-notes.md.

    pytest conformance --backend hscale.backends.interop.torchao_nvfp4:create --self-tests off

=========================  ===================================================================
module:factory             library path
=========================  ===================================================================
torchao_nvfp4:create       torchao ``NVFP4Tensor.to_nvfp4`` with ``per_tensor_amax_to_scale``
torchao_nvfp4:             the same without a per-tensor scale (single-level: s_g = 1)
create_single_level
compressed_tensors_nvfp4:  compressed-tensors qparams + quantize + ``NVFP4PackedCompressor``
create                     (what llm-compressor writes as ``nvfp4-pack-quantized``)
llmcompressor_observers:   llm-compressor's CPU observers (min-max, MSE, ...) feeding the
create_minmax, ...         compressed-tensors path above
modelopt_nvfp4:create      nvidia-modelopt ``NVFP4QTensor.quantize``
fouroversix_nvfp4,         fouroversix, AutoRound, FP-Quant, where they run on a CPU
autoround_nvfp4,
fpquant_nvfp4
=========================  ===================================================================
"""
