"""A causal decoder run one block at a time from its checkpoint, bit for bit as its own forward.

The architecture is built on the meta device (no memory); only the rotary embedding is made real
(its ``inv_freq`` is a buffer computed from the config). For a batch, the keyword arguments the
model's forward hands each decoder block (the causal or sliding-window mask of the block's layer
type, ``position_embeddings``, ``position_ids``; the cache off) and the first block's input are
captured by running that forward on the batch's embeddings with every block replaced by a
catcher, so they are exactly the model's whatever the family. Block ``i`` is then materialised
from the checkpoint (its tensors read, MoE experts fused as the module expects, in float32, or
bfloat16 with ``--calibration-dtype``), run on the batches, and released (put back on meta, the
freed heap returned to the system).
Embeddings are looked up from the table read a slice of rows at a time: the table is never whole
in memory.

Which models: a ``*ForCausalLM`` whose base model has ``embed_tokens``, a ``layers`` list,
``rotary_emb`` and ``norm`` (Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE, Mixtral and the many
families built the same way); ``decoder_blocks`` says which. Checked bit for bit against
``from_pretrained(dtype=...)`` (float32 and bfloat16) with ``output_hidden_states`` for the six
families in tests/test_sequential.py.

The checkpoint is read through ``source``, any object with ``info`` (name -> .shape) and
``tensor(name, dtype, start=None, stop=None)`` (``hscale.checkpoints.SafetensorsModel``).
"""

from __future__ import annotations

from .architecture import meta_model
from .experts import block_state, expert_layout

#: Rows of the embedding table read at a time (a Llama-3 table is 1 GiB in bfloat16).
EMBEDDING_ROWS = 8192


def decoder_blocks(model) -> tuple[str, int] | None:
    """``("model.layers.", count)`` when ``model`` (built on meta will do) is a decoder this
    module runs block by block, else None."""
    import torch
    if not type(model).__name__.endswith("ForCausalLM"):
        return None
    prefix = getattr(model, "base_model_prefix", "")
    base = getattr(model, prefix, None)
    needed = ("embed_tokens", "layers", "rotary_emb", "norm")
    if base is None or not all(hasattr(base, n) for n in needed):
        return None
    if not isinstance(base.layers, torch.nn.ModuleList) or not isinstance(
            base.embed_tokens, torch.nn.Embedding):
        return None
    if any(True for layer in base.layers for _ in layer.buffers()):
        return None  # a block's buffers would have to be rebuilt like the rotary embedding's
    return f"{prefix}.layers.", len(base.layers)


class _Stop(Exception):
    pass


def _catcher(index: int, last: bool, sink: list):
    import torch

    class Catcher(torch.nn.Module):
        """Stands in for block ``index``: records what the model hands it, returns its input;
        the last one stops the forward before the (meta) final norm."""

        def forward(self, hidden_states, *args, **kwargs):
            if args:
                raise TypeError("a decoder block called with positional arguments beyond "
                                "hidden_states")
            sink.append((hidden_states, kwargs))
            if last:
                raise _Stop
            return hidden_states
    return Catcher()


def malloc_trim() -> None:
    """Give freed heap pages back to the system (glibc), so that the resident set does not creep
    block after block."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class SequentialDecoder:
    """A decoder whose blocks are materialised one at a time from ``source``."""

    def __init__(self, directory, source, device: str = "cpu", model=None,
                 dtype: str = "float32"):
        import torch
        self.source = source
        self.device = torch.device(device or "cpu")
        self.dtype = getattr(torch, dtype)  # the blocks', embeddings' and hidden states' dtype
        self.model = meta_model(directory) if model is None else model
        blocks = decoder_blocks(self.model)
        if blocks is None:
            raise ValueError(f"{directory}: {type(self.model).__name__} is not a decoder with "
                             "a list of blocks")
        self.prefix, self.count = blocks
        self.base_prefix = self.model.base_model_prefix
        self.config = self.model.config
        self.layout = expert_layout(self.config.model_type)
        self.base = getattr(self.model, self.base_prefix)
        rotary = self.base.rotary_emb
        with torch.device(self.device):
            self.base.rotary_emb = type(rotary)(config=self.base.config)
        self.model.eval()

    # -- names ---------------------------------------------------------------------------
    def block_names(self, index: int) -> list[str]:
        """The checkpoint tensors of block ``index``, in the checkpoint's order."""
        prefix = f"{self.prefix}{index}."
        return [n for n in self.source.info if n.startswith(prefix)]

    @property
    def embedding_name(self) -> str:
        return f"{self.base_prefix}.embed_tokens.weight"

    # -- inputs ----------------------------------------------------------------------------
    def embed(self, ids):
        """``embed_tokens(ids)`` in the decoder's dtype, the table read ``EMBEDDING_ROWS`` rows at
        a time where the ids fall (the values of the model's own lookup)."""
        import torch
        name = self.embedding_name
        vocab, hidden = self.source.info[name].shape
        out = torch.empty(*ids.shape, hidden, dtype=self.dtype)
        wanted = torch.unique(ids)
        for start in range(0, vocab, EMBEDDING_ROWS):
            stop = min(vocab, start + EMBEDDING_ROWS)
            if not bool(((wanted >= start) & (wanted < stop)).any()):
                continue
            rows = self.source.tensor(name, None, start, stop)
            hit = (ids >= start) & (ids < stop)
            out[hit] = rows[ids[hit] - start].to(self.dtype)
        return out.to(self.device)

    def block_inputs(self, input_ids, attention_mask):
        """``(hidden states entering block 0, [kwargs of block 0, ..., block L-1])`` for one
        batch, as the model's own forward builds them."""
        import torch
        sink: list = []
        real = self.base.layers
        self.base.layers = torch.nn.ModuleList(
            [_catcher(i, i == self.count - 1, sink) for i in range(self.count)])
        embeds = self.embed(input_ids)
        mask = None if attention_mask is None else attention_mask.to(self.device)
        try:
            with torch.no_grad():
                self.base(inputs_embeds=embeds, attention_mask=mask, use_cache=False)
        except _Stop:
            pass
        finally:
            self.base.layers = real
        if len(sink) != self.count:
            raise RuntimeError(f"captured {len(sink)} block calls, expected {self.count}")
        return sink[0][0], [kwargs for _, kwargs in sink]

    # -- one block ---------------------------------------------------------------------------
    def materialize(self, index: int):
        """Block ``index`` with its weights read from the checkpoint, in the decoder's dtype."""
        prefix = f"{self.prefix}{index}."
        names = [n[len(prefix):] for n in self.block_names(index)]
        state = block_state(self.layout, names,
                            lambda rel: self.source.tensor(prefix + rel, self.dtype),
                            lambda rel: self.source.info[prefix + rel].shape, self.dtype)
        layer = self.base.layers[index]
        layer.load_state_dict({k: v.to(self.device) for k, v in state.items()}, strict=True,
                              assign=True)
        del state
        return layer.eval()

    def release(self, index: int) -> None:
        self.base.layers[index].to_empty(device="meta")
        malloc_trim()

    def final_norm(self, hidden):
        """The base model's final norm applied to the last block's output."""
        import torch
        norm = self.base.norm
        state = {k: self.source.tensor(f"{self.base_prefix}.norm.{k}", self.dtype).to(
            self.device) for k, _ in norm.named_parameters()}
        norm.load_state_dict(state, assign=True)
        try:
            with torch.no_grad():
                return norm(hidden)
        finally:
            norm.to_empty(device="meta")
