"""Every command answers a user's mistake with one line on stderr that says what is wrong and the
exit code docs/cli.md documents (2), never a traceback; nothing runs before the arguments are
checked. The mistakes run in this process (tests/helpers/cli.py: the command's whole behaviour,
a traceback or a hang recorded), a few of them and the other tests in a fresh process, as a
user runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import hscale
from hscale.vectors import formats
from helpers.cli import hscale_here
from helpers.paths import REPO_ROOT
from helpers.selftest import suite_command

LEVEL0 = REPO_ROOT / "vectors" / "level0"
HSCALE = [sys.executable, "-m", "hscale.cli"]
GPU_BENCH = [sys.executable, str(REPO_ROOT / "tools" / "gpu_bench.py")]
USER_ERROR = 2


def run(command, cwd, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def selected_ids(request, test_name: str) -> set:
    """The ids of ``test_name``'s parameters that this session runs."""
    return {item.callspec.id for item in request.session.items
            if getattr(item, "originalname", None) == test_name and hasattr(item, "callspec")}


def run_selected(request, test_name: str, commands: dict, cwd) -> dict:
    """id -> result of the commands of ``test_name``'s parameters that this session runs,
    started together (each is a fresh interpreter, most of its time spent importing)."""
    chosen = selected_ids(request, test_name)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(run, command, cwd)
                   for key, command in commands.items() if key in chosen}
    return {key: future.result() for key, future in futures.items()}


def error_line(result, code=USER_ERROR) -> str:
    """The one line a command printed on stderr, after checking that it is one line, no
    traceback, and the exit code ``code``."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert result.returncode == code, (result.returncode, result.stderr)
    return lines[0]


def unavailable(name: str) -> bool:
    from hscale.backends import get
    return not get(name).available()[0]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Small bad inputs, one per mistake."""
    here = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((4, 32)) * 0.05).astype(np.float32)
    np.savez(here / "layer.npz", weight=weight, hessian_diag=rng.uniform(0, 10, 32))
    np.savez(here / "nokeys.npz", a=np.zeros(3))
    np.savez(here / "short_h.npz", weight=weight, hessian_diag=np.ones(5))
    np.savez(here / "objects.npz", weight=np.array([object()] * 4), hessian_diag=np.ones(4))
    (here / "text.npz").write_text("not an archive\n")
    (here / "empty.txt").write_text("")
    (here / "comments.txt").write_text("# my results\n\n   # none yet\n")
    (here / "binary.txt").write_bytes(bytes(range(128, 256)))
    (here / "a_file").write_text("")
    (here / "lonely.hex").write_text("// a set file without its .json\n")
    (here / "records.jsonl").write_text('{"prompt": "a text under another name"}\n')
    (here / "empty-dir").mkdir()
    return here


# -- the commands of the issue, and every other subcommand given a wrong argument -------------

