"""``hscale check`` on checkpoints of the seeded tiny decoder written by ``hscale quantize``:
clean ones conform (every layer exact against the original, H-Scale too given the same h), and
each defect planted in a copy is caught, named by its tensor (and group), citing its clause,
while the untouched layers stay clean. A truncated file is one line and exit code 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from helpers.checkpoint_edits import (ATTENTION, planted, quantized, scale_bytes_of,  # noqa: E402
                              set_scale_bytes)
from helpers.cli import hscale_here  # noqa: E402
from hscale.check import check_checkpoint  # noqa: E402
from hscale.checkpoints import CheckpointError  # noqa: E402
from hscale.calibration import save_hessians  # noqa: E402
from hscale.reference import compute_global_scale, quantize, swizzle_scale_bytes  # noqa: E402
from hscale.reference.global_scale import (multiplier_from_reciprocal,  # noqa: E402
                                           reciprocal_from_multiplier)

HSCALE = [sys.executable, "-m", "hscale.cli"]


@pytest.fixture(scope="module")
def hessians(tiny, tmp_path_factory) -> Path:
    """h and the full H of every Linear of the tiny decoder, in hscale calibrate's file."""
    from transformers import AutoModelForCausalLM

    from hscale.calibration import collect_hessian, tiny_decoder_batches
    from hscale.models import linear_layers
    model = AutoModelForCausalLM.from_pretrained(tiny)
    H, h = collect_hessian(model, tiny_decoder_batches(vocab_size=model.config.vocab_size),
                           dict(linear_layers(model)), progress=False)
    path = tmp_path_factory.mktemp("hessians") / "h.safetensors"
    save_hessians(path, h, H, {"model": "tiny decoder"})
    return path


def named(report) -> set:
    """(tensor, clause) of every finding."""
    return {(p.tensor, p.finding.clause) for p in report.all_problems()}


# -- clean checkpoints --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["compressed-tensors", "modelopt"])
def test_a_clean_rtn_checkpoint_conforms_and_every_layer_is_exact_rtn(checkpoints, tiny, fmt):
    alone = check_checkpoint(checkpoints[fmt])
    assert alone.conforms, [p.render() for p in alone.all_problems()]
    assert len(alone.layers) == 14 and {layer.verdict for layer in alone.layers} == {""}
    against = check_checkpoint(checkpoints[fmt], original=tiny)
    assert against.conforms, [p.render() for p in against.all_problems()]
    assert [(layer.verdict, layer.recipe) for layer in against.layers] == \
        [("exact", "rtn maxabs")] * 14
    # The s_g each file means is NVFP4-GS-1's for its fused set, as the format stores it.
    assert {layer.global_scale_note for layer in against.layers} <= {
        "NVFP4-GS-1 with C = 448", "NVFP4-GS-1 with C = 448, as its stored reciprocal reads back"}


def test_an_hscale_checkpoint_is_exact_given_the_same_h(tiny, hessians, tmp_path):
    out = quantized(tiny, tmp_path / "hscale", method="hscale", hessian=str(hessians))
    report = check_checkpoint(out, original=tiny, hessian=hessians)
    assert report.conforms, [p.render() for p in report.all_problems()]
    assert {(layer.verdict, layer.recipe) for layer in report.layers} == {("exact", "hscale maxabs")}
    for layer in report.layers:  # the output errors against RTN at the same s_g
        quality = layer.quality
        assert quality["diag_error"] <= quality["diag_error_rtn"] * (1 + 1e-12), layer.module
        assert "output_error" in quality and quality["output_error_rtn"] > 0, layer.module
    moved = sum(sum(n for d, n in layer.quality["shifts_from_rtn"].items() if int(d))
                for layer in report.layers)
    assert moved > 0, "H-Scale moved no byte: the test would not tell hscale from rtn"
    # Without --hessian, check takes the h hscale quantize kept in the checkpoint (hscale/).
    kept = check_checkpoint(out, original=tiny)
    assert kept.conforms and {layer.verdict for layer in kept.layers} == {"exact"}
    assert any("hscale/h.safetensors, which hscale quantize kept" in n for n in kept.notes)
    # Without any h the search cannot be reproduced, but every byte and code is still the format's.
    shutil.rmtree(out / "hscale")
    without_h = check_checkpoint(out, original=tiny)
    assert without_h.conforms
    assert "format" in {layer.verdict for layer in without_h.layers}


