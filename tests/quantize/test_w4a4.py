"""``hscale quantize --scheme w4a4`` (HSCALE-CAL-2, NVFP4-CKPT-4): activation scales calibrated
from each Linear's input amax, written in both layouts, checked and converted.

Golden values come from another route: the amax by forward hooks of our own on the
transformers model (padding dropped with the attention mask), the scale chain with Fraction."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers.cli import hscale_here  # noqa: E402
from helpers.paths import REPO_ROOT  # noqa: E402
from helpers.checkpoint_edits import planted  # noqa: E402
from helpers.llm_families import written  # noqa: E402

from hscale.check import check_checkpoint  # noqa: E402
from hscale.checkpoints import SafetensorsModel, detect_format  # noqa: E402
from hscale.checkpoints.convert import convert_checkpoint  # noqa: E402
from hscale.quantize import format_summary, quantize_model  # noqa: E402

FORMATS = ("compressed-tensors", "modelopt")
SAMPLES, SEQ_LEN = 8, 256  # the bundled texts are shorter than 256 tokens: padding


def fp32_nearest(value: Fraction) -> np.float32:
    """fp32 RNE of a positive rational in the normal range, found by comparing neighbours."""
    guess = np.float32(float(value))
    candidates = [guess, np.nextafter(guess, np.float32(0)), np.nextafter(guess, np.float32(np.inf))]
    best = min(candidates, key=lambda c: (abs(Fraction(float(c)) - value),
                                          int(np.array(c).view(np.uint32)) & 1))
    return np.float32(best)


def expected_multiplier(amax: float) -> np.float32:
    """HSCALE-CAL-2 by Fraction: a0 = fp32(amax / 2688) (raised to 2^-126, NVFP4-GS-2);
    a = fp32(1 / fp32(1 / a0))."""
    if amax == 0:
        return np.float32(1.0)  # NVFP4-GS-2
    exact = Fraction(amax) / 2688
    a0 = np.float32(2.0 ** -126) if exact < Fraction(2) ** -126 else fp32_nearest(exact)
    g = fp32_nearest(1 / Fraction(float(a0)))
    return fp32_nearest(1 / Fraction(float(g)))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(source, {format: checkpoint}, {format: report}) of the tiny Llama and Qwen3-MoE,
    W4A4, RTN weights."""
    root = tmp_path_factory.mktemp("w4a4")
    out = {}
    for family in ("llama", "qwen3_moe"):
        source = written(root, family)
        checkpoints, reports = {}, {}
        for fmt in FORMATS:
            target = root / f"{family}-{fmt}"
            reports[fmt] = quantize_model(model_dir=str(source), out=str(target), format=fmt,
                                          scheme="w4a4", pipeline="rtn", method="rtn",
                                          samples=SAMPLES, seq_len=SEQ_LEN, progress=False)
            checkpoints[fmt] = target
        out[family] = (source, checkpoints, reports)
    return out


def stored_inputs(checkpoint: Path) -> dict:
    layout = detect_format(checkpoint).layout
    model = SafetensorsModel(checkpoint)
    return {m: np.float32(model.array(layout.tensor_names(m)["input"]).reshape(-1)[0])
            for m in layout.module_tensors(model)}


@pytest.mark.clause("HSCALE-CAL-2")
def test_the_multiplier_reads_back_through_its_reciprocal_for_every_significand():
    """fp32(1 / fp32(1 / a)) == a for a = fp32(1 / fp32(1 / a0)), every a0 in [1, 2) (numpy's
    float32 division is IEEE RNE); and activation_multiplier against the Fraction chain."""
    from hscale.quantize.activations import activation_multiplier
    a0 = (np.arange(1 << 23, dtype=np.uint32) | np.uint32(127 << 23)).view(np.float32)
    one = np.float32(1)
    a = one / (one / a0)
    assert np.array_equal(one / (one / a), a)
    moved = np.count_nonzero(a != a0)
    assert 0.15 < moved / a0.size < 0.2  # NVFP4-GS-4's ~17.2%
    rng = np.random.default_rng(0)
    for amax in [0.0, 1e-40, 2688.0, 3.0] + list(rng.lognormal(0, 3, 200)):
        assert activation_multiplier(float(np.float32(amax))) == expected_multiplier(
            float(np.float32(amax))), amax


