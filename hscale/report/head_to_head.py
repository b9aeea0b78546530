"""The head-to-head of ``hscale report``: H-Scale beside every other scale search that runs here
(the installed libraries' adapters and functions, ModelOpt's calibrators), each row with its
output error, its held-out sentence-embedding cosine and its time."""

from __future__ import annotations

import time
import warnings

import numpy as np

from hscale.evaluation.quality import output_error
from hscale.reference import DEFAULT_SCALE_CEILING

from . import pipelines
from .progress import bar

HSCALE_ROW = "H-Scale (hscale.reference, U = 6, K = 16)"


BASELINE_ROW = "min-max (RTN: the spec's max-abs byte), the baseline"


BLOCK_ROW = "block-Hessian H-Scale (hscale.reference, hscale-block, U = 6, K = 16)"


# (name, adapter module, factory, library, init); each run on every Linear with the same s_g,
# as rtn from the init that selects its scale rule (fouroversix's 4-or-6 choice is its 4over6).
COMPETITORS = (
    ("llm-compressor MSE observer", "llmcompressor_nvfp4", "create_mse", "llmcompressor",
     "maxabs"),
    ("llm-compressor expanded-MSE observer (= its fouroversix observer in 0.14)",
     "llmcompressor_nvfp4", "create_expanded_mse", "llmcompressor", "maxabs"),
    ("llm-compressor min-max observer", "llmcompressor_nvfp4", "create", "llmcompressor",
     "maxabs"),
    ("ModelOpt NVFP4QTensor (max calibration)", "modelopt_nvfp4", "create", "modelopt",
     "maxabs"),
    ("AutoRound NVFP4 RTN (iters=0)", "autoround_nvfp4", "create", "auto_round", "maxabs"),
    ("fouroversix (4-or-6 per group, by weight error)", "fouroversix_nvfp4", "create",
     "fouroversix", "4over6"),
)


# ModelOpt's three NVFP4 weight-scale searches, each through mtq.quantize on one Linear
# (hscale/backends/interop/modelopt_calibrators.py); they need CUDA and Triton.
MODELOPT_CALIBRATORS = ("ModelOpt local-Hessian calibrator",
                        "ModelOpt FP8 scale sweep calibrator", "ModelOpt MSE calibrator")


def warm_up_layer():
    """A small seeded Linear (16 x 64, G = identity) for the untimed first call of a search whose
    first call sets things up (ModelOpt: the CUDA context and Triton's compiles)."""
    return (np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32), np.eye(64))


def autoround_opt_rtn(weight, s_g, h=None) -> np.ndarray:
    """AutoRound's ``opt_rtn_nv_fp4`` (``auto_round/data_type/nvfp.py``, what AutoRound runs
    for NVFP4 with ``iters=0`` and its RTN optimisation): 101 multipliers 0.50 .. 1.51 of each
    group's range scale, picked by the error weighted by the importance matrix ``imatrix``
    (here h = diag(X^T X) of the calibration text, or none: plain weight MSE), then RTN with
    the global scale s_g (AutoRound stores its reciprocal). Returns its dequantized weight."""
    import torch
    from auto_round.data_type.nvfp import opt_rtn_fast_nvfp4
    from hscale.reference.global_scale import reciprocal_from_multiplier
    imatrix = None if h is None else torch.from_numpy(np.asarray(h, np.float32))
    with torch.no_grad():
        qdq, _, _ = opt_rtn_fast_nvfp4(
            torch.from_numpy(np.asarray(weight, np.float32)), 4, 16,
            global_scale=torch.tensor(float(reciprocal_from_multiplier(s_g)), dtype=torch.float32),
            imatrix=1.0 if imatrix is None else imatrix)
    return qdq.numpy().astype(np.float64)


