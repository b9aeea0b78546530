"""Calibration: the Hessian diagonal h of every Linear layer from a real forward pass.

For a Linear layer y = x W^T with input rows x (one per token), H-Scale weights the squared
error of input column j by ``h_j = sum over all (non-padding) tokens of x_j^2`` -- the diagonal
of X^T X (docs/spec.md, the calibration clause; DESIGN point 12). The spec treats h as an input
and tests calibration with a tolerance, because h depends on the model's floating-point forward
pass; the quantization that consumes h is tested bit-exactly.

How h is computed here (:class:`HessianDiagCollector`, :func:`collect_hessian_diag`):

* a forward *pre*-hook on each Linear sees the layer's input x exactly as the layer does;
* x is cast to float64 first, then squared and summed over tokens into a float64 accumulator
  (so no fp32 rounding of x^2 or of the running sum);
* ``amax`` (HSCALE-CAL-2, the W4A4 activation scale) is ``max |x|`` over the same counted
  rows, from the same hook: exact (a maximum rounds nothing), in the input's own dtype;
* padding is excluded with a token mask of shape ``[batch, seq]``: a token counts iff its mask
  entry is non-zero. The Linear's input must be ``[batch, seq, n]`` (or the flattened
  ``[batch*seq, n]``, or with singleton dimensions between, as MiniCPM3's ``[batch, 1, seq,
  n]``), or ``[batch, n]``, one vector per sequence (a pooler), every one counted; anything else
  is rejected with an error naming the layer;
* all hooks are removed in ``finally`` -- also when the forward raises -- and the pass runs under
  ``torch.no_grad()`` (the model's train/eval mode is left as the caller set it).

Batches (the ``batches`` iterable) may be:

* a mapping -> ``model(**batch)``; its ``"attention_mask"`` entry (``mask_key``) is the token
  mask, so Hugging Face tokenizer output works as is;
* a :class:`CalibrationBatch(inputs, token_mask)` -> ``inputs`` is called as ``model(**inputs)``
  (mapping), ``model(*inputs)`` (tuple/list) or ``model(inputs)`` (tensor), with an explicit
  token mask (or None);
* a tensor or a tuple/list -> ``model(batch)`` / ``model(*batch)``, every token counted.

Tensors in a batch are moved to the device of the model's first parameter.

The logits nobody reads are not computed: where the model's output projection (a causal LM's
``lm_head``, ``get_output_embeddings()``) is not a collected layer and its forward takes
``logits_to_keep`` (transformers' causal LMs), a mapping batch is run with ``logits_to_keep=1``.
Every collected layer sees the same inputs (the projection is the last step), so h, H and amax
are bit for bit the same; the pass saves the projection of every other position, about a fifth
of SmolLM2's forward (49,152 x 576 of its 135 M weights, and a [tokens, 49,152] float32 tensor).

numpy is the only import at module load; torch and tqdm are imported when needed.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from hscale.models.architecture import linear_layers

from .rows import column_square_sums, rows_amax, select_rows, token_index, widened


class CalibrationBatch(NamedTuple):
    """One calibration batch with an explicit token mask.

    ``inputs``: a mapping (-> ``model(**inputs)``), a tuple/list (-> ``model(*inputs)``) or a
    single tensor (-> ``model(inputs)``). ``token_mask``: ``[batch, seq]`` tensor/array, a token
    counts iff its entry is non-zero; ``None`` counts every token.
    """

    inputs: Any
    token_mask: Any = None


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            "hscale.calibration needs torch; install it with `pip install 'hscale-nvfp4[models]'`"
        ) from exc
    return torch


def _resolve_layers(model, layers) -> List[Tuple[str, Any]]:
    torch = _torch()
    if layers is None:
        pairs = linear_layers(model)
    elif isinstance(layers, Mapping):
        pairs = list(layers.items())
    else:
        pairs = []
        for item in layers:
            if isinstance(item, str):
                pairs.append((item, model.get_submodule(item)))
            else:
                name, mod = item
                pairs.append((str(name), mod))
    seen = set()
    for name, mod in pairs:
        if not isinstance(mod, torch.nn.Linear):
            raise TypeError(f"calibration layer {name!r} is a {type(mod).__name__}, not nn.Linear")
        if name in seen:
            raise ValueError(f"calibration layer {name!r} is listed twice")
        seen.add(name)
    return pairs


class HessianDiagCollector:
    """Accumulates ``h = diag(X^T X)`` (fp64) of the inputs of the given Linear layers.

    Use as a context manager (hooks are registered on enter and always removed on exit)::

        with HessianDiagCollector(model, layers) as col:
            for batch in batches:
                col.run_batch(batch)          # or: col.set_token_mask(m); model(...)
        h = col.hessian_diag()                # {name: np.ndarray float64 (in_features,)}
        col.tokens                            # {name: number of token rows accumulated}
        col.calls                             # {name: number of times the hook fired}
        col.input_amax()                      # {name: max |x| over the counted tokens}

    With ``full=True`` it also accumulates the whole ``H = X^T X`` (fp64, (n, n)), for GPTQ
    (HSCALE-GPTQ-1) and the full-Hessian layer objective; :meth:`hessian` returns it. ``h`` is
    accumulated separately in both modes (the sum of ``x_j^2`` as HSCALE-CAL-1 states it), so
    turning ``full`` on never changes ``h``.
    """

    def __init__(self, model, layers=None, *, mask_key: Optional[str] = "attention_mask",
                 full: bool = False):
        torch = _torch()
        self.model = model
        self.layers = _resolve_layers(model, layers)
        self.mask_key = mask_key
        try:
            self.device = next(model.parameters()).device
        except StopIteration:
            self.device = torch.device("cpu")
        self._acc: Dict[str, Any] = {
            name: torch.zeros(mod.in_features, dtype=torch.float64, device=mod.weight.device)
            for name, mod in self.layers
        }
        self.full = bool(full)
        self._gram: Dict[str, Any] = {
            name: torch.zeros(mod.in_features, mod.in_features, dtype=torch.float64,
                              device=mod.weight.device)
            for name, mod in self.layers
        } if self.full else {}
        self.tokens: Dict[str, int] = {name: 0 for name, _ in self.layers}
        self.calls: Dict[str, int] = {name: 0 for name, _ in self.layers}
        self.amax: Dict[str, float] = {}  # HSCALE-CAL-2: max |x| of the counted tokens
        self._mask = None
        self._token_rows = None  # the counted rows of the mask (``token_index``)
        self._handles: List[Any] = []
        self._unread_logits = _unread_logits(model, [mod for _, mod in self.layers])

    # -- hooks -----------------------------------------------------------------------------
    def _make_hook(self, name: str, n: int):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["input"]
            if x.shape[-1] != n:
                raise ValueError(f"calibration layer {name!r}: input last dim {x.shape[-1]} != in_features {n}")
            x = x.detach()
            mask = self._mask
            if mask is None:
                rows = x.reshape(-1, n)
            else:
                if tuple(x.shape[:-1]) == tuple(mask.shape) or (
                        x.dim() == 2 and x.shape[0] == mask.numel()) or (
                        [d for d in x.shape[:-1] if d != 1] == [d for d in mask.shape if d != 1]):
                    # [batch, seq, n], [batch * seq, n], or with singleton dimensions between
                    # (MiniCPM3's latent attention, [batch, 1, seq, n]): the mask's tokens in
                    # the same order
                    rows = select_rows(x.reshape(-1, n), self._token_rows)
                elif x.dim() == 2 and mask.dim() == 2 and x.shape[0] == mask.shape[0]:
                    rows = x  # one vector per sequence (a BERT pooler's [CLS]): all count
                else:
                    raise ValueError(
                        f"calibration layer {name!r}: input of shape {tuple(x.shape)} does not line "
                        f"up with the token mask of shape {tuple(mask.shape)} (expected "
                        f"[batch, seq, {n}] or [batch*seq, {n}]); calibrate this layer without a mask "
                        "or leave it out"
                    )
            x64 = widened(rows)
            if self.full:
                gram = self._gram[name]
                gram += (x64.T @ x64).to(gram.device)
            acc = self._acc[name]
            acc += column_square_sums(x64).to(acc.device)  # HSCALE-CAL-1 (x64 squared: last)
            if rows.shape[0]:  # HSCALE-CAL-2: amax = max |x| over the counted tokens
                self.amax[name] = max(self.amax.get(name, 0.0), rows_amax(rows))
            self.tokens[name] += int(rows.shape[0])
            self.calls[name] += 1
            return None

        return hook

    def register(self) -> "HessianDiagCollector":
        if self._handles:
            raise RuntimeError("HessianDiagCollector hooks are already registered")
        try:
            for name, mod in self.layers:
                self._handles.append(
                    mod.register_forward_pre_hook(self._make_hook(name, mod.in_features), with_kwargs=True)
                )
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> "HessianDiagCollector":
        return self.register()

    def __exit__(self, *exc) -> None:
        self.remove()
        self._mask = None

    # -- batches ---------------------------------------------------------------------------
    def set_token_mask(self, mask) -> None:
        """Token mask for the following forward calls: ``[batch, seq]``, non-zero = counted."""
        torch = _torch()
        if mask is None:
            self._mask = None
            return
        m = torch.as_tensor(mask)
        if m.dim() != 2:
            raise ValueError(f"token mask must be [batch, seq], got shape {tuple(m.shape)}")
        self._mask = (m != 0).to(self.device)
        self._token_rows = token_index(self._mask)

    def _to_device(self, obj):
        torch = _torch()
        if isinstance(obj, torch.Tensor):
            return obj.to(self.device)
        if isinstance(obj, Mapping):
            return {k: self._to_device(v) for k, v in obj.items()}
        if isinstance(obj, (tuple, list)):
            return type(obj)(self._to_device(v) for v in obj)
        return obj

    def run_batch(self, batch):
        """Run the model on one batch (see the module docstring for the accepted forms)."""
        torch = _torch()
        if isinstance(batch, CalibrationBatch):
            inputs, mask = batch.inputs, batch.token_mask
        elif isinstance(batch, Mapping):
            inputs = batch
            mask = batch.get(self.mask_key) if self.mask_key is not None else None
        else:
            inputs, mask = batch, None
        self.set_token_mask(mask)
        inputs = self._to_device(inputs)
        try:
            with torch.no_grad():
                if isinstance(inputs, Mapping):
                    if self._unread_logits and "logits_to_keep" not in inputs:
                        inputs = {**inputs, "logits_to_keep": 1}
                    return self.model(**inputs)
                if isinstance(inputs, (tuple, list)):
                    return self.model(*inputs)
                return self.model(inputs)
        finally:
            self._mask = None

    def hessian_diag(self) -> Dict[str, np.ndarray]:
        return {name: acc.detach().cpu().numpy().astype(np.float64, copy=True) for name, acc in self._acc.items()}

    def input_amax(self) -> Dict[str, float]:
        """``{name: max |x|}`` over the counted tokens (HSCALE-CAL-2) of every layer at least
        one counted token reached (a layer none reached is absent)."""
        return dict(self.amax)

    def hessian(self) -> Dict[str, np.ndarray]:
        """``{name: H = X^T X}`` float64 (n, n), symmetric; only with ``full=True``."""
        if not self.full:
            raise RuntimeError("HessianDiagCollector(full=False) accumulates only diag(X^T X); "
                               "pass full=True for the whole X^T X")
        out = {}
        for name, gram in self._gram.items():
            H = gram.detach().cpu().numpy().astype(np.float64, copy=True)
            out[name] = (H + H.T) / 2  # exact symmetry (x^T x sums may differ in the last bit)
        return out


def _unread_logits(model, collected) -> bool:
    """Whether ``model``'s output projection is no collected layer and its forward can skip it
    (``logits_to_keep``): then only the last position's logits are computed."""
    import inspect
    try:
        head = model.get_output_embeddings()
    except Exception:  # noqa: BLE001 - not a transformers model, or one without the method
        return False
    if head is None or any(head is module for module in collected):
        return False
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # a forward without a signature: run it as it is
        return False


