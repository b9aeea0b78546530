"""Checkpoints of the bundled all-MiniLM-L6-v2 made by real tools, checked by ``hscale check``
against the original weights; the reports go into docs/checkpoints.md ("Checkpoints made by
real tools"), the figures into docs/checkpoint-survey.json.

    python tools/checkpoint_survey.py               # every tool installed here
    python tools/checkpoint_survey.py --render      # only rewrite the docs section

The tools, each through its own production path:

* **llm-compressor**: ``oneshot(model, recipe=QuantizationModifier(targets="Linear",
  scheme="NVFP4A16"))`` (data-free: weights only), then ``model.save_pretrained(...,
  save_compressed=True)``, which packs through compressed-tensors' NVFP4PackedCompressor;
* **ModelOpt**: ``mtq.quantize(model, mtq.W4A16_NVFP4_CFG)`` then
  ``modelopt.torch.export.export_hf_checkpoint``;
* **hscale quantize**, both formats, rtn pipeline with H-Scale on h from ``hscale calibrate``
  (checked with that h, so every layer must be exact H-Scale).

A tool that is not installed here keeps its earlier result (the results file accumulates
across environments, as ``hscale interop``'s does).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hscale.cli.args import CommandParser
from hscale.files import write_json, write_text

DOCS = Path(__file__).resolve().parent.parent / "docs"
RESULTS = DOCS / "checkpoint-survey.json"
DOC = DOCS / "checkpoints.md"
BEGIN, END = "<!-- survey:begin -->", "<!-- survey:end -->"


@dataclass(frozen=True)
class Tool:
    label: str
    package: str | None  # the distribution whose version is recorded; None: this project
    calls: str
    build: Callable[[Path, Path, Path], None]  # (original, out, h file) -> checkpoint in out
    with_hessian: bool = False


def _load(original: Path):
    import torch
    from transformers import AutoModel
    return AutoModel.from_pretrained(original, dtype=torch.float32)


def build_llmcompressor(original: Path, out: Path, _h: Path) -> None:
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    model = _load(original)
    oneshot(model=model, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16"))
    model.save_pretrained(out, save_compressed=True)


def build_modelopt(original: Path, out: Path, _h: Path) -> None:
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    model = _load(original)
    mtq.quantize(model, mtq.W4A16_NVFP4_CFG, forward_loop=None)
    with torch.inference_mode():
        export_hf_checkpoint(model, export_dir=out)


def build_hscale(fmt: str) -> Callable[[Path, Path, Path], None]:
    def build(original: Path, out: Path, h: Path) -> None:
        from hscale.quantize import quantize_model
        quantize_model(model_dir=str(original), out=str(out), pipeline="rtn", method="hscale",
                       format=fmt, hessian=str(h), progress=False)
    return build


TOOLS = (
    Tool("llm-compressor", "llmcompressor",
         'oneshot(QuantizationModifier(targets="Linear", scheme="NVFP4A16")), '
         "save_pretrained(save_compressed=True)", build_llmcompressor),
    Tool("ModelOpt", "nvidia-modelopt", "mtq.quantize(W4A16_NVFP4_CFG), export_hf_checkpoint",
         build_modelopt),
    Tool("hscale quantize, compressed-tensors", None,
         "hscale quantize --method hscale --hessian h.safetensors", build_hscale(
             "compressed-tensors"), with_hessian=True),
    Tool("hscale quantize, ModelOpt", None,
         "hscale quantize --method hscale --format modelopt --hessian h.safetensors",
         build_hscale("modelopt"), with_hessian=True),
)


def _version(package: str | None) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package or "hscale-nvfp4")
    except PackageNotFoundError:
        return "?"


def survey(tools, results: dict, log=sys.stdout) -> dict:
    """Build and check each tool's checkpoint; ``results`` updated in place and returned."""
    from hscale.calibration import calibrate_minilm  # noqa: F401 - fails early without torch
    from hscale.check import check_checkpoint, format_report
    from hscale.models import minilm_model_dir, minilm_package_version
    from hscale.quantize import QuantizeRequest, calibrate_to_file
    original = minilm_model_dir()
    with tempfile.TemporaryDirectory(prefix="hscale-survey-") as work:
        work = Path(work)
        h = work / "h.safetensors"
        if any(tool.with_hessian for tool in tools):
            calibrate_to_file(QuantizeRequest(model_dir=str(original), progress=False), h,
                              full=True, force=True)
        for tool in tools:
            try:
                if tool.package is not None:
                    __import__(tool.package.replace("nvidia-", ""))
            except ImportError as exc:
                print(f"[{tool.label}] not installed here ({exc}): the earlier result is kept",
                      file=log, flush=True)
                continue
            out = work / tool.label.replace(" ", "-").replace(",", "")
            started = time.perf_counter()
            tool.build(original, out, h)
            built = time.perf_counter() - started
            report = check_checkpoint(out, original=original,
                                      hessian=h if tool.with_hessian else None)
            text = format_report(report).replace(str(out), tool.label.replace(" ", "-")
                                                 .replace(",", ""))
            text = text.replace(str(original), "MiniLM").replace(str(h), "h.safetensors")
            results[tool.label] = {
                "version": _version(tool.package), "calls": tool.calls,
                "model": f"all-MiniLM-L6-v2 ({minilm_package_version()})",
                "build_seconds": round(built, 1), "check_seconds": round(report.seconds, 1),
                "conforms": report.conforms, "totals": report.totals(), "report": text}
            print(f"[{tool.label}] {'conforms' if report.conforms else 'findings'}; "
                  f"check {report.seconds:.1f} s", file=log, flush=True)
    return results


