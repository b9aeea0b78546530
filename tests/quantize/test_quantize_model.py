"""``hscale quantize`` through its Python API on a seeded tiny decoder saved as a Hugging Face
directory (and, marked slow, on the bundled MiniLM): what is stored is the reference's result
for the global scale the file implies, fused layers share one s_g, nothing else changes, the
output appears complete or not at all."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hscale.calibration import save_hessians  # noqa: E402
from hscale.checkpoints import (FORMATS, SafetensorsModel, detect_format,  # noqa: E402
                                quantized_modules, read_stored_linear)
from hscale.pipelines import quantize_weight  # noqa: E402
from hscale.quantize import REPORT_NAME, QuantizeRequest, quantize_model  # noqa: E402
from hscale.reference import compute_global_scale, quantize  # noqa: E402
from hscale.reference.global_scale import (multiplier_from_reciprocal,  # noqa: E402
                                           reciprocal_from_multiplier)

from helpers.cli import hscale_here  # noqa: E402


def _save_tiny(directory: Path, **config) -> Path:
    """The seeded tiny decoder, or (with config overrides) one built from its config directly,
    since build_tiny_decoder refuses layers NVFP4 cannot store."""
    from hscale.models.synthetic import build_tiny_decoder, tiny_decoder_config
    if config:
        from transformers import AutoModelForCausalLM
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(tiny_decoder_config(**config))
    else:
        model = build_tiny_decoder(seed=0)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return _save_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tiny_hessians(tiny, tmp_path_factory) -> Path:
    """h and the full H of every Linear of the tiny decoder, in hscale calibrate's file."""
    from hscale.calibration import collect_hessian, tiny_decoder_batches
    from hscale.models import linear_layers
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny)
    layers = dict(linear_layers(model))
    H, h = collect_hessian(model, tiny_decoder_batches(vocab_size=model.config.vocab_size),
                           layers, progress=False)
    path = tmp_path_factory.mktemp("hessians") / "h.safetensors"
    save_hessians(path, h, H, {"model": "tiny decoder"})
    return path


def _stored_and_expected(out: Path, source: Path, fmt: str, h=None, method="rtn", init="maxabs"):
    """Every stored Linear, with the reference's result for the s_g its file implies."""
    stored_model, original = SafetensorsModel(out), SafetensorsModel(source)
    for module in quantized_modules(stored_model, fmt):
        stored = read_stored_linear(stored_model, fmt, module)
        weight = original.array(f"{module}.weight")
        want = quantize(weight, None if h is None else h[module], method=method, init=init,
                        global_scale=stored.global_scale)
        yield module, stored, want


@pytest.mark.clause("NVFP4-CKPT-1", "NVFP4-CKPT-2", "NVFP4-GS-4")
@pytest.mark.parametrize("fmt", FORMATS)
def test_rtn_checkpoint_stores_the_reference_result(tiny, tmp_path, fmt):
    out = tmp_path / "out"
    report = quantize_model(model_dir=str(tiny), out=str(out), pipeline="rtn", method="rtn",
                            format=fmt, progress=False)
    assert detect_format(out).format == fmt
    seen = 0
    for module, stored, want in _stored_and_expected(out, tiny, fmt):
        np.testing.assert_array_equal(stored.packed, want.packed, err_msg=module)
        np.testing.assert_array_equal(stored.scale_bytes, want.scale_bytes, err_msg=module)
        if fmt == "compressed-tensors":  # the reciprocal, and the multiplier it means
            assert stored.global_scale == multiplier_from_reciprocal(stored.stored_global_scale)
        else:
            assert stored.stored_global_scale == stored.global_scale
        seen += 1
    assert seen == 14  # 2 blocks x (q, k, v, o, gate, up, down); lm_head ignored by default
    assert [s["module"] for s in report.skipped] == ["lm_head"]
    source, written = SafetensorsModel(tiny), SafetensorsModel(out)
    for name in source.names():  # everything not quantized is carried over bit for bit
        if name.endswith(".weight") and name[:-7] in set(quantized_modules(written, fmt)):
            continue
        a, b = source.array(name), written.array(name)
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), name
    report_file = json.loads((out / REPORT_NAME).read_text())
    assert report_file["summary"]["layers"] == 14