def llmcompressor_imatrix(weight, s_g, h) -> np.ndarray:
    """llm-compressor's ``imatrix_mse`` observer through the adapter, its importance h =
    diag(X^T X) of the calibration text gathered by the observer's own hook
    (``llmcompressor_nvfp4.create_imatrix_mse``); returns its dequantized weight."""
    from hscale.backends.interop.llmcompressor_nvfp4 import create_imatrix_mse
    adapter = create_imatrix_mse(h)
    return library_dequantized(adapter, adapter.quantize(weight, None, method="rtn",
                                                         global_scale=s_g))


# (name, library, function(weight, s_g, h) -> dequantized): library functions called directly
FUNCTIONS = (
    ("AutoRound opt_rtn_nv_fp4, importance matrix = diag(X^T X)", "auto_round",
     lambda w, s_g, h: autoround_opt_rtn(w, s_g, h)),
    ("AutoRound opt_rtn_nv_fp4, no importance matrix (weight MSE)", "auto_round",
     lambda w, s_g, h: autoround_opt_rtn(w, s_g, None)),
    ("llm-compressor imatrix_mse observer, importance = diag(X^T X)", "llmcompressor",
     lambda w, s_g, h: llmcompressor_imatrix(w, s_g, h)),
)


# The rows whose scales depend on the calibration data (H-Scale's h, hscale-block's blocks, an
# importance matrix, ModelOpt's local Hessian); every other row is data-free: its scales come
# from the weights alone, so a calibration subset cannot move it (the spread says so).
CALIBRATED_ROWS = (HSCALE_ROW, BLOCK_ROW,
                   "AutoRound opt_rtn_nv_fp4, importance matrix = diag(X^T X)",
                   "llm-compressor imatrix_mse observer, importance = diag(X^T X)",
                   "ModelOpt local-Hessian calibrator")


def library_dequantized(adapter, result) -> np.ndarray:
    """float64 (m, n) of a library's result: code value x E4M3 scale x s_g, s_g the multiplier
    or the reciprocal of what the library stores, as its ``global_scale_convention`` says."""
    from hscale.reference import E2M1_VALUES, SCALE_BYTE_VALUES, unpack_codes
    codes = result.codes if hasattr(result, "codes") else unpack_codes(result.packed)
    g = float(result.global_scale)
    if getattr(adapter, "global_scale_convention", "multiplier") == "reciprocal":
        g = 1.0 / g
    scale = np.repeat(SCALE_BYTE_VALUES[result.scale_bytes].astype(np.float64), 16, axis=1)
    return E2M1_VALUES[np.asarray(codes).astype(np.intp)] * scale * g


