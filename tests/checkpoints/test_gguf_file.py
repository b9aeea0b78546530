"""The kit's one GGUF reader (``hscale.checkpoints.gguf_file.GGUFFile``) and the container checks
it carries (docs/spec.md NVFP4-GGUF-2): a small file written by gguf's own writer reads back as
written, and each fault llama.cpp's loader refuses, planted in its bytes by the format's own
definition (tests/helpers/mutations/gguf_file.py, not the reader under test), is one line
naming the file, the key or tensor, and the clause. And no module of the kit reads GGUF through
gguf's ``GGUFReader``."""

from __future__ import annotations

import ast
import os
import struct
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF needs the gguf package (the engines extra)")

from helpers.gguf_models import write_gguf_file  # noqa: E402
from helpers.mutations.gguf_file import gguf_layout, patch  # noqa: E402

from hscale.checkpoints.gguf_file import GGUFFile, GGUFFileError  # noqa: E402

pytestmark = pytest.mark.clause("NVFP4-GGUF-2")

U32, STR, ARR = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY
LONGEST_NAME = "n" * 63  # llama.cpp's names are shorter than 64 bytes: 63 is the longest
F32 = np.arange(64, dtype=np.float32).reshape(2, 32)
Q8 = gguf.quants.quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32),
                          gguf.GGMLQuantizationType.Q8_0)
KEYS = {"general.alignment": (32, U32), "general.name": ("base", STR),
        "hscale.test.aaaa": (7, U32), "hscale.test.bbbb": (8, U32),
        "tokenizer.ggml.tokens": (["a", "b", "c"], ARR)}


def base(path: Path, name: str = LONGEST_NAME) -> Path:
    return write_gguf_file(path, "llama", KEYS, {
        "t.a": (F32, None), "t.b": (Q8, gguf.GGMLQuantizationType.Q8_0),
        name: (F32[:1].copy(), None)})


def test_a_file_reads_back_as_written(tmp_path):
    path = base(tmp_path / "base.gguf")
    file = GGUFFile(path)
    assert file.version == 3 and file.alignment == 32
    assert file.values() == {"general.architecture": "llama",
                             **{key: value for key, (value, _kind) in KEYS.items()}}
    assert file.fields["tokenizer.ggml.tokens"].types == [int(ARR), int(STR)]
    assert [(t.name, t.shape) for t in file.tensors] == [
        ("t.a", (2, 32)), ("t.b", (2, 32)), (LONGEST_NAME, (1, 32))]
    a, b, longest = file.tensors
    assert np.array_equal(file.raw(a), F32) and np.array_equal(file.raw(longest), F32[:1])
    assert np.array_equal(file.stored(b), Q8.reshape(-1))  # the writer's bytes, exactly
    with open(path, "ab") as f:  # bytes after the last tensor: llama.cpp reads what the infos say
        f.write(b"\0" * 40)
    assert [t.name for t in GGUFFile(path).tensors] == ["t.a", "t.b", LONGEST_NAME]
    patch(path, 4, struct.pack("<I", 2))  # version 2: llama.cpp reads it
    assert GGUFFile(path).version == 2


def _kv(path, key):
    return gguf_layout(path)["kv"][key]  # (key offset, value type, value offset, length)


def _tensor(path, index):
    return gguf_layout(path)["tensors"][index]  # (name, info, dims, n_dims, type, offset at)


def _offset(path, index):
    return struct.unpack_from("<Q", path.read_bytes(), _tensor(path, index)[5])[0]


