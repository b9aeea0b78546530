"""The paper's table on a real trained decoder (docs/results.md, "A real decoder"): every method
quantizes the model through ``hscale quantize`` as a user runs it, and ``hscale eval``'s own
functions measure each checkpoint's perplexity and KL divergence from the original, over
several disjoint calibration subsets. A maintainer script, not shipped; its figures are
recorded in docs/results.md with the command (``tests/tools/test_real_decoder_table.py``, opt-in
marker ``table``, runs a small version of it).

    python tools/real_decoder_table.py texts  --work DIR [--subsets 5] [--per-subset 40]
    python tools/real_decoder_table.py run    --work DIR --model MODEL.gguf [--rows ...]
                                              [--context 512] [--windows 8] [--llama-cpp]
    python tools/real_decoder_table.py memory --work DIR --model MODEL.gguf [--rows ...]
                                              [--llama-cpp]
    python tools/real_decoder_table.py render --work DIR [--write docs/results.md]
                                              [--plot docs/fidelity/real_decoder.png]

``texts``: text nobody here wrote, from Debian's documentation packages (apt-get install
debian-handbook debian-policy): calibration from *The Debian Administrator's Handbook* (the
en-US HTML chapters' paragraphs of at least 200 characters, shuffled with seed 0 and dealt into
``--subsets`` disjoint subsets of ``--per-subset`` paragraphs), evaluation from the *Debian Policy
Manual* (policy.txt from its first chapter on, as shipped): two books, so the parts are
disjoint (checked: no calibration paragraph occurs in the evaluation text). Package versions,
files and SHA-256s go to ``DIR/texts.json``.

``run``: per calibration subset, ``hscale calibrate --full`` once (h and H, timed); then each
row's ``hscale quantize`` with ``--hessian`` (W4A4 rows calibrate inline: their activation
scales come from the forward pass), timed in a fresh process (wall seconds, peak resident
memory); each checkpoint evaluated in this process (``hscale.evaluation``: the kit's float32
decoding, the original's logits computed once and kept in ``DIR/reference-*``), then deleted.
``--llama-cpp`` adds RTN and H-Scale written as GGUF NVFP4 and run by llama.cpp against the
original GGUF in llama.cpp. Results accumulate in ``DIR/results.json``: a rerun skips what is
done. Progress and an ETA go to stderr.

``memory``: each row's peak resident memory, once, on calibration subset 0 (and ``hscale
calibrate --full``'s), each in a process of its own, measured by ``hscale.bench.peak`` (the
process's own VmHWM); the table's peak column comes from it alone.

``render``: the table (mean and 95% Student-t interval over the subsets; a data-free row has
one value, its interval over windows), as markdown on stdout or between the markers of
``--write``; ``--plot`` draws perplexity and KL per method.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

HANDBOOK = Path("/usr/share/doc/debian-handbook/html/en-US")
POLICY = Path("/usr/share/doc/debian-policy/policy.txt.gz")
POLICY_BODY_START = "1. About this manual\n********************"
MIN_PARAGRAPH = 200
SEED = 0

#: name -> (label, hscale quantize options, calibrated, scheme). Data-free rows (RTN,
#: scale-only, 4over6) run once; calibrated rows once per subset.
ROWS = {
    "rtn": ("RTN", ["--pipeline", "rtn", "--method", "rtn"], False, "w4a16"),
    "scale-only": ("scale-only (h = 1)", ["--pipeline", "rtn", "--method", "scale-only"], False,
                   "w4a16"),
    "hscale": ("H-Scale", ["--pipeline", "rtn", "--method", "hscale"], True, "w4a16"),
    "hscale-block": ("hscale-block", ["--pipeline", "rtn", "--method", "hscale-block"], True,
                     "w4a16"),
    "4over6": ("4over6", ["--pipeline", "4over6", "--method", "rtn"], False, "w4a16"),
    "4over6+hscale": ("4over6 + H-Scale", ["--pipeline", "4over6", "--method", "hscale"], True,
                      "w4a16"),
    "gptq": ("GPTQ", ["--pipeline", "gptq", "--method", "rtn"], True, "w4a16"),
    "gptq+hscale": ("GPTQ + H-Scale", ["--pipeline", "gptq", "--method", "hscale"], True,
                    "w4a16"),
    "w4a4-rtn": ("RTN, W4A4 emulated", ["--scheme", "w4a4", "--method", "rtn"], True, "w4a4"),
    "w4a4-hscale": ("H-Scale, W4A4 emulated", ["--scheme", "w4a4", "--method", "hscale"], True,
                    "w4a4"),
}
#: The rows also run inside llama.cpp (GGUF NVFP4, ``--llama-cpp``).
LLAMA_CPP_ROWS = ("rtn", "hscale")
#: What each row's share of the gap is measured against: its scheme's RTN.
BASELINE = {"w4a16": "rtn", "w4a4": "w4a4-rtn"}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def package_version(name: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"{name} is not installed: apt-get install {name}")
    return out.stdout.strip()


# --------------------------------------------------------------------------------------------
# texts
# --------------------------------------------------------------------------------------------

class Paragraphs(HTMLParser):
    """The text of every DocBook ``<div class="para">`` of a page, whitespace collapsed."""

    def __init__(self):
        super().__init__()
        self.stack, self.buffer, self.level, self.found = [], None, 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "div":
            para = "para" in (dict(attrs).get("class") or "").split()
            self.stack.append(para)
            if para and self.buffer is None:
                self.buffer, self.level = [], len(self.stack)

    def handle_endtag(self, tag):
        if tag == "div" and self.stack:
            if self.buffer is not None and len(self.stack) == self.level:
                self.found.append(" ".join("".join(self.buffer).split()))
                self.buffer = None
            self.stack.pop()

    def handle_data(self, data):
        if self.buffer is not None:
            self.buffer.append(data)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def texts(args) -> dict:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    pages = sorted(HANDBOOK.glob("*.html"))
    paragraphs = []
    for page in pages:
        parser = Paragraphs()
        parser.feed(page.read_text(encoding="utf-8"))
        paragraphs += [p for p in parser.found if len(p) >= MIN_PARAGRAPH]
    paragraphs = list(dict.fromkeys(paragraphs))  # a paragraph repeated in two pages: once
    random.Random(SEED).shuffle(paragraphs)
    need = args.subsets * args.per_subset
    if len(paragraphs) < need:
        raise SystemExit(f"{len(paragraphs)} paragraphs, {need} needed")
    policy = gzip.decompress(POLICY.read_bytes()).decode("utf-8")
    evaluation = policy[policy.index(POLICY_BODY_START):]
    (work / "evaluation.txt").write_text(evaluation, encoding="utf-8")
    subsets = []
    for k in range(args.subsets):
        chosen = paragraphs[k * args.per_subset:(k + 1) * args.per_subset]
        overlap = [p for p in chosen if p[:100] in evaluation]
        if overlap:
            raise SystemExit(f"calibration paragraph found in the evaluation text: {overlap[0]}")
        data = "".join(json.dumps({"text": p}) + "\n" for p in chosen).encode("utf-8")
        (work / f"calibration-{k}.jsonl").write_bytes(data)
        subsets.append({"file": f"calibration-{k}.jsonl", "paragraphs": len(chosen),
                        "characters": sum(map(len, chosen)), "sha256": sha256(data)})
    facts = {
        "calibration": {"package": "debian-handbook",
                        "version": package_version("debian-handbook"),
                        "title": "The Debian Administrator's Handbook (en-US HTML)",
                        "files": f"{HANDBOOK}/*.html ({len(pages)} pages)",
                        "rule": f"<div class=\"para\"> texts of >= {MIN_PARAGRAPH} characters, "
                                f"duplicates once, shuffled (Python random, seed {SEED}), dealt "
                                f"into {args.subsets} disjoint subsets of {args.per_subset}",
                        "paragraphs_available": len(paragraphs), "subsets": subsets},
        "evaluation": {"package": "debian-policy", "version": package_version("debian-policy"),
                       "title": "Debian Policy Manual (plain text)", "file": str(POLICY),
                       "rule": "from its first chapter ('1. About this manual') to the end, "
                               "as shipped",
                       "characters": len(evaluation),
                       "sha256": sha256(evaluation.encode("utf-8"))}}
    (work / "texts.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------

def timed(argv: list[str]) -> dict:
    """Wall seconds and peak resident memory (MiB, the process's own: ``hscale.bench.peak``,
    not wait4's ru_maxrss, which counts this process's size at the fork) of ``argv`` in a
    fresh process; a failure stops the table with the command's last error lines."""
    from hscale.bench.peak import measured_run
    with tempfile.TemporaryFile("w+") as errors:
        result = measured_run(argv, stdout=subprocess.DEVNULL, stderr=errors)
        if result["returncode"]:
            errors.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed ({result['returncode']}):\n"
                             f"{errors.read()[-3000:]}")
    return {"seconds": result["seconds"], "peak_rss_mib": result["peak_rss_mib"],
            "peak": "VmHWM"}


