"""Which model a path names, and the route that runs it for ``hscale eval``.

| the path | route (``--loader auto``) |
|---|---|
| a GGUF file | llama.cpp (llama-cpp-python), the engine GGUF is made for; with ``--engine transformers`` the kit's GGUF route (``hscale.checkpoints.gguf_source``: gguf's dequantizer tensor by tensor, transformers' names and config; float32; not an NVFP4 file, whose ``.scale`` it would not apply) |
| a Hugging Face model directory | transformers, float32 |
| a compressed-tensors NVFP4 checkpoint (dense) | transformers + compressed-tensors, decompressed on load (``CompressedTensorsConfig(dequantize=True)``), then cast to float32: its weights are the spec's rounded to bfloat16 (docs/checkpoints.md) |
| a compressed-tensors MoE checkpoint, any ModelOpt checkpoint, or ``--loader kit`` | the kit's decoding (NVFP4-DEQ-1, float32) handed to transformers as an unquantized state dict (``hscale.evaluation.decoded``): transformers drops each expert's global scale (#48371) and cannot run ModelOpt NVFP4 on a CPU |

A W4A4 checkpoint runs with its activations quantized as the engines do on Blackwell GPUs
(NVFP4-ACT-1 .. -4 with its stored activation scales, ``hscale.evaluation.activations``), unless
``--activations float`` (what weight-only engines, vLLM's Marlin among them, run).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from hscale.checkpoints import CheckpointError, detect_format
from hscale.checkpoints.gguf import is_gguf_file
from hscale.models.loading import quiet_transformers, require

from .runners import (LlamaCppRunner, TransformersRunner, added_bos, llama_cpp_bos,
                      llama_cpp_tokens, package_version)

#: ``--engine``: what runs a GGUF file.
ENGINES = ("auto", "llama.cpp", "transformers")
#: ``--loader``: how a compressed-tensors checkpoint becomes a transformers model.
LOADERS = ("auto", "library", "kit")
#: ``--activations``: W4A4 emulated, or every activation float32.
ACTIVATIONS = ("auto", "float")


@dataclass(frozen=True)
class ModelPath:
    """A model ``hscale eval`` can run: ``kind`` is ``gguf``, ``model`` (a Hugging Face
    directory, not quantized), ``compressed-tensors`` or ``modelopt``; ``w4a4`` where the
    checkpoint stores activation scales."""

    path: Path
    kind: str
    w4a4: bool = False

    @property
    def label(self) -> str:
        return {"gguf": "GGUF file", "model": "model directory",
                "compressed-tensors": "compressed-tensors NVFP4 checkpoint",
                "modelopt": "ModelOpt NVFP4 checkpoint"}[self.kind] + (
            " (W4A4)" if self.w4a4 else "")


def identify(path, option: str) -> ModelPath:
    """What ``path`` (given to ``option``) is, read from its headers and configs only; a
    ValueError naming the path and what is missing otherwise."""
    path = Path(path)
    if is_gguf_file(path):
        _check_gguf_model(path, option)
        return ModelPath(path, "gguf")
    if path.is_file():
        raise ValueError(f"{option} {path}: neither a GGUF file nor a model directory")
    if not path.is_dir():
        raise ValueError(f"{option} {path}: no such file or directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"{option} {path}: no config.json (not a Hugging Face model directory)")
    if not any(path.glob("*.safetensors")):
        raise ValueError(f"{option} {path}: no .safetensors weights")
    try:
        detected = detect_format(path)
    except CheckpointError:
        return ModelPath(path, "model")
    return ModelPath(path, detected.format, w4a4=bool(detected.layout.activations))


def _check_gguf_model(path: Path, option: str) -> None:
    """A readable GGUF file whose ``general.type`` (where it says one) is a model (not, say, an
    importance matrix): its header alone, read from a memory map in a fraction of a second."""
    from hscale.checkpoints.gguf_facts import TYPE_KEY
    from hscale.checkpoints.gguf_file import GGUFFile, GGUFFileError
    try:
        header = GGUFFile(path)
    except GGUFFileError as exc:
        raise ValueError(f"{option} {exc}") from None
    try:
        kind = header.value(TYPE_KEY)
    finally:
        header.close()
    if kind is not None and kind != "model":
        raise ValueError(f"{option} {path}: general.type is {kind!r}, not a model")


def gguf_engine(model: ModelPath, engine: str) -> str:
    """The engine a GGUF file runs in: llama.cpp unless ``--engine transformers``, whose GGUF
    reading must be able to read it (``hscale.checkpoints.gguf_source``: not an NVFP4 file, whose
    ``.scale`` it would not apply; an architecture it knows), said before any work."""
    if engine not in ENGINES:
        raise ValueError(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    if engine != "transformers":
        return "llama.cpp"
    from hscale.checkpoints.gguf_source import read_gguf_header
    read_gguf_header(model.path)
    return "transformers"


@dataclass(frozen=True)
class TextTokenizer:
    """A model's tokenizer loaded without the model (``open_tokenizer``): the token ids of a
    text as the model's runner cuts it, the BOS id it puts first (None: none), and the
    transformers tokenizer itself where one was loaded (its runner reuses it)."""

    tokens: list
    bos: int | None
    max_context: int | None  # the positions the model was trained for (None: not said)
    transformers_tokenizer: object = None


def open_tokenizer(model: ModelPath, engine: str, text: str) -> TextTokenizer:
    """``text`` cut into tokens by ``model``'s own tokenizer, loaded alone (a GGUF file in
    llama.cpp: its vocabulary only, ``vocab_only``; anything in transformers: its tokenizer),
    so that windows are known, and a text too short for them refused, before any model is
    loaded. The same tokenizer its runner uses (``open_runner``), so the tokens are the run's."""
    if model.kind == "gguf" and engine == "llama.cpp":
        llama_cpp = require("llama_cpp", "engines")
        vocabulary = llama_cpp.Llama(str(model.path), vocab_only=True, verbose=False)
        try:
            return TextTokenizer(llama_cpp_tokens(vocabulary, text), llama_cpp_bos(vocabulary),
                                 int(vocabulary._model.n_ctx_train()) or None)
        finally:
            vocabulary.close()
    require("transformers")
    if model.kind == "gguf":
        from hscale.checkpoints.gguf_source import load_gguf_tokenizer
        tokenizer, max_context = load_gguf_tokenizer(model.path), None
    else:
        tokenizer, max_context = _tokenizer(model.path), _trained_positions(model.path)
    runner_tokens = TransformersRunner.tokens_of(tokenizer, text)
    return TextTokenizer(runner_tokens, added_bos(tokenizer), max_context, tokenizer)


