"""Synthetic models: seeded decoders built from a transformers config, no model hub.

Two kinds:

* :func:`build_tiny_decoder`, in memory (the conformance suite's full-model tests);
* the six families the project builds as Hugging Face directories (:data:`FAMILIES`: Llama,
  Qwen2 with tied embeddings, Qwen3, Mistral, Qwen3-MoE, Mixtral; small test shapes, or the
  Llama-3-8B and Qwen3-30B-A3B-block shapes of :data:`PRESETS`), written by
  ``hscale.checkpoints.synthetic.write_synthetic_model`` tensor by tensor in bfloat16.

The conformance suite's full-model tests quantize every Linear of :func:`build_tiny_decoder`
(a small random-initialised Qwen3-style causal decoder built from a config in code; LLaMA where
the installed transformers has no Qwen3). With the defaults it has 15 ``nn.Linear`` layers:
2 blocks x (q, k, v, o, gate, up, down) plus an *untied* ``lm_head``, built untied
(``tie_word_embeddings=False``) so that its ``lm_head`` is an independent weight. Its weights
are seeded, not trained: results on it are labelled synthetic wherever they are reported.
:class:`ByteTokenizer` gives it text input without a vocabulary file.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping, Optional

from .loading import quiet_transformers, require

#: Defaults of the tiny decoder. Every Linear in_features (hidden 128, heads*head_dim 128,
#: intermediate 384) is a multiple of 16.
TINY_DECODER_DEFAULTS: Dict[str, Any] = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    initializer_range=0.02,
    attn_implementation="eager",  # plain matmul + softmax: the same code on every device
)


#: The families the project builds: (config class, causal-LM class, the small test shape's
#: own settings). Qwen2 is built tied (``tie_word_embeddings``), as Qwen2.5-0.5B..3B ship.
FAMILIES: Dict[str, tuple] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                       norm_topk_prob=True)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(num_local_experts=4, num_experts_per_tok=2)),
}


#: The small test shape of every family (every Linear's in_features a multiple of 16).
SMALL_SHAPE: Dict[str, Any] = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
    rms_norm_eps=1e-6, tie_word_embeddings=False)


#: Real shapes, for benchmarks: Meta-Llama-3-8B's, and Qwen3-30B-A3B's blocks with 64 experts.
PRESETS: Dict[str, tuple] = {
    "llama8b": ("llama", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "qwen3moe": ("qwen3_moe", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_experts=64, num_experts_per_tok=8, norm_topk_prob=True, num_hidden_layers=8,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def family_config(family: str, shape: Optional[Mapping[str, Any]] = None, **overrides):
    """The transformers config of a family: its small test shape (or ``shape``), the family's
    own settings, ``overrides``; ``architectures`` names its causal-LM class, the dtype is
    bfloat16, and the special ids are :class:`ByteTokenizer`'s."""
    transformers = require("transformers")
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")
    config_class, model_class, own = FAMILIES[family]
    values = dict(SMALL_SHAPE if shape is None else shape)
    if shape is None:
        values.update(own)
    values.update(overrides)
    values.update(pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID)
    config = getattr(transformers, config_class)(**values)
    config.architectures = [model_class]
    config.dtype = "bfloat16"
    return config


def preset_config(name: str, **overrides):
    """The config of a preset of :data:`PRESETS` (``num_hidden_layers`` and others may be
    overridden)."""
    if name not in PRESETS:
        raise ValueError(f"preset {name!r}: one of {', '.join(PRESETS)}")
    family, shape = PRESETS[name]
    return family_config(family, {**shape, **overrides})


#: Special ids of :class:`ByteTokenizer`; byte b gets id ``BYTE_OFFSET + b``.
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


BYTE_OFFSET = 3


def tiny_decoder_config(config: Optional[Mapping[str, Any]] = None, **overrides):
    """The tiny decoder's transformers config: Qwen3 if available, else LLaMA (with a warning).

    ``config`` / ``overrides`` replace entries of :data:`TINY_DECODER_DEFAULTS`. A ready-made
    ``PretrainedConfig`` instance may also be passed as ``config`` and is returned unchanged.
    """
    transformers = require("transformers")
    if config is not None and not isinstance(config, Mapping):
        if overrides:
            raise TypeError("overrides cannot be combined with a PretrainedConfig instance")
        return config
    kw = dict(TINY_DECODER_DEFAULTS)
    kw.update(config or {})
    kw.update(overrides)
    cfg_cls = getattr(transformers, "Qwen3Config", None)
    if cfg_cls is None or getattr(transformers, "Qwen3ForCausalLM", None) is None:
        warnings.warn(
            f"transformers {transformers.__version__} has no Qwen3; the tiny decoder falls back "
            "to a LLaMA config (no q/k RMSNorm), layer names and shapes are the same",
            RuntimeWarning,
            stacklevel=2,
        )
        cfg_cls = transformers.LlamaConfig
    return cfg_cls(**kw)


