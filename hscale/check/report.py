"""What ``hscale check`` found, and how a user reads it: the report model (a problem about a
named tensor, one layer's result, the checkpoint's), the table printed on screen and the JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hscale.files import write_json
from hscale.judge.findings import Finding, plural

REPORT_VERSION = 1


#: Up to this many layers the table lists every layer; above, only those with findings.
TABLE_ALL_LAYERS = 40


#: Findings shown per tensor and clause; the rest are counted.
SHOWN = 3
#: Tensors whose findings are shown per clause; the others' are counted.
TENSORS_SHOWN = 10


@dataclass
class Problem:
    """A finding about one named tensor (or module, or config file)."""

    tensor: str
    finding: Finding

    @property
    def count(self) -> int:
        """How many findings it stands for (a "count" problem stands for those not listed)."""
        return int(self.finding.observed) if self.finding.kind == "count" else 1

    def render(self) -> str:
        return f"{self.tensor}: {self.finding.render()}"

    def as_json(self) -> dict:
        return {"tensor": self.tensor, **self.finding.as_json()}


@dataclass
class LayerResult:
    """What ``hscale check`` found about one quantized Linear."""

    module: str
    tensors: dict
    shape: tuple | None = None
    fused_with: tuple = ()
    stored_global_scale: float | None = None
    global_scale: float | None = None
    stats: dict = field(default_factory=dict)
    verdict: str = ""  # "exact", "faithful", "format", "not certified", "" (file only)
    recipe: str = ""  # "rtn maxabs", ... (the method and init that reproduce or certify it)
    allowances: dict = field(default_factory=dict)  # allowance -> groups or elements
    global_scale_note: str = ""  # how the s_g relates to NVFP4-GS-1's (with the original)
    quality: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def problem(self, role: str, clause: str, text: str, **where):
        self.problems.append(Problem(self.tensors.get(role, self.module),
                                     Finding(clause, text, **where)))

    def as_json(self) -> dict:
        return {"module": self.module, "tensors": self.tensors,
                "shape": list(self.shape) if self.shape else None,
                "fused_with": list(self.fused_with),
                "stored_global_scale": self.stored_global_scale,
                "stored_global_scale_bits": _bits(self.stored_global_scale),
                "global_scale": self.global_scale, "global_scale_bits": _bits(self.global_scale),
                "global_scale_note": self.global_scale_note, "stats": self.stats,
                "verdict": self.verdict, "recipe": self.recipe, "allowances": self.allowances,
                "quality": self.quality, "notes": self.notes,
                "findings": [p.as_json() for p in self.problems]}


@dataclass
class CheckReport:
    checkpoint: str
    format: str
    original: str | None = None
    hessian: str | None = None
    layers: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # about the checkpoint as a whole
    notes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def conforms(self) -> bool:
        return not self.problems and not any(layer.problems for layer in self.layers)

    def all_problems(self) -> list:
        return self.problems + [p for layer in self.layers for p in layer.problems]

    def totals(self) -> dict:
        stats: Counter = Counter()
        for layer in self.layers:
            stats.update({k: v for k, v in layer.stats.items() if isinstance(v, int)})
        verdicts = Counter(layer.verdict or "checked" for layer in self.layers)
        recipes = Counter(f"{layer.verdict} {layer.recipe}".strip() for layer in self.layers
                          if layer.recipe)
        allowances: Counter = Counter()
        for layer in self.layers:
            allowances.update(layer.allowances)
        clauses: Counter = Counter()
        for problem in self.all_problems():
            clauses[problem.finding.clause] += problem.count
        consistency = {}
        fed = [layer for layer in self.layers if "consistency_codes_as_rounded" in layer.stats]
        if fed:
            weights = sum(layer.stats["weights"] for layer in fed)
            groups = sum(layer.stats["groups"] for layer in fed)
            consistency = {
                "layers": len(fed),
                "codes_as_rounded": sum(layer.stats["consistency_codes_as_rounded"]
                                        * layer.stats["weights"] for layer in fed) / weights,
                "bytes_as_rtn": sum(layer.stats.get("consistency_bytes_as_rtn", 0.0)
                                    * layer.stats["groups"] for layer in fed) / groups}
        return {"layers": len(self.layers), "verdicts": dict(verdicts), "recipes": dict(recipes),
                "consistency": consistency,
                "allowances": dict(allowances), "findings": sum(clauses.values()),
                "findings_by_clause": dict(clauses),
                "layers_with_findings": sum(1 for layer in self.layers if layer.problems),
                **{k: stats[k] for k in ("weights", "groups", "dead_groups", "zero_rows",
                                          "subnormal_bytes", "saturated_bytes", "zero_bytes")}}

    def as_json(self) -> dict:
        return {"report_version": REPORT_VERSION, "checkpoint": self.checkpoint,
                "format": self.format, "original": self.original, "hessian": self.hessian,
                "conforms": self.conforms, "totals": self.totals(), "seconds": self.seconds,
                "notes": self.notes, "findings": [p.as_json() for p in self.problems],
                "layers": [layer.as_json() for layer in self.layers]}


def _bits(value) -> str | None:
    if value is None:
        return None
    return f"0x{int(np.array(value, dtype=np.float32).view(np.uint32)):08X}"


def _f32(value) -> str:
    return f"{float(value)!r} ({_bits(value)})"


def counted(tensor: str, clause: str, count: int) -> Problem:
    """``count`` more findings of ``clause`` about ``tensor``, counted, not listed (the table
    adds them to its "... and N more")."""
    return Problem(tensor, Finding(clause, f"... and {count} more, counted but not listed",
                                   kind="count", observed=str(count)))


def format_report(report: CheckReport, all_layers: bool = False) -> str:
    """The per-layer table (every layer up to TABLE_ALL_LAYERS, else those with findings or not
    exact), the totals, and the findings: one screen for a small model."""
    totals = report.totals()
    lines = [f"{report.checkpoint}: {report.format} NVFP4, {plural(totals['layers'], 'quantized Linear')}, "
             f"{totals['weights']:,} weights"
             + (f"; against {report.original}" if report.original else "")
             + (f" with h from {report.hessian}" if report.hessian else "")]
    have_quality = any("diag_error" in layer.quality for layer in report.layers)
    listed = [layer for layer in report.layers
              if all_layers or len(report.layers) <= TABLE_ALL_LAYERS or layer.problems
              or layer.verdict not in ("", "exact")]
    header = (f"{'layer':46} {'shape':>10} {'s_g':>11} {'dead':>5} {'sub':>5} {'sat':>6}  "
              f"{'verdict':38}")
    if have_quality:
        header += f" {'diag(H) err':>11} {'output err':>10}"
    lines.append(header + "  findings")
    for layer in listed:
        name = layer.module if len(layer.module) <= 46 else "..." + layer.module[-43:]
        shape = "x".join(map(str, layer.shape)) if layer.shape else "?"
        sg = f"{layer.global_scale:.4g}" if layer.global_scale is not None else "-"
        stats = layer.stats
        verdict = _verdict_text(layer)
        row = (f"{name:46} {shape:>10} {sg:>11} {stats.get('dead_groups', '-'):>5} "
               f"{stats.get('subnormal_bytes', '-'):>5} {stats.get('saturated_bytes', '-'):>6}  "
               f"{verdict:38}")
        if have_quality:
            row += f" {_ratio(layer.quality, 'diag_error'):>11} {_ratio(layer.quality, 'output_error'):>10}"
        clauses = Counter()
        for problem in layer.problems:
            clauses[problem.finding.clause] += problem.count
        row += "  " + (", ".join(f"{c} x{n}" for c, n in clauses.items()) or "-")
        lines.append(row)
    if len(listed) < len(report.layers):
        lines.append(_unlisted(report.layers, listed))
    lines.append(_totals_line(report, totals))
    if totals["consistency"]:
        figures = totals["consistency"]
        lines.append(f"re-derivation of the {figures['layers']} layers made with error feedback "
                     f"(a consistency figure, not findings): {100 * figures['codes_as_rounded']:.1f}% "
                     "of codes are the rounding of the original weight at the stored byte, "
                     f"{100 * figures['bytes_as_rtn']:.1f}% of scale bytes are RTN's")
    if have_quality:
        lines.append("diag(H) err, output err: the layer's sum_j h_j dW_ij^2 and "
                     "Tr(dW H dW^T), relative to RTN's at the same s_g")
    for note in report.notes:
        lines.append(f"note: {note}")
    problems = report.all_problems()
    if problems:
        lines.append("")
        lines.append(f"findings ({totals['findings']}):")
        lines += _render_problems(problems)
    for layer in report.layers:
        for note in layer.notes:
            lines.append(f"note: {layer.module}: {note}")
    lines.append("")
    where = [plural(totals["layers_with_findings"], "layer")] * bool(
        totals["layers_with_findings"]) + ["the checkpoint as a whole"] * bool(report.problems)
    lines.append("conforms" if report.conforms else
                 f"does not conform: {plural(totals['findings'], 'finding')}, about "
                 + " and ".join(where))
    return "\n".join(lines)


def _unlisted(layers: list, listed: list) -> str:
    """The line standing for the layers the table leaves out, saying what they are as their
    rows would (format ok, exact): all without findings."""
    shown = {id(layer) for layer in listed}
    verdicts = Counter(_verdict_text(layer) for layer in layers if id(layer) not in shown)
    count = sum(verdicts.values())
    what = " and ".join(f"{n} {verdict}" if len(verdicts) > 1 else verdict
                        for verdict, n in verdicts.items())
    return (f"({plural(count, 'more layer')}, {what}, without findings, not listed; --all "
            "lists them)")


def _verdict_text(layer: LayerResult) -> str:
    if not layer.verdict:
        return "findings" if layer.problems else "format ok"
    # the recipe without the default init: "rtn", "hscale", "rtn 4over6"
    text = layer.verdict + (f" {layer.recipe.replace(' maxabs', '')}" if layer.recipe else "")
    if layer.allowances:
        text += " (" + ", ".join(f"{a} {n}" for a, n in layer.allowances.items()) + ")"
    return text


def _ratio(quality: dict, key: str) -> str:
    if key not in quality or not quality.get(key + "_rtn"):
        return "-"
    return f"{quality[key] / quality[key + '_rtn']:.3f}"


def _totals_line(report: CheckReport, totals: dict) -> str:
    verdicts = ", ".join(f"{n} {v}" for v, n in totals["verdicts"].items())
    recipes = "; ".join(f"{n} {r}" for r, n in totals["recipes"].items())
    allowances = ", ".join(f"{a} {n}" for a, n in totals["allowances"].items())
    return (f"totals: {verdicts}" + (f" ({recipes})" if recipes else "")
            + (f"; allowances used: {allowances}" if allowances else "")
            + f"; {totals['groups']:,} groups: {totals['dead_groups']:,} dead, "
            f"{totals['zero_rows']:,} all-zero rows, {totals['subnormal_bytes']:,} subnormal "
            f"and {totals['saturated_bytes']:,} saturated scale bytes; {report.seconds:.1f} s")


def _render_problems(problems: list) -> list:
    """Each tensor's findings, the first SHOWN of each clause, then how many more; and no more
    than TENSORS_SHOWN tensors per clause, the others counted in one line (one cause, a config
    declaring another hidden size, can break every layer alike: the JSON lists them all)."""
    lines = []
    shown: Counter = Counter()
    hidden: Counter = Counter()
    tensors: dict = {}  # clause -> the tensors its listed findings name, in order
    beyond: dict = {}  # clause -> [findings, tensors] not listed for having too many tensors
    for problem in problems:
        clause, tensor = problem.finding.clause, problem.tensor
        named = tensors.setdefault(clause, [])
        if tensor not in named and len(named) >= TENSORS_SHOWN:
            more = beyond.setdefault(clause, [0, set()])
            more[0] += problem.count
            more[1].add(tensor)
            continue
        if tensor not in named:
            named.append(tensor)
        key = (tensor, clause)
        if problem.finding.kind == "count":
            hidden[key] += int(problem.finding.observed)
            continue
        shown[key] += 1
        if shown[key] <= SHOWN:
            lines.append("  " + problem.render())
        else:
            hidden[key] += 1
    for (tensor, clause), count in hidden.items():
        lines.append(f"  {tensor}: [{clause}] ... and {count} more")
    for clause, (count, others) in beyond.items():
        lines.append(f"  [{clause}] ... and {plural(count, 'more finding')} about "
                     f"{plural(len(others), 'other tensor')} (--json lists every one)")
    return lines


def write_report(report: CheckReport, path) -> None:
    """The JSON report, written to a temporary name and renamed when complete."""
    write_json(path, report.as_json(), argument="--json")