def hooked_amax(source: Path, modules, batches) -> dict:
    """max |x| of each Linear's input over the non-padding tokens, by our own hooks on the
    whole transformers model."""
    with torch.no_grad():
        model = transformers.AutoModelForCausalLM.from_pretrained(source,
                                                                  dtype=torch.float32).eval()
    amax, handles, mask = {}, [], {}
    for name in modules:
        def hook(module, args, name=name):
            x = args[0][mask["m"]]
            amax[name] = max(amax.get(name, 0.0), float(x.abs().max()))
        handles.append(model.get_submodule(name).register_forward_pre_hook(hook))
    with torch.no_grad():
        for batch in batches:
            mask["m"] = batch["attention_mask"].bool()
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    for handle in handles:
        handle.remove()
    return amax


@pytest.mark.clause("HSCALE-CAL-2", "NVFP4-CKPT-4")
def test_dense_decoder_scales_are_the_calibrated_amax_in_each_layouts_convention(made):
    from hscale.quantize import QuantizeRequest
    from hscale.quantize.calibrate import calibration_batches
    source, checkpoints, reports = made["llama"]
    batches, _ = calibration_batches(source, QuantizeRequest(samples=SAMPLES, seq_len=SEQ_LEN))
    assert any(bool((b["attention_mask"] == 0).any()) for b in batches)  # padding is present
    entries = {e["module"]: e for e in reports["compressed-tensors"].layers}
    direct = hooked_amax(source, list(entries), batches)
    ct, mo = stored_inputs(checkpoints["compressed-tensors"]), stored_inputs(checkpoints["modelopt"])
    assert set(ct) == set(mo) == set(entries) and len(entries) == 14
    for module, entry in entries.items():
        members = entry["fused_with"] or [module]
        want_amax = max(direct[m] for m in members)  # HSCALE-CAL-2: the set's largest
        assert entry["input_amax"] == pytest.approx(want_amax, rel=1e-5), module
        a = expected_multiplier(entry["input_amax"])  # the chain, exactly
        assert mo[module] == a, module  # ModelOpt: a itself
        assert ct[module] == fp32_nearest(1 / Fraction(float(a))), module  # CT: g = fp32(1/a)
    for checkpoint in checkpoints.values():
        config = detect_format(checkpoint)
        assert config.layout.activations
    quant = json.loads((checkpoints["compressed-tensors"] / "config.json").read_text())[
        "quantization_config"]["config_groups"]["group_0"]["input_activations"]
    assert {k: quant[k] for k in ("num_bits", "type", "strategy", "group_size", "symmetric",
                                  "dynamic")} == {"num_bits": 4, "type": "float",
                                                  "strategy": "tensor_group", "group_size": 16,
                                                  "symmetric": True, "dynamic": "local"}
    hf = json.loads((checkpoints["modelopt"] / "hf_quant_config.json").read_text())
    assert hf["quantization"]["quant_algo"] == "NVFP4"
    model = SafetensorsModel(checkpoints["modelopt"])
    info = model.info["model.layers.0.self_attn.q_proj.input_scale"]
    assert (info.dtype, info.shape) == ("F32", ())
    info = SafetensorsModel(checkpoints["compressed-tensors"]).info[
        "model.layers.0.self_attn.q_proj.input_global_scale"]
    assert (info.dtype, info.shape) == ("F32", (1,))


@pytest.mark.clause("HSCALE-CAL-2", "NVFP4-CKPT-4")
def test_moe_experts_each_store_a_scale_equal_for_gate_and_up(made):
    source, checkpoints, reports = made["qwen3_moe"]
    for fmt in FORMATS:
        stored = stored_inputs(checkpoints[fmt])
        experts = [m for m in stored if ".experts." in m]
        assert len(experts) == 48
        for module in experts:
            if module.endswith("gate_proj"):
                assert stored[module] == stored[module[:-len("gate_proj")] + "up_proj"]
            value = float(stored[module])
            assert np.isfinite(value) and value > 0
        layers = reports[fmt].layers
        unrouted = [e for e in layers if e.get("expert") and "never routed" in e.get("fallback", "")]
        # every unrouted expert's amax is said as a fallback, by name
        for entry in unrouted:
            assert "amax" in entry["fallback"] and entry["input_amax"] > 0