def build_tiny_decoder(seed: int = 0, config=None):
    """A small random-initialised Qwen3-style ``*ForCausalLM`` in eval mode, fp32, on CPU.

    Deterministic given ``seed`` (for a given torch/transformers installation): the weights are
    drawn by transformers' own initialiser after ``torch.manual_seed(seed)`` inside
    ``torch.random.fork_rng``, so the caller's global RNG state is left untouched.
    ``config`` is a mapping of overrides of :data:`TINY_DECODER_DEFAULTS` or a
    ``PretrainedConfig``. Raises ``ValueError`` if a Linear layer's in_features is not a multiple
    of 16. The model's ``hscale_seed`` attribute records the seed.
    """
    torch = require("torch")
    transformers = require("transformers")
    cfg = tiny_decoder_config(config)
    arch = "Qwen3ForCausalLM" if type(cfg).__name__ == "Qwen3Config" else "LlamaForCausalLM"
    model_cls = getattr(transformers, arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        with quiet_transformers():
            model = model_cls(cfg)
    model = model.float().eval()
    bad = [
        (name, mod.in_features)
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and mod.in_features % 16
    ]
    if bad:
        raise ValueError(
            f"tiny decoder config gives Linear layers whose in_features is not a multiple of "
            f"16 (first: {bad[0][0]} with in_features={bad[0][1]}); NVFP4 needs n % 16 == 0"
        )
    model.hscale_seed = int(seed)
    return model


class ByteTokenizer:
    """A tiny deterministic tokenizer for the tiny decoder: UTF-8 bytes -> ids.

    id = ``BYTE_OFFSET + byte`` (3..258), ``PAD_ID`` = 0, ``BOS_ID`` = 1 (prepended),
    ``EOS_ID`` = 2 (appended); needs ``vocab_size >= 259``. Called like a Hugging Face tokenizer
    (``tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")``) it returns
    ``{"input_ids", "attention_mask"}`` int64 tensors, right-padded to the longest text.
    """

    def __init__(self, vocab_size: int = TINY_DECODER_DEFAULTS["vocab_size"]):
        if vocab_size < BYTE_OFFSET + 256:
            raise ValueError(f"ByteTokenizer needs vocab_size >= {BYTE_OFFSET + 256}, got {vocab_size}")
        self.vocab_size = int(vocab_size)
        self.pad_token_id = PAD_ID

    def encode(self, text: str, max_length: Optional[int] = None) -> List[int]:
        ids = [BOS_ID] + [BYTE_OFFSET + b for b in text.encode("utf-8")] + [EOS_ID]
        return ids[:max_length] if max_length else ids

    def __call__(
        self,
        texts,
        padding: bool = True,
        truncation: bool = True,
        max_length: Optional[int] = None,
        return_tensors: str = "pt",
    ):
        torch = require("torch")
        if isinstance(texts, str):
            texts = [texts]
        seqs = [self.encode(t, max_length if truncation else None) for t in texts]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1
        return {"input_ids": ids, "attention_mask": mask}


def random_token_ids(vocab_size: int, batch_size: int, seq_len: int, seed: int = 0):
    """Seeded uniform random token ids ``[batch_size, seq_len]`` (int64, CPU), no padding."""
    torch = require("torch")
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, int(vocab_size), (int(batch_size), int(seq_len)), generator=g)


def save_byte_tokenizer(directory, model_max_length: int = 4096) -> None:
    """A Hugging Face tokenizer (``tokenizer.json``, ``tokenizer_config.json``) whose ids are
    exactly :class:`ByteTokenizer`'s (``<pad>`` 0, ``<s>`` 1 prepended, ``</s>`` 2 appended,
    byte b -> 3 + b), which ``AutoTokenizer`` loads: a byte-level BPE over the 256 byte symbols
    without merges. A synthetic model directory then calibrates like a real one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    # GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) \
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    characters, extra = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    symbol = dict(zip(printable, map(chr, characters)))
    vocab = {"<pad>": PAD_ID, "<s>": BOS_ID, "</s>": EOS_ID}
    vocab.update({symbol[b]: BYTE_OFFSET + b for b in range(256)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", BOS_ID), ("</s>", EOS_ID)])
    tokenizer.add_special_tokens(["<pad>", "<s>", "</s>"])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>", padding_side="right",
                            model_max_length=model_max_length).save_pretrained(str(directory))
