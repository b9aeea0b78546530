"""NVIDIA ModelOpt's three NVFP4 weight-scale searches, run on one Linear through its production
calibration path, for the fidelity report's head-to-head (``hscale.report.head_to_head``).

What is called, for every calibrator (nvidia-modelopt 0.47):

1. A one-Linear model ``torch.nn.Sequential(torch.nn.Linear(n, m, bias=False))`` holding the
   weight, and ``modelopt.torch.quantization.quantize(model, config, forward_loop)`` (``mtq``).
   ``config["quant_cfg"]`` is ModelOpt's own preset ``mtq.NVFP4_W4A4_WEIGHT_LOCAL_HESSIAN_CFG``
   (the same quantizer list as ``NVFP4_W4A4_WEIGHT_MSE_FP8_SWEEP_CFG``): the weight quantizer
   is static NVFP4 (``num_bits (2, 1)``, ``block_sizes {-1: 16, "type": "static",
   "scale_bits": (4, 3)}``, the recipe ``configs/numerics/nvfp4_static``). One entry is added,
   ``{"quantizer_name": "*input_quantizer", "enable": False}``: the report compares weight
   quantization alone, and every method in it sees full-precision inputs.
   ``config["algorithm"]`` is what selects the calibrator (``ALGORITHMS``).
2. The calibration batch: the report has only ``G = X^T X`` of the layer's input, not X. The
   forward loop feeds the n rows of ``X = diag(sqrt(lambda)) V^T``, where ``G = V diag(lambda)
   V^T`` (``numpy.linalg.eigh``; eigenvalues below 0, i.e. rounding noise, are set to 0), so
   ``X^T X = G`` (``calibration_inputs``). Only the local-Hessian calibrator reads the
   activations; for the others they are forwarded and ignored (the input quantizer is off).
3. After calibration, ``model[0].weight_quantizer`` (a ``StaticBlockScaleQuantizer``) holds the
   chosen per-block amax in ``_amax`` (float32, one per 16-element block, row-major) and the
   global amax in ``global_amax`` (float32 scalar). The returned weight is that quantizer's own
   fake-quantization of the weight, ``weight_quantizer(weight)`` (``StaticBlockScaleQuantizer.
   _fake_quantize`` -> ``tensor_quant.static_blockwise_fp4_fake_quant``): per block, E4M3 scale
   ``e4m3(amax_b / 6 / s)`` and E2M1 codes, dequantized, with ``s = global_amax / (6 * 448)``.

The scale rules (read from ``model_calib.py`` and ``calib/mse.py``). All three first run
``max_calibrate`` (per-block amax = max |w| of the block) and promote the weight quantizer,
which sets ``global_amax`` = the largest per-block amax = max |W|
(``promote_static_block_weight_quantizers``); each block then picks its own candidate, the one
with the least summed loss over the block (``_mse_calibrate_weights``):

- ``mse`` (``{"method": "mse"}``, ``MseCalibrator``): candidates ``amax_b * k`` for the 39
  multipliers ``k = torch.linspace(0.25, 4.0, 39)`` (``ceil((4 - 0.25) / 0.1) + 1`` steps of
  0.0987; 1.0 itself is not among them), each fake-quantized (so its scale is rounded to
  E4M3); objective: the block's squared weight error ``sum (w - q(w))^2``.
- ``mse_fp8_sweep`` (``{"method": "mse", "fp8_scale_sweep": True}``, ``NVFP4MSECalibrator``):
  candidates ``global_amax * e / 448`` for the 126 finite positive E4M3 values ``e``
  (``fp8_scale_candidates``): every E4M3 block scale there is; objective: the block's squared
  weight error.
- ``local_hessian`` (``{"method": "local_hessian"}``, its default ``fp8_scale_sweep=True``,
  ``local_hessian_calibrate``): the same 126 E4M3 candidates; objective: the block's
  ``dw^T H_b dw``, where ``H_b`` is the 16 x 16 diagonal block of ``sum X^T X / rows`` for
  this block's input columns (``_LocalHessianAccumulator``): ``G`` restricted to its diagonal
  16 x 16 blocks, the couplings between blocks ignored.

On a CUDA GPU the sweeps run as ModelOpt's fused Triton kernels (``nvfp4_fp8_scale_sweep``,
``nvfp4_fp8_scale_sweep_hessian``); the multiplier search scores each candidate through the
quantizer. None of them runs on CPU (``available``): ModelOpt fake-quantizes a static NVFP4
weight only with Triton on CUDA, and every candidate of every search (the CPU "reference sweep"
of ``NVFP4MSECalibrator`` included) is scored through that fake-quantization.

Global scale: ModelOpt takes ``global_amax`` = max |W| itself, after max calibration and before
the search, and has no option to set it (the ``shared_states`` option only groups quantizers),
so a caller's ``s_g`` cannot be handed in. ModelOpt's own is used; its checkpoint value
``weights_scaling_factor_2 = fp32(global_amax / 2688)`` is bit for bit the spec's s_g for
C = 448 (``fp32_rne(max|W| / 2688)``, one correctly rounded division), and its fake-quant
multiplier ``1 / fp32(448 / fp32(global_amax / 6))`` is within a few ulp of it.
``dequantized`` warns when the caller's s_g is not ModelOpt's.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
import warnings
from dataclasses import dataclass

import numpy as np

from hscale.reference.constants import E4M3_MAX, GROUP_SIZE

LIBRARY_MODULE = "modelopt.torch.quantization"

#: The report's row name -> the algorithm key (``ALGORITHMS``) that runs it.
CALIBRATORS = {
    "ModelOpt local-Hessian calibrator": "local_hessian",
    "ModelOpt FP8 scale sweep calibrator": "mse_fp8_sweep",
    "ModelOpt MSE calibrator": "mse",
}

#: Algorithm key -> the ``"algorithm"`` entry of the ``mtq.quantize`` config. "max" is
#: ModelOpt's max calibration (round-to-nearest from the block's max), the baseline the three
#: searches start from.
ALGORITHMS = {
    "max": {"method": "max"},
    "mse": {"method": "mse"},
    "mse_fp8_sweep": {"method": "mse", "fp8_scale_sweep": True},
    "local_hessian": {"method": "local_hessian", "fp8_scale_sweep": True},
}

BLOCK_SIZE = GROUP_SIZE  # ModelOpt's block: NVFP4's group
E2M1_MAX = 6.0

#: Why no calibrator runs without CUDA + Triton (nvidia-modelopt 0.47; line numbers there).
NEEDS_CUDA_TRITON = (
    "needs CUDA and Triton: nvidia-modelopt 0.47.0 modelopt/torch/quantization/tensor_quant.py:586-590 "
    "(0.48.0rc1: 599-603), StaticBlockwiseFP4FakeQuantFunction.forward, 'if not "
    "triton_kernel.IS_AVAILABLE: raise RuntimeError(\"static_blockwise_fp4_fake_quant requires "
    "triton...\")', and IS_AVAILABLE is set True only under 'if torch.cuda.is_available():' "
    "(modelopt/torch/kernels/quantization/gemm/__init__.py:22-41); every candidate of the "
    "search is scored through that fake-quant (model_calib.py:652 _mse_quant_func: "
    "'xq = quantizer(x)'), the CPU reference sweep of NVFP4MSECalibrator (calib/mse.py:105-107, "
    "taken on CPU at :234) included: no CPU path"
)


def algorithm_key(calibrator: str) -> str:
    """The ``ALGORITHMS`` key for a report row name or a key itself."""
    key = CALIBRATORS.get(calibrator, calibrator)
    if key not in ALGORITHMS:
        raise ValueError(f"unknown ModelOpt calibrator {calibrator!r}: one of "
                         f"{sorted(CALIBRATORS)} or {sorted(ALGORITHMS)}")
    return key


def available(calibrator: str) -> tuple[bool, str]:
    """``(True, "")`` where this calibrator runs here, else ``(False, reason)``."""
    try:
        algorithm_key(calibrator)
    except ValueError as exc:
        return False, str(exc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "transformers X is not tested with modelopt"
        try:
            import modelopt.torch.quantization  # noqa: F401
            from modelopt.torch.kernels.quantization import gemm
        except Exception as exc:  # noqa: BLE001 - any import failure makes it unavailable
            return False, f"cannot import {LIBRARY_MODULE}: {type(exc).__name__}: {exc}"
    # The very flag the fake-quant checks before it raises (tensor_quant.py:586).
    if not gemm.IS_AVAILABLE:
        return False, NEEDS_CUDA_TRITON
    return True, ""


def calibration_inputs(G: np.ndarray) -> np.ndarray:
    """float64 (n, n) X with ``X^T X = G``: ``diag(sqrt(lambda)) V^T`` from ``G = V diag(lambda)
    V^T``. An eigen-decomposition rather than a Cholesky factor, so a singular G (a dead input
    channel, fewer tokens than channels) needs no jitter; negative eigenvalues can only be
    rounding noise of a Gram matrix and are set to 0."""
    G = np.asarray(G, dtype=np.float64)
    eigenvalues, eigenvectors = np.linalg.eigh((G + G.T) / 2)
    return np.sqrt(np.clip(eigenvalues, 0.0, None))[:, None] * eigenvectors.T


@dataclass
class Calibration:
    """What ModelOpt produced for one weight: ``dequantized`` float64 (m, n), the fake-quantized
    weight; ``block_amax`` float32 (m, n / 16), the per-block amax the calibrator chose
    (``weight_quantizer._amax``); ``global_amax`` float32 (``weight_quantizer.global_amax``);
    ``global_scale`` float32, ``global_amax / (6 * 448)`` as ModelOpt's export computes
    ``weights_scaling_factor_2``; ``seconds``, the wall time of ``mtq.quantize`` (calibration
    included); ``device``; ``log``, what ModelOpt printed."""

    dequantized: np.ndarray
    block_amax: np.ndarray
    global_amax: np.float32
    global_scale: np.float32
    seconds: float
    device: str
    log: str


def _config(key: str) -> dict:
    """ModelOpt's NVFP4 static-weight preset, input quantizers off, with this algorithm."""
    import modelopt.torch.quantization as mtq

    preset = copy.deepcopy(mtq.NVFP4_W4A4_WEIGHT_LOCAL_HESSIAN_CFG)
    # Later entries override earlier ones: weight-only, as every method of the report.
    quant_cfg = list(preset["quant_cfg"]) + [{"quantizer_name": "*input_quantizer",
                                              "enable": False}]
    return {"quant_cfg": quant_cfg, "algorithm": copy.deepcopy(ALGORITHMS[key])}