def _trained_positions(directory: Path) -> int | None:
    """The positions a model directory's config says it was trained for (what its runner's
    ``max_context`` will be), read from config.json alone."""
    import transformers
    with quiet_transformers():
        config = transformers.AutoConfig.from_pretrained(directory)
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def open_runner(model: ModelPath, *, context: int, engine: str = "auto", loader: str = "auto",
                activations: str = "auto", threads: int | None = None, tokenizer=None):
    """The runner of ``model`` (see the module docstring); ``tokenizer``: its transformers
    tokenizer where ``open_tokenizer`` loaded it already."""
    if model.kind == "gguf" and gguf_engine(model, engine) == "llama.cpp":
        return LlamaCppRunner(model.path, context, threads)
    require("transformers")
    if threads:
        import torch
        torch.set_num_threads(threads)
    if model.kind == "gguf":
        return _transformers_gguf(model, tokenizer)
    tokenizer = tokenizer if tokenizer is not None else _tokenizer(model.path)
    if model.kind == "model":
        return TransformersRunner(_plain_model(model.path), tokenizer,
                                  {"route": "from_pretrained, float32"})
    route = loader if loader != "auto" else (
        "library" if model.kind == "compressed-tensors" and not _has_experts(model.path)
        else "kit")
    if route == "library":
        if model.kind != "compressed-tensors":
            raise ValueError(f"--loader library: {model.path} is a {model.label}, which "
                             "transformers cannot run on a CPU; --loader kit decodes it")
        built = compressed_tensors_model(model.path)
        facts = {"route": "transformers + compressed-tensors, decompressed on load "
                          "(CompressedTensorsConfig(dequantize=True)), cast to float32",
                 "compressed-tensors": package_version("compressed-tensors")}
    else:
        from .decoded import decoded_model
        built = decoded_model(None, model.path)
        facts = {"route": "the kit's decoding (NVFP4-DEQ-1, float32) as transformers' state "
                          "dict"}
    hooks = []
    if model.w4a4 and activations == "auto":
        from .activations import activation_hooks
        hooks, unhooked = activation_hooks(built, model.path)
        facts["activations"] = ("NVFP4 at run time, emulated (NVFP4-ACT-1 .. -4, the stored "
                                f"activation scales) on {len(hooks)} Linears"
                                + (f"; {unhooked} expert matrices left float32"
                                   if unhooked else ""))
    else:
        facts["activations"] = "float32 (weight-only)" + (
            ": --activations float on a W4A4 checkpoint" if model.w4a4 else "")
    return TransformersRunner(built, tokenizer, facts, hooks)


