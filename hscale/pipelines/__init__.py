"""Pipelines: how a Linear's weight becomes NVFP4, one table from which the rest is derived.

A pipeline fixes the initial byte rule and the scale ceiling C (NVFP4-INIT-1, -2; NVFP4-GS-1)
and how the codes are produced: ``rtn`` and ``4over6`` quantize each group independently
(``hscale.reference.quantize`` or a backend), ``gptq`` sweeps the columns with error feedback
(``hscale.reference.gptq_quantize``, HSCALE-GPTQ-1) and so needs the full H. Any of them takes
any method: ``rtn`` keeps the initial byte, ``scale-only`` searches the window with h = 1,
``hscale`` with h (HSCALE-METHOD-1).

``RECIPES`` (what ``hscale check`` tries to re-derive a stored layer with) is derived from the
table: every method with every pipeline whose codes are a pure function of the scale bytes (not
GPTQ's, whose error feedback moves codes by design).
"""

from __future__ import annotations

from dataclasses import dataclass

from hscale.reference import (DEFAULT_SCALE_CEILING, FOUR_OVER_SIX_SCALE_CEILING,
                              gptq_quantize)
from hscale.reference.constants import DEFAULT_K, DEFAULT_U
from hscale.reference.gptq import DEFAULT_BLOCK_SIZE, DEFAULT_DAMP, inverse_cholesky_factor
from hscale.reference.methods import METHOD_NAMES
from hscale.reference.validation import method_named


@dataclass(frozen=True)
class Pipeline:
    name: str
    init: str  # the initial byte rule (NVFP4-INIT-1: maxabs, NVFP4-INIT-2: 4over6)
    scale_ceiling: float  # C of NVFP4-GS-1
    needs_full_hessian: bool  # GPTQ's error feedback needs H = X^T X, not only its diagonal
    rederivable: bool  # codes are the rounding at the stored bytes (NVFP4-E2M1-2)
    summary: str

    @property
    def initial_bytes_are_rtns(self) -> bool:
        """Its initial bytes are RTN's (max-abs, NVFP4-INIT-1) and its codes the rounding at
        the bytes: so RTN at the same s_g is the result's initial bytes and their codes."""
        return self.init == "maxabs" and self.rederivable


PIPELINES = {p.name: p for p in (
    Pipeline("rtn", "maxabs", DEFAULT_SCALE_CEILING, False, True, "max-abs init"),
    Pipeline("4over6", "4over6", FOUR_OVER_SIX_SCALE_CEILING, False, True,
             "4over6 init, C = 256 (the 4over6 reference's headroom)"),
    Pipeline("gptq", "maxabs", DEFAULT_SCALE_CEILING, True, False,
             "GPTQ's column sweep with error feedback, max-abs init"),
)}
#: The order in which ``hscale check`` tries methods on each init: the plain rule first.
RECIPE_METHODS = ("rtn", "hscale", "scale-only", "hscale-block")
assert set(RECIPE_METHODS) == set(METHOD_NAMES)
#: (method, init, scale ceiling) of every way a stored layer can be re-derived, in the order
#: tried; one per distinct (init, C) of the re-derivable pipelines.
RECIPES = tuple(dict.fromkeys(
    (method, p.init, p.scale_ceiling)
    for p in PIPELINES.values() if p.rederivable for method in RECIPE_METHODS))


def pipeline_named(name: str) -> Pipeline:
    """The pipeline ``name``, or a ValueError listing them."""
    if name not in PIPELINES:
        raise ValueError(f"--pipeline {name!r}: one of {', '.join(PIPELINES)}")
    return PIPELINES[name]


class _Counting:
    """A group quantizer that reports each group column GPTQ's sweep reaches (``on_groups``
    gets the weights it covers) and otherwise is the one it wraps: progress within a tensor."""

    def __init__(self, inner, on_groups):
        self.inner, self.on_groups = inner, on_groups

    def prepare(self, options):
        return self.inner.prepare(options)

    def select_bytes(self, groups, h, s_g, options, context):
        chosen = self.inner.select_bytes(groups, h, s_g, options, context)
        self.on_groups(int(groups.shape[0]) * 16)
        return chosen