class KeptLogits:
    """The original's logits of each window, computed once by ``open`` (a runner, opened only
    when a window is missing) and kept as float32 .npy files under ``directory``."""

    def __init__(self, directory: Path, open_runner):
        self.directory, self.open_runner, self.runner = directory, open_runner, None
        directory.mkdir(parents=True, exist_ok=True)

    def logits(self, ids, first: int = 0):
        """The original's logits of the window ``ids`` from position ``first`` on (the runners'
        ``logits(ids, first)``); each window's whole logits are kept."""
        import torch
        key = sha256(np.asarray(ids, np.int64).tobytes())[:16]
        path = self.directory / f"{key}.npy"
        if not path.is_file():
            if self.runner is None:
                self.runner = self.open_runner()
            np.save(path, self.runner.logits(ids).numpy())
        return torch.from_numpy(np.load(path))[first:]

    def close(self):
        if self.runner is not None:
            self.runner.close()
            self.runner = None


def evaluation_windows(runner, text: str, args):
    from hscale.evaluation.text import cut_windows
    return cut_windows(runner.tokenize(text), args.context, args.windows, runner.bos)


def evaluate(path: Path, engine: str, reference: KeptLogits, text: str, args) -> dict:
    from hscale.evaluation.loaders import identify, open_runner
    from hscale.evaluation.perplexity import score_windows, scored_rows
    started = time.perf_counter()
    runner = open_runner(identify(path, "MODEL"), context=args.context, engine=engine,
                         loader="kit", threads=args.threads)
    try:
        windows = evaluation_windows(runner, text, args)
        figures = score_windows(runner, windows, scored_rows(reference, windows)).figures()
    finally:
        runner.close()
    figures["engine"] = runner.facts.get("engine")
    figures["activations"] = runner.facts.get("activations")
    figures["eval_seconds"] = round(time.perf_counter() - started, 1)
    figures["windows_sha256"] = sha256(windows.ids.tobytes())
    return figures


