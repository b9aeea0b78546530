"""Checkpoints made by real tools still check as before: llm-compressor's and ModelOpt's NVFP4
exports of the bundled all-MiniLM-L6-v2, built through the tools' own production paths
(tools/checkpoint_survey.py's builders), give ``hscale check --original`` the totals
docs/checkpoint-survey.json recorded before the reader validated anything (verdicts, recipes,
allowances, findings by clause, byte counts), and convert to the other layout into outputs that
conform. The recorded figures are the golden values: a run of the survey, not of this code."""

from __future__ import annotations

import importlib.util
import json
import sys
from importlib.metadata import version

import pytest

from helpers.paths import REPO_ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

SURVEY = json.loads((REPO_ROOT / "docs" / "checkpoint-survey.json").read_text())


def survey_tools():
    spec = importlib.util.spec_from_file_location("checkpoint_survey",
                                                  REPO_ROOT / "tools" / "checkpoint_survey.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return {tool.label: tool for tool in module.TOOLS}


@pytest.mark.clause("NVFP4-CKPT-1", "NVFP4-CKPT-2", "NVFP4-CKPT-6")
@pytest.mark.parametrize("label, module, to", [("llm-compressor", "llmcompressor", "modelopt"),
                                               ("ModelOpt", "modelopt", "compressed-tensors")])
def test_a_real_tools_checkpoint_checks_as_recorded(label, module, to, tmp_path):
    pytest.importorskip(module, reason=f"{label} is in the interop extra")
    from hscale.check import check_checkpoint
    from hscale.check.conversion import ConversionCheck
    from hscale.checkpoints.convert import convert_checkpoint
    from hscale.models import minilm_model_dir
    tool = survey_tools()[label]
    recorded = SURVEY[label]
    if version(tool.package) != recorded["version"]:
        pytest.skip(f"{label} {version(tool.package)} is installed; the survey recorded "
                    f"{recorded['version']}")
    original = minilm_model_dir()
    out = tmp_path / "checkpoint"
    tool.build(original, out, None)
    report = check_checkpoint(out, original=original)
    totals = report.totals()
    assert totals.pop("consistency") == {}  # (recorded before the key existed: no GPTQ here)
    assert totals == recorded["totals"], totals
    assert report.conforms == recorded["conforms"]
    assert report.notes == [], report.notes  # nothing it could not judge
    # converted (llm-compressor's unfused query/key/value reconciled or requantized, layer by
    # layer), the output checked before it is committed and again here
    converted = convert_checkpoint(out, tmp_path / "converted", to=to, requantize=True,
                                   check=ConversionCheck())
    assert len(converted.layers) == recorded["totals"]["layers"]
    assert check_checkpoint(tmp_path / "converted").conforms