@pytest.mark.clause("NVFP4-GS-1", "NVFP4-CKPT-3")
def test_fused_layers_share_one_global_scale(tiny, tmp_path):
    """q/k/v and gate/up: s_g from the largest amax of the set, every block scale computed with
    it (the stored bytes are the reference's at that s_g, checked above)."""
    out = tmp_path / "out"
    quantize_model(model_dir=str(tiny), out=str(out), pipeline="rtn", method="rtn",
                   progress=False)
    stored, source = SafetensorsModel(out), SafetensorsModel(tiny)
    for layer in range(2):
        for members in (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                        ("mlp.gate_proj", "mlp.up_proj")):
            names = [f"model.layers.{layer}.{m}" for m in members]
            amax = max(float(np.max(np.abs(source.array(f"{n}.weight")))) for n in names)
            expected = multiplier_from_reciprocal(reciprocal_from_multiplier(
                compute_global_scale(amax, 448.0)))
            got = {read_stored_linear(stored, "compressed-tensors", n).global_scale for n in names}
            assert got == {expected}, (names, got, expected)


@pytest.mark.clause("HSCALE-METHOD-1", "HSCALE-CAL-1")
def test_hscale_from_a_hessian_file_is_exact_and_never_worse(tiny, tiny_hessians, tmp_path):
    from safetensors.numpy import load_file
    h = {k[2:]: v for k, v in load_file(str(tiny_hessians)).items() if k.startswith("h.")}
    for pipeline, init in (("rtn", "maxabs"), ("4over6", "4over6")):
        out = tmp_path / pipeline
        report = quantize_model(model_dir=str(tiny), out=str(out), pipeline=pipeline,
                                method="hscale", hessian=str(tiny_hessians), progress=False)
        for module, stored, want in _stored_and_expected(out, tiny, "compressed-tensors", h,
                                                          "hscale", init):
            np.testing.assert_array_equal(stored.scale_bytes, want.scale_bytes, err_msg=module)
            np.testing.assert_array_equal(stored.packed, want.packed, err_msg=module)
        for layer in report.layers:  # H-Scale's search never loses to its own baseline
            assert layer["diag_error"] <= layer["diag_error_rtn"] * (1 + 1e-12), layer["module"]


@pytest.mark.clause("HSCALE-GPTQ-1")
def test_gptq_lowers_every_layers_output_error(tiny, tiny_hessians, tmp_path):
    report = quantize_model(model_dir=str(tiny), out=str(tmp_path / "g"), pipeline="gptq",
                            method="hscale", hessian=str(tiny_hessians), progress=False)
    assert len(report.layers) == 14
    for layer in report.layers:
        assert layer["output_error"] < layer["output_error_rtn"], layer["module"]


def test_an_existing_output_is_kept_without_force(tiny, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="exists; choose another --out or pass --force"):
        quantize_model(model_dir=str(tiny), out=str(out), method="rtn", progress=False)
    assert (out / "mine.txt").read_text() == "keep me"
    quantize_model(model_dir=str(tiny), out=str(out), method="rtn", force=True, progress=False)
    assert not (out / "mine.txt").exists() and (out / REPORT_NAME).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # nothing left beside it


