"""Calibration passes over the models the project ships or builds: the bundled MiniLM on the
bundled text, and the seeded tiny decoder on byte-tokenized text (HSCALE-CAL-1)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from hscale.models.minilm import load_minilm
from hscale.models.synthetic import build_tiny_decoder

from .collector import collect_hessian_diag
from .texts import (MINILM_BATCH_SIZE, MINILM_MAX_LENGTH, calibration_texts,
                    minilm_calibration_batches, tiny_decoder_batches)


def calibrate_minilm(
    texts: Optional[Sequence[str]] = None,
    batch_size: int = MINILM_BATCH_SIZE,
    max_length: int = MINILM_MAX_LENGTH,
    progress: bool = True,
    *,
    device: Optional[str] = None,
    stats: Optional[Dict[str, Any]] = None,
):
    """Load MiniLM and calibrate all 36 Linear layers on ``texts`` (default: the bundled text).

    Returns ``(model, {name: h})``.
    """
    model, tokenizer = load_minilm(device=device)
    texts = calibration_texts() if texts is None else list(texts)
    h = collect_hessian_diag(
        model, minilm_calibration_batches(tokenizer, texts, batch_size, max_length), progress=progress, desc="MiniLM calibration", stats=stats
    )
    return model, h


def calibrate_tiny_decoder(
    seed: int = 0,
    texts: Optional[Sequence[str]] = None,
    batch_size: int = 16,
    max_length: int = 128,
    progress: bool = True,
    *,
    config=None,
    stats: Optional[Dict[str, Any]] = None,
):
    """Build the tiny decoder for ``seed`` and calibrate its Linear layers on byte-tokenized text.

    Returns ``(model, {name: h})``.
    """
    model = build_tiny_decoder(seed=seed, config=config)
    batches = tiny_decoder_batches(texts, batch_size, max_length, vocab_size=model.config.vocab_size)
    h = collect_hessian_diag(model, batches, progress=progress, desc="tiny decoder calibration", stats=stats)
    return model, h
