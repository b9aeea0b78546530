"""The certificate of a conformance run: what a vendor keeps, and what ``hscale conform`` prints.

Per kind of implementation the backend declares (``hscale.judge.kinds``: a weight quantizer, a
run-time activation quantizer, ...), the kind's declarations (its recipe), its clauses'
statuses and its verdict; the overall verdict is "conforms" when every declared kind conforms.
The clauses of a kind it does not declare are "not applicable", saying so. Two parts, judged
apart:

- **numerics**: every clause judged on valid inputs in the backend's declared domain, with
  its status: ``pass``, ``allowed`` (passed, with a named allowance of that clause used),
  ``fail`` (a finding of that clause), ``error`` (the backend raised on a valid input of a test
  of that clause: not a finding about NVFP4, but nothing was judged), ``not applicable`` (no
  test of it could run: a capability or input the backend does not declare). The numerics
  verdict is "conforms" when no clause fails or errors and at least one was judged;
- **input contract**: the bad inputs of section 5 of the spec (NVFP4-IN-*), each rejected,
  rejected for another reason (the backend also rejects the same call with the bad input
  repaired), or accepted. It decides the verdict only under ``--strict-inputs``.

``build`` makes the certificate, the JSON a vendor keeps. It records the kit and spec versions,
the backend and its declared domain, the profile and the allowances with how many groups and
elements each forgave, the Hypothesis settings, and the command that reproduces the run.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hscale import SPEC_VERSION, __version__
from hscale.judge.clauses import clause_ids, registry
from hscale.judge.kinds import (DEFAULT_KINDS, JUDGED_ELSEWHERE, KINDS, Declared, kind_of_clause,
                                kind_of_test, shown)
from hscale.judge.profiles import ALLOWANCES

INPUT_SECTION_PREFIX = "NVFP4-IN-"
#: How a failure on valid input starts: not a finding, so it cites no clause.
RAISED_ON_VALID_INPUT = "raised on valid input"
#: The outcomes of a bad input (``Checker.expect_rejection``), the expected one first.
CONTRACT_OUTCOMES = ("rejected", "rejected for another reason",
                     "rejected with the wrong error type", "accepted")
STATUSES = ("pass", "allowed", "fail", "error", "input contract", "not applicable",
            "not judged")
#: Characters of a clause's first failure kept in the certificate.
FAILURE_TEXT = 3000


def _row() -> dict:
    return {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "contract": 0, "failing": [],
            "skip_reasons": []}


def cited_clauses(findings) -> list[str]:
    """The clauses a failure's findings cite (their records' ``clause``), in order, once."""
    return list(dict.fromkeys(finding["clause"] for finding in findings or ()))


def clause_statuses(items: dict, outcomes: dict, backend_id: str, allowance_uses: Counter,
                    kinds=DEFAULT_KINDS, cited_by: dict | None = None) -> dict:
    """clause -> {status, passed, failed, error, skipped, failing} over the tests run on the
    backend (``items``: nodeid -> (backend id, clauses); ``outcomes``: nodeid -> (outcome,
    text); ``cited_by``: nodeid -> the finding records its failure cites, as the checkers
    raised them, never read back from the text). A failure counts against the clauses its
    findings cite; a failure that cites none (the backend raised on valid input) is an error of
    every clause its test names. The clauses of a kind the backend does not declare
    (``kinds``) are not applicable."""
    used = {ALLOWANCES[a].clause for a, n in allowance_uses.items() if n}
    rows = {c: _row() for c in clause_ids()}
    cited_by = cited_by or {}
    for nodeid, (owner, ids) in items.items():
        if owner != backend_id:
            continue
        outcome, text = outcomes.get(nodeid, ("not run", ""))
        findings = cited_by.get(nodeid, []) if outcome in ("failed", "error") else []
        cited = cited_clauses(findings)
        for cid in ids:
            row = rows.setdefault(cid, _row())
            if outcome in ("failed", "error"):
                if cited and cid not in cited:
                    row["passed"] += 1  # the test failed on another clause: this one held
                    continue
                kind = "failed" if cited else "error"
                row[kind] += 1
                row["failing"].append(nodeid)
                row.setdefault("first_failure", text[:FAILURE_TEXT])
                _first_finding(row, cid, findings)
            elif outcome in ("passed", "skipped"):
                row[outcome] += 1
                if outcome == "skipped" and text not in row["skip_reasons"]:
                    row["skip_reasons"].append(text)
            elif outcome == "xfailed":  # an input-contract outcome, recorded apart
                row["contract"] += 1
        for cid in cited:
            if cid not in ids and outcome in ("failed", "error"):
                row = rows.setdefault(cid, _row())
                row["failed"] += 1
                row["failing"].append(nodeid)
                row.setdefault("first_failure", text[:FAILURE_TEXT])
                _first_finding(row, cid, findings)
    for cid, row in rows.items():
        kind = kind_of_clause(cid)
        if kind is not None and kind not in kinds:
            row["status"] = "not applicable"
            row["reason"] = f"the backend does not declare the kind {kind!r}"
        elif row["failed"]:
            row["status"] = "fail"
        elif row["error"]:
            row["status"] = "error"
        elif (not row["passed"] and not row["skipped"] and not row["contract"]
              and cid not in JUDGED_ELSEWHERE):
            # none of its tests was selected (--clause, --quick, -k): not judged by this run,
            # which is not the same as not applying to the backend (nor, for section 5, a
            # result of the input contract: no bad input of it was fed)
            row["status"] = "not judged"
            row["reason"] = "no test of this clause was selected in this run"
        elif cid.startswith(INPUT_SECTION_PREFIX):
            # Section 5's rejections are the input contract, reported apart (an input test
            # fails only under --strict-inputs, or when the backend breaks on the control call).
            row["status"] = "input contract"
        elif not row["passed"] and row["contract"] and not row["skipped"]:
            # every test of it fed a bad input, an outcome of the input contract: nothing about
            # this clause's numbers was judged
            row["status"] = "input contract"
            row["reason"] = ("every test of it fed a bad input, recorded in the input contract, "
                             "not judged here")
        elif not row["passed"]:
            row["status"] = "not applicable"
            reasons = row["skip_reasons"]
            row["reason"] = (JUDGED_ELSEWHERE.get(cid)
                             or (f"every test skipped: {reasons[0]}" if reasons else
                                 "every test skipped")
                             + (f" (and {len(reasons) - 1} other reasons)"
                                if len(reasons) > 1 else ""))
        elif cid in used:
            row["status"] = "allowed"
        else:
            row["status"] = "pass"
    return rows


def _first_finding(row: dict, clause: str, findings) -> None:
    """The clause's first finding, as its record (place, expected, observed), once."""
    if "first_finding" not in row:
        mine = [f for f in findings if f["clause"] == clause]
        if mine:
            row["first_finding"] = mine[0]


