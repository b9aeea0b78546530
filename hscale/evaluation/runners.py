"""A language model that gives next-token logits for a window of token ids, whichever engine runs
it: transformers (``TransformersRunner``) or llama.cpp through llama-cpp-python
(``LlamaCppRunner``). Each says what it is (``facts``), its vocabulary and context, and how its
tokenizer cuts a text, so that ``hscale eval`` can feed the model and its original the same
tokens."""

from __future__ import annotations

import importlib.metadata
import re

import numpy as np


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def engine_build(engine: str) -> str:
    """``engine`` ("transformers" or "llama.cpp", a runner's ``facts["engine"]``) with what
    decides its logits beside the model and the tokens: its packages' versions and the
    instruction sets its CPU kernels run (torch and ggml pick their kernels by them, and the
    kernels' sums round differently). A kept base's key names it (``hscale.evaluation.base``),
    so that logits one build computed are not read back as another's."""
    if engine == "llama.cpp":
        import llama_cpp
        info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
        features = "+".join(re.findall(r"(\w+) = 1", info))
        return f"llama.cpp (llama-cpp-python {llama_cpp.__version__}, CPU {features})"
    import torch
    return (f"{engine} (transformers {package_version('transformers')}, torch "
            f"{torch.__version__}, CPU {torch.backends.cpu.get_cpu_capability()})")


class Runner:
    """What ``hscale eval`` asks of a model (subclasses fill it in)."""

    #: JSON-ready facts: the engine and its version, what was loaded and how.
    facts: dict
    vocab_size: int
    #: The positions the model was trained for (None: not said).
    max_context: int | None
    #: The BOS token id the model's tokenizer puts first, None where it puts none.
    bos: int | None

    def tokenize(self, text: str) -> list[int]:
        raise NotImplementedError

    def logits(self, ids: np.ndarray, first: int = 0):
        """The float32 logits (len(ids) - first, vocab) of positions ``first`` .. len(ids) - 1
        of one window of token ids, a torch tensor: the positions before ``first`` are run (they
        are the context) but their logits are not computed where the engine lets them be
        skipped, as llama-perplexity skips them."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class TransformersRunner(Runner):
    """A transformers causal LM (any dtype; its logits are taken as float32) and its tokenizer;
    ``hooks``: forward hooks that belong to it (W4A4 emulation), removed by ``close``."""

    def __init__(self, model, tokenizer, facts: dict, hooks=()):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.hooks = list(hooks)
        self.facts = {"engine": "transformers", "transformers": package_version("transformers"),
                      "torch": package_version("torch"), **facts}
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_context = getattr(model.config.get_text_config(), "max_position_embeddings",
                                   None)
        self.bos = added_bos(tokenizer)
        import inspect
        # transformers' causal LMs take logits_to_keep (the last N positions' logits only)
        self.keeps = "logits_to_keep" in inspect.signature(model.forward).parameters

    def tokenize(self, text: str) -> list[int]:
        return self.tokens_of(self.tokenizer, text)

    @staticmethod
    def tokens_of(tokenizer, text: str) -> list[int]:
        """How a transformers tokenizer cuts a text for the model: no special tokens."""
        from hscale.models.loading import quiet_transformers
        with quiet_transformers():  # "sequence longer than the model's maximum" is expected
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def logits(self, ids: np.ndarray, first: int = 0):
        import torch
        ids = torch.as_tensor(np.asarray(ids, np.int64))[None]
        keep = {"logits_to_keep": ids.shape[1] - first} if self.keeps else {}
        with torch.no_grad():
            out = self.model(ids, use_cache=False, **keep)
        logits = out.logits[0].float()
        return logits if self.keeps else logits[first:]

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []


def added_bos(tokenizer) -> int | None:
    """The BOS id a Hugging Face tokenizer puts before a text, or None."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    special = tokenizer("a")["input_ids"]
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and len(special) > len(plain) and special[0] == bos:
        return int(bos)
    return None


