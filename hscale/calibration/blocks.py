"""Calibration statistics of one decoder block at a time (HSCALE-CAL-1): h = diag(X^T X) of the
input of every matmul weight of the block, and with ``full`` the whole H = X^T X (GPTQ), keyed
by the checkpoint's module names, in float64, padding excluded.

* **With ``blocks``** the diagonal 16 x 16 blocks of H (``hscale-block``, HSCALE-BLOCK-1):
  ``B[i] = sum over tokens of x[16i:16i+16] x[16i:16i+16]^T``, float64 ``(n/16, 16, 16)``,
  summed like H (per process in batch order, then across processes): 16 x h's arithmetic,
  n x 16 x 8 bytes, so collected without the full H whatever the width.
* **One accumulator per distinct input.** q, k and v read the very same tensor, as do gate and
  up: a pre-hook that sees the object its sibling just saw shares its accumulator, so H is held
  once per distinct input (for Llama-3-8B: 3 x 4096^2 + 14336^2 float64, 1.9 GiB, not 2.3).
* **Per batch, then in batch order.** Each batch's h is summed on its own (``x`` cast to
  float64, squared, summed over its tokens, ``ROWS`` tokens at a time) and the block's h is the
  sum of the batches' in batch order: the same arithmetic as the whole-model
  ``HessianDiagCollector`` (identical bits while a batch has at most ``ROWS`` tokens), and the
  same whatever the number of processes the batches were spread over (``reduce``). H is summed
  per process in batch order, then across processes.
* **MoE experts** (fused 3-D parameters, transformers 5): a pre-hook on the experts module gets
  the router's choice ``(hidden_states, top_k_index, top_k_weights)``; expert e's gate and up
  see the tokens routed to it (unscaled: the routing weight multiplies the expert's output), its
  down projection ``act(gate) * up`` of those tokens, recomputed with the expert's own weights
  and gate (``_apply_gate``). Experts that are ``nn.Linear`` modules are Linears like any other:
  their hooks fire on the tokens routed to them.
* **amax** (HSCALE-CAL-2, W4A4): ``max |x|`` of the same rows h is summed from, per batch,
  reduced by taking the maximum (exact, so in any order and across processes); modules that
  share an input share it, as they share h.
* **Experts never routed to** on the calibration data get statistics from every token of the
  batch through them, for statistics only (gate/up: h of all the block's tokens; down: of
  ``act(gate) * up`` of all tokens with that expert's weights); the block's output keeps the
  true routing. ``fallbacks`` names each such expert.
"""

from __future__ import annotations

import numpy as np

from .rows import column_square_sums, rows_amax, select_rows, token_index, widened
from .statistics import LayerStatistics

#: Tokens cast to float64 at a time (bounds the hook's transient: 2048 x 14336 x 8 B = 235 MB).
ROWS = 2048


