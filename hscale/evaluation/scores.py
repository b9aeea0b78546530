"""Token-level scores of a language model on windows of text, and their intervals over windows.

Per scored position of a window (``hscale.evaluation.text``), from the model's logits ``z`` and,
where there is one, the original model's ``r`` (both float32, every softmax taken in float64):

- the negative log-likelihood of the text's next token, ``-log softmax(z)[target]``;
- the KL divergence from the original, ``KL(P || Q) = sum_v p_v (log p_v - log q_v)`` with
  ``P = softmax(r)`` and ``Q = softmax(z)`` (llama.cpp's ``--kl-divergence`` measures the same);
- whether the two agree on the most likely next token;
- the original's own negative log-likelihood of the token, and Δp = p_model(token) -
  p_original(token), as llama-perplexity reports them.

Perplexity is ``exp`` of the mean negative log-likelihood over every scored token. Its interval,
and the KL divergence's, are Student-t intervals over the windows' means: tokens of one window
are not independent draws, whole windows of a long text nearly are. The ratio of the model's
perplexity to the original's is ``exp`` of the mean paired difference of their log-likelihoods,
its interval that of the windows' mean differences (the two are scored on the same tokens, so
the pairing removes the text's own difficulty from the spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .intervals import Interval, t_interval

#: Rows of a window whose float64 softmax is taken at once: few enough that a row block's
#: float64 copies stay in the CPU's caches between the passes over them (SmolLM2's 49,152
#: tokens: 6 MiB a copy; a 262,144-token vocabulary: 32 MiB). Each row is scored alone, so the
#: figures do not depend on it; 16 took 0.25-0.31 s of CPU time against 0.40-0.53 s for 64 on a
#: 255-row SmolLM2 window with an original (one thread, this 2-core machine).
ROWS_AT_ONCE = 16


@dataclass
class WindowScores:
    """The scores of one window's scored positions (float64 arrays, one entry a position)."""

    nll: np.ndarray
    kl: np.ndarray | None = None
    top1_agrees: np.ndarray | None = None
    base_nll: np.ndarray | None = None  # the original's
    delta_p: np.ndarray | None = None  # p_model(token) - p_original(token)


def score_window(logits, targets, first: int, reference=None) -> WindowScores:
    """Scores of positions ``first`` .. len(targets) - 1 of one window: ``logits`` the model's
    logits from position ``first`` on (at least len(targets) - first rows: what a runner gives,
    ``Runner.logits(ids, first)``), ``targets`` (context - 1,) the next tokens, ``reference``
    the original's logits at the scored positions ((len(targets) - first, V): its runner's, or
    a kept base's, ``hscale.evaluation.base``) or None.

    It runs on one torch thread (the caller's count is restored): a row block is a few MiB of
    float64, too little for torch's intra-op threads to pay for their fork and join, and on a
    loaded machine each join waits for a parked thread (a 255-row SmolLM2 window with an
    original: 0.26-0.38 CPU s on one thread, 0.87-1.32 on two; docs/performance.md). Each row
    is reduced whole either way, so the figures do not change."""
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _score_rows(torch, logits, targets, first, reference)
    finally:
        torch.set_num_threads(saved)


