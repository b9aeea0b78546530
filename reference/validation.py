"""Input validation (spec clauses NVFP4-IN-1 .. NVFP4-IN-5).

Bad input is rejected with a ``ValueError`` that names the argument, the first offending index
and the rule broken, and cites the clause. Nothing is silently clamped or converted, and values
are shown as Python writes them.
"""

from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from .constants import E4M3_MAX, GROUP_SIZE
from .constants import FP32_SMALLEST_NORMAL
from .global_scale import dequantizes_finitely
from .methods import METHOD_NAMES, METHODS as METHOD_TABLE, Method

WEIGHT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
METHODS = METHOD_NAMES  # the method table's (methods.py), HSCALE-METHOD-1
INITS = ("maxabs", "4over6")


def _first_index(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _index_text(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _type_name(value) -> str:
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _shown(value) -> str:
    """A value as a message shows it: numbers as Python writes them (never a numpy repr such as
    ``np.float64(0.1)``), arrays by dtype and shape, anything long cut short."""
    if isinstance(value, np.ndarray):
        return f"<{_type_name(value)} of dtype {value.dtype}, shape {value.shape}>"
    if isinstance(value, (np.datetime64, np.timedelta64)):
        return f"{type(value).__name__}({str(value)!r})"
    if isinstance(value, np.generic):
        try:
            value = value.item()
        except Exception:  # noqa: BLE001 - an exotic scalar: its own repr will do
            pass
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 20:
        return f"<an integer of {len(str(abs(value)))} digits>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _conversion_hint(value) -> str:
    """How to turn a non-numpy weight into the numpy array the API takes, without changing
    its values (torch tensors and CuPy arrays are named: they are what users hold)."""
    module = type(value).__module__.split(".")[0]
    if module == "torch":
        return ("; convert it with weight.detach().cpu().numpy() (a bfloat16 tensor: "
                "weight.detach().cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16))")
    if module == "cupy":
        return ("; copy it to the host with cupy.asnumpy(weight), or quantize it on the GPU "
                "with the cupy backend's quantize_on_device")
    if isinstance(value, (list, tuple)) or hasattr(value, "__array__"):
        return "; convert it with np.asarray(weight, dtype=np.float32) (or float16, bfloat16)"
    return ""


def check_weight(weight) -> np.ndarray:
    """The weight itself, checked (NVFP4-IN-1); every accepted dtype widens exactly to float64.
    A numpy array, or a ``numpy.memmap``; other ndarray subclasses are refused, since they can
    change what reading an element means (a masked array's mask would be ignored, NaN under
    it included; ``numpy.matrix`` redefines indexing)."""
    if not isinstance(weight, np.ndarray):
        raise ValueError(f"weight: expected a numpy array, got {_type_name(weight)}"
                         f"{_conversion_hint(weight)} (spec NVFP4-IN-1)")
    if isinstance(weight, np.ma.MaskedArray):
        raise ValueError("weight: a masked array (numpy.ma) is not accepted: every element is "
                         "quantized, so its mask would be ignored; pass weight.filled(value) or "
                         "weight.data (spec NVFP4-IN-1)")
    if type(weight) is not np.ndarray and not isinstance(weight, np.memmap):
        raise ValueError(f"weight: {_type_name(weight)} (a subclass of numpy.ndarray) is not "
                         "accepted; pass np.asarray(weight) (spec NVFP4-IN-1)")
    check_weight_layout(weight.dtype, weight.shape)
    check_weight_finite(weight)
    return weight


def check_weight_layout(dtype, shape) -> None:
    """The weight's dtype and shape (NVFP4-IN-1): what can be checked without reading it (a
    backend holding the weight on a device checks these here, the values on the device)."""
    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight: dtype {dtype} is not accepted; use float32, float16 or "
                         "bfloat16 (ml_dtypes) (spec NVFP4-IN-1)")
    shape = tuple(shape)
    if len(shape) != 2:
        raise ValueError(f"weight: expected a 2-D (m, n) array, got shape {shape} "
                         "(spec NVFP4-IN-1)")
    rows, cols = shape
    if rows == 0 or cols == 0:
        raise ValueError(f"weight: shape {shape} is empty (spec NVFP4-IN-1)")
    if cols % GROUP_SIZE:
        raise ValueError(f"weight: n = {cols} columns is not a multiple of the group size "
                         f"{GROUP_SIZE} (spec NVFP4-IN-1)")


def check_weight_finite(weight: np.ndarray) -> None:
    """Every weight finite (NVFP4-IN-1); the message names the first NaN or Inf."""
    not_finite = ~np.isfinite(weight)
    if not_finite.any():
        index = _first_index(not_finite)
        raise ValueError(f"weight{_index_text(index)} = {float(weight[index])}: weights must be "
                         "finite, NaN and Inf cannot be quantized (spec NVFP4-IN-1)")


def _exact_float64(value, name: str, shape: tuple, shape_text: str, clause: str,
                   masked_hint: str = "") -> np.ndarray:
    """``value`` as float64 of ``shape``, exact and finite, or a ValueError naming ``name``, the
    first offending index and ``clause``: any array-like of real numbers converting exactly to
    float64 (a list, a CPU torch tensor); not a masked array, whose mask would be ignored."""
    if isinstance(value, np.ma.MaskedArray):
        raise ValueError(f"{name}: a masked array (numpy.ma) is not accepted: its mask would be "
                         f"ignored{masked_hint} (spec {clause})")
    try:
        array = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - anything numpy cannot read is the caller's mistake
        raise ValueError(f"{name}: {_type_name(value)} cannot be read as a numpy array "
                         f"({type(exc).__name__}: {exc}) (spec {clause})") from None
    if array.dtype.kind not in "fiu" and array.dtype != np.dtype(ml_dtypes.bfloat16):
        raise ValueError(f"{name}: dtype {array.dtype} is not a real number type (spec {clause})")
    if array.shape != shape:
        raise ValueError(f"{name}: shape {array.shape}, expected {shape_text} (spec {clause})")
    exact = array.astype(np.float64)
    if not np.array_equal(exact.astype(array.dtype), array, equal_nan=True):
        raise ValueError(f"{name}: does not convert exactly to float64 (spec {clause})")
    bad = ~np.isfinite(exact)
    if bad.any():
        index = _first_index(bad)
        raise ValueError(f"{name}{_index_text(index)} = {exact[index]}: must be finite "
                         f"(spec {clause})")
    return exact


def check_hessian_diag(hessian_diag, cols: int) -> np.ndarray:
    """h as float64 (n,), or a ValueError (NVFP4-IN-2): real, exact in float64, finite and
    non-negative, one value per input column of the weight."""
    exact = _exact_float64(hessian_diag, "hessian_diag", (cols,),
                           f"({cols},), one weight per input column of the weight",
                           "NVFP4-IN-2", "; pass hessian_diag.filled(value)")
    negative = exact < 0
    if negative.any():
        j = _first_index(negative)[0]
        raise ValueError(f"hessian_diag[{j}] = {exact[j]}: must be non-negative, a diagonal of "
                         "X^T X (spec NVFP4-IN-2)")
    return exact


def check_hessian_blocks(blocks, cols: int) -> np.ndarray:
    """The diagonal 16 x 16 blocks of X^T X as float64 (n/16, 16, 16), or a ValueError
    (NVFP4-IN-6)."""
    expected = (cols // 16, 16, 16)
    return _exact_float64(blocks, "hessian_blocks", expected,
                          f"{expected}, the diagonal 16 x 16 blocks of X^T X", "NVFP4-IN-6")


def check_method_hessian(hessian_diag, method: str, cols: int):
    """h as float64 (n,) for hscale, where it is required (NVFP4-IN-2); the blocks
    (n/16, 16, 16) for hscale-block (NVFP4-IN-6); None for rtn and scale-only, which do not
    read it (HSCALE-METHOD-1)."""
    statistic = METHOD_TABLE[method].statistic if method in METHOD_TABLE else None
    if statistic == "blocks":
        if hessian_diag is None:
            raise ValueError("hessian_blocks: method 'hscale-block' needs the diagonal 16 x 16 "
                             "blocks of X^T X, got None (spec NVFP4-IN-6, HSCALE-METHOD-1)")
        return check_hessian_blocks(hessian_diag, cols)
    if statistic != "h":
        return None
    if hessian_diag is None:
        raise ValueError("hessian_diag: method 'hscale' needs the Hessian diagonal h, got "
                         "None (spec NVFP4-IN-2, HSCALE-METHOD-1)")
    return check_hessian_diag(hessian_diag, cols)


def check_window(K, U) -> tuple[int, int]:
    """K >= 1 candidates with 0 <= U <= K - 1 upward shifts, as ints (NVFP4-IN-3). Any size is
    valid: shifts beyond the ladder's span search nothing new (HSCALE-WIN-1)."""
    for name, value in (("K", K), ("U", U)):
        if _not_a_number(value) or not isinstance(value, (numbers.Integral, np.integer)):
            raise ValueError(f"{name} = {_shown(value)}: must be an integer, got "
                             f"{_type_name(value)} (spec NVFP4-IN-3)")
    K, U = int(K), int(U)
    if K < 1:
        raise ValueError(f"K = {_shown(K)}: the window needs at least one candidate, K >= 1 "
                         "(spec NVFP4-IN-3)")
    if not 0 <= U <= K - 1:
        raise ValueError(f"U = {_shown(U)}: must lie in 0..K-1 = 0..{_shown(K - 1)} so that "
                         "D = K-1-U >= 0 (spec NVFP4-IN-3)")
    return K, U


def _not_a_number(value) -> bool:
    """Bools and numpy's time types, which are integers to isinstance but not numbers here
    (numpy's timedelta64 is a subclass of its signed integer)."""
    return isinstance(value, (bool, np.bool_, np.datetime64, np.timedelta64))


def _real_number(name: str, value, clause: str) -> float:
    """``value`` as a float when it is a real number: an int, a float, a ``fractions.Fraction``,
    a numpy integer or floating scalar; not a bool (numpy's included), a string, bytes, a
    complex number or a date, which float() would take or half-take."""
    if _not_a_number(value) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise ValueError(f"{name} = {_shown(value)}: must be a real number, got "
                         f"{_type_name(value)} (spec {clause})")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} = {_shown(value)}: too large to be a floating-point number "
                         f"(spec {clause})") from None