def quantize_weight(weight, hessian_diag=None, *, pipeline="rtn", method="hscale",
                    backend="numpy", hessian=None, global_scale=None, K=DEFAULT_K, U=DEFAULT_U,
                    damp=DEFAULT_DAMP, block_size=DEFAULT_BLOCK_SIZE, act_order=False,
                    static_groups=False, on_groups=None, objectives_h=False):
    """One weight (a numpy array, or a torch tensor of float32, float16 or bfloat16, taken bit
    for bit) quantized by a pipeline; h (or the full H for gptq) as numpy or torch. Returns the
    reference's ``QuantizedWeight``. ``on_groups(weights)``: called as GPTQ's sweep reaches each
    group column (progress within a tensor). ``objectives_h``: not False, the result's group
    objectives at the chosen and initial byte with h = 1 and with this h (None: h = 1 alone),
    from the search's own arithmetic (``quantize(objectives=True)``), where the backend hands
    them back (``hands_back_objectives``; the rtn and 4over6 pipelines)."""
    from hscale.backends import get
    weight = as_numpy(weight)
    hessian_diag = None if hessian_diag is None else as_numpy(hessian_diag)
    chosen = pipeline_named(pipeline)
    quantizer = get(backend) if isinstance(backend, str) else backend
    if chosen.needs_full_hessian:
        if hessian is None:
            raise ValueError(f"pipeline {pipeline!r} needs the full Hessian H (n, n)")
        # The sweep is the reference's; a backend that offers one chooses each group's bytes
        # (bit-identical, faster), the others leave that to the reference too. So with the
        # factor U: a backend's (faster) is equal up to the rounding HSCALE-GPTQ-1 leaves open.
        group_quantizer = getattr(quantizer, "group_quantizer", None)
        group_quantizer = group_quantizer() if group_quantizer else None
        inverse_factor = getattr(quantizer, "gptq_inverse_factor", inverse_cholesky_factor)
        if on_groups is not None:
            from hscale.reference import Quantizer
            group_quantizer = _Counting(group_quantizer or Quantizer(), on_groups)
        return gptq_quantize(weight, as_numpy(hessian), method=method, init=chosen.init, K=K,
                             U=U, scale_ceiling=chosen.scale_ceiling, global_scale=global_scale,
                             damp=damp, block_size=block_size, act_order=act_order,
                             static_groups=static_groups, group_quantizer=group_quantizer,
                             inverse_factor=inverse_factor)
    statistic = hessian_diag if method_named(method).reads_statistics else None  # h, blocks
    scoring = {}
    if objectives_h is not False and getattr(quantizer, "hands_back_objectives", False):
        scoring = {"objectives": True, "objectives_h": None if objectives_h is None
                   else as_numpy(objectives_h)}
    return quantizer.quantize(weight, statistic, method=method,
                              init=chosen.init, K=K, U=U, scale_ceiling=chosen.scale_ceiling,
                              global_scale=global_scale, **scoring)


def as_numpy(value):
    """A torch tensor's data as numpy, bit for bit (bfloat16 as ml_dtypes.bfloat16, float8 as
    uint8 bit patterns); anything else unchanged."""
    if type(value).__module__.split(".")[0] != "torch":
        return value
    import ml_dtypes
    import torch
    tensor = value.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if tensor.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return tensor.view(torch.uint8).numpy()
    return tensor.numpy()


#: ``--backend auto``: the fastest backend bit-identical to the reference that runs here.
AUTO_BACKEND = "auto"
AUTO_BACKEND_RULE = ("torch-cuda where a CUDA device is, torch on the CPU where torch imports, "
                     "else numpy (the reference)")


def default_backend() -> str:
    """The backend ``auto`` means on this machine (``AUTO_BACKEND_RULE``): every one of them
    gives the reference's bytes (the conformance suite runs each against it)."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return "numpy"
    try:
        import torch
    except ImportError:  # pragma: no cover - a broken install
        return "numpy"
    return "torch-cuda" if torch.cuda.is_available() else "torch"


def resolve_backend(name: str) -> str:
    """``name``, or what ``auto`` means here."""
    return default_backend() if name == AUTO_BACKEND else name
