"""A causal decoder run one block at a time from its checkpoint, bit for bit as its own forward.

The architecture is built on the meta device (no memory). Its **front end** (everything the
model's forward runs before the first block: the token embedding module, whatever scales or
normalises its output, position and mask code) is made real as ``from_pretrained`` makes it: its
parameters read from the checkpoint, its non-persistent buffers (the rotary embedding's
``inv_freq``, a scaled embedding's ``embed_scale``) computed by the model's own ``_init_weights``.
For a batch, the model's own forward runs on the batch's token ids with every block replaced by
a catcher, which records the first block's input and the keyword arguments the forward hands
each block (the causal or sliding-window mask of the block's layer type,
``position_embeddings``, ``position_ids``; the cache off): so the first block's input is the
model's own, whatever its embedding module or pre-block code does (Gemma's scaled embeddings,
Granite's embedding multiplier). The token embedding's table is never whole in memory: it is an
uninitialised tensor of its full shape into which only the rows of the batches' token ids are
read (the pages of the other rows are never touched, so never resident).
``reference_block_input`` computes the same input through transformers' own ``from_pretrained``
of the model cut to its first block, to prove the front end on a probe batch
(``hscale.quantize.blocks``).

Block ``i`` is then materialised from the checkpoint (its tensors read, MoE experts fused as the
module expects, in float32, or bfloat16 with ``--calibration-dtype``), run on the batches, and
released (put back on meta, the freed heap returned to the system).

Which models: a ``*ForCausalLM`` whose base model has ``embed_tokens``, a ``layers`` list,
``rotary_emb`` and ``norm`` (Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE, Mixtral, Gemma 1-3,
Granite and the many families built the same way); ``decoder_blocks`` says which. Checked bit
for bit against ``from_pretrained(dtype=...)`` (float32 and bfloat16) with
``output_hidden_states`` for the six families in tests/calibration/test_sequential.py, and the families
with a scaled embedding in tests/calibration/test_front_end.py.

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
        self.embedding = self.model.get_input_embeddings()
        self.rows_read = None  # bool (vocab,): the rows of the table read so far
        self._materialize_front_end()
        self.model.eval()

    # -- the front end -------------------------------------------------------------------------
    def _front_end_modules(self) -> list:
        """(name, module) of every module outside the blocks, the final norm and the head."""
        skip = [m for m in (self.base.layers, self.base.norm,
                            self.model.get_output_embeddings()) if m is not None]
        inside = {id(sub) for m in skip for sub in m.modules()}
        return [(name, module) for name, module in self.model.named_modules()
                if id(module) not in inside or module is self.embedding] \
            if skip else list(self.model.named_modules())

    def _materialize_front_end(self) -> None:
        """The front end made real as ``from_pretrained`` makes it (see the module docstring):
        parameters from the checkpoint (the token embedding's rows when a batch reads them),
        non-persistent buffers by the model's own ``_init_weights``."""
        import torch
        for name, module in self._front_end_modules():
            for key, param in list(module.named_parameters(recurse=False)):
                full = f"{name}.{key}" if name else key
                if module is self.embedding and key == "weight":
                    value = torch.empty(tuple(param.shape), dtype=self.dtype, device=self.device)
                    self.rows_read = torch.zeros(param.shape[0], dtype=torch.bool)
                elif full in self.source.info:
                    value = self.source.tensor(full, self.dtype).to(self.device)
                else:
                    raise ValueError(f"{full}: a parameter the model's forward reads before its "
                                     "first block, not in the checkpoint")
                value = torch.nn.Parameter(value, requires_grad=False)
                value._is_hf_initialized = True  # transformers' init leaves it as read
                module._parameters[key] = value
            owned = [key for key in module._buffers if key in module._non_persistent_buffers_set]
            for key, buffer in list(module._buffers.items()):
                full = f"{name}.{key}" if name else key
                if key in owned or buffer is None:
                    continue
                if full not in self.source.info:
                    raise ValueError(f"{full}: a buffer the model's forward reads before its "
                                     "first block, not in the checkpoint")
                module._buffers[key] = self.source.tensor(full, buffer.dtype).to(self.device)
            if owned:
                for key in owned:
                    module._buffers[key] = torch.empty_like(module._buffers[key],
                                                            device=self.device)
                with torch.no_grad():
                    self.model._init_weights(module)  # the model's own values, as from_pretrained

    def _read_rows(self, ids) -> None:
        """The token embedding's rows of ``ids`` not read yet, from the checkpoint,
        ``EMBEDDING_ROWS`` rows of the table at a time."""
        import torch
        wanted = torch.unique(ids.reshape(-1)).cpu()
        wanted = wanted[~self.rows_read[wanted]]
        if wanted.numel() == 0:
            return
        weight = self.embedding.weight
        vocab = weight.shape[0]
        for start in range(0, vocab, EMBEDDING_ROWS):
            stop = min(vocab, start + EMBEDDING_ROWS)
            hit = wanted[(wanted >= start) & (wanted < stop)]
            if hit.numel() == 0:
                continue
            rows = self.source.tensor(self.embedding_name, None, start, stop)
            with torch.no_grad():
                weight[hit.to(weight.device)] = rows[hit - start].to(self.dtype).to(weight.device)
        self.rows_read[wanted] = True

    # -- names ---------------------------------------------------------------------------
    def block_names(self, index: int) -> list[str]:
        """The checkpoint tensors of block ``index``, in the checkpoint's order."""
        prefix = f"{self.prefix}{index}."
        return [n for n in self.source.info if n.startswith(prefix)]

    @property
    def embedding_name(self) -> str:
        """The checkpoint name of the token embedding's table."""
        return next(f"{name}.weight" for name, module in self.model.named_modules()
                    if module is self.embedding)

    # -- inputs ----------------------------------------------------------------------------
    def block_inputs(self, input_ids, attention_mask):
        """``(hidden states entering block 0, [kwargs of block 0, ..., block L-1])`` for one
        batch, as the model's own forward builds them from the batch's token ids."""
        import torch
        self._read_rows(input_ids)
        sink: list = []
        real = self.base.layers
        self.base.layers = torch.nn.ModuleList(
            [_catcher(i, i == self.count - 1, sink) for i in range(self.count)])
        mask = None if attention_mask is None else attention_mask.to(self.device)
        try:
            with torch.no_grad():
                self.model(input_ids=input_ids.to(self.device), attention_mask=mask,
                           use_cache=False)
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

    def head_inputs(self, input_ids, attention_mask, hidden):
        """The output head's input for a batch whose last block returned ``hidden``, as the
        model's own forward computes it: the blocks replayed (each returns the last block's
        output), then the model's final norm and whatever its forward does before the head
        (MiniCPM3 divides by hidden_size / dim_model_base), caught as the head is entered."""
        import torch
        head = self.model.get_output_embeddings()
        sink: list = []
        real = self.base.layers

        class Replay(torch.nn.Module):
            def forward(self, *args, **kwargs):
                return hidden
        self.base.layers = torch.nn.ModuleList([Replay() for _ in range(self.count)])

        def catch(module, args, kwargs):
            sink.append(args[0] if args else kwargs["input"])
            raise _Stop
        handle = head.register_forward_pre_hook(catch, with_kwargs=True)
        self._read_rows(input_ids)
        self._load_norm()
        try:
            with torch.no_grad():
                self.model(input_ids=input_ids.to(self.device), attention_mask=None
                           if attention_mask is None else attention_mask.to(self.device),
                           use_cache=False)
        except _Stop:
            pass
        finally:
            handle.remove()
            self.base.layers = real
            self.base.norm.to_empty(device="meta")
        if not sink:
            raise RuntimeError("the model's forward never reached its output head")
        return sink[0]

    def _load_norm(self) -> None:
        norm = self.base.norm
        state = {k: self.source.tensor(f"{self.base_prefix}.norm.{k}", self.dtype).to(
            self.device) for k, _ in norm.named_parameters()}
        norm.load_state_dict(state, assign=True)

    def final_norm(self, hidden):
        """The base model's final norm applied to the last block's output."""
        import torch
        norm = self.base.norm
        self._load_norm()
        try:
            with torch.no_grad():
                return norm(hidden)
        finally:
            norm.to_empty(device="meta")


def reference_block_input(directory, dtype: str, input_ids, attention_mask, device="cpu"):
    """Block 0's input for a batch as transformers' own model computes it: ``from_pretrained``
    (the model's own loading) of its base model cut to its first block (the blocks after it
    cannot change its input, and are not read), run on the token ids until block 0 is entered.
    Memory: the front end (the whole embedding table, in ``dtype``) and one block."""
    import torch
    from .architecture import architecture
    from .loading import quiet_transformers
    cls, config = architecture(directory)
    config.num_hidden_layers = 1
    for key in ("layer_types", "mlp_layer_types"):  # per-layer lists, cut with the blocks
        if isinstance(getattr(config, key, None), list):
            setattr(config, key, getattr(config, key)[:1])
    with torch.device("meta"):
        base_class = type(cls(config).base_model)
    with quiet_transformers():
        base = base_class.from_pretrained(directory, config=config,
                                          dtype=getattr(torch, dtype)).to(device).eval()
    seen: list = []

    def stop(module, args, kwargs):
        seen.append(args[0] if args else kwargs["hidden_states"])
        raise _Stop
    handle = base.layers[0].register_forward_pre_hook(stop, with_kwargs=True)
    try:
        with torch.no_grad():
            base(input_ids=input_ids.to(device), attention_mask=None if attention_mask is None
                 else attention_mask.to(device), use_cache=False)
    except _Stop:
        pass
    finally:
        handle.remove()
    if not seen:
        raise RuntimeError(f"{directory}: the model's own forward never entered its first block")
    return seen[0]
