"""The one case model: the inputs of one quantization, its parameters, what the spec expects of
it, and the clauses it exercises.

A hand-written suite test, a Hypothesis draw, a golden-vector case and a layer of a real model
are all a :class:`Case`. Its expected outputs are a :class:`~hscale.reference.QuantizedWeight`
(computed by the reference on first use, or read from a vector file), or a :class:`Rejection`
when the inputs break a rule of section 5 of the spec.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from hscale.reference import QuantizedWeight, gptq_quantize, quantize
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U

from .findings import fp32_hex

# The clause a reference ValueError cites first: "... (spec NVFP4-IN-1)".
_CLAUSE_IN_MESSAGE = re.compile(r"\(spec ([A-Z0-9]+(?:-[A-Z0-9]+)+)[,)]")
PIPELINES = ("quantize", "gptq-diagonal")


class CaseError(RuntimeError):
    """A case does not do what it says it does (a bug in the catalogue or in the reference)."""


@dataclass(frozen=True)
class Rejection:
    """The outcome of inputs the spec rejects: the clause the error cites, and its message."""

    clause: str | None
    message: str


@dataclass(frozen=True, eq=False)
class Case:
    """One quantization and what the spec says of it.

    ``weight`` (m, n) in its own dtype (float32, float16, bfloat16; an error case may hold
    anything), ``hessian_diag`` (n,) or None, the options of ``hscale.reference.quantize``, and
    ``pipeline``: ``"quantize"``, or ``"gptq-diagonal"`` (``gptq_quantize`` with
    ``H = diag(hessian_diag)``, which must equal ``quantize`` bit for bit, HSCALE-GPTQ-1).
    ``id``, ``title``, ``clauses``, ``provenance``, ``notes``: what the case is and exercises.
    ``expect_error``: the clause the inputs break (the case then has no outputs).
    ``expected``: the stored expected outputs (golden vectors), else computed by the reference.
    """

    weight: Any
    hessian_diag: Any = None
    method: Any = "hscale"
    init: Any = "maxabs"
    K: Any = DEFAULT_K
    U: Any = DEFAULT_U
    scale_ceiling: Any = DEFAULT_SCALE_CEILING
    global_scale: Any = None
    pipeline: str = "quantize"
    id: str = ""
    title: str = ""
    clauses: tuple = ()
    expect_error: str | None = None
    provenance: str | None = None
    notes: tuple = field(default=())
    expected: QuantizedWeight | Rejection | None = field(default=None, repr=False)

    # -- the call ------------------------------------------------------------------------------
    def options(self) -> dict:
        return dict(method=self.method, init=self.init, K=self.K, U=self.U,
                    scale_ceiling=self.scale_ceiling, global_scale=self.global_scale)

    def call_args(self):
        """``(args, kwargs)`` of the ``quantize`` call (h only for hscale and hscale-block, which
        read it; for hscale-block ``hessian_diag`` holds the (n/16, 16, 16) blocks)."""
        h = self.hessian_diag if self.method in ("hscale", "hscale-block") else None
        return (self.weight, h), self.options()

    def with_(self, **changes) -> "Case":
        """A modified copy; its expected outputs are recomputed unless given."""
        changes.setdefault("expected", None)
        return replace(self, **changes)

    @property
    def shape(self) -> tuple[int, ...]:
        return np.shape(self.weight)

    def exact_weight(self) -> np.ndarray:
        return np.asarray(self.weight).astype(np.float64)

    def group_h(self, group: int) -> np.ndarray:
        """The 16 weights of the objective for group column ``group`` (h = 1 unless hscale)."""
        if self.method != "hscale":
            return np.ones(16)
        return np.asarray(self.hessian_diag, dtype=np.float64)[16 * group:16 * group + 16]

    def describe(self) -> str:
        shape = "x".join(str(s) for s in self.shape)
        dtype = getattr(np.asarray(self.weight).dtype, "name", "?")
        if self.global_scale is None:
            sg = "computed"
        else:
            sg = f"given {float(self.global_scale)!r} ({fp32_hex(self.global_scale)})"
        text = (f"{shape} {dtype}, method={self.method}, init={self.init}, K={self.K}, "
                f"U={self.U}, C={self.scale_ceiling!r}, s_g {sg}")
        label = self.id or self.title
        return f"{label}: {text}" if label else text

    # -- what the spec expects ----------------------------------------------------------------
    def expected_outputs(self) -> QuantizedWeight | Rejection:
        """The stored expected outputs, or the reference's."""
        return self.expected if self.expected is not None else self.reference_outputs

    @cached_property
    def reference_outputs(self) -> QuantizedWeight | Rejection:
        """What the reference produces for the inputs (or the error it raises). A case that
        does not do what it says (an expected error that does not come, a GPTQ case that
        differs from quantize) raises :class:`CaseError`."""
        (weight, h), options = self.call_args()
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                result = quantize(weight, h, **options)
                if self.pipeline == "gptq-diagonal":
                    self._check_gptq_diagonal(result, options)
                elif self.pipeline not in PIPELINES:
                    raise CaseError(f"case {self.id}: unknown pipeline {self.pipeline!r}")
        except ValueError as error:
            message = str(error)
            found = _CLAUSE_IN_MESSAGE.search(message)
            clause = found.group(1) if found else None
            if self.expect_error is None:
                raise CaseError(f"case {self.id}: the reference rejected it: {message}") from error
            if clause != self.expect_error:
                raise CaseError(f"case {self.id}: expected a {self.expect_error} error, the "
                                f"reference raised: {message}") from error
            return Rejection(clause, message)
        if self.expect_error is not None:
            raise CaseError(f"case {self.id}: expected a {self.expect_error} error, but the "
                            "reference accepted the inputs")
        return result

    def _check_gptq_diagonal(self, plain: QuantizedWeight, options: dict) -> None:
        pipeline = gptq_quantize(self.weight, np.diag(self.hessian_diag), **options)
        for name in ("codes", "scale_bytes", "initial_bytes", "global_scale"):
            if not np.array_equal(getattr(pipeline, name), getattr(plain, name)):
                raise CaseError(f"case {self.id}: gptq_quantize with a diagonal H differs from "
                                f"quantize in {name} (HSCALE-GPTQ-1)")