def contract_summary(contract: list[dict]) -> dict:
    """The input-contract part: every bad input with its outcome, and the counts."""
    counts = Counter(item["outcome"] for item in contract if item.get("judged", True))
    return {"counts": {outcome: counts[outcome] for outcome in CONTRACT_OUTCOMES
                       if counts[outcome] or outcome == "rejected"},
            "items": contract}


def verdicts(clauses: dict, contract: dict, strict_inputs: bool, tests: Counter) -> dict:
    """The overall verdict and its parts. "conforms" needs every test of the run to have passed,
    skipped (outside the declared domain or capabilities) or recorded an input-contract
    outcome: a failed test is never hidden by the clause bookkeeping."""
    judged = [c for c, row in clauses.items() if row["status"] in ("pass", "allowed", "fail",
                                                                    "error")]
    broken = [c for c, row in clauses.items() if row["status"] in ("fail", "error")]
    failed_tests = tests.get("failed", 0) + tests.get("error", 0)
    numerics = ("does not conform" if broken or failed_tests
                else "not judged" if not judged else "conforms")
    departures = {outcome: n for outcome, n in contract["counts"].items()
                  if outcome != "rejected"}
    overall = numerics
    if strict_inputs and numerics == "conforms" and departures:
        overall = "does not conform"
    fed = sum(contract["counts"].values())
    said = ("no bad input was fed in this run: not judged" if not fed else
            "every bad input rejected" if not departures else
            ", ".join(f"{n} {outcome}" for outcome, n in departures.items()))
    return {"verdict": overall, "numerics": numerics,
            "input_contract": said,
            "input_contract_decides": strict_inputs,
            "clauses_broken": broken, "tests_failed": failed_tests,
            # a run that selected only part of the suite (--clause, --quick, -k) says so
            "clauses_not_judged": [c for c, row in clauses.items()
                                   if row["status"] == "not judged"]}


