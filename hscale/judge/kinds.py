"""The kinds of NVFP4 implementation the suite certifies, in ONE table: the unit of extension.

A backend (docs/backends.md) declares which kinds it implements with ``kinds``, a frozenset
drawn from :data:`KINDS` (absent: ``{"weight"}``, so every weight quantizer written before
kinds existed keeps working unchanged). Each row owns everything the kit does with its kind:

- ``clause_prefixes``: the clauses of docs/spec.md it judges (by ID prefix). Every clause
  belongs to at most one kind; a suite test of a kind is marked ``@pytest.mark.clause(...)``
  with clauses of that kind only, and is deselected, not skipped, on a backend that does not
  declare the kind (``conformance/plugin.py``), so a run's skip count says only what a
  declared kind could not judge;
- ``methods``: the protocol methods a backend of the kind must provide;
- ``declarations``: what it must declare (a recipe, an accumulation model), each with the
  values it may take; the certificate records them per kind;
- ``domain``: how its declared domain is built from the backend and its checked declarations,
  once, when the backend is loaded (:func:`declared_kinds`): a bad declaration stops the run
  naming it, never a test;
- ``checker`` and ``fixture``: the suite's checker of the kind and the fixture name its tests
  take it by; ``tally``: the per-backend counts its checker keeps, whose ``section()`` is the
  kind's own part of the certificate;
- ``family``: the module of its golden-vector sets (``hscale.vectors``, each with the members
  ``hscale.vectors.families`` lists), which ``hscale vectors generate``, ``verify``, ``check``,
  ``expect`` and ``explain`` call alike;
- ``description``: one line, for the docs, the certificate and ``hscale conform``.

The checker, tally and family live in layers above the judge (the suite, the vectors), so the
row names them (``"module:attribute"``) and :func:`resolve` imports them where they are used;
``tests/judge/test_kinds.py`` checks every name resolves. Adding a kind is one row here, one
module of checks, its tests (marked with its clauses) and its spec section.
The clauses of no kind are listed here too (:data:`JUDGED_ELSEWHERE`), with where they are
judged instead: the checkpoint layouts by ``hscale check``, the calibration of a W4A4 activation
scale on a calibration pass. So for every clause this module says who judges it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hscale.backends import CAPABILITIES
from hscale.reference.activations import ACTIVATION_RECIPES, GLOBAL_SCALE_MODES
from hscale.reference.hadamard import PROFILES as HADAMARD_PROFILES
from hscale.reference.hadamard import TE_SIGN_MASK
from hscale.reference.random_bits import ROUTINGS
from hscale.reference.rht_quantize import AXES as RHT_AXES
from hscale.reference.rht_quantize import PADDINGS as RHT_PADDINGS
from hscale.reference.stochastic_quantize import SCALINGS

from .activation_domain import ACTIVATION_DTYPE_NAMES, ACTIVATION_LAYOUTS, SCALE_CONVENTIONS

from .gemm import declaration_json

#: The gemm kind's declarations (read and checked by ``hscale.judge.gemm``).
GEMM_DECLARATIONS = (
    ("gemm_model", "its accumulation model: a preset (fp32, fp16, ...) or a mapping of the "
                   "accumulator, rounding and global-scale placement (NVFP4-GEMM-4, -5)"),
    ("gemm_out_dtypes", "the output dtypes it produces (default float32; NVFP4-GEMM-6)"),
    ("gemm_activations", "its first operand: nvfp4 (default), or the activations of a "
                         "weight-only kernel: float32, bfloat16, float16, q8_0 (NVFP4-GEMM-8)"),
    ("gemm_scale_layout", "the layout it reads scale bytes in: row-major (default) or "
                          "swizzled-128x4 (NVFP4-GEMM-2)"),
    ("gemm_shape_multiple", "(M, N, K) its shapes must be multiples of (default (1, 1, 16))"),
)

#: A backend that declares no kinds is a weight quantizer.
DEFAULT_KINDS = frozenset({"weight"})
#: The clauses no kind judges (no quantize call of any kind shows them), and where they are
#: judged instead.
JUDGED_ELSEWHERE = {
    **{f"NVFP4-CKPT-{k}": "a checkpoint layout, judged on checkpoints by hscale check"
       for k in range(1, 5)},
    "NVFP4-CKPT-5": "the safetensors container and its shard index, judged on checkpoints by "
                    "hscale check (and hscale convert before it writes)",
    "NVFP4-CKPT-6": "a checkpoint against its own config, judged on checkpoints by hscale check",
    "NVFP4-GGUF-1": "a checkpoint layout (GGUF), judged on checkpoints by hscale check",
    "NVFP4-GGUF-2": "the GGUF container, judged on GGUF files by hscale check",
    "HSCALE-CAL-2": "the calibration of a W4A4 activation scale, judged on a calibration pass "
                    "(hscale quantize --scheme w4a4), not on a quantize call",
    "HSCALE-CAL-3": "h read from a llama.cpp importance matrix, judged where hscale quantize "
                    "--imatrix reads one, not on a quantize call",
    "NVFP4-ACT-4": "the decoded activation: it follows from the scale bytes and codes judged "
                   "(NVFP4-DEQ-1's rule); no kernel returns it",
}


#: The default of a declaration that has none: the backend must declare it.
REQUIRED = None


@dataclass(frozen=True)
class Declaration:
    """An attribute a backend of a kind sets: ``attribute`` its name, ``meaning`` one line,
    ``choices`` the values it may take (a callable giving them, so that a table row can name
    values defined elsewhere), ``many``: a set of them (``capabilities``) rather than one,
    ``default``: the value of a backend that does not set it (None: it must)."""

    attribute: str
    meaning: str
    choices: Callable[[], tuple] | None = None
    many: bool = False
    default: object = REQUIRED
    #: reads and checks the declaration itself, defaults included: ``reader(backend, label)``
    #: returns the value the certificate records, or raises a ValueError naming it
    reader: Callable | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def read(self, backend, label: str):
        """The declared value, checked: a ValueError names the attribute, what it holds and
        what it may hold."""
        if self.reader is not None:
            return self.reader(backend, label)
        if not hasattr(backend, self.attribute):
            if not self.required:
                return sorted(self.default) if self.many else self.default
            raise ValueError(f"{label}: declares no {self.attribute!r} ({self.meaning})"
                             + self._allowed())
        value = getattr(backend, self.attribute)
        allowed = None if self.choices is None else tuple(self.choices())
        if self.many:
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise ValueError(f"{label}: {self.attribute} = {value!r}: a set of names"
                                 + self._allowed())
            unknown = sorted(str(v) for v in value if allowed is not None and v not in allowed)
            if unknown:
                raise ValueError(f"{label}: {self.attribute}: unknown {unknown}" + self._allowed())
            if not value:
                raise ValueError(f"{label}: {self.attribute}: an empty set" + self._allowed())
            return sorted(str(v) for v in value)
        if allowed is not None and value not in allowed:
            raise ValueError(f"{label}: {self.attribute} = {value!r}" + self._allowed())
        return value

    def _allowed(self) -> str:
        return "" if self.choices is None else f"; one of {', '.join(self.choices())}"


def _gemm_reader(attribute: str) -> Callable:
    return lambda backend, label: declaration_json(backend, attribute, label)


def resolve(name: str):
    """The object a row names, ``"package.module:attribute"`` (or a module, without ``:``)."""
    import importlib
    module, _, attribute = name.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


def _weight_domain(backend, declarations: dict, label: str):
    from .domain import Domain
    return Domain.of(backend, label)


def _activation_domain(backend, declarations: dict, label: str):
    from .activation_domain import ActivationDomain
    return ActivationDomain.of(declarations)


def _stochastic_domain(backend, declarations: dict, label: str):
    from .stochastic import StochasticDomain
    return StochasticDomain.of(declarations)


def _rht_domain(backend, declarations: dict, label: str):
    from .rht import RhtDomain
    return RhtDomain.of(declarations)


def _rht_mask_reader(backend, label: str) -> int:
    from .rht import read_rht_mask
    return read_rht_mask(backend, label)


def _gemm_domain(backend, declarations: dict, label: str):
    from .gemm import GemmDomain
    return GemmDomain.of(backend, label)


#: The tally every kind keeps unless its row names its own.
TALLY = "hscale.conformance.checker:Tally"


@dataclass(frozen=True)
class Kind:
    name: str
    description: str
    clause_prefixes: tuple[str, ...]
    methods: tuple[str, ...]
    declarations: tuple[Declaration, ...] = field(default=())
    #: ``domain(backend, declared values, label)``: its declared domain, built once, checked
    domain: Callable | None = None
    #: the suite's checker of the kind (``module:Class``) and the fixture its tests take
    checker: str = ""
    fixture: str = ""
    #: the per-backend counts of its checker (``module:Class``); ``section()`` its certificate part
    tally: str = TALLY
    #: the module of its golden-vector sets (``hscale.vectors.families``)
    family: str = ""

    def judges(self, clause: str) -> bool:
        return clause.startswith(self.clause_prefixes) and clause not in JUDGED_ELSEWHERE

    def clauses(self) -> list[str]:
        """The clause IDs of docs/spec.md this kind judges, in spec order."""
        from .clauses import clause_ids
        return [c for c in clause_ids() if self.judges(c)]

    def build_domain(self, backend, declarations: dict, label: str):
        """The kind's declared domain (None: the kind has none), or a ValueError naming what
        is wrong with it."""
        return None if self.domain is None else self.domain(backend, declarations, label)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("weight",
         "an offline weight quantizer: quantize(weight, h, ...) returns E2M1 codes, E4M3 scale "
         "bytes and the fp32 global scale (docs/spec.md sections 1-6)",
         ("NVFP4-E2M1-", "NVFP4-E4M3-", "NVFP4-GS-", "NVFP4-INIT-", "NVFP4-ZERO-",
          "NVFP4-PACK-", "NVFP4-DEQ-", "NVFP4-IN-", "HSCALE-"),
         ("quantize",),
         (Declaration("capabilities", "the methods and inits it implements",
                      lambda: tuple(sorted(CAPABILITIES)), many=True),),
         domain=_weight_domain, checker="hscale.conformance.checker:Checker",
         fixture="checker", family="hscale.vectors.weight_sets"),
    Kind("activation",
         "a run-time activation quantizer: quantize_activations(x, global_scale) returns the "
         "codes and scale bytes an engine feeds its FP4 matmul (docs/spec.md section 8)",
         ("NVFP4-ACT-",),
         ("quantize_activations",),
         (Declaration("activation_recipe", "the field's recipe it follows (NVFP4-ACT-5)",
                      lambda: ACTIVATION_RECIPES),
          Declaration("activation_global_scale", "how it gets the global scale: given (static) "
                      "or computed from the tensor (dynamic), NVFP4-ACT-1",
                      lambda: GLOBAL_SCALE_MODES, many=True, default=("static",)),
          Declaration("activation_scale_convention", "what the global scale it takes and "
                      "returns is: the quantization multiplier g (divisor) or a = 1/g "
                      "(multiplier), NVFP4-ACT-1", lambda: SCALE_CONVENTIONS, default="divisor"),
          Declaration("activation_scale_layout", "how it lays out the scale bytes, NVFP4-ACT-10",
                      lambda: ACTIVATION_LAYOUTS, default="row-major"),
          Declaration("activation_dtypes", "the input dtypes it takes, NVFP4-ACT-11",
                      lambda: ACTIVATION_DTYPE_NAMES, many=True,
                      default=ACTIVATION_DTYPE_NAMES)),
         domain=_activation_domain,
         checker="hscale.conformance.activation_checker:ActivationChecker",
         fixture="activation_checker", family="hscale.vectors.activation_sets"),
    Kind("gemm",
         "a block-scaled GEMM: gemm(a, b, out_dtype=...) returns a @ b^T of two NVFP4 tensors, "
         "or of activations and an NVFP4 weight, under the accumulation model it declares "
         "(docs/spec.md section 10)",
         ("NVFP4-GEMM-",),
         ("gemm",),
         tuple(Declaration(attribute, meaning, reader=_gemm_reader(attribute))
               for attribute, meaning in GEMM_DECLARATIONS),
         domain=_gemm_domain, checker="hscale.conformance.gemm_checker:GemmChecker",
         fixture="gemm_checker", tally="hscale.conformance.checker:GemmTally",
         family="hscale.vectors.gemm_files"),
    Kind("stochastic",
         "a stochastic-rounding quantizer (training gradients): quantize_stochastic(x, "
         "global_scale, random_bits=, seed=) returns E2M1 codes rounded with random bits, and "
         "the scale bytes of the recipe it scales by (docs/spec.md section 11)",
         ("NVFP4-SR-",),
         ("quantize_stochastic",),
         (Declaration("sr_scaling", "what it rounds: its fp32 inputs as they are (none) or "
                      "an activation recipe's products (NVFP4-SR-1)",
                      lambda: SCALINGS, default="none"),
          Declaration("sr_random_bits", "whether it takes the random bits (given: judged bit "
                      "for bit) or a seed only (hidden: the acceptance test, NVFP4-SR-6)",
                      lambda: ("given", "hidden"), default="given"),
          Declaration("sr_routing", "which byte of a random word each element takes "
                      "(NVFP4-SR-4)", lambda: ROUTINGS, default="straight")),
         domain=_stochastic_domain,
         checker="hscale.conformance.stochastic_checker:StochasticChecker",
         fixture="stochastic_checker", tally="hscale.conformance.stochastic_checker:SRTally",
         family="hscale.vectors.stochastic_sets"),
    Kind("rht",
         "a quantizer after the 16 x 16 random Hadamard transform (training's wgrad "
         "operands): quantize_rht(x) returns the codes, scale bytes and global scale of the "
         "transformed tensor (docs/spec.md section 12)",
         ("NVFP4-RHT-",),
         ("quantize_rht",),
         (Declaration("rht_sign_mask", "its sign vector as a 16-bit mask, bit i set where "
                      "s_i = -1 (TransformerEngine's 0xD7E8; 0 for a plain transform; "
                      "NVFP4-RHT-1)", default=TE_SIGN_MASK, reader=_rht_mask_reader),
          Declaration("rht_profile", "how the transformed values are rounded: exact (to "
                      "bfloat16, then the exact recipe) or fast-math (fp32, the fast-math "
                      "recipe), NVFP4-RHT-2", lambda: tuple(HADAMARD_PROFILES), default="exact"),
          Declaration("rht_axis", "which axis it transforms: columnwise (the transposed copy, "
                      "16 consecutive tokens) or rowwise (NVFP4-RHT-1)", lambda: RHT_AXES,
                      default="columnwise"),
          Declaration("rht_padding", "what it does with a transformed axis that is not a "
                      "multiple of 16: refuse (raise, as TransformerEngine does) or zeros (pad "
                      "with zero tokens to the next multiple of 16), NVFP4-RHT-1",
                      lambda: RHT_PADDINGS, default="refuse")),
         domain=_rht_domain, checker="hscale.conformance.rht_checker:RhtChecker",
         fixture="rht_checker", family="hscale.vectors.rht_sets"),
    Kind("tile",
         "a weight quantizer with one scale per 16 x 16 tile (training's weights): "
         "quantize_2d(w) returns codes, per-group scale bytes and the global scale, and the "
         "transpose of W gives the transposed result (docs/spec.md section 13)",
         ("NVFP4-2D-",),
         ("quantize_2d",),
         checker="hscale.conformance.tile_checker:TileChecker", fixture="tile_checker",
         family="hscale.vectors.tile_sets"),
)}


@dataclass(frozen=True)
class Declared:
    """What a backend declared, checked: its kinds, per kind the value of each of the kind's
    declarations (``{"activation": {"activation_recipe": "fast-math"}}``) and its declared
    domain, built once (``domains``: kind -> the row's domain, None for a kind without one)."""

    kinds: frozenset
    declarations: dict
    domains: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {kind: dict(self.declarations[kind]) for kind in sorted(self.kinds)}

    def describe(self, kind: str) -> str:
        """``activation_recipe fast-math`` (what the kind's declarations hold)."""
        return "; ".join(f"{attribute} {shown(value)}"
                         for attribute, value in self.declarations[kind].items())

    def ordered(self) -> list[str]:
        """The declared kinds in the table's order."""
        return [k for k in KINDS if k in self.kinds]


def shown(value) -> str:
    """A declared value in one line: a list joined, a mapping by its description."""
    if isinstance(value, dict):
        return str(value.get("description", value))
    return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def declared_kinds(backend, label: str = "backend") -> Declared:
    """The kinds ``backend`` declares and, for each, its declarations and its domain, checked
    against the table: a ValueError names the kind, the method or attribute missing, or the
    value that is not allowed."""
    kinds = getattr(backend, "kinds", None)
    if kinds is None:
        kinds = DEFAULT_KINDS
    if isinstance(kinds, str) or not hasattr(kinds, "__iter__") or not kinds:
        raise ValueError(f"{label}: kinds = {kinds!r}: a non-empty set drawn from "
                         f"{', '.join(KINDS)}")
    unknown = sorted(str(k) for k in kinds if k not in KINDS)
    if unknown:
        raise ValueError(f"{label}: kinds: unknown {unknown}; the suite certifies "
                         f"{', '.join(KINDS)}")
    declarations = {}
    for name in (k for k in KINDS if k in kinds):
        kind = KINDS[name]
        missing = [m for m in kind.methods if not callable(getattr(backend, m, None))]
        if missing:
            raise ValueError(f"{label}: declares the kind {name!r} but has no "
                             f"{', '.join(missing)}() (docs/backends.md, kind {name!r})")
        declarations[name] = {d.attribute: d.read(backend, f"{label} (kind {name!r})")
                              for d in kind.declarations}
    domains = {name: kind_row.build_domain(backend, declarations[name], label)
               for name, kind_row in KINDS.items() if name in declarations}
    return Declared(frozenset(kinds), declarations, domains)


def kind_of_clause(clause: str) -> str | None:
    """The kind that judges ``clause`` (None: a clause of no kind)."""
    for kind in KINDS.values():
        if kind.judges(clause):
            return kind.name
    return None


def kind_of_test(clauses) -> str | None:
    """The kind of a suite test from its clause markers: the one kind they all belong to (None
    for a test of no kind's clauses). A ValueError when they span kinds."""
    found = {kind_of_clause(c) for c in clauses} - {None}
    if len(found) > 1:
        raise ValueError(f"a test's clauses {list(clauses)} belong to the kinds "
                         f"{sorted(found)}: a suite test judges one kind")
    return next(iter(found), None)
