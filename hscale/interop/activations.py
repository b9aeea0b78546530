"""``hscale interop --activations``: the real run-time activation quantizers through the
activation kind (docs/spec.md section 8), and their section of docs/interop.md.

For each activation adapter of ``hscale.backends.interop`` whose library imports here:

1. the conformance suite on it (its activation tests, under the recipe it declares), in a
   subprocess as a vendor runs it: the verdict, the clauses it breaks, the wall time;
2. what it produces against every recipe of the field, on the level-0 activation vectors and
   on a seeded set of activation-like tensors (heavy tails, outliers, zero rows, a static scale
   calibrated on part of the data): the groups whose scale byte differs from the recipe's, the
   elements whose code differs at the same byte, the findings of the recipe's judge by clause,
   and the first difference in hex.

A library that is not installed, or that needs hardware this machine lacks (the CUDA kernels
of vLLM and FlashInfer), is listed with its ``available()`` reason.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import PREFIX, suite_argv

#: The recipes every adapter is compared with.
RECIPES = ("fast-math", "exact", "torchao")
SEEDED = 20261125


@dataclass(frozen=True)
class ActivationAdapter:
    label: str
    spec: str  # module:factory under hscale.backends.interop
    library: str
    calls: str


ACTIVATION_ADAPTERS = (
    ActivationAdapter("torchao", "torchao_activations:create", "torchao",
                      "NVFP4Tensor.to_nvfp4 with per_tensor_amax_to_scale (swizzled scales), "
                      "as its W4A4 linear quantizes its input"),
    ActivationAdapter("ModelOpt", "modelopt_activations:create", "nvidia-modelopt",
                      "NVFP4QTensor.quantize with the static input_scale"),
    ActivationAdapter("compressed-tensors", "compressed_tensors_activations:create",
                      "compressed-tensors",
                      "compute_dynamic_scales_and_zp and quantize with the NVFP4 preset's "
                      "input_activations and the static input_global_scale"),
    ActivationAdapter("vLLM", "gpu_activations:create_vllm", "vllm",
                      "vllm._custom_ops.scaled_fp4_quant"),
    ActivationAdapter("FlashInfer", "gpu_activations:create_flashinfer", "flashinfer-python",
                      "flashinfer.fp4_quantize (128x4; the 8x4, linear and exact variants "
                      "are gpu_activations:create_flashinfer_8x4, _linear, _exact)"),
)


def seeded_cases():
    """Activation-like tensors, static scales: heavy-tailed rows with an outlier column, a zero
    row, a scale calibrated on the first half (so the second saturates), in bfloat16."""
    import ml_dtypes

    from hscale.judge.activations import ActivationCase
    from hscale.vectors.rand import CaseRandom
    cases = []
    for k in range(8):
        rnd = CaseRandom(SEEDED, f"act-interop-{k}")
        x = rnd.heavy((32, 256)) * rnd.log_uniform((32, 1), -4, 4)
        x[:, 7] *= 30.0  # an outlier channel
        x[5] = 0.0
        x = x.astype(np.float32).astype(ml_dtypes.bfloat16)
        calibrated = float(np.max(np.abs(x[:16].astype(np.float64)))) or 1.0
        one = np.float32(1)
        a = one / (one / np.float32(calibrated / 2688))
        cases.append(ActivationCase(x, one / a, id=f"seeded-{k}", title="activation-like"))
    return cases


def level0_activation_cases():
    from hscale.vectors import LEVEL0_DIR
    from hscale.vectors.stored import open_vectors
    return [case for _, case in open_vectors(LEVEL0_DIR).by_kind["activation"].values()]


def run_suite(spec: str, work: Path) -> dict:
    """The activation kind's certificate of one subprocess run, with its wall time."""
    report = work / "certificate.json"
    cmd = suite_argv(spec, "activation", report)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, env=dict(os.environ, PYTHONWARNINGS="ignore"),
                          capture_output=True, text=True, timeout=3600)
    if not report.is_file():
        raise RuntimeError(f"the suite wrote no report for {spec}:\n{done.stdout[-2000:]}"
                           f"{done.stderr[-2000:]}")
    data = json.loads(report.read_text())
    part = data["kinds"]["activation"]
    return {"seconds": round(time.perf_counter() - start, 1), "verdict": part["verdict"],
            "tests": part["tests"], "clauses": part["clauses"],
            "broken": data["verdicts"]["clauses_broken"],
            "declarations": part["declarations"],
            "first_failures": {c: row["first_failure"][:600] for c, row in data["clauses"].items()
                               if row.get("first_failure") and c.startswith("NVFP4-ACT")}}


