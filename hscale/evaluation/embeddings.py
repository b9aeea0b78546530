"""A quantized sentence encoder measured where its users measure it: the cosine of each text's
sentence embedding to the float32 model's (all-MiniLM-L6-v2's mean pooling)."""

from __future__ import annotations

import numpy as np

from hscale.checkpoints import checkpoint_weights, detect_format
from hscale.models.architecture import architecture
from hscale.models.loading import quiet_transformers

from .quality import cosine_stats


def sentence_embeddings(model, tokenizer, texts, batch_size: int = 32) -> np.ndarray:
    """Mean-pooled, L2-normalised last hidden states (all-MiniLM-L6-v2's sentence embedding)."""
    import torch
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                              max_length=256, return_tensors="pt")
            hidden = model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(out).astype(np.float64)


class EmbeddingProbe:
    """The source model's sentence embeddings of ``texts``, in float32 as loaded, and with its
    Linear weights replaced: ``cosine(weights)`` gives the cosine similarity of each text's
    embedding to the float32 one (mean and min), and puts the original weights back."""

    def __init__(self, source_dir, texts):
        import transformers
        self.texts = list(texts)
        self.model_class, _ = architecture(source_dir)
        with quiet_transformers():
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(source_dir)
            self.model = self.model_class.from_pretrained(source_dir).eval()
        self.base = self.embeddings(self.model)

    def embeddings(self, model) -> np.ndarray:
        return sentence_embeddings(model, self.tokenizer, self.texts)

    def cosine(self, weights: dict) -> dict:
        """``weights``: module -> weight (m, n), any float dtype; every other weight stays."""
        import torch
        originals = {}
        try:
            with torch.no_grad():
                for module, weight in weights.items():
                    parameter = self.model.get_submodule(module).weight
                    originals[module] = parameter.detach().clone()
                    parameter.copy_(torch.from_numpy(np.asarray(weight, dtype=np.float32)))
            return cosine_stats(self.base, self.embeddings(self.model))
        finally:
            with torch.no_grad():
                for module, original in originals.items():
                    self.model.get_submodule(module).weight.copy_(original)


def embedding_cosines(source_dir, checkpoint_dir, texts) -> dict:
    """Cosine similarity of each text's sentence embedding, the quantized checkpoint's against
    the source model's (float32): through NVFP4-DEQ-1 (``checkpoint_weights``) and, for a
    compressed-tensors checkpoint, through the library's own loading (transformers with
    compressed-tensors, decompressing on load)."""
    from .loaders import compressed_tensors_model
    probe = EmbeddingProbe(source_dir, texts)
    result = {"texts": len(probe.texts),
              "dequantize": probe.cosine(checkpoint_weights(checkpoint_dir))}
    if detect_format(checkpoint_dir).format == "compressed-tensors":
        try:
            loaded = compressed_tensors_model(checkpoint_dir).eval()
            result["compressed_tensors_load"] = cosine_stats(probe.base, probe.embeddings(loaded))
        except ImportError as exc:
            result["compressed_tensors_load"] = f"not run: {exc}"
    return result
