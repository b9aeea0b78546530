"""A golden-vector case in its files: the JSON form of its inputs and expected outputs (the
authoritative, human-readable form), and the parameter set it belongs to (the unit that gets one
file per format).

Reading a vector file (``read_vector_document``, ``read_case``) refuses what is not one with
``MalformedVectors``, naming the file and the case.

The case itself is the one case model of the project, ``hscale.judge.cases.Case``; its
outputs are a ``QuantizedWeight`` or, for inputs the spec rejects, a ``Rejection``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hscale.judge.cases import Case, CaseError, Rejection
from hscale.reference import QuantizedWeight, swizzle_scale_bytes
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier

from . import hexio

ERROR_SET = "errors"


class MalformedVectors(ValueError):
    """A vector file that cannot be read as what it claims to be (names the file and case)."""


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def read_vector_document(path, shown=None) -> tuple[dict, list]:
    """(document, its case entries) of a vector JSON file; ``MalformedVectors`` naming the
    file (as ``shown``, default its path) when it is not one."""
    shown = path if shown is None else shown
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as error:  # not JSON, or not UTF-8
        raise MalformedVectors(f"{shown}: not JSON ({error})") from None
    entries = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        found = (f"a JSON {_JSON_KINDS.get(type(document), 'value')}"
                 if not isinstance(document, dict) else
                 "no 'cases'" if entries is None else "'cases' is not a list")
        raise MalformedVectors(f"{shown}: not a vector file (a JSON object with a 'cases' list "
                               f"is expected; found {found})")
    return document, entries


def read_case(path, number: int, entry, with_expected: bool = True) -> Case:
    """Case ``number`` of the vector file ``path`` (``case_from_json``); ``MalformedVectors``
    naming the file and the case when the entry cannot be read."""
    if not isinstance(entry, dict):
        raise MalformedVectors(f"{path}: cases[{number}]: not a JSON object")
    ident = entry.get("id", f"cases[{number}]")
    try:
        return case_from_json(entry, with_expected=with_expected)
    except MalformedVectors as error:  # it names the case
        raise MalformedVectors(f"{path}: {error}") from None
    except KeyError as error:
        raise MalformedVectors(f"{path}: case {ident}: no field {error}") from None
    except (ValueError, TypeError, IndexError, AttributeError) as error:
        raise MalformedVectors(f"{path}: case {ident}: unreadable ({error})") from None


def dtype_name(case: Case) -> str:
    return hexio.dtype_name(np.asarray(case.weight).dtype)


def set_name(case: Case) -> str:
    """The parameter set a case belongs to (one file per set and format)."""
    if case.expect_error is not None:
        return ERROR_SET
    return parameter_set_name(dtype_name(case), case.method, case.init, case.K, case.U,
                              case.scale_ceiling)


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
        "weight_dtype": dtype_name(case),
        "method": case.method,
        "init": case.init,
        "K": int(case.K),
        "U": int(case.U),
        "D": int(case.K) - 1 - int(case.U),
        "scale_ceiling": float(case.scale_ceiling),
        "hessian_diag": "per case (float64)" if case.method == "hscale" else
                        ("per case (float64): the (n/16, 16, 16) blocks of X^T X, row-major "
                         "(HSCALE-BLOCK-1)" if case.method == "hscale-block" else
                         ("not read (h = 1)" if case.method == "scale-only" else "not read")),
    }


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
        "weight_dtype": dtype_name(case),
        "weight": rows,
        "hessian_diag": None if case.hessian_diag is None else
                        hexio.row_text(np.asarray(case.hessian_diag, dtype=np.float64)
                                       .reshape(-1)),
        "global_scale": None if case.global_scale is None else _scalar_hex(case.global_scale),
        "method": case.method,
        "init": case.init,
        "K": case.K,
        "U": case.U,
        "scale_ceiling": hexio.scalar_word(case.scale_ceiling, "float64"),
    }
    if case.hessian_diag is not None and np.asarray(case.hessian_diag).dtype != np.float64:
        raise CaseError(f"case {case.id}: hessian_diag must be stored as float64")
    return inputs


def _scalar_hex(value) -> str:
    if isinstance(value, np.float32):
        return hexio.scalar_word(value)
    return hexio.scalar_word(float(value), "float64")  # error cases: a value that is not an fp32


def case_outputs_json(outputs: QuantizedWeight | Rejection) -> dict:
    if isinstance(outputs, Rejection):
        return {"error": {"clause": outputs.clause, "message": outputs.message}}
    swizzled = outputs.swizzled_scale_bytes()
    reciprocal = reciprocal_from_multiplier(outputs.global_scale)
    return {
        "global_scale": hexio.scalar_word(outputs.global_scale),
        "global_scale_reciprocal": hexio.scalar_word(reciprocal),
        "global_scale_reciprocal_reads_back":
            bool(multiplier_from_reciprocal(reciprocal) == np.float32(outputs.global_scale)),
        "initial_bytes": [hexio.byte_groups(r, 1) for r in outputs.initial_bytes],
        "scale_bytes": [hexio.byte_groups(r, 1) for r in outputs.scale_bytes],
        "delta": [" ".join(f"{int(d):+d}" for d in r) for r in outputs.delta],
        "codes": [hexio.nibble_groups(r) for r in outputs.codes],
        "packed": [hexio.byte_groups(r, 8) for r in outputs.packed],
        "swizzled_scale_bytes": [hexio.byte_groups(swizzled[i:i + 32], 32)
                                 for i in range(0, swizzled.size, 32)],
        "dequantized": hexio.matrix_rows(outputs.dequantize()),
    }


def case_json(case: Case, outputs: QuantizedWeight | Rejection) -> dict:
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


def _hessian_from_text(text: str, method: str) -> np.ndarray:
    """h (n,) as stored; for hscale-block the blocks, stored row-major, as (n/16, 16, 16) (an
    error case's input of another size is kept as it is)."""
    values = hexio.from_row_text(text, "float64")
    if method == "hscale-block" and values.size % 256 == 0:
        return values.reshape(-1, 16, 16)
    return values


def case_from_json(entry: dict, with_expected: bool = True) -> Case:
    """The stored case, its expected outputs read from the file (``expected_from_json``)."""
    inputs = entry["inputs"]
    weight = hexio.matrix_from_rows(inputs["weight"], inputs["weight_dtype"], inputs["shape"])
    h = inputs["hessian_diag"]
    gs = inputs["global_scale"]
    case = Case(
        id=entry["id"],
        title=entry["title"],
        clauses=tuple(entry["clauses"]),
        weight=weight,
        hessian_diag=None if h is None else _hessian_from_text(h, inputs["method"]),
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
    return case.with_(expected=expected_from_json(entry)) if with_expected else case


def expected_from_json(entry: dict) -> QuantizedWeight | Rejection:
    """The stored expected outputs of a case. The stored fields that follow from others (delta,
    packed, the swizzled layout, the dequantized values) must agree with them: a file edited by
    hand, or damaged, is refused with a message naming the field."""
    expected = entry["expected"]
    if "error" in expected:
        return Rejection(expected["error"]["clause"], expected["error"]["message"])
    rows, cols = entry["inputs"]["shape"]
    group_cols = cols // 16
    outputs = QuantizedWeight.from_bytes(
        np.stack([hexio.parse_nibbles(r) for r in expected["codes"]]),
        np.stack([hexio.parse_bytes(r) for r in expected["scale_bytes"]]),
        np.stack([hexio.parse_bytes(r) for r in expected["initial_bytes"]]),
        hexio.scalar_from_hex(expected["global_scale"]),
        method=entry["inputs"]["method"], init=entry["inputs"]["init"], K=entry["inputs"]["K"],
        U=entry["inputs"]["U"], scale_ceiling=hexio.scalar_from_hex(entry["inputs"]["scale_ceiling"]))
    derived = {
        "delta": (np.array([[int(d) for d in r.split()] for r in expected["delta"]],
                           dtype=np.int8).reshape(rows, group_cols), outputs.delta),
        "packed": (np.stack([hexio.parse_bytes(r) for r in expected["packed"]]), outputs.packed),
        "swizzled_scale_bytes": (hexio.parse_bytes("".join(expected["swizzled_scale_bytes"])),
                                 swizzle_scale_bytes(outputs.scale_bytes)),
        "dequantized": (hexio.matrix_from_rows(expected["dequantized"], "float32", (rows, cols)),
                        outputs.dequantize()),
    }
    if "global_scale_reciprocal" in expected:  # NVFP4-GS-4: r = fp32(1 / s_g)
        reciprocal = reciprocal_from_multiplier(outputs.global_scale)
        derived["global_scale_reciprocal"] = (
            hexio.scalar_from_hex(expected["global_scale_reciprocal"]), reciprocal)
        derived["global_scale_reciprocal_reads_back"] = (
            np.array(expected.get("global_scale_reciprocal_reads_back")),
            np.array(bool(multiplier_from_reciprocal(reciprocal)
                          == np.float32(outputs.global_scale))))
    for name, (stored, implied) in derived.items():
        stored, implied = np.asarray(stored), np.asarray(implied)
        if stored.shape != implied.shape or stored.tobytes() != implied.tobytes():
            raise MalformedVectors(f"case {entry['id']}: expected.{name} does not follow from "
                                   "the stored codes, scale bytes and global scale")
    return outputs
