"""What every weight of a model is, under the names its checkpoint uses: the Linears, the MoE
experts (one 2-D matrix per expert, whatever the module tree fuses), the routers, the
embeddings, the tied heads, the decoder blocks. Built from config.json on the meta device (no
weight read), so that a quantizer can say of every stored tensor what it does with it and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .architecture import meta_model
from .experts import ExpertLayout, check_experts, expert_layout, is_experts, is_router


@dataclass(frozen=True)
class ExpertSlot:
    """One expert's matrix: the experts module (its checkpoint path), the expert, its part
    (``gate``, ``up`` or ``down``) and its shape ``(out, in)``."""

    experts: str
    expert: int
    part: str
    shape: tuple[int, int]


@dataclass
class Inventory:
    model_type: str
    layout: ExpertLayout
    linears: dict = field(default_factory=dict)  # checkpoint module -> (out, in): nn.Linear
    experts: dict = field(default_factory=dict)  # checkpoint module -> ExpertSlot
    expert_counts: dict = field(default_factory=dict)  # experts module (checkpoint) -> E
    routers: dict = field(default_factory=dict)  # checkpoint module -> (E, H)
    embeddings: set = field(default_factory=set)  # checkpoint tensor names
    tied: dict = field(default_factory=dict)  # Linear module -> the tensor it shares
    owners: dict = field(default_factory=dict)  # checkpoint tensor -> its module's class
    block_prefix: str | None = None  # "model.layers." of a decoder's blocks, else None
    blocks: int = 0
    head: str | None = None  # the output head's module (a causal LM's lm_head)

    def matmuls(self) -> dict:
        """{checkpoint module: (out, in)} of every Linear and every expert matrix."""
        return {**self.linears, **{m: s.shape for m, s in self.experts.items()}}

    def block_of(self, name: str) -> int | None:
        """The decoder block a checkpoint name belongs to, else None."""
        if self.block_prefix is None or not name.startswith(self.block_prefix):
            return None
        index = name[len(self.block_prefix):].split(".", 1)[0]
        return int(index) if index.isdigit() else None


def inventory(directory: Path, model=None) -> Inventory:
    """The inventory of a model directory (or of ``model``, built on meta)."""
    import torch
    model = meta_model(directory) if model is None else model
    config = model.config
    layout = expert_layout(config.model_type)
    found = Inventory(config.model_type, layout)

    def disk(name: str) -> str:
        return layout.to_checkpoint("." + name)[1:]
    tied_keys = dict(getattr(model, "all_tied_weights_keys", None)
                     or getattr(model, "_tied_weights_keys", None) or {})
    if not getattr(config, "tie_word_embeddings", False) and not \
            getattr(config.get_text_config(), "tie_word_embeddings", False):
        tied_keys = {}
    for name, module in model.named_modules():
        kind = type(module).__name__
        for param, _ in module.named_parameters(recurse=False):
            found.owners[disk(f"{name}.{param}" if name else param)] = kind
        for buffer, _ in module.named_buffers(recurse=False):
            found.owners[disk(f"{name}.{buffer}" if name else buffer)] = f"buffer {kind}"
        if isinstance(module, torch.nn.Linear):
            weight = f"{name}.weight"
            if isinstance(tied_keys, dict) and weight in tied_keys:
                found.tied[disk(name)] = tied_keys[weight]
            found.linears[disk(name)] = (module.out_features, module.in_features)
        elif isinstance(module, torch.nn.Embedding):
            found.embeddings.add(disk(f"{name}.weight"))
        elif is_experts(module):
            check_experts(name, module)
            count, double, hidden = module.gate_up_proj.shape
            inter = double // 2
            found.expert_counts[disk(name)] = count
            for e in range(count):
                for part, shape in (("gate", (inter, hidden)), ("up", (inter, hidden)),
                                    ("down", (hidden, inter))):
                    slot = ExpertSlot(disk(name), e, part, shape)
                    found.experts[layout.expert_module(name, e, part)] = slot
                    found.owners[f"{layout.expert_module(name, e, part)}.weight"] = kind
        elif is_router(module):
            found.routers[disk(name)] = tuple(module.weight.shape)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    found.head = next((disk(n) for n, m in model.named_modules() if m is head and n), None) \
        if head is not None else None
    from .decoder import decoder_blocks
    blocks = decoder_blocks(model)
    if blocks is not None:
        found.block_prefix, found.blocks = blocks
    return found
