"""The catalogue's records: a base (one of the kit's own outputs) and a mutation (what it
needs of a base, whether it breaks the checkpoint, how it edits a copy)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Base:
    name: str
    path: Path
    tags: frozenset  # "ct", "modelopt", "gguf", "w4a4", "sharded", "moe", "llama", "single"
    to: str  # the layout a benign mutation converts it to


@dataclass(frozen=True)
class Mutation:
    kind: str
    needs: frozenset  # tags a base must have (any of ``needs_any`` too)
    breaks: bool
    apply: Callable  # (directory or file, rng) -> description
    needs_any: frozenset = frozenset()
    #: A conversion may repair what the mutation broke (a fused set's global scales, which
    #: hscale convert reconciles where that is exact): then it may succeed, and its output
    #: must conform.
    repaired_by_convert: bool = False

    def applies(self, base: Base) -> bool:
        return self.needs <= base.tags and (not self.needs_any or bool(self.needs_any
                                                                      & base.tags))


MUTATIONS: dict[str, Mutation] = {}


def mutation(kind: str, needs=(), breaks: bool = True, needs_any=(),
             repaired_by_convert: bool = False):
    def register(function):
        MUTATIONS[kind] = Mutation(kind, frozenset(needs), breaks, function,
                                   frozenset(needs_any), repaired_by_convert)
        return function
    return register


SAFETENSORS = ("ct", "modelopt")
