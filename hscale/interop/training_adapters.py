"""TransformerEngine's NVFP4 reference quantizer (``transformer_engine/pytorch/custom_recipes/
reference_nvfp4.py``) behind the rht and tile kinds (docs/spec.md sections 12, 13).

The file is read from the ``transformer-engine`` wheel (``pip download transformer-engine
--no-deps``: a py3-none wheel; installing it without its CUDA core makes ``import
transformer_engine`` raise, so it is never imported) named by ``HSCALE_TE_WHEEL``, and executed
with its three imports of TE's package (``quantized_tensor``'s base classes, ``custom_recipes.
gemm``, ``reference_utils``) supplied: the base classes as plain stand-ins (no method of theirs
is called), ``reference_utils`` from the wheel itself. Functions called:

- rht: ``NVFP4QuantizerRef(..., with_rht=True, with_random_sign_mask=True, rowwise=False,
  columnwise=True)._quantize(x)`` (``_apply_rht`` on ``x.t()``, the amax of the transformed
  copy, ``_quantize_blockwise_reference``); its column-wise codes (``cast_to_fp4x2``'s packed
  bytes), float8 scales and ``2688 / amax`` as the global scale;
- tile: ``NVFP4QuantizerRef(..., quant_tile_shape=(16, 16), rowwise=True,
  columnwise=False)._quantize(w)``, the row-wise result.
"""

from __future__ import annotations

import os
import sys
import types
import zipfile

import numpy as np

WHEEL_ENV = "HSCALE_TE_WHEEL"
REFERENCE = "transformer_engine/pytorch/custom_recipes/reference_nvfp4.py"
UTILS = "transformer_engine/pytorch/custom_recipes/reference_utils.py"
GEMM = "transformer_engine/pytorch/custom_recipes/gemm.py"
_LOADED: dict = {}


def _wheel() -> str | None:
    path = os.environ.get(WHEEL_ENV)
    return path if path and os.path.isfile(path) else None


def _version() -> str:
    path = _wheel()
    return os.path.basename(path).split("-")[1] if path else "-"


def reference_module():
    """TE's reference_nvfp4 module, executed from the wheel's text."""
    if "module" in _LOADED:
        return _LOADED["module"]
    with zipfile.ZipFile(_wheel()) as wheel:
        reference, utils, gemm = (wheel.read(name).decode() for name in (REFERENCE, UTILS, GEMM))
    stand_ins = {}
    base = types.ModuleType("transformer_engine.pytorch.quantized_tensor")

    class Quantizer:  # TE's base class: only its constructor's flags are read
        def __init__(self, rowwise=True, columnwise=True):
            self.rowwise_usage, self.columnwise_usage = rowwise, columnwise

    base.Quantizer, base.QuantizedTensorStorage = Quantizer, object
    stand_ins[base.__name__] = base
    tensor_utils = types.ModuleType("transformer_engine.pytorch.tensor.utils")
    tensor_utils.is_custom = lambda tensor: False  # only the reference GEMM asks
    stand_ins[tensor_utils.__name__] = tensor_utils
    package = types.ModuleType("transformer_engine.pytorch.custom_recipes")
    stand_ins[package.__name__] = package
    for name in ("transformer_engine", "transformer_engine.pytorch",
                 "transformer_engine.pytorch.tensor"):
        stand_ins[name] = types.ModuleType(name)
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        for attribute, name, text in (("reference_utils", UTILS, utils), ("gemm", GEMM, gemm)):
            loaded = types.ModuleType(f"{package.__name__}.{attribute}")
            sys.modules[loaded.__name__] = loaded
            exec(compile(text, name, "exec"), loaded.__dict__)  # noqa: S102 - TE's own file
            setattr(package, attribute, loaded)
            stand_ins.setdefault(loaded.__name__, loaded)
            saved.setdefault(loaded.__name__, None)
    except Exception:
        _restore(saved)
        raise
    module = types.ModuleType("hscale_te_reference_nvfp4")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    try:
        exec(compile(reference, REFERENCE, "exec"), module.__dict__)  # noqa: S102
    finally:
        _restore(saved)
    _LOADED["module"] = module
    return module


def _restore(saved: dict) -> None:
    """Put back what ``sys.modules`` held under TE's names (nothing: remove them)."""
    for name, old in saved.items():
        if old is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = old


class _TeReference:
    kinds: frozenset = frozenset()

    @property
    def version(self) -> str:
        return f"transformer-engine {_version()} (custom_recipes/reference_nvfp4.py)"

    def available(self):
        if _wheel() is None:
            return False, (f"{WHEEL_ENV} does not name a transformer-engine wheel (pip download "
                           "transformer-engine==2.20.2 --no-deps)")
        try:
            reference_module()
        except Exception as error:  # noqa: BLE001 - the reason is the result
            return False, f"TE's reference_nvfp4.py does not load: {error!r}"
        return True, ""

    def _quantizer(self, **options):
        module = reference_module()
        return module.NVFP4QuantizerRef(dtype=module.reference_utils.Fp4Formats.E2M1,
                                        pow_2_scales=False, **options)

    @staticmethod
    def _result(packed, scales, amax):
        amax = float(amax.reshape(-1)[0])
        g = np.float32(1.0) if amax == 0 else np.float32(2688.0) / np.float32(amax)
        return {"packed": packed.numpy().astype(np.uint8),
                "scale_bytes": scales.view(__import__("torch").uint8).numpy(),
                "global_scale": g}


class TeRht(_TeReference):
    name = "te-reference-rht"
    kinds = frozenset({"rht"})
    rht_sign_mask = 0xD7E8
    rht_profile = "exact"
    rht_axis = "columnwise"

    def quantize_rht(self, x):
        import torch
        data = torch.from_numpy(np.asarray(x).astype(np.float32)).to(torch.bfloat16)
        quantizer = self._quantizer(rowwise=False, columnwise=True, with_rht=True,
                                    with_random_sign_mask=True)
        _, _, packed, scales, _, amax = quantizer._quantize(data)
        return self._result(packed, scales, amax)


class TeTiles(_TeReference):
    name = "te-reference-2d"
    kinds = frozenset({"tile"})

    def quantize_2d(self, w):
        import torch
        data = torch.from_numpy(np.asarray(w).astype(np.float32)).to(torch.bfloat16)
        quantizer = self._quantizer(rowwise=True, columnwise=False, quant_tile_shape=(16, 16))
        packed, scales, _, _, amax, _ = quantizer._quantize(data)
        return self._result(packed, scales, amax)


def te_rht():
    return TeRht()


def te_tiles():
    return TeTiles()
