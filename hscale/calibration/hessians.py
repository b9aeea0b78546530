"""The file ``hscale calibrate`` writes and ``hscale quantize --hessian`` / ``hscale check
--hessian`` read: safetensors with ``h.MODULE`` float64 (n,) per Linear, and ``H.MODULE``
float64 (n, n) when calibrated with the full H (GPTQ needs it); ``B.MODULE`` float64
(n/16, 16, 16), the diagonal 16 x 16 blocks of H, where the h of an ``hscale-block`` run is kept
(``hscale.quantize.kept``); the calibration facts (texts, tokens, sequence length) in its
metadata."""

from __future__ import annotations

import json

import numpy as np

from hscale import __version__, files


def save_hessians(path, h: dict, H: dict, facts: dict, blocks: dict | None = None) -> None:
    """``h.MODULE`` float64 (n,), ``H.MODULE`` (n, n) if full and ``B.MODULE``
    (n/16, 16, 16) for ``blocks``, to ``path`` (written to a temporary name and renamed when
    complete)."""
    from safetensors.numpy import save_file
    tensors = {f"h.{name}": np.ascontiguousarray(v, np.float64) for name, v in h.items()}
    tensors.update({f"H.{name}": np.ascontiguousarray(v, np.float64) for name, v in H.items()})
    tensors.update({f"B.{name}": np.ascontiguousarray(v, np.float64)
                    for name, v in (blocks or {}).items()})
    with files.replacing(path) as temporary:
        save_file(tensors, str(temporary), metadata={"producer": f"hscale-nvfp4 {__version__}",
                                                     "facts": json.dumps(facts)})


class _Lazy(dict):
    """module -> array read from the file when asked (``get``), not before: a model's H do not
    fit in memory together."""

    def __init__(self, path, prefix: str, modules):
        super().__init__()
        self.path, self.prefix, self.modules = path, prefix, set(modules)

    def get(self, module, default=None):
        if module not in self.modules:
            return default
        from safetensors import safe_open
        with safe_open(str(self.path), framework="numpy") as f:
            return f.get_tensor(f"{self.prefix}{module}")

    def __getitem__(self, module):
        value = self.get(module)
        if value is None:
            raise KeyError(module)
        return value

    def __contains__(self, module):
        return module in self.modules

    def __len__(self):
        return len(self.modules)

    def __bool__(self):
        return bool(self.modules)


def load_hessians(path, modules: list[str], full: bool, lazy: bool = False):
    """({module: h}, {module: H}) for ``modules`` from an ``hscale calibrate`` file; with
    ``lazy`` each is read when its layer asks (``.get``)."""
    from safetensors import safe_open
    h, H = {}, {}
    try:
        with safe_open(str(path), framework="numpy") as f:
            names = set(f.keys())
            for module in modules:
                if f"h.{module}" not in names:
                    raise ValueError(f"--hessian {path}: no h for {module} (calibrated for "
                                     "another model or another ignore list?)")
                if full and f"H.{module}" not in names:
                    raise ValueError(f"--hessian {path}: no full H for {module}; gptq and "
                                     "hscale-block need it: hscale calibrate --full")
            if lazy:
                return _Lazy(path, "h.", modules), (_Lazy(path, "H.", modules) if full else {})
            for module in modules:
                h[module] = f.get_tensor(f"h.{module}")
                if full:
                    H[module] = f.get_tensor(f"H.{module}")
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors' own error type for a bad file
        raise ValueError(f"--hessian {path}: unreadable ({exc})") from None
    return h, H