def calibrate(weight: np.ndarray, G: np.ndarray, calibrator: str) -> Calibration:
    """Run one ModelOpt calibrator on one Linear weight (float32 (m, n), n % 16 == 0) with the
    calibration Gram matrix ``G`` (n, n); see the module docstring for what is called.
    Raises RuntimeError with ``available``'s reason where it cannot run."""
    key = algorithm_key(calibrator)
    ok, why = available(key)
    if not ok:
        raise RuntimeError(f"{calibrator}: {why}")
    weight = np.asarray(weight)
    if weight.dtype != np.float32 or weight.ndim != 2 or weight.shape[1] % BLOCK_SIZE:
        raise ValueError(f"weight must be float32 (m, n) with n % {BLOCK_SIZE} == 0, got "
                         f"{weight.dtype} {weight.shape}")
    m, n = weight.shape
    if np.shape(G) != (n, n):
        raise ValueError(f"G must be ({n}, {n}), got {np.shape(G)}")

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import modelopt.torch.quantization as mtq

    # available() said CUDA + Triton are here. The CPU branch is reached only by a caller that
    # bypasses available() (the tests, to pin where ModelOpt fails without CUDA).
    device = "cuda" if torch.cuda.is_available() else "cpu"
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    inputs = torch.from_numpy(calibration_inputs(G).astype(np.float32)).to(device)
    linear = torch.nn.Linear(n, m, bias=False, device=device, dtype=torch.float32)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weight))
    model = torch.nn.Sequential(linear)

    def forward_loop(model):
        model(inputs)

    log = io.StringIO()
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        warnings.simplefilter("ignore")
        # ModelOpt prints its progress (and a tqdm bar) per calibration: kept in .log.
        synchronize()
        start = time.perf_counter()
        mtq.quantize(model, _config(key), forward_loop)
        synchronize()
        seconds = time.perf_counter() - start
        quantizer = model[0].weight_quantizer
        dequantized = quantizer(model[0].weight)
    global_amax = np.float32(quantizer.global_amax.float().item())
    return Calibration(
        dequantized=dequantized.detach().double().cpu().numpy(),
        block_amax=quantizer.amax.detach().float().cpu().numpy().reshape(m, n // BLOCK_SIZE),
        global_amax=global_amax,
        global_scale=np.float32(global_amax / np.float32(E2M1_MAX * E4M3_MAX)),
        seconds=seconds, log=log.getvalue(),
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu")


def dequantized(weight: np.ndarray, s_g: np.float32, G: np.ndarray, calibrator: str) -> np.ndarray:
    """ModelOpt's fake-quantized (dequantized) weight, float64 (m, n), after ``calibrator`` (a
    ``CALIBRATORS`` row name or an ``ALGORITHMS`` key) chose the per-block scales.

    ``weight`` float32 (m, n), n % 16 == 0; ``G = X^T X`` (n, n) float64, the layer input's
    calibration Gram matrix, fed to ModelOpt as the n rows of ``calibration_inputs(G)``.
    ``s_g`` is the global scale the comparison shares; ModelOpt has no way to take one (module
    docstring) and uses its own, ``max|W| / 2688``: a warning says so when the two differ.
    Raises RuntimeError with ``available``'s reason where the calibrator cannot run (no CUDA).
    """
    result = calibrate(weight, G, calibrator)
    if result.global_scale != np.float32(s_g):
        warnings.warn(f"{calibrator}: ModelOpt used its own global scale "
                      f"{float(result.global_scale)!r} (max|W| / 2688), not the given "
                      f"s_g = {float(s_g)!r}: it has no option to take one", stacklevel=2)
    return result.dequantized
