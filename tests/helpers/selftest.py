"""Running the installed suite on other backends in subprocesses, as a vendor runs it
(``pytest --pyargs hscale.conformance``, from a directory outside the repository), for the
kit's self-tests: the mutants must fail citing their clauses, the adapters pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from helpers.paths import REPO_ROOT



#: The quick subset the self-tests run: everything but the full models and the bundled real
#: layer; Hypothesis' "mutant" profile (25 examples, no shrinking).
FEW_EXAMPLES = ["-k", "not real_minilm_layer", "--hypothesis-profile", "mutant"]
QUICK = ["-m", "not slow", *FEW_EXAMPLES]  # (hscale conform --quick is the "-m not slow")


def suite_command(*args: str) -> list[str]:
    """The vendor's command line: the installed suite by its package name."""
    return [sys.executable, "-m", "pytest", "--pyargs", "hscale.conformance", "-q",
            "-p", "no:cacheprovider", *args]


#: A pytest plugin that writes every collected test's clause markers to a JSON file.
CLAUSE_DUMP = """
import json, os

def pytest_collection_finish(session):
    markers = {item.nodeid: [c for m in item.iter_markers("clause") for c in m.args]
               for item in session.items}
    with open(os.environ["CLAUSE_DUMP"], "w") as out:
        json.dump(markers, out)
"""


