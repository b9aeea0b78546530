"""Full-model conformance: every Linear layer of all-MiniLM-L6-v2 and of a small random-init
decoder, with h from a real calibration pass, quantized by the backend with rtn, hscale and
4over6 + hscale, in every input dtype the backend declares (the float32 weights rounded to
float16 or bfloat16), must equal the reference bit for bit (exact) or pass the certificate
(faithful). One real MiniLM layer (the bundled default layer) runs in the quick subset too."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hscale.judge.builders import DTYPES
from hscale.judge.cases import Case
from hscale.conformance.checker import fail_citing, findings_of, is_reference_backend
from hscale.judge.profiles import EXACT

CONFIGS = {
    "rtn": dict(method="rtn"),
    "hscale": dict(method="hscale"),
    "4over6-hscale": dict(method="hscale", init="4over6", scale_ceiling=256.0),
}
REAL_LAYER_CONFIGS = dict(CONFIGS, **{"scale-only": dict(method="scale-only")})
CLAUSES = ("HSCALE-METHOD-1", "HSCALE-ARGMIN-1", "HSCALE-OBJ-1", "NVFP4-E2M1-2", "NVFP4-INIT-1",
           "NVFP4-INIT-2", "HSCALE-CAL-1")
SHOWN_LAYERS = 3


def _run_layers(checker, zoo, model_key, config, layers, configs=CONFIGS, dtype=np.float32):
    opts = configs[config]
    checker.require(opts["method"], opts.get("init", "maxabs"))
    failures = []
    own_certificate = is_reference_backend(checker.backend) and checker.profile == EXACT
    for name, weight, h in layers:
        weight = in_dtype(weight, dtype)
        key = (model_key, config, name, np.dtype(dtype).name)
        case = Case(weight, h, title=f"{model_key} layer {name} ({config})",
                    expected=zoo.references.get(key), **opts)
        try:
            # exact on the reference backend: the independent certificate (check forces it);
            # exact elsewhere: against the reference result, computed once per session;
            # faithful: the faithful certificate.
            result = checker.check(case, independent_check=False, rounding=True)
            if checker.last_case is not case:  # rounded into the backend's dtype: not cached
                continue
            if own_certificate:
                zoo.references[key] = result  # it is the reference: reuse it for others
            elif checker.profile == EXACT:
                zoo.references[key] = case.expected_outputs()
        except pytest.fail.Exception as exc:
            failures.append((str(exc), findings_of(exc)))
    certified_key = (model_key, config, np.dtype(dtype).name)
    if own_certificate:
        zoo.certified[certified_key] = list(failures)
    elif checker.profile == EXACT and certified_key not in zoo.certified:
        zoo.certified[certified_key] = _certify_references(zoo, model_key, opts, config, layers,
                                                           dtype)
    if failures:
        more = len(failures) - SHOWN_LAYERS
        fail_citing(f"{len(failures)} of {len(layers)} layers of {model_key} ({config}) do not "
                    "conform:\n" + "\n".join(text for text, _ in failures[:SHOWN_LAYERS])
                    + (f"\n... and {more} more layers" if more > 0 else ""),
                    [f for _, findings in failures for f in findings])
    certified = zoo.certified.get(certified_key, [])
    if certified:
        fail_citing("the backend equals hscale.reference.quantize, but the reference fails the "
                    "independent certificate (please report):\n"
                    + "\n".join(text for text, _ in certified[:3]),
                    [f for _, findings in certified for f in findings])


def _certify_references(zoo, model_key, opts, config, layers, dtype):
    """Independent exact certificate of the cached reference results, once per session."""
    from hscale.judge.diagnose import certify
    failures = []
    for name, weight, h in layers:
        case = Case(in_dtype(weight, dtype), h,
                    title=f"{model_key} layer {name} ({config}), reference", **opts)
        reference = zoo.references.get((model_key, config, name, np.dtype(dtype).name))
        if reference is None:
            continue  # not cached (the case was adapted to the backend's domain)
        findings = certify(case, reference, strict=True).findings
        if findings:
            failures.append((f"{case.describe()}: " + "; ".join(f.render() for f in findings[:3]),
                             findings))
    return failures


def in_dtype(weight: np.ndarray, dtype) -> np.ndarray:
    """A float32 model weight rounded to ``dtype`` (saturating at its largest finite value)."""
    if np.dtype(dtype) == weight.dtype:
        return weight
    top = float(ml_dtypes.finfo(dtype).max)
    return np.clip(weight, -top, top).astype(dtype)


@pytest.mark.slow
@pytest.mark.clause(*CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("model", ["minilm", "tiny-decoder"])
def test_full_model(checker, zoo, model, config, dtype):
    checker.require_dtype(dtype)
    layers = zoo.layers(model)
    if model == "minilm":
        from hscale.models import MINILM_NUM_LINEAR
        assert len(layers) == MINILM_NUM_LINEAR, f"MiniLM: {len(layers)} Linear layers found"
    assert len(layers) > 0, f"{model}: no Linear layers found"
    _run_layers(checker, zoo, model, config, layers, dtype=dtype)


@pytest.mark.clause("HSCALE-METHOD-1", "HSCALE-ARGMIN-1", "NVFP4-INIT-2", "HSCALE-CAL-1")
@pytest.mark.parametrize("config", list(REAL_LAYER_CONFIGS))
def test_real_minilm_layer(checker, zoo, config):
    """The bundled default layer (MiniLM encoder.layer.0.output.dense, 384 x 1536, real h)."""
    from hscale.demo.default_layer import load_default_layer
    layer = load_default_layer()
    _run_layers(checker, zoo, "default-layer", config,
                [(layer.name, np.asarray(layer.weight), np.asarray(layer.hessian_diag))],
                REAL_LAYER_CONFIGS)
