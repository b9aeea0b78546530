"""A golden-vector case: its inputs, how the reference turns them into outputs, and its
parameter set (the unit that gets one file per format).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hscale.reference import quantize
from hscale.reference.gptq import gptq_quantize

from . import hexio

# Clause cited by a reference ValueError: "... (spec NVFP4-IN-1)".
_CLAUSE_IN_MESSAGE = re.compile(r"\(spec ([A-Z0-9]+(?:-[A-Z0-9]+)+)[,)]")  # the first clause cited

ERROR_SET = "errors"


class CatalogueError(RuntimeError):
    """A case does not do what the catalogue says it does (a bug in the catalogue or the
    reference, found while generating)."""


@dataclass(frozen=True, eq=False)
class Case:
    """One golden-vector case, defined entirely by its inputs.

    ``weight`` is an array of its native dtype (float32, float16 or bfloat16; error cases may
    hold anything); ``hessian_diag`` float64 (n,) or None; ``global_scale`` an np.float32 the
    caller supplies (NVFP4-GS-3), or None to have it computed, or (error cases only) a float.
    ``expect_error`` is the clause ID the inputs break: the reference must reject them with a
    ValueError citing it, and the case has no outputs. ``pipeline`` is ``"quantize"`` (the
    reference ``quantize``) or ``"gptq-diagonal"``: ``gptq_quantize`` with the full Hessian
    ``H = diag(hessian_diag)`` (HSCALE-GPTQ-1), which must equal ``quantize`` bit for bit.
    """

    id: str
    title: str
    clauses: tuple
    weight: np.ndarray
    hessian_diag: np.ndarray | None = None
    method: Any = "hscale"
    init: Any = "maxabs"
    K: Any = 16
    U: Any = 6
    scale_ceiling: float = 448.0
    global_scale: Any = None
    expect_error: str | None = None
    provenance: str | None = None
    notes: tuple = field(default=())
    pipeline: str = "quantize"

    @property
    def dtype_name(self) -> str:
        return hexio.dtype_name(self.weight.dtype)

    def set_name(self) -> str:
        """The parameter set this case belongs to (one file per set and format)."""
        if self.expect_error is not None:
            return ERROR_SET
        return parameter_set_name(self.dtype_name, self.method, self.init, self.K, self.U,
                                  self.scale_ceiling)


def parameter_set_name(dtype_name: str, method: str, init: str, K: int, U: int,
                       scale_ceiling: float) -> str:
    ceiling = format(scale_ceiling, "g").replace(".", "p")
    short = hexio.SHORT_NAMES[dtype_name]
    method_part = method.replace("-", "")
    if method == "rtn":
        return f"{short}_{method_part}_{init}_C{ceiling}"
    return f"{short}_{method_part}_{init}_K{K}_U{U}_C{ceiling}"


def parameters_of(case: Case) -> dict | None:
    """The parameter-set description written at the top of each file (None for errors)."""
    if case.expect_error is not None:
        return None
    return {
        "weight_dtype": case.dtype_name,
        "method": case.method,
        "init": case.init,
        "K": int(case.K),
        "U": int(case.U),
        "D": int(case.K) - 1 - int(case.U),
        "scale_ceiling": float(case.scale_ceiling),
        "hessian_diag": "per case (float64)" if case.method == "hscale" else
                        ("not read (h = 1)" if case.method == "scale-only" else "not read"),
    }


@dataclass(frozen=True, eq=False)
class Outputs:
    """What the reference produces for a case (or the error it raises)."""

    global_scale: np.float32 | None = None
    initial_bytes: np.ndarray | None = None
    scale_bytes: np.ndarray | None = None
    delta: np.ndarray | None = None
    codes: np.ndarray | None = None
    packed: np.ndarray | None = None
    swizzled_scale_bytes: np.ndarray | None = None
    dequantized: np.ndarray | None = None
    error_clause: str | None = None
    error_message: str | None = None


def run_case(case: Case) -> Outputs:
    """Run the reference on the case's inputs; check an error case fails the way it says."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            options = dict(method=case.method, init=case.init, K=case.K, U=case.U,
                           scale_ceiling=case.scale_ceiling, global_scale=case.global_scale)
            q = quantize(case.weight, case.hessian_diag, **options)
            if case.pipeline == "gptq-diagonal":
                plain = q
                q = gptq_quantize(case.weight, np.diag(case.hessian_diag), **options)
                for name in ("codes", "scale_bytes", "initial_bytes", "global_scale"):
                    if not np.array_equal(getattr(q, name), getattr(plain, name)):
                        raise CatalogueError(f"case {case.id}: gptq_quantize with a diagonal H "
                                             f"differs from quantize in {name} (HSCALE-GPTQ-1)")
            elif case.pipeline != "quantize":
                raise CatalogueError(f"case {case.id}: unknown pipeline {case.pipeline!r}")
            dequantized = q.dequantize()
    except ValueError as error:
        message = str(error)
        found = _CLAUSE_IN_MESSAGE.search(message)
        clause = found.group(1) if found else None
        if case.expect_error is None:
            raise CatalogueError(f"case {case.id}: the reference rejected it: {message}") from error
        if clause != case.expect_error:
            raise CatalogueError(f"case {case.id}: expected a {case.expect_error} error, the "
                                 f"reference raised: {message}") from error
        return Outputs(error_clause=clause, error_message=message)
    if case.expect_error is not None:
        raise CatalogueError(f"case {case.id}: expected a {case.expect_error} error, but the "
                             "reference accepted the inputs")
    return Outputs(global_scale=np.float32(q.global_scale),
                   initial_bytes=np.asarray(q.initial_bytes, dtype=np.uint8),
                   scale_bytes=np.asarray(q.scale_bytes, dtype=np.uint8),
                   delta=np.asarray(q.delta, dtype=np.int8),
                   codes=np.asarray(q.codes, dtype=np.uint8),
                   packed=np.asarray(q.packed, dtype=np.uint8),
                   swizzled_scale_bytes=np.asarray(q.swizzled_scale_bytes(), dtype=np.uint8),
                   dequantized=np.asarray(dequantized, dtype=np.float32))