def evaluate_original(kept: KeptLogits, text: str, args) -> dict:
    """The original's own figures, from the logits it keeps for the other rows."""
    from hscale.evaluation.perplexity import score_windows
    started = time.perf_counter()
    kept.runner = kept.runner or kept.open_runner()
    windows = evaluation_windows(kept.runner, text, args)
    figures = score_windows(kept, windows).figures()
    figures.update(engine=kept.runner.facts.get("engine"), route=kept.runner.facts.get("route"),
                   eval_seconds=round(time.perf_counter() - started, 1),
                   windows_sha256=sha256(windows.ids.tobytes()))
    return figures


def jobs(args) -> list[tuple[str, int | None, str]]:
    """(row, subset or None, engine) in the order they run: the rows asked for, each followed
    by its llama.cpp runs where it has them (``--llama-cpp``)."""
    rows = args.rows.split(",") if args.rows else list(ROWS)
    out = []
    for row in rows:
        if row not in ROWS:
            raise SystemExit(f"--rows: {row!r} is not one of {', '.join(ROWS)}")
        subsets = range(args.subsets) if ROWS[row][2] else [None]
        engines = ("transformers", "llama.cpp") if args.llama_cpp and row in LLAMA_CPP_ROWS \
            else ("transformers",)
        out += [(row, k, engine) for engine in engines for k in subsets]
    return out


