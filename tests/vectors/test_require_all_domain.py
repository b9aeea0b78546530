"""`hscale vectors check --require-all` asks for the declared domain's cases (hscale.vectors.
domains): the defaults are what a backend that declares nothing has (docs/backends.md), so an
NVFP4 x NVFP4 GEMM is not asked for the weight-only cases and a kernel given its global scale
not for the dynamic ones (issue 39: both were demanded over the default directory); the
options declaring more ask for more, and an option of another kind's domain is a usage error."""

from __future__ import annotations

from helpers.cli import Run, hscale_here


def _hscale(*args) -> Run:
    return hscale_here(["vectors", *args])


def _expected(tmp_path, name, *option):
    out = tmp_path / f"{name}.txt"
    assert _hscale("expect", *option, "--out", str(out)).returncode == 0
    return out.read_text().splitlines()


def test_an_nvfp4_gemm_is_asked_for_its_own_cases_only(tmp_path):
    lines = _expected(tmp_path, "gemm", "--gemm-model", "fp32")
    nvfp4 = tmp_path / "nvfp4.txt"
    nvfp4.write_text("\n".join(l for l in lines if not l.startswith("gemm-weight-only")) + "\n")
    done = _hscale("check", "--gemm-model", "fp32", "--require-all", "--observed", str(nvfp4))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "outside the declared domain (first operand nvfp4, outputs float32) not required: " \
        in done.stdout and "gemm-weight-only-exact" in done.stdout, done.stdout
    wider = _hscale("check", "--gemm-model", "fp32", "--require-all", "--observed", str(nvfp4),
                    "--gemm-activations", "nvfp4,bfloat16")
    assert wider.returncode == 1 and "missing from the observed file (--require-all)" in \
        wider.stdout, wider.stdout


def test_a_static_kernel_is_not_asked_for_the_dynamic_cases(tmp_path):
    lines = _expected(tmp_path, "act", "--recipe", "fast-math")
    static = tmp_path / "static.txt"
    static.write_text("\n".join(l for l in lines if not l.startswith("act-dynamic")) + "\n")
    done = _hscale("check", "--recipe", "fast-math", "--require-all", "--observed", str(static))
    assert done.returncode == 0 and "act-dynamic-scale" in done.stdout, done.stdout + done.stderr
    both = _hscale("check", "--recipe", "fast-math", "--require-all", "--observed", str(static),
                   "--global-scale", "static,dynamic")
    assert both.returncode == 1, both.stdout
    bf16 = _hscale("check", "--recipe", "fast-math", "--require-all", "--observed", str(static),
                   "--dtypes", "bfloat16")
    assert bf16.returncode == 0 and "inputs bfloat16, global scale static" in bf16.stdout


def test_a_domain_option_of_another_kind_is_a_usage_error(tmp_path):
    for args, said in ((["--gemm-model", "fp32", "--dtypes", "bfloat16"],
                        "--dtypes applies with --recipe only"),
                       (["--dtypes", "bfloat16"], "--dtypes applies with --recipe only"),
                       (["--recipe", "exact", "--global-scale", "sometimes"],
                        "--global-scale sometimes: a comma-separated list of static, dynamic")):
        done = _hscale("check", "--observed", str(tmp_path / "none.txt"), *args)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, \
            done.stderr
