"""``hscale interop``: the real NVFP4 libraries through the conformance suite, and
docs/interop.md regenerated from what they did.

For each adapter of ``hscale.backends.interop`` whose library imports here:

1. the conformance suite under ``exact`` (its RTN tests: the libraries have no H-Scale search),
   in a subprocess as a vendor runs it, wall time recorded;
2. under ``faithful`` with every allowance, to learn which ones it needs (those used), then with
   only those: what still fails; a library with its own scale rule (an MSE observer) under
   ``format`` instead;
3. the allowances counted group by group, by the one diagnoser, on the level-0 golden vectors,
   on a seeded level-2 set of more than 10^6 groups, and on every Linear of the bundled
   all-MiniLM-L6-v2; and the groups that differ from the reference under ``exact``;
4. one example in hex of every clause it breaks under ``exact`` (a level-0 vector group).

Results accumulate in docs/interop-results.json, entry by adapter, so that libraries living in
different environments (fouroversix needs its own build) can be measured one environment at a
time; ``--render`` rewrites docs/interop.md from that file alone.
"""

from __future__ import annotations

import argparse
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

from hscale.vectors.formats import write_text_atomically

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "interop-results.json"
DOC = ROOT / "docs" / "interop.md"
PREFIX = "hscale.backends.interop."
LEVEL2_SEED, LEVEL2_CASES = 20261122, 300


@dataclass(frozen=True)
class Adapter:
    label: str
    spec: str          # module:factory under hscale.backends.interop
    library: str       # the pip distribution
    profile: str       # faithful: the spec's scale rule; format: the library's own rule
    note: str = ""


ADAPTERS = (
    Adapter("torchao", "torchao_nvfp4:create", "torchao", "faithful",
            "NVFP4Tensor.to_nvfp4 with per_tensor_amax_to_scale"),
    Adapter("torchao, single level", "torchao_nvfp4:create_single_level", "torchao", "faithful",
            "NVFP4Tensor.to_nvfp4 without a per-tensor scale: s_g = 1, another format"),
    Adapter("compressed-tensors", "compressed_tensors_nvfp4:create", "compressed-tensors",
            "faithful", "generate_gparam, calculate_qparams, NVFP4PackedCompressor.compress"),
    Adapter("llm-compressor min-max", "llmcompressor_nvfp4:create", "llmcompressor", "faithful",
            "the memoryless_minmax observer, then compressed-tensors' packing"),
    Adapter("llm-compressor MSE", "llmcompressor_nvfp4:create_mse", "llmcompressor", "format",
            "the memoryless_mse observer: its own scale search"),
    Adapter("llm-compressor expanded MSE", "llmcompressor_nvfp4:create_expanded_mse",
            "llmcompressor", "format",
            "nvfp4_expanded_mse (also what its 'fouroversix' observer name selects)"),
    Adapter("ModelOpt", "modelopt_nvfp4:create", "nvidia-modelopt", "faithful",
            "NVFP4QTensor.quantize, the dynamic export path"),
    Adapter("fouroversix", "fouroversix_nvfp4:create", "fouroversix", "faithful",
            "its PyTorch reference quantize_to_fp4 (static_6, and mse for the 4over6 init)"),
    Adapter("AutoRound", "autoround_nvfp4:create", "auto-round", "faithful",
            "calculate_gparam, nv_fp4, QuantLinear.pack"),
    Adapter("FP-Quant", "fpquant_nvfp4:create", "fp-quant", "faithful",
            "forward_quantize through QuTLASS's fusedQuantizeNv"),
)
# GPU-only kernels: listed, with why they were not run, until a run on a GPU measures them.
GPU_ONLY = (
    ("FlashInfer", "fp4_quantize: CUDA kernels only; the lent GPU machine has no network to "
                   "install flashinfer and its wheel is far larger than what one call may carry"),
    ("TransformerEngine", "NVFP4 quantization is a CUDA kernel (transformer_engine.pytorch); "
                          "not installable on the lent GPU machine (no network)"),
    ("vLLM", "its NVFP4 quantize kernels (scaled_fp4_quant) are CUDA only; not installable on "
             "the lent GPU machine (no network)"),
)