def build(*, backend: dict, declared: Declared, domain, tally, items: dict, outcomes: dict,
          profile: str, allowances, strict_inputs: bool, hypothesis: dict, command: str,
          duration_s: float, kind_tallies: dict | None = None,
          cited: dict | None = None) -> dict:
    """The certificate of one backend, as the JSON a vendor keeps (docs/conformance.md):
    ``backend`` what it is (id, spec, version, name, capabilities, availability), ``declared``
    its kinds and their declarations, ``domain`` its declared domain, ``tally`` the checkers'
    common counts (every kind's, summed), ``kind_tallies`` kind -> its own tally, whose
    ``section()`` joins the kind's part, ``items`` / ``outcomes`` every suite test of the run
    (nodeid -> (backend id, clauses) / (outcome, text)), ``cited`` nodeid -> the finding
    records a failed test's checker raised."""
    tests, skip_reasons, test_outcomes = Counter(), Counter(), {}
    kind_tests: dict[str, Counter] = defaultdict(Counter)
    for nodeid, (backend_id, ids) in items.items():
        if backend_id != backend["id"]:
            continue
        outcome, text = outcomes.get(nodeid, ("not run", ""))
        tests[outcome] += 1
        kind_tests[kind_of_test(ids)][outcome] += 1
        test_outcomes[nodeid] = outcome
        if outcome == "skipped":
            skip_reasons[text] += 1
    clauses = clause_statuses(items, outcomes, backend["id"], tally.allowance_uses,
                              declared.kinds, cited)
    contract = contract_summary(tally.contract)
    verdict = verdicts(clauses, contract, strict_inputs, tests)
    kinds = {}
    for name in (k for k in KINDS if k in declared.kinds):
        rows = {c: row for c, row in clauses.items() if kind_of_clause(c) == name}
        own = contract_summary([item for item in tally.contract
                                if kind_of_clause(item["clause"]) == name])
        part = verdicts(rows, own, strict_inputs, kind_tests[name])
        kinds[name] = {"description": KINDS[name].description,
                       "declarations": declared.declarations[name],
                       "verdict": part["verdict"], "numerics": part["numerics"],
                       "clauses_broken": part["clauses_broken"],
                       "clauses_not_judged": part["clauses_not_judged"],
                       "tests": dict(kind_tests[name]),
                       "clauses": {c: row["status"] for c, row in rows.items()}}
        own_tally = (kind_tallies or {}).get(name)
        if own_tally is not None:  # the kind's own part (the GEMM judge: output elements)
            kinds[name].update(own_tally.section())
    return {
        "certificate_version": 1,
        "verdict": verdict["verdict"],
        "verdicts": verdict,
        "kit": {"name": "hscale-nvfp4", "version": __version__},
        "spec": {"version": SPEC_VERSION, "source": "docs/spec.md (hscale.docs/spec.md)",
                 "clauses": len(clause_ids())},
        "backend": backend,
        "platform": platform_record(backend),
        "kinds_declared": [k for k in KINDS if k in declared.kinds],
        "kinds": kinds,
        "domain": domain.as_json(),
        "domain_text": domain.describe(),
        "profile": profile,
        "allowances": list(allowances),
        "allowance_uses": {k: v for k, v in sorted(tally.allowance_uses.items())},
        # every allowance a finding of this run (every generated example included) needed,
        # with how many findings each would excuse: what to --allow for the faithful profile
        "allowances_needed": {k: v for k, v in tally.allowances_needed.most_common()},
        "tolerance_uses": tally.tolerance_uses,
        "strict_inputs": strict_inputs,
        "checks": tally.checks,
        "groups_checked": tally.groups,
        "adaptations": dict(tally.adaptations),
        "hypothesis": hypothesis,
        "tests": dict(tests),
        "test_outcomes": test_outcomes,
        "skip_reasons": dict(skip_reasons.most_common(20)),
        "clauses": clauses,
        "violations": {c: row["failing"] for c, row in clauses.items() if row["failed"]},
        "errors_on_valid_input": {c: row["failing"] for c, row in clauses.items()
                                  if row["error"] and not row["failed"]},
        "input_contract": contract,
        "command": command,
        "duration_s": round(duration_s, 1),
    }


def platform_record(backend: dict) -> dict:
    """Where the run ran: the host's architecture and system, and the device the backend says
    it ran on (its ``device`` attribute: "cuda:0 NVIDIA B200 (sm_100a)"; the host CPU when it
    says none). The same supported cell runs different numerics on different chips (the byte
    routing of stochastic rounding, NVFP4-SR-4), so a certificate names both."""
    import platform
    return {"machine": platform.machine(), "system": platform.system(),
            "python": platform.python_version(),
            "device": backend.get("device") or f"host CPU ({platform.machine()})"}


#: The statuses of a clause this run judged (the input contract's: its bad inputs were fed).
JUDGED_STATUSES = ("pass", "allowed", "fail", "error", "input contract")


def clauses_not_judged(certificate: dict, asked) -> dict[str, str]:
    """Of the clauses ``asked`` for (``--clause``), those this certificate did not judge, each
    with its status and why: a run asked about a clause that judged nothing of it says so, and
    ``hscale conform`` exits 1 (not "conforms")."""
    out = {}
    for clause in asked:
        row = certificate["clauses"].get(clause, {})
        status = row.get("status", "not judged")
        if status not in JUDGED_STATUSES:
            reason = row.get("reason", "")
            out[clause] = f"{status}: {reason}" if reason else status
    return out