def collected_clause_markers(tmp_path: Path, *args: str) -> dict[str, list[str]]:
    """{node id: its clause markers} of the installed suite as collected with ``args`` (a
    backend, a --clause), in a subprocess outside the repository."""
    (tmp_path / "clause_dump.py").write_text(CLAUSE_DUMP, encoding="utf-8")
    dump = tmp_path / "markers.json"
    env = dict(os.environ, CLAUSE_DUMP=str(dump), PYTHONPATH=os.pathsep.join(
        filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(suite_command("--collect-only", "-p", "clause_dump", *args),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return json.loads(dump.read_text())


@dataclass
class Run:
    name: str
    backends: list[str]
    args: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    quick: bool = True
    conform: bool = False  # run as `hscale conform` (its exit code: 0 conforms, 1 does not)
    #: run only when the tests reading it are asked for (``pytest -m extended``): the kit's
    #: README test command leaves them out to stay within CI's time (tests/conftest.py)
    extended: bool = False
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""
    reports: dict = field(default_factory=dict)  # backend id -> report

    def command(self, report_dir: Path) -> list[str]:
        certificate = str(report_dir / self.name / "{backend}.json")
        backends = [arg for name in self.backends for arg in ("--backend", name)]
        if self.conform:
            return ([sys.executable, "-m", "hscale", "conform", *backends,
                     "--certificate", certificate, *self.args]
                    + (["--quick", "--", *FEW_EXAMPLES] if self.quick else []))
        return (suite_command("--certificate", certificate, *backends)
                + (QUICK if self.quick else []) + self.args)


def run_all(runs: list[Run], report_dir: Path, workers: int = 2, timeout: int = 900) -> list[Run]:
    report_dir.mkdir(parents=True, exist_ok=True)

    def one(run: Run) -> Run:
        env = dict(os.environ, **run.env)
        env.pop("CI", None)
        start = time.time()
        # From the reports directory, outside the repository: no ini file, as for a vendor.
        proc = subprocess.run(run.command(report_dir), cwd=report_dir, env=env, timeout=timeout,
                              capture_output=True, text=True)
        run.returncode = proc.returncode
        run.seconds = time.time() - start
        run.output = proc.stdout[-20000:] + proc.stderr[-5000:]
        for path in (report_dir / run.name).glob("*.json"):
            report = json.loads(path.read_text())
            run.reports[report["backend"]["id"]] = report
        return run

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, runs))


def summary(report: dict) -> str:
    tests = report.get("tests", {})
    return (f"{report['backend']['id']}: {report.get('verdict')}; passed {tests.get('passed', 0)}, failed "
            f"{tests.get('failed', 0)}, errors {tests.get('error', 0)}, skipped "
            f"{tests.get('skipped', 0)}; violations {sorted(report.get('violations', {}))}; "
            f"allowance uses {report.get('allowance_uses')}")


def certificate_of(runs, run_name, backend_id):
    """``(run, certificate)`` of one backend of one self-test run, failing with the run's
    output when it wrote none."""
    run = runs[run_name]
    report = run.reports.get(backend_id)
    assert report is not None, (f"run {run_name!r} wrote no certificate for {backend_id} (exit "
                                f"{run.returncode}):\n{run.output[-4000:]}")
    return run, report


def conforming_certificate(runs, run_name, backend_id):
    """``certificate_of``, failing with the certificate's summary and the run's output unless
    it says the backend conforms and the run exited 0."""
    run, report = certificate_of(runs, run_name, backend_id)
    assert report["verdict"] == "conforms" and run.returncode == 0, (
        f"{summary(report)}\n{run.output[-4000:]}")
    return run, report


# ------------------------------------------------------------------------------------------
# Every run of the self-tests, started together (longest first) by one session fixture
# ------------------------------------------------------------------------------------------

M = "hscale.conformance.mutants:"
MARK = "<!-- adapter-example -->"
ACTIVATION_MARK = "<!-- activation-adapter-example -->"

# mutant -> the clause its failures must cite under the exact profile
EXACT_EXPECT = {
    "round_half_away": "NVFP4-E2M1-2",
    "first_candidate_tie": "HSCALE-ARGMIN-1",
    "fp32_objective": "HSCALE-OBJ-1",
    "sequential_sum": "HSCALE-OBJ-1",
    "no_clip": "HSCALE-WIN-1",
    "sliding_window": "HSCALE-WIN-1",
    "negative_zero": "NVFP4-E2M1-3",
    "reciprocal_multiply": "NVFP4-E2M1-2",
    "zero_group_byte_one": "NVFP4-ZERO-1",
    "no_subnormal_scales": "NVFP4-INIT-1",
    "fp32_scale_division": "NVFP4-INIT-1",
    "reciprocal_global_scale": "NVFP4-GS-1",
    "low_precision_global_scale": "NVFP4-GS-1",
    "underflow_zero_groups": "NVFP4-E4M3-3",
}
# (mutant, the allowance that names its divergence, the clause it breaks without it,
#  another mutant the allowance must NOT excuse)
ALLOWED = [
    ("negative_zero", "negative-zero", "NVFP4-E2M1-3", "reciprocal_multiply"),
    ("reciprocal_multiply", "reciprocal-multiply", "NVFP4-E2M1-2", "negative_zero"),
    ("zero_group_byte_one", "zero-group-byte", "NVFP4-ZERO-1", "negative_zero"),
    ("no_subnormal_scales", "no-subnormal-scales", "NVFP4-INIT-1", "zero_group_byte_one"),
    ("fp32_scale_division", "fp32-scale-rounding", "NVFP4-INIT-1", "reciprocal_multiply"),
    ("reciprocal_global_scale", "reciprocal-global-scale", "NVFP4-GS-1", "negative_zero"),
    ("low_precision_global_scale", "low-precision-global-scale", "NVFP4-GS-1",
     "negative_zero"),  # (it covers reciprocal-global-scale's one-ulp s_g too, by design)
    ("underflow_zero_groups", "underflow-zero-group", "NVFP4-E4M3-3", "zero_group_byte_one"),
]

RTN_ONLY = '''
from myadapter import MyAdapter


class RtnOnly(MyAdapter):
    name = "rtnonly"
    capabilities = frozenset({"rtn"})


def create():
    return RtnOnly()
'''


# The docs' adapter as a kernel with the scale ceiling 448 built in (scale_ceilings, docs/
# backends.md): it refuses any other C, so a call with another one is seen (issue 39: the suite
# called it with C = 256 whenever s_g was given, and its exact-oracle test judged a case at the
# drawn ceiling after running it at 448).
ONLY_448 = '''
from myadapter import MyAdapter


class Only448(MyAdapter):
    name = "only448"
    scale_ceilings = (448.0,)

    def quantize(self, weight, hessian_diag=None, *, scale_ceiling=448.0, **options):
        if scale_ceiling != 448.0:
            raise ValueError("bad scale_ceiling: 448 is built in")
        return super().quantize(weight, hessian_diag, scale_ceiling=scale_ceiling, **options)


def create():
    return Only448()
'''

# A third party as a real library looks: plain ValueErrors that cite nothing of this project,
# and only packed codes, scale bytes and the global scale (the multiplier; a reciprocal cannot
# always hold the spec's s_g exactly, NVFP4-GS-4). Its numbers are the reference's: it must pass
# exact.
PLAIN = '''
from types import SimpleNamespace

import numpy as np

from hscale.reference import quantize


class Plain:
    name = "plain"
    version = "plain 1.0"
    capabilities = frozenset({"rtn", "scale-only", "hscale", "4over6"})
    zero_group_byte = 0x00

    def available(self):
        return True, ""

    def quantize(self, weight, hessian_diag=None, **options):
        try:
            q = quantize(weight, hessian_diag, **options)
        except ValueError:
            raise ValueError("bad input") from None
        scale_bytes = np.where(q.scale_bytes == 0, self.zero_group_byte, q.scale_bytes)
        return SimpleNamespace(packed=q.packed, scale_bytes=scale_bytes.astype(np.uint8),
                               global_scale=np.float32(q.global_scale))


class WrongZeroGroups(Plain):
    name = "plain-wrong"
    zero_group_byte = 0x38  # ModelOpt's 1.0: NVFP4-ZERO-1


def create():
    return Plain()


def create_wrong():
    return WrongZeroGroups()
'''

# One adapter of two kinds, as docs/backends.md says to declare them: its weight quantizer and
# its activation quantizer are the docs' two examples.
TWO_KINDS = '''
from myactivations import MyActivationQuantizer
from myadapter import MyAdapter


class TwoKinds(MyAdapter, MyActivationQuantizer):
    name = "two-kinds"
    version = "two-kinds 1.0"
    kinds = frozenset({"weight", "activation"})


def create():
    return TwoKinds()
'''


def adapter_source(mark: str = MARK) -> str:
    """An adapter example of docs/backends.md (the python block after the marker)."""
    import re
    text = (REPO_ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    assert mark in text, f"docs/backends.md lost its {mark} marker"
    block = re.search(r"```python\n(.*?)```", text[text.index(mark):], re.S)
    assert block, "no python block after the adapter marker in docs/backends.md"
    return block.group(1)


def mutant_id(mutant: str) -> str:
    """The backend id of a mutant of conformance/mutants.py in the certificates."""
    return "mutant-" + mutant.replace("_", "-")


def all_runs(tmp: Path, extended: bool = False) -> dict[str, Run]:
    """Every self-test run (``extended``: the opt-in ones too), started together, the full
    (not ``--quick``) runs first so that the two workers finish nearer together."""
    names = list(EXACT_EXPECT)
    half = len(names) // 2
    # a mutant's run stops once a test failed citing its clause (mutant_kernels.profile): the
    # certificate is decided, "does not conform" naming it; the identity runs every test
    stop = dict(tests_on_path(), HSCALE_KILLED_BY=json.dumps(
        {mutant_id(m): clause for m, clause in EXACT_EXPECT.items()}))
    killed = ["-p", "mutant_kernels.profile"]
    runs = [Run("exact", [M + "identity"] + [M + m for m in names[:half]], killed, env=stop),
            Run("exact-2", [M + m for m in names[half:]], killed, env=stop),
            # the faithful runs certify each allowance's mutant with the whole suite; the
            # default tier judges the same facts in process (tests/judge/test_allowances.py)
            Run("faithful", [M + "identity"] + [M + m for m, *_ in ALLOWED],
                ["--profile", "faithful"], extended=True)]
    pkg = tmp / "third_party"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "myadapter.py").write_text(adapter_source(), encoding="utf-8")
    (pkg / "rtnonly.py").write_text(RTN_ONLY, encoding="utf-8")
    (pkg / "only448.py").write_text(ONLY_448, encoding="utf-8")
    (pkg / "plain.py").write_text(PLAIN, encoding="utf-8")
    (pkg / "myactivations.py").write_text(adapter_source(ACTIVATION_MARK), encoding="utf-8")
    (pkg / "twokinds.py").write_text(TWO_KINDS, encoding="utf-8")
    env = {"PYTHONPATH": str(pkg)}
    runs += [Run("adapter", ["myadapter:create"], env=env),
             Run("rtnonly", ["rtnonly:create"], env=env),
             Run("only448", ["only448:create"],
                 ["-k", "test_exact_oracle or test_scales or test_formats"], env=env),
             Run("plain", ["plain:create", "plain:create_wrong"], env=env),
             Run("activation-adapter", ["myactivations:create"], env=env, conform=True),
             Run("two-kinds", ["twokinds:create"], ["--clause", "NVFP4-E2M1-1", "--clause",
                                                    "NVFP4-ACT-2"], env=env, conform=True,
                 extended=True)]
    for mutant, allowance, _, other in ALLOWED:
        runs.append(Run(f"faithful-{allowance}", [M + mutant, M + other],
                        ["--profile", "faithful", "--allow", allowance], extended=True))
    runs += vendor_runs() + activation_runs()
    runs += gemm_runs(tmp)
    chosen = sorted((run for run in runs if extended or not run.extended),
                    key=lambda run: run.quick)
    return {run.name: run for run in run_all(chosen, tmp / "reports")}


# ------------------------------------------------------------------------------------------
# Kernels written as a vendor writes them (tests/helpers/vendor_kernels.py), certified by hscale conform
# ------------------------------------------------------------------------------------------

V = "vendor_kernels:"
#: What the bf16 kernel's fp32 arithmetic needs (docs/spec.md section 7).
BF16_ALLOWANCES = ("fp32-scale-rounding", "reciprocal-multiply", "supplied-reciprocal")
BF16_FAITHFUL = ["--profile", "faithful"] + [a for name in BF16_ALLOWANCES
                                            for a in ("--allow", name)]
#: Each slip of the bf16 kernel, and the clause its certificate must name.
BF16_SLIPS = {"wrong_swizzle": ("vendor-bf16-wrong-swizzle", "NVFP4-PACK-3"),
              "ties_away": ("vendor-bf16-ties-away", "NVFP4-E2M1-2"),
              "bf16_reciprocal": ("vendor-bf16-reciprocal-in-bf16", "NVFP4-GS-1")}


#: What the engines' weight recipe needs, as one run under exact lists it at the default
#: Hypothesis budget (must-show 3; a run of 25 examples did not meet a caller's s_g without a
#: reciprocal reading back, and listed four).
ENGINES_ALLOWANCES = ("reciprocal-multiply", "underflow-zero-group", "fp32-scale-rounding",
                      "reciprocal-global-scale", "supplied-reciprocal")
ENGINES_FAITHFUL = ["--profile", "faithful"] + [a for name in ENGINES_ALLOWANCES
                                                for a in ("--allow", name)]


def tests_on_path() -> dict:
    """The environment of a run whose backends are modules of tests/ (vendor_kernels,
    activation_kernels, gemm_kernels)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH")]))}


def vendor_runs() -> list[Run]:
    env = tests_on_path()
    return [Run("vendor-exact-rtn", [V + "exact_rtn"], env=env, conform=True),
            # the vendor's full run (the full models in three dtypes: about 45 CPU s)
            Run("vendor-exact-rtn-full", [V + "exact_rtn"], env=env, quick=False, conform=True,
                extended=True),
            # hscale conform --quick as a vendor runs it (the ci profile), the full models apart
            Run("vendor-bf16", [V + "bf16_kernel"], BF16_FAITHFUL + ["--quick"], env=env,
                quick=False, conform=True),
            # the vendor's full run (the full models on bfloat16: about 55 CPU s)
            Run("vendor-bf16-full", [V + "bf16_kernel"], BF16_FAITHFUL, env=env, quick=False,
                conform=True, extended=True),
            Run("vendor-bf16-exact", [V + "bf16_kernel"], env=env, conform=True),
            Run("vendor-bf16-slips", [V + name for name in BF16_SLIPS], BF16_FAITHFUL, env=env,
                conform=True),
            # at the default budget (hscale conform --quick), as a vendor runs it: the
            # allowances a run lists depend on the examples it draws
            Run("vendor-engines-exact", [V + "engines_bf16_kernel"], ["--quick"], env=env,
                quick=False, conform=True, extended=True),
            Run("vendor-engines-faithful", [V + "engines_bf16_kernel",
                                            V + "engines_without_domain"],
                ENGINES_FAITHFUL + ["--quick"], env=env, quick=False, conform=True,
                extended=True)]


# ------------------------------------------------------------------------------------------
# Activation quantizers written as a vendor writes them (tests/helpers/activation_kernels.py)
# ------------------------------------------------------------------------------------------

A = "activation_kernels:"
#: Each recipe's independent implementation: its factory and backend id.
ACTIVATION_RECIPES = {"fast-math": ("fast_math", "vendor-act-fast-math"),
                      "exact": ("exact", "vendor-act-exact"),
                      "torchao": ("torchao", "vendor-act-torchao")}
#: Each slip of the fast-math kernel, and the clause its certificate must name.
ACTIVATION_SLIPS = {"ties_away": ("vendor-act-ties-away", "NVFP4-ACT-3"),
                    "no_saturation": ("vendor-act-no-saturation", "NVFP4-ACT-8"),
                    "truncated_scale": ("vendor-act-truncated-scale", "NVFP4-ACT-2"),
                    "signed_zero_lost": ("vendor-act-signed-zero-lost", "NVFP4-ACT-8"),
                    "wrong_swizzle": ("vendor-act-wrong-swizzle", "NVFP4-ACT-10")}
#: Fast-math kernels about the reciprocal's stated error (NVFP4-ACT-5): factory -> (backend id,
#: None where it conforms, else the clause it must break).
RECIPROCAL_BOUND = {"lower_reciprocals": ("vendor-act-lower-reciprocals", None),
                    "rcp6_two_below": ("vendor-act-rcp6-two-below", "NVFP4-ACT-2")}
#: The clause a recipe's bytes and codes are judged by (what a kernel of another recipe breaks).
RECIPE_CLAUSES = {"fast-math": ("NVFP4-ACT-2", "NVFP4-ACT-3"), "exact": ("NVFP4-ACT-6",),
                  "torchao": ("NVFP4-ACT-7", "NVFP4-ACT-8")}


def other_recipe_factory(implemented: str, declared: str) -> str:
    """``fast_math_as_exact``: the kernel of one recipe declaring another."""
    return f"{ACTIVATION_RECIPES[implemented][0]}_as_{ACTIVATION_RECIPES[declared][0]}"


def activation_runs() -> list[Run]:
    env = tests_on_path()
    own = [A + factory for factory, _ in ACTIVATION_RECIPES.values()]
    others = [A + other_recipe_factory(i, d) for i in ACTIVATION_RECIPES
              for d in ACTIVATION_RECIPES if i != d]
    return [Run("activation-recipes", own, env=env, conform=True),
            Run("activation-reciprocal-bound", [A + name for name in RECIPROCAL_BOUND],
                env=env, conform=True),
            Run("activation-other-recipes", others, env=env, conform=True, extended=True),
            Run("activation-slips", [A + name for name in ACTIVATION_SLIPS], env=env,
                conform=True, extended=True)]


# ------------------------------------------------------------------------------------------
# GEMMs written as a vendor writes them (tests/helpers/gemm_kernels.py), certified by hscale conform
# ------------------------------------------------------------------------------------------

G = "gemm_kernels:"
#: Independent GEMMs, each conforming under the accumulation model it declares.
GEMM_KERNELS = {"fp32_blocks": "gemm-fp32-blocks", "fp16_gemv": "gemm-fp16-gemv",
                "late_scale": "gemm-late-scale"}
#: fp32_blocks with one slip, and the clause its certificate must name most.
GEMM_SLIPS = {"fp16_accumulation": ("gemm-slip-fp16-accumulation", "NVFP4-GEMM-4"),
              "wrong_swizzle": ("gemm-slip-wrong-swizzle", "NVFP4-GEMM-2"),
              "scale_read_linear": ("gemm-slip-scale-read-linear", "NVFP4-GEMM-2"),
              "nibble_flipped": ("gemm-slip-nibble-flipped", "NVFP4-GEMM-2"),
              "scale_after_bf16": ("gemm-slip-scale-after-bf16", "NVFP4-GEMM-5"),
              "output_truncated": ("gemm-slip-output-truncated", "NVFP4-GEMM-6"),
              "crossed_scales": ("gemm-slip-crossed-scales", "NVFP4-GEMM-1"),
              "scales_in_bf16_elements": ("gemm-slip-scales-in-bf16-elements", "NVFP4-GEMM-5")}
#: The GEMM tests only (the kernels declare no other kind).
GEMM_ONLY = ["-k", "test_gemm"]


GEMM_MARK = "<!-- gemm-adapter-example -->"


def gemm_adapter_source() -> str:
    """The GEMM adapter example of docs/backends.md (the python block after its marker)."""
    import re
    text = (REPO_ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    assert GEMM_MARK in text, f"docs/backends.md lost its {GEMM_MARK} marker"
    block = re.search(r"```python\n(.*?)```", text[text.index(GEMM_MARK):], re.S)
    assert block, "no python block after the GEMM adapter marker in docs/backends.md"
    return block.group(1)


def gemm_runs(tmp: Path | None = None) -> list[Run]:
    env = tests_on_path()
    runs = [Run("gemm-kernels", [G + name for name in GEMM_KERNELS],
                ["--quick", "--", "--hypothesis-profile", "mutant", *GEMM_ONLY], env=env,
                quick=False, conform=True),
            Run("gemm-slips", [G + name for name in GEMM_SLIPS], GEMM_ONLY, env=env,
                extended=True)]
    if tmp is not None:  # the example of docs/backends.md, as a vendor copies it
        pkg = tmp / "gemm_third_party"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "mygemm.py").write_text(gemm_adapter_source(), encoding="utf-8")
        runs.append(Run("gemm-adapter", ["mygemm:create"],
                        ["--quick", "--", "--hypothesis-profile", "mutant", *GEMM_ONLY],
                        env={"PYTHONPATH": str(pkg)}, quick=False, conform=True))
    return runs