# --------------------------------------------------------------------------------------------
# the suite, as a vendor runs it
# --------------------------------------------------------------------------------------------

def run_suite(spec: str, profile: str, allowances=(), work: Path | None = None) -> dict:
    """The conformance report of one subprocess run, with its wall time."""
    work = Path(work or tempfile.mkdtemp(prefix="hscale-interop-"))
    report = work / f"{profile}-{len(allowances)}.json"
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "conformance"), "-q", "-p",
           "no:cacheprovider", "--self-tests", "off", "--backend", PREFIX + spec, "--profile",
           profile, "--hypothesis-profile", "ci", "--conformance-report", str(report)]
    for allowance in allowances:
        cmd += ["--allow", allowance]
    env = dict(os.environ, HSCALE_CONFORMANCE_CHILD="1", PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if not report.is_file():
        raise RuntimeError(f"the suite wrote no report for {spec} ({profile}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    data = json.loads(report.read_text())
    return {"seconds": round(seconds, 1), "tests": data["tests"],
            "clauses": {c: {k: v for k, v in row.items() if k != "failing" and v}
                        for c, row in data["clauses"].items()},
            "violations": {c: len(ids) for c, ids in data["violations"].items()},
            "allowance_uses": data["allowance_uses"], "allowances": list(allowances)}


# --------------------------------------------------------------------------------------------
# allowances counted group by group on data sets
# --------------------------------------------------------------------------------------------

def rtn_case(case, backend):
    """The case as the adapter can run it: RTN (and the max-abs init unless it has 4over6)."""
    init = case.init if case.init in backend.capabilities else "maxabs"
    if case.method == "rtn" and case.init == init:
        return case
    return case.with_(method="rtn", init=init, hessian_diag=None)


def judge(backend, cases, profile: str, allowances) -> dict:
    """Over ``cases``: groups; groups whose stored bytes (scale byte or packed codes) differ
    from the reference's, and tensors whose s_g does (each of their groups then decodes to other
    values); the allowances the faithful or format certificate used (counted) and what it still
    rejects (findings by clause); the calls the library failed."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import diagnose, observe
    convention = getattr(backend, "global_scale_convention", "multiplier")
    totals = Counter()
    uses = Counter()
    still = Counter()
    still_examples: dict = {}  # clause -> its first finding (a group's if any), in hex
    for case in cases:
        if isinstance(case.expected, Rejection):
            continue
        case = rtn_case(case, backend)
        (weight, h), options = case.call_args()
        totals["groups"] += weight.size // 16
        try:
            result = backend.quantize(weight, h, **options)
        except Exception:  # noqa: BLE001 - a library that fails on valid input: counted
            totals["calls failed"] += 1
            continue
        observed, structure = observe(result, case, convention)
        if observed is None:
            totals["unreadable results"] += 1
            continue
        expected = case.expected_outputs()
        rows, cols = weight.shape
        bytes_differ = np.asarray(observed.scale_bytes) != expected.scale_bytes
        packed_differ = (np.asarray(observed.packed) != expected.packed).reshape(
            rows, cols // 16, 8).any(axis=2)
        totals["groups with other bytes"] += int(np.count_nonzero(bytes_differ | packed_differ))
        if np.float32(observed.global_scale) != np.float32(expected.global_scale):
            totals["tensors with another s_g"] += 1
            totals["groups of those tensors"] += weight.size // 16
        relaxed = diagnose(case, observed, profile=profile, allowances=allowances)
        uses.update(relaxed.allowance_uses)
        for finding in relaxed.findings:
            still[finding.clause] += 1
            shown = still_examples.get(finding.clause)
            # the first finding of the clause, a group's rather than a whole tensor's
            if shown is None or ("group" not in shown and finding.group is not None):
                still_examples[finding.clause] = hex_example(case, expected, observed, finding)
    return {"totals": dict(totals), "allowance_uses": dict(uses),
            "still_failing": dict(still), "still_examples": still_examples}


def hex_example(case, expected, observed, finding) -> dict:
    """One finding in hex: the case, both s_g, the finding's words and, for a group's finding,
    the group's w (float32 bits) and the reference's and the observed scale byte and 8 packed
    bytes (under a relaxed profile the finding says what was expected of the library's own
    byte)."""
    from hscale.vectors import hexio
    example = {"case": case.id, "s_g": hexio.fp32_hex(expected.global_scale).upper(),
               "observed_s_g": hexio.fp32_hex(np.float32(observed.global_scale)).upper(),
               "finding": finding.render()}
    if finding.group is not None:
        r, i = finding.group
        example.update(
            group=[r, i],
            w=" ".join(f"{int(b):08X}" for b in np.asarray(
                case.exact_weight()[r, 16 * i:16 * i + 16], np.float32).view(np.uint32)),
            expected=f"{int(expected.scale_bytes[r, i]):02X} "
                     f"{expected.packed[r, 8 * i:8 * i + 8].tobytes().hex().upper()}",
            observed=f"{int(observed.scale_bytes[r, i]):02X} "
                     f"{np.asarray(observed.packed)[r, 8 * i:8 * i + 8].tobytes().hex().upper()}")
    return example


def level0_cases():
    from hscale.vectors import load_vectors
    from hscale.vectors.cli import DEFAULT_LEVEL0_DIR
    return [case for _, case in load_vectors(DEFAULT_LEVEL0_DIR).values()
            if case.pipeline == "quantize"]  # (the GPTQ cases are about the reference's GPTQ)


def level2_set():
    from hscale.vectors.sweeps import level2_cases
    cases = level2_cases(LEVEL2_SEED, cases=LEVEL2_CASES, max_rows=256, max_groups=64)
    return cases


def minilm_cases():
    from hscale.checkpoint import SafetensorsModel
    from hscale.judge.cases import Case
    from hscale.models import minilm_model_dir
    from hscale.quantize_model import architecture_linears
    directory = minilm_model_dir()
    source = SafetensorsModel(directory)
    return [Case(id=name, weight=source.array(f"{name}.weight").astype(np.float32),
                 method="rtn", title=f"MiniLM {name}")
            for name in architecture_linears(directory) if f"{name}.weight" in source.info]


def examples(backend) -> dict:
    """clause -> one level-0 group the adapter gets wrong under exact, in hex."""
    level0 = judge(backend, level0_cases(), "exact", ())
    return {clause: example for clause, example in level0["still_examples"].items()
            if "group" in example}


# --------------------------------------------------------------------------------------------
# one adapter, end to end
# --------------------------------------------------------------------------------------------

def measure(adapter: Adapter, full: bool = True, out=sys.stdout, earlier: dict | None = None,
            counts_only: bool = False) -> dict:
    import warnings

    from hscale.backends import get
    from hscale.judge.profiles import ALLOWANCES
    backend = get(PREFIX + adapter.spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok, why = backend.available()
    entry = {"label": adapter.label, "adapter": PREFIX + adapter.spec, "library": adapter.library,
             "calls": adapter.note, "version": backend.version, "profile": adapter.profile,
             "date": datetime.date.today().isoformat(),
             "environment": f"Python {platform.python_version()}, {platform.machine()}"}
    if not ok:
        entry["not_run"] = why
        return entry
    log = lambda text: print(f"[{adapter.label}] {text}", file=out, flush=True)  # noqa: E731
    if counts_only and earlier and "exact" in earlier:
        entry.update({k: earlier[k] for k in ("exact", "format", "faithful_all",
                                              "minimal_allowances", "faithful") if k in earlier})
        return _counts(entry, backend, adapter.profile,
                       tuple(entry.get("minimal_allowances", ())), full, log)
    work = Path(tempfile.mkdtemp(prefix="hscale-interop-"))
    exact = run_suite(adapter.spec, "exact", work=work)
    entry["exact"] = exact
    log(f"exact: {exact['tests']} in {exact['seconds']} s")
    if adapter.profile == "format":
        entry["format"] = run_suite(adapter.spec, "format", work=work)
        minimal = ()
        log(f"format: {entry['format']['tests']}")
    else:
        every = run_suite(adapter.spec, "faithful", tuple(ALLOWANCES), work=work)
        minimal = tuple(a for a in ALLOWANCES if every["allowance_uses"].get(a))
        entry["faithful_all"] = every
        entry["minimal_allowances"] = list(minimal)
        entry["faithful"] = run_suite(adapter.spec, "faithful", minimal, work=work)
        log(f"faithful with {list(minimal)}: {entry['faithful']['tests']}")
    return _counts(entry, backend, adapter.profile, minimal, full, log)


def _counts(entry, backend, profile, minimal, full, log) -> dict:
    """The allowance counts on the data sets and the hex examples, into ``entry``."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry["examples"] = examples(backend)
        sets = {"level-0 vectors": level0_cases()}
        if full:
            sets["level-2, seeded"] = level2_set()
            sets["MiniLM Linears"] = minilm_cases()
        entry["counts"] = {}
        for name, cases in sets.items():
            start = time.perf_counter()
            entry["counts"][name] = judge(backend, cases, profile, minimal)
            log(f"{name}: {entry['counts'][name]['totals']} "
                f"({time.perf_counter() - start:.0f} s)")
    return entry


# --------------------------------------------------------------------------------------------
# docs/interop.md
# --------------------------------------------------------------------------------------------

def cell(entry: dict, clause: str) -> str:
    """pass / the allowances that excuse it / fail, for one clause: counted in tests whose
    failure cites the clause (a test may cite several)."""
    from hscale.judge.findings import plural
    from hscale.judge.profiles import ALLOWANCES
    ran = sum(entry["exact"]["clauses"].get(clause, {}).get(k, 0)
              for k in ("passed", "failed", "error"))
    cited = entry["exact"]["violations"].get(clause, 0)
    if not cited:
        return "pass" if ran else "n/a"
    relaxed = entry.get("faithful") or entry.get("format") or {}
    still = relaxed.get("violations", {}).get(clause, 0)
    if still:
        return f"**fail** ({plural(still, 'test')})"
    names = [a for a in entry.get("minimal_allowances", []) if ALLOWANCES[a].clause == clause]
    uses = relaxed.get("allowance_uses", {})
    if names:
        return "allow " + ", ".join(f"`{a}` ({uses.get(a, 0)})" for a in names)
    if entry.get("format"):
        return f"not judged by format ({cited} exact)"
    return f"excused by the allowances ({cited} exact)"


def still_rejected_block(entry: dict) -> list:
    """What the adapter's profile still rejects with its allowances: the first finding of each
    clause over the data sets in order, in hex."""
    first: dict = {}
    for data, count in entry.get("counts", {}).items():
        for clause, example in sorted(count.get("still_examples", {}).items()):
            first.setdefault(clause, (data, example))
    if not first:
        return []
    profile = entry["profile"] + (" with its allowances" if entry.get("minimal_allowances")
                                  else "")
    lines = ["", f"Still rejected under {profile}: the first finding of each clause (w as "
             "float32 bits; the reference's and the observed scale byte, then the 8 packed "
             "bytes; the finding says what the clause expected):", "", "```"]
    for clause, (data, ex) in sorted(first.items()):
        if "group" in ex:
            lines += [f"{clause} ({data}): case {ex['case']} group (r={ex['group'][0]}, "
                      f"i={ex['group'][1]})", f"  w = {ex['w']}",
                      f"  s_g {ex['s_g']} (observed {ex['observed_s_g']}); reference "
                      f"{ex['expected']}; observed {ex['observed']}"]
        else:
            lines += [f"{clause} ({data}): case {ex['case']} (the tensor)",
                      f"  s_g {ex['s_g']} (observed {ex['observed_s_g']})"]
        lines.append(f"  {ex['finding'][:300]}")
    return lines + ["```"]


def render(results: dict) -> str:
    from hscale import __version__
    from hscale.judge.clauses import clause_ids
    entries = [results[a.label] for a in ADAPTERS if a.label in results]
    measured = [e for e in entries if "exact" in e]
    lines = [
        "# Interop: the real NVFP4 libraries through the conformance suite",
        "",
        "Generated by `hscale interop` (hscale.interop) from docs/interop-results.json; do not "
        "edit by hand. Each library runs behind an adapter of `hscale.backends.interop` that "
        "calls its production functions (named below) and nothing else; the suite judges what "
        "the library produced by the spec, clause by clause (docs/spec.md; the allowances are "
        "its section 7).",
        "",
        f"hscale-nvfp4 {__version__}. Dates and environments per library below; CPU only "
        "(the GPU-only kernels are listed at the end with why they were not run).",
        "",
        "## Check your own implementation in five minutes",
        "",
        "1. Write an adapter (docs/backends.md, 20 lines): a `quantize(weight, hessian_diag, "
        "*, method, init, K, U, scale_ceiling, global_scale)` that calls your code and returns "
        "an object with `packed` (uint8 (m, n/2), element 2i in the low nibble) or `codes`, "
        "`scale_bytes` (uint8 (m, n/16)) and `global_scale` (the multiplier; set "
        "`global_scale_convention = \"reciprocal\"` if you store 6*448/amax). Raise any "
        "ValueError or TypeError for bad input. Declare `capabilities = frozenset({\"rtn\"})` "
        "unless you implement H-Scale's search.",
        "2. `pytest conformance --backend mymodule:create --self-tests off` (the exact profile: "
        "bit-identical to the spec). "
        + (f"On this machine that took {min(e['exact']['seconds'] for e in measured):.0f} to "
           f"{max(e['exact']['seconds'] for e in measured):.0f} s for the libraries below."
           if measured else ""),
        "3. Where it fails, each failure names the clause and the group, in hex. If the "
        "difference is one of section 7's known divergences, `--profile faithful --allow NAME` "
        "says whether that is all; `--profile format` judges only the format if your scale rule "
        "is your own. `hscale vectors check --observed FILE` does the same from a file of "
        "results, without Python.",
        "",
        "## Libraries",
        "",
        "| library | adapter | version | calls | exact | allowances needed (faithful) | "
        "still failing with them |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        adapter = f"`{e['adapter'].replace(PREFIX, '')}`"
        if "exact" not in e:
            lines.append(f"| {e['label']} | {adapter} | {e['version']} | {e['calls']} | "
                         f"not run: {e.get('not_run', '')} | | |")
            continue
        exact = e["exact"]["tests"]
        relaxed = e.get("faithful") or e.get("format")
        allowances = ("(format profile: own scale rule)" if e["profile"] == "format" else
                      ", ".join(f"`{a}`" for a in e.get("minimal_allowances", [])) or "none")
        still = ", ".join(f"{c} {n}" for c, n in sorted(relaxed["violations"].items())) or "nothing"
        lines.append(f"| {e['label']} | {adapter} | {e['version']} | {e['calls']} | "
                     f"{exact.get('failed', 0)} failed, {exact.get('passed', 0)} passed "
                     f"({e['exact']['seconds']:.0f} s) | {allowances} | {still} |")
    lines += ["", "## Clause by clause", "",
              "Each cell: `pass` (no failure under exact cites the clause), the allowance "
              "that excuses it (groups and elements it forgave in the suite), **fail** (tests "
              "whose failure still cites it with every needed allowance), or n/a (no RTN test "
              "of it).", ""]
    header = "| clause | " + " | ".join(e["label"] for e in measured) + " |"
    lines += [header, "|---|" + "---|" * len(measured)]
    for clause in clause_ids():
        cells = [cell(e, clause) for e in measured]
        if all(c in ("pass", "n/a") for c in cells) and clause.startswith("HSCALE"):
            continue
        lines.append(f"| {clause} | " + " | ".join(cells) + " |")
    lines += ["", "## Counts: groups each allowance forgave", ""]
    for e in measured:
        lines += [f"### {e['label']}", "",
                  f"{e['version']}; {e['environment']}, {e['date']}. Profile "
                  f"`{e['profile']}`" + (f", allowances {', '.join(e['minimal_allowances'])}"
                                         if e.get('minimal_allowances') else "") + ".", "",
                  "| data | groups | groups with other bytes | tensors with another s_g "
                  "(their groups) | allowance uses | still rejected (findings) | library calls "
                  "failed |",
                  "|---|---:|---:|---:|---|---|---:|"]
        for name, count in e.get("counts", {}).items():
            totals = count["totals"]
            uses = ", ".join(f"{a} {n:,}" for a, n in sorted(count["allowance_uses"].items()))
            still = ", ".join(f"{c} {n:,}" for c, n in sorted(count["still_failing"].items()))
            lines.append(f"| {name} | {totals.get('groups', 0):,} | "
                         f"{totals.get('groups with other bytes', 0):,} | "
                         f"{totals.get('tensors with another s_g', 0)} "
                         f"({totals.get('groups of those tensors', 0):,}) | {uses or '-'} | "
                         f"{still or '-'} | {totals.get('calls failed', 0)} |")
        if e.get("examples"):
            lines += ["", "One group per clause it breaks under exact (level-0 vectors; w as "
                          "float32 bits; expected and observed as scale byte, then the 8 packed "
                          "bytes):", "", "```"]
            for clause, ex in sorted(e["examples"].items()):
                lines += [f"{clause}: case {ex['case']} group (r={ex['group'][0]}, "
                          f"i={ex['group'][1]})",
                          f"  w = {ex['w']}",
                          f"  s_g {ex['s_g']} (observed {ex['observed_s_g']}); expected "
                          f"{ex['expected']}; observed {ex['observed']}",
                          f"  {ex['finding'][:300]}"]
            lines += ["```"]
        lines += still_rejected_block(e)
        lines.append("")
    lines += ["## Not run", ""]
    for e in entries:
        if "exact" not in e:
            lines.append(f"- {e['label']} ({e['version']}): {e.get('not_run')}")
    for name, why in GPU_ONLY:
        lines.append(f"- {name}: {why}.")
    return "\n".join(lines) + "\n"


def chosen_adapters(text: str | None) -> list:
    """The adapters ``--adapters`` names: labels or module:factory specs, comma-separated. A
    label may hold a comma itself ("torchao, single level"): the longest run of pieces that
    names an adapter is taken."""
    if text is None:
        return list(ADAPTERS)
    known = {a.label: a for a in ADAPTERS} | {a.spec: a for a in ADAPTERS}
    pieces = [p.strip() for p in text.split(",")]
    chosen, unknown, i = set(), [], 0
    while i < len(pieces):
        for j in range(len(pieces), i, -1):
            if ", ".join(pieces[i:j]) in known:
                chosen.add(known[", ".join(pieces[i:j])].label)
                i = j
                break
        else:
            if pieces[i]:
                unknown.append(pieces[i])
            i += 1
    if unknown or not chosen:
        raise ValueError(f"no adapter {', '.join(repr(u) for u in unknown) or 'named'}; known: "
                         f"{'; '.join(a.label for a in ADAPTERS)}")
    return [a for a in ADAPTERS if a.label in chosen]


def main(argv=None) -> int:
    from hscale.cli import CommandParser  # one-line argument errors, exit 2
    parser = CommandParser(
        prog="hscale interop", description="Run the real NVFP4 libraries through the conformance "
                                           "suite and regenerate docs/interop.md.")
    parser.add_argument("--adapters", default=None,
                        help="comma-separated labels or module:factory names (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="count on the level-0 vectors only (no level-2 set, no MiniLM)")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite docs/interop.md from docs/interop-results.json")
    parser.add_argument("--counts-only", action="store_true",
                        help="keep the suite runs of the results file, recount the data sets "
                             "and the examples")
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--docs", default=str(DOC))
    args = parser.parse_args(argv)
    results_path = Path(args.results)
    try:
        results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    except (OSError, ValueError) as exc:
        print(f"hscale interop: --results {results_path}: unreadable ({exc})", file=sys.stderr)
        return 2
    if not args.render:
        try:
            chosen = chosen_adapters(args.adapters)
        except ValueError as exc:
            print(f"hscale interop: --adapters {args.adapters}: {exc}", file=sys.stderr)
            return 2
        for adapter in chosen:
            entry = measure(adapter, full=not args.quick, earlier=results.get(adapter.label),
                            counts_only=args.counts_only)
            if "not_run" in entry and "exact" in results.get(adapter.label, {}):
                print(f"[{adapter.label}] not available here ({entry['not_run']}): the "
                      "earlier measurement is kept", flush=True)
                continue
            results[adapter.label] = entry
            write_text_atomically(results_path, json.dumps(results, indent=1) + "\n")
    write_text_atomically(Path(args.docs), render(results))
    print(f"written: {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
