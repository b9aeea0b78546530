"""The stochastic kind through the installed suite, in a subprocess as a vendor runs it
(``--kind stochastic``), on independent kernels (tests/helpers/stochastic_kernels.py): the
certificate names the kind, its declarations (scaling, random bits, routing) and the clause a
fault breaks, from the findings' records."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from helpers.paths import REPO_ROOT
from helpers.selftest import suite_command

BACKENDS = {"sr-straight": "carry_exact", "sr-straight-as-sm103a": "straight_as_sm103a",
            "sr-hidden-fmaf-nearest": "hidden_fmaf_nearest"}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("sr-certificates")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO_ROOT / "tests"), os.environ.get("PYTHONPATH")])))
    env.pop("CI", None)
    backends = [arg for factory in BACKENDS.values()
                for arg in ("--backend", f"helpers.stochastic_kernels:{factory}")]
    done = subprocess.run(suite_command("--kind", "stochastic", "--hypothesis-profile", "mutant",
                                        "--certificate", str(where / "{backend}.json"),
                                        *backends),
                          cwd=where, env=env, capture_output=True, text=True, timeout=600)
    return {name: json.loads((where / f"{name}.json").read_text()) for name in BACKENDS} | \
        {"output": done.stdout}


@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-4", "NVFP4-SR-6")
def test_the_certificates_of_the_stochastic_kind(certificates):
    good = certificates["sr-straight"]
    assert good["verdict"] == "conforms", good["verdicts"]
    part = good["kinds"]["stochastic"]
    assert part["declarations"] == {"sr_scaling": "none", "sr_random_bits": "given",
                                    "sr_routing": "straight"}
    assert part["outputs"]["elements_bitwise"] > 10_000, part["outputs"]
    assert good["kinds_declared"] == ["stochastic"] and "weight" not in good["kinds"]
    assert "skipped" not in good["tests"] or all(
        "does not declare" not in reason for reason in good["skip_reasons"])
    wrong = certificates["sr-straight-as-sm103a"]
    assert wrong["verdicts"]["clauses_broken"] == ["NVFP4-SR-4"], wrong["verdicts"]
    record = wrong["clauses"]["NVFP4-SR-4"]["first_finding"]
    assert record["clause"] == "NVFP4-SR-4" and "routing straight" in record["text"]
    hidden = certificates["sr-hidden-fmaf-nearest"]
    assert hidden["verdicts"]["clauses_broken"] == ["NVFP4-SR-6"], hidden["verdicts"]
    assert "kind stochastic (sr_scaling none; sr_random_bits hidden" in certificates["output"]