def compare(backend, domain, cases) -> dict:
    """Per recipe: groups, scale bytes and codes that differ from it, the judge's findings by
    clause, and the first difference in hex."""
    from hscale.judge.activation_domain import observe_activations
    from hscale.judge.activations import ActivationCase, diagnose_activations
    from hscale.judge.findings import fp32_hex
    out = {r: {"groups": 0, "bytes differ": 0, "codes differ": 0, "findings": Counter(),
               "example": None} for r in RECIPES}
    failed = 0
    for case in cases:
        if case.global_scale is None:  # the recipes' dynamic rules differ: compared static
            continue
        x = np.asarray(case.x)
        if not domain.accepts_dtype(x.dtype):
            x = x.astype(domain.numpy_dtypes[0])
            case = ActivationCase(x, case.global_scale, case.id, case.title, case.clauses)
        try:
            raw = backend.quantize_activations(x, domain.given_scale(case.global_scale))
        except Exception:  # noqa: BLE001 - a library failing on valid input: counted
            failed += 1
            continue
        observed, structure = observe_activations(raw, case.shape, domain)
        if observed is None:
            failed += 1
            continue
        for recipe in RECIPES:
            row = out[recipe]
            expected = case.expected_for(recipe)
            differs = observed.scale_bytes != expected.scale_bytes
            same = np.repeat(~differs, 16, axis=1)
            codes = (observed.codes != expected.codes) & same
            row["groups"] += differs.size
            row["bytes differ"] += int(np.count_nonzero(differs))
            row["codes differ"] += int(np.count_nonzero(codes))
            diagnosis = diagnose_activations(case, observed, recipe)
            row["findings"].update(f.clause for f in diagnosis.findings)
            if row["example"] is None and (differs.any() or codes.any()):
                r, col = (np.argwhere(differs)[0] * [1, 16] if differs.any()
                          else np.argwhere(codes)[0])
                i = int(col) // 16
                group = slice(16 * i, 16 * i + 16)
                row["example"] = {
                    "case": case.id, "group": [int(r), i], "g": fp32_hex(case.global_scale, ""),
                    "x": " ".join(f"{int(v):0{2 * x.dtype.itemsize}X}" for v in np.asarray(
                        x[r, group]).view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)),
                    "expected": f"{int(expected.scale_bytes[r, i]):02X} " + "".join(
                        f"{int(c):X}" for c in expected.codes[r, group]),
                    "observed": f"{int(observed.scale_bytes[r, i]):02X} " + "".join(
                        f"{int(c):X}" for c in observed.codes[r, group])}
    for row in out.values():
        row["findings"] = dict(row["findings"])
    return {"recipes": out, "calls failed": failed}


def measure(adapter: ActivationAdapter, out=sys.stdout) -> dict:
    from hscale.backends import load
    from hscale.backends.interop import common
    from hscale.judge.activation_domain import ActivationDomain
    from hscale.judge.kinds import declared_kinds
    backend = load(PREFIX + adapter.spec)
    entry = {"label": adapter.label, "adapter": adapter.spec, "calls": adapter.calls,
             "version": common.dist_version(adapter.library)}
    ok, why = backend.available()
    if not ok:
        entry["not_run"] = why
        return entry
    declarations = declared_kinds(backend, adapter.spec).declarations["activation"]
    domain = ActivationDomain.of(declarations)
    entry.update(declared=domain.recipe, domain=domain.describe(),
                 environment=f"Python {platform.python_version()}, {platform.machine()}, "
                             f"{datetime.date.today().isoformat()}")
    print(f"[{adapter.label}] the suite, recipe {domain.recipe} ...", file=out, flush=True)
    entry["suite"] = run_suite(adapter.spec, Path(tempfile.mkdtemp(prefix="hscale-interop-")))
    print(f"[{adapter.label}] {entry['suite']['verdict']} ({entry['suite']['seconds']} s); "
          "against every recipe ...", file=out, flush=True)
    entry["vectors"] = compare(backend, domain, level0_activation_cases())
    entry["seeded"] = compare(backend, domain, seeded_cases())
    return entry


