"""Which vector cases an implementation can produce: its declared domain, as
``hscale vectors check`` reads it from the command line (``--dtypes``, ``--global-scale``,
``--gemm-activations``, ``--gemm-out-dtypes``), with the defaults a backend that declares
nothing has (docs/backends.md). ``--require-all`` asks for every case of that domain, not for the
cases a kernel cannot run: the weight-only GEMM cases of an NVFP4 x NVFP4 GEMM, the dynamic
cases of a kernel given its global scale.

A case is in the domain when the suite would run it on such a backend: an activation case in a
declared dtype, or exact in one, under a declared global-scale mode; a GEMM case whose first
operand (NVFP4, or activations exact in a declared dtype) and output dtype are declared
(``hscale.judge.gemm.GemmDomain.in_domain``, the suite's own rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hscale.judge.activation_domain import ACTIVATION_DTYPE_NAMES
from hscale.judge.builders import exact
from hscale.judge.cases import CaseError
from hscale.judge.domain import INPUT_DTYPES
from hscale.judge.gemm import ACTIVATIONS, OUT_DTYPES, GemmDomain
from hscale.reference.activations import GLOBAL_SCALE_MODES


def names(text: str, allowed, option: str) -> tuple[str, ...]:
    """A comma-separated list of names from ``allowed``: ValueError naming the option."""
    given = tuple(dict.fromkeys(part.strip() for part in str(text).split(",") if part.strip()))
    unknown = [name for name in given if name not in allowed]
    if not given or unknown:
        raise ValueError(f"{option} {text}: a comma-separated list of {', '.join(allowed)}")
    return given


@dataclass(frozen=True)
class ActivationVectorDomain:
    """An activation kernel's input dtypes and global-scale modes (NVFP4-ACT-1, -11)."""

    dtypes: tuple[str, ...] = ACTIVATION_DTYPE_NAMES
    modes: tuple[str, ...] = ("static",)

    @classmethod
    def parse(cls, dtypes: str | None, modes: str | None) -> "ActivationVectorDomain":
        return cls(cls.dtypes if dtypes is None else
                   names(dtypes, ACTIVATION_DTYPE_NAMES, "--dtypes"),
                   cls.modes if modes is None else
                   names(modes, GLOBAL_SCALE_MODES, "--global-scale"))

    def holds(self, case) -> bool:
        mode = "dynamic" if case.global_scale is None else "static"
        if mode not in self.modes:
            return False
        x = np.asarray(case.x)
        if x.dtype.name in self.dtypes:
            return True
        for name in self.dtypes:
            try:
                exact(x.astype(np.float64), INPUT_DTYPES[name])
            except CaseError:
                continue
            return True
        return False

    def describe(self) -> str:
        return f"inputs {'/'.join(self.dtypes)}, global scale {'/'.join(self.modes)}"


@dataclass(frozen=True)
class GemmVectorDomain:
    """A GEMM's first operands and output dtypes (NVFP4-GEMM-6, -8)."""

    activations: tuple[str, ...] = ("nvfp4",)
    out_dtypes: tuple[str, ...] = ("float32",)

    @classmethod
    def parse(cls, activations: str | None, out_dtypes: str | None) -> "GemmVectorDomain":
        return cls(cls.activations if activations is None else
                   names(activations, ACTIVATIONS, "--gemm-activations"),
                   cls.out_dtypes if out_dtypes is None else
                   names(out_dtypes, OUT_DTYPES, "--gemm-out-dtypes"))

    def holds(self, case) -> bool:
        domain = GemmDomain("fp32", self.out_dtypes, self.activations)
        return domain.in_domain(case)[0] is not None

    def describe(self) -> str:
        return (f"first operand {'/'.join(self.activations)}, outputs "
                f"{'/'.join(self.out_dtypes)}")


def outside_line(outside: list, domain) -> list[str]:
    """The report's line on the cases outside the declared domain (not required)."""
    if not outside:
        return []
    from hscale.judge.findings import plural
    return [f"{plural(len(outside), 'case')} outside the declared domain ({domain.describe()}) "
            f"not required: {', '.join(outside)}"]