def render(results: dict) -> str:
    """The docs section: a summary table, then each tool's report as ``hscale check`` prints it."""
    lines = [BEGIN, "", "Regenerate with `python -m hscale.checkpoint_survey` "
             "(hscale/checkpoint_survey.py); the figures are in docs/checkpoint-survey.json.",
             "", "| tool | version | what it calls | verdicts | findings | check time |",
             "|---|---|---|---|---|---|"]
    for tool in TOOLS:
        entry = results.get(tool.label)
        if entry is None:
            lines.append(f"| {tool.label} | - | {tool.calls} | not run | | |")
            continue
        totals = entry["totals"]
        verdicts = ", ".join(f"{n} {v}" for v, n in totals["verdicts"].items())
        allowances = "; ".join(f"{a} {n}" for a, n in totals["allowances"].items())
        findings = ", ".join(f"{c} x{n}" for c, n in totals["findings_by_clause"].items()) \
            or "none"
        lines.append(f"| {tool.label} | {entry['version']} | `{tool.calls}` | {verdicts}"
                     + (f" (allowances: {allowances})" if allowances else "")
                     + f" | {findings} | {entry['check_seconds']} s |")
    for tool in TOOLS:
        entry = results.get(tool.label)
        if entry is None:
            continue
        lines += ["", f"#### {tool.label} {entry['version']}", "", "```", entry["report"],
                  "```"]
    lines += ["", END]
    return "\n".join(lines)


def write_docs(results: dict, doc: Path = DOC) -> None:
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc}: no {BEGIN} ... {END} section to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    write_text(doc, head + render(results) + tail)


def main(argv=None) -> int:
    parser = CommandParser(prog="python tools/checkpoint_survey.py",
                           description="Check checkpoints of the bundled MiniLM made by real "
                                       "tools and regenerate docs/checkpoints.md's section.")
    parser.add_argument("--render", action="store_true", help="only rewrite the docs section")
    parser.add_argument("--tools", default=None,
                        help="comma-separated labels (default: every tool)")
    args = parser.parse_args(argv)
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if not args.render:
        wanted = None if args.tools is None else set(args.tools.split(","))
        tools = [t for t in TOOLS if wanted is None or t.label in wanted]
        if not tools:
            parser.error(f"--tools {args.tools}: no such tool; known: "
                         f"{', '.join(t.label for t in TOOLS)}")
        survey(tools, results)
        write_json(RESULTS, results)
    write_docs(results)
    print(f"written: {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