CASES = [
    # (id, arguments, words the one line must hold)
    ("no-command", [], "the following arguments are required: command"),
    ("unknown-command", ["nosuch"], "invalid choice: 'nosuch'"),
    ("demo-missing-layer", ["demo", "--layer", "{in}/missing.npz"], "missing.npz: no such file"),
    ("demo-layer-without-keys", ["demo", "--layer", "{in}/nokeys.npz"],
     "no 'weight' and no 'hessian_diag' in the archive (it holds 'a')"),
    ("demo-layer-not-npz", ["demo", "--layer", "{in}/text.npz"], "text.npz: not an .npz archive"),
    ("demo-layer-directory", ["demo", "--layer", "{in}"], ": not a file"),
    ("demo-layer-object-array", ["demo", "--layer", "{in}/objects.npz"],
     "'weight' holds Python objects, not numbers"),
    ("demo-hessian-wrong-length", ["demo", "--layer", "{in}/short_h.npz"],
     "short_h.npz: hessian_diag"),
    ("demo-plot-missing-directory",
     ["demo", "--layer", "{in}/layer.npz", "--plot", "{in}/no/such/dir/plot.png"],
     "--plot {in}/no/such/dir/plot.png: the directory {in}/no/such/dir does not exist"),
    ("demo-plot-unknown-format", ["demo", "--layer", "{in}/layer.npz", "--plot", "{in}/p.foo"],
     "matplotlib cannot write .foo files"),
    ("demo-unknown-backend", ["demo", "--backend", "nosuch"], "backend 'nosuch'"),
    ("demo-bad-init", ["demo", "--init", "x"], "invalid choice: 'x'"),
    ("demo-K-zero", ["demo", "-K", "0"], "NVFP4-IN-3"),
    ("demo-U-too-large", ["demo", "-K", "4", "-U", "4"], "NVFP4-IN-3"),
    ("demo-K-not-a-number", ["demo", "-K", "x"], "invalid int value: 'x'"),
    ("bench-cols", ["bench", "--cols", "100"],
     "--cols 100: not a positive multiple of the group size 16"),
    ("bench-method", ["bench", "--methods", "gptq"], "'gptq' is not a method"),
    ("bench-no-method", ["bench", "--methods", ","], "--methods ',': no value given"),
    ("bench-rows", ["bench", "--rows", "0"], "--rows 0: a layer needs at least one row"),
    ("bench-reference-memory", ["bench", "--reference-memory", "4096"],
     "--reference-memory 4096: expected ROWSxCOLS"),
    ("bench-reference-memory-cols", ["bench", "--reference-memory", "64x100"],
     "not a positive multiple of the group size 16"),
    ("bench-repeat", ["bench", "--repeat", "0"], "--repeat 0: must be at least 1"),
    ("bench-seed", ["bench", "--seed", "-1"], "--seed -1: must be at least 0"),
    ("bench-unknown-backend", ["bench", "--backends", "nosuch"], "backend 'nosuch'"),
    ("bench-init", ["bench", "--init", "x"], "invalid choice: 'x'"),
    ("bench-rows-not-a-number", ["bench", "--rows", "x"], "invalid int value: 'x'"),
    ("vectors-no-command", ["vectors"], "the following arguments are required: COMMAND"),
    ("vectors-unknown-command", ["vectors", "nosuch"], "invalid choice: 'nosuch'"),
    ("explain-no-such-group", ["vectors", "explain", LEVEL0, "random-bf16-hscale", "99", "0"],
     "case random-bf16-hscale has 4 rows and 4 groups per row: there is no group (row 99, "
     "group 0)"),
    ("explain-negative-row", ["vectors", "explain", LEVEL0, "random-bf16-hscale", "-1", "0"],
     "there is no group (row -1, group 0)"),
    ("explain-no-such-case", ["vectors", "explain", LEVEL0, "nosuchcase"],
     "no case 'nosuchcase'"),
    ("explain-misspelt-case", ["vectors", "explain", LEVEL0, "random-normal-hcale"],
     "did you mean random-normal-hscale"),
    ("explain-missing-directory", ["vectors", "explain", "{in}/missing-dir", "x"],
     "missing-dir: no such directory"),
    ("verify-missing-directory", ["vectors", "verify", "{in}/missing-dir"],
     "missing-dir: no such directory"),
    ("verify-a-file", ["vectors", "verify", "{in}/a_file"], "a_file: not a directory"),
    ("verify-not-vectors", ["vectors", "verify", "{in}"], "no manifest.json"),
    ("generate-without-out", ["vectors", "generate"],
     "the following arguments are required: --out"),
    ("generate-out-under-a-file", ["vectors", "generate", "--out", "{in}/a_file/vectors"],
     "--out {in}/a_file/vectors: cannot create the directory"),
    ("generate-unknown-subset", ["vectors", "generate", "--out", "{in}/l1", "--level", "1",
                                 "--subset", "nosuch"], "no level-1 case ID starts with it"),
    ("generate-subset-of-level-0", ["vectors", "generate", "--out", "{in}/l0", "--subset", "x"],
     "--subset applies to level 1 only"),
    ("generate-cases-zero", ["vectors", "generate", "--out", "{in}/l2", "--level", "2",
                             "--cases", "0"], "--cases 0: must be at least 1"),
    ("generate-negative-seed", ["vectors", "generate", "--out", "{in}/l0", "--seed", "-1"],
     "--seed -1: must be at least 0"),
    ("generate-bad-level", ["vectors", "generate", "--out", "{in}/l0", "--level", "3"],
     "invalid choice: 3"),
    ("check-missing-observed", ["vectors", "check", "--observed", "{in}/missing.txt"],
     "missing.txt: No such file or directory"),
    ("check-empty-observed", ["vectors", "check", "--observed", "{in}/empty.txt"],
     "empty.txt: no observed results (the file is empty)"),
    ("check-comments-only", ["vectors", "check", "--observed", "{in}/comments.txt"],
     "comments.txt: no observed results (only comments and blank lines)"),
    ("check-binary-observed", ["vectors", "check", "--observed", "{in}/binary.txt"],
     "binary.txt: not a text file"),
    ("check-without-observed", ["vectors", "check"],
     "the following arguments are required: --observed"),
    ("check-errors-zero", ["vectors", "check", "--observed", "{in}/comments.txt", "--errors", "0"],
     "--errors 0: must be at least 1"),
    ("check-missing-directory", ["vectors", "check", "{in}/missing-dir", "--observed",
                                 "{in}/comments.txt"], "missing-dir: no such directory"),
    ("expect-out-missing-directory", ["vectors", "expect", "--out", "{in}/no/such/dir/x.txt"],
     "the directory {in}/no/such/dir does not exist"),
    ("expect-out-device", ["vectors", "expect", "--out", "/dev/null"],
     "--out /dev/null: is a device; refusing to replace it ('-' writes to standard output)"),
    ("check-unknown-profile", ["vectors", "check", "--observed", "{in}/comments.txt",
                               "--profile", "nosuch"],
     "--profile nosuch: profile 'nosuch': must be one of exact, faithful, format"),
    ("check-unknown-allowance", ["vectors", "check", "--observed", "{in}/comments.txt",
                                 "--profile", "faithful", "--allow", "nosuch"],
     "--profile faithful --allow nosuch: unknown allowance 'nosuch'; known: zero-group-byte"),
    ("check-allowance-under-exact", ["vectors", "check", "--observed", "{in}/comments.txt",
                                     "--allow", "negative-zero"],
     "allowances are valid only with the faithful or format profile"),
    ("check-set-without-json", ["vectors", "check", "{in}/lonely.hex", "--observed",
                                "{in}/comments.txt"],
     "lonely.hex: the set is read from its lonely.json (the authoritative form), which is not "
     "beside it"),
    ("generate-out-stdout", ["vectors", "generate", "--out", "-"],
     "--out -: generate writes a directory of files, not standard output"),
    ("clauses-negative-seed", ["vectors", "clauses", "--seed", "-1"],
     "--seed -1: must be at least 0"),
    ("quantize-missing-model", ["quantize", "{in}/no-model", "--out", "{in}/q"],
     "no-model: no such model directory"),
    ("quantize-not-a-model", ["quantize", "{in}", "--out", "{in}/q"],
     "no config.json (not a Hugging Face model directory)"),
    ("quantize-existing-out", ["quantize", "--out", "{in}", "--method", "rtn"],
     "exists; choose another --out or pass --force to replace it"),
    ("quantize-out-missing-parent", ["quantize", "--out", "{in}/no/such/q", "--method", "rtn"],
     "no such directory (the parent of --out)"),
    ("quantize-bad-pipeline", ["quantize", "--pipeline", "awq"], "invalid choice: 'awq'"),
    ("quantize-bad-format", ["quantize", "--format", "nvfp4"], "invalid choice: 'nvfp4'"),
    ("quantize-missing-data", ["quantize", "--out", "{in}/q", "--calibration-data",
                               "{in}/missing.txt"], "--calibration-data {in}/missing.txt: no such "
                                                    "file or directory"),
    ("quantize-device-gpu", ["quantize", "--out", "{in}/q", "--device", "gpu"],
     "--device gpu: one of cpu, cuda, cuda:N, auto"),
    ("quantize-bad-sequential", ["quantize", "--sequential", "sometimes"],
     "invalid choice: 'sometimes'"),
    ("quantize-jsonl-without-field", ["quantize", "--out", "{in}/q", "--calibration-data",
                                      "{in}/records.jsonl"],
     "--calibration-data {in}/records.jsonl, line 1: no field 'text' (--text-field names the "
     "field holding the text; this record has 'prompt')"),
    ("quantize-empty-data-directory", ["quantize", "--out", "{in}/q", "--calibration-data",
                                       "{in}/empty-dir"],
     "--calibration-data {in}/empty-dir: a directory with no .txt, .jsonl or .json files"),
    ("calibrate-device-gpu", ["calibrate", "--out", "{in}/h.safetensors", "--device", "gpu"],
     "--device gpu: one of cpu, cuda, cuda:N, auto"),
    ("quantize-calibration-dtype", ["quantize", "--out", "{in}/q", "--calibration-dtype",
                                    "float16"],
     "--calibration-dtype 'float16': one of float32, bfloat16"),
    ("quantize-missing-hessian", ["quantize", "--out", "{in}/q", "--hessian", "{in}/h.st"],
     "--hessian {in}/h.st: no such file"),
    ("quantize-unreadable-hessian", ["quantize", "--out", "{in}/q", "--hessian",
                                     "{in}/comments.txt"], "--hessian {in}/comments.txt: "
                                                           "unreadable"),
    ("quantize-act-order-without-gptq", ["quantize", "--out", "{in}/q", "--act-order"],
     "--act-order: only the gptq pipeline has a column order"),
    ("quantize-samples-zero", ["quantize", "--out", "{in}/q", "--samples", "0"],
     "--samples 0: must be a positive integer"),
    ("quantize-bad-shard-size", ["quantize", "--max-shard-size", "lots"],
     "'lots' is not a size such as 2GB or 512MB"),
    ("quantize-unknown-backend", ["quantize", "--out", "{in}/q", "--backend", "nosuch"],
     "backend 'nosuch'"),
    ("calibrate-without-out", ["calibrate"], "the following arguments are required: --out"),
    ("calibrate-existing-out", ["calibrate", "--out", "{in}/a_file"],
     "a_file exists; choose another --out or pass --force"),
    ("calibrate-missing-model", ["calibrate", "{in}/no-model", "--out", "{in}/h.safetensors"],
     "no-model: no such model directory"),
]


