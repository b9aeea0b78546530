"""The commands' help: the command's description (``hscale --help``, hscale/cli/__init__.py's
docstring) names every command the dispatcher has (it once named 7 of 12), and no help text
prints a doubled percent sign."""

from __future__ import annotations

import re

import hscale.cli as cli


def documented_commands(docstring: str) -> set[str]:
    """The commands a docstring lists: a line's first word in the table, or ``; NAME:`` inside
    an entry (calibrate, beside quantize)."""
    return (set(re.findall(r"^  ([a-z]+)\s", docstring, re.M))
            | set(re.findall(r"; ([a-z]+):", docstring)))


def dispatched_commands() -> set[str]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)


def test_the_description_names_every_command():
    assert len(dispatched_commands()) >= 12
    assert documented_commands(cli.__doc__) == dispatched_commands()


def test_a_command_left_out_of_the_description_is_caught():
    shortened = "\n".join(line for line in cli.__doc__.splitlines()
                          if not line.startswith("  eval "))
    assert documented_commands(shortened) == dispatched_commands() - {"eval"}


def test_no_help_text_prints_a_doubled_percent_sign():
    """argparse %-formats an argument's help, not a parser's description: "95%%" in a
    description printed as "95%%" (hscale eval --help)."""
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    texts = {name: sub.format_help() for name, sub in action.choices.items()}
    assert "95% interval" in texts["eval"]
    assert not [name for name, text in texts.items() if "%%" in text]
