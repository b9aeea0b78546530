"""transformers' GGUF routes answering from the kit's one reading of a GGUF file.

transformers reads a GGUF file's config and tokenizer only by path: its config mapping
(``modeling_gguf_pytorch_utils.load_gguf_checkpoint``, which builds gguf's ``GGUFReader`` of the
path) and its tokenizer (``AutoTokenizer.from_pretrained(..., gguf_file=...)``, which calls
``transformers.integrations.gguf.read_gguf_metadata`` and then ``load_gguf_checkpoint``). Both
would parse the file again, element by element (``GGUFReader``: 5 s of CPU for SmolLM2's
49,152-token header, tens of seconds for Gemma 3's), and without the container checks of
``GGUFFile`` (NVFP4-GGUF-2). ``transformers_reads(file)`` runs them on the header the kit has
already read and checked: within the block, ``gguf.GGUFReader`` and
``read_gguf_metadata`` answer for that one file from the ``GGUFFile`` (any other path goes to
the originals). transformers' own mapping code is what runs; only where its bytes come from
changes (tests/checkpoints/test_gguf_source.py compares the results with transformers' own
reading of the file).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path


@contextlib.contextmanager
def transformers_reads(file):
    """Within the block, transformers' GGUF routes read the header of ``file`` (a ``GGUFFile``)
    instead of parsing ``file.path`` again (see the module docstring)."""
    import gguf
    import transformers.integrations.gguf as transformers_gguf
    path = Path(file.path).resolve()
    view = _ReaderView(file)
    original_reader, original_metadata = gguf.GGUFReader, transformers_gguf.read_gguf_metadata

    def reader(other, mode="r"):
        return view if Path(other).resolve() == path else original_reader(other, mode)

    def metadata(other, *args, **kwargs):
        if Path(other).resolve() != path:
            return original_metadata(other, *args, **kwargs)
        return view.metadata(), tuple(t.name for t in file.tensors)
    gguf.GGUFReader, transformers_gguf.read_gguf_metadata = reader, metadata
    try:
        yield
    finally:
        gguf.GGUFReader, transformers_gguf.read_gguf_metadata = original_reader, \
            original_metadata


class _ReaderView:
    """The header of a ``GGUFFile`` as what transformers reads of gguf's ``GGUFReader``
    (``fields``: key -> an object with ``parts``, ``data``, ``types``, ``contents()``;
    ``tensors``: objects with ``name``), and as its own header reader's metadata dict."""

    def __init__(self, file):
        self._file = file
        self.fields = {key: _FieldView(item) for key, item in file.fields.items()}
        self.tensors = [_TensorName(t.name) for t in file.tensors]

    def metadata(self) -> dict:
        return self._file.values()


@dataclass(frozen=True)
class _TensorName:
    name: str


class _FieldView:
    """One key-value pair as gguf's ``ReaderField`` shows it to transformers: ``parts[i]`` for
    each ``i`` of ``data`` is the element (a string's bytes, or a one-element list)."""

    def __init__(self, item):
        from .gguf_file import STRING
        self.name = item.key
        self.types = item.types
        self._item = item
        kind = item.type if item.sub_type is None else item.sub_type
        values = [item.value] if item.sub_type is None else item.value
        self.parts = [v.encode("utf-8") if kind == STRING else [v] for v in values]
        self.data = list(range(len(self.parts)))

    def contents(self, index_or_slice=slice(None)):
        return self._item.value