def check_global_scale(global_scale) -> np.float32:
    """A caller-supplied s_g: a positive, finite, normal fp32 value with which the largest
    dequantized magnitude 6 * 448 * s_g is still finite in fp32 (NVFP4-IN-4)."""
    value = _real_number("global_scale", global_scale, "NVFP4-IN-4")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"global_scale = {value!r}: must be positive and finite "
                         "(spec NVFP4-IN-4)")
    with np.errstate(over="ignore"):
        as_fp32 = float(np.float32(value))
    if as_fp32 != value:
        raise ValueError(f"global_scale = {value!r}: is not exactly representable in fp32; "
                         "it is stored as fp32 and would be silently rounded (spec NVFP4-IN-4)")
    if value < FP32_SMALLEST_NORMAL:
        raise ValueError(f"global_scale = {value!r}: is below the smallest normal fp32 2^-126 "
                         "(spec NVFP4-IN-4)")
    if not dequantizes_finitely(value):
        raise ValueError(f"global_scale = {value!r}: 6 * 448 * global_scale overflows fp32, so "
                         "dequantized values could be infinite (spec NVFP4-IN-4)")
    return np.float32(value)


def check_scale_ceiling(scale_ceiling) -> float:
    """The scale ceiling C: a real number in (0, 448] (NVFP4-IN-4)."""
    value = _real_number("scale_ceiling", scale_ceiling, "NVFP4-IN-4")
    if not (np.isfinite(value) and 0 < value <= E4M3_MAX):
        raise ValueError(f"scale_ceiling = {value!r}: must lie in (0, 448], the E4M3 range "
                         "(spec NVFP4-IN-4)")
    return value


def method_named(name) -> Method:
    """The method ``name`` of the method table (``methods.py``), or a ValueError listing them
    (NVFP4-IN-5)."""
    return METHOD_TABLE[check_choice("method", name, METHOD_NAMES)]


def check_choice(name: str, value, allowed: tuple[str, ...]) -> str:
    """``method`` or ``init`` among the named choices (NVFP4-IN-5), as a str."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} = {_shown(value)}: must be one of "
                         f"{', '.join(map(repr, allowed))} (spec NVFP4-IN-5)")
    return str(value)