COMMANDS = {"demo", "bench", "vectors", "generate", "verify", "check", "expect", "explain",
            "clauses", "quantize", "calibrate"}


def _prog(arguments) -> str:
    """The command's name as its messages start: 'hscale vectors check' and so on."""
    words = ["hscale"]
    for argument in arguments[:2]:
        if argument not in COMMANDS:
            break
        words.append(argument)
    return " ".join(words)


# The commands the issue lists run in every session; the other wrong arguments (each a fresh
# interpreter, about a second of imports) are with the slow tests, which run by default.
LISTED_IN_THE_ISSUE = {
    "no-command", "unknown-command", "demo-missing-layer", "demo-layer-without-keys",
    "demo-layer-not-npz", "demo-hessian-wrong-length", "demo-plot-missing-directory",
    "demo-unknown-backend", "demo-bad-init", "bench-cols", "bench-method", "bench-rows",
    "bench-reference-memory", "explain-no-such-group", "explain-no-such-case",
    "verify-missing-directory", "generate-without-out", "check-missing-observed",
    "check-empty-observed", "check-comments-only", "sizes-not-a-multiple-of-16", "--help",
    "gpu_bench --help", "quantize-missing-model", "quantize-existing-out",
    "quantize-missing-hessian", "quantize-unreadable-hessian", "calibrate-existing-out"}


