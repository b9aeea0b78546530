"""The h an H-Scale run used is kept beside its output (``hscale/h.safetensors`` in a checkpoint,
``NAME.hscale-h.safetensors`` beside ``NAME.gguf``), and ``hscale check --original`` finds it
and re-derives every layer exactly; without it the same check cannot (H-Scale's bytes depend on
h). The kept h is the one ``hscale calibrate`` computes with the same options."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.llm_families import written  # noqa: E402

from hscale.check import check_checkpoint  # noqa: E402
from hscale.quantize import QuantizeRequest, calibrate_to_file, quantize_model  # noqa: E402

OPTIONS = dict(samples=16, batch_size=8, progress=False)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return written(tmp_path_factory.mktemp("kept-h"), "llama")


def test_the_kept_h_lets_check_re_derive_h_scale_exactly(llama, tmp_path):
    from safetensors.numpy import load_file
    report = quantize_model(model_dir=str(llama), out=str(tmp_path / "out"), **OPTIONS)
    kept = tmp_path / "out" / "hscale" / "h.safetensors"
    assert report.kept_h == "hscale/h.safetensors" and kept.is_file()
    calibrate_to_file(QuantizeRequest(model_dir=str(llama), **OPTIONS),
                      tmp_path / "h.safetensors", full=False, force=False)
    assert load_file(str(kept)).keys() == load_file(str(tmp_path / "h.safetensors")).keys()
    for name, h in load_file(str(tmp_path / "h.safetensors")).items():
        np.testing.assert_array_equal(load_file(str(kept))[name], h, err_msg=name)

    checked = check_checkpoint(tmp_path / "out", original=llama)
    assert checked.conforms and len(checked.layers) == 14
    assert {layer.verdict for layer in checked.layers} == {"exact"}
    assert {layer.recipe for layer in checked.layers} == {"hscale maxabs"}
    assert any("hscale/h.safetensors, which hscale quantize kept" in n for n in checked.notes)
    moved = any(sum(v for k, v in (layer.quality or {}).get("shifts_from_rtn", {}).items()
                    if int(k)) for layer in checked.layers)
    assert moved, "H-Scale moved no byte away from RTN's: the test would not tell h apart"

    kept.unlink()  # without h, H-Scale's bytes cannot be re-derived
    blind = check_checkpoint(tmp_path / "out", original=llama)
    assert "exact" not in {layer.verdict for layer in blind.layers if layer.quality and sum(
        v for k, v in layer.quality.get("shifts_from_rtn", {}).items() if int(k))}


def test_no_keep_h_and_methods_without_h_keep_nothing(llama, tmp_path):
    quantize_model(model_dir=str(llama), out=str(tmp_path / "no"), keep_h=False, **OPTIONS)
    quantize_model(model_dir=str(llama), out=str(tmp_path / "rtn"), method="rtn", **OPTIONS)
    assert not (tmp_path / "no" / "hscale" / "h.safetensors").exists()
    assert not (tmp_path / "rtn" / "hscale" / "h.safetensors").exists()
    assert not any(p.name == "kept-h" for p in (tmp_path / "no").rglob("*"))


@pytest.mark.clause("HSCALE-BLOCK-1")
def test_hscale_block_is_offered_and_re_derived_from_the_blocks_it_keeps(llama, tmp_path):
    """--method hscale-block block by block: the blocks it kept are the diagonal 16 x 16 blocks
    of the whole model's X^T X (the whole-model collector, another route; equal to rounding),
    hscale check re-derives every layer from them exactly, and they move bytes that hscale
    (diagonal h) does not."""
    from safetensors.numpy import load_file
    from hscale.reference import diagonal_blocks
    quantize_model(model_dir=str(llama), out=str(tmp_path / "block"), method="hscale-block",
                   **OPTIONS)
    kept = load_file(str(tmp_path / "block" / "hscale" / "h.safetensors"))
    calibrate_to_file(QuantizeRequest(model_dir=str(llama), sequential="never", **OPTIONS),
                      tmp_path / "H.safetensors", full=True, force=False)
    whole = load_file(str(tmp_path / "H.safetensors"))
    blocks = [k for k in kept if k.startswith("B.")]
    assert len(blocks) == 14
    for name in blocks:
        expected = diagonal_blocks(whole["H." + name[2:]])
        np.testing.assert_allclose(kept[name], expected, rtol=1e-12,
                                   atol=1e-12 * float(np.abs(expected).max()), err_msg=name)
    checked = check_checkpoint(tmp_path / "block", original=llama)
    assert {layer.verdict for layer in checked.layers} == {"exact"}
    assert {layer.recipe for layer in checked.layers} == {"hscale-block maxabs"}
    quantize_model(model_dir=str(llama), out=str(tmp_path / "diag"), **OPTIONS)
    from hscale.checkpoints import SafetensorsModel
    a, b = SafetensorsModel(tmp_path / "block"), SafetensorsModel(tmp_path / "diag")
    assert any(not np.array_equal(a.array(n), b.array(n)) for n in a.info
               if n.endswith(".weight_scale"))


@pytest.mark.clause("HSCALE-BLOCK-1")
@pytest.mark.extended  # the block-by-block test above keeps hscale-block's re-derivation
def test_hscale_block_on_the_whole_model_path(llama, tmp_path):
    """--sequential never: the blocks come from the whole model's X^T X; check re-derives."""
    quantize_model(model_dir=str(llama), out=str(tmp_path / "whole"), method="hscale-block",
                   sequential="never", **OPTIONS)
    checked = check_checkpoint(tmp_path / "whole", original=llama)
    assert {layer.recipe for layer in checked.layers} == {"hscale-block maxabs"}
