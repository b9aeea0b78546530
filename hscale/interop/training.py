"""The training quantizers through the suite (``hscale interop --training``): real
implementations of the stochastic, rht and tile kinds that run on this CPU, each judged by its
kind's tests (``--kind``), and their section of docs/interop.md, with what cannot run here and
why."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import suite_argv


@dataclass(frozen=True)
class TrainingAdapter:
    label: str
    spec: str   # package.module:factory
    kind: str   # its row of hscale.judge.kinds
    calls: str


GFLOAT_MODES = ("Stochastic", "StochasticOdd", "StochasticFast", "StochasticFastest")
TE = "hscale.interop.training_adapters"
TRAINING_ADAPTERS = (
    *(TrainingAdapter(f"gfloat {mode}",
                      f"hscale.interop.stochastic_adapters:gfloat_{mode.lower()}", "stochastic",
                      f"round_float(format_info_ocp_e2m1, v, RoundMode.{mode}, sat=True, "
                      "srbits=byte, srnumbits=8)") for mode in GFLOAT_MODES),
    TrainingAdapter("TransformerEngine reference RHT", f"{TE}:te_rht", "rht",
                    "NVFP4QuantizerRef(with_rht=True, with_random_sign_mask=True)._quantize, "
                    "the column-wise copy"),
    TrainingAdapter("TransformerEngine reference 2D", f"{TE}:te_tiles", "tile",
                    "NVFP4QuantizerRef(quant_tile_shape=(16, 16))._quantize, row-wise"),
)

#: What cannot run on this machine, and why.
NOT_RUN_HERE = (
    ("TransformerEngine stochastic rounding", "CUDA only: cvt.rs.satfinite.e2m1x4.f32 on "
     "sm_100a/sm_103a, the software fallback on sm_120/121 (its model is judged in the kit's "
     "tests, tests/helpers/stochastic_kernels.py); TE's custom_recipes reference has no "
     "stochastic rounding"),
    ("torchao nvfp4_training (SR, fused RHT + quantize, 2D)", "Triton and CuTe kernels only "
     "(torchao/prototype/moe_training/nvfp4_training): a GPU"),
    ("quack-kernels' rounding emulation", "CuTe DSL code (quack/rounding.py) that compiles "
     "for NVIDIA GPUs; its exact integer model lives in its tests, not in the wheel"),
    ("fouroversix", "the package index here offers 0.1.0 only; its stochastic rounding is in "
     "its CUDA and Triton backends"),
)


def run_kind_suite(adapter: TrainingAdapter, work: Path) -> dict:
    """The adapter's kind's tests of the installed suite, in a subprocess: its certificate."""
    certificate = work / f"{adapter.kind}-{adapter.spec.split(':')[1]}.json"
    start = time.perf_counter()
    done = subprocess.run(suite_argv(adapter.spec, adapter.kind, certificate, prefix=""),
                          cwd=work, capture_output=True, text=True, timeout=3600,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    seconds = round(time.perf_counter() - start, 1)
    if not certificate.is_file():
        return {"error": (done.stdout + done.stderr)[-1500:], "seconds": seconds}
    cert = json.loads(certificate.read_text())
    part = cert["kinds"].get(adapter.kind, {})
    first = {c: row.get("first_finding", {}).get("text", row.get("first_failure", "")[:300])
             for c, row in cert["clauses"].items() if row.get("status") in ("fail", "error")}
    return {"verdict": cert["verdict"], "version": cert["backend"]["version"],
            "available": cert["backend"]["available"], "reason": cert["backend"]["reason"],
            "declarations": part.get("declarations", {}), "tests": cert["tests"],
            "broken": cert["verdicts"]["clauses_broken"],
            "errors": sorted(cert["errors_on_valid_input"]), "first": first,
            "device": f"CPU ({platform.machine()})", "seconds": seconds}


def measure_training(results: dict) -> dict:
    section = results.setdefault("training", {})
    work = Path(tempfile.mkdtemp(prefix="hscale-interop-training-"))
    for adapter in TRAINING_ADAPTERS:
        entry = run_kind_suite(adapter, work)
        entry.update(spec=adapter.spec, kind=adapter.kind, calls=adapter.calls,
                     date=datetime.date.today().isoformat())
        section[adapter.label] = entry
        print(f"[{adapter.label}] {entry.get('verdict', entry.get('error'))} "
              f"({entry['seconds']} s)", flush=True)
    return section


def render_training(section: dict) -> list[str]:
    if not section:
        return []
    lines = ["## Training quantizers (the stochastic, rht and tile kinds)", "",
             "Each implementation that runs on this CPU, through its kind's tests of the suite "
             "(`--kind`, docs/spec.md sections 11-13), under what it declares; the certificate "
             "records kind, profile, routing, library version and device. A finding is the "
             "first of its clause, as the certificate's record holds it. TransformerEngine's "
             "reference is read from its wheel (`pip download transformer-engine==2.20.2 "
             "--no-deps`, then `HSCALE_TE_WHEEL=` that file; installing the wheel without its "
             "CUDA core makes `import transformer_engine` raise). `hscale interop --training` "
             "reruns this section.", "",
             "A MODEL of TransformerEngine's software fallback for sm_120/121 (`common/util/"
             "ptx.cuh::stochastic_round_fp4_e2m1`: `t = fmaf(r/256, step, |x|)` rounded to "
             "nearest, then floored), written from that published description and not TE's "
             "code (tests/helpers/stochastic_kernels.py, `te_fallback_model`), is refused citing "
             "NVFP4-SR-2: every fp32 predecessor of k/512 on (0, 0.25] with the byte 256 - k "
             "carries falsely (|v| = 0x3AFFFFFF = 2^-9 - 2^-33 with r = 0xFF gives 0.5, the "
             "rule 0), 576 false carries within 512 ulps below those boundaries "
             "(tests/judge/test_stochastic_judge.py); its unbiasedness over 256 bytes breaks "
             "there too (NVFP4-SR-5), and its hidden-stream form fails the acceptance test "
             "(NVFP4-SR-6) on every seed.", "",
             "| implementation | kind | version | calls | declared | device | verdict | "
             "clauses broken | errors on valid input |", "|---|---|---|---|---|---|---|---|---|"]
    findings = []
    for label, e in section.items():
        if "error" in e:
            lines.append(f"| {label} | {e['kind']} | - | {e['calls']} | - | - | did not run: "
                         f"{e['error'][:200]} | | |")
            continue
        declared = "; ".join(f"{k} {f'0x{v:04X}' if k.endswith('mask') else v}"
                             for k, v in e["declarations"].items()) or "-"
        verdict = e["verdict"] if e["available"] else f"not run: {e['reason']}"
        lines.append(f"| {label} | {e['kind']} | {e['version']} | `{e['calls']}` | {declared} | "
                     f"{e['device']} | {verdict} | {', '.join(e['broken']) or '-'} | "
                     f"{', '.join(e['errors']) or '-'} |")
        for clause, text in sorted(e["first"].items()):
            first_line = (text or "").strip().splitlines()[0] if text else ""
            if clause in e["errors"]:  # nothing judged: the library raised on a valid input
                first_line = f"raised on a valid input of the clause's tests: {first_line}"
            findings.append(f"{label}, {clause}: {first_line}")
    if findings:
        lines += ["", "First findings:", "", "```"] + [f[:400] for f in findings] + ["```"]
    lines += ["", "Not run here:", ""]
    lines += [f"- {name}: {why}." for name, why in NOT_RUN_HERE]
    return lines + [""]
