"""The three file forms of a parameter set -- JSON, ``.npz`` and ``$readmemh`` hex text -- and
the manifest. Every function here is a pure function of its arguments: no clock, no host
name, no dict-order dependence, so the same inputs give the same bytes on any machine.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json

import numpy as np

from hscale import SPEC_VERSION, files

from hscale.judge.cases import Case, Rejection  # noqa: F401 - in Record's annotation
from hscale.reference import QuantizedWeight  # noqa: F401 - in Record's annotation
from hscale.reference.constants import GROUP_SIZE
from hscale.reference.global_scale import multiplier_from_reciprocal, reciprocal_from_multiplier
from hscale.reference.packing import swizzle_offset

from . import hexio
from .serialize import ERROR_SET, case_json, dtype_name, parameters_of

Record = tuple[Case, "QuantizedWeight | Rejection"]  # a case and its expected outputs

FORMAT_NAME = "hscale-nvfp4-vectors"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SHA256SUMS = "SHA256SUMS"

CONVENTIONS = {
    "hex": "every number is the hex of its bits, lower case: weights in their native dtype, "
           "hessian_diag float64, global_scale fp32 (8 digits; 16 digits = a float64 that is "
           "not an fp32, error cases only), scale_ceiling float64",
    "codes": "one hex digit per element (bit 3 sign, bits 2..1 exponent, bit 0 mantissa), "
             "16 per group, groups separated by a space",
    "packed": "bytes in memory order, 8 per group: byte k holds element 2k in its low nibble and "
              "element 2k+1 in its high nibble (NVFP4-PACK-1)",
    "scale_bytes": "E4M3 bytes, [m, n/16] row-major (NVFP4-PACK-2); initial_bytes is the "
                   "baseline byte c0 the walk starts from; delta = scale - initial (int8)",
    "swizzled_scale_bytes": "the 128x4 tiled layout of block-scaled GEMMs (NVFP4-PACK-3), "
                            "zero padded, 32 bytes per string",
    "dequantized": "fp32 code_value * e4m3(scale_byte) * s_g, rounded once (NVFP4-DEQ-1)",
    "global_scale_reciprocal": "r = fp32(1 / s_g), what a format that stores the reciprocal "
                               "writes (NVFP4-GS-4); global_scale_reciprocal_reads_back says "
                               "whether fp32(1 / r) is s_g again",
}


# ------------------------------------------------------------------------------------------
# JSON
# ------------------------------------------------------------------------------------------

def set_header(set_name: str, level: int, seed: int, first_case: Case,
               spec_version: str = SPEC_VERSION) -> dict:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "spec_version": spec_version,
        "level": level,
        "seed": seed,
        "set": set_name,
        "parameters": parameters_of(first_case),
        "conventions": CONVENTIONS,
    }


def dumps(document) -> str:
    """The vector files' JSON: keys sorted, one level of indent a level, and a list of scalars
    (a row of values, hex words, ...) on one line, so that large arrays stay readable by row and
    do not spend five lines on each element."""
    return _json(document, 0) + "\n"


def _json(value, level: int) -> str:
    if isinstance(value, (dict, list, tuple)) and value:
        if isinstance(value, dict):
            items = [f"{json.dumps(str(key), ensure_ascii=True)}: {_json(value[key], level + 1)}"
                     for key in sorted(value)]
            opening, closing = "{", "}"
        elif any(isinstance(item, (dict, list, tuple)) for item in value):
            items = [_json(item, level + 1) for item in value]
            opening, closing = "[", "]"
        else:
            return json.dumps(value, ensure_ascii=True)
        inner = " " * (level + 1)
        return (opening + "\n" + ",\n".join(inner + item for item in items) + "\n"
                + " " * level + closing)
    return json.dumps(value, ensure_ascii=True)


def read_data_json(name: str):
    """A frozen data file of the package (``vectors/data/NAME``)."""
    text = importlib.resources.files("hscale.vectors").joinpath("data", name).read_text("utf-8")
    return json.loads(text)


def json_text(header: dict, records: list[Record]) -> str:
    document = dict(header)
    document["cases"] = [case_json(case, outputs) for case, outputs in records]
    return dumps(document)


# ------------------------------------------------------------------------------------------
# $readmemh hex text
# ------------------------------------------------------------------------------------------

def _group_fields(dtype_name: str, with_h: bool,
                  with_blocks: bool = False) -> list[tuple[str, int, str]]:
    """(name, hex digits, meaning) of each field of a group line, left (MSB) to right."""
    w = hexio.word_digits(dtype_name)
    fields = [
        ("case", 4, "case index in this file (table below)"),
        ("row", 4, "row r of the weight"),
        ("group", 4, "group column i (elements 16i .. 16i+15 of row r)"),
        ("s_g", 8, "global scale, fp32 bits (supplied or computed, see the .gs.hex file)"),
    ]
    fields += [(f"w{j}", w, f"weight element 16i+{j}, {dtype_name} bits") for j in range(16)]
    if with_h:
        fields += [(f"h{j}", 16, f"hessian_diag[16i+{j}], float64 bits") for j in range(16)]
    if with_blocks:
        fields += [(f"b{j}_{k}", 16, f"block B[i][{j}][{k}] of X^T X, float64 bits "
                    "(HSCALE-BLOCK-1)") for j in range(16) for k in range(16)]
    fields += [
        ("c0", 2, "expected initial (baseline) scale byte"),
        ("scale", 2, "expected scale byte (E4M3)"),
        ("delta", 2, "expected scale - c0, int8 two's complement"),
        ("packed", 16, "expected packed codes, 8 bytes, byte 0 leftmost; byte k = "
                       "code(2k+1) << 4 | code(2k)"),
    ]
    fields += [(f"deq{j}", 8, f"expected dequantized element 16i+{j}, fp32 bits")
               for j in range(16)]
    return fields


def _field_table(fields) -> list[str]:
    total_bits = 4 * sum(d for _, d, _ in fields)
    lines = [f"// line width: {total_bits} bits ({sum(d for _, d, _ in fields)} hex digits; "
             f"the '_' between fields is a digit separator that $readmemh ignores)",
             "//   field     digits  bits          meaning"]
    hi = total_bits - 1
    for name, digits, meaning in fields:
        lo = hi - 4 * digits + 1
        lines.append(f"//   {name:<9} {digits:>6}  [{hi:>4}:{lo:>4}]  {meaning}")
        hi = lo - 1
    return lines


def _common_header(kind: str, header: dict) -> list[str]:
    lines = [
        f"// {FORMAT_NAME} v{FORMAT_VERSION}: {kind}",
        f"// spec version {header['spec_version']}, level {header['level']}, seed "
        f"{header['seed']}, parameter set {header['set']}",
    ]
    params = header["parameters"]
    lines.append("// parameters: " + ", ".join(f"{k}={params[k]}" for k in sorted(params)))
    lines.append("// nibble order: byte k of a group's packed codes holds element 2k in its low "
                 "nibble, element 2k+1 in its high nibble")
    return lines


def _case_table(set_name: str, records) -> list[str]:
    lines = ["// cases: index (the case field, hex), the key of its observed lines "
             "(<set>:<index>, decimal), case id, shape, s_g, clauses"]
    for index, (case, outputs) in enumerate(records):
        m, n = case.weight.shape
        source = "supplied" if case.global_scale is not None else "computed"
        lines.append(f"//   {index:04x}  {set_name}:{index}  {case.id}  {m}x{n}  s_g {source}  "
                     f"[{' '.join(case.clauses)}]")
    return lines


def group_line_fields(dtype_name: str, with_h: bool,
                      with_blocks: bool = False) -> list[tuple[str, int, str]]:
    """(name, hex digits, meaning) of each field of a ``<set>.hex`` line, left (MSB) first."""
    return _group_fields(dtype_name, with_h, with_blocks)


def line_bits(fields) -> int:
    return 4 * sum(digits for _, digits, _ in fields)


def hex_text(header: dict, records: list[Record]) -> str:
    """One line per 16-element group, for ``$readmemh`` into ``reg [W-1:0] mem [0:N-1]``."""
    case0 = records[0][0]
    with_h = case0.method == "hscale"
    with_blocks = case0.method == "hscale-block"
    fields = _group_fields(dtype_name(case0), with_h, with_blocks)
    lines = _common_header("one line per group", header)
    lines += _field_table(fields)
    lines += _case_table(header["set"], records)
    count = sum(c.weight.shape[0] * c.weight.shape[1] // GROUP_SIZE for c, _ in records)
    lines.append(f"// {count} group lines follow")
    for index, (case, out) in enumerate(records):
        rows, cols = case.weight.shape
        words = hexio.to_words(case.weight.reshape(-1))
        h_words = hexio.to_words(case.hessian_diag) if with_h else None
        b_words = (hexio.to_words(np.asarray(case.hessian_diag, np.float64).reshape(-1))
                   if with_blocks else None)
        deq_words = hexio.to_words(out.dequantize().reshape(-1))
        s_g = hexio.scalar_word(out.global_scale)
        for r in range(rows):
            for i in range(cols // GROUP_SIZE):
                start = r * cols + i * GROUP_SIZE
                parts = [format(index, "04x"), format(r, "04x"), format(i, "04x"), s_g]
                parts += words[start:start + GROUP_SIZE]
                if with_h:
                    parts += h_words[i * GROUP_SIZE:(i + 1) * GROUP_SIZE]
                if with_blocks:
                    parts += b_words[i * 256:(i + 1) * 256]
                parts += [format(int(out.initial_bytes[r, i]), "02x"),
                          format(int(out.scale_bytes[r, i]), "02x"),
                          format(int(out.delta[r, i]) & 0xFF, "02x"),
                          out.packed[r, i * 8:(i + 1) * 8].tobytes().hex()]
                parts += deq_words[start:start + GROUP_SIZE]
                lines.append("_".join(parts))
    return "\n".join(lines) + "\n"


GS_FIELDS = [
    ("case", 4, "case index (same table as the group file)"),
    ("amax", 8, "max |w| over the whole tensor, as fp32 bits (exact for every weight dtype)"),
    ("ceiling", 16, "scale ceiling C, float64 bits"),
    ("given", 2, "01 if s_g was supplied by the caller (NVFP4-GS-3), else 00"),
    ("s_g", 8, "expected global scale, fp32 bits (NVFP4-GS-1, NVFP4-GS-2)"),
    ("r", 8, "s_g stored as its reciprocal, r = fp32(1/s_g), fp32 bits (NVFP4-GS-4; "
             "fp32(1/r) is s_g unless the case table says otherwise)"),
]


def gs_hex_text(header: dict, records: list[Record]) -> str:
    """One line per case: the tensor-level global scale computation."""
    lines = _common_header("one line per case, the global scale", header)
    lines += _field_table(GS_FIELDS)
    lines += _case_table(header["set"], records)
    for index, (case, out) in enumerate(records):
        r = reciprocal_from_multiplier(out.global_scale)
        if multiplier_from_reciprocal(r) != np.float32(out.global_scale):
            lines.append(f"//   case {index:04x}: no fp32 r has fp32(1/r) = s_g; fp32(1/r) = "
                         f"{hexio.scalar_word(multiplier_from_reciprocal(r))} (NVFP4-GS-4)")
    for index, (case, out) in enumerate(records):
        amax = np.max(np.abs(case.weight.astype(np.float64)))
        parts = [format(index, "04x"), hexio.scalar_word(np.float32(amax)),
                 hexio.scalar_word(case.scale_ceiling, "float64"),
                 "01" if case.global_scale is not None else "00",
                 hexio.scalar_word(out.global_scale),
                 hexio.scalar_word(reciprocal_from_multiplier(out.global_scale))]
        lines.append("_".join(parts))
    return "\n".join(lines) + "\n"


SWZ_FIELDS = [
    ("case", 4, "case index (same table as the group file)"),
    ("row", 4, "row r of the weight"),
    ("group", 4, "group column k (the scale byte's column)"),
    ("rows", 4, "m, the weight's rows"),
    ("cols", 4, "n/16, the weight's scale columns"),
    ("offset", 8, "expected byte offset of scale byte (r, k) in the case's 128x4 swizzled "
                  "buffer of ceil(m/128) * ceil(n/64) * 512 bytes (NVFP4-PACK-3)"),
    ("scale", 2, "expected scale byte (E4M3), the byte stored there"),
]


def swz_hex_text(header: dict, records: list[Record]) -> str:
    """One line per group, in the order of the group file: where its scale byte goes in the
    swizzled 128x4 layout (NVFP4-PACK-3). Every other byte of the buffer is padding, 0x00."""
    lines = _common_header("one line per group, the swizzled 128x4 scale layout", header)
    lines.append("// offset(r, k) = ((r // 128) * ceil(n / 64) + k // 4) * 512 + (r % 32) * 16 "
                 "+ ((r % 128) // 32) * 4 + k % 4; bytes no group fills are 0x00")
    lines += _field_table(SWZ_FIELDS)
    lines += _case_table(header["set"], records)
    for index, (case, out) in enumerate(records):
        rows, cols = case.weight.shape
        scale_cols = cols // GROUP_SIZE
        for r in range(rows):
            for k in range(scale_cols):
                offset = int(swizzle_offset(np.array(r), np.array(k), scale_cols))
                lines.append("_".join([format(index, "04x"), format(r, "04x"), format(k, "04x"),
                                       format(rows, "04x"), format(scale_cols, "04x"),
                                       format(offset, "08x"),
                                       format(int(out.scale_bytes[r, k]), "02x")]))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------
# .npz, written byte-for-byte deterministically
# ------------------------------------------------------------------------------------------

def npz_bytes(header: dict, records: list[Record]) -> bytes:
    """Arrays ``cNNN_<field>`` per case (NNN the case index), readable with
    ``np.load(path, allow_pickle=False)``. Weights are stored as their raw bits
    (``cNNN_weight_bits``, uint16/uint32) so that no reader needs ml_dtypes."""
    arrays: dict[str, np.ndarray] = {
        "header": np.array(dumps(header)),
        "case_ids": np.array([case.id for case, _ in records]),
    }
    for index, (case, out) in enumerate(records):
        p = f"c{index:03d}_"
        arrays[p + "weight_bits"] = hexio.bits(case.weight)
        arrays[p + "weight_dtype"] = np.array(dtype_name(case))
        if case.hessian_diag is not None:
            arrays[p + "hessian_diag"] = np.asarray(case.hessian_diag, dtype=np.float64)
        if case.global_scale is not None:
            arrays[p + "global_scale_in"] = np.array(case.global_scale, dtype=np.float32)
        arrays[p + "global_scale"] = np.array(out.global_scale, dtype=np.float32)
        arrays[p + "global_scale_reciprocal"] = np.array(
            reciprocal_from_multiplier(out.global_scale), dtype=np.float32)
        arrays[p + "initial_bytes"] = out.initial_bytes
        arrays[p + "scale_bytes"] = out.scale_bytes
        arrays[p + "delta"] = out.delta
        arrays[p + "codes"] = out.codes
        arrays[p + "packed"] = out.packed
        arrays[p + "swizzled_scale_bytes"] = out.swizzled_scale_bytes()
        arrays[p + "dequantized"] = out.dequantize()
    return files.npz_bytes(arrays)


# ------------------------------------------------------------------------------------------
# A parameter set in all its forms, and the manifest
# ------------------------------------------------------------------------------------------

def render_set(header: dict, records: list[Record]) -> dict[str, bytes]:
    """File name -> bytes for one parameter set."""
    name = header["set"]
    files = {f"{name}.json": json_text(header, records).encode("ascii")}
    if name != ERROR_SET:
        files[f"{name}.npz"] = npz_bytes(header, records)
        files[f"{name}.hex"] = hex_text(header, records).encode("ascii")
        files[f"{name}.gs.hex"] = gs_hex_text(header, records).encode("ascii")
        files[f"{name}.swz.hex"] = swz_hex_text(header, records).encode("ascii")
    return files


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_files(files: dict[str, bytes], level: int, seed: int,
                   clause_index: dict[str, list[str]], case_count: int,
                   spec_version: str = SPEC_VERSION) -> dict[str, bytes]:
    """``manifest.json`` (spec version, every file with its SHA-256 and size, the clause ->
    case index) and ``SHA256SUMS`` (for ``sha256sum -c``)."""
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "spec_version": spec_version,
        "level": level,
        "seed": seed,
        "case_count": case_count,
        "clauses": {clause: sorted(ids) for clause, ids in clause_index.items()},
        "files": {name: {"sha256": sha256(data), "bytes": len(data)}
                  for name, data in sorted(files.items())},
    }
    sums = "".join(f"{sha256(data)}  {name}\n" for name, data in sorted(files.items()))
    return {MANIFEST: dumps(manifest).encode("ascii"), SHA256SUMS: sums.encode("ascii")}