@pytest.mark.clause("NVFP4-CKPT-4")
@pytest.mark.parametrize("family", ["llama", "qwen3_moe"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_w4a4_checkpoints_conform(made, family, fmt):
    report = check_checkpoint(made[family][1][fmt])
    assert report.conforms, [p.render() for p in report.all_problems()]


@pytest.mark.clause("NVFP4-CKPT-4")
def test_the_compressed_tensors_w4a4_decoder_loads_in_transformers(made):
    pytest.importorskip("compressed_tensors")
    import warnings
    from hscale.models.loading import quiet_transformers
    source, checkpoints, _ = made["llama"]
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = transformers.AutoModelForCausalLM.from_pretrained(
            checkpoints["compressed-tensors"],
            quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    ids = torch.randint(3, 259, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.isfinite(loaded.float()(ids).logits).all()


@pytest.mark.clause("NVFP4-CKPT-4")
@pytest.mark.extended  # about 45 CPU s; the tiny decoder's W4A4 tests above keep the clause
def test_minilm_w4a4_both_layouts_conform_and_round_trip(tmp_path):
    """The bundled encoder (the whole-model path): W4A4 in both layouts, conforming; the
    compressed-tensors one through ModelOpt and back is byte-identical."""
    out = {}
    for fmt in FORMATS:
        out[fmt] = tmp_path / fmt
        report = quantize_model(out=str(out[fmt]), format=fmt, scheme="w4a4", pipeline="rtn",
                                method="rtn", samples=SAMPLES, seq_len=SEQ_LEN, progress=False)
        assert all(e["input_scale"] > 0 for e in report.layers) and len(report.layers) == 37
        summary = format_summary(report)  # says W4A4, and what its embedding cosine is not
        assert f"format {fmt}, W4A4 (" in summary.splitlines()[0]
        cosine = next(line for line in summary.splitlines() if "sentence embeddings" in line)
        assert "the W4A16 view, not the engine's run-time activation quantization" in cosine
        check = check_checkpoint(out[fmt])
        assert check.conforms, [p.render() for p in check.all_problems()]
    assert {m: float(1 / Fraction(float(v))) for m, v in
            stored_inputs(out["compressed-tensors"]).items()} == pytest.approx(
        {m: float(v) for m, v in stored_inputs(out["modelopt"]).items()}, rel=1e-6)
    convert_checkpoint(out["compressed-tensors"], tmp_path / "mo", to="modelopt")
    convert_checkpoint(tmp_path / "mo", tmp_path / "ct", to="compressed-tensors")
    assert (tmp_path / "ct" / "model.safetensors").read_bytes() == (
        out["compressed-tensors"] / "model.safetensors").read_bytes()


@pytest.mark.clause("NVFP4-CKPT-4")
@pytest.mark.parametrize("family", ["llama", "qwen3_moe"])
def test_convert_round_trips_are_byte_identical(made, family, tmp_path):
    """compressed-tensors -> ModelOpt -> compressed-tensors gives back every byte; ModelOpt ->
    compressed-tensors carries each activation multiplier exactly (its weights may need
    --requantize where s_g has no fp32 reciprocal, NVFP4-GS-4, as for W4A16)."""
    _, checkpoints, _ = made[family]
    ct = checkpoints["compressed-tensors"]
    convert_checkpoint(ct, tmp_path / "mo", to="modelopt")
    assert check_checkpoint(tmp_path / "mo").conforms
    assert {m: float(v) for m, v in stored_inputs(tmp_path / "mo").items()} == {
        m: float(np.float32(1) / v) for m, v in stored_inputs(ct).items()}
    convert_checkpoint(tmp_path / "mo", tmp_path / "back", to="compressed-tensors")
    assert (tmp_path / "back" / "model.safetensors").read_bytes() == (
        ct / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "back" / "config.json").read_text()) == json.loads(
        (ct / "config.json").read_text())
    mo = checkpoints["modelopt"]
    convert_checkpoint(mo, tmp_path / "ct", to="compressed-tensors", requantize=True)
    assert check_checkpoint(tmp_path / "ct").conforms
    assert {m: np.float32(1) / v for m, v in stored_inputs(tmp_path / "ct").items()} == \
        stored_inputs(mo)


def _findings(report) -> set:
    return {(p.tensor, p.finding.clause) for p in report.all_problems()}


Q = "model.layers.0.self_attn.q_proj"
EXPERT = "model.layers.1.mlp.experts.3.up_proj"


@pytest.mark.clause("NVFP4-CKPT-4")
@pytest.mark.parametrize("fmt", FORMATS)
def test_planted_defects_are_named_by_tensor(made, fmt, tmp_path):
    suffix = ".input_global_scale" if fmt == "compressed-tensors" else ".input_scale"
    dense, moe = made["llama"][1][fmt], made["qwen3_moe"][1][fmt]
    k = "model.layers.0.self_attn.k_proj" + suffix

    def unequal(t):
        t[k] = t[k] * 1.5
    report = check_checkpoint(planted(dense, tmp_path / "unequal", unequal))
    assert not report.conforms
    assert ("model.layers.0.self_attn.{q_proj,k_proj,v_proj}" + suffix,
            "NVFP4-CKPT-4") in _findings(report), _findings(report)

    report = check_checkpoint(planted(moe, tmp_path / "missing",
                                       lambda t: t.pop(EXPERT + suffix)))
    assert (EXPERT + suffix, "NVFP4-CKPT-4") in _findings(report), _findings(report)

    for label, value in (("nan", float("nan")), ("negative", -0.5), ("zero", 0.0)):
        def bad(t, value=value):
            t[Q + suffix] = torch.full_like(t[Q + suffix], value)
        report = check_checkpoint(planted(dense, tmp_path / label, bad))
        assert (Q + suffix, "NVFP4-CKPT-4") in _findings(report), (label, _findings(report))
        assert not report.conforms

    def other_convention(t):  # a ModelOpt value in a compressed-tensors file, or the reverse
        t[Q + suffix] = 1 / t[Q + suffix]
    report = check_checkpoint(planted(dense, tmp_path / "convention", other_convention))
    found = [p for p in report.all_problems() if p.tensor == Q + suffix]
    assert found and "other convention" in found[0].finding.text, _findings(report)


@pytest.mark.clause("HSCALE-CAL-2")
def test_cli_errors_are_one_line_with_exit_code_2(tmp_path):
    h = tmp_path / "h.safetensors"
    h.write_bytes(b"")
    result = hscale_here(["quantize", "--scheme", "w4a4", "--hessian", h, "--out",
                          tmp_path / "o"])
    assert result.returncode == 2, result.stderr + result.trace
    lines = [line for line in result.stderr.splitlines() if "hscale" in line or "--" in line]
    assert "Traceback" not in result.stderr and lines, result.stderr
    result = hscale_here(["quantize", "--scheme", "w8a8"])
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.clause("HSCALE-CAL-2")
def test_a_linear_no_token_reached_is_an_error_naming_it():
    from hscale.quantize.activations import set_input_amax
    with pytest.raises(ValueError, match=r"lm_head: no calibration token reached.*HSCALE-CAL-2"):
        set_input_amax(("lm_head",), {}, "lm_head")
    assert set_input_amax(("q", "k", "v"), {"q": 1.0, "k": 3.0, "v": 2.0}, "q") == 3.0


@pytest.mark.clause("NVFP4-ACT-4")
def test_emulated_w4a4_is_close_to_w4a16_on_the_tiny_decoder(made):
    """The figures docs/checkpoints.md records (tools/w4a4_emulation.py) hold their order:
    W4A4 is further from fp32 than W4A16, and still close."""
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    from w4a4_emulation import decoder_figures
    source, checkpoints, _ = made["llama"]
    w4a16 = Path(str(checkpoints["compressed-tensors"]) + "-w4a16")
    if not w4a16.exists():
        quantize_model(model_dir=str(source), out=str(w4a16), pipeline="rtn", method="rtn",
                       progress=False)
    figures = decoder_figures(source, w4a16, checkpoints["compressed-tensors"])
    print(f"\nW4A4 emulation, tiny llama: {figures}")
    assert figures["w4a16"]["logit_cosine"] > 0.9
    assert 0.75 < figures["w4a4"]["logit_cosine"] < figures["w4a16"]["logit_cosine"]


def test_modelopt_quantizes_activations_with_the_stored_scale_as_the_profile_does(made):
    """ModelOpt's own CPU quantizer (``NVFP4QTensor.quantize``, the fake-quant path its
    calibration runs) on real Linear inputs with the checkpoint's ``input_scale`` a, against
    the engines' profile (NVFP4-ACT-1..3 with g = fp32(1/a)). ModelOpt divides where the
    profile multiplies by reciprocals, so the two may round differently at a boundary: every
    difference must be one rung of the E4M3 ladder or one E2M1 step, counted and shown in hex."""
    import warnings
    import transformers
    from helpers.llm_families import batch
    from hscale.reference import E2M1_VALUES, unpack_codes
    from hscale.reference.activations import quantize_activations
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qtensor = pytest.importorskip("modelopt.torch.quantization.qtensor.nvfp4_tensor")
    source, checkpoints, _ = made["llama"]
    scales = stored_inputs(checkpoints["modelopt"])
    model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    inputs, hooks = {}, []
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"):
        hooks.append(model.get_submodule(name).register_forward_pre_hook(
            lambda m, args, name=name: inputs.__setitem__(name, args[0].detach())))
    tokens = batch(source, count=4)
    with torch.no_grad():
        model(**tokens)
    for hook in hooks:
        hook.remove()
    counts = {"groups": 0, "scale bytes differ": 0, "elements": 0, "codes differ": 0}
    shown = []
    for name, x in inputs.items():
        x = x[tokens["attention_mask"].bool()].float()  # the real tokens, (tokens, n)
        a = scales[name]
        ours = quantize_activations(x.numpy(), np.float32(1) / a)
        packed, block, _ = qtensor.NVFP4QTensor.quantize(x.clone(), 16,
                                                         weights_scaling_factor_2=torch.tensor(a))
        their_bytes = block.view(torch.uint8).numpy().reshape(ours.scale_bytes.shape)
        their_codes = unpack_codes(packed._quantized_data.numpy()).reshape(ours.codes.shape)
        step = np.abs(their_bytes.astype(int) - ours.scale_bytes.astype(int))
        assert step.max() <= 1, name
        same = np.repeat(step == 0, 16, axis=1)
        ours_v, theirs_v = E2M1_VALUES[ours.codes], E2M1_VALUES[their_codes]
        differ = same & (ours_v != theirs_v)
        # one E2M1 step: adjacent magnitudes, the same sign
        rank = {v: i for i, v in enumerate(sorted(set(np.abs(E2M1_VALUES))))}
        for i, j in zip(*np.nonzero(differ)):
            assert np.sign(ours_v[i, j]) * np.sign(theirs_v[i, j]) >= 0, (name, i, j)
            assert abs(rank[abs(ours_v[i, j])] - rank[abs(theirs_v[i, j])]) == 1, (name, i, j)
            if len(shown) < 2:
                shown.append(f"{name}[{i},{j}] x={float(x[i, j]):.9g} "
                             f"({np.float32(x[i, j]).view(np.uint32):#010x}): profile code "
                             f"{ours.codes[i, j]:#x}, ModelOpt {their_codes[i, j]:#x}")
        counts["groups"] += step.size
        counts["scale bytes differ"] += int(np.sum(step))
        counts["elements"] += int(np.sum(same))
        counts["codes differ"] += int(np.sum(differ))
    print(f"\nModelOpt NVFP4QTensor.quantize vs NVFP4-ACT with the stored input_scale: {counts}; "
          + "; ".join(shown))
    assert counts["groups"] > 0 and counts["elements"] > 0
