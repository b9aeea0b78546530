"""The one comparison helper of the suite.

Every test builds a :class:`Case` (the inputs of one ``quantize`` call) and hands it to
:meth:`Checker.check`, which

1. skips, with a reason naming the capability, when the backend does not declare the method
   or the init the case needs;
2. runs the backend through the protocol (an exception on valid input is a failure that cites
   the test's clauses);
3. checks the result's structure (shapes, dtypes, code range);
4. under the ``exact`` profile compares codes, packed bytes, scale bytes, s_g and delta with
   ``hscale.reference.quantize`` bit for bit, and for small cases also runs the independent exact
   certificate (``conformance.independent``); under ``faithful`` runs the faithful certificate
   with the allowances given by ``--allow``, counting each allowance used;
5. fails with a message that speaks spec: the clause ID in brackets, the group ``(r, i)``,
   expected vs observed in hex, and for a wrong scale choice the objective of both candidates.
"""

from __future__ import annotations

import math
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from . import independent

GROUP = 16
EXACT, FAITHFUL = "exact", "faithful"
#: Cases up to this many weights also get the independent exact certificate under ``exact``.
SMALL_CASE = 1 << 14
#: Findings listed per clause in a failure message.
SHOWN = 3
#: Mismatches analysed in detail per kind (the rest are counted).
LISTED = 24


@dataclass(frozen=True, eq=False)
class Case:
    """The inputs of one ``quantize`` call, and a label saying what the case is about."""

    weight: np.ndarray
    hessian_diag: np.ndarray | None = None
    method: str = "hscale"
    init: str = "maxabs"
    K: int = 16
    U: int = 6
    scale_ceiling: float = 448.0
    global_scale: float | None = None
    label: str = ""

    def options(self) -> dict:
        return dict(method=self.method, init=self.init, K=self.K, U=self.U,
                    scale_ceiling=self.scale_ceiling, global_scale=self.global_scale)

    def call_args(self):
        h = self.hessian_diag if self.method == "hscale" else None
        return (self.weight, h), self.options()

    def with_(self, **changes) -> "Case":
        return replace(self, **changes)

    @property
    def shape(self):
        return self.weight.shape

    def exact_weight(self) -> np.ndarray:
        return np.asarray(self.weight).astype(np.float64)

    def describe(self) -> str:
        m, n = self.weight.shape
        sg = ("computed" if self.global_scale is None
              else f"given {float(self.global_scale)!r} ({fp32_hex(self.global_scale)})")
        text = (f"{m}x{n} {np.dtype(self.weight.dtype).name}, method={self.method}, "
                f"init={self.init}, K={self.K}, U={self.U}, C={self.scale_ceiling!r}, s_g {sg}")
        return f"{self.label}: {text}" if self.label else text


def reference_quantize(case: Case):
    from hscale.reference import quantize
    args, kwargs = case.call_args()
    return quantize(*args, **kwargs)


# ------------------------------------------------------------------------------------------
# Hex and context
# ------------------------------------------------------------------------------------------

def fp32_hex(v) -> str:
    return f"0x{int(np.array(float(v), dtype=np.float32).view(np.uint32)):08X}"


def value_hex(v, dtype) -> str:
    """Bits of ``v`` in the input dtype (fp32 / fp16 / bf16)."""
    dtype = np.dtype(dtype)
    uint = {4: np.uint32, 2: np.uint16}[dtype.itemsize]
    return f"0x{int(np.array(v, dtype=dtype).view(uint)):0{dtype.itemsize * 2}X}"


def group_context(case: Case, r: int, i: int, global_scale) -> str:
    w = np.asarray(case.weight)[r, GROUP * i: GROUP * (i + 1)]
    lines = ["w = [" + ", ".join(value_hex(v, w.dtype) for v in w) + f"] ({w.dtype.name} bits)",
             "  = [" + ", ".join(repr(float(v)) for v in w) + "]"]
    if case.method == "hscale" and case.hessian_diag is not None:
        h = np.asarray(case.hessian_diag, dtype=np.float64)[GROUP * i: GROUP * (i + 1)]
        lines.append("h = [" + ", ".join(repr(float(v)) for v in h) + "]")
    lines.append(f"s_g = {float(global_scale)!r} ({fp32_hex(global_scale)})")
    return "\n".join("      " + line for line in lines)


