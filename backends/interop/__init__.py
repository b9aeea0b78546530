"""Adapters that run real NVFP4 libraries through the conformance suite.

Each module here wraps ONE library's production quantization path behind the backend protocol
(docs/backends.md) and says, in its docstring, exactly which library functions it calls. None
re-implements the library's arithmetic: the adapter checks the arguments (with the reference's
own checks, so that bad input is rejected as the spec says), converts the numpy weight to the
library's tensor type without changing a value, calls the library, and reads the bytes the
library produced. When the library is not installed, ``available()`` says so and the suite
skips. Measurements and divergences: docs/interop-notes.md.

    hscale conform --backend hscale.backends.interop.torchao_nvfp4:create --profile faithful

=====================================  =======================================================
module:factory                         library path
=====================================  =======================================================
torchao_nvfp4:create                   torchao ``NVFP4Tensor.to_nvfp4`` with
                                       ``per_tensor_amax_to_scale``
torchao_nvfp4:create_single_level      the same without a per-tensor scale (s_g = 1)
compressed_tensors_nvfp4:create        compressed-tensors qparams + ``NVFP4PackedCompressor``
                                       (the ``nvfp4-pack-quantized`` checkpoint)
llmcompressor_nvfp4:create,            llm-compressor's weight observers (min-max, MSE,
create_mse, create_expanded_mse,       expanded MSE, its ``fouroversix`` alias) on the
create_fouroversix                     compressed-tensors path
modelopt_nvfp4:create                  nvidia-modelopt ``NVFP4QTensor.quantize``
fouroversix_nvfp4:create               fouroversix's PyTorch reference (static_6, 4over6)
autoround_nvfp4:create                 AutoRound ``nv_fp4`` + ``QuantLinear.pack``
fpquant_nvfp4:create                   FP-Quant ``forward_quantize`` (QuTLASS, CUDA only)
ggml_nvfp4:create                      ggml's ``quantize_row_nvfp4_ref`` (llama.cpp, through
                                       ctypes from llama-cpp-python; no global scale)
=====================================  =======================================================
"""