def head_to_head(model, progress=True, skip=()) -> dict:
    """name -> {output, output_heldout (mean and median of each layer's error over RTN's),
    embedding_cosine_heldout (the whole model with every Linear so quantized: each held-out
    sentence embedding's cosine to fp32, mean and min), seconds (scale selection over all
    Linears), ran / reason}. H-Scale's own row first, then min-max itself."""
    import importlib
    from hscale.calibration import heldout_texts
    from hscale.evaluation.embeddings import EmbeddingProbe
    from hscale.reference import diagonal_blocks, quantize
    scales = pipelines.global_scales(model, DEFAULT_SCALE_CEILING)
    base = {}
    for module, weight in model.weights.items():
        deq = quantize(weight, method="rtn", global_scale=scales[module]).dequantize()
        base[module] = (output_error(weight, deq, model.G[module]),
                        output_error(weight, deq, model.G_heldout[module]))
    # The end-to-end check needs the model itself; a bare set of layers (tests) has none.
    probe = (EmbeddingProbe(model.directory, heldout_texts())
             if model.directory is not None else None)

    def measure(run):
        ratios, ratios_h, seconds, dequantized = [], [], 0.0, {}
        for module in bar(list(model.weights), progress, "head to head"):
            weight = model.weights[module]
            start = time.perf_counter()
            deq = dequantized[module] = run(module, weight)
            seconds += time.perf_counter() - start
            ratios.append(output_error(weight, deq, model.G[module]) / base[module][0])
            ratios_h.append(output_error(weight, deq, model.G_heldout[module])
                            / base[module][1])
        row = {"ran": True, "seconds": seconds,
               "output": {"mean": float(np.mean(ratios)), "median": float(np.median(ratios))},
               "output_heldout": {"mean": float(np.mean(ratios_h)),
                                  "median": float(np.median(ratios_h))},
               "improved_heldout": int(np.sum(np.array(ratios_h) < 1)), "layers": len(ratios)}
        if probe is not None:
            row["embedding_cosine_heldout"] = dict(probe.cosine(dequantized),
                                                   texts=len(probe.texts))
        return row

    rows = {HSCALE_ROW: measure(
        lambda m, w: quantize(w, np.diag(model.G[m]).copy(), global_scale=scales[m])
        .dequantize()),
        BLOCK_ROW: measure(
        lambda m, w: quantize(w, diagonal_blocks(model.G[m]), method="hscale-block",
                              global_scale=scales[m]).dequantize()),
        BASELINE_ROW: measure(
        lambda m, w: quantize(w, method="rtn", global_scale=scales[m]).dequantize())}
    def competitor_row(library, prepare) -> dict:
        """A competitor's row: not run where ``library`` cannot be imported or ``prepare()``
        returns why not (a str); else ``prepare()`` returns ``(run, version)`` and ``run`` is
        measured. A library's own failure is a finding for its row, not a crash."""
        try:
            importlib.import_module(library)
        except ImportError:
            return {"ran": False, "reason": f"{library} is not installed here"}
        try:
            prepared = prepare()
            if isinstance(prepared, str):
                return {"ran": False, "reason": prepared}
            run, version = prepared
            return dict(measure(run), version=version)
        except Exception as error:  # noqa: BLE001
            return {"ran": False, "reason": f"{type(error).__name__}: {error}"[:300]}

    warm = np.ones((1, 16), np.float32)  # imports and first-call set-up, not timed

    def adapter_run(module_name, factory, init):
        adapter = getattr(importlib.import_module(f"hscale.backends.interop.{module_name}"),
                          factory)()
        ok, why = adapter.available()
        if not ok:
            return why
        adapter.quantize(warm, None, method="rtn", init=init, global_scale=np.float32(1 / 2688))
        version = adapter.version
        return (lambda m, w: library_dequantized(adapter, adapter.quantize(
            w, None, method="rtn", init=init, global_scale=scales[m])),
            str(version() if callable(version) else version))

    def function_run(library, function):
        function(warm, np.float32(1 / 2688), np.ones(16))
        version = getattr(importlib.import_module(library), "__version__", "")
        return (lambda m, w: function(w, scales[m], np.diag(model.G[m]).copy()),
                f"{library} {version}")

    def modelopt_run(name):
        from hscale.backends.interop import modelopt_calibrators as calibrators
        from hscale.backends.interop.common import dist_version
        ok, why = calibrators.available(name)
        if not ok:
            return why

        def run(m, w):
            with warnings.catch_warnings():
                # ModelOpt takes max|W| / 2688 as s_g itself (a fused set's shared s_g cannot
                # be handed in); the module's docstring says so, the warning would repeat it
                warnings.simplefilter("ignore")
                return calibrators.dequantized(w, scales[m], model.G[m], name)
        with warnings.catch_warnings():  # imports, CUDA context and Triton's first compile
            warnings.simplefilter("ignore")
            warm_weight, warm_G = warm_up_layer()
            calibrators.dequantized(warm_weight, np.float32(1 / 2688), warm_G, name)
        return run, dist_version("nvidia-modelopt")

    wanted = [(name, library, lambda m=m, f=f, i=i: adapter_run(m, f, i))
              for name, m, f, library, i in COMPETITORS]
    wanted += [(name, library, lambda lib=library, fn=fn: function_run(lib, fn))
               for name, library, fn in FUNCTIONS]
    wanted += [(name, "modelopt", lambda n=name: modelopt_run(n))
               for name in MODELOPT_CALIBRATORS]
    for name, library, prepare in wanted:
        if name not in skip:
            rows[name] = competitor_row(library, prepare)
    return rows