def render_summary(certificate: dict) -> list[str]:
    """The short human summary printed at the end of a run."""
    backend = certificate["backend"]
    if not backend["available"]:  # one line, not a not-applicable line per clause
        return [f"certificate for {backend['id']} ({backend['version']}): "
                f"{certificate['verdict'].upper()}: unavailable here: {backend['reason']}"]
    partial = certificate["verdicts"].get("clauses_not_judged", [])
    lines = [f"certificate for {backend['id']} ({backend['version']}): "
             f"{certificate['verdict'].upper()}"
             + (f" (a partial run: {len(partial)} clauses not judged)" if partial else "")]
    declared = certificate.get("kinds_declared", ["weight"])
    for name, part in certificate.get("kinds", {}).items():
        said = "; ".join(f"{attribute} {shown(v)}"
                         for attribute, v in part["declarations"].items())
        counts = Counter(part["clauses"].values())
        note = f" ({part['verdict_note']})" if part.get("verdict_note") else ""
        lines.append(f"  kind {name} ({said or 'nothing to declare'}): "
                     f"{part['verdict'].upper()}{note}; clauses: "
                     + "; ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]))
        if name == "weight":
            lines.append(f"    profile {certificate['profile']}"
                         + (f", allowances {', '.join(certificate['allowances'])}"
                            if certificate["allowances"] else "")
                         + f"; domain: {certificate['domain_text']}")
        if "outputs_text" in part:
            lines.append(f"    {part['outputs_text']}")
    by_status = defaultdict(list)
    for cid, row in certificate["clauses"].items():
        if cid in registry():
            by_status[row["status"]].append(cid)
    lines.append("  clauses: " + "; ".join(f"{len(by_status[s])} {s}" for s in STATUSES
                                            if by_status[s]))
    for status in ("fail", "error"):
        if by_status[status]:
            lines.append(f"  {status}: {', '.join(by_status[status])}")
    if ("NVFP4-PACK-3" in by_status["fail"] and len(by_status["fail"]) > 1
            and certificate["domain"].get("scale_layout") == "swizzled-128x4"):
        lines.append("  note: the swizzled layout is wrong (NVFP4-PACK-3), so the scale bytes were "
                     "read back from the wrong places: look at NVFP4-PACK-3 first, the other "
                     "failures may follow from it")
    layout = certificate.get("kinds", {}).get("activation", {}).get("declarations", {}).get(
        "activation_scale_layout", "row-major")
    if "NVFP4-ACT-10" in by_status["fail"] and len(by_status["fail"]) > 1 and layout != "row-major":
        lines.append(f"  note: the {layout} layout is wrong (NVFP4-ACT-10), so the scale bytes "
                     "were read back from the wrong places: look at NVFP4-ACT-10 first, the "
                     "other failures may follow from it")
    by_reason = defaultdict(list)  # one line per reason: the clauses it covers
    undeclared = Counter()  # a kind not declared: one count, not its every clause
    for status in ("not applicable", "not judged"):
        by_reason.clear()
        for cid in by_status[status]:
            kind = kind_of_clause(cid)
            if status == "not applicable" and kind is not None and kind not in declared:
                undeclared[kind] += 1
                continue
            by_reason[certificate["clauses"][cid].get("reason", "")].append(cid)
        for reason, cids in by_reason.items():
            lines.append(f"  {status}: {', '.join(cids)}: {reason}")
    if undeclared:
        lines.append("  not applicable: the clauses of the kinds it does not declare ("
                     + ", ".join(f"{kind}: {n}" for kind, n in undeclared.items()) + ")")
    uses = certificate["allowance_uses"]
    if uses:
        lines.append("  allowances used: " + ", ".join(f"{a} ({n})" for a, n in uses.items()))
    needed = {a: n for a, n in certificate.get("allowances_needed", {}).items()
              if a in ALLOWANCES}
    if needed:
        lines.append("  allowances needed (every finding of this run, generated examples "
                     "included): " + ", ".join(f"{a} ({n})" for a, n in needed.items()))
        lines.append("    rerun with: --profile faithful "
                     + " ".join(f"--allow {a}" for a in list(certificate["allowances"])
                                + list(needed)))
    if "weight" in declared:
        counts = certificate["input_contract"]["counts"]
        role = "decides the verdict" if certificate["strict_inputs"] else "reported, not judged"
        lines.append(f"  input contract ({role}): "
                     + (", ".join(f"{n} {outcome}" for outcome, n in counts.items())
                        if sum(counts.values()) else "no bad input was fed in this run"))
    lines.append(f"  reproduce: {certificate['command']}")
    return lines
