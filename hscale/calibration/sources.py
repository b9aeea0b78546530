"""Calibration data from the user's files: what ``--calibration-data PATH`` reads.

* a **text file** (any name not ending in .jsonl or .json): one text per non-blank line; lines
  starting with ``#`` are comments;
* a **JSONL file** (``.jsonl``, or ``.json`` holding one JSON value per line): one record per
  line, each a JSON object whose ``--text-field`` (default ``text``) is the text, or a JSON
  string; blank lines skipped;
* a **directory**: a Hugging Face ``datasets`` directory written by ``save_to_disk``
  (``state.json`` or ``dataset_dict.json`` in it; read with ``datasets.load_from_disk`` when
  that library is installed, the ``train`` split of a DatasetDict, else its first), its
  ``--text-field`` column; otherwise every text and JSONL file under it (``*.txt``, ``*.jsonl``,
  ``*.json``, in sorted path order, subdirectories included), read as above, one after the
  other.

Texts are taken in that order; ``--samples`` keeps the first N, ``--seq-len`` truncates each to
N tokens. Nothing is shuffled: the same data gives the same statistics, bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

TEXT_SUFFIXES = (".txt", ".jsonl", ".json")


def read_texts(path, text_field: str = "text", limit: int | None = None,
               option: str = "--calibration-data") -> list[str]:
    """The texts of a calibration data path (see the module docstring), at most ``limit``;
    errors name the path as given to ``option``."""
    path = Path(path)
    if path.is_dir():
        if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
            texts = _dataset_texts(path, text_field, limit, option)
        else:
            files = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            texts = []
            for file in files:
                texts += _file_texts(file, text_field, option)
                if limit is not None and len(texts) >= limit:
                    break
            if not files:
                raise ValueError(f"{option} {path}: a directory with no .txt, .jsonl "
                                 "or .json files and no datasets save_to_disk files")
    elif path.is_file():
        texts = _file_texts(path, text_field, option)
    else:
        raise ValueError(f"{option} {path}: no such file or directory")
    if not texts:
        raise ValueError(f"{option} {path}: no texts in it")
    return texts[:limit] if limit is not None else texts


def _file_texts(path: Path, text_field: str, option: str) -> list[str]:
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{option} {path}: unreadable ({exc})") from None
    if path.suffix.lower() not in (".jsonl", ".json"):
        return [t.strip() for t in raw.splitlines() if t.strip() and not t.lstrip().startswith("#")]
    texts = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{option} {path}, line {number}: not JSON ({exc}); a "
                             "JSONL file holds one JSON value per line") from None
        if isinstance(record, dict):
            if text_field not in record:
                raise ValueError(f"{option} {path}, line {number}: no field "
                                 f"{text_field!r} (--text-field names the field holding the "
                                 f"text; this record has {', '.join(map(repr, record)) or 'none'})")
            record = record[text_field]
        if not isinstance(record, str):
            raise ValueError(f"{option} {path}, line {number}: the text is a "
                             f"{type(record).__name__}, not a string")
        if record.strip():
            texts.append(record)
    return texts


def _dataset_texts(path: Path, text_field: str, limit: int | None, option: str) -> list[str]:
    try:
        import datasets
    except ImportError:
        raise ValueError(f"{option} {path}: a datasets save_to_disk directory, and the "
                         "datasets library is not installed (pip install datasets; or give a "
                         "text or JSONL file)") from None
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        data = data["train"] if "train" in data else data[next(iter(data))]
    if text_field not in data.column_names:
        raise ValueError(f"{option} {path}: no column {text_field!r} (it has "
                         f"{', '.join(data.column_names)}; --text-field names the text column)")
    count = len(data) if limit is None else min(limit, len(data))
    return [t for t in data.select(range(count))[text_field] if isinstance(t, str) and t.strip()]
