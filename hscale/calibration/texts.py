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


def text_batches(tokenizer, texts: Sequence[str], batch_size: int = MINILM_BATCH_SIZE,
                 max_length: int = MINILM_MAX_LENGTH, by_length: bool = False):
    """A re-iterable, sized sequence of ``{"input_ids", "attention_mask"}`` batch dicts.

    Texts are taken ``batch_size`` at a time, tokenized with ``tokenizer`` (a Hugging Face
    tokenizer or :class:`hscale.models.synthetic.ByteTokenizer`), right-padded to the longest text
    of the batch and truncated to ``max_length`` tokens. Padding is marked 0 in
    ``attention_mask``. In the given order; with ``by_length`` grouped by token count instead,
    longest first, texts of equal length in the given order (``length_order``): a batch then
    pads its texts to lengths close to their own, and a forward pass computes on fewer padding
    slots (padding is no token, HSCALE-CAL-1: the statistics change only in their summation
    order, which the spec leaves open).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts = list(texts)
    if by_length:
        texts = [texts[i] for i in length_order(tokenizer, texts, int(max_length))]
    return _TextBatches(tokenizer, texts, int(batch_size), int(max_length))


def length_order(tokenizer, texts: Sequence[str], max_length: int) -> List[int]:
    """The indices of ``texts`` by their token count after truncation to ``max_length``,
    longest first; a stable sort, so equal lengths keep the texts' order."""
    if not texts:
        return []
    mask = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                     return_tensors="pt")["attention_mask"]
    lengths = [int(n) for n in mask.sum(dim=1)]
    return sorted(range(len(texts)), key=lambda i: -lengths[i])


class _TextBatches:
    def __init__(self, tokenizer, texts, batch_size, max_length):
        self.tokenizer, self.texts, self.batch_size, self.max_length = tokenizer, texts, batch_size, max_length

    def __len__(self) -> int:
        return (len(self.texts) + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for i in range(0, len(self.texts), self.batch_size):
            enc = self.tokenizer(
                self.texts[i : i + self.batch_size],
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