def _score_rows(torch, logits, targets, first: int, reference) -> WindowScores:
    logits = torch.as_tensor(logits)
    targets = torch.as_tensor(np.asarray(targets, dtype=np.int64))
    scored = targets.shape[0] - first
    if reference is not None:
        reference = torch.as_tensor(reference)
        if tuple(reference.shape) != (scored, logits.shape[-1]):
            raise ValueError(f"the original's logits are {tuple(reference.shape)}, the "
                             f"model's scored ones {(scored, logits.shape[-1])}: not the same "
                             "vocabulary or windows")
    parts: dict[str, list] = {"nll": [], "kl": [], "top1_agrees": [], "base_nll": [],
                              "delta_p": []}
    for start in range(first, targets.shape[0], ROWS_AT_ONCE):
        rows = slice(start, min(targets.shape[0], start + ROWS_AT_ONCE))
        log_q = torch.log_softmax(logits[rows.start - first:rows.stop - first].double(), dim=-1)
        token_q = log_q.gather(1, targets[rows, None])[:, 0]
        parts["nll"].append(-token_q)
        if reference is not None:
            log_p = torch.log_softmax(reference[rows.start - first:rows.stop - first].double(),
                                      dim=-1)
            token_p = log_p.gather(1, targets[rows, None])[:, 0]
            parts["kl"].append((log_p.exp() * (log_p - log_q)).sum(-1))
            parts["top1_agrees"].append((log_p.argmax(-1) == log_q.argmax(-1)).double())
            parts["base_nll"].append(-token_p)
            parts["delta_p"].append(token_q.exp() - token_p.exp())
    arrays = {k: torch.cat(v).numpy() for k, v in parts.items() if v}
    return WindowScores(**arrays)


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


@dataclass
class Scores:
    """Every window's scores, in order; the figures of a whole evaluation."""

    windows: list[WindowScores] = field(default_factory=list)

    def add(self, window: WindowScores) -> None:
        self.windows.append(window)

    @property
    def has_kl(self) -> bool:
        return bool(self.windows) and self.windows[0].kl is not None

    def _window_means(self, key: str) -> np.ndarray:
        return np.array([getattr(w, key).mean() for w in self.windows])

    def _all(self, key: str) -> np.ndarray:
        return np.concatenate([getattr(w, key) for w in self.windows])

    def nll(self) -> Interval:
        """The mean negative log-likelihood per token, with its interval over windows (every
        window scores as many tokens, so the mean of the window means is the token mean)."""
        return t_interval(self._window_means("nll"))

    def perplexity(self) -> Interval:
        return self.nll().mapped(math.exp)

    def figures(self) -> dict:
        """The JSON-ready figures: perplexity and the mean negative log-likelihood with their
        intervals, and per window; with an original, the KL divergence (mean with its
        interval, median, 99th percentile, largest) and the top-1 agreement."""
        nll = self.nll()
        out = {"tokens_scored": int(sum(w.nll.size for w in self.windows)),
               "perplexity": nll.mapped(math.exp).as_dict(),
               "nll": nll.as_dict(),
               "per_window": {"nll": [float(v) for v in self._window_means("nll")]}}
        if self.has_kl:
            kl = self._all("kl")
            out["kld"] = dict(t_interval(self._window_means("kl")).as_dict(),
                              median=_percentile(kl, 50), p99=_percentile(kl, 99),
                              max=float(kl.max()))
            out["top1_agreement"] = t_interval(self._window_means("top1_agrees")).as_dict()
            out["per_window"]["kld"] = [float(v) for v in self._window_means("kl")]
            out["per_window"]["top1_agreement"] = [float(v) for v in
                                                   self._window_means("top1_agrees")]
            out["per_window"]["original_nll"] = [float(v) for v in
                                                 self._window_means("base_nll")]
            out.update(self._against_original())
        return out

    def _against_original(self) -> dict:
        """The original's perplexity, the ratio of the model's to it (the windows' paired
        differences of mean log-likelihood), and Δp (mean with its interval, root mean square,
        extremes), as llama-perplexity's --kl-divergence prints them."""
        base_nll = self._window_means("base_nll")
        difference = self._window_means("nll") - base_nll
        delta_p = self._all("delta_p")
        return {"original_perplexity": t_interval(base_nll).mapped(math.exp).as_dict(),
                "perplexity_ratio": t_interval(difference).mapped(math.exp).as_dict(),
                "delta_p": dict(t_interval(self._window_means("delta_p")).as_dict(),
                                rms=float(np.sqrt(np.mean(delta_p ** 2))),
                                min=float(delta_p.min()), max=float(delta_p.max()))}