def run(args) -> dict:
    from hscale.evaluation.loaders import identify, open_runner
    work = Path(args.work)
    results, save = open_results(work)
    results.setdefault("calibration", {})
    results.setdefault("runs", {})
    results["setup"] = {"model": str(args.model), "context": args.context,
                        "windows": args.windows, "samples": args.per_subset,
                        "seq_len": args.seq_len, "texts": json.loads(
                            (work / "texts.json").read_text())}
    text = (work / "evaluation.txt").read_text(encoding="utf-8")
    (work / "checkpoints").mkdir(exist_ok=True)
    source = source_directory(work, args, results, save)
    references = {}

    def reference(engine: str) -> KeptLogits:
        if engine not in references:
            model = identify(args.model, "--model")
            references[engine] = KeptLogits(
                work / f"reference-{engine}-{args.context}",  # files named by their ids
                lambda: open_runner(model, context=args.context, engine=engine,
                                    threads=args.threads))
        return references[engine]

    for engine in ("transformers", "llama.cpp") if args.llama_cpp else ("transformers",):
        if engine not in results["runs"].setdefault("original", {}):
            log(f"the original in {engine}: its logits, kept")
            results["runs"]["original"][engine] = evaluate_original(
                reference(engine), text, args)
            save()
    planned = jobs(args)
    todo = [j for j in planned
            if str(j[1]) not in results["runs"].get(j[0], {}).get(j[2], {})]
    log(f"{len(planned)} runs planned, {len(todo)} to do")
    started = time.perf_counter()
    for done, (row, subset, engine) in enumerate(todo):
        if done:
            eta = (time.perf_counter() - started) / done * (len(todo) - done)
            log(f"[{done}/{len(todo)}] ETA {eta / 60:.0f} min")
        label = ROWS[row][0]
        argv, out = quantize_argv(work, source, (row, subset, engine), args,
                                  lambda k: hessian(work, source, k, args, results, save))
        log(f"{label}, subset {subset}, {engine}: quantize")
        quantize = timed(argv)
        log(f"  {quantize['seconds']} s, {quantize['peak_rss_mib']} MiB; evaluate")
        figures = evaluate(out, engine, reference(engine), text, args)
        if figures["windows_sha256"] != results["runs"]["original"][engine]["windows_sha256"]:
            raise SystemExit(f"{out}: its tokenizer cuts the text into other windows than the "
                             "original's")
        figures.update(quantize=quantize, argv=argv[2:])
        results["runs"].setdefault(row, {}).setdefault(engine, {})[str(subset)] = figures
        save()
        remove_output(out)
    for kept in references.values():
        kept.close()
    return {"runs": len(planned), "done": len(todo)}


def quantize_argv(work: Path, source: Path, job: tuple, args, hessian_of) -> tuple:
    """``(argv, out)`` of one job's ``hscale quantize`` (``hessian_of(subset)``: the path of
    the subset's h and H file, made when missing)."""
    row, subset, engine = job
    _, options, calibrated, scheme = ROWS[row]
    argv = [sys.executable, "-m", "hscale", "quantize", str(source), "--quiet", "--force",
            *options]
    if calibrated:
        data = work / f"calibration-{subset}.jsonl"
        argv += ["--calibration-data", str(data), "--samples", str(args.per_subset),
                 "--seq-len", str(args.seq_len)]
        if scheme != "w4a4":  # the activation scales need the forward pass itself
            argv += ["--hessian", str(hessian_of(subset))]
    # no dot in the name: hscale quantize names its report (and the kept h) after the
    # output's stem, which for "llama.cpp.gguf" would be "llama"
    out = work / "checkpoints" / f"{row}-{subset}-{engine.replace('.', '')}"
    if engine == "llama.cpp":
        out = out.with_suffix(".gguf")
        argv += ["--format", "gguf"]
    return argv + ["--out", str(out)], out


def remove_output(out: Path) -> None:
    """A job's checkpoint or GGUF file, its report and its kept h."""
    for written in out.parent.glob(f"{out.stem}*"):
        shutil.rmtree(written) if written.is_dir() else written.unlink()


