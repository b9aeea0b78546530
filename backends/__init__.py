"""Backends: implementations of ``hscale.reference.quantize`` behind one small protocol.

A backend is any object with

- ``name``: str, how reports call it;
- ``version``: str, of the backend and the library it runs on;
- ``capabilities``: a frozenset drawn from ``CAPABILITIES`` (what it implements: methods
  ``"rtn"``, ``"scale-only"``, ``"hscale"``, ``"hscale-block"`` and the init ``"4over6"``; ``"maxabs"`` init is
  required of everyone);
- ``available()``: ``(True, "")`` or ``(False, reason)``; a backend that cannot run here (no
  CUDA device, library not installed) says why, and the conformance suite skips with that reason;
- ``quantize(weight, hessian_diag=None, *, method, init, K, U, scale_ceiling, global_scale)``:
  the signature of ``hscale.reference.quantize``. It returns the reference's
  ``QuantizedWeight``, or any object with ``scale_bytes`` (uint8 (m, n/16)), ``global_scale``
  and ``packed`` (uint8 (m, n/2)) or ``codes`` (uint8 (m, n)); ``delta`` or ``initial_bytes``
  where it has a search. The rest is derived (``hscale.judge.diagnose.observe``);
- optionally ``global_scale_convention``: ``"multiplier"`` (default: the dequantization
  multiplier s_g) or ``"reciprocal"`` (the ``6C/amax`` a checkpoint stores, NVFP4-GS-4);
- optionally ``group_quantizer()``: an ``hscale.reference.Quantizer`` that GPTQ uses to choose
  the bytes of its float64 groups, bit-identical to the reference's (docs/backends.md).

Bad input must raise ValueError or TypeError; this project's own backends also name the
argument, the first offending index and the clause (the conformance suite requires that of
third parties only under ``--strict-errors``).

A backend may implement other kinds of NVFP4 implementation than the weight quantizer (a
run-time activation quantizer, a block-scaled GEMM): it declares them in ``kinds``, and
``hscale.judge.kinds`` (the one table of kinds) says what each requires; ``load(name)`` builds
such a backend without checking the weight protocol.

``get(name)`` returns a built-in backend by name (``numpy``, ``torch``, ``torch-cuda``,
``cupy``) or a third-party one given as ``"package.module:factory"``, where ``factory()``
returns such an object. See docs/backends.md for a complete adapter.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U

CAPABILITIES = frozenset({"rtn", "scale-only", "hscale", "hscale-block", "4over6"})

# name -> "module:factory", imported lazily so that a missing torch or cupy never breaks
# `import hscale.backends`.
BUILTIN = {
    "numpy": "hscale.backends.numpy_backend:create",
    "torch": "hscale.backends.torch_backend:create_cpu",
    "torch-cuda": "hscale.backends.torch_backend:create_cuda",
    "cupy": "hscale.backends.cupy_backend:create",
}


@runtime_checkable
class Backend(Protocol):
    name: str
    version: str
    capabilities: frozenset

    def available(self) -> tuple[bool, str]: ...

    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs",
                 K=DEFAULT_K, U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING,
                 global_scale=None) -> Any: ...


def _load_factory(spec: str):
    module_name, sep, attr = spec.partition(":")
    if module_name.startswith("conformance."):
        # The suite's own modules are the package hscale.conformance; "conformance.mutants"
        # (what a reader of conformance/ in the repository writes) names the same module from
        # any directory.
        module_name = "hscale." + module_name
    if not sep or not module_name or not attr:
        raise ValueError(
            f"backend {spec!r}: expected a built-in name ({', '.join(BUILTIN)}) "
            "or 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"backend {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"backend {spec!r}: module {module_name!r} has no {attr!r}") from None


def check_backend(backend, spec: str = "?"):
    """Raise ValueError unless ``backend`` satisfies the protocol."""
    missing = [a for a in ("name", "version", "capabilities", "available", "quantize")
               if not hasattr(backend, a)]
    if missing:
        raise ValueError(f"backend {spec!r}: object lacks {', '.join(missing)} "
                         "(see docs/backends.md for the protocol)")
    unknown = set(backend.capabilities) - CAPABILITIES
    if unknown:
        raise ValueError(f"backend {spec!r}: unknown capabilities {sorted(unknown)}; "
                         f"allowed: {sorted(CAPABILITIES)}")
    return backend


def load(name: str):
    """The object built by the factory of ``name`` (a built-in or ``'module:factory'``),
    unchecked: what it implements is read from its declared kinds (``hscale.judge.kinds``)."""
    return _load_factory(BUILTIN.get(name, name))()


def get(name: str):
    """Return the weight quantizer called ``name`` (built-in) or built by
    ``name = 'module:factory'``, checked against the weight protocol."""
    return check_backend(load(name), name)
