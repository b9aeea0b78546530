"""``hscale convert`` between the compressed-tensors and ModelOpt layouts (NVFP4-CKPT-1, -2):
a round trip gives back every tensor byte for byte and the decoded weights bit for bit; a fused
set with different global scales is reconciled only where rescaling the scale bytes is exact,
else refused with the layers named (or requantized on request, and reported); a multiplier no
fp32 reciprocal reads back as (NVFP4-GS-4) is refused the same way. The decoded weights are
compared through ml_dtypes' float8_e4m3fn and the E2M1 table of the spec, not the reference's
decoder, and "reads back" is checked by fp32 division."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.checkpoint_edits import ATTENTION, planted, scale_bytes_of, set_scale_bytes  # noqa: E402
from helpers.cli import hscale_here  # noqa: E402
from hscale.check import check_checkpoint  # noqa: E402
from hscale.checkpoints import CheckpointError, SafetensorsModel  # noqa: E402
from hscale.checkpoints.convert import convert_checkpoint  # noqa: E402

# NVFP4-E2M1-1: the value of each 4-bit code.
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
NAMES = {"compressed-tensors": (".weight_packed", ".weight_scale", ".weight_global_scale"),
         "modelopt": (".weight", ".weight_scale", ".weight_scale_2")}


def tensors_of(directory: Path) -> dict:
    """name -> (safetensors dtype, shape, bytes) of every tensor of a checkpoint."""
    model = SafetensorsModel(directory)
    return {name: (info.dtype, info.shape, model.array(name).tobytes())
            for name, info in model.info.items()}


def decoded(directory: Path, fmt: str) -> dict:
    """module -> its decoded weights in float64 (exact products of three exact factors)."""
    model = SafetensorsModel(directory)
    packed_suffix, scale_suffix, global_suffix = NAMES[fmt]
    out = {}
    for name in model.info:
        if not name.endswith(global_suffix):
            continue
        module = name[: -len(global_suffix)]
        packed = model.array(module + packed_suffix)
        codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
        scales = model.array(module + scale_suffix).view(ml_dtypes.float8_e4m3fn)
        stored = np.float32(model.array(name).reshape(-1)[0])
        global_scale = np.float32(1) / stored if fmt == "compressed-tensors" else stored
        per_element = np.repeat(scales.astype(np.float64), 16, axis=1)
        out[module] = E2M1[codes] * per_element * float(global_scale)
    return out


def test_round_trips_give_back_every_tensor_and_every_decoded_weight(checkpoints, tmp_path):
    for start, other in (("compressed-tensors", "modelopt"), ("modelopt", "compressed-tensors")):
        there = tmp_path / f"{start}-to-{other}"
        back = tmp_path / f"{start}-and-back"
        report = convert_checkpoint(checkpoints[start], there, to=other)
        assert [layer.how for layer in report.layers] == ["copied"] * 14
        convert_checkpoint(there, back, to=start)
        assert tensors_of(back) == tensors_of(checkpoints[start]), start
        source_decoded = decoded(checkpoints[start], start)
        for directory, fmt in ((there, other), (back, start)):
            converted = decoded(directory, fmt)
            assert converted.keys() == source_decoded.keys()
            for module, weights in source_decoded.items():
                np.testing.assert_array_equal(converted[module], weights, err_msg=module)
        config_file = "config.json" if start == "compressed-tensors" else "hf_quant_config.json"
        assert json.loads((back / config_file).read_text()) == \
            json.loads((checkpoints[start] / config_file).read_text())
        assert check_checkpoint(there).conforms


def test_a_reciprocal_that_is_not_the_nearest_survives_the_round_trip(checkpoints, tmp_path):
    """Where two fp32 reciprocals read back as the same s_g, the ModelOpt file only holds s_g:
    the compressed-tensors file made from it again stores the one the source stored."""
    name = ATTENTION + "o_proj.weight_global_scale"
    stored = load_global(checkpoints["compressed-tensors"], name)
    twin = None
    r = stored
    for _ in range(10_000):  # walk up the fp32 values to one whose neighbour reads back alike
        r = np.nextafter(r, np.float32(np.inf))
        up = np.nextafter(r, np.float32(np.inf))
        if np.float32(1) / r == np.float32(1) / up:
            twin = up if abs(1 / float(r) - float(np.float32(1) / r)) < \
                abs(1 / float(up) - float(np.float32(1) / up)) else r
            break
    assert twin is not None

    def set_twin(tensors):
        tensors[name] = torch.tensor([float(twin)], dtype=torch.float32)
    source = planted(checkpoints["compressed-tensors"], tmp_path / "source", set_twin)
    convert_checkpoint(source, tmp_path / "modelopt", to="modelopt")
    convert_checkpoint(tmp_path / "modelopt", tmp_path / "back", to="compressed-tensors")
    assert load_global(tmp_path / "back", name) == twin
    assert tensors_of(tmp_path / "back") == tensors_of(source)


def load_global(directory: Path, name: str) -> np.float32:
    return np.float32(SafetensorsModel(directory).array(name).reshape(-1)[0])


def doubled_global_scale(tensors, module: str) -> None:
    """Store ``module`` (compressed-tensors) with twice its s_g (the reciprocal halved, exactly)
    and every scale byte halved, exactly: the same decoded weights under a global scale of its
    own."""
    name = module + ".weight_global_scale"
    tensors[name] = tensors[name] / 2
    values = scale_bytes_of(tensors, module + ".weight_scale").view(ml_dtypes.float8_e4m3fn)
    exact = values.astype(np.float64) / 2
    moved = exact.astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(moved.astype(np.float64), exact), "the planted bytes must be exact"
    set_scale_bytes(tensors, module + ".weight_scale", moved.view(np.uint8))


def test_a_fused_set_is_reconciled_where_rescaling_is_exact(checkpoints, tiny, tmp_path):
    """k_proj stored with twice its set's s_g and halved scale bytes (a tool that does not fuse
    could write that): converted to ModelOpt, q_proj and v_proj take k_proj's s_g, the largest,
    their bytes halved exactly, and every layer decodes as before."""
    k_proj = ATTENTION + "k_proj"
    source = planted(checkpoints["compressed-tensors"], tmp_path / "source",
                     lambda tensors: doubled_global_scale(tensors, k_proj))
    assert {p.finding.clause for p in check_checkpoint(source).problems} == {"NVFP4-CKPT-3"}
    report = convert_checkpoint(source, tmp_path / "modelopt", to="modelopt")
    assert {layer.module: layer.how for layer in report.layers if layer.how != "copied"} == \
        {ATTENTION + "q_proj": "rescaled", ATTENTION + "v_proj": "rescaled"}
    before = decoded(source, "compressed-tensors")
    after = decoded(tmp_path / "modelopt", "modelopt")
    for module in before:
        np.testing.assert_array_equal(after[module], before[module], err_msg=module)
    converted = SafetensorsModel(tmp_path / "modelopt")
    k_scale = float(converted.array(k_proj + ".weight_scale_2"))
    for member in ("q_proj", "v_proj"):
        assert float(converted.array(ATTENTION + member + ".weight_scale_2")) == k_scale
    # one s_g per set again, and every layer still RTN at the s_g its file holds
    assert check_checkpoint(tmp_path / "modelopt", original=tiny).conforms


def test_a_fused_set_that_cannot_be_rescaled_exactly_is_refused_or_requantized(checkpoints,
                                                                               tmp_path):
    k_proj = ATTENTION + "k_proj"

    def own_scale(tensors):  # s_g times 3/4, the bytes kept: no exact E4M3 ratio back
        name = k_proj + ".weight_global_scale"
        tensors[name] = (tensors[name].double() * 4 / 3).float()
    source = planted(checkpoints["compressed-tensors"], tmp_path / "source", own_scale)
    target = tmp_path / "modelopt"
    with pytest.raises(CheckpointError, match=r"1 of 14 layers cannot be converted to modelopt "
                                              r"exactly: model\.layers\.0\.self_attn\.k_proj: "
                                              r"fused with q_proj, v_proj .*NVFP4-CKPT-3.*"
                                              r"--requantize"):
        convert_checkpoint(source, target, to="modelopt")
    assert not target.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["source"]

    report = convert_checkpoint(source, target, to="modelopt", requantize=True)
    (layer,) = [layer for layer in report.layers if layer.how != "copied"]
    assert layer.module == k_proj and layer.how == "requantized"
    assert 0 < layer.changed["weights"] <= layer.changed["of_weights"] == 64 * 128
    assert layer.changed["scale_bytes"] > 0
    assert layer.target_global_scale == float(load_global(target, ATTENTION + "q_proj.weight_scale_2"))
    assert check_checkpoint(target).conforms  # one s_g per set now
    # every requantized weight is within half an E4M3 step of the scale plus the E2M1 rounding
    before = decoded(source, "compressed-tensors")[k_proj]
    after = decoded(target, "modelopt")[k_proj]
    assert np.max(np.abs(after - before)) <= 0.25 * np.max(np.abs(before))


def test_a_multiplier_without_a_reciprocal_is_refused_or_requantized(checkpoints, tmp_path):
    """ModelOpt -> compressed-tensors for an o_proj whose s_g no fp32 r reads back as
    (fp32(1 / r) == s_g for none): found by fp32 division, not by the code under test."""
    name = ATTENTION + "o_proj.weight_scale_2"
    start = float(load_global(checkpoints["modelopt"], name))
    # Near the top of a binade 1/r moves by up to two s_g ulps per r ulp, so some s_g are
    # skipped: start at a significand of 1.9 in the layer's binade and walk down to one.
    lonely = np.float32(1.9 * 2.0 ** np.floor(np.log2(start)))
    for _ in range(10_000):
        lonely = np.nextafter(lonely, np.float32(0))
        guess = np.float32(1) / lonely
        near = [guess]
        for direction in (np.float32(0), np.float32(np.inf)):
            step = guess
            for _ in range(3):
                step = np.nextafter(step, direction)
                near.append(step)
        if all(np.float32(1) / r != lonely for r in near):
            break
    else:
        pytest.fail("no fp32 multiplier without a reciprocal near the layer's")

    def set_lonely(tensors):
        tensors[name] = torch.tensor(float(lonely), dtype=torch.float32)
    source = planted(checkpoints["modelopt"], tmp_path / "source", set_lonely)
    with pytest.raises(CheckpointError, match=r"o_proj: s_g = .* has no fp32 reciprocal that "
                                              r"reads back as itself \(NVFP4-GS-4\)"):
        convert_checkpoint(source, tmp_path / "ct", to="compressed-tensors")
    report = convert_checkpoint(source, tmp_path / "ct", to="compressed-tensors",
                                requantize=True)
    (layer,) = [layer for layer in report.layers if layer.how != "copied"]
    assert layer.module == ATTENTION + "o_proj"
    stored = load_global(tmp_path / "ct", ATTENTION + "o_proj.weight_global_scale")
    assert np.float32(1) / stored == np.float32(layer.target_global_scale) != lonely


def test_the_command_writes_atomically_and_answers_mistakes_in_one_line(checkpoints, tmp_path):
    command = [sys.executable, "-m", "hscale.cli", "convert"]
    target = tmp_path / "out"
    done = subprocess.run(command + [str(checkpoints["modelopt"]), str(target), "--to",
                                     "compressed-tensors"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "14 copied" in done.stdout and (target / "conversion_report.json").is_file()
    # the mistakes in this process (tests/helpers/cli.py), the conversion above in a fresh one
    again = hscale_here(["convert", checkpoints["modelopt"], target, "--to",
                         "compressed-tensors"], cwd=tmp_path)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr == f"hscale convert: {target} exists; choose another DST or pass " \
                           "--force to replace it\n"
    missing = hscale_here(["convert", tmp_path / "nowhere", tmp_path / "x", "--to", "modelopt"],
                          cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == f"hscale convert: {tmp_path / 'nowhere'}: no such directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
