"""What ``hscale quantize`` reports, and what it costs: by default the per-layer errors against
RTN come from the group objectives (weight MSE, diag(H) error; no X^T X collected for them),
``--report-errors`` adds the output error Tr(dW G dW^T) with G collected where it fits,
``--no-report`` computes no errors at all (the bytes written are the same), and a run whose
layers are RTN itself says so in one line instead of a table of 1.000s."""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.llm_families import written  # noqa: E402

from hscale.quantize import format_summary, quantize_model  # noqa: E402

OPTIONS = dict(samples=16, batch_size=8, progress=False)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return written(tmp_path_factory.mktemp("report"), "llama")


def weights_digest(directory) -> str:
    return hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()


def test_the_default_report_is_the_cheap_one_and_report_errors_the_full_one(llama, tmp_path):
    cheap = quantize_model(model_dir=str(llama), out=str(tmp_path / "cheap"), **OPTIONS)
    full = quantize_model(model_dir=str(llama), out=str(tmp_path / "full"), report_errors=True,
                          **OPTIONS)
    for layer in cheap.layers:
        assert {"weight_mse", "diag_error", "shifts"} <= layer.keys()
        assert "output_error" not in layer
    for layer in full.layers:
        assert layer["output_error"] > 0 and layer["output_error_rtn"] > 0
    assert weights_digest(tmp_path / "cheap") == weights_digest(tmp_path / "full")
    text = format_summary(cheap)
    assert "output error - of RTN's" in text and "model.layers.1.mlp.down_proj" in text


def test_no_report_computes_no_errors_and_writes_the_same_bytes(llama, tmp_path):
    default = quantize_model(model_dir=str(llama), out=str(tmp_path / "default"), **OPTIONS)
    bare = quantize_model(model_dir=str(llama), out=str(tmp_path / "bare"), no_report=True,
                          **OPTIONS)
    assert weights_digest(tmp_path / "default") == weights_digest(tmp_path / "bare")
    assert "errors" not in bare.seconds and "errors" in default.seconds
    for plain, layer in zip(default.layers, bare.layers):
        assert "weight_mse" not in layer and "diag_error" not in layer
        assert layer["shifts"] == plain["shifts"]
    text = format_summary(bare)
    assert "14 layers quantized; no errors against RTN computed (--no-report)" in text
    assert "model.layers.0.self_attn.q_proj" not in text
    with pytest.raises(ValueError, match="--no-report with --report-errors"):
        quantize_model(model_dir=str(llama), out=str(tmp_path / "x"), no_report=True,
                       report_errors=True, **OPTIONS)


def test_an_rtn_run_says_so_in_one_line_instead_of_rows_of_one(llama, tmp_path):
    report = quantize_model(model_dir=str(llama), out=str(tmp_path / "rtn"), method="rtn",
                            **OPTIONS)
    text = format_summary(report)
    assert "14 layers quantized, every one RTN itself (no scale byte moved, every error ratio " \
           "to RTN 1.000: no per-layer table)" in text
    assert "1.000" not in text.replace("ratio to RTN 1.000", "")
    assert all(layer["weight_mse"] == layer["weight_mse_rtn"] for layer in report.layers)