def params(idents, *values):
    """pytest params with these ids, slow unless the issue lists them."""
    return [pytest.param(ident, *rest, id=ident,
                         marks=() if ident in LISTED_IN_THE_ISSUE else pytest.mark.slow)
            for ident, *rest in zip(idents, *values)]


@pytest.fixture(scope="module")
def mistakes(request, inputs) -> dict:
    """ident -> the command's answer, run in this process (tests/helpers/cli.py: its whole
    behaviour but the interpreter around it; a traceback or a hang is recorded, not raised)."""
    chosen = selected_ids(request, "test_a_mistake_gets_one_line_and_exit_code_2")
    return {ident: hscale_here([str(a).format(**{"in": inputs}) for a in arguments], cwd=inputs)
            for ident, arguments, _ in CASES if ident in chosen}


@pytest.mark.parametrize("ident,arguments,words", params(*zip(*CASES)))
def test_a_mistake_gets_one_line_and_exit_code_2(mistakes, inputs, ident, arguments, words):
    result = mistakes[ident]
    assert result.returncode != "traceback", result.trace
    line = error_line(result)
    assert words.format(**{"in": inputs}) in line, line
    assert line.startswith(_prog(arguments) + ": "), line
    assert result.stdout == "", f"work was done before the mistake was seen:\n{result.stdout}"


