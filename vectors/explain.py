"""A group worked end to end: the text of ``hscale vectors explain`` and of the worked example
in docs/vectors.md."""

from __future__ import annotations

import numpy as np

from hscale.judge.cases import Case, Rejection
from hscale.judge.diagnose import INIT_TOPS, quotient_evidence
from hscale.judge.findings import fp32_hex, plural
from hscale.reference import E2M1_VALUES, candidate_errors, decode_e4m3
from hscale.reference.constants import GROUP_SIZE as GROUP

from . import hexio



def missing_group(case: Case, row: int, group: int) -> str | None:
    """None when the case has group (row, group), else the message that says it has not."""
    rows, cols = case.shape
    if 0 <= row < rows and 0 <= group < cols // GROUP:
        return None
    return (f"case {case.id} has {plural(rows, 'row')} and {plural(cols // GROUP, 'group')} per "
            f"row: there is no group (row {row}, group {group})")


def explain_group(file_name: str, case: Case, row: int, group: int) -> str:
    """Group (row, group) of a stored case worked end to end; ValueError for a group the case
    does not have."""
    out = case.expected
    if isinstance(out, Rejection):
        return f"case {case.id} is an expected-error case: {out.clause}: {out.message}"
    missing = missing_group(case, row, group)
    if missing:
        raise ValueError(missing)
    s_g = float(out.global_scale)
    cols = slice(group * GROUP, (group + 1) * GROUP)
    native = case.weight[row, cols]
    w = native.astype(np.float64)
    f = float  # print plain Python floats (repr: shortest round-trip)
    c0 = int(out.initial_bytes[row, group])
    chosen = int(out.scale_bytes[row, group])
    lines = [f"case {case.id} ({file_name}), row {row}, group {group} (elements "
             f"{group * GROUP}..{group * GROUP + GROUP - 1}); method {case.method}, init "
             f"{case.init}, K = {case.K}, U = {case.U}",
             "",
             f"inputs ({hexio.dtype_name(native.dtype)} bits, then value):"]
    for j, (word, value) in enumerate(zip(hexio.to_words(native), w)):
        lines.append(f"  w{j:<2} = {word.upper()}  {f(value)!r}")
    h = case.group_h(group)
    if case.method == "hscale":
        lines.append("h (float64 bits, then value):")
        for j, value in enumerate(h):
            lines.append(f"  h{j:<2} = {hexio.scalar_word(value, 'float64').upper()}  {f(value)!r}")
    else:
        lines.append(f"h: not read ({case.method}: h = 1)" if case.method == "scale-only"
                     else "h: not read (rtn)")
    amax = float(np.max(np.abs(w)))
    quotient = quotient_evidence(amax, s_g, INIT_TOPS[case.init])
    source = "supplied" if case.global_scale is not None else \
        f"computed: fp32_rne(amax_tensor / (6 * {case.scale_ceiling:g}))"
    lines += ["",
              f"global scale s_g = {fp32_hex(out.global_scale, prefix='')} = {s_g!r} "
              f"({source})",
              f"group amax = {amax!r}; {quotient}",
              f"baseline byte c0 = 0x{c0:02X} (e4m3 {f(decode_e4m3(c0))!r})"]
    if chosen == 0:
        lines.append("zero group: byte 0x00, codes = sign bits only (NVFP4-ZERO-1)")
    elif case.method != "rtn":
        lines += ["", "candidates in priority order (HSCALE-ARGMIN-1):",
                  "  shift  byte  e4m3       objective E (float64 hex, value)"]
        best = None
        for delta, byte, error in candidate_errors(w, h, c0, s_g, int(case.K), int(case.U)):
            mark = ""
            if best is None or error < best:
                best = error
                mark = "  <- best so far"
            lines.append(f"  {delta:+4d}   0x{byte:02X}  {f(decode_e4m3(byte))!r:<9}  "
                         f"{error.hex():<24} {error!r}{mark}")
    scale = s_g * decode_e4m3(max(chosen, 1))
    codes = out.codes[row, cols]
    lines += ["", f"chosen byte 0x{chosen:02X}, delta {int(out.delta[row, group]):+d}, "
              f"effective scale s = s_g * e4m3 = {f(scale)!r}",
              "codes (|w|/s -> code, value):"]
    for j in range(GROUP):
        ratio = f(abs(w[j]) / scale) if chosen else 0.0
        lines.append(f"  w{j:<2} |w|/s = {ratio!r:<22} code 0x{int(codes[j]):X} "
                     f"({f(E2M1_VALUES[int(codes[j])])!r})")
    packed = out.packed[row, group * 8:(group + 1) * 8].tobytes().hex()
    lines += [f"packed (byte 0 first, element 2k in the low nibble): {packed.upper()}",
              f"observed-file line: {case.id} {row} {group} {chosen:02x} {packed}"]
    return "\n".join(lines)

