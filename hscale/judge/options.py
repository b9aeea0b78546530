"""The conformance suite's options, declared once: the suite's pytest plugin adds them to pytest
(``conformance/plugin.py``) and ``hscale conform`` to its own command line, which hands them to
pytest unchanged (``forwarded``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SuiteOption:
    flag: str
    settings: dict  # the keyword arguments of argparse's add_argument and pytest's addoption
    aliases: tuple = field(default=())

    @property
    def dest(self) -> str:
        return self.settings.get("dest", self.flag.lstrip("-").replace("-", "_"))


def suite_options() -> tuple[SuiteOption, ...]:
    from .kinds import KINDS
    from .profiles import ALLOWANCES, EXACT, PROFILES
    return (
        SuiteOption("--backend", dict(
            action="append", default=None, metavar="NAME",
            help="backend under test: numpy, torch, torch-cuda, cupy or package.module:factory "
                 "for your own (repeatable)")),
        SuiteOption("--allow-unavailable", dict(
            action="store_true",
            help="a backend named with --backend that cannot run here skips (default: the run "
                 "stops with the reason)")),
        SuiteOption("--profile", dict(
            default=EXACT, choices=PROFILES,
            help="how a weight quantizer is judged: exact: bit-identical to hscale.reference "
                 "(default); faithful: certificate check with --allow allowances; format: the "
                 "format clauses only, for implementations with their own scale rule. The "
                 "weight kind only: an activation quantizer is judged under the recipe it "
                 "declares, a GEMM under its accumulation model, and naming a profile other "
                 "than exact for a backend without the weight kind is a usage error")),
        SuiteOption("--allow", dict(
            action="append", default=[], metavar="NAME",
            help="allowance of the faithful or format profile, for a weight quantizer "
                 "(repeatable): " + ", ".join(ALLOWANCES))),
        SuiteOption("--clause", dict(
            action="append", default=[], metavar="ID",
            help="run only the tests and vector cases of this docs/spec.md clause "
                 "(repeatable)")),
        SuiteOption("--kind", dict(
            action="append", default=[], metavar="NAME",
            help="run only the tests of this kind of implementation (repeatable): "
                 + ", ".join(KINDS) + " (hscale.judge.kinds)")),
        SuiteOption("--strict-inputs", dict(
            action="store_true",
            help="the input contract (the bad inputs of NVFP4-IN-* rejected) decides the "
                 "verdict too; by default it is reported beside it")),
        SuiteOption("--strict-errors", dict(
            action="store_true",
            help="require every backend's rejections of bad input to name the argument, the "
                 "first offending index and the clause (always required of this project's "
                 "own backends)")),
        SuiteOption("--certificate", dict(
            dest="conformance_report", default=None, metavar="PATH",
            help="the certificate, JSON (default ./reports/conformance-<backend>.json; "
                 "'{backend}' in PATH is replaced by the backend id)"),
            aliases=("--conformance-report",)),
    )


def forwarded(args, options=None) -> list[str]:
    """The pytest arguments giving the suite the values of ``options`` parsed into ``args``."""
    argv: list[str] = []
    for option in options or suite_options():
        value = getattr(args, option.dest)
        action = option.settings.get("action")
        if action == "store_true":
            argv += [option.flag] if value else []
        elif action == "append":
            for item in value or ():
                argv += [option.flag, item]
        elif value is not None:
            argv += [option.flag, str(value)]
    return argv