def test_a_gptq_checkpoint_is_judged_by_the_format_with_re_derivation_apart(tiny, hessians,
                                                                             tmp_path):
    """GPTQ moves codes away from the rounding of the original by design: judged by the format
    clauses of the file (it conforms), re-derivation reported as a consistency figure; forced
    to be re-derived like an RTN checkpoint it is flagged (what the figure replaces), and a
    defect planted in it is still caught."""
    from hscale.check import format_report
    out = quantized(tiny, tmp_path / "gptq", pipeline="gptq", method="hscale",
                    hessian=str(hessians))
    report = check_checkpoint(out, original=tiny)
    assert report.conforms, [p.render() for p in report.all_problems()][:3]
    assert {layer.verdict for layer in report.layers} == {"error feedback"}
    figures = report.totals()["consistency"]
    assert figures["layers"] == 14 and 0 < figures["codes_as_rounded"] < 1
    assert 0 <= figures["bytes_as_rtn"] <= 1
    assert "made with error feedback (a consistency figure, not findings)" in \
        format_report(report)
    rederived = check_checkpoint(out, original=tiny, error_feedback=False)
    assert not rederived.conforms and rederived.totals()["findings"] > 0
    name = ATTENTION + "q_proj.weight_scale"

    def nan_byte(tensors):
        values = scale_bytes_of(tensors, name)
        values[3, 5] = 0x7F
        set_scale_bytes(tensors, name, values)
    broken = check_checkpoint(planted(out, tmp_path / "broken", nan_byte), original=tiny)
    assert (name, "NVFP4-E4M3-1") in named(broken) and not broken.conforms


# -- planted defects ----------------------------------------------------------------------------

def test_a_nan_scale_byte_is_named_with_its_group(checkpoints, tmp_path):
    name = ATTENTION + "q_proj.weight_scale"

    def nan_byte(tensors):
        values = scale_bytes_of(tensors, name)
        values[3, 5] = 0x7F
        set_scale_bytes(tensors, name, values)
    report = check_checkpoint(planted(checkpoints["compressed-tensors"], tmp_path / "c", nan_byte))
    assert named(report) == {(name, "NVFP4-E4M3-1")}
    (problem,) = report.all_problems()
    assert problem.finding.group == (3, 5) and "0x7F is NaN" in problem.finding.text


def test_fused_layers_with_different_global_scales_are_named(checkpoints, tiny, tmp_path):
    """k_proj quantized with its own s_g (as a tool that does not fuse does): NVFP4-CKPT-3
    names the set; against the original, k_proj is still exact at the s_g it stores."""
    weight = load_file(str(tiny / "model.safetensors"))[ATTENTION + "k_proj.weight"].numpy()
    own = multiplier_from_reciprocal(reciprocal_from_multiplier(
        compute_global_scale(float(np.abs(weight).max()))))

    def own_scale(tensors):
        result = quantize(weight, method="rtn", global_scale=own)
        tensors[ATTENTION + "k_proj.weight_packed"] = torch.from_numpy(result.packed)
        set_scale_bytes(tensors, ATTENTION + "k_proj.weight_scale", result.scale_bytes)
        tensors[ATTENTION + "k_proj.weight_global_scale"] = torch.tensor(
            [float(reciprocal_from_multiplier(own))])
    out = planted(checkpoints["compressed-tensors"], tmp_path / "c", own_scale)
    report = check_checkpoint(out, original=tiny)
    assert named(report) == {(ATTENTION + "{q_proj,k_proj,v_proj}", "NVFP4-CKPT-3")}
    assert f"k_proj s_g = {float(own)!r}" in report.problems[0].finding.text
    assert all(layer.verdict == "exact" for layer in report.layers)


@pytest.mark.parametrize("fmt", ["compressed-tensors", "modelopt"])
def test_a_global_scale_in_the_other_convention_is_named(checkpoints, tiny, tmp_path, fmt):
    name = ATTENTION + ("o_proj.weight_global_scale" if fmt == "compressed-tensors"
                        else "o_proj.weight_scale_2")

    def other_convention(tensors):  # the multiplier where the reciprocal belongs, or the reverse
        tensors[name] = (1 / tensors[name].double()).float()
    out = planted(checkpoints[fmt], tmp_path / "c", other_convention)
    for report in (check_checkpoint(out), check_checkpoint(out, original=tiny)):
        assert named(report) == {(name, "NVFP4-GS-4")}
        assert "looks stored in the other convention" in report.all_problems()[0].finding.text


def test_swapped_nibbles_are_named_against_the_original(checkpoints, tiny, tmp_path):
    name = ATTENTION + "o_proj.weight_packed"

    def swap(tensors):
        packed = tensors[name]
        tensors[name] = ((packed >> 4) | (packed << 4)) & 0xFF
    report = check_checkpoint(planted(checkpoints["compressed-tensors"], tmp_path / "c", swap),
                              original=tiny)
    assert named(report) == {(name, "NVFP4-PACK-1")}
    assert "the two codes of every byte are swapped" in report.all_problems()[0].finding.text
    layer = next(layer for layer in report.layers if layer.module == ATTENTION + "o_proj")
    assert layer.verdict == "not certified"
    # every group of the layer whose two nibbles differ somewhere is counted
    assert report.totals()["findings"] > 1000


