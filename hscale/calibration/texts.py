"""The bundled calibration and held-out texts, and calibration batches made from texts.

``data/calibration.txt``: 101 short English texts written for this project
(:func:`calibration_texts`); ``data/heldout.txt``: texts none of which is a calibration text
(:func:`heldout_texts`), to measure a quantized model on text it was not calibrated on.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from typing import Any, Dict, Iterator, List, Optional, Sequence

#: Calibration settings used by :func:`calibrate_minilm` and :func:`build_default_layer`.
MINILM_BATCH_SIZE = 16


MINILM_MAX_LENGTH = 256  # all-MiniLM-L6-v2's max_seq_length; no bundled text reaches it

_TEXT_FILE = "calibration.txt"
_HELDOUT_FILE = "heldout.txt"


def _data_file(name: str):
    return importlib.resources.files(__package__).joinpath("data", name)


def calibration_text_sha256() -> str:
    return hashlib.sha256(_data_file(_TEXT_FILE).read_bytes()).hexdigest()


def _text_lines(name: str) -> List[str]:
    raw = _data_file(name).read_text(encoding="utf-8")
    return [line.strip() for line in raw.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def calibration_texts() -> List[str]:
    """The bundled calibration texts (one per non-blank, non-``#`` line of calibration.txt)."""
    return _text_lines(_TEXT_FILE)


def heldout_texts() -> List[str]:
    """The bundled held-out texts (heldout.txt): none of them is a calibration text, so they
    measure a quantized model on text it was not calibrated on."""
    return _text_lines(_HELDOUT_FILE)


#: What one more forward call costs, in token slots: grouping by length splits a run of texts
#: into another batch only where that saves more padding than this. SmolLM2-135M on two CPU
#: cores: a block's call costs about what 40-50 more token slots do.
BATCH_OVERHEAD_SLOTS = 64


def text_batches(tokenizer, texts: Sequence[str], batch_size: int = MINILM_BATCH_SIZE,
                 max_length: int = MINILM_MAX_LENGTH, by_length: bool = False):
    """A re-iterable, sized sequence of ``{"input_ids", "attention_mask"}`` batch dicts.

    Texts are tokenized with ``tokenizer`` (a Hugging Face tokenizer or
    :class:`hscale.models.synthetic.ByteTokenizer`), truncated to ``max_length`` tokens and
    right-padded to the longest text of their batch; padding is marked 0 in
    ``attention_mask``. Batches hold ``batch_size`` texts in the given order; with
    ``by_length`` at most ``batch_size``, the texts grouped by token count instead
    (``length_batches``), so that a forward pass computes on little padding (padding is no
    token, HSCALE-CAL-1: the statistics change only in their summation order, which the spec
    leaves open).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts, size, max_length = list(texts), int(batch_size), int(max_length)
    if by_length:
        batches = length_batches(token_counts(tokenizer, texts, max_length), size)
    else:
        batches = [list(range(i, min(i + size, len(texts)))) for i in range(0, len(texts), size)]
    return _TextBatches(tokenizer, texts, batches, max_length)


def token_counts(tokenizer, texts: Sequence[str], max_length: int) -> List[int]:
    """Each text's token count after truncation to ``max_length``."""
    if not texts:
        return []
    mask = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                     return_tensors="pt")["attention_mask"]
    return [int(n) for n in mask.sum(dim=1)]


def length_batches(counts: Sequence[int], batch_size: int,
                   overhead: int = BATCH_OVERHEAD_SLOTS) -> List[List[int]]:
    """The texts (indices into ``counts``) in batches of at most ``batch_size``: sorted by
    token count, longest first (a stable sort: equal counts keep their order), then cut into
    consecutive runs at the places that minimise the token slots computed (each batch: its
    texts x its longest) plus ``overhead`` per batch. Dynamic programming over the cut
    points, exact; of equally cheap cuttings the one with the larger last batches."""
    order = sorted(range(len(counts)), key=lambda i: -counts[i])
    longest = [counts[i] for i in order]
    n = len(order)
    best = [0] + [None] * n  # best[j]: the cheapest cost of the first j texts
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(max(0, j - batch_size), j):
            cost = best[i] + (j - i) * longest[i] + overhead
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    bounds, j = [], n
    while j:
        bounds.append((cut[j], j))
        j = cut[j]
    return [order[i:j] for i, j in reversed(bounds)]


class _TextBatches:
    def __init__(self, tokenizer, texts, batches, max_length):
        self.tokenizer, self.texts, self.batches = tokenizer, texts, batches
        self.max_length = max_length

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for batch in self.batches:
            enc = self.tokenizer(
                [self.texts[i] for i in batch],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            yield {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def minilm_calibration_batches(tokenizer, texts: Sequence[str], batch_size: int = MINILM_BATCH_SIZE, max_length: int = MINILM_MAX_LENGTH):
    """MiniLM calibration batches: :func:`text_batches` with the MiniLM tokenizer."""
    return text_batches(tokenizer, texts, batch_size, max_length)


def tiny_decoder_batches(texts: Optional[Sequence[str]] = None, batch_size: int = 16, max_length: int = 128, vocab_size: Optional[int] = None):
    """Calibration batches for the tiny decoder: the bundled texts through :class:`ByteTokenizer`."""
    from hscale.models.synthetic import TINY_DECODER_DEFAULTS, ByteTokenizer
    vocab = vocab_size or TINY_DECODER_DEFAULTS["vocab_size"]
    return text_batches(ByteTokenizer(vocab), calibration_texts() if texts is None else texts, batch_size, max_length)