# ------------------------------------------------------------------------------------------
# Structure
# ------------------------------------------------------------------------------------------

@dataclass
class Observed:
    codes: np.ndarray
    packed: np.ndarray
    scale_bytes: np.ndarray
    delta: np.ndarray
    global_scale: float


def normalize(result, case: Case) -> tuple[Observed | None, list[independent.Finding]]:
    """The result's arrays, or findings about its structure (NVFP4-PACK-*, E2M1-1, GS-1)."""
    F = independent.Finding
    m, n = case.shape
    missing = [a for a in ("codes", "packed", "scale_bytes", "delta", "global_scale")
               if not hasattr(result, a)]
    if missing:
        return None, [F("NVFP4-PACK-1", f"the result ({type(result).__name__}) lacks "
                        f"{', '.join(missing)}: the protocol returns "
                        "hscale.reference.QuantizedWeight")]
    findings = []
    arrays = {}
    spec = {"codes": ((m, n), "NVFP4-E2M1-1", "uint8"), "packed": ((m, n // 2), "NVFP4-PACK-1", "uint8"),
            "scale_bytes": ((m, n // GROUP), "NVFP4-PACK-2", "uint8"),
            "delta": ((m, n // GROUP), "HSCALE-ARGMIN-1", "int8")}
    for name, (shape, clause, dtype) in spec.items():
        try:
            a = np.asarray(getattr(result, name))
        except Exception as exc:  # noqa: BLE001 - anything unreadable is a finding
            findings.append(F(clause, f"{name}: cannot be read as a numpy array ({exc})"))
            continue
        if a.shape != shape:
            findings.append(F(clause, f"{name}: shape expected {shape} observed {a.shape}"))
        elif a.dtype != np.dtype(dtype):
            findings.append(F(clause, f"{name}: dtype expected {dtype} observed {a.dtype}"))
        arrays[name] = a
    if "codes" in arrays and arrays["codes"].size and arrays["codes"].dtype.kind in "iu":
        if int(arrays["codes"].max()) > 0xF or int(arrays["codes"].min()) < 0:
            findings.append(F("NVFP4-E2M1-1", f"codes: a code is a 4-bit value 0x0..0xF, observed "
                              f"0x{int(arrays['codes'].max()):X}"))
    sg = result.global_scale
    try:
        sg_value = float(sg)
    except Exception:  # noqa: BLE001
        findings.append(F("NVFP4-GS-1", f"global_scale: {sg!r} is not a number"))
        sg_value = math.nan
    if not isinstance(sg, np.float32):
        findings.append(F("NVFP4-GS-1", f"global_scale: expected an np.float32 (the stored fp32 "
                          f"multiplier), observed {type(sg).__name__}"))
    if findings:
        return None, findings
    return Observed(arrays["codes"], arrays["packed"], arrays["scale_bytes"], arrays["delta"],
                    sg_value), []


# ------------------------------------------------------------------------------------------
# exact: compare with the reference
# ------------------------------------------------------------------------------------------

def _window_deltas(case: Case) -> tuple[int, int]:
    return -(case.K - 1 - case.U), case.U


def compare_exact(case: Case, obs: Observed, ref) -> list[independent.Finding]:
    from hscale.reference import candidate_errors
    F = independent.Finding
    findings: list[independent.Finding] = []
    ref_sg = float(ref.global_scale)
    if fp32_hex(obs.global_scale) != fp32_hex(ref_sg):
        amax = float(np.max(np.abs(case.exact_weight())))
        if case.global_scale is not None:
            clause, why = "NVFP4-GS-3", "the caller's s_g must be used unchanged"
        elif amax == 0 or amax / (6 * case.scale_ceiling) < 2.0 ** -126:
            clause, why = "NVFP4-GS-2", f"amax = {amax!r}"
        else:
            clause, why = "NVFP4-GS-1", f"amax = {amax!r}, C = {case.scale_ceiling!r}"
        findings.append(F(clause, f"global scale s_g expected {ref_sg!r} ({fp32_hex(ref_sg)}) "
                          f"observed {obs.global_scale!r} ({fp32_hex(obs.global_scale)}); {why}"))
        return findings, Counter()  # every byte and code below would follow from it

    w = case.exact_weight()
    m, n = w.shape
    gcols = n // GROUP
    ref_init = (ref.scale_bytes.astype(np.int64) - ref.delta.astype(np.int64))
    obs_bytes = obs.scale_bytes.astype(np.int64)
    obs_init = obs_bytes - obs.delta.astype(np.int64)
    lo, hi = _window_deltas(case)
    amax_g = np.abs(w.reshape(m, gcols, GROUP)).max(axis=2)
    h_all = (np.asarray(case.hessian_diag, dtype=np.float64) if case.method == "hscale"
             else np.ones(n))
    init_clause = "NVFP4-INIT-1" if case.init == "maxabs" else "NVFP4-INIT-2"

    extra: Counter = Counter()
    byte_diff = np.argwhere(obs_bytes != ref.scale_bytes)
    if len(byte_diff) > LISTED:
        extra["more groups whose scale byte differs"] = len(byte_diff) - LISTED
    for r, i in byte_diff[:LISTED]:
        r, i = int(r), int(i)
        e, o = int(ref.scale_bytes[r, i]), int(obs_bytes[r, i])
        if amax_g[r, i] == 0:
            findings.append(F("NVFP4-ZERO-1", f"zero group: scale byte expected 0x{e:02X} "
                              f"observed 0x{o:02X}", (r, i), kind="byte"))
            continue
        if not 1 <= o <= 0x7E:
            findings.append(F("NVFP4-E4M3-3", f"scale byte expected 0x{e:02X} observed 0x{o:02X}, "
                              "which is not on the ladder 0x01..0x7E", (r, i), kind="ladder"))
            continue
        if case.method == "rtn" or obs_init[r, i] != ref_init[r, i]:
            findings.append(F(init_clause, f"initial byte expected 0x{int(ref_init[r, i]):02X} "
                              f"observed 0x{int(obs_init[r, i]) & 0xFF:02X} (scale byte "
                              f"0x{o:02X} - delta {int(obs.delta[r, i]):+d}); scale byte "
                              f"expected 0x{e:02X} observed 0x{o:02X}; amax_g / (6 s_g) = "
                              f"{float(amax_g[r, i] / (6 * ref_sg))!r}", (r, i), kind="init"))
            continue
        c0 = int(ref_init[r, i])
        in_window = lo <= o - c0 <= hi or (o == 1 and c0 + lo <= 1) or (o == 0x7E and c0 + hi >= 0x7E)
        group = w[r, GROUP * i: GROUP * (i + 1)]
        h = h_all[GROUP * i: GROUP * (i + 1)]
        if not in_window:
            findings.append(F("HSCALE-WIN-1", f"scale byte expected 0x{e:02X} observed 0x{o:02X}: "
                              f"outside the window of initial byte 0x{c0:02X}, which is "
                              f"clip(c0 + [{lo}, +{hi}], 0x01, 0x7E) = 0x{max(1, c0 + lo):02X}.."
                              f"0x{min(0x7E, c0 + hi):02X}", (r, i), kind="window"))
            continue
        rows = candidate_errors(group, h, c0, ref_sg, case.K, case.U)
        err = {b: E for _, b, E in rows}
        e_exp, e_obs = err[e], err.get(o, math.nan)
        table = ", ".join(f"{d:+d}:0x{b:02X}:{E!r}" for d, b, E in rows)
        both = (f"scale byte expected 0x{e:02X} (delta {e - c0:+d}, E = {e_exp!r} = "
                f"{float(e_exp).hex()}) observed 0x{o:02X} (delta {o - c0:+d}, E = {e_obs!r} = "
                f"{float(e_obs).hex()})")
        if e_obs == e_exp:
            findings.append(F("HSCALE-ARGMIN-1", both + "; equal objectives: the tie rule keeps "
                              "the earlier candidate in the priority order 0, +1, -1, +2, -2, ..."
                              f"\n      candidates (delta:byte:E) {table}", (r, i), kind="choice"))
        elif e_obs > e_exp:
            findings.append(F("HSCALE-OBJ-1", both + "; the observed byte has the larger fp64 "
                              "objective (evaluated exactly as written, pairwise, no FMA)"
                              f"\n      candidates (delta:byte:E) {table}", (r, i), kind="choice"))
        else:
            findings.append(F("HSCALE-ARGMIN-1", both + "; the observed byte has the SMALLER "
                              "objective: the reference may be wrong, please report"
                              f"\n      candidates (delta:byte:E) {table}", (r, i), kind="choice"))

    same_byte = obs_bytes == ref.scale_bytes
    delta_diff = np.argwhere(same_byte & (obs.delta != ref.delta))
    if len(delta_diff) > LISTED:
        extra["more groups whose reported delta differs"] = len(delta_diff) - LISTED
    for r, i in delta_diff[:LISTED]:
        r, i = int(r), int(i)
        findings.append(F("HSCALE-ARGMIN-1" if amax_g[r, i] else "NVFP4-ZERO-1",
                          f"reported delta expected {int(ref.delta[r, i]):+d} observed "
                          f"{int(obs.delta[r, i]):+d} (scale byte 0x{int(ref.scale_bytes[r, i]):02X} "
                          "agrees): delta = chosen byte - initial byte", (r, i), kind="delta"))

    code_diff = obs.codes != ref.codes
    code_diff &= np.repeat(same_byte, GROUP, axis=1)  # codes under another byte follow from it
    code_diff = np.argwhere(code_diff)
    if len(code_diff) > LISTED:
        extra["more elements whose code differs"] = len(code_diff) - LISTED
    for r, col in code_diff[:LISTED]:
        r, col = int(r), int(col)
        i, j = col // GROUP, col % GROUP
        e, o = int(ref.codes[r, col]), int(obs.codes[r, col])
        wv = float(w[r, col])
        wh = value_hex(case.weight[r, col], case.weight.dtype)
        if amax_g[r, i] == 0:
            clause = "NVFP4-E2M1-3" if e ^ o == 0x8 else "NVFP4-ZERO-1"
            findings.append(F(clause, f"element {j} of a zero group: w = {wv!r} ({wh}), code "
                              f"expected 0x{e:X} observed 0x{o:X}", (r, i), j, kind="zero-code"))
            continue
        s = ref_sg * independent.SCALE_VALUES[int(ref.scale_bytes[r, i])]
        if e ^ o == 0x8:
            findings.append(F("NVFP4-E2M1-3", f"element {j}: w = {wv!r} ({wh}), the sign bit of the "
                              f"code is the sign bit of w: code expected 0x{e:X} observed 0x{o:X}",
                              (r, i), j, kind="sign"))
        else:
            ties = [float(mid) for mid in independent.MIDPOINTS if abs(wv) == mid * s]
            why = (f"|w|/s = {ties[0]!r} exactly, a tie (ties go to the even code)" if ties
                   else f"|w|/s = {abs(wv) / s!r}")
            findings.append(F("NVFP4-E2M1-2", f"element {j}: w = {wv!r} ({wh}), s = {s!r}, {why}: "
                              f"code expected 0x{e:X} observed 0x{o:X}", (r, i), j,
                              kind="magnitude"))

    want_packed = (obs.codes[:, 0::2] & 0xF) | ((obs.codes[:, 1::2] & 0xF) << 4)
    pack_diff = np.argwhere(obs.packed != want_packed)
    if len(pack_diff) > LISTED:
        extra["more packed bytes differ"] = len(pack_diff) - LISTED
    for r, b in pack_diff[:LISTED]:
        r, b = int(r), int(b)
        findings.append(F("NVFP4-PACK-1", f"packed byte [{r}, {b}] expected "
                          f"0x{int(want_packed[r, b]):02X} (code[{2 * b}] | code[{2 * b + 1}] << 4) "
                          f"observed 0x{int(obs.packed[r, b]):02X}", (r, b // 8), kind="pack"))
    return findings, extra


# ------------------------------------------------------------------------------------------
# Failure messages
# ------------------------------------------------------------------------------------------

def format_failure(backend_label: str, profile: str, case: Case, findings, global_scale,
                   extra: Counter | None = None, note: str = "") -> str:
    by_clause: dict[str, list] = defaultdict(list)
    for f in findings:
        by_clause[f.clause].append(f)
    lines = [f"backend {backend_label!r} does not conform (profile {profile}) on "
             f"{case.describe()}"]
    if note:
        lines.append(note)
    extra = extra or Counter()
    for clause, items in by_clause.items():
        more = len(items) - SHOWN + extra.get(clause, 0)
        for f in items[:SHOWN]:
            where = f"group (r={f.group[0]}, i={f.group[1]})" if f.group else "tensor"
            if f.element is not None:
                where += f" element j={f.element}"
            lines.append(f"  [{clause}] {where}: {f.text}")
            if f.group and f.group[1] * GROUP < case.shape[1] and f.kind != "pack":
                lines.append(group_context(case, f.group[0], f.group[1], global_scale))
        if more > 0:
            lines.append(f"  [{clause}] ... and {more} more")
    for key, count in extra.items():
        if key.startswith("more "):
            lines.append(f"  ... and {count} {key} (not analysed)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# The checker every test uses
# ------------------------------------------------------------------------------------------

@dataclass
class Tally:
    """Per-backend counts that go into the report."""

    allowance_uses: Counter = field(default_factory=Counter)
    tolerance_uses: int = 0
    checks: int = 0
    groups: int = 0


def is_reference_backend(backend) -> bool:
    """The built-in numpy backend *is* the reference: comparing the two proves nothing, so its
    results are certified by the independent statement of the spec instead."""
    return type(backend).__module__ == "hscale.backends.numpy_backend"


class Checker:
    def __init__(self, backend, label: str, profile: str = EXACT, allowances=(),
                 tally: Tally | None = None, clauses=()):
        self.backend = backend
        self.label = label
        self.profile = profile
        self.allowances = frozenset(allowances)
        self.tally = tally if tally is not None else Tally()
        self.clauses = tuple(clauses)
        self.capabilities = frozenset(getattr(backend, "capabilities", ()))

    # -- capabilities -------------------------------------------------------------------------
    def supports(self, method: str = "rtn", init: str = "maxabs") -> bool:
        return method in self.capabilities and (init == "maxabs" or init in self.capabilities)

    def require(self, *capabilities: str):
        for cap in capabilities:
            if cap != "maxabs" and cap not in self.capabilities:
                pytest.skip(f"backend {self.label!r} does not declare capability {cap!r} "
                            f"(it declares {', '.join(sorted(self.capabilities)) or 'none'})")

    def methods(self) -> list[str]:
        return [m for m in ("rtn", "scale-only", "hscale") if m in self.capabilities]

    def inits(self) -> list[str]:
        return ["maxabs"] + (["4over6"] if "4over6" in self.capabilities else [])

    # -- running ------------------------------------------------------------------------------
    def quantize(self, case: Case):
        self.require(case.method, case.init)
        args, kwargs = case.call_args()
        try:
            return self.backend.quantize(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any exception on valid input is a finding
            error = exc
        cited = " ".join(f"[{c}]" for c in self.clauses) or "[HSCALE-METHOD-1]"
        where = traceback.extract_tb(error.__traceback__)[-1]
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        pytest.fail(f"backend {self.label!r} raised on valid input {cited}\n"
                    f"  case: {case.describe()}\n  {text}\n  (at {where.filename}:{where.lineno})",
                    pytrace=False)

    def check(self, case: Case, result=None, reference=None, independent_check: bool | None = None):
        """Run (unless ``result`` is given) and judge one case; returns the result."""
        if result is None:
            result = self.quantize(case)
        else:
            self.require(case.method, case.init)
        self.tally.checks += 1
        obs, findings = normalize(result, case)
        extra = Counter()
        sg = float(getattr(result, "global_scale", math.nan)) if obs is None else obs.global_scale
        note = ""
        if obs is not None:
            self.tally.groups += case.weight.size // GROUP
            if self.profile == EXACT:
                small = case.weight.size <= SMALL_CASE
                use_independent = independent_check if independent_check is not None else small
                if is_reference_backend(self.backend):
                    use_independent = True  # the tautology guard, see is_reference_backend
                else:
                    ref = reference if reference is not None else reference_quantize(case)
                    findings, extra = compare_exact(case, obs, ref)
                if use_independent and not findings:
                    cert = self.certify(case, obs, strict=True)
                    findings, extra = cert.findings, cert.extra
                    if findings and not is_reference_backend(self.backend):
                        note = ("  (the result equals hscale.reference.quantize but fails the "
                                "independent certificate: the reference may be wrong, please "
                                "report)")
            else:
                cert = self.certify(case, obs, strict=False)
                findings, extra = cert.findings, cert.extra
                for name, count in cert.uses.items():
                    if count:
                        self.tally.allowance_uses[name] += count
                self.tally.tolerance_uses += cert.tolerance_uses
        if findings:
            pytest.fail(format_failure(self.label, self.profile, case, findings, sg, extra, note),
                        pytrace=False)
        return result

    def certify(self, case: Case, obs: Observed, strict: bool) -> independent.Certificate:
        return independent.certify(
            case.exact_weight(), case.hessian_diag if case.method == "hscale" else None,
            method=case.method, init=case.init, K=case.K, U=case.U,
            scale_ceiling=case.scale_ceiling, global_scale=case.global_scale,
            codes=obs.codes, scale_bytes=obs.scale_bytes, delta=obs.delta,
            observed_global_scale=obs.global_scale, packed=obs.packed,
            allowances=self.allowances, strict=strict)

    def expect(self, clause: str, what: str, expected, observed, case: Case | None = None,
               layout: str = "groups"):
        """A hand-written expectation of the spec (a table value, a byte, a code).

        Under ``exact`` it must hold bit for bit. Under ``faithful`` the certificate run by
        :meth:`check` is what decides (a faithful result may differ from the hand value within
        its allowances), so the expectation is not asserted. ``layout``: ``groups`` (indices
        (r, i)), ``elements`` (indices (r, col) -> group (r, col // 16) element j) or ``flat``.
        """
        if self.profile != EXACT:
            return
        expected = np.asarray(expected)
        observed = np.asarray(observed)
        if expected.shape == observed.shape and np.array_equal(expected, observed):
            if expected.dtype.kind != "f" or np.array_equal(np.signbit(expected), np.signbit(observed)):
                return
        if expected.shape != observed.shape:
            self.fail(clause, f"{what}: shape expected {expected.shape} observed {observed.shape}",
                      case)
        diff = np.argwhere((expected != observed)
                           | ((np.signbit(expected) != np.signbit(observed))
                              if expected.dtype.kind == "f" else False))
        lines = []
        for idx in diff[:5]:
            idx = tuple(int(v) for v in idx)
            e, o = expected[idx], observed[idx]
            if layout == "groups" and len(idx) == 2:
                where = f"group (r={idx[0]}, i={idx[1]})"
            elif layout == "elements" and len(idx) == 2:
                where = f"group (r={idx[0]}, i={idx[1] // GROUP}) element j={idx[1] % GROUP}"
            else:
                where = f"index {idx}"
            lines.append(f"{where}: expected {_hexval(e)} observed {_hexval(o)}")
        more = f"\n  ... and {len(diff) - 5} more" if len(diff) > 5 else ""
        self.fail(clause, f"{what}:\n    " + "\n    ".join(lines) + more, case)

    def fail(self, clause: str, text: str, case: Case | None = None):
        """A spec-speaking failure for checks made outside ``check`` (properties, layouts)."""
        where = f" on {case.describe()}" if case is not None else ""
        pytest.fail(f"backend {self.label!r} does not conform (profile {self.profile}){where}\n"
                    f"  [{clause}] {text}", pytrace=False)


def _hexval(v) -> str:
    v = np.asarray(v)
    if v.dtype == np.int8:
        return f"{int(v):+d}"
    if v.dtype.kind in "iu":
        return f"0x{int(v):02X}"
    if v.dtype == np.float32:
        return f"{float(v)!r} ({fp32_hex(v)})"
    return f"{float(v)!r} ({float(v).hex()})"
