"""ggml's own NVFP4 quantizer (llama.cpp) behind the backend protocol (RTN only, no global scale).

Library function called: ``quantize_row_nvfp4_ref(const float * x, block_nvfp4 * y, int64_t k)``
of ``libggml-base.so`` (``ggml/src/ggml-quants.c``), through ctypes, from the llama.cpp that
llama-cpp-python installs (``llama_cpp/lib``; 0.3.36 ships ggml 0.25.3). It is what
``ggml_quantize_chunk`` runs for ``GGML_TYPE_NVFP4`` (``quantize_nvfp4`` ignores the importance
matrix). The Python ``gguf`` package (0.19) has no NVFP4 quantizer to call instead: its
``gguf.quants.NVFP4`` only decodes, and ports the scale encoder ``fp32_to_ue4m3``.

Per 16 weights the library takes ``amax_g / 6`` in fp32 as the block scale, encoded by
``ggml_fp32_to_ue4m3`` (``ggml-impl.h``), and each code by ``best_index_mxfp4``: the first of
the 16 doubled E2M1 values whose error is strictly smallest. There is no global scale (a GGUF
file keeps it in a separate ``.scale`` tensor, which this quantizer does not compute), so the
adapter reports s_g = 1.0 and ignores a caller's ``global_scale`` and ``scale_ceiling``, as
torchao's single-level mode does. Its divergences from the spec (docs/interop-notes.md):

- the scale rounds half up (only the first dropped mantissa bit is added), not to even;
- every block scale in [256, 448) becomes 448 (``0x7E``): the exponent is tested for overflow
  before the mantissa is rounded;
- subnormal scales round half up too, ``amax_g / 6`` in [7.5, 8) * 2^-9 gives ``0x07`` instead of
  ``0x08``, and one that rounds to zero gives byte ``0x00`` (no ``0x01`` floor, NVFP4-INIT-1);
- element ties go to the smaller magnitude, and a negative element that rounds to zero gets
  code ``0x0``, not ``0x8``.

The weight is widened to float32 (exact from float16 and bfloat16); a row whose length is not a
multiple of 64 is padded with zeros for the call (a group's bytes depend on its own 16 weights
only) and the padding's groups are dropped. The library's 36-byte blocks are read back into
packed codes and scale bytes by ``hscale.reference.gguf_blocks`` (NVFP4-GGUF-1).
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np

from hscale.backends.interop import common
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U
from hscale.reference.gguf_blocks import BLOCK, BLOCK_BYTES, from_gguf_blocks

LIBRARY = "libggml-base.so"
FUNCTION = "quantize_row_nvfp4_ref"


def library_path() -> Path | None:
    """``llama_cpp/lib/libggml-base.so`` of the installed llama-cpp-python, or None."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "lib" / LIBRARY
    return path if path.is_file() else None


def _function():
    library = ctypes.CDLL(str(library_path()), mode=ctypes.RTLD_GLOBAL)
    function = getattr(library, FUNCTION)
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    function.restype = None
    return function


class GgmlNVFP4:
    name = "ggml-nvfp4"
    capabilities = common.RTN_ONLY
    global_scale_convention = "multiplier"

    @property
    def version(self) -> str:
        return common.dist_version("llama-cpp-python")

    def available(self):
        if library_path() is None:
            return False, (f"llama-cpp-python is not installed (its llama_cpp/lib/{LIBRARY} "
                           "holds ggml's quantizer)")
        try:
            _function()
        except (OSError, AttributeError) as exc:
            return False, f"cannot load {FUNCTION} from {library_path()}: {exc}"
        return True, ""

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=DEFAULT_K,
                 U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING, global_scale=None):
        weight, _ceiling, _given = common.check_arguments(self, weight, hessian_diag, method,
                                                          init, K, U, scale_ceiling, global_scale)
        rows, cols = weight.shape
        width = -(-cols // BLOCK) * BLOCK
        x = np.zeros((rows, width), np.float32)
        x[:, :cols] = weight.astype(np.float32)  # exact from float16 and bfloat16
        blocks = np.zeros((rows, width // BLOCK * BLOCK_BYTES), np.uint8)
        _function()(x.ctypes.data, blocks.ctypes.data, x.size)  # rows are contiguous blocks
        packed, scale_bytes = from_gguf_blocks(blocks)
        return common.LibraryResult(scale_bytes[:, : cols // 16], np.float32(1.0),
                                    packed=packed[:, : cols // 2])


def create():
    """ggml's quantize_row_nvfp4_ref: E4M3 block scales amax_g / 6, no global scale."""
    return GgmlNVFP4()
