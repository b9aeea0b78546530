"""The original's logits kept in a file (``hscale eval --base FILE``), as llama-perplexity's
``--kl-divergence-base`` keeps them: the first run with ``--original`` writes them, later runs
read them instead of loading and running the original.

What is kept, and why: the original's float32 logits at the scored positions of every window,
exactly as its runner gave them. The scores (``hscale.evaluation.scores``) take every softmax in
float64 from those float32 logits, so a kept base gives bit for bit the figures of recomputing
the original (KL divergence, its perplexity, the ratio, Δp, top-1 agreement): nothing is
approximated. The price is size: 4 bytes x vocabulary x scored tokens (SmolLM2, 49,152 tokens,
8 windows of 512 scored whole: 0.80 GB); llama-perplexity keeps 2 bytes per entry (log-
probabilities quantized to 16 bits), which approximates every figure.

A base is keyed by what its logits depend on: the original (the SHA-256 of its files, and the
engine build that ran it: its packages' versions and the CPU instruction sets its kernels ran,
``runners.engine_build``), the text (its SHA-256), and the windows (context, count, scored
positions, BOS, the SHA-256 of the token ids fed). A base whose key differs from the run's is
refused in one line naming the first thing that differs (``StaleBase``), never silently reused.

The file: ``MAGIC``, the header's length (8 bytes, little-endian), the header (JSON, UTF-8),
zero padding to a multiple of 64 bytes, then per window its (scored positions, vocabulary)
float32 little-endian rows, windows in order. It is written to a hidden name beside FILE and
renamed when complete (``hscale.files``).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

MAGIC = b"HSCALE-EVAL-BASE"
#: 2: llama.cpp runs an original with flash attention (``runners.LlamaCppRunner``), so a
#: version-1 base of a GGUF original holds other logits than this kit computes; refused.
VERSION = 2
#: The rows start at a multiple of this many bytes.
ALIGN = 64
ROW_DTYPE = np.dtype("<f4")
#: Bytes hashed at a time when fingerprinting a model.
HASH_CHUNK = 16 << 20
#: The files of a model directory that decide its logits (weights, configs, tokenizer).
MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".model", ".txt", ".jinja")


class StaleBase(ValueError):
    """A base file that does not belong to this evaluation: one line, what differs."""


@dataclass(frozen=True)
class BaseKey:
    """What a base's logits depend on (see the module docstring)."""

    original_sha256: str
    engine: str
    text_sha256: str
    context: int
    windows: int
    first_scored: int
    bos: int | None
    ids_sha256: str
    vocab: int

    #: (field, what a user calls it), in the order a difference is reported.
    NAMES = (("text_sha256", "the text (SHA-256 of --data)"), ("context", "--context"),
             ("windows", "the number of windows"),
             ("first_scored", "the scored positions (--scored)"),
             ("bos", "the BOS token"), ("ids_sha256", "the token ids (MODEL's tokenizer)"),
             ("vocab", "the vocabulary size"))


def windows_key(windows) -> dict:
    """The windows' part of a key: ``hscale.evaluation.text.Windows``."""
    ids = np.ascontiguousarray(windows.ids, dtype="<i8")
    return {"context": windows.context, "windows": windows.count,
            "first_scored": windows.first, "bos": windows.bos,
            "ids_sha256": hashlib.sha256(ids.tobytes()).hexdigest()}


