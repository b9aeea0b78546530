"""One layer against its original weights: re-derived by the spec at the global scale its file
implies and classified by the one diagnoser (exact, faithful with allowances, format, or not
certified), with its output error against RTN's when h is given."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np

from hscale.checkpoints import SafetensorsModel
from hscale.judge.findings import Finding, plural
from hscale.checkpoints import Layout
from hscale.pipelines import PIPELINES, RECIPES
from hscale.reference import DEFAULT_SCALE_CEILING, FOUR_OVER_SIX_SCALE_CEILING
from hscale.reference.constants import DEFAULT_D, DEFAULT_U

from .report import LayerResult, Problem, counted
from .structure import implausible_global_scale

#: The plain rule every layer is compared with: RTN with the max-abs init at C = 448.
RTN_RECIPE = ("rtn", PIPELINES["rtn"].init, PIPELINES["rtn"].scale_ceiling)

def classify_layer(layer: LayerResult, arrays: dict, source: SafetensorsModel, hessians,
                   set_amax: dict, layout: Layout, hint, backend=None,
                   error_feedback: bool = False) -> None:
    """Re-derive the layer from its original weight at the s_g its file implies and classify it
    (exact, faithful with allowances, format, or not certified), by the one diagnoser; the
    reference's results computed by ``backend`` (bit-identical to it, faster) where given.
    ``hint``: (method, init) the checkpoint's own report names: only that recipe and RTN are
    tried. ``error_feedback``: codes from GPTQ-like error feedback, which are not re-derivable
    from their scales by design: judged by the format clauses of the file alone, and the
    re-derivation reported as a consistency figure (``consistency``), not as findings."""
    from hscale.reference.validation import WEIGHT_DTYPES, check_weight_finite
    weight = source.array(f"{layer.module}.weight")
    if weight.shape != layer.shape:
        layer.problem("packed", layout.clause, f"the original {layer.module}.weight is {weight.shape}, "
                      f"the checkpoint stores a {layer.shape} Linear", kind="structure")
        return
    if weight.dtype not in WEIGHT_DTYPES:
        layer.notes.append(f"the original weight is {weight.dtype}: not judged against it")
        return
    try:
        check_weight_finite(weight)
    except ValueError as exc:
        layer.notes.append(f"the original weight is not finite ({exc}): not judged against it")
        return
    amax = max(float(np.max(weight)), -float(np.min(weight)))
    layer.stats["original_amax"] = amax
    if amax > 0 and implausible_global_scale(layer, layout, amax):
        layer.verdict = "not certified"  # every byte and code would follow from the s_g
        return
    h, H, blocks = _layer_hessians(layer, hessians)
    global_scale = arrays["global_scale"]
    layer.global_scale_note = _global_scale_note(layout, global_scale,
                                                 set_amax.get(layer.module, amax))
    observed_bits = SimpleNamespace(packed=arrays["packed"], scale_bytes=arrays["scale_bytes"],
                                    global_scale=global_scale)
    recipes = _recipes(hint, h is not None, blocks is not None)
    cases = {}  # (method, init) -> Case, each computing the reference's result once

    def case_of(method, init, ceiling):
        from hscale.judge.cases import Case
        key = (method, init)
        if key not in cases:
            h_used = {"hscale": h, "hscale-block": blocks}.get(method)
            expected = None
            if backend is not None:
                try:
                    expected = backend.quantize(weight, h_used, method=method, init=init,
                                                scale_ceiling=ceiling, global_scale=global_scale)
                except ValueError:  # the reference says why (a Rejection), computed by the Case
                    expected = None
            cases[key] = Case(weight=weight, hessian_diag=h_used, method=method, init=init,
                              scale_ceiling=ceiling, global_scale=global_scale, id=layer.module,
                              expected=expected)
        return cases[key]

    if error_feedback:
        layer.verdict = "error feedback"
        rtn = case_of(*RTN_RECIPE).expected_outputs()
        consistency(layer, weight, arrays, rtn)
    else:
        exact = _exact_recipe(layer, arrays, observed_bits, recipes, case_of)
        if exact is not None:
            layer.verdict, layer.recipe = "exact", " ".join(exact[:2])
        else:
            # H-Scale named by the checkpoint's own report, without its h: the search cannot be
            # re-derived and no faithful allowance makes RTN's bytes its bytes; the faithful
            # certificate (two whole-layer diagnoses) is skipped for the format profile's
            unreproducible = hint is not None and (
                (hint[0] == "hscale" and h is None)
                or (hint[0] == "hscale-block" and blocks is None))
            _certify(layer, arrays, observed_bits, recipes, case_of,
                     faithful=not unreproducible)
        rtn = case_of(*RTN_RECIPE).expected_outputs()
    _quality(layer, weight, arrays, rtn, h, H)


def consistency(layer: LayerResult, weight, arrays: dict, rtn) -> None:
    """How far a layer made with error feedback is from plain re-derivation, as figures (not
    findings: GPTQ moves codes away from the rounding of the original by design): the share of
    scale bytes equal to RTN's at the same s_g, and of codes equal to the rounding of the
    original weight at the stored bytes (NVFP4-E2M1-2)."""
    from hscale.judge.cases import Rejection
    from hscale.reference import GROUP_SIZE
    from hscale.reference.quantize import encode_groups
    rows, cols = arrays["codes"].shape
    same_codes = 0
    for r0 in range(0, rows, 1024):
        block = slice(r0, r0 + 1024)
        groups = np.asarray(weight[block], np.float64).reshape(-1, cols // GROUP_SIZE, GROUP_SIZE)
        rounded = encode_groups(groups, arrays["scale_bytes"][block],
                                arrays["global_scale"]).reshape(-1, cols)
        same_codes += int(np.count_nonzero(rounded == arrays["codes"][block]))
    figures = {"codes_as_rounded": same_codes / (rows * cols)}
    if not isinstance(rtn, Rejection):
        figures["bytes_as_rtn"] = float(np.mean(rtn.scale_bytes == arrays["scale_bytes"]))
    layer.stats.update({f"consistency_{k}": v for k, v in figures.items()})


def _recipes(hint, have_h: bool, have_blocks: bool = False) -> list:
    """The recipes tried, in order: the one the checkpoint's report names and RTN when it names
    one (h is needed for hscale, the diagonal blocks of H for hscale-block), else every
    re-derivable recipe."""
    recipes = [r for r in RECIPES if (have_h or r[0] != "hscale")
               and (have_blocks or r[0] != "hscale-block")]
    if hint is not None:
        recipes = [r for r in recipes if (r[0], r[1]) == tuple(hint) or r == RTN_RECIPE]
        recipes.sort(key=lambda r: (r[0], r[1]) != tuple(hint))
    return recipes


def _layer_hessians(layer: LayerResult, hessians):
    """(h, H, the diagonal 16 x 16 blocks of H) of the layer from the hessian file, each None
    where the file lacks it (the blocks: ``B.MODULE``, or taken from ``H.MODULE``)."""
    if hessians is None:
        return None, None, None
    h = H = blocks = None
    cols = layer.shape[1]
    if f"h.{layer.module}" in hessians.info:
        h = hessians.array(f"h.{layer.module}").astype(np.float64)
        if h.shape != (cols,) or not np.all(np.isfinite(h)) or np.any(h < 0):
            layer.notes.append(f"h.{layer.module} in the hessian file is not {cols} finite "
                               "non-negative values: not used")
            h = None
    else:
        layer.notes.append(f"the hessian file has no h.{layer.module}: judged without h")
    if h is not None and f"H.{layer.module}" in hessians.info \
            and hessians.info[f"H.{layer.module}"].shape == (cols, cols):
        H = hessians.array(f"H.{layer.module}").astype(np.float64)
    if f"B.{layer.module}" in hessians.info \
            and hessians.info[f"B.{layer.module}"].shape == (cols // 16, 16, 16):
        blocks = hessians.array(f"B.{layer.module}").astype(np.float64)
    elif H is not None:
        from hscale.reference import diagonal_blocks
        blocks = diagonal_blocks(H)
    return h, H, blocks


def _global_scale_note(layout: Layout, global_scale, amax: float) -> str:
    """How the file's s_g relates to NVFP4-GS-1's for the amax of its fused set (information:
    a pipeline may choose its own s_g, NVFP4-GS-3; the layer is judged at the file's)."""
    from hscale.reference import compute_global_scale
    for ceiling in (DEFAULT_SCALE_CEILING, FOUR_OVER_SIX_SCALE_CEILING):
        try:
            spec = layout.writable_global_scale(compute_global_scale(amax, ceiling))
        except ValueError:
            continue
        if spec == global_scale:
            how = ", as its stored reciprocal reads back" if layout.stores_reciprocal else ""
            return f"NVFP4-GS-1 with C = {ceiling:g}{how}"
    spec = (np.float32(compute_global_scale(amax, DEFAULT_SCALE_CEILING)) if amax > 0
            else np.float32(1.0))
    ulps = int(np.array(global_scale, np.float32).view(np.int32)) - \
        int(np.array(spec, np.float32).view(np.int32))
    if abs(ulps) <= 4:
        return f"{ulps:+d} fp32 ulp from NVFP4-GS-1's {float(spec)!r} (C = 448)"
    return f"its own: x{float(global_scale) / float(spec):.6g} NVFP4-GS-1's {float(spec)!r} (C = 448)"


def _exact_recipe(layer, arrays, observed_bits, recipes, case_of):
    """The first recipe whose reference result is the stored one byte for byte, confirmed by
    the exact profile of the one diagnoser; None if none is. A searched method is tried only
    where every stored byte lies in the window of its init's RTN byte (else it cannot be it)."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import SMALL_CASE, diagnose, observe
    stored_bytes = arrays["scale_bytes"].astype(np.int16)
    for method, init, ceiling in recipes:
        if method != "rtn":
            rtn = case_of("rtn", init, ceiling).expected_outputs()
            if isinstance(rtn, Rejection):
                continue
            shift = stored_bytes - rtn.scale_bytes.astype(np.int16)
            live = rtn.scale_bytes != 0
            if np.any(live & ((shift < -DEFAULT_D) | (shift > DEFAULT_U))):
                continue
        case = case_of(method, init, ceiling)
        expected = case.expected_outputs()
        if isinstance(expected, Rejection):
            layer.notes.append(f"{method} {init}: the reference rejects the inputs "
                               f"({expected.message})")
            continue
        if not (np.array_equal(expected.scale_bytes, arrays["scale_bytes"])
                and np.array_equal(expected.packed, arrays["packed"])):
            continue
        if int(np.prod(case.shape)) > SMALL_CASE:
            return method, init  # the reference's bytes at the file's s_g: exact (the
            #                      diagnoser's independent certificate runs on small layers)
        observed, _ = observe(observed_bits, case)
        if observed is not None and diagnose(case, observed).ok:
            return method, init
    return None


def _certify(layer, arrays, observed_bits, recipes, case_of, faithful: bool = True) -> None:
    """Not exact: the faithful certificate, then the format profile, each tried with no
    allowance, then all, then only those used; else the findings of the format profile with
    every allowance (what is wrong whatever the layer's scale rule), preceded by what explains
    them where something does (swapped nibbles, a swizzled scale tensor)."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import diagnose, observe
    from hscale.judge.profiles import ALLOWANCES, FAITHFUL, FORMAT

    def certified(case, profile):
        """(the diagnosis that certifies the layer, None) or (None, the findings with every
        allowance and how many more it counted)."""
        observed, structure = observe(observed_bits, case)
        if observed is None:
            return None, (structure, Counter())
        tried = diagnose(case, observed, profile=profile)
        if tried.ok:
            return tried, None
        every = diagnose(case, observed, profile=profile, allowances=tuple(ALLOWANCES))
        if not every.ok:
            return None, (every.findings, every.unlisted)
        used = tuple(a for a in ALLOWANCES if every.allowance_uses.get(a))
        minimal = diagnose(case, observed, profile=profile, allowances=used)
        return (minimal if minimal.ok else every), None

    for method, init, ceiling in (recipes if faithful else ()):
        case = case_of(method, init, ceiling)
        if isinstance(case.expected_outputs(), Rejection):
            continue
        diagnosis, _ = certified(case, FAITHFUL)
        if diagnosis is not None:
            layer.verdict, layer.recipe = "faithful", f"{method} {init}"
            layer.allowances = dict(diagnosis.allowance_uses)
            if diagnosis.tolerance_uses:
                layer.notes.append(f"{diagnosis.tolerance_uses} groups accepted within the "
                                   "faithful objective tolerance")
            return
    case = case_of(*RTN_RECIPE)
    diagnosis, rejected = certified(case, FORMAT)
    if diagnosis is not None:
        layer.verdict = "format"
        layer.allowances = dict(diagnosis.allowance_uses)
        return
    findings, unlisted = rejected
    layer.verdict = "not certified"
    explained = _explanations(layer, arrays, observed_bits, recipes, case_of)
    layer.problems += explained
    if explained:  # what the format profile finds then follows from it
        total = len(findings) + sum(unlisted.values())
        layer.notes.append(f"the format profile's {plural(total, 'finding')} about its codes "
                           "and bytes follow from the finding above")
        return
    for finding in findings:
        layer.problems.append(Problem(_tensor_of(layer, finding.clause), finding))
    _add_counts(layer, unlisted)


def _add_counts(layer: LayerResult, unlisted: Counter) -> None:
    """How many more findings of each clause the diagnoser counted without listing them."""
    for clause, count in unlisted.items():
        if count:
            layer.problems.append(counted(_tensor_of(layer, clause), clause, count))


def _explanations(layer, arrays, observed_bits, recipes, case_of) -> list:
    """Findings that explain a layer no profile certifies, where one does: the exact profile's
    own diagnosis when the scale bytes are a recipe's and only the packing differs (swapped
    nibbles, NVFP4-PACK-1), and scale bytes that are a recipe's in the swizzled 128x4 layout
    (NVFP4-PACK-3)."""
    from hscale.judge.cases import Rejection
    from hscale.judge.diagnose import diagnose, observe
    from hscale.reference import unswizzle_scale_bytes
    from hscale.reference.packing import swizzled_size
    rows, scale_cols = arrays["scale_bytes"].shape
    for method, init, ceiling in recipes:
        case = case_of(method, init, ceiling)
        expected = case.expected_outputs()
        if isinstance(expected, Rejection):
            continue
        if np.array_equal(expected.scale_bytes, arrays["scale_bytes"]):
            observed, _ = observe(observed_bits, case)
            diagnosis = diagnose(case, observed) if observed is not None else None
            if diagnosis is not None and diagnosis.clauses() == ["NVFP4-PACK-1"]:
                found = [Problem(layer.tensors["packed"], f) for f in diagnosis.findings]
                more = sum(diagnosis.unlisted.values())
                if more:
                    found.append(counted(layer.tensors["packed"], "NVFP4-PACK-1", more))
                return found
        if arrays["scale_bytes"].size == swizzled_size(rows, scale_cols):
            unswizzled = unswizzle_scale_bytes(arrays["scale_bytes"].reshape(-1), rows,
                                               scale_cols)
            if np.array_equal(unswizzled, expected.scale_bytes):
                return [Problem(layer.tensors["scale"], Finding(
                    "NVFP4-PACK-3", f"the scale bytes are {method} {init}'s in the swizzled "
                    "128x4 layout of GEMM kernels; a checkpoint stores them row-major, byte "
                    "[r, i] for group (r, i) (NVFP4-PACK-2)", kind="layout"))]
    return []


def _tensor_of(layer: LayerResult, clause: str) -> str:
    """The tensor a diagnoser finding is about, from its clause."""
    if clause.startswith(("NVFP4-E2M1", "NVFP4-PACK-1")):
        return layer.tensors["packed"]
    if clause.startswith("NVFP4-GS"):
        return layer.tensors["global"]
    return layer.tensors["scale"]


def _quality(layer, weight, arrays, rtn, h, H) -> None:
    """Weight MSE, and with h the diagonal proxy sum_j h_j dW_ij^2 (and Tr(dW H dW^T) with H),
    each beside RTN's at the same s_g (``layer_quality``), and the shifts from RTN's bytes."""
    from hscale.judge.cases import Rejection
    from hscale.evaluation.quality import layer_quality
    if isinstance(rtn, Rejection):
        return
    shift = arrays["scale_bytes"].astype(np.int16) - rtn.scale_bytes.astype(np.int16)
    stored = SimpleNamespace(codes=arrays["codes"], scale_bytes=arrays["scale_bytes"],
                             global_scale=arrays["global_scale"],
                             delta=np.clip(shift, -128, 127).astype(np.int8))
    layer.quality = layer_quality(weight, stored, rtn, h, H)
    layer.quality["shifts_from_rtn"] = layer.quality.pop("shifts", {})
