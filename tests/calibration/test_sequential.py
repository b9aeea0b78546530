"""Block-by-block calibration, checked against independent routes on the six families:

* a decoder run one block at a time from its safetensors gives transformers' own
  ``output_hidden_states`` bit for bit (right-padded batches, sliding windows, mixed layer types,
  tied heads, MoE);
* its h is the whole-model ``HessianDiagCollector``'s bit for bit, its H equal to rounding;
* an expert's h is that of the tokens the router sends it, recomputed here from the router's
  own weights and the expert's 2-D matrices read from the file; an expert never routed to gets
  the stated fallback; experts that are ``nn.Linear`` modules get theirs from their own hooks.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers.llm_families import DENSE, FAMILIES, MOE, batch, written  # noqa: E402

from hscale.checkpoints import SafetensorsModel  # noqa: E402
from hscale.models.decoder import SequentialDecoder  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def _reference(directory, inputs, dtype="float32"):
    from hscale.models.loading import quiet_transformers
    with quiet_transformers(), torch.no_grad():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, dtype=getattr(torch, dtype)).eval()
        return model, model(**inputs, output_hidden_states=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # --calibration-dtype
@pytest.mark.parametrize("family", FAMILIES)
def test_block_by_block_is_the_models_own_forward_bit_for_bit(root, family, dtype):
    directory = written(root, family)
    inputs = batch(directory)
    assert not bool(inputs["attention_mask"].all()), "the batch must be padded"
    _, reference = _reference(directory, inputs, dtype)
    decoder = SequentialDecoder(directory, SafetensorsModel(directory), dtype=dtype)
    hidden, kwargs = decoder.block_inputs(inputs["input_ids"], inputs["attention_mask"])
    assert hidden.dtype == getattr(torch, dtype)
    assert torch.equal(hidden, reference.hidden_states[0])
    with torch.no_grad():
        for index in range(decoder.count):
            hidden = decoder.materialize(index)(hidden, **kwargs[index])
            decoder.release(index)
            if index < decoder.count - 1:
                assert torch.equal(hidden, reference.hidden_states[index + 1]), index
    assert torch.equal(decoder.final_norm(hidden), reference.hidden_states[-1])
    assert all(p.device.type == "meta" for p in decoder.base.layers.parameters())


@pytest.mark.parametrize("overrides", [{"sliding_window": 8}, {"layer_types": [
    "sliding_attention", "full_attention"], "sliding_window": 8, "use_sliding_window": True}])
def test_sliding_windows_and_layer_types_are_the_models_own(root, overrides):
    family = "mistral" if "layer_types" not in overrides else "qwen2"
    directory = written(root, family, **overrides)
    inputs = batch(directory)
    _, reference = _reference(directory, inputs)
    decoder = SequentialDecoder(directory, SafetensorsModel(directory))
    hidden, kwargs = decoder.block_inputs(inputs["input_ids"], inputs["attention_mask"])
    with torch.no_grad():
        for index in range(decoder.count):
            hidden = decoder.materialize(index)(hidden, **kwargs[index])
            decoder.release(index)
    assert torch.equal(decoder.final_norm(hidden), reference.hidden_states[-1])


#: The default tier's (family, dtype) pairs: a family without and one with a tied head, one
#: in each calibration dtype; every other pair (about 12 CPU s each) is in the extended tier.
DEFAULT_PAIRS = {("llama", "float32"), ("qwen2", "bfloat16")}


@pytest.mark.parametrize("family,dtype", [
    pytest.param(family, dtype, marks=[] if (family, dtype) in DEFAULT_PAIRS
                 else [pytest.mark.extended])
    for dtype in ("float32", "bfloat16") for family in DENSE])
def test_sequential_h_is_the_whole_model_collectors(root, family, tmp_path, dtype):
    """hscale calibrate block by block against the whole-model HessianDiagCollector (the
    ``--sequential never`` path), in either calibration dtype: h identical, H equal to float64
    rounding."""
    from safetensors.numpy import load_file
    from hscale.quantize import QuantizeRequest, calibrate_to_file
    directory = written(root, family)
    files = {}
    for mode in ("auto", "never"):
        request = QuantizeRequest(model_dir=str(directory), progress=False, sequential=mode,
                                  ignore=(), batch_size=8, samples=40, calibration_dtype=dtype)
        calibrate_to_file(request, tmp_path / f"{mode}.safetensors", full=True, force=False)
        files[mode] = load_file(str(tmp_path / f"{mode}.safetensors"))
    assert set(files["auto"]) == set(files["never"])
    h_names = [k for k in files["auto"] if k.startswith("h.")]
    assert len(h_names) == (14 if family == "qwen2" else 15)  # the tied head is not stored
    for name in h_names:
        np.testing.assert_array_equal(files["auto"][name], files["never"][name], err_msg=name)
        H = name.replace("h.", "H.", 1)
        np.testing.assert_allclose(files["auto"][H], files["never"][H], rtol=1e-12,
                                   atol=1e-12 * float(np.max(files["never"][H])), err_msg=H)


def _moe_inputs(model, inputs):
    """The input of every MoE block's experts (its router's input), captured from the full
    model's own forward."""
    captured = {}
    hooks = []
    for name, module in model.named_modules():
        if hasattr(module, "gate") and hasattr(module, "experts"):
            hooks.append(module.register_forward_pre_hook(
                lambda m, args, name=name: captured.__setitem__(name, args[0].detach())))
    with torch.no_grad():
        model(**inputs)
    for hook in hooks:
        hook.remove()
    return captured


