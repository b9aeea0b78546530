"""Block-by-block calibration runs the model's own front end (its embedding module and the code
before its first block) and proves it on every run; checked on every family transformers builds
here as a decoder run block by block whose front end does more than a table lookup:

* embeddings scaled in the embedding module (Gemma, Gemma 2, Gemma 3 text, VaultGemma: by
  sqrt(hidden); MiniCPM3: by ``scale_emb``), which block by block skipped before (Gemma 3's
  block-0 input was 1/sqrt(hidden) of the model's: issue 32);
* embeddings scaled in the base model's forward (Granite, HyperCLOVA X:
  ``embedding_multiplier``; Granite-MoE's experts are stored in a layout the kit does not read
  block by block, so it is not among them);
* shared (tied) embeddings: every Gemma here is tied, as the released models are;
* a head whose input is not the final norm's output alone (MiniCPM3 divides it by
  hidden_size / dim_model_base): the head's h comes from the model's own forward too.

No decoder run block by block here normalises its embeddings (BLOOM's and LFM2's front ends do,
but they are not decoders with a list of attention blocks: they go the whole-model way), so
there is none of that kind to test. For each family: block 0's input equals transformers' own
forward's bit for bit, h block by block equals the whole-model collector's bit for bit (the
documented tolerance: none), and a front end planted to differ is refused in one line before any
block is calibrated, never used."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers.llm_families import batch  # noqa: E402

from hscale.checkpoints import SafetensorsModel  # noqa: E402
from hscale.models.decoder import SequentialDecoder, reference_block_input  # noqa: E402
from hscale.quantize import QuantizeRequest, calibrate_to_file, quantize_model  # noqa: E402

#: family -> (config class, causal-LM class, settings that make its front end unusual)
FRONT_ENDS = {
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(tie_word_embeddings=True)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(tie_word_embeddings=True,
                                                         sliding_window=8)),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        tie_word_embeddings=True, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"])),
    "vaultgemma": ("VaultGemmaConfig", "VaultGemmaForCausalLM", dict(tie_word_embeddings=True)),
    "minicpm3": ("MiniCPM3Config", "MiniCPM3ForCausalLM", dict(
        scale_emb=12, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=16,
        qk_rope_head_dim=16, v_head_dim=32)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(embedding_multiplier=12.0,
                                                            residual_multiplier=0.22)),
    "hyperclovax": ("HyperCLOVAXConfig", "HyperCLOVAXForCausalLM", dict(
        embedding_multiplier=6.0)),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("front-ends")


def written_front_end(root, family: str):
    """The family's small seeded model (the project's small shape, bfloat16 on disk, the byte
    tokenizer), written once."""
    from hscale.checkpoints.synthetic import write_synthetic_model
    from hscale.models.synthetic import BOS_ID, EOS_ID, PAD_ID, SMALL_SHAPE
    directory = root / family
    if not (directory / "synthetic.json").is_file():
        config_class, model_class, own = FRONT_ENDS[family]
        config = getattr(transformers, config_class)(**{**SMALL_SHAPE, **own},
                                                     pad_token_id=PAD_ID, bos_token_id=BOS_ID,
                                                     eos_token_id=EOS_ID)
        config.architectures = [model_class]
        config.dtype = "bfloat16"
        write_synthetic_model(directory, config)
    return directory


#: Gemma's front end (the embedding times sqrt(hidden)) in four families: gemma3_text (with its
#: sliding and global layers) in the default tier, the other three in the extended one.
SAME_FRONT_END_AS_GEMMA3 = ("gemma", "gemma2", "vaultgemma")


@pytest.mark.parametrize("family", [
    pytest.param(family, marks=[pytest.mark.extended] if family in SAME_FRONT_END_AS_GEMMA3
                 else []) for family in FRONT_ENDS])
def test_block_by_block_sees_what_the_model_sees(root, family, tmp_path):
    directory = written_front_end(root, family)
    inputs = batch(directory)
    decoder = SequentialDecoder(directory, SafetensorsModel(directory))
    ours, _ = decoder.block_inputs(inputs["input_ids"], inputs["attention_mask"])
    theirs = reference_block_input(directory, "float32", inputs["input_ids"],
                                   inputs["attention_mask"])
    with torch.no_grad():
        from hscale.models.loading import quiet_transformers
        with quiet_transformers():
            model = transformers.AutoModelForCausalLM.from_pretrained(
                directory, dtype=torch.float32).eval()
        whole = model(**inputs, output_hidden_states=True).hidden_states[0]
    assert torch.equal(ours, whole) and torch.equal(theirs, whole)
    table_norm = float(torch.nn.functional.embedding(
        inputs["input_ids"], SafetensorsModel(directory).tensor(
            decoder.embedding_name, torch.float32)).norm())
    assert abs(float(whole.norm()) / table_norm - 1) > 0.5, "the front end is a plain lookup"

    files = {}
    for mode in ("auto", "never"):
        request = QuantizeRequest(model_dir=str(directory), progress=False, sequential=mode,
                                  ignore=(), batch_size=8, samples=24)
        facts = calibrate_to_file(request, tmp_path / f"{mode}.safetensors", full=False,
                                  force=False)
        if mode == "auto":
            assert facts["front_end"]["equal"] == "bit for bit"
        files[mode] = SafetensorsModel(tmp_path / f"{mode}.safetensors")
    assert set(files["auto"].info) == set(files["never"].info)
    for name in files["auto"].info:
        np.testing.assert_array_equal(files["auto"].array(name), files["never"].array(name),
                                      err_msg=name)


def test_a_planted_front_end_mismatch_is_refused_in_one_line(root, tmp_path, monkeypatch):
    """The embedding rows read block by block doubled (a front end that is not the model's):
    refused before any block is calibrated, saying by how much; nothing is written."""
    directory = written_front_end(root, "gemma3_text")
    real = SequentialDecoder._read_rows

    def planted(self, ids):
        real(self, ids)
        with torch.no_grad():
            self.embedding.weight.mul_(2)  # every row read so far, doubled
    monkeypatch.setattr(SequentialDecoder, "_read_rows", planted)
    with pytest.raises(ValueError) as caught:
        quantize_model(model_dir=str(directory), out=str(tmp_path / "out"), progress=False,
                       samples=8)
    message = str(caught.value)
    assert "block-by-block calibration refused: block 0's input on calibration batch 0 " \
           "differs from transformers' own forward of the model (gemma3_text;" in message
    assert "--sequential never" in message and "\n" not in message
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


def test_the_cli_says_the_refusal_in_one_line(root, tmp_path):
    """Through the command line, with the front end planted to differ in a sitecustomize
    that the subprocess imports: exit code 2, one line on stderr."""
    directory = written_front_end(root, "granite")
    (tmp_path / "sitecustomize.py").write_text(
        "from hscale.models.decoder import SequentialDecoder\n"
        "real = SequentialDecoder._read_rows\n"
        "def planted(self, ids):\n"
        "    import torch\n"
        "    real(self, ids)\n"
        "    with torch.no_grad():\n"
        "        self.embedding.weight.add_(1e-3)\n"
        "SequentialDecoder._read_rows = planted\n")
    import os
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run([sys.executable, "-m", "hscale.cli", "quantize", str(directory),
                          "--out", str(tmp_path / "out"), "--samples", "8", "--quiet"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.count("\n") == 1 and "block-by-block calibration refused" in run.stderr