def test_a_swizzled_scale_tensor_is_named(checkpoints, tiny, tmp_path):
    """q_proj's scale bytes (128 x 8) swizzled in place (the same size, so only the original
    tells), k_proj's (64 x 8) stored in the padded 128 x 8 swizzled shape (the shape tells)."""
    q_scale, k_scale = ATTENTION + "q_proj.weight_scale", ATTENTION + "k_proj.weight_scale"

    def swizzle(tensors):
        q = scale_bytes_of(tensors, q_scale)
        set_scale_bytes(tensors, q_scale, swizzle_scale_bytes(q).reshape(q.shape))
        k = scale_bytes_of(tensors, k_scale)
        set_scale_bytes(tensors, k_scale, swizzle_scale_bytes(k).reshape(128, -1))
    out = planted(checkpoints["compressed-tensors"], tmp_path / "c", swizzle)
    assert named(check_checkpoint(out)) == {(k_scale, "NVFP4-PACK-3")}
    report = check_checkpoint(out, original=tiny)
    assert named(report) == {(k_scale, "NVFP4-PACK-3"), (q_scale, "NVFP4-PACK-3")}
    texts = " ".join(p.finding.text for p in report.all_problems())
    assert "shape (128, 8), expected (64, 8)" in texts and "the swizzled 128x4 layout" in texts


def test_a_wrong_shape_is_named(checkpoints, tmp_path):
    name = "model.layers.1.mlp.down_proj.weight_scale"

    def transpose(tensors):
        tensors[name] = tensors[name].T.contiguous()
    report = check_checkpoint(planted(checkpoints["modelopt"], tmp_path / "c", transpose))
    assert named(report) == {(name, "NVFP4-PACK-2")}
    assert "shape (24, 128), expected (128, 24)" in report.all_problems()[0].finding.text


def test_a_missing_tensor_is_named(checkpoints, tmp_path):
    name = ATTENTION + "v_proj.weight_global_scale"
    report = check_checkpoint(planted(checkpoints["compressed-tensors"], tmp_path / "c",
                                      lambda tensors: tensors.pop(name)))
    assert named(report) == {(name, "NVFP4-CKPT-1")}
    assert report.all_problems()[0].finding.text.startswith("missing: ")


def test_the_ignore_list_is_checked_against_what_is_stored(checkpoints, tmp_path):
    """A quantized Linear the ignore list names, and a Linear stored unquantized that it does
    not name (lm_head, dropped from the list)."""
    out = tmp_path / "c"
    shutil.copytree(checkpoints["compressed-tensors"], out)
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["ignore"] == ["lm_head"]
    config["quantization_config"]["ignore"] = [ATTENTION + "q_proj"]
    (out / "config.json").write_text(json.dumps(config))
    problems = check_checkpoint(out).problems
    assert {p.finding.clause for p in problems} == {"NVFP4-CKPT-1"}
    texts = sorted(p.finding.text for p in problems)
    assert texts[0].startswith("lm_head is a Linear stored unquantized (lm_head.weight F32)")
    assert texts[1].startswith(ATTENTION + "q_proj is stored quantized, but the ignore list "
                                           "names it")


# -- the command ---------------------------------------------------------------------------------

def _run(*arguments, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(HSCALE + [str(a) for a in arguments], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_the_command_exit_codes_and_json_report(checkpoints, tiny, tmp_path):
    """0 and a JSON report for a clean checkpoint, 1 with the finding for a planted one, 2 and
    one line naming the file for a truncated one."""
    clean = _run("check", checkpoints["modelopt"], "--original", tiny, "--json",
                 tmp_path / "r.json", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["conforms"] and document["totals"]["verdicts"] == {"exact": 14}
    assert not list(tmp_path.glob("*.tmp"))

    name = ATTENTION + "v_proj.weight_global_scale"
    broken = planted(checkpoints["compressed-tensors"], tmp_path / "broken",
                     lambda tensors: tensors.pop(name))
    found = hscale_here(["check", broken], cwd=tmp_path)  # the exit codes 1 and 2 in process
    assert found.returncode == 1 and found.stderr == ""
    assert f"{name}: [NVFP4-CKPT-1] tensor: missing" in found.stdout

    truncated = tmp_path / "truncated"
    shutil.copytree(checkpoints["compressed-tensors"], truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    result = hscale_here(["check", truncated, "--original", tiny], cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"hscale check: {weights}: truncated: ")


def test_an_original_without_the_layers_is_refused_before_any_work(checkpoints, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    save_file({"x.weight": torch.zeros(4, 16)}, str(other / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"--original .*other: has no model\.layers\.0\."):
        check_checkpoint(checkpoints["compressed-tensors"], original=other)