# ------------------------------------------------------------------------------------------
# JSON form of a case (the human-readable, authoritative form)
# ------------------------------------------------------------------------------------------

def case_inputs_json(case: Case) -> dict:
    weight = np.asarray(case.weight)
    if weight.ndim >= 2:
        rows = hexio.matrix_rows(weight.reshape(weight.shape[0], int(np.prod(weight.shape[1:]))))
    else:
        rows = [hexio.row_text(weight.reshape(-1))]
    inputs = {
        "shape": [int(s) for s in weight.shape],
        "weight_dtype": case.dtype_name,
        "weight": rows,
        "hessian_diag": None if case.hessian_diag is None else
                        hexio.row_text(np.asarray(case.hessian_diag, dtype=np.float64)),
        "global_scale": None if case.global_scale is None else _scalar_hex(case.global_scale),
        "method": case.method,
        "init": case.init,
        "K": case.K,
        "U": case.U,
        "scale_ceiling": hexio.fp64_hex(case.scale_ceiling),
    }
    if case.hessian_diag is not None and np.asarray(case.hessian_diag).dtype != np.float64:
        raise CatalogueError(f"case {case.id}: hessian_diag must be stored as float64")
    return inputs


def _scalar_hex(value) -> str:
    if isinstance(value, np.float32):
        return hexio.fp32_hex(value)
    return hexio.fp64_hex(float(value))  # error cases: a value that is not an fp32


def case_outputs_json(outputs: Outputs) -> dict:
    if outputs.error_clause is not None:
        return {"error": {"clause": outputs.error_clause, "message": outputs.error_message}}
    return {
        "global_scale": hexio.fp32_hex(outputs.global_scale),
        "initial_bytes": [hexio.byte_groups(r, 1) for r in outputs.initial_bytes],
        "scale_bytes": [hexio.byte_groups(r, 1) for r in outputs.scale_bytes],
        "delta": [" ".join(f"{int(d):+d}" for d in r) for r in outputs.delta],
        "codes": [hexio.nibble_groups(r) for r in outputs.codes],
        "packed": [hexio.byte_groups(r, 8) for r in outputs.packed],
        "swizzled_scale_bytes": [hexio.byte_groups(outputs.swizzled_scale_bytes[i:i + 32], 32)
                                 for i in range(0, outputs.swizzled_scale_bytes.size, 32)],
        "dequantized": hexio.matrix_rows(outputs.dequantized),
    }


def case_json(case: Case, outputs: Outputs) -> dict:
    entry = {
        "id": case.id,
        "title": case.title,
        "clauses": list(case.clauses),
        "inputs": case_inputs_json(case),
        "expected": case_outputs_json(outputs),
    }
    if case.provenance is not None:
        entry["provenance"] = case.provenance
    if case.notes:
        entry["notes"] = list(case.notes)
    if case.expect_error is not None:
        entry["expect_error"] = case.expect_error
    if case.pipeline != "quantize":
        entry["inputs"]["pipeline"] = case.pipeline
    return entry


def case_from_json(entry: dict) -> Case:
    """The inputs of a stored case, as a Case (outputs are recomputed, never read back)."""
    inputs = entry["inputs"]
    weight = hexio.matrix_from_rows(inputs["weight"], inputs["weight_dtype"], inputs["shape"])
    h = inputs["hessian_diag"]
    gs = inputs["global_scale"]
    return Case(
        id=entry["id"],
        title=entry["title"],
        clauses=tuple(entry["clauses"]),
        weight=weight,
        hessian_diag=None if h is None else hexio.from_row_text(h, "float64"),
        method=inputs["method"],
        init=inputs["init"],
        K=inputs["K"],
        U=inputs["U"],
        scale_ceiling=hexio.scalar_from_hex(inputs["scale_ceiling"]),
        global_scale=None if gs is None else hexio.scalar_from_hex(gs),
        expect_error=entry.get("expect_error"),
        provenance=entry.get("provenance"),
        notes=tuple(entry.get("notes", ())),
        pipeline=inputs.get("pipeline", "quantize"),
    )


def expected_from_json(entry: dict) -> Outputs:
    """The stored expected outputs of a case, decoded (for ``vectors check``)."""
    expected = entry["expected"]
    if "error" in expected:
        return Outputs(error_clause=expected["error"]["clause"],
                       error_message=expected["error"]["message"])
    rows, cols = entry["inputs"]["shape"]
    group_cols = cols // 16
    return Outputs(
        global_scale=hexio.scalar_from_hex(expected["global_scale"]),
        initial_bytes=np.stack([hexio.parse_bytes(r) for r in expected["initial_bytes"]]),
        scale_bytes=np.stack([hexio.parse_bytes(r) for r in expected["scale_bytes"]]),
        delta=np.array([[int(d) for d in r.split()] for r in expected["delta"]],
                       dtype=np.int8).reshape(rows, group_cols),
        codes=np.stack([hexio.parse_nibbles(r) for r in expected["codes"]]),
        packed=np.stack([hexio.parse_bytes(r) for r in expected["packed"]]),
        swizzled_scale_bytes=hexio.parse_bytes("".join(expected["swizzled_scale_bytes"])),
        dequantized=hexio.matrix_from_rows(expected["dequantized"], "float32", (rows, cols)),
    )
