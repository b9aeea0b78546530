"""Bit-exact hex text for the golden vectors: every number is written as the hex of its bits.

A value is never printed in decimal in a vector file, so no float formatting, locale or
shortest-repr rule can change a byte between machines. Words are lower-case, zero-padded to the
width of their type (4 hex digits for bfloat16/float16, 8 for float32, 16 for float64).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# dtype name (as written in the files) -> (numpy dtype, unsigned integer type of the same width)
DTYPES = {
    "float16": (np.dtype(np.float16), np.dtype(np.uint16)),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16)),
    "float32": (np.dtype(np.float32), np.dtype(np.uint32)),
    "float64": (np.dtype(np.float64), np.dtype(np.uint64)),
    # Only error cases (NVFP4-IN-1) carry these: weights of a type the spec rejects.
    "int32": (np.dtype(np.int32), np.dtype(np.uint32)),
    "int8": (np.dtype(np.int8), np.dtype(np.uint8)),
}

# Short names used in parameter-set names and file names.
SHORT_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
               "int32": "i32", "int8": "i8"}


def dtype_name(dtype) -> str:
    """The file name of a numpy dtype (``bfloat16`` for ml_dtypes' type)."""
    dtype = np.dtype(dtype)
    for name, (numpy_dtype, _) in DTYPES.items():
        if dtype == numpy_dtype:
            return name
    raise ValueError(f"dtype {dtype} has no vector-file name")


def word_digits(name: str) -> int:
    """Hex digits of one word of the named dtype."""
    return 2 * DTYPES[name][0].itemsize


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of ``array`` as unsigned integers of the same width."""
    array = np.ascontiguousarray(array)
    return array.view(DTYPES[dtype_name(array.dtype)][1])


def to_words(array: np.ndarray) -> list[str]:
    """Hex words of every element of a 1-D array (its native bits)."""
    digits = 2 * array.dtype.itemsize
    return [format(int(b), f"0{digits}x") for b in bits(array).reshape(-1)]


def row_text(array: np.ndarray) -> str:
    """A 1-D array as one string of space-separated hex words."""
    return " ".join(to_words(array))


def from_words(words, name: str) -> np.ndarray:
    """Inverse of ``to_words``: hex words to a 1-D array of the named dtype."""
    numpy_dtype, uint_dtype = DTYPES[name]
    digits = word_digits(name)
    for word in words:
        if len(word) != digits:
            raise ValueError(f"hex word {word!r}: a {name} word has {digits} hex digits")
    raw = np.array([int(w, 16) for w in words], dtype=uint_dtype)
    return raw.view(numpy_dtype)


def from_row_text(text: str, name: str) -> np.ndarray:
    return from_words(text.split(), name)


def matrix_rows(array: np.ndarray) -> list[str]:
    """A 2-D array as one string of hex words per row."""
    return [row_text(row) for row in array]


def matrix_from_rows(rows: list[str], name: str, shape) -> np.ndarray:
    """Inverse of ``matrix_rows``; ``shape`` is the stored shape (any rank)."""
    flat = [w for row in rows for w in row.split()]
    array = from_words(flat, name)
    return array.reshape(tuple(shape))


def scalar_word(value, name: str = "float32") -> str:
    """The hex word of one value of the named dtype (``float32``: 8 digits, ``float64``: 16),
    as ``to_words`` writes it; ``scalar_from_hex`` reads it back."""
    return to_words(np.array([value], dtype=DTYPES[name][0]))[0]


def scalar_from_hex(text: str):
    """An fp32 (8 digits, returned as np.float32) or float64 (16 digits, returned as float)."""
    if len(text) == 8:
        return np.array(int(text, 16), dtype=np.uint32).view(np.float32)[()]
    if len(text) == 16:
        return float(np.array(int(text, 16), dtype=np.uint64).view(np.float64)[()])
    raise ValueError(f"hex scalar {text!r}: expected 8 (fp32) or 16 (float64) hex digits")


def byte_groups(array: np.ndarray, per_group: int) -> str:
    """Bytes of a 1-D uint8 array as hex, ``per_group`` bytes per space-separated chunk."""
    text = array.astype(np.uint8).tobytes().hex()
    step = 2 * per_group
    return " ".join(text[i:i + step] for i in range(0, len(text), step))


def nibble_groups(codes: np.ndarray, per_group: int = 16) -> str:
    """4-bit codes of a 1-D array, one hex digit each, ``per_group`` digits per chunk."""
    text = "".join(format(int(c), "x") for c in codes)
    return " ".join(text[i:i + per_group] for i in range(0, len(text), per_group))


def parse_bytes(text: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(text.replace(" ", "")), dtype=np.uint8).copy()


def parse_nibbles(text: str) -> np.ndarray:
    return np.array([int(c, 16) for c in text.replace(" ", "")], dtype=np.uint8)
