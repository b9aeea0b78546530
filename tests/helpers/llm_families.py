"""The six families the project builds, as small seeded Hugging Face directories for the tests of
block-by-block calibration, MoE experts, resume and torchrun (``hscale.models.synthetic``,
``hscale.checkpoints.synthetic``)."""

from __future__ import annotations

from pathlib import Path

DENSE = ("llama", "qwen2", "qwen3", "mistral")
MOE = ("qwen3_moe", "mixtral")
FAMILIES = DENSE + MOE


def written(root: Path, family: str, **overrides) -> Path:
    """The family's small seeded model under ``root`` (written once)."""
    from hscale.checkpoints.synthetic import write_synthetic_model
    from hscale.models.synthetic import family_config
    name = family + "".join(f"-{k}={v}" for k, v in sorted(overrides.items()))
    directory = Path(root) / name
    if not (directory / "synthetic.json").is_file():
        write_synthetic_model(directory, family_config(family, **overrides))
    return directory


def batch(directory: Path, count: int = 6, seq_len: int = 256):
    """A right-padded batch of the bundled texts through the directory's own tokenizer."""
    import transformers
    from hscale.calibration import calibration_texts, text_batches
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    return next(iter(text_batches(tokenizer, calibration_texts()[:count], count, seq_len)))