@pytest.mark.parametrize("ident", ["no-command", "demo-missing-layer", "vectors-no-command"])
def test_a_mistake_in_a_fresh_process_gets_one_line_and_exit_code_2(inputs, ident):
    """What only a process shows: the entry point, the exit status the shell sees, the real
    standard streams; a few of CASES, run as a user runs them."""
    arguments, words = next((a, w) for i, a, w in CASES if i == ident)
    result = run(HSCALE + [str(a).format(**{"in": inputs}) for a in arguments], cwd=inputs)
    line = error_line(result)
    assert words.format(**{"in": inputs}) in line and line.startswith(_prog(arguments) + ": ")
    assert result.stdout == ""


def test_generate_into_proc_is_refused_in_one_line(inputs):
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system: the case of the issue is Linux's")
    line = error_line(run(HSCALE + ["vectors", "generate", "--out", "/proc/x"], cwd=inputs))
    assert "--out /proc/x: cannot create the directory" in line


# torch-cuda imports torch (seconds): with the slow tests.
CUDA_BACKENDS = ["cupy", pytest.param("torch-cuda", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", CUDA_BACKENDS)
def test_demo_on_a_backend_that_cannot_run_here(inputs, name):
    if not unavailable(name):
        pytest.skip(f"backend {name} can run on this machine")
    line = error_line(run(HSCALE + ["demo", "--backend", name], cwd=inputs))
    assert f"hscale demo: backend {name!r} is not available: " in line


@pytest.mark.parametrize("name", CUDA_BACKENDS)
def test_bench_on_a_named_backend_that_cannot_run_here(inputs, name):
    if not unavailable(name):
        pytest.skip(f"backend {name} can run on this machine")
    result = run(HSCALE + ["bench", "--backends", name], cwd=inputs)
    assert f"hscale bench: --backends {name}: cannot run here: " in error_line(result)
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["quantize", "calibrate"])
def test_cuda_device_without_cuda_is_refused_before_any_model_is_loaded(inputs, command):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: --device cuda would run")
    out = "{in}/q" if command == "quantize" else "{in}/h-cuda.safetensors"
    result = run(HSCALE + [command, "--out", out.format(**{"in": inputs}), "--device", "cuda"],
                 cwd=inputs)
    line = error_line(result)
    assert line.startswith(f"hscale {command}: --device cuda: no CUDA device here (torch "), line
    assert result.stdout == ""


def test_quantize_help_shows_the_default_backend_and_what_it_means_here(inputs):
    from hscale.pipelines import AUTO_BACKEND_RULE
    result = run(HSCALE + ["quantize", "--help"], cwd=inputs)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert f"default auto: the fastest here, {AUTO_BACKEND_RULE}" in text, text


def test_plot_without_matplotlib_says_how_to_install_it_before_the_work(inputs, tmp_path):
    """A matplotlib that cannot be imported (as where it is not installed): the demo says so
    and how to install it before it quantizes anything (no report on stdout)."""
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text(
        "raise ImportError('No module named matplotlib')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = run(HSCALE + ["demo", "--plot", tmp_path / "demo.png"], cwd=inputs, env=env)
    line = error_line(result)
    assert line == ('hscale demo: --plot needs matplotlib, which is not installed: '
                    'pip install "hscale-nvfp4[plot]" (or pip install matplotlib)')
    assert result.stdout == ""
    assert not (tmp_path / "demo.png").exists()


# -- python tools/gpu_bench.py: its arguments are checked before any GPU work ----------------

GPU_BENCH_CASES = [
    ("sizes-not-a-multiple-of-16", ["--sizes", "100"],
     "--sizes 100: not a positive multiple of the group size 16"),
    ("sizes-not-numbers", ["--sizes", "4096,big"], "expected comma-separated whole numbers"),
    ("config-without-init", ["--configs", "hscale"], "--configs hscale: expected METHOD:INIT"),
    ("config-unknown-method", ["--configs", "gptq:maxabs"], "'gptq' is not a method"),
    ("config-unknown-init", ["--configs", "hscale:minmax"], "'minmax' is not an init"),
    ("repeat-zero", ["--repeat", "0"], "--repeat 0: must be at least 1"),
    ("workers-zero", ["--workers", "0"], "--workers 0: must be at least 1"),
    ("replot-without-plot", ["--replot", "figures.json"], "--replot needs --plot PNG"),
    ("replot-missing-file", ["--replot", "{in}/missing.json", "--plot", "{in}/p.png"],
     "missing.json: No such file or directory"),
    ("replot-not-json", ["--replot", "{in}/comments.txt", "--plot", "{in}/p.png"],
     "not a JSON file of figures"),
    ("json-missing-directory", ["--json", "{in}/no/such/dir/f.json"], "does not exist"),
    ("unknown-option", ["--nosuch"], "unrecognized arguments: --nosuch"),
]


@pytest.fixture(scope="module")
def gpu_bench_mistakes(request, inputs) -> dict:
    return run_selected(request, "test_gpu_bench_mistake_gets_one_line",
                        {ident: GPU_BENCH + [a.format(**{"in": inputs}) for a in arguments]
                         for ident, arguments, _ in GPU_BENCH_CASES}, inputs)


@pytest.mark.parametrize("ident,words", params([c[0] for c in GPU_BENCH_CASES],
                                                [c[2] for c in GPU_BENCH_CASES]))
def test_gpu_bench_mistake_gets_one_line(gpu_bench_mistakes, inputs, ident, words):
    line = error_line(gpu_bench_mistakes[ident])
    assert line.startswith("python tools/gpu_bench.py: "), line
    assert words.format(**{"in": inputs}) in line, line


def test_gpu_bench_without_a_gpu_says_so_in_one_line(inputs):
    if not unavailable("cupy"):
        pytest.skip("CuPy and a CUDA device are present: the benchmark would run")
    line = error_line(run(GPU_BENCH + ["--sizes", "256"], cwd=inputs))
    assert "backend cupy cannot run here: " in line and "needs a CUDA GPU and CuPy" in line


# -- vectors expect: '-' is standard output; a device or a link is never replaced ------------

def test_expect_writes_to_standard_output_with_a_dash(tmp_path):
    result = run(HSCALE + ["vectors", "expect", LEVEL0, "--out", "-"], cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split()[1] == "gs" and len(lines) > 1500
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a file named '-' was written"


def test_expect_refuses_a_symbolic_link_and_a_device_and_replaces_nothing(tmp_path):
    target = tmp_path / "results.txt"
    target.write_text("mine\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    result = run(HSCALE + ["vectors", "expect", LEVEL0, "--out", link], cwd=tmp_path)
    line = error_line(result)
    assert line == (f"hscale vectors expect: --out {link}: is a symbolic link; refusing to "
                    "replace it (name the file it points to, or '-' for standard output)")
    assert link.is_symlink() and target.read_text() == "mine\n" and result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "results.txt"]
    if Path("/dev/null").exists():
        before = os.stat("/dev/null")
        line = error_line(run(HSCALE + ["vectors", "expect", LEVEL0, "--out", "/dev/null"],
                              cwd=tmp_path))
        assert "--out /dev/null: is a device; refusing to replace it" in line
        after = os.stat("/dev/null")
        assert (after.st_mode, after.st_rdev, after.st_ino) == \
            (before.st_mode, before.st_rdev, before.st_ino)


def test_generate_refuses_a_link_among_its_files_before_writing_any(tmp_path):
    out = tmp_path / "vectors"
    out.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text("keep\n")
    (out / "errors.json").symlink_to(target)
    result = run(HSCALE + ["vectors", "generate", "--out", out], cwd=tmp_path)
    assert "errors.json: is a symbolic link; refusing to replace it" in error_line(result)
    assert target.read_text() == "keep\n"
    assert sorted(p.name for p in out.iterdir()) == ["errors.json"]


# -- vectors check: the expected vectors are verified before anything is judged ---------------

@pytest.fixture()
def vectors_copy(tmp_path):
    target = tmp_path / "level0"
    shutil.copytree(LEVEL0, target)
    observed = tmp_path / "observed.txt"
    result = run(HSCALE + ["vectors", "expect", target, "--out", observed], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return target, observed


def _replace_listed(directory: Path, name: str, data: bytes) -> None:
    """Write a vector file and record its checksum in the manifest, as a careful forger would."""
    (directory / name).write_bytes(data)
    manifest = json.loads((directory / formats.MANIFEST).read_text())
    manifest["files"][name]["sha256"] = formats.sha256(data)
    (directory / formats.MANIFEST).write_text(formats.dumps(manifest))


def _check(directory, observed) -> subprocess.CompletedProcess:
    return run(HSCALE + ["vectors", "check", directory, "--observed", observed],
               cwd=directory.parent)


def test_check_passes_the_correct_results(vectors_copy):
    result = _check(*vectors_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 errors;" in result.stdout


def test_check_refuses_tampered_vectors_instead_of_blaming_a_correct_result(vectors_copy):
    directory, observed = vectors_copy
    name = "fp32_rtn_maxabs_C448.json"
    document = json.loads((directory / name).read_text())
    document["cases"][0]["expected"]["scale_bytes"][0] = "39"
    (directory / name).write_text(formats.dumps(document))
    result = _check(directory, observed)
    line = error_line(result)
    assert f"{directory / name}: its SHA-256 differs from manifest.json" in line
    assert result.stdout == "", "a result was judged against damaged vectors"


def test_check_refuses_a_truncated_npz(vectors_copy):
    directory, observed = vectors_copy
    name = "fp32_rtn_maxabs_C448.npz"
    (directory / name).write_bytes((directory / name).read_bytes()[:100])
    line = error_line(_check(directory, observed))
    assert f"{directory / name}: its SHA-256 differs from manifest.json" in line


@pytest.mark.parametrize("content,words", [
    (b"[]", "not a vector file (a JSON object with a 'cases' list is expected; found a JSON "
            "array)"),
    (b'{"format": "hscale-nvfp4-vectors"}', "not a vector file (a JSON object with a 'cases' "
                                            "list is expected; found no 'cases')"),
    (b"{not json", "not JSON"),
], ids=["a-list", "no-cases", "not-json"])
def test_check_names_a_malformed_vector_file(vectors_copy, content, words):
    directory, observed = vectors_copy
    name = "fp32_rtn_maxabs_C448.json"
    _replace_listed(directory, name, content)
    assert f"{directory / name}: {words}" in error_line(_check(directory, observed))


def test_check_names_the_file_and_case_of_a_malformed_case(vectors_copy):
    directory, observed = vectors_copy
    name = "fp32_rtn_maxabs_C448.json"
    document = json.loads((directory / name).read_text())
    case_id = document["cases"][1]["id"]
    del document["cases"][1]["inputs"]
    document["cases"][2]["inputs"]["weight"][0] = "zz"
    _replace_listed(directory, name, formats.dumps(document).encode())
    line = error_line(_check(directory, observed))
    assert line.endswith(f"{directory / name}: case {case_id}: no field 'inputs'"), line
    document["cases"][1] = 5
    _replace_listed(directory, name, formats.dumps(document).encode())
    assert f"{name}: cases[1]: not a JSON object" in error_line(_check(directory, observed))


def test_check_and_verify_refuse_a_manifest_that_is_not_one(vectors_copy):
    directory, observed = vectors_copy
    (directory / formats.MANIFEST).write_text("[]")
    for result in (_check(directory, observed),
                   run(HSCALE + ["vectors", "verify", directory], cwd=directory)):
        assert "manifest.json: not a vector manifest" in error_line(result)


# -- help, version, and the documentation of every command ------------------------------------

HELP = {" ".join(arguments): HSCALE + arguments for arguments in (
    [["--help"], ["demo", "--help"], ["bench", "--help"], ["vectors", "--help"]] +
    [["vectors", command, "--help"]
     for command in ("generate", "verify", "check", "expect", "explain", "clauses")])}
HELP["gpu_bench --help"] = GPU_BENCH + ["--help"]


@pytest.fixture(scope="module")
def helps(request, tmp_path_factory) -> dict:
    """The hscale commands' help in this process (test_version and the fresh-process mistakes
    run the entry point), the maintainer script's in its own."""
    where = tmp_path_factory.mktemp("h")
    tool = {key: command for key, command in HELP.items() if command[:len(HSCALE)] != HSCALE}
    answers = run_selected(request, "test_help_shows_no_markup", tool, where)
    chosen = selected_ids(request, "test_help_shows_no_markup")
    answers.update({key: hscale_here(command[len(HSCALE):], cwd=where)
                    for key, command in HELP.items() if key not in tool and key in chosen})
    return answers


@pytest.mark.parametrize("ident", params(list(HELP)))
def test_help_shows_no_markup(helps, ident):
    result = helps[ident]
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith("usage: ")
    for markup in ("``", ":func:", ":mod:", ":class:", ":meth:", "**", "`"):
        assert markup not in result.stdout, f"{markup!r} in the help text:\n{result.stdout}"


def test_version(tmp_path):
    result = run(HSCALE + ["--version"], cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == f"hscale {hscale.__version__}\n"


def test_python_dash_m_hscale_is_the_command(tmp_path):
    result = run([sys.executable, "-m", "hscale", "--version"], cwd=tmp_path)
    assert result.stdout == f"hscale {hscale.__version__}\n", result.stderr


def test_every_command_is_documented_with_its_exit_codes():
    from hscale.cli import build_parser

    text = (REPO_ROOT / "docs" / "cli.md").read_text()
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    names = [f"hscale {name}" for name in commands]
    names += [f"hscale vectors {name}"
              for name in commands["vectors"]._subparsers._group_actions[0].choices]
    names += ["python tools/gpu_bench.py", "pytest --pyargs hscale.conformance"]
    for name in names:
        assert re.search(rf"^#+ `{re.escape(name)}", text, re.M), f"{name} has no section"
    for code in ("0", "1", "2", "3", "4"):
        assert re.search(rf"^\| {code} \|", text, re.M), f"exit code {code} is not in the table"
    assert "docs/cli.md" in (REPO_ROOT / "README.md").read_text()


# -- pytest conformance: a backend named on the command line must be able to run -------------

UNAVAILABLE_ADAPTER = '''
from hscale.backends import get


class Unavailable:
    name = "unavailable-here"
    version = "0"
    capabilities = get("numpy").capabilities

    def available(self):
        return False, "needs hardware this machine lacks"

    def quantize(self, *args, **kwargs):
        raise AssertionError("an unavailable backend was run")


def create():
    return Unavailable()
'''


def _conformance(tmp_path, *options) -> subprocess.CompletedProcess:
    (tmp_path / "unavailable_adapter.py").write_text(UNAVAILABLE_ADAPTER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("CI", None)
    return run(suite_command("--certificate", str(tmp_path / "{backend}.json"), *options),
               cwd=tmp_path, env=env, timeout=600)


@pytest.mark.parametrize("name", ["unavailable_adapter:create"] + CUDA_BACKENDS)
def test_conformance_stops_when_a_named_backend_cannot_run(tmp_path, name):
    if ":" not in name and not unavailable(name):
        pytest.skip(f"backend {name} can run on this machine")
    result = _conformance(tmp_path, "--backend", name)
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr  # pytest: usage error
    assert f"--backend {name}: cannot run here: " in result.stderr
    assert "--allow-unavailable lets it skip instead" in result.stderr
    assert " passed" not in result.stdout and " skipped" not in result.stdout


@pytest.mark.slow
def test_conformance_skips_unavailable_backends_only_when_allowed_or_not_named(tmp_path):
    """--allow-unavailable: the named backend that cannot run skips, with its reason; the
    default session runs the built-ins that can run here and leaves the others out, saying so
    in one line (no certificate, no skipped test of theirs)."""
    one_case = ["-k", "test_vectors and e2m1-all-codes"]
    allowed = _conformance(tmp_path, "--backend", "unavailable_adapter:create",
                           "--allow-unavailable", *one_case)
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr
    report = json.loads((tmp_path / "unavailable-here.json").read_text())
    assert _ran(report) == {"skipped": 1}, report["tests"]
    assert "needs hardware this machine lacks" in next(iter(report["skip_reasons"]))

    default = _conformance(tmp_path, *one_case)
    assert default.returncode == 0, default.stdout[-2000:] + default.stderr
    left_out = [line for line in default.stdout.splitlines()
                if line.startswith("conformance backends left out")]
    for name in ("numpy", "torch", "torch-cuda", "cupy"):
        if unavailable(name):
            assert not (tmp_path / f"{name}.json").exists(), name
            assert left_out and f"{name}: " in left_out[0], default.stdout[-2000:]
        else:
            report = json.loads((tmp_path / f"{name}.json").read_text())
            assert _ran(report) == {"passed": 1}, (name, report["tests"])
    assert _ran(json.loads((tmp_path / "numpy.json").read_text())) == {"passed": 1}


def _ran(report) -> dict:
    """The outcomes of a report's tests, without those -k left out ("not run")."""
    return {outcome: n for outcome, n in report["tests"].items() if outcome != "not run"}