def memory(args) -> dict:
    """Each row's peak resident memory, once (calibration subset 0), in a process of its own
    (``timed``): ``hscale quantize`` per row and engine, and ``hscale calibrate --full``, into
    ``results.json``'s "memory". Memory does not depend on the machine's load, so this may run
    beside anything; the seconds it records are not the table's."""
    work = Path(args.work)
    results, save = open_results(work)
    kept = results.setdefault("memory", {})
    source = source_directory(work, args, results, save)
    (work / "checkpoints").mkdir(exist_ok=True)
    if "calibrate --full" not in kept:
        path = work / "checkpoints" / "memory-hessian.safetensors"
        argv = calibrate_argv(work, source, 0, args, path)
        log("memory: hscale calibrate --full")
        kept["calibrate --full"] = dict(timed(argv), argv=argv[2:])
        path.unlink()
        save()
    args.subsets = 1  # subset 0 for the calibrated rows
    for job in jobs(args):
        key = f"{job[0]} {job[2]}"
        if key in kept:
            continue
        argv, out = quantize_argv(work, source, job, args,
                                  lambda k: work / f"hessian-{k}.safetensors")
        log(f"memory: {ROWS[job[0]][0]}, {job[2]}")
        kept[key] = dict(timed(argv), argv=argv[2:])
        log(f"  {kept[key]['peak_rss_mib']} MiB")
        remove_output(out)
        save()
    return {"measured": len(kept)}


def source_directory(work: Path, args, results: dict, save) -> Path:
    """What every run quantizes: the model directory itself, or for a GGUF model the Hugging
    Face directory ``hscale quantize FILE.gguf`` makes of it (``checkpoints.from_gguf``, the
    same dequantized weights, tokenizer and carried GGUF header), made once here instead of in
    every run (its time is recorded once, apart)."""
    from hscale.checkpoints.gguf import is_gguf_file
    if not is_gguf_file(args.model):
        return Path(args.model)
    source = work / "source"
    if not (source / "config.json").is_file():
        from hscale.checkpoints.from_gguf import write_model_directory
        log(f"{args.model}: dequantized into {source} (checkpoints.from_gguf)")
        started = time.perf_counter()
        shutil.rmtree(source, ignore_errors=True)
        written = write_model_directory(args.model, source)
        results["from_gguf"] = {"seconds": round(time.perf_counter() - started, 1),
                                "tensors": written.tensors, "bytes": written.bytes}
        save()
    return source


def calibrate_argv(work: Path, source: Path, subset: int, args, out: Path) -> list[str]:
    """``hscale calibrate --full`` of one calibration subset, h and H written to ``out``."""
    return [sys.executable, "-m", "hscale", "calibrate", str(source), "--full", "--quiet",
            "--calibration-data", str(work / f"calibration-{subset}.jsonl"),
            "--samples", str(args.per_subset), "--seq-len", str(args.seq_len),
            "--out", str(out), "--force"]


def open_results(work: Path) -> tuple[dict, object]:
    """``(results, save)``: ``work``'s results.json (empty if there is none yet) and the
    function that writes it back (to a temporary name, then renamed)."""
    path = work / "results.json"
    results = json.loads(path.read_text()) if path.is_file() else {}

    def save():
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(temporary, path)
    return results, save


def hessian(work: Path, source: Path, subset: int, args, results: dict, save) -> Path:
    """h and H of one calibration subset (``hscale calibrate --full``), made once and timed."""
    path = work / f"hessian-{subset}.safetensors"
    if not path.is_file():
        log(f"calibration subset {subset}: hscale calibrate --full")
        argv = calibrate_argv(work, source, subset, args, path)
        results["calibration"][str(subset)] = dict(timed(argv), argv=argv[2:])
        save()
    return path


# --------------------------------------------------------------------------------------------
# render
# --------------------------------------------------------------------------------------------

def interval(values) -> dict:
    from hscale.evaluation.intervals import t_interval
    return t_interval(values).as_dict()