def model_fingerprint(path) -> str:
    """The SHA-256 of a model: a GGUF file's bytes, or a directory's files that decide its
    logits (each file's name, size and bytes, in name order)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.is_file() and p.suffix in MODEL_FILE_SUFFIXES)
    for file in files:
        digest.update(f"{file.name}\0{file.stat().st_size}\0".encode())
        with open(file, "rb") as stream:
            while chunk := stream.read(HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _rows(key: BaseKey) -> int:
    return key.context - 1 - key.first_scored


def _data_offset(header: bytes) -> int:
    end = len(MAGIC) + 8 + len(header)
    return -(-end // ALIGN) * ALIGN


class BaseWriter:
    """Writes a base window by window (``add``), to a hidden name renamed by ``close`` once
    every window is in; ``abort`` (or an exception inside ``with``) leaves nothing."""

    def __init__(self, path, key: BaseKey, original: dict, argument: str = "--base"):
        from hscale.files import check_target, hidden_name
        self.path = check_target(path, argument)
        self.key = key
        header = json.dumps({"format": "hscale eval base", "version": VERSION,
                             "key": asdict(key), "original": original,
                             "dtype": ROW_DTYPE.str, "rows_per_window": _rows(key)},
                            sort_keys=True).encode("utf-8")
        self.temporary = self.path.with_name(hidden_name(self.path.name,
                                                         f"tmp-{os.getpid()}"))
        self.stream = open(self.temporary, "wb")  # noqa: SIM115 - open until close/abort
        self.stream.write(MAGIC + struct.pack("<Q", len(header)) + header)
        self.stream.write(b"\0" * (_data_offset(header) - self.stream.tell()))
        self.written = 0

    def add(self, logits) -> None:
        """One window's logits at its scored positions ((rows, vocab), in window order)."""
        rows = np.ascontiguousarray(np.asarray(logits), dtype=ROW_DTYPE)
        if rows.shape != (_rows(self.key), self.key.vocab):
            raise ValueError(f"--base: window {self.written} has logits {rows.shape}, the base "
                             f"keeps ({_rows(self.key)}, {self.key.vocab})")
        self.stream.write(rows.tobytes())
        self.written += 1

    def close(self) -> Path:
        if self.written != self.key.windows:
            self.abort()
            raise ValueError(f"--base {self.path}: {self.written} of {self.key.windows} windows "
                             "written; not kept")
        self.stream.close()
        os.replace(self.temporary, self.path)
        return self.path

    def abort(self) -> None:
        self.stream.close()
        self.temporary.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        return False


class KeptBase:
    """A base file read back: its key, the original's facts, and each window's logits
    (``logits(index)``, float32 (rows, vocab), read from the file when asked)."""

    def __init__(self, path, argument: str = "--base"):
        self.path = Path(path)
        self.argument = argument
        try:
            with open(self.path, "rb") as stream:
                magic = stream.read(len(MAGIC))
                if magic != MAGIC:
                    raise StaleBase(f"{argument} {self.path}: not a base hscale eval wrote "
                                    "(no HSCALE-EVAL-BASE header)")
                (length,) = struct.unpack("<Q", stream.read(8))
                header = stream.read(length)
            document = json.loads(header.decode("utf-8"))
            self.key = BaseKey(**document["key"])
        except (OSError, struct.error, UnicodeDecodeError, json.JSONDecodeError, KeyError,
                TypeError) as exc:
            raise StaleBase(f"{argument} {self.path}: an unreadable base file "
                            f"({type(exc).__name__}: {exc})") from None
        if document.get("version") != VERSION or document.get("dtype") != ROW_DTYPE.str:
            raise StaleBase(f"{argument} {self.path}: base version {document.get('version')} "
                            f"({document.get('dtype')}), this hscale reads version {VERSION}")
        self.original = document["original"]
        self.offset = _data_offset(header)
        self.rows = _rows(self.key)
        self.window_bytes = self.rows * self.key.vocab * ROW_DTYPE.itemsize
        expected = self.offset + self.key.windows * self.window_bytes
        size = self.path.stat().st_size
        if size != expected:
            raise StaleBase(f"{argument} {self.path}: {size:,} bytes, its header says "
                            f"{expected:,} (truncated or damaged)")

    def check(self, **wanted) -> None:
        """Refuses (``StaleBase``, one line naming the first difference) a base whose key
        differs from ``wanted`` (BaseKey's fields; those not given are not compared)."""
        names = dict(BaseKey.NAMES, engine="the engine that runs the original",
                     original_sha256="the original model (SHA-256 of its files)")
        for field, name in names.items():
            if field in wanted and getattr(self.key, field) != wanted[field]:
                raise StaleBase(f"{self.argument} {self.path}: kept for another evaluation: "
                                f"{name} differs (the base's {_shown(getattr(self.key, field))}"
                                f", this run's {_shown(wanted[field])}); delete it or name "
                                "another --base")

    def logits(self, index: int):
        """Window ``index``'s kept logits, a float32 torch tensor (rows, vocab)."""
        import torch
        if not 0 <= index < self.key.windows:
            raise IndexError(f"{self.path}: window {index} of {self.key.windows}")
        data = bytearray(self.window_bytes)
        with open(self.path, "rb") as stream:
            stream.seek(self.offset + index * self.window_bytes)
            if stream.readinto(data) != self.window_bytes:
                raise StaleBase(f"{self.argument} {self.path}: window {index} is cut short")
        rows = np.frombuffer(data, ROW_DTYPE).reshape(self.rows, self.key.vocab)
        return torch.from_numpy(rows.astype(np.float32, copy=False))


def _shown(value):
    """A key's value in a message: a digest's first 12 characters, anything else whole."""
    digest = isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef"
                                                                 for c in value)
    return value[:12] + "..." if digest else value