@pytest.mark.parametrize("family", MOE)
def test_an_experts_h_is_that_of_the_tokens_routed_to_it(root, family, tmp_path):
    """Independent route: the router's top-k recomputed from its weight (softmax, top-k) on the
    block input the full model computes; each expert's gate/up h the sum of x^2 over its
    tokens, its down h that of silu(x W_gate^T) * (x W_up^T) with the 2-D matrices read from the
    checkpoint file, all in float64."""
    import torch.nn.functional as F
    from safetensors.numpy import load_file
    from hscale.models.experts import expert_layout
    from hscale.quantize import QuantizeRequest, calibrate_to_file
    directory = written(root, family)
    request = QuantizeRequest(model_dir=str(directory), progress=False, batch_size=6, samples=6,
                              seq_len=256)
    calibrate_to_file(request, tmp_path / "h.safetensors", full=False, force=False)
    got = load_file(str(tmp_path / "h.safetensors"))
    inputs = batch(directory)
    model, _ = _reference(directory, inputs)
    source = SafetensorsModel(directory)
    layout = expert_layout(model.config.model_type)
    mask = inputs["attention_mask"].reshape(-1).bool()
    checked = 0
    for name, x32 in _moe_inputs(model, inputs).items():
        disk = layout.to_checkpoint("." + name + ".")[1:-1]
        x32 = x32.reshape(-1, x32.shape[-1])[mask]
        x = x32.double()
        router = source.tensor(f"{disk}.gate.weight", torch.float32)
        top = torch.topk(F.softmax(F.linear(x32, router), dtype=torch.float, dim=-1),
                         model.config.num_experts_per_tok, dim=-1).indices
        for e in range(router.shape[0]):
            rows = x[(top == e).any(dim=-1)]
            gate = layout.expert_module(name + ".experts", e, "gate")
            up = layout.expert_module(name + ".experts", e, "up")
            down = layout.expert_module(name + ".experts", e, "down")
            if rows.shape[0] == 0:
                continue
            w_gate = torch.from_numpy(source.array(f"{gate}.weight").astype(np.float64))
            w_up = torch.from_numpy(source.array(f"{up}.weight").astype(np.float64))
            inter = F.silu(rows @ w_gate.T) * (rows @ w_up.T)
            want = {gate: (rows * rows).sum(0), up: (rows * rows).sum(0),
                    down: (inter * inter).sum(0)}
            for module, h in want.items():
                np.testing.assert_allclose(got[f"h.{module}"], h.numpy(), rtol=2e-5,
                                           err_msg=module)
                checked += 1
    assert checked >= 3 * 4