def cell(figure: dict, digits: int, percent: bool = False) -> str:
    scale = 100 if percent else 1
    mean = f"{scale * figure['mean']:.{digits}f}"
    if figure["half_width"] is None:
        return mean
    return f"{mean} ± {scale * figure['half_width']:.{digits}f}"


def summarize(results: dict) -> list[dict]:
    """One entry per (row, engine): each figure's interval over the subsets (or its one value
    and its interval over windows), the shares of the baseline's gap closed, the costs."""
    runs, table = results["runs"], []
    calibration = results.get("calibration", {})
    memory = results.get("memory", {})
    for engine in ("transformers", "llama.cpp"):
        original = runs.get("original", {}).get(engine)
        if original is None:
            continue
        table.append({"row": "original", "label": "original (dequantized Q4_1)",
                      "engine": engine, "scheme": "-", "ppl": original["perplexity"],
                      "windows_ppl": original["perplexity"], "subsets": 0})
        for row, (label, _, calibrated, scheme) in ROWS.items():
            by_subset = runs.get(row, {}).get(engine)
            if not by_subset:
                continue
            keys = sorted(by_subset)
            base_runs = runs.get(BASELINE[scheme], {}).get(engine, {})
            entry = {"row": row, "label": label, "engine": engine, "scheme": scheme,
                     "subsets": len(keys) if calibrated else 0,
                     "ppl": interval([by_subset[k]["perplexity"]["mean"] for k in keys]),
                     "kld": interval([by_subset[k]["kld"]["mean"] for k in keys]),
                     "top1": interval([by_subset[k]["top1_agreement"]["mean"] for k in keys]),
                     "windows_ppl": by_subset[keys[0]]["perplexity"],
                     "windows_kld": by_subset[keys[0]]["kld"],
                     "seconds": float(np.median([by_subset[k]["quantize"]["seconds"]
                                                 for k in keys]))}
            uses_file = calibrated and scheme != "w4a4"
            if uses_file and calibration:
                entry["calibration_seconds"] = float(np.median(
                    [c["seconds"] for c in calibration.values()]))
            # peak memory from the "memory" pass only: the runs' own figures before it came
            # from wait4's ru_maxrss, which counted the table's process (see ``timed``)
            peaks = [memory.get(f"{row} {engine}", {}).get("peak_rss_mib")] + (
                [memory.get("calibrate --full", {}).get("peak_rss_mib")] if uses_file else [])
            if all(peak is not None for peak in peaks):
                entry["peak_rss_mib"] = max(peaks)
            if row != BASELINE[scheme] and base_runs:
                ppl_shares, kld_shares = [], []
                for k in keys:
                    base = base_runs.get(k) or base_runs.get("None")
                    if base is None:
                        continue
                    gap = base["perplexity"]["mean"] - original["perplexity"]["mean"]
                    ppl_shares.append((base["perplexity"]["mean"]
                                       - by_subset[k]["perplexity"]["mean"]) / gap)
                    kld_shares.append(1 - by_subset[k]["kld"]["mean"] / base["kld"]["mean"])
                if ppl_shares:
                    entry["ppl_share"] = interval(ppl_shares)
                    entry["kld_share"] = interval(kld_shares)
            table.append(entry)
    return table