@dataclass(frozen=True, eq=False)
class GemmCase:
    """One block-scaled GEMM and what the spec says of it (section 10, NVFP4-GEMM-*).

    ``a``: the first operand (M, K), an NVFP4 tensor (a ``QuantizedWeight``, or any object with
    ``codes``, row-major ``scale_bytes`` and ``global_scale``), or activations, a float32,
    float16 or bfloat16 array, for the weight-only GEMM (NVFP4-GEMM-8); ``b``: the NVFP4 weight
    (N, K); ``out_dtype``: float32, bfloat16 or float16. ``id``, ``title``, ``clauses``,
    ``provenance``, ``notes``: what the case is and exercises, as for :class:`Case`. What a
    kernel may return depends on the accumulation model it declares: ``admissible(model)``;
    ``reference_outputs`` is the one result of the kit's own GEMM (the exact sum rounded once).
    """

    a: Any
    b: Any
    out_dtype: str = "float32"
    id: str = ""
    title: str = ""
    clauses: tuple = ()
    provenance: str | None = None
    notes: tuple = field(default=())

    @property
    def weight_only(self) -> bool:
        return isinstance(self.a, np.ndarray)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(M, N, K)."""
        rows = self.a.shape[0] if self.weight_only else self.a.codes.shape[0]
        return rows, self.b.codes.shape[0], self.b.codes.shape[1]

    def with_(self, **changes) -> "GemmCase":
        return replace(self, **changes)

    @cached_property
    def exact(self):
        """The exact sums S (``hscale.reference.gemm.ExactSum``)."""
        from hscale.reference.gemm import exact_sum
        return exact_sum(self.a, self.b)

    def admissible(self, model):
        """The admissible results under the accumulation ``model`` (NVFP4-GEMM-7)."""
        from hscale.reference.accumulation import GemmModel, admissible
        model = GemmModel.parse(model)
        cache = self.__dict__.setdefault("_admissible", {})
        if model not in cache:
            cache[model] = admissible(self.a, self.b, self.out_dtype, model, self.exact)
        return cache[model]

    @cached_property
    def reference_outputs(self) -> np.ndarray:
        """The kit's own GEMM of the case: admissible under every fp32 model with the global
        scales on the accumulator."""
        from hscale.reference.accumulation import reference_output
        return reference_output(self.a, self.b, self.out_dtype, product=self.exact)

    def describe(self) -> str:
        m, n, k = self.shape
        first = (f"activations {np.asarray(self.a).dtype.name}" if self.weight_only else
                 f"NVFP4 gA {float(self.a.global_scale)!r} ({fp32_hex(self.a.global_scale)})")
        text = (f"{m}x{k} @ ({n}x{k})^T, {first}, NVFP4 gB {float(self.b.global_scale)!r} "
                f"({fp32_hex(self.b.global_scale)}), out {self.out_dtype}")
        label = self.id or self.title
        return f"{label}: {text}" if label else text

