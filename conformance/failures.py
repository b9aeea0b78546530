"""A test's failures in the suite's one-message form.

A generated test that meets two different faults (a finding on one example, an error on valid
input on another) fails with Hypothesis' exception group, which pytest prints as a traceback of
every member through the kit's frames. The suite's failures are already messages (a finding
names its clause, the case and the values; an error on valid input names the case and where
the backend raised), so the group is rendered as those messages, one after the other, each with
Hypothesis' line that reproduces its example.
"""

from __future__ import annotations

import traceback

#: How a member's Hypothesis note that reproduces its example starts.
REPRODUCE_NOTE = "You can reproduce this test case"


def leaves(group: BaseException) -> list[BaseException]:
    """The exceptions of a (nested) exception group, in order."""
    if isinstance(group, BaseExceptionGroup):
        return [leaf for member in group.exceptions for leaf in leaves(member)]
    return [group]


def member_text(error: BaseException) -> str:
    """One member's message: a suite failure's own text (``pytest.fail``), else the exception
    in one line with where it was raised."""
    text = getattr(error, "msg", None)
    if isinstance(text, str) and text:
        return text
    where = traceback.extract_tb(error.__traceback__)
    place = f" (at {where[-1].filename}:{where[-1].lineno})" if where else ""
    return "".join(traceback.format_exception_only(type(error), error)).strip() + place


def one_message(group: BaseExceptionGroup) -> str:
    """The failures of ``group`` as one message: how many, then each member's message and the
    note that reproduces its example."""
    members = leaves(group)
    lines = [f"{group.message.rstrip('.')}: each is its own finding or error, with the example "
             "that shows it"]
    for k, error in enumerate(members, 1):
        lines.append(f"--- failure {k} of {len(members)}:")
        lines.append(member_text(error))
        lines += [note.strip() for note in getattr(error, "__notes__", ())
                  if note.strip().startswith(REPRODUCE_NOTE)]
    return "\n".join(lines)