def markdown(results: dict) -> str:
    lines = ["| method | scheme | engine | subsets | perplexity | KL from the original "
             "(nats/token) | share of RTN's perplexity gap closed | share of RTN's KL removed "
             "| top-1 agreement | quantize s (+ calibration s) | peak RSS MiB |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in summarize(results):
        if e["row"] == "original":
            lines.append(f"| {e['label']} | - | {e['engine']} | - | "
                         f"{e['ppl']['mean']:.3f} [{e['ppl']['low']:.2f}, "
                         f"{e['ppl']['high']:.2f}]ʷ | 0 | - | - | 100% | - | - |")
            continue
        single = e["subsets"] <= 1  # one value: its interval over the windows instead
        ppl = (f"{e['ppl']['mean']:.3f} [{e['windows_ppl']['low']:.2f}, "
               f"{e['windows_ppl']['high']:.2f}]ʷ" if single else cell(e["ppl"], 3))
        kld = (f"{e['kld']['mean']:.4f} [{e['windows_kld']['low']:.4f}, "
               f"{e['windows_kld']['high']:.4f}]ʷ" if single else cell(e["kld"], 4))
        ppl_share = cell(e["ppl_share"], 1, True) + "%" if "ppl_share" in e else "0 (baseline)"
        kld_share = cell(e["kld_share"], 1, True) + "%" if "kld_share" in e else "0 (baseline)"
        seconds = f"{e['seconds']:.0f}" + (f" (+ {e['calibration_seconds']:.0f})"
                                            if "calibration_seconds" in e else "")
        lines.append(f"| {e['label']} | {e['scheme'].upper()} | {e['engine']} | "
                     f"{e['subsets'] or '-'} | {ppl} | {kld} | {ppl_share} | {kld_share} | "
                     f"{cell(e['top1'], 1, True)}% | {seconds} | "
                     f"{format(e['peak_rss_mib'], ',') if 'peak_rss_mib' in e else '-'} |")
    return "\n".join(lines)


BEGIN, END = "<!-- real-decoder:begin -->", "<!-- real-decoder:end -->"



def render(args) -> dict:
    results = json.loads((Path(args.work) / "results.json").read_text())
    table = markdown(results)
    if args.write:
        path = Path(args.write)
        document = path.read_text()
        start, stop = document.index(BEGIN) + len(BEGIN), document.index(END)
        path.write_text(document[:start] + "\n" + table + "\n" + document[stop:])
    else:
        print(table)
    if args.plot:
        table_rows = summarize(results)
        subsets = max(e["subsets"] for e in table_rows)
        plot(table_rows, args.plot,
             f"{Path(results['setup']['model']).name}: NVFP4 methods, mean and 95% interval "
             f"over {subsets} calibration subsets (grey: data-free, one value)")
    return {"rows": len(summarize(results))}


def plot(table: list[dict], path: str, title: str) -> None:
    """Perplexity and KL per method (transformers): the mean and its 95% interval over the
    calibration subsets (grey: data-free rows, one value), the original's perplexity dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [e for e in table if e["row"] != "original" and e["engine"] == "transformers"]
    original = next(e for e in table if e["row"] == "original" and e["engine"] == "transformers")
    figure, axes = plt.subplots(1, 2, figsize=(11, 0.42 * len(rows) + 1.6), sharey=True)
    y = np.arange(len(rows))
    for axis, key, name in ((axes[0], "ppl", "perplexity"),
                            (axes[1], "kld", "KL from the original (nats/token)")):
        for i, e in enumerate(rows):
            axis.errorbar(e[key]["mean"], i, xerr=e[key]["half_width"] or 0, fmt="o",
                          capsize=3, color="#888" if e["subsets"] == 0 else "#287")
        axis.set_title(name, fontsize=10)
        axis.grid(axis="x", alpha=0.3)
    axes[0].axvline(original["ppl"]["mean"], color="k", lw=1, ls="--", label="original")
    axes[0].legend(fontsize=8, loc="lower right")
    axes[1].set_xlim(left=0)
    axes[0].set_yticks(y, [e["label"] for e in rows])
    axes[0].invert_yaxis()
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Software": None})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("texts")
    r = commands.add_parser("run")
    m = commands.add_parser("memory")
    d = commands.add_parser("render")
    for p in (t, r, m, d):
        p.add_argument("--work", required=True)
    for p in (t, r, m):
        p.add_argument("--subsets", type=int, default=5)
        p.add_argument("--per-subset", type=int, default=40)
    for p in (r, m):
        p.add_argument("--model", required=True)
        p.add_argument("--rows", default=None)
        p.add_argument("--seq-len", type=int, default=256)
        p.add_argument("--llama-cpp", action="store_true")
    r.add_argument("--context", type=int, default=512)
    r.add_argument("--windows", type=int, default=8)
    r.add_argument("--threads", type=int, default=None)
    d.add_argument("--write", default=None)
    d.add_argument("--plot", default=None)
    args = parser.parse_args(argv)
    result = {"texts": texts, "run": run, "memory": memory,
              "render": render}[args.command](args)
    print(json.dumps({"command": args.command, **result}, default=str)[:2000],
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