class _Accumulator:
    def __init__(self, n: int, full: bool, device, blocks: bool = False):
        import torch
        self.n = n
        self.partials: dict[int, object] = {}  # batch -> its h (float64 (n,))
        self.tokens: dict[int, int] = {}
        self.amax: dict[int, float] = {}  # batch -> max |x| of its rows (HSCALE-CAL-2)
        self.H = torch.zeros(n, n, dtype=torch.float64, device=device) if full else None
        self.B = torch.zeros(n // 16, 16, 16, dtype=torch.float64, device=device) \
            if blocks and n % 16 == 0 else None  # HSCALE-BLOCK-1: X^T X's diagonal blocks

    def add(self, batch: int, rows) -> None:
        """Accumulate the rows (tokens x n) of one batch."""
        import torch
        partial = None
        for start in range(0, rows.shape[0], ROWS):
            x64 = widened(rows[start:start + ROWS])
            if self.H is not None:
                self.H.addmm_(x64.T, x64)
            if self.B is not None:
                groups = x64.reshape(x64.shape[0], -1, 16)
                self.B += torch.einsum("tgj,tgk->gjk", groups, groups)
            chunk = column_square_sums(x64)  # HSCALE-CAL-1 (x64 squared in place: last)
            partial = chunk if partial is None else partial + chunk
        if partial is None:
            return
        amax = rows_amax(rows)  # HSCALE-CAL-2
        self.amax[batch] = max(self.amax.get(batch, 0.0), amax)
        if batch in self.partials:
            self.partials[batch] = self.partials[batch] + partial
        else:
            self.partials[batch] = partial
        self.tokens[batch] = self.tokens.get(batch, 0) + int(rows.shape[0])


class BlockStatistics:
    """The statistics of one materialised block. ``checkpoint_name(relative module name)``
    gives a module's checkpoint name; ``layout`` (``hscale.models.experts.ExpertLayout``) names
    experts. Use as a context manager around the block's batches, ``batch(index, mask)``
    before each; then ``reduce`` (across processes), ``fill_unrouted`` and ``result``."""

    def __init__(self, layer, checkpoint_name, layout, full: bool = False, blocks: bool = False):
        import torch
        self.layer, self.checkpoint_name, self.layout, self.full = layer, checkpoint_name, \
            layout, full
        self.blocks = blocks
        self.acc: dict[str, _Accumulator] = {}
        self.shares: dict[str, str] = {}  # module -> accumulator key
        self.experts: dict[str, tuple] = {}  # experts module (checkpoint) -> (module, count)
        self.kept: dict[str, dict[int, object]] = {}  # experts module -> batch -> its tokens
        self.index, self.mask, self._last, self._handles = 0, None, None, []
        self.token_rows = None  # the current batch's counted rows (``token_index``)
        self.fallbacks: dict[str, str] = {}
        self.h: dict = {}
        self.H: dict = {}
        self.B: dict = {}  # with ``blocks``: the diagonal 16 x 16 blocks of H
        self.tokens: dict = {}
        self.amax: dict = {}  # accumulator key -> max |x| (HSCALE-CAL-2)
        self._torch = torch

    # -- hooks -----------------------------------------------------------------------------
    def batch(self, index: int, mask) -> None:
        """The batch whose forward follows: its index and ``[batch, seq]`` token mask."""
        self.index = index
        self.mask = None if mask is None else mask.bool()
        every = self.mask is None or bool(self.mask.all())
        self.token_rows = None if every else token_index(self.mask)  # None: every row counts
        self._last = None

    def rows_of(self, x):
        """The rows (tokens) of an input ``[batch, seq, n]`` (or flattened) the token mask
        counts."""
        return self._rows(x)

    def add_rows(self, key: str, rows) -> None:
        """Accumulate ``rows`` (tokens x n) of the current batch under ``key`` (a module)."""
        self._add(key, rows)
        self.shares[key] = key

    def _rows(self, x):
        x = x.detach()
        flat = x.reshape(-1, x.shape[-1])
        if self.token_rows is None:
            return flat
        if x.shape[:-1] == self.mask.shape or flat.shape[0] == self.mask.numel():
            return select_rows(flat, self.token_rows)
        raise ValueError(f"an input of shape {tuple(x.shape)} does not line up with the token "
                         f"mask of shape {tuple(self.mask.shape)}")

    def _add(self, key: str, rows) -> None:
        if key not in self.acc:
            self.acc[key] = _Accumulator(rows.shape[-1], self.full, rows.device, self.blocks)
        self.acc[key].add(self.index, rows)

    def _linear_hook(self, name: str):
        def hook(module, args):
            x = args[0]
            if self._last is not None and self._last[0] is x:  # the sibling's very input
                self.shares[name] = self._last[1]
                return
            self._add(name, self._rows(x))
            self.shares[name] = name
            self._last = (x, name)  # held: its memory cannot be reused meanwhile
        return hook

    def _experts_hook(self, path: str):
        torch = self._torch
        import torch.nn.functional as F

        def hook(module, args):
            hidden, top_k_index = args[0].detach(), args[1]
            valid = None if self.mask is None else self.mask.reshape(-1).to(hidden.device)
            kept = hidden if valid is None else hidden[valid]
            self.kept.setdefault(path, {})[self.index] = kept
            with torch.no_grad():
                for e in torch.unique(top_k_index).tolist():
                    if not 0 <= e < module.num_experts:  # expert-parallel sentinels
                        continue
                    routed = (top_k_index == e).any(dim=-1)
                    if valid is not None:
                        routed &= valid
                    x = hidden[routed]
                    if x.shape[0] == 0:
                        continue
                    gate = self.layout.expert_module(path, e, "gate")
                    down = self.layout.expert_module(path, e, "down")
                    self._add(gate, x)
                    self._add(down, module._apply_gate(F.linear(x, module.gate_up_proj[e])))
        return hook

    def __enter__(self):
        from hscale.models.experts import is_experts
        torch = self._torch
        for name, module in (self.layer.named_modules() if self.layer is not None else ()):
            if isinstance(module, torch.nn.Linear):
                self._handles.append(module.register_forward_pre_hook(
                    self._linear_hook(self.checkpoint_name(name))))
            elif is_experts(module):
                path = self.checkpoint_name(name)
                self.experts[path] = (module, int(module.gate_up_proj.shape[0]))
                self._handles.append(module.register_forward_pre_hook(self._experts_hook(path)))
        return self

    def __exit__(self, *exc):
        while self._handles:
            self._handles.pop().remove()
        self._last = None

    # -- after the batches ---------------------------------------------------------------------
    def reduce(self, gather=None, all_reduce=None) -> None:
        """Sum the batches' h in batch order (``gather(obj)`` -> every process's obj, for the
        batches other processes ran) and H across processes (``all_reduce(tensor)``, in
        place); then share out h, H and token counts to the modules."""
        local = {key: {b: p.cpu().numpy() for b, p in acc.partials.items()}
                 for key, acc in self.acc.items()}
        counts = {key: dict(acc.tokens) for key, acc in self.acc.items()}
        widths = {key: acc.n for key, acc in self.acc.items()}
        maxima = {key: max(acc.amax.values()) for key, acc in self.acc.items() if acc.amax}
        everyone = gather((local, counts, widths, maxima)) if gather else [
            (local, counts, widths, maxima)]
        partials: dict = {}
        tokens: dict = {}
        for their_partials, their_counts, their_widths, their_maxima in everyone:
            widths.update(their_widths)
            for key, value in their_maxima.items():  # HSCALE-CAL-2: the max over processes
                self.amax[key] = max(self.amax.get(key, 0.0), value)
            for key, batches in their_partials.items():
                partials.setdefault(key, {}).update(batches)
                tokens.setdefault(key, {}).update(their_counts[key])
        for key in sorted(widths):
            batches = partials.get(key, {})
            total = None
            for b in sorted(batches):
                total = batches[b].copy() if total is None else total + batches[b]
            self.h[key] = np.zeros(widths[key]) if total is None else total
            self.tokens[key] = sum(tokens.get(key, {}).values())
        if self.full:
            for key in sorted(widths):
                acc = self.acc.get(key)
                H = acc.H if acc is not None else self._torch.zeros(
                    widths[key], widths[key], dtype=self._torch.float64)
                if all_reduce is not None:
                    all_reduce(H)
                H = H.cpu().numpy()
                self.H[key] = (H + H.T) / 2  # exact symmetry, as HessianDiagCollector's
        if self.blocks:
            for key in sorted(widths):
                if widths[key] % 16:
                    continue  # not quantizable (NVFP4-IN-1): no blocks
                acc = self.acc.get(key)
                B = acc.B if acc is not None else self._torch.zeros(
                    widths[key] // 16, 16, 16, dtype=self._torch.float64)
                if all_reduce is not None:
                    all_reduce(B)
                B = B.cpu().numpy()
                self.B[key] = (B + B.transpose(0, 2, 1)) / 2  # exact symmetry, as H's
        for key in list(self.acc):
            del self.acc[key]

    def unrouted(self) -> list[tuple[str, int]]:
        """(experts module, expert) of every expert that no calibration token was routed to,
        after ``reduce``."""
        return [(path, e) for path, (_, count) in self.experts.items() for e in range(count)
                if self.tokens.get(self.layout.expert_module(path, e, "gate"), 0) == 0]

    def fill_unrouted(self, gather=None, all_reduce=None) -> None:
        """Statistics for the experts never routed to: every kept token through them, for
        statistics only (see the module docstring); reduced like the rest."""
        import torch.nn.functional as F
        missing = self.unrouted()
        if missing:
            with self._torch.no_grad():
                for path, e in missing:
                    module = self.experts[path][0]
                    gate = self.layout.expert_module(path, e, "gate")
                    down = self.layout.expert_module(path, e, "down")
                    for batch, x in sorted(self.kept.get(path, {}).items()):
                        self.index = batch
                        self._add(gate, x)
                        self._add(down, module._apply_gate(F.linear(x, module.gate_up_proj[e])))
            routed_h, routed_H, routed_B, routed_tokens = self.h, self.H, self.B, self.tokens
            routed_amax = self.amax
            self.h, self.H, self.B, self.tokens, self.amax = {}, {}, {}, {}, {}
            self.reduce(gather, all_reduce)
            fallback_tokens = self.tokens
            self.h, self.H = {**routed_h, **self.h}, {**routed_H, **self.H}
            self.B = {**routed_B, **self.B}
            self.amax = {**routed_amax, **self.amax}
            self.tokens = routed_tokens
            for path, e in missing:
                seen = fallback_tokens.get(self.layout.expert_module(path, e, "gate"), 0)
                for part in ("gate", "up", "down"):
                    self.fallbacks[self.layout.expert_module(path, e, part)] = (
                        f"never routed to by the calibration data: h and amax from all {seen} "
                        "tokens through it (statistics only)")
        self.kept.clear()

    def result(self) -> LayerStatistics:
        """The statistics of every module that saw its input (or got a fallback), after
        ``reduce`` (and ``fill_unrouted``): h, H (with ``full``), the tokens each saw, the
        fallbacks, the input amax (HSCALE-CAL-2; a module no token reached is absent), float64
        numpy; modules sharing an input share the same arrays."""
        shares = self._shares()
        return LayerStatistics(
            h={m: self.h[k] for m, k in shares.items() if k in self.h},
            H={m: self.H[k] for m, k in shares.items() if k in self.H},
            blocks={m: self.B[k] for m, k in shares.items() if k in self.B},
            tokens={m: self.tokens.get(k, 0) for m, k in shares.items()},
            fallbacks=dict(self.fallbacks),
            amax={m: self.amax[k] for m, k in shares.items() if k in self.amax})

    def _shares(self) -> dict:
        shares = dict(self.shares)
        for path, (_, count) in self.experts.items():
            for e in range(count):
                gate = self.layout.expert_module(path, e, "gate")
                for part in ("gate", "up", "down"):
                    module = self.layout.expert_module(path, e, part)
                    shares[module] = gate if part != "down" else module
        return shares