def test_an_expert_never_routed_to_gets_the_stated_fallback(root, tmp_path):
    """Calibrated on one text of 3 tokens, top-2 of 8 experts: at most 6 experts per block see
    a token. The others are named in the report; their gate/up h is that of every token of the
    block (the router's input, captured from the full model), their down h that of every token
    through them."""
    from safetensors.numpy import load_file
    from hscale.quantize import QuantizeRequest, calibrate_to_file, format_summary, quantize_model
    directory = written(root, "qwen3_moe")
    data = tmp_path / "one.txt"
    data.write_text("Hi\n")
    options = dict(model_dir=str(directory), progress=False, calibration_text=str(data),
                   seq_len=3)
    report = quantize_model(out=str(tmp_path / "out"), **options)
    never = [layer for layer in report.layers if layer.get("fallback")]
    assert never and report.summary["never_routed"] == len(never) // 3 >= 2 * (8 - 6)
    assert all("never routed to" in layer["fallback"] and layer["tokens"] == 0
               for layer in never)
    assert report.summary["experts"] == 16
    text = format_summary(report)
    for layer in never:
        if layer["module"].endswith("gate_proj"):
            assert f"expert {layer['module'].rsplit('.', 1)[0]}: never routed to" in text
    calibrate_to_file(QuantizeRequest(**options), tmp_path / "h.safetensors", full=False,
                      force=False)
    h = load_file(str(tmp_path / "h.safetensors"))
    ids = transformers.AutoTokenizer.from_pretrained(directory)(
        ["Hi"], truncation=True, max_length=3, return_tensors="pt")["input_ids"]
    model, _ = _reference(directory, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    for name, x in _moe_inputs(model, {"input_ids": ids}).items():
        x = x.reshape(-1, x.shape[-1]).double()
        for layer in never:
            if layer["module"].startswith(name + ".experts.") and \
                    layer["module"].endswith("gate_proj"):
                np.testing.assert_allclose(h[f"h.{layer['module']}"], (x * x).sum(0).numpy(),
                                           rtol=1e-12)


def test_experts_that_are_linear_modules_get_h_from_their_routed_tokens():
    """A block whose experts are nn.Linear modules (older layouts, other libraries): their own
    pre-hooks see exactly the tokens routed to them."""
    from hscale.calibration.blocks import BlockStatistics
    from hscale.models.experts import LAYOUTS

    class Expert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = torch.nn.Linear(16, 32), torch.nn.Linear(16, 32)
            self.down_proj = torch.nn.Linear(32, 16)

        def forward(self, x):
            return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = torch.nn.ModuleList([Expert() for _ in range(4)])

        def forward(self, x):
            flat = x.reshape(-1, 16)
            choice = flat[:, 0].abs().mul(10).long() % 3  # expert 3 never chosen
            out = torch.zeros_like(flat)
            for e, expert in enumerate(self.experts):
                rows = choice == e
                if rows.any():
                    out[rows] = expert(flat[rows])
            return out.reshape(x.shape)

    torch.manual_seed(0)
    block = Block().eval()
    x = torch.randn(2, 10, 16)
    stats = BlockStatistics(block, lambda name: name, LAYOUTS["qwen2_moe"])
    with torch.no_grad(), stats:
        stats.batch(0, None)
        block(x)
    stats.reduce()
    result = stats.result()
    h, tokens = result.h, result.tokens
    flat = x.reshape(-1, 16).double()
    choice = flat[:, 0].abs().mul(10).long() % 3
    for e in range(3):
        rows = flat[choice == e]
        np.testing.assert_array_equal(h[f"experts.{e}.gate_proj"], h[f"experts.{e}.up_proj"])
        np.testing.assert_allclose(h[f"experts.{e}.gate_proj"], (rows * rows).sum(0).numpy(),
                                   rtol=1e-12)
        assert tokens[f"experts.{e}.down_proj"] == rows.shape[0]
    assert "experts.3.gate_proj" not in h  # never ran: quantize_layer's fallback (h = 1)


@pytest.mark.extended  # about 17 CPU s; the qwen2 bfloat16 pair above keeps the dtype's path
def test_a_bfloat16_calibration_is_said_and_close_to_float32s(root, tmp_path):
    """``--calibration-dtype bfloat16``: the report says so, and h is the bfloat16 model's: not
    float32's bits, within bfloat16's precision of them in every Linear."""
    from safetensors.numpy import load_file
    from hscale.quantize import QuantizeRequest, calibrate_to_file, quantize_model
    directory = written(root, "llama")
    h = {}
    for dtype in ("float32", "bfloat16"):
        request = QuantizeRequest(model_dir=str(directory), progress=False, ignore=(),
                                  batch_size=8, samples=40, calibration_dtype=dtype)
        calibrate_to_file(request, tmp_path / f"{dtype}.safetensors", full=False, force=False)
        h[dtype] = load_file(str(tmp_path / f"{dtype}.safetensors"))
    names = [k for k in h["float32"] if k.startswith("h.")]
    assert names and set(h["float32"]) == set(h["bfloat16"])
    assert any(not np.array_equal(h["float32"][k], h["bfloat16"][k]) for k in names)
    for name in names:
        relative = np.sum(np.abs(h["bfloat16"][name] - h["float32"][name])) / np.sum(
            h["float32"][name])
        assert relative < 0.05, (name, relative)
    report = quantize_model(QuantizeRequest(model_dir=str(directory), out=str(tmp_path / "q"),
                                            progress=False, batch_size=8, samples=40,
                                            calibration_dtype="bfloat16"))
    assert report.calibration["dtype"] == "bfloat16"
