"""The text a model is evaluated on (``hscale eval --data``), and its windows of tokens.

What ``--data PATH`` reads: a **text file** whole, as it is (no line is dropped or stripped:
perplexity is measured on the document); a **JSONL file** (``.jsonl``, ``.json``), each record's
``--text-field``; a **directory**: a ``datasets`` ``save_to_disk`` directory's column, or every
text and JSONL file under it in sorted path order (a text file whole). Documents are joined with
a blank line. The JSONL and dataset rules are those of ``--calibration-data``
(``hscale.calibration.sources``), so one file serves both, and the two commands say the same
things about a file they cannot read.

Windows follow llama.cpp's ``llama-perplexity``: the text is tokenized once (a BOS token first
where the model's tokenizer adds one), cut into ``count`` consecutive windows of ``context``
tokens, and where the tokenizer adds a BOS token each window's first token is replaced by it.
Within a window the logits at position j predict token j + 1; positions ``first`` .. context - 2
are scored: ``first`` is 0 (``--scored all``, every prediction) or context / 2 (``--scored
second-half``, llama-perplexity's rule: every scored token has at least half a window before it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: What joins two documents of a JSONL file, a dataset or a directory.
DOCUMENT_SEPARATOR = "\n\n"
#: ``--scored``: which positions of a window are scored.
SCORED = ("all", "second-half")
JSONL_SUFFIXES = (".jsonl", ".json")


def _text_file(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{option} {path}: unreadable as UTF-8 text ({exc})") from None


def read_documents(path, text_field: str = "text", option: str = "--data") -> list[str]:
    """The documents of an evaluation data path (see the module docstring)."""
    from hscale.calibration.sources import TEXT_SUFFIXES, read_texts
    path = Path(path)
    if path.is_file():
        if path.suffix.lower() in JSONL_SUFFIXES:
            documents = read_texts(path, text_field, option=option)
        else:
            documents = [_text_file(path, option)]
    elif path.is_dir():
        if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
            documents = read_texts(path, text_field, option=option)
        else:
            files = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                           and not any(part.startswith(".")
                                       for part in p.relative_to(path).parts))
            if not files:
                raise ValueError(f"{option} {path}: a directory with no .txt, .jsonl or .json "
                                 "files and no datasets save_to_disk files")
            documents = []
            for file in files:
                documents += read_documents(file, text_field, option)
    else:
        raise ValueError(f"{option} {path}: no such file or directory")
    documents = [d for d in documents if d.strip()]
    if not documents:
        raise ValueError(f"{option} {path}: no text in it")
    return documents


def evaluation_text(path, text_field: str = "text", option: str = "--data") -> str:
    """The documents of ``path`` joined into the one text that is tokenized."""
    return DOCUMENT_SEPARATOR.join(read_documents(path, text_field, option))


def text_facts(text: str) -> dict:
    """What identifies a text in a report: its length and SHA-256 (UTF-8)."""
    data = text.encode("utf-8")
    return {"characters": len(text), "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def first_scored(context: int, scored: str) -> int:
    """The first position of a window whose prediction is scored (see the module docstring)."""
    if scored not in SCORED:
        raise ValueError(f"--scored {scored!r}: one of {', '.join(SCORED)}")
    return 0 if scored == "all" else context // 2


@dataclass(frozen=True)
class Windows:
    """The windows a model is run on: ``ids`` (count, context) int64, the tokens fed (each
    window's first replaced by ``bos`` where there is one); ``targets`` (count, context - 1),
    the token each position predicts (the text's own, never the BOS); positions ``first`` ..
    context - 2 scored."""

    ids: np.ndarray
    targets: np.ndarray
    first: int
    bos: int | None
    tokens: int  # tokens of the whole text (with the leading BOS where there is one)
    available: int  # whole windows the text gives

    @property
    def count(self) -> int:
        return int(self.ids.shape[0])

    @property
    def context(self) -> int:
        return int(self.ids.shape[1])

    @property
    def scored_per_window(self) -> int:
        return self.context - 1 - self.first

    @property
    def scored(self) -> int:
        return self.count * self.scored_per_window


def cut_windows(tokens, context: int, count: int | None, bos: int | None,
                scored: str = "all") -> Windows:
    """``count`` windows (None: every whole one) of ``context`` tokens from the text's
    ``tokens`` (without special tokens); ``bos``: the BOS id where the tokenizer adds one."""
    first = first_scored(context, scored)
    if context - 1 - first < 1:
        raise ValueError(f"--context {context}: too short to score a token with --scored "
                         f"{scored}")
    stream = np.asarray(([bos] if bos is not None else []) + list(tokens), dtype=np.int64)
    available = stream.size // context
    if available == 0:
        raise ValueError(f"--data: the text gives {stream.size:,} tokens, fewer than one "
                         f"window of --context {context}")
    if count is not None and count > available:
        raise ValueError(f"--windows {count}: the text gives {stream.size:,} tokens, "
                         f"{available} windows of --context {context}")
    count = available if count is None else count
    targets = stream[: count * context].reshape(count, context)
    ids = targets.copy()
    if bos is not None:
        ids[:, 0] = bos
    return Windows(ids=ids, targets=targets[:, 1:].copy(), first=first, bos=bos,
                   tokens=int(stream.size), available=int(available))
