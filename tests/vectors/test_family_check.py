"""Every vector family's ``check_lines`` takes the same arguments (hscale.vectors.families):
the cases, the observed lines, the choice its ``CHOICE`` option names, max_errors,
require_all and ``declared``, the domain its ``CHOICE`` reads from the options it declares
(None where it declares none). So ``hscale vectors check`` calls every family alike, a declared
domain reaches the stochastic, RHT and tile checks as it reaches the activation and GEMM ones,
and a domain option of another family is refused in one line."""

from __future__ import annotations

import inspect

import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors
from hscale.vectors.families import families

from helpers.cli import hscale_here

SIGNATURE = ("cases", "lines", "choice", "max_errors", "require_all", "declared")


def test_every_family_check_has_one_signature():
    assert set(families()) >= {"weight", "activation", "gemm", "stochastic", "rht", "tile"}
    for kind, family in families().items():
        parameters = inspect.signature(family.check_lines).parameters
        assert tuple(parameters) == SIGNATURE, kind
        assert parameters["declared"].default is None, kind


class _OnlyCase:
    """A declared domain holding one case (what ``declared`` is: ``holds`` and ``describe``),
    with its transpose for a tile case (judged as ``<id>-T``)."""

    def __init__(self, case_id: str):
        self.case_id = case_id

    def holds(self, case) -> bool:
        return case.id in (self.case_id, f"{self.case_id}-T")

    def describe(self) -> str:
        return f"only {self.case_id}"


@pytest.mark.parametrize("kind,choice", [("stochastic", "sm103a"), ("rht", "plain-exact"),
                                         ("tile", "exact")])
def test_a_declared_domain_reaches_the_check(kind, choice):
    """An observed file holding one case's lines: under --require-all it misses the other cases'
    (errors, one per missing unit); with a declared domain holding only that case it conforms
    and names the others as outside the domain, not required."""
    family = families()[kind]
    cases = [case for name, case in open_vectors(LEVEL0_DIR).family_cases.values()
             if name.startswith(family.SET_PREFIX)]
    assert len(cases) >= 2
    smallest = min(cases, key=lambda case: len(family.expect_lines([case], choice)))
    lines = family.expect_lines([smallest], choice)
    report, errors = family.check_lines(cases, lines, choice, 20, True, None)
    assert errors > 0 and any("missing from the observed file (--require-all)" in line
                              for line in report), report
    report, errors = family.check_lines(cases, lines, choice, 20, True, _OnlyCase(smallest.id))
    assert errors == 0, report
    others = [case.id for case in cases if case.id != smallest.id]
    outside = len(others) * (2 if kind == "tile" else 1)  # a tile case and its transpose
    assert report[-1].startswith(f"{outside} case") and \
        f"outside the declared domain (only {smallest.id}) not required: " in report[-1], report
    assert all(case_id in report[-1] for case_id in others)


@pytest.mark.parametrize("choice,option", [
    (["--routing", "straight"], ["--dtypes", "bfloat16"]),
    (["--rht", "te-exact"], ["--gemm-out-dtypes", "float32"]),
    (["--tiles", "exact"], ["--global-scale", "static"]),
])
def test_a_domain_option_the_family_does_not_declare_is_refused_in_one_line(choice, option,
                                                                              tmp_path):
    observed = tmp_path / "observed.txt"
    observed.write_text("")
    done = hscale_here(["vectors", "check", *choice, *option, "--observed", str(observed)])
    owner = "--recipe" if option[0] in ("--dtypes", "--global-scale") else "--gemm-model"
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip().splitlines() == [
        f"hscale vectors check: {option[0]} applies with {owner} only"], done.stderr