#: The files a Hugging Face tokenizer is saved as (one is enough).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _tokenizer(directory: Path):
    """The directory's own tokenizer. transformers 5 gives an empty tokenizer (every text 0
    tokens) for a directory without tokenizer files, so their absence is said here."""
    import transformers
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{directory}: no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                         "the text cannot be tokenized as the model was trained")
    try:
        with quiet_transformers():
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{directory}: no tokenizer transformers can load ({exc})") from None
    if not tokenizer("a b", add_special_tokens=False)["input_ids"]:
        raise ValueError(f"{directory}: its tokenizer turns text into no tokens")
    return tokenizer


def _plain_model(directory: Path):
    import torch
    from hscale.models.architecture import architecture
    cls, _ = architecture(directory)
    with quiet_transformers():
        return cls.from_pretrained(directory, dtype=torch.float32)


def _has_experts(directory: Path) -> bool:
    from hscale.models.inventory import inventory
    return bool(inventory(directory).experts)


def compressed_tensors_model(directory):
    """transformers + compressed-tensors, decompressed on load, in float32.

    Loaded plainly (``from_pretrained(dir)``, transformers 5.17 to 5.24) the Linears stay
    compressed and a float32 forward fails (``expected m1 and m2 to have the same dtype``);
    ``CompressedTensorsConfig(dequantize=True)`` decompresses them, to bfloat16 with
    compressed-tensors 0.19, so the model is cast to float32 (which keeps their values)."""
    import torch
    import transformers
    from hscale.models.architecture import architecture
    require("compressed_tensors", "interop")
    cls, _ = architecture(directory)
    with quiet_transformers(), warnings.catch_warnings(), _library_bars_off():
        # transformers warns that the checkpoint's own quantization_config wins: it is the same
        warnings.simplefilter("ignore", UserWarning)
        model = cls.from_pretrained(
            directory, dtype=torch.float32,
            quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    return model.float()


@contextlib.contextmanager
def _library_bars_off():
    """compressed-tensors draws its own progress bars (compress, dispatch, decompress) on
    standard error while it loads: hidden for the load (hscale eval draws its own). Errors
    are raised, not printed, so none is lost."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        yield


def _transformers_gguf(model: ModelPath, tokenizer=None):
    """A GGUF file in transformers, dequantized to float32 by the kit's one GGUF route
    (``hscale.checkpoints.gguf_source``)."""
    from hscale.checkpoints.gguf_source import load_gguf_model
    loaded = load_gguf_model(model.path, "float32")
    types = ", ".join(f"{n} {k}" for k, n in sorted(loaded.header.tensor_types.items()))
    return TransformersRunner(loaded.model, tokenizer or loaded.tokenizer,
                              {"route": "gguf's dequantizer tensor by tensor, in transformers' "
                                        "model, float32",
                               "gguf": package_version("gguf"), "tensor_types": types})