def _run_collector(collector, batches, progress: bool, desc: str, stats) -> None:
    iterator = batches
    if progress:
        from tqdm import tqdm

        total = len(batches) if hasattr(batches, "__len__") else None
        iterator = tqdm(batches, total=total, desc=desc, unit="batch")
    n_batches = 0
    try:
        with collector:
            for batch in iterator:
                collector.run_batch(batch)
                n_batches += 1
    finally:
        if iterator is not batches:
            iterator.close()
    unused = [name for name, c in collector.calls.items() if c == 0]
    if unused and n_batches:
        warnings.warn(
            f"calibration: {len(unused)} layer(s) never ran and get h = 0, first: {unused[0]!r}",
            RuntimeWarning,
            stacklevel=3,
        )
    if stats is not None:
        stats.update(tokens=dict(collector.tokens), calls=dict(collector.calls), batches=n_batches,
                     amax=collector.input_amax())


def collect_hessian_diag(
    model,
    batches: Iterable[Any],
    layers=None,
    progress: bool = True,
    *,
    mask_key: Optional[str] = "attention_mask",
    desc: str = "calibration",
    stats: Optional[Dict[str, Any]] = None,
) -> Dict[str, np.ndarray]:
    """``{layer name: h}`` with ``h_j = sum over counted tokens of x_j^2`` (float64, (in_features,)).

    ``layers``: None (every layer of :func:`hscale.models.linear_layers`), layer names, or
    ``(name, nn.Linear)`` pairs / a ``{name: nn.Linear}`` mapping. ``batches``: see the module
    docstring; with mapping batches the token mask is ``batch[mask_key]``. A tqdm bar over the
    batches is shown when ``progress`` is true. If ``stats`` is a dict it receives ``tokens``
    and ``calls`` (per layer), ``amax`` (per layer, HSCALE-CAL-2) and ``batches`` (count). A
    layer that was never called warns and gets an all-zero h. Hooks are removed even when the
    forward raises.
    """
    collector = HessianDiagCollector(model, layers, mask_key=mask_key)
    _run_collector(collector, batches, progress, desc, stats)
    return collector.hessian_diag()


def collect_hessian(
    model,
    batches: Iterable[Any],
    layers=None,
    progress: bool = True,
    *,
    mask_key: Optional[str] = "attention_mask",
    desc: str = "calibration",
    stats: Optional[Dict[str, Any]] = None,
) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """``({name: H}, {name: h})``: the whole ``H = X^T X`` (float64 (n, n)) and ``h`` as
    :func:`collect_hessian_diag` computes it, from one pass. Arguments as there. Memory: one
    n x n float64 matrix per layer."""
    collector = HessianDiagCollector(model, layers, mask_key=mask_key, full=True)
    _run_collector(collector, batches, progress, desc, stats)
    return collector.hessian(), collector.hessian_diag()
