"""``hscale conform``: run the installed conformance suite on a backend and write its
certificate, in one step. The same as ``pytest --pyargs hscale.conformance`` with the options
below (docs/conformance.md); anything after ``--`` goes to pytest unchanged.

Exit codes: 0 every backend's certificate says "conforms" and judged every clause named with
--clause; 1 a certificate says "does not conform" or "not judged", or a clause named with
--clause was not judged on a backend (its tests all skipped there, one line says why); 2 a
user error (a bad option, a backend that cannot be loaded or cannot run here, pytest or
Hypothesis not installed), one line on stderr; 3 the run did not finish (interrupted, or
pytest's internal error): no verdict.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from .args import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, CommandParser, fail, plain_text

#: The run did not finish: no verdict.
EXIT_INCOMPLETE = 3
#: What the suite needs beyond the kit's own dependencies.
INSTALL_HINT = 'pip install "hscale-nvfp4[conform]" (pytest and Hypothesis)'
#: pytest's exit codes (pytest.ExitCode): usage error, no tests collected.
PYTEST_USAGE_ERROR, PYTEST_NO_TESTS = 4, 5


def build_parser() -> argparse.ArgumentParser:
    from hscale.judge.options import suite_options
    parser = CommandParser(prog="hscale conform", description=plain_text(__doc__),
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="The backend contract: hscale docs backends. The suite, its "
                                  "profiles and the certificate: hscale docs conformance.")
    for option in suite_options():  # the suite's own options (hscale.judge.options)
        settings = dict(option.settings)
        if option.flag == "--backend":
            settings.update(required=True, help="numpy, torch, torch-cuda, cupy, or "
                            "package.module:factory for your own (repeatable)")
        parser.add_argument(option.flag, *option.aliases, **settings)
    parser.add_argument("--quick", action="store_true",
                        help="leave out the full models and the large sweeps (marked slow): a "
                             "first look, not a certificate of the whole suite")
    parser.add_argument("--hypothesis-profile", default=None, choices=("ci", "dev", "thorough"),
                        help="ci: derandomized, 200 examples (default, reproducible); dev: "
                             "random, 100; thorough: random, 2500")
    return parser


def pytest_arguments(args, extra: list[str]) -> list[str]:
    """The pytest command line ``hscale conform`` runs."""
    # hscale is imported before pytest starts (this command is part of it), so pytest cannot
    # rewrite its asserts and would say so on every run: the suite's checks do not rely on
    # assert rewriting (their messages are the diagnoser's).
    from hscale.judge.options import forwarded
    argv = ["--pyargs", "hscale.conformance", "-q", "-p", "no:cacheprovider",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", *forwarded(args)]
    if args.quick:
        argv += ["-m", "not slow"]
    if args.hypothesis_profile:
        argv += ["--hypothesis-profile", args.hypothesis_profile]
    return argv + extra


def verdict_collector(command: str):
    """A pytest plugin that keeps the certificates the suite wrote: its sessionfinish runs after
    every other plugin's, so after the suite's, which writes them. ``reproduce_command`` is what
    the certificates give as the command that reproduces the run (the suite's plugin looks for
    it), this command rather than the pytest line it runs."""
    import pytest

    class VerdictCollector:
        certificates: dict[str, tuple[dict, str]] = {}
        reproduce_command = command

        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(self, session):
            # Imported here, not before pytest.main: the plugin imports Hypothesis, whose own
            # pytest plugin pytest must see first (or it warns it cannot rewrite it).
            from hscale.conformance.plugin import STATE_KEY
            state = session.config.stash.get(STATE_KEY, None)
            if state is not None:
                self.certificates = {ident: (entry.report, entry.report_path)
                                     for ident, entry in state.backends.items()
                                     if entry.report is not None}

    return VerdictCollector()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    args = build_parser().parse_args(own)
    import importlib.util
    for module in ("pytest", "hypothesis"):
        if importlib.util.find_spec(module) is None:
            return fail("hscale conform", f"the suite needs {module}: {INSTALL_HINT}")
    import pytest
    collector = verdict_collector(shlex.join(["hscale", "conform", *argv]))
    code = pytest.main(pytest_arguments(args, extra), plugins=[collector])
    if code == PYTEST_USAGE_ERROR:
        return EXIT_USAGE  # pytest printed the one-line reason
    if not collector.certificates:
        why = ("no test was selected" if code == PYTEST_NO_TESTS
               else f"pytest ended with exit code {int(code)}")
        print(f"hscale conform: no certificate was written ({why}): no verdict",
              file=sys.stderr)
        return EXIT_INCOMPLETE
    if code not in (0, 1):
        print(f"hscale conform: the run did not finish (pytest exit code {int(code)}): the "
              "certificates written are incomplete", file=sys.stderr)
        return EXIT_INCOMPLETE
    verdicts = {ident: report["verdict"] for ident, (report, _) in collector.certificates.items()}
    if args.clause:  # a clause asked for and not judged is not "conforms" (issue 39)
        from hscale.conformance.certificate import clauses_not_judged
        unjudged = {ident: clauses_not_judged(report, args.clause)
                    for ident, (report, _) in collector.certificates.items()}
        for ident, clauses in unjudged.items():
            for clause, why in clauses.items():
                print(f"hscale conform: --clause {clause} was not judged on backend {ident!r} "
                      f"({why}): exit {EXIT_FINDINGS}", file=sys.stderr)
        if any(unjudged.values()):
            return EXIT_FINDINGS
    return EXIT_OK if all(v == "conforms" for v in verdicts.values()) else EXIT_FINDINGS