def test_a_nan_weight_is_named_and_leaves_nothing_behind(tmp_path):
    from safetensors.torch import load_file, save_file
    source = _save_tiny(tmp_path / "model")
    tensors = load_file(str(source / "model.safetensors"))
    tensors["model.layers.1.mlp.up_proj.weight"][5, 33] = float("nan")
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.up_proj\.weight: "
                                         r"weight\[5, 33\] = nan.*NVFP4-IN-1"):
        quantize_model(model_dir=str(source), out=str(out), method="rtn", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_linears_whose_input_is_not_a_multiple_of_16_are_kept_and_listed(tmp_path):
    source = _save_tiny(tmp_path / "model", intermediate_size=200)  # down_proj: in = 200
    report = quantize_model(model_dir=str(source), out=str(tmp_path / "out"), method="rtn",
                            progress=False)
    kept = {s["module"]: s["reason"] for s in report.skipped}
    assert set(kept) == {"lm_head", "model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"}
    assert "not a multiple of 16" in kept["model.layers.0.mlp.down_proj"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "model.layers.0.mlp.down_proj" in config["quantization_config"]["ignore"]


def test_quantize_weight_takes_torch_tensors_bit_for_bit():
    import ml_dtypes
    rng = np.random.default_rng(0)
    weight = torch.from_numpy(rng.standard_normal((8, 64)).astype(np.float32)).to(torch.bfloat16)
    h = torch.from_numpy(rng.uniform(0, 1, 64))
    got = quantize_weight(weight, h, method="hscale")
    want = quantize(weight.view(torch.int16).numpy().view(ml_dtypes.bfloat16), h.numpy())
    np.testing.assert_array_equal(got.packed, want.packed)
    np.testing.assert_array_equal(got.scale_bytes, want.scale_bytes)


@pytest.mark.slow
def test_killed_at_random_points_never_leaves_an_output_that_looks_complete(tiny, tmp_path):
    """SIGKILL at random moments of real runs: the output directory is either absent or
    complete (every planned tensor readable, configs and report written). The runs are forked
    from a server that imported the kit once (tests/helpers/runs.py), so every moment of a run
    is its own work: no interpreter start-up or imports inside the window the kills are drawn
    from."""
    from helpers.runs import QuantizeServer
    out = tmp_path / "out"
    rng = random.Random(1234)
    outcomes = {"absent": 0, "complete": 0}
    with QuantizeServer(tiny) as server:
        start = time.perf_counter()
        assert server.wait(server.start(tiny, out)) == 0
        full = time.perf_counter() - start
        assert (out / REPORT_NAME).is_file()
        for attempt in range(12):
            if out.exists():
                import shutil
                shutil.rmtree(out)
            pid = server.start(tiny, out)
            time.sleep(rng.uniform(0.0, full))
            server.kill(pid)
            if not out.exists():
                outcomes["absent"] += 1
                continue
            assert (out / REPORT_NAME).is_file() and (out / "config.json").is_file(), attempt
            written = SafetensorsModel(out)
            for name in written.names():
                written.array(name)  # every tensor readable
            assert len(list(quantized_modules(written, "compressed-tensors"))) == 14
            outcomes["complete"] += 1
    assert sum(outcomes.values()) == 12
    assert outcomes["absent"] > 0, outcomes  # some kills landed inside the runs
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "out"]
    assert all(".partial-" in name for name in leftovers), leftovers  # hidden, never "out"


def compressed_tensors_decode_rule(stored) -> np.ndarray:
    """compressed-tensors 0.20's decompression of one Linear, restated (NVFP4-CKPT-1):
    ``bf16(fp32(q * fp32(e4m3(c) / r)))`` with r the stored reciprocal global scale."""
    import ml_dtypes
    from hscale.reference import E2M1_VALUES, decode_e4m3, unpack_codes
    q = E2M1_VALUES[unpack_codes(stored.packed)].astype(np.float32)
    scale = (decode_e4m3(stored.scale_bytes).astype(np.float32)
             / np.float32(stored.stored_global_scale)).astype(np.float32)
    product = (q * np.repeat(scale, 16, axis=1)).astype(np.float32)
    return product.astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.slow
@pytest.mark.extended  # about 60 CPU s; test_llm_roundtrip loads the decoders' checkpoints so
@pytest.mark.clause("NVFP4-CKPT-1", "NVFP4-GS-4", "HSCALE-CAL-1")
def test_bundled_minilm_checkpoint_loads_with_compressed_tensors(tmp_path):
    """The bundled model, calibrated by hscale calibrate's code path and quantized from its file:
    the stored bytes are the reference's for the s_g the file implies; transformers with
    compressed-tensors loads and decompresses it, every weight equal to the library's decode
    rule as restated above, and the model runs."""
    pytest.importorskip("compressed_tensors")
    from transformers import AutoModel, CompressedTensorsConfig
    from hscale.calibration import heldout_texts
    from hscale.checkpoints import SafetensorsModel as Model
    from hscale.models import minilm_model_dir
    from hscale.models import architecture_linears
    from hscale.quantize import calibrate, model_directory, plan_layers
    from hscale.evaluation.embeddings import embedding_cosines
    request = QuantizeRequest(progress=False)
    source = model_directory(request)
    plans = plan_layers(Model(source), architecture_linears(source), request.ignore)
    h, H, facts = calibrate(source, [p.module for p in plans if p.quantize], request, False)
    hessian = tmp_path / "h.safetensors"
    save_hessians(hessian, h, H, facts)
    out = tmp_path / "minilm-nvfp4"
    quantize_model(out=str(out), pipeline="rtn", method="hscale", backend="torch",
                   hessian=str(hessian), progress=False)
    modules = 0
    for module, stored, want in _stored_and_expected(out, source, "compressed-tensors", h,
                                                      "hscale"):
        np.testing.assert_array_equal(stored.packed, want.packed, err_msg=module)
        np.testing.assert_array_equal(stored.scale_bytes, want.scale_bytes, err_msg=module)
        modules += 1
    assert modules == 37  # 36 encoder Linears and the pooler

    loaded = AutoModel.from_pretrained(out, quantization_config=CompressedTensorsConfig(
        dequantize=True)).float()  # 0.19 keeps the weights bfloat16 in a float32 model
    written = Model(out)
    counts = {"weights": 0, "library != rule": 0, "library != dequantize()": 0,
              "library != bf16(dequantize())": 0}
    import ml_dtypes
    from hscale.reference import dequantize, unpack_codes
    for module, _, _ in _stored_and_expected(out, source, "compressed-tensors", h, "hscale"):
        stored = read_stored_linear(written, "compressed-tensors", module)
        library = loaded.get_submodule(module).weight.detach().float().numpy()
        exact = dequantize(unpack_codes(stored.packed), stored.scale_bytes, stored.global_scale)
        counts["weights"] += library.size
        counts["library != rule"] += int(np.sum(library != compressed_tensors_decode_rule(stored)))
        counts["library != dequantize()"] += int(np.sum(library != exact))
        counts["library != bf16(dequantize())"] += int(np.sum(
            library != exact.astype(ml_dtypes.bfloat16).astype(np.float32)))
    print(f"\ncompressed-tensors decompression of the bundled model: {counts}")
    assert counts["library != rule"] == 0, counts
    cosines = embedding_cosines(minilm_model_dir(), out, heldout_texts())
    print(f"sentence-embedding cosine against fp32 on held-out text: {cosines}")
    assert cosines["dequantize"]["mean"] > 0.95
    assert cosines["compressed_tensors_load"]["mean"] > 0.95


def modelopt_decode_rule(stored) -> np.ndarray:
    """ModelOpt's ``NVFP4QTensor.dequantize`` (0.47, its plain path), restated: the block scale
    ``fp32(e4m3(c) * weight_scale_2)``, then ``fp32(q * block scale)``: two float32 roundings
    where NVFP4-DEQ-1 has one."""
    from hscale.reference import E2M1_VALUES, decode_e4m3, unpack_codes
    q = E2M1_VALUES[unpack_codes(stored.packed)].astype(np.float32)
    block = (decode_e4m3(stored.scale_bytes).astype(np.float32)
             * np.float32(stored.stored_global_scale)).astype(np.float32)
    return (q * np.repeat(block, 16, axis=1)).astype(np.float32)


@pytest.mark.clause("NVFP4-CKPT-2")
@pytest.mark.parametrize("scheme", ["w4a16", "w4a4"])
def test_modelopt_checkpoint_decodes_with_modelopt(tiny, tmp_path, scheme):
    """The ModelOpt checkpoint's tensors (W4A16, and W4A4 with its input scales) through
    ModelOpt's own NVFP4QTensor.dequantize (its code runs on the CPU): equal to the rule
    restated above, and to NVFP4-DEQ-1's dequantize() except where the block scale's float32
    rounding moves the last bit (counted)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qtensor = pytest.importorskip("modelopt.torch.quantization.qtensor.nvfp4_tensor")
    from helpers.llm_families import written
    from hscale.reference import dequantize, unpack_codes
    out = tmp_path / "out"
    # W4A4 calibrates its input scales: a decoder with a tokenizer (tiny has none)
    source = tiny if scheme == "w4a16" else written(tmp_path, "llama")
    quantize_model(model_dir=str(source), out=str(out), method="rtn", format="modelopt",
                   scheme=scheme, progress=False, samples=16)
    written = SafetensorsModel(out)
    quant_algo = json.loads((out / "hf_quant_config.json").read_text())["quantization"][
        "quant_algo"]
    assert quant_algo == {"w4a16": "W4A16_NVFP4", "w4a4": "NVFP4"}[scheme]
    counts = {"weights": 0, "modelopt != rule": 0, "modelopt != dequantize()": 0}
    for module in quantized_modules(written, "modelopt"):
        stored = read_stored_linear(written, "modelopt", module)
        rows, half = stored.packed.shape
        tensor = qtensor.NVFP4QTensor(torch.Size((rows, 2 * half)), torch.float32,
                                      torch.from_numpy(stored.packed))
        theirs = tensor.dequantize(
            torch.float32, scale=torch.from_numpy(stored.scale_bytes).view(torch.float8_e4m3fn),
            double_scale=torch.tensor(float(stored.stored_global_scale)),
            block_sizes={-1: 16}).numpy()
        exact = dequantize(unpack_codes(stored.packed), stored.scale_bytes, stored.global_scale)
        counts["weights"] += theirs.size
        counts["modelopt != rule"] += int(np.sum(theirs != modelopt_decode_rule(stored)))
        counts["modelopt != dequantize()"] += int(np.sum(theirs != exact))
        input_scale = f"{module}.input_scale"
        assert (input_scale in written.names()) == (scheme == "w4a4"), input_scale
    print(f"\nModelOpt decoding of the tiny decoder's {scheme} checkpoint: {counts}")
    assert counts["modelopt != rule"] == 0, counts


def test_rtn_pipeline_quantizes_each_weight_once_and_checks_it_once(tiny, tiny_hessians,
                                                                   tmp_path, monkeypatch):
    """With the rtn pipeline the result's initial bytes are RTN's bytes at the same s_g, so the
    report's errors against RTN are read at them (rounding_quality) instead of quantizing the
    weight a second time;
    the weight's finiteness is checked once (by the backend's validation), not also by the
    global scale's amax and by a second quantization."""
    import hscale.backends
    from hscale.reference import validation
    calls = {"quantize": 0, "finite": 0}
    backend = hscale.backends.get("numpy")
    real_quantize, real_finite = backend.quantize, validation.check_weight_finite

    def counting_quantize(*args, **kwargs):
        calls["quantize"] += 1
        return real_quantize(*args, **kwargs)

    def counting_finite(weight):
        calls["finite"] += 1
        return real_finite(weight)

    monkeypatch.setattr(backend, "quantize", counting_quantize)
    monkeypatch.setattr(hscale.backends, "get", lambda name: backend)
    monkeypatch.setattr(validation, "check_weight_finite", counting_finite)
    report = quantize_model(model_dir=str(tiny), out=str(tmp_path / "once"), pipeline="rtn",
                            method="hscale", hessian=str(tiny_hessians), progress=False)
    layers = len(report.layers)
    assert layers > 0 and calls == {"quantize": layers, "finite": layers}