def measure_all(results: dict, out=sys.stdout) -> dict:
    """``results["activations"]``, every activation adapter measured (one not runnable here
    keeps an earlier measurement)."""
    section = results.setdefault("activations", {})
    for adapter in ACTIVATION_ADAPTERS:
        entry = measure(adapter, out)
        if "not_run" in entry and "suite" in section.get(adapter.label, {}):
            continue
        section[adapter.label] = entry
    return results


def render_section(results: dict) -> list[str]:
    """The markdown lines of the activation quantizers' section (empty without results)."""
    section = results.get("activations")
    if not section:
        return []
    lines = ["## Activation quantizers (the activation kind)", "",
             "Each run-time activation path behind an adapter of `hscale.backends.interop` "
             "(`*_activations`), through the activation tests of the suite under the recipe it "
             "declares (docs/spec.md section 8), then compared with every recipe on the level-0 "
             "activation vectors (static ones) and on 8 seeded activation-like bfloat16 tensors "
             "(32 x 256: heavy tails, an outlier channel, a zero row, a static scale calibrated "
             "on the first half of the rows, so that the others saturate). A cell: groups whose "
             "scale byte differs from the recipe's, elements whose code differs at the same "
             "byte, out of all the groups; then the clauses the recipe's judge cites.", "",
             "| library | adapter | version | calls | declared recipe | verdict under it | "
             "against fast-math | against exact | against torchao |",
             "|---|---|---|---|---|---|---|---|---|"]
    examples = []
    for adapter in ACTIVATION_ADAPTERS:
        e = section.get(adapter.label)
        if e is None or "suite" not in e:
            continue
        suite = e["suite"]
        verdict = suite["verdict"] + (f" ({', '.join(suite['broken'])})" if suite["broken"]
                                      else "")
        cells = []
        for recipe in RECIPES:
            vec, seed = e["vectors"]["recipes"][recipe], e["seeded"]["recipes"][recipe]
            groups = vec["groups"] + seed["groups"]
            bytes_, codes = vec["bytes differ"] + seed["bytes differ"], \
                vec["codes differ"] + seed["codes differ"]
            clauses = Counter(vec["findings"]) + Counter(seed["findings"])
            if not clauses:
                cells.append(f"identical ({groups:,} groups)" if not (bytes_ or codes)
                             else f"conforms; {bytes_:,} bytes, {codes:,} codes differ")
            else:
                cells.append(f"{bytes_:,} bytes, {codes:,} codes of {groups:,} groups; "
                             + ", ".join(f"{c} {n}" for c, n in sorted(clauses.items())))
            example = vec["example"] or seed["example"]
            if example and clauses:
                examples.append(f"{adapter.label} against {recipe}: case {example['case']} "
                                f"group (r={example['group'][0]}, i={example['group'][1]}), "
                                f"g {example['g']}\n  x = {example['x']}\n  {recipe}: "
                                f"{example['expected']}\n  {adapter.label}: "
                                f"{example['observed']}")
        lines.append(f"| {adapter.label} | `{e['adapter']}` | {e['version']} | {e['calls']} | "
                     f"`{e['declared']}` | {verdict} ({suite['seconds']:.0f} s) | "
                     + " | ".join(cells) + " |")
    if lines[-1].startswith("|---"):  # no library ran here: no table
        lines[-2:] = ["No activation quantizer could run here.", ""]
    else:
        lines.append("")
    if examples:
        lines += ["One group per recipe each library differs from (x as its dtype's bits; the "
                  "scale byte, then the 16 codes):", "", "```"] + examples + ["```", ""]
    not_run = [e for e in section.values() if "not_run" in e]
    if not_run:
        lines += ["Not run here:", ""] + [f"- {e['label']} (`{e['adapter']}`, {e['version']}): "
                                          f"{e['not_run']}" for e in not_run] + [""]
    return lines