class LlamaCppRunner(Runner):
    """A GGUF file run by llama.cpp (llama-cpp-python) as llama-perplexity runs it: its own
    tokenizer, its CPU kernels (for NVFP4 and the k-quants: activations quantized to Q8 inside
    each matmul), flash attention, the scored positions' logits of a window, the KV cache
    emptied between windows.

    Flash attention: llama-perplexity's default (``-fa auto``) turns it on wherever the device
    runs it, which a CPU always does; llama-cpp-python's default is off, and offers no auto.
    Off, the attention materialises each head's (positions, positions) scores and softmax as
    separate passes: SmolLM2's NVFP4 GGUF took 24-28 CPU s for two 512-token windows against
    19-22 on (docs/performance.md), and the figures moved off llama-perplexity's (SmolLM2's
    Q4_1 GGUF, two windows: perplexity 17.653 against its 17.894); on, they are its figures."""

    #: llama.cpp's attention as llama-perplexity runs it on a CPU (see the class docstring).
    FLASH_ATTENTION = True

    def __init__(self, path, context: int, threads: int | None = None):
        from hscale.models.loading import require
        llama_cpp = require("llama_cpp", "engines")
        self.path = str(path)
        self.llm = llama_cpp.Llama(self.path, n_ctx=context, n_batch=context,
                                   n_ubatch=min(context, 512), logits_all=True, verbose=False,
                                   n_threads=threads, n_threads_batch=threads,
                                   flash_attn=self.FLASH_ATTENTION)
        model = self.llm._model
        metadata = self.llm.metadata
        self.facts = {"engine": "llama.cpp", "llama-cpp-python": llama_cpp.__version__,
                      "model": model.desc(),
                      "architecture": metadata.get("general.architecture"),
                      "file_type": _file_type(metadata.get("general.file_type")),
                      # a window is one batch: its decode runs on n_threads_batch
                      "threads": self.llm.n_threads_batch,
                      "flash_attention": self.llm.context_params.flash_attn_type
                      == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED}
        self.vocab_size = int(self.llm.n_vocab())
        self.max_context = int(model.n_ctx_train()) or None
        self.bos = llama_cpp_bos(self.llm)

    def tokenize(self, text: str) -> list[int]:
        return llama_cpp_tokens(self.llm, text)

    def logits(self, ids: np.ndarray, first: int = 0):
        """One decode of the window (it fits one batch: ``n_batch`` is the context), the KV
        cache emptied first, logits asked for positions ``first`` on only (llama-cpp-python's
        own ``eval`` asks for every position's or the last's): llama.cpp computes the output
        head for those rows alone and returns them in order."""
        import torch
        ids = [int(i) for i in ids]
        llm = self.llm
        llm.reset()
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        llm._batch.set_batch(batch=ids, n_past=0, logits_all=False)
        for position in range(len(ids)):
            llm._batch.batch.logits[position] = position >= first
        llm._ctx.decode(llm._batch)
        rows, vocab = len(ids) - first, self.vocab_size
        flat = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(rows * vocab,))
        return torch.from_numpy(flat.reshape(rows, vocab).copy())

    def close(self) -> None:
        self.llm.close()


def llama_cpp_tokens(llm, text: str) -> list[int]:
    """How a llama-cpp-python ``Llama`` (the whole model, or its vocabulary alone) cuts a text:
    no BOS, special tokens read as text."""
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def llama_cpp_bos(llm) -> int | None:
    """The BOS id llama.cpp puts before a text of this model, or None."""
    return int(llm.token_bos()) if llm._model.add_bos_token() else None


def _file_type(value) -> str | None:
    """``general.file_type`` by its llama.cpp name (3: MOSTLY_Q4_1), the number where gguf does
    not know it."""
    if value is None:
        return None
    try:
        import gguf
        return gguf.LlamaFileType(int(value)).name
    except (ImportError, ValueError):
        return str(value)