def _cut(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


FAULTS = {  # name -> (how the bytes are changed, words the refusal must say)
    "version-1": (lambda p: patch(p, 4, struct.pack("<I", 1)),
                  ["version 1; llama.cpp reads 2 and 3"]),
    "version-4": (lambda p: patch(p, 4, struct.pack("<I", 4)), ["version 4;"]),
    "other-byte-order": (lambda p: patch(p, 4, struct.pack(">I", 3)),
                         ["0x03000000", "other byte order"]),
    "key-twice": (lambda p: patch(p, _kv(p, "hscale.test.bbbb")[0] + 8, b"hscale.test.aaaa"),
                  ["metadata key 'hscale.test.aaaa' given twice"]),
    "key-not-utf8": (lambda p: patch(p, _kv(p, "hscale.test.bbbb")[0] + 8, b"\xff"),
                     ["key-value pair", "after 'hscale.test.aaaa'", "not UTF-8", "0xFF"]),
    "value-not-utf8": (lambda p: patch(p, _kv(p, "general.name")[2] + 8, b"\xc3"),
                       ["metadata 'general.name' holds a string that is not UTF-8",
                        "byte 0xC3 at 0 of it"]),
    "value-type": (lambda p: patch(p, _kv(p, "hscale.test.aaaa")[2] - 4, struct.pack("<I", 13)),
                   ["metadata 'hscale.test.aaaa' has value type 13"]),
    "array-of-arrays": (lambda p: patch(p, _kv(p, "tokenizer.ggml.tokens")[2],
                                        struct.pack("<I", 9)),
                        ["metadata 'tokenizer.ggml.tokens'", "an array of arrays"]),
    "alignment-not-power-of-two": (lambda p: patch(p, _kv(p, "general.alignment")[2],
                                                   struct.pack("<I", 48)),
                                   ["general.alignment 48: not a power of two"]),
    "alignment-int32": (lambda p: patch(p, _kv(p, "general.alignment")[2] - 4,
                                        struct.pack("<I", 5)),
                        ["'general.alignment' is stored as INT32", "reads it as UINT32"]),
    "tensor-twice": (lambda p: patch(p, _tensor(p, 1)[1] + 8, b"t.a"),
                     ["tensor 't.a' given twice (tensors 0 and 1)"]),
    "tensor-name-not-utf8": (lambda p: patch(p, _tensor(p, 1)[1] + 8, b"\xff"),
                             ["tensor 1's name", "not UTF-8", "0xFF"]),
    "dimensions": (lambda p: patch(p, _tensor(p, 0)[2] - 4, struct.pack("<I", 5)),
                   ["tensor 't.a': 5 dimensions; llama.cpp reads at most 4"]),
    "ggml-type": (lambda p: patch(p, _tensor(p, 1)[4], struct.pack("<I", 200)),
                  ["tensor 't.b': ggml type 200"]),
    "row-not-a-block": (lambda p: patch(p, _tensor(p, 1)[2], struct.pack("<Q", 48)),
                        ["tensor 't.b' of type Q8_0: rows of 48 elements", "block of 32"]),
    "too-many-elements": (lambda p: patch(p, _tensor(p, 0)[2], struct.pack("<QQ", 2 ** 32,
                                                                              2 ** 31)),
                          ["tensor 't.a'", "more elements than"]),
    "offset-shared": (lambda p: patch(p, _tensor(p, 1)[5], struct.pack("<Q", 0)),
                      ["tensor 't.b': its data at offset 0", "llama.cpp expects 256"]),
    "offset-skipping": (lambda p: patch(p, _tensor(p, 2)[5],
                                        struct.pack("<Q", _offset(p, 2) + 32)),
                        [f"tensor {LONGEST_NAME!r}: its data at offset 384",
                         "llama.cpp expects 352"]),
    "tensor-cut": (lambda p: _cut(p, p.stat().st_size - 1),
                   [f"truncated: tensor {LONGEST_NAME!r} ends at byte"]),
    "header-cut": (lambda p: _cut(p, _tensor(p, 2)[1] + 4),
                   ["truncated: the length of tensor 2's name (8 bytes at byte"]),
    "string-length": (lambda p: patch(p, _kv(p, "general.name")[2], struct.pack("<Q", 2 ** 40)),
                      ["truncated: metadata 'general.name', a string of 1,099,511,627,776"]),
    "array-length": (lambda p: patch(p, _kv(p, "tokenizer.ggml.tokens")[2] + 4,
                                     struct.pack("<Q", 2 ** 40)),
                     ["metadata 'tokenizer.ggml.tokens', an array of 1,099,511,627,776 STRING",
                      "cannot fit"]),
    "counts": (lambda p: patch(p, 16, struct.pack("<Q", 2 ** 40)),
               ["1,099,511,627,776 key-value pairs", "cannot fit"]),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_one_line_naming_the_file_the_place_and_the_clause(tmp_path, fault):
    path = base(tmp_path / "case.gguf")
    plant, words = FAULTS[fault]
    plant(path)
    with pytest.raises(GGUFFileError) as refused:
        GGUFFile(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}: not a readable GGUF file: ")
    assert message.endswith("(spec NVFP4-GGUF-2)"), message
    for word in words:
        assert word in message, (word, message)


def test_a_name_of_64_bytes(tmp_path):
    """The smallest name llama.cpp refuses (the base holds the longest it reads, 63 bytes)."""
    path = base(tmp_path / "long.gguf", name="n" * 64)
    with pytest.raises(GGUFFileError, match=r"'n{64}': a name of 64 bytes; llama.cpp's are "
                                            r"shorter than 64 \(spec NVFP4-GGUF-2\)$"):
        GGUFFile(path)


def test_a_string_array_element_not_utf8_is_refused_when_decoded(tmp_path):
    """A string array's strings are decoded when asked (a 262,144-token vocabulary is not
    decoded to read a header): the scalar keys read, and the array refuses, naming the
    element."""
    path = base(tmp_path / "case.gguf")
    value_at = _kv(path, "tokenizer.ggml.tokens")[2]
    patch(path, value_at + 12 + 9 + 8, b"\xff")  # the "b" of ["a", "b", "c"]
    file = GGUFFile(path)
    assert file.value("general.name") == "base"
    with pytest.raises(GGUFFileError, match=r"metadata 'tokenizer.ggml.tokens'\[1\] holds a "
                                            r"string that is not UTF-8 \(byte 0xFF at 0 of it"):
        file.values()


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GGUFFileError, match=r"is a FIFO, not a regular file: refused, not read "
                                            r"\(spec NVFP4-CKPT-5\)"):
        GGUFFile(fifo)  # a FIFO's open would block: refused without being opened


ROOT = Path(__file__).resolve().parents[2]
#: The module that lends transformers' GGUF routes the kit's reading of a file: it stands in
#: for ``gguf.GGUFReader`` (saving and restoring the attribute), which it never calls itself.
STAND_IN = ROOT / "hscale" / "checkpoints" / "gguf_transformers.py"


def _reader_uses(path: Path) -> list[str]:
    """Where the module at ``path`` names gguf's ``GGUFReader``: imports, calls, subclasses,
    and (outside the stand-in) any mention."""
    text = path.read_text()
    if "GGUFReader" not in text and "gguf_reader" not in text:
        return []  # names nothing of it (the parse below is for the modules that do)
    tree = ast.parse(text, str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any("GGUFReader" in n or n.endswith("gguf_reader") for n in names):
                found.append(f"line {node.lineno}: imports it")
        elif isinstance(node, ast.ClassDef) and any("GGUFReader" in ast.unparse(b)
                                                    for b in node.bases):
            found.append(f"line {node.lineno}: subclasses it")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("GGUFReader"):
            found.append(f"line {node.lineno}: calls it")
        elif isinstance(node, (ast.Name, ast.Attribute)) and path != STAND_IN and \
                (getattr(node, "id", None) or getattr(node, "attr", None)) == "GGUFReader":
            found.append(f"line {node.lineno}: names it")
    return found


def test_no_module_reads_gguf_through_ggufreader():
    """One reader of GGUF files: every module of the kit reads them through ``GGUFFile``."""
    modules = [p for folder in ("hscale", "reference", "backends", "conformance", "vectors")
               for p in sorted((ROOT / folder).rglob("*.py"))]
    assert STAND_IN in modules and len(modules) > 100
    uses = {str(p.relative_to(ROOT)): u for p in modules if (u := _reader_uses(p))}
    assert uses == {}, uses
