"""A finding: one way a result breaks the spec, said in the spec's terms.

Every judge of the project (the conformance suite, ``hscale vectors check``, ``hscale check``,
the interop matrix) produces findings through one diagnoser (``hscale.judge.diagnose``)
and only formats them, so the same defect reads the same everywhere:

    [HSCALE-OBJ-1] group (r=0, i=3): scale byte expected 0x67 observed 0x68; ...

This module imports nothing of the reference, so that the independent certificate
(``independent.py``) can produce findings too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Finding:
    """``clause`` broken at ``group`` (r, i) / ``element`` j of that group (None: the tensor),
    or at a GEMM's ``output`` element (i, j).

    ``text`` is the whole statement: the quantity, expected vs observed, and the evidence (the
    objectives of both candidates, the exact quotient, "an exact tie"). ``expected`` and
    ``observed`` repeat the two values for machine readers (the JSON reports). ``kind`` groups
    findings of one sort for counting ("byte", "code", "sg", ...).
    """

    clause: str
    text: str
    group: tuple[int, int] | None = None
    element: int | None = None
    kind: str = ""
    expected: str = ""
    observed: str = ""
    output: tuple[int, int] | None = None  # a GEMM's output element (i, j) (section 10)

    @property
    def place(self) -> str:
        if self.output is not None:
            return f"output element (i={self.output[0]}, j={self.output[1]})"
        if self.group is None:
            return "tensor"
        where = f"group (r={self.group[0]}, i={self.group[1]})"
        return where if self.element is None else f"{where} element j={self.element}"

    def render(self) -> str:
        """The one-line form every report prints."""
        return f"[{self.clause}] {self.place}: {self.text}"

    def as_json(self) -> dict:
        out = {"clause": self.clause, "place": self.place, "text": self.text, "kind": self.kind}
        if self.group is not None:
            out["group"] = list(self.group)
        if self.element is not None:
            out["element"] = self.element
        if self.output is not None:
            out["output"] = list(self.output)
        if self.expected or self.observed:
            out["expected"], out["observed"] = self.expected, self.observed
        return out


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 problem``, ``2 problems``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


def fp32_hex(value, prefix: str = "0x") -> str:
    """The fp32 bits of a value, eight upper-case hex digits after ``prefix``: ``0x3C800000``
    (how findings and reports write an fp32 value; the vector files write their own words,
    ``hscale.vectors.hexio``)."""
    return f"{prefix}{int(np.array(float(value), dtype=np.float32).view(np.uint32)):08X}"


@dataclass
class Findings:
    """A judgement's findings, in the order found (none: the result is the expected one); the
    diagnosis of the kinds whose judges need nothing more (rht, tile)."""

    findings: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def render(self, shown: int = 6) -> list[str]:
        lines = ["  " + f.render() for f in self.findings[:shown]]
        if len(self.findings) > shown:
            lines.append(f"  ... and {len(self.findings) - shown} more")
        return lines