def test_the_rtn_comparison_is_rtn(tiny):
    """What the report compares with, for each pipeline, is RTN (max-abs init) at the result's
    s_g, bit for bit, whether encoded from the result's initial bytes or quantized."""
    from hscale.backends import get
    from hscale.quantize.layer import rtn_counterpart
    source = SafetensorsModel(tiny)
    rng = np.random.default_rng(5)
    for name in [n for n in source.names() if n.endswith("proj.weight")][:4]:
        weight = source.array(name)
        h = rng.uniform(0, 4, weight.shape[1])
        s_g = compute_global_scale(float(np.max(np.abs(weight))))
        expected = quantize(weight, method="rtn", global_scale=s_g)
        for pipeline, init in (("rtn", "maxabs"), ("4over6", "4over6")):
            result = quantize(weight, h, method="hscale", init=init, global_scale=s_g)
            got = rtn_counterpart(weight, result, pipeline, get("numpy"))
            assert np.array_equal(got.codes, expected.codes), (name, pipeline)
            assert np.array_equal(got.scale_bytes, expected.scale_bytes), (name, pipeline)


def test_a_model_without_tokenizer_files_is_refused_when_calibration_needs_one(tiny, tmp_path):
    """transformers builds a tokenizer with an empty vocabulary from config.json alone: every
    text would be zero tokens, and the forward fail on an empty batch. Said in one line."""
    with pytest.raises(ValueError, match="no tokenizer to calibrate with .*config.json alone"):
        quantize_model(model_dir=str(tiny), out=str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()
    result = hscale_here(["quantize", tiny, "--out", tmp_path / "out", "--quiet"])
    assert result.returncode == 2, result.stderr + result.trace
    lines = [line for line in result.stderr.splitlines()
             if line.startswith("hscale quantize:")]
    assert len(lines) == 1 and "no tokenizer" in lines[0] and "Traceback" not in result.stderr
