"""Generated cases (Hypothesis, see conformance/strategies.py): small layers against the
reference or the certificate, single groups against the exact-arithmetic oracle, and the
metamorphic properties of the spec."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from hscale.judge import independent, oracle
from hscale.judge.cases import Case
from hscale.judge.profiles import EXACT
from hscale.conformance.strategies import cases, to_dtype
from hscale.reference.constants import GROUP_SIZE as GROUP


def _cases(checker, **kw):
    """Cases drawn in the backend's declared input dtypes (a test asking for one it does not
    declare gets its first: the properties tested hold in every dtype)."""
    if "dtype" in kw and not checker.domain.accepts_dtype(kw["dtype"]):
        kw["dtype"] = checker.dtypes[0]
    return cases(checker.methods(), checker.inits(), dtypes=checker.dtypes, **kw)


# -- layers against the reference / certificate -------------------------------------------------

@pytest.mark.clause("NVFP4-E2M1-2", "NVFP4-E2M1-3", "NVFP4-E4M3-2", "NVFP4-GS-1", "NVFP4-GS-3",
                    "NVFP4-INIT-1", "NVFP4-INIT-2", "NVFP4-ZERO-1", "HSCALE-WIN-1",
                    "HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "HSCALE-METHOD-1", "NVFP4-PACK-1")
@given(data=st.data())
def test_generated_layers(checker, data):
    checker.require("rtn")
    case = data.draw(_cases(checker), label="case")
    checker.check(case)


@pytest.mark.clause("HSCALE-WIN-1", "NVFP4-E4M3-3")
@given(data=st.data())
def test_generated_layers_near_the_ladder_ends(checker, data):
    """Groups whose initial bytes sit near 0x01 and 0x7E, with random windows: clipping."""
    checker.require("scale-only")
    from hscale.conformance.strategies import group_values
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    sg = float(np.float32(2.0 ** data.draw(st.integers(-20, 10))))
    groups = [data.draw(group_values(sg, np.float32, rng, kind="ladder-ends")) for _ in range(6)]
    K = data.draw(st.integers(1, 20))
    U = data.draw(st.integers(0, K - 1))
    method = data.draw(st.sampled_from([m for m in checker.methods() if m != "rtn"]))
    case = Case(to_dtype(np.stack(groups).reshape(2, 48), np.float32),
                rng.random(48) * rng.choice([0, 1, 1e4], 48), method=method, K=K, U=U,
                global_scale=sg, title="ladder ends")
    # generated data: rounded into a backend's own dtype where it takes no float32 (a
    # construction held exactly would reject every draw of a bfloat16-only backend)
    checker.check(case, rounding=True)


# -- single groups and tiny layers against the exact oracle ---------------------------------------

def oracle_check(checker, case: Case, result):
    """Every group of ``result`` against the exact-arithmetic oracle; the first failure ends
    the check (in a Hypothesis test it may be deferred, ``Checker.fail_or_defer``: the example
    is then done with). Each failure names the allowance that would excuse it."""
    obs = result

    def fail(clause, text, group=None):
        checker.fail(clause, text, case, observed=obs, group=group)
    w = case.exact_weight()
    m, n = w.shape
    amax = Fraction(float(np.max(np.abs(w))))
    sg = (Fraction(float(case.global_scale)) if case.global_scale is not None
          else Fraction(checker.own_global_scale(
              float(oracle.global_scale(amax, Fraction(case.scale_ceiling))), case)))
    exact = checker.profile == EXACT
    if exact and Fraction(float(obs.global_scale)) != sg:
        fail("NVFP4-GS-3" if case.global_scale is not None else "NVFP4-GS-1",
             f"s_g expected {float(sg)!r} (oracle) observed {obs.global_scale!r}")
        return
    sg = Fraction(float(obs.global_scale))
    h_all = (np.asarray(case.hessian_diag, dtype=np.float64) if case.method == "hscale"
             else np.ones(n))
    for r in range(m):
        for i in range(n // GROUP):
            sl = slice(GROUP * i, GROUP * (i + 1))
            v = oracle.group_verdict([float(x) for x in w[r, sl]], [float(x) for x in h_all[sl]],
                                     sg, case.method, case.init, case.K, case.U)
            byte = int(obs.scale_bytes[r, i])
            delta = None if obs.delta is None else int(obs.delta[r, i])
            codes = [int(c) for c in obs.codes[r, sl]]
            where = f"group (r={r}, i={i})"
            if v.candidates and v.chosen != v.exact_best:
                event("spec fp64 choice differs from the exact-arithmetic choice")
            if exact:
                if delta is not None and byte - delta != v.initial and v.initial != 0:
                    fail("NVFP4-INIT-1" if case.init == "maxabs" else "NVFP4-INIT-2",
                         f"{where}: initial byte expected 0x{v.initial:02X} (oracle) "
                         f"observed 0x{(byte - delta) & 0xFF:02X}", (r, i))
                    return
                if byte != v.chosen:
                    rows = {b: (E, X) for _, b, E, X in v.candidates}
                    e_exp = rows.get(v.chosen, (None, None))
                    e_obs = rows.get(byte, (None, None))
                    init_clause = "NVFP4-INIT-1" if case.init == "maxabs" else "NVFP4-INIT-2"
                    clause = ("NVFP4-ZERO-1" if v.initial == 0 else init_clause if not v.candidates
                              else "HSCALE-ARGMIN-1" if e_exp[0] == e_obs[0] else "HSCALE-OBJ-1")
                    fail(clause, f"{where}: scale byte expected 0x{v.chosen:02X} (oracle; "
                         f"E fp64 = {_fmt(e_exp[0])}, exact = {_fmt(e_exp[1])}) observed "
                         f"0x{byte:02X} (E fp64 = {_fmt(e_obs[0])}, exact = "
                         f"{_fmt(e_obs[1])})", (r, i))
                    return
                if codes != v.codes:
                    j = next(k for k in range(GROUP) if codes[k] != v.codes[k])
                    clause = ("NVFP4-E2M1-3" if codes[j] ^ v.codes[j] == 8 else "NVFP4-E2M1-2")
                    fail(clause, f"{where} element j={j}: w = {float(w[r, GROUP * i + j])!r}, "
                         f"code expected 0x{v.codes[j]:X} (oracle: exact rounding of "
                         f"|w|/s) observed 0x{codes[j]:X}", (r, i))
                    return
            elif v.candidates and 1 <= byte <= 126 and (delta is None or byte - delta == v.initial):
                # faithful: the chosen byte's exact objective within tolerance of the exact min
                rows = {b: X for _, b, _, X in v.candidates}
                if byte in rows:
                    best = min(rows.values())
                    s0 = sum(Fraction(h) * Fraction(x) ** 2 for h, x in zip(h_all[sl], w[r, sl]))
                    tol = independent.objective_tolerance(float(best), float(s0))
                    if float(rows[byte] - best) > float(tol):
                        fail("HSCALE-OBJ-1", f"{where}: byte 0x{byte:02X} has exact "
                             f"objective {float(rows[byte])!r}, the window minimum is "
                             f"{float(best)!r} (tolerance {float(tol):.3g})", (r, i))
                        return


def _fmt(x):
    return "n/a" if x is None else f"{float(x)!r}"


@pytest.mark.clause("HSCALE-OBJ-1", "HSCALE-ARGMIN-1", "NVFP4-E2M1-2", "NVFP4-E2M1-3",
                    "NVFP4-INIT-1", "NVFP4-INIT-2", "NVFP4-GS-1", "NVFP4-E4M3-2")
@given(data=st.data())
def test_exact_oracle(checker, data):
    """Tiny layers (at most 2 x 2 groups) against the Fraction oracle, every candidate."""
    checker.require("rtn")
    case = data.draw(_cases(checker, max_rows=2, max_groups=2), label="case")
    result = checker.quantize(case)
    # judged at the scale ceiling the backend ran: a kernel with one ceiling built in runs a
    # case drawn at another at its own (Checker.in_domain), and the oracle must judge that run
    oracle_check(checker, case.with_(scale_ceiling=checker.last_case.scale_ceiling), result)


# -- properties -------------------------------------------------------------------------------------

def _search_methods(checker):
    return [m for m in checker.methods() if m != "rtn"]


@pytest.mark.clause("HSCALE-ARGMIN-1", "HSCALE-OBJ-1")
@given(data=st.data())
def test_never_worse_than_the_baseline(checker, data):
    """The chosen byte's objective never exceeds the initial byte's, and an equal objective keeps
    the initial byte (delta 0)."""
    methods = _search_methods(checker)
    if not methods:
        checker.require("scale-only")
    case = data.draw(_cases(checker, method=data.draw(st.sampled_from(methods))), label="case")
    obs = checker.quantize(case)
    checker.reported_delta(obs)  # the property is about the reported initial byte
    w = case.exact_weight().reshape(-1, GROUP)
    gcols = case.shape[1] // GROUP
    h = (np.asarray(case.hessian_diag, float).reshape(gcols, GROUP)[np.arange(len(w)) % gcols]
         if case.method == "hscale" else np.ones_like(w))
    sg = float(obs.global_scale)
    byte = obs.scale_bytes.reshape(-1).astype(int)
    init = byte - obs.delta.reshape(-1).astype(int)
    live = (np.abs(w).max(axis=1) > 0) & (init >= 1) & (init <= 126) & (byte >= 1) & (byte <= 126)

    def E(b):
        s = sg * independent.SCALE_VALUES[np.clip(b, 0, 126)][:, None]
        return independent.objective(w, h, independent.element_codes(w, s), s)

    e_new, e_old = E(byte), E(init)
    if checker.profile == EXACT:
        worse = live & (e_new > e_old)
        kept = live & (e_new == e_old) & (byte != init)
    else:
        tol = independent.objective_tolerance(e_old, independent.pairwise(h * w * w))
        worse = live & (e_new > e_old + tol)
        kept = np.zeros_like(live)
    for mask, what in ((worse, "objective above the initial byte's"),
                       (kept, "equal objective but the initial byte was not kept")):
        if mask.any():
            k = int(np.flatnonzero(mask)[0])
            checker.fail("HSCALE-ARGMIN-1", f"group (r={k // gcols}, i={k % gcols}): {what}: "
                         f"initial 0x{init[k]:02X} E = {e_old[k]!r}, chosen 0x{byte[k]:02X} "
                         f"E = {e_new[k]!r}", case)


def _same_result(checker, clause, what, a, b, case, perm_rows=None, perm_groups=None):
    """``b`` must equal ``a`` (optionally permuted)."""
    fields = {"scale_bytes": "groups", "delta": "groups", "codes": "elements"}
    for name, layout in fields.items():
        if getattr(a, name) is None or getattr(b, name) is None:
            continue  # delta: an implementation that reports no initial bytes
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        if perm_rows is not None:
            x = x[perm_rows]
        if perm_groups is not None:
            if name == "codes":
                x = x.reshape(x.shape[0], -1, GROUP)[:, perm_groups].reshape(x.shape[0], -1)
            else:
                x = x[:, perm_groups]
        if x.shape != y.shape or not np.array_equal(x, y):
            bad = np.argwhere(x != y)[0] if x.shape == y.shape else None
            where = ("" if bad is None else
                     f" at group (r={bad[0]}, i={bad[1] // GROUP if layout == 'elements' else bad[1]})"
                     f": expected {int(x[tuple(bad)]):#x} observed {int(y[tuple(bad)]):#x}")
            checker.fail(clause, f"{what}: {name} differ{where}", case)


@pytest.mark.clause("HSCALE-METHOD-1")
@given(data=st.data())
def test_unit_h_equals_scale_only(checker, data):
    checker.require("hscale", "scale-only")
    case = data.draw(_cases(checker, method="scale-only"), label="case")
    a = checker.quantize(case)
    case_h = case.with_(method="hscale", hessian_diag=np.ones(case.shape[1]))
    b = checker.quantize(case_h)
    _same_result(checker, "HSCALE-METHOD-1", "hscale with h = 1 vs scale-only", a, b, case_h)


@pytest.mark.clause("HSCALE-OBJ-1", "NVFP4-GS-1", "NVFP4-E2M1-2")
@given(data=st.data(), k=st.integers(-12, 12))
def test_scaling_weights_by_a_power_of_two(checker, data, k):
    """W * 2^k (exact, in range) leaves codes, bytes and delta unchanged and scales s_g by 2^k."""
    checker.require("rtn")
    case = data.draw(_cases(checker, sg_mode="free", dtype=np.float32, h_kind="powers-of-two"),
                     label="case")
    w = case.exact_weight()
    scaled = w * 2.0 ** k
    nz = w[w != 0]
    assume(nz.size > 0)
    tiny, top = 2.0 ** -126, float(np.finfo(np.float32).max)
    assume(np.abs(nz).min() >= tiny and np.abs(scaled[w != 0]).min() >= tiny)
    assume(np.abs(nz).max() <= top / 2 and np.abs(scaled).max() <= top / 2)
    amax = np.abs(w).max()
    assume(amax / 2688 >= 2.0 ** -120 and amax * 2.0 ** k / 2688 >= 2.0 ** -120)
    # NVFP4-GS-2: the scaled tensor's s_g must still dequantize finitely
    assume(max(amax, amax * 2.0 ** k) * 448.0 / case.scale_ceiling < top / 2)
    a = checker.quantize(case)
    case2 = case.with_(weight=scaled.astype(np.float32), title=f"W * 2^{k}")
    b = checker.quantize(case2)
    _same_result(checker, "HSCALE-OBJ-1", f"W * 2^{k} must give the same codes and bytes", a, b,
                 case2)
    if float(b.global_scale) != float(a.global_scale) * 2.0 ** k:
        checker.fail("NVFP4-GS-1", f"s_g of W * 2^{k} is {float(b.global_scale)!r}, expected "
                     f"{float(a.global_scale) * 2.0 ** k!r}", case2)


@pytest.mark.clause("HSCALE-OBJ-1", "HSCALE-ARGMIN-1")
@given(data=st.data(), k=st.integers(-30, 30))
def test_scaling_h_by_a_power_of_two(checker, data, k):
    """h * 2^k changes no choice (every term scales exactly while nothing under/overflows)."""
    checker.require("hscale")
    case = data.draw(_cases(checker, method="hscale", dtype=np.float32, h_kind="powers-of-two"),
                     label="case")
    w = case.exact_weight()
    nz = np.abs(w[w != 0])
    assume(nz.size == 0 or (nz.min() > 2.0 ** -100 and nz.max() < 2.0 ** 100))
    a = checker.quantize(case)
    case2 = case.with_(hessian_diag=case.hessian_diag * 2.0 ** k, title=f"h * 2^{k}")
    b = checker.quantize(case2)
    _same_result(checker, "HSCALE-ARGMIN-1", f"h * 2^{k} must not change any choice", a, b, case2)


@pytest.mark.clause("NVFP4-PACK-2", "HSCALE-ARGMIN-1")
@given(data=st.data())
def test_row_and_group_permutations_commute(checker, data):
    checker.require("rtn")
    case = data.draw(_cases(checker, max_rows=5, max_groups=4), label="case")
    m, n = case.shape
    g = n // GROUP
    rows = np.array(data.draw(st.permutations(range(m))))
    groups = np.array(data.draw(st.permutations(range(g))))
    a = checker.quantize(case)
    cols = (groups[:, None] * GROUP + np.arange(GROUP)).reshape(-1)
    h = case.hessian_diag[cols] if case.hessian_diag is not None else None
    case2 = case.with_(weight=np.ascontiguousarray(case.weight[rows][:, cols]), hessian_diag=h,
                       title="rows and groups permuted")
    b = checker.quantize(case2)
    _same_result(checker, "NVFP4-PACK-2", "permuting rows and groups must permute the result",
                 a, b, case2, perm_rows=rows, perm_groups=groups)
    if float(a.global_scale) != float(b.global_scale):
        checker.fail("NVFP4-GS-1", "s_g changed under a permutation", case2)


@pytest.mark.clause("HSCALE-WIN-1")
@given(data=st.data())
def test_default_window_is_minus_9_plus_6(checker, data):
    methods = _search_methods(checker)
    if not methods:
        checker.require("scale-only")
    case = data.draw(_cases(checker, method=data.draw(st.sampled_from(methods)), window=(16, 6)),
                     label="case")
    result = checker.check(case)
    d = checker.reported_delta(result).astype(int)
    if ((d < -9) | (d > 6)).any():
        r, i = np.argwhere((d < -9) | (d > 6))[0]
        checker.fail("HSCALE-WIN-1", f"group (r={r}, i={i}): delta {d[r, i]:+d} outside [-9, +6]",
                     case)


@pytest.mark.clause("NVFP4-IN-1")
@given(data=st.data())
def test_non_finite_weights_are_rejected_at_their_index(checker, data):
    checker.require("rtn")
    case = checker.in_domain(data.draw(_cases(checker, max_rows=4, max_groups=3), label="case"))
    w = np.array(case.weight)
    m, n = w.shape
    r = data.draw(st.integers(0, m - 1))
    c = data.draw(st.integers(0, n - 1))
    w[r, c] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    for rr in range(r + 1, m):  # a second bad value later must not be the one named
        w[rr, 0] = np.nan
    h = case.hessian_diag if case.method == "hscale" else None
    checker.expect_rejection("NVFP4-IN-1", "weight", (r, c),
                             lambda backend: backend.quantize(w, h, **case.options()),
                             f"a non-finite weight at [{r}, {c}]",
                             lambda backend: backend.quantize(case.weight, h, **case.options()))
