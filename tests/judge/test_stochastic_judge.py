"""The stochastic kind's judge (hscale.judge.stochastic) on independent kernels
(tests/helpers/stochastic_kernels.py, importing nothing of the kit): a carry-exact kernel
conforms under the routing it implements and is refused under the others naming NVFP4-SR-4;
each fault of the issue is refused naming its clause; the acceptance test of a hidden stream
admits a correct kernel and refuses every named fault over many seeds; the model of
TransformerEngine's software fallback is refused, its false carries counted."""

from __future__ import annotations

import numpy as np
import pytest

from hscale.judge.stochastic import (ACCEPTANCE_COPIES, ACCEPTANCE_LEVEL, ACCEPTANCE_VALUES,
                                     StochasticCase, StochasticDomain, acceptance_interval,
                                     acceptance_values, diagnose_stochastic, every_byte_words,
                                     exhaustion_findings, judge_hidden, observe_stochastic)
from hscale.judge.stochastic_builders import (cell_values, false_carry_values, level0_cases,
                                              random_words_case)
from hscale.reference.random_bits import PER_WORD, ROUTINGS

from helpers.stochastic_kernels import FAULTS, CarryExact, Hidden, te_fallback_model


def _clauses(kernel, routing: str = "straight") -> set[str]:
    """The clauses the judge cites for ``kernel`` over the level-0 constructions and a random
    tensor, judged as a kernel of ``routing``."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 256)) * 3).astype(np.float32)
    cases = level0_cases() + [StochasticCase(
        x, rng.integers(0, 2 ** 32, (8, 64), dtype=np.uint32), None, "random")]
    cited = set()
    for case in cases:
        observed, unreadable = observe_stochastic(
            kernel.quantize_stochastic(case.x, random_bits=case.words), case.shape, "none")
        assert not unreadable
        diagnosis = diagnose_stochastic(case, observed, StochasticDomain("none", "given", routing))
        cited |= {f.clause for f in diagnosis.findings}
    return cited


def _exhaustion_clauses(kernel) -> set[str]:
    values = np.repeat(np.asarray(cell_values() + false_carry_values()[::4], np.float32),
                       PER_WORD)[None]
    codes = [kernel.quantize_stochastic(values, random_bits=w)["codes"]
             for w in every_byte_words(values.shape)]
    return {f.clause for f in exhaustion_findings(values, codes)}


@pytest.mark.clause("NVFP4-SR-4")
@pytest.mark.parametrize("implemented", ROUTINGS)
@pytest.mark.parametrize("declared", ROUTINGS)
def test_a_carry_exact_kernel_conforms_only_under_its_routing(implemented, declared):
    cited = _clauses(CarryExact(implemented), declared)
    assert cited == (set() if implemented == declared else {"NVFP4-SR-4"}), cited


#: Each fault and the clause its refusal names.
FAULT_CLAUSES = {"nearest": "NVFP4-SR-2", "fmaf-nearest": "NVFP4-SR-2",
                 "dropped-carry": "NVFP4-SR-2", "nan-not-saturated": "NVFP4-SR-3",
                 "zero-sign-lost": "NVFP4-SR-3", "biased-byte": "NVFP4-SR-2",
                 "always-down": "NVFP4-SR-2", "zero": "NVFP4-SR-2"}


@pytest.mark.clause("NVFP4-SR-2", "NVFP4-SR-3")
@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_refused_naming_its_clause(fault):
    assert FAULT_CLAUSES[fault] in _clauses(CarryExact(fault=fault))


@pytest.mark.clause("NVFP4-SR-5")
@pytest.mark.parametrize("fault", [None, "nearest", "fmaf-nearest", "dropped-carry",
                                   "biased-byte", "always-down"])
@pytest.mark.parametrize("routing", ROUTINGS)
def test_exhaustion_is_model_free(fault, routing):
    """Round-ups over the words b * 0x01010101 equal D_top whatever the routing; every biased
    fault is refused (a wrong byte order is not a bias: NVFP4-SR-4 catches it bit for bit)."""
    cited = _exhaustion_clauses(CarryExact(routing, fault=fault))
    assert cited == (set() if fault is None else {"NVFP4-SR-5"}), (fault, cited)


def _acceptance(kernel, seed: int) -> list:
    values = acceptance_values()
    first = kernel.quantize_stochastic(values, seed=seed)["codes"]
    second = kernel.quantize_stochastic(values, seed=seed + 1_000_003)["codes"]
    return judge_hidden(first, second)


HIDDEN_FAULTS = ("nearest", "always-down", "zero", "biased-byte", "dropped-carry", "fmaf-nearest")


def _seed_study(seeds: range) -> dict:
    refusals = {None: 0, **{fault: 0 for fault in HIDDEN_FAULTS}}
    for fault in refusals:
        kernel = Hidden(fault)
        for seed in seeds:
            findings = _acceptance(kernel, seed)
            assert all(f.clause == "NVFP4-SR-6" for f in findings)
            refusals[fault] += bool(findings)
    return refusals


@pytest.mark.clause("NVFP4-SR-6")
def test_the_acceptance_test_over_10_seeds():
    """A correct hidden kernel is admitted on every seed, each named fault refused on every
    seed (the cheap default; 1,000 seeds behind ``extended``)."""
    refusals = _seed_study(range(10))
    assert refusals == {None: 0, **{fault: 10 for fault in HIDDEN_FAULTS}}, refusals


@pytest.mark.extended
@pytest.mark.clause("NVFP4-SR-6")
def test_the_acceptance_test_over_1000_seeds():
    refusals = _seed_study(range(1000))
    assert refusals == {None: 0, **{fault: 1000 for fault in HIDDEN_FAULTS}}, refusals


@pytest.mark.clause("NVFP4-SR-6")
def test_the_acceptance_tests_false_refusal_rate_is_as_stated():
    """Each interval excludes at most ACCEPTANCE_LEVEL of its binomial's mass (summed in 60
    digits), so
    a conforming kernel is refused with probability at most 7e-7 per call (docs/spec.md)."""
    from decimal import Decimal, localcontext
    n = ACCEPTANCE_COPIES
    tops = {0.25: 128, 1.25: 128, 5.0: 128, -1.25: 128, 0.5 + 2.0 ** -9: 1,
            2.0 - 2.0 ** -23: 255, 1.875: 192, 2.0 ** -9 - 2.0 ** -33: 0}
    assert set(tops) == set(ACCEPTANCE_VALUES)
    total = Decimal(0)
    with localcontext() as context:
        context.prec = 60  # the pmf by its recurrence, in 60 digits (not the judge's lgamma)
        for top in tops.values():
            low, high = acceptance_interval(n, top)
            if top == 0:
                assert (low, high) == (0, 0)
                continue
            p, q = Decimal(top) / 256, Decimal(256 - top) / 256
            pmf, outside = q ** n, Decimal(0)
            for k in range(n + 1):
                if k < low or k > high:
                    outside += pmf
                pmf = pmf * (n - k) / (k + 1) * p / q
            assert outside <= Decimal(ACCEPTANCE_LEVEL)
            assert outside > Decimal(ACCEPTANCE_LEVEL) / 100  # the interval is not loose
            total += outside
    assert total <= Decimal("7e-7")


@pytest.mark.clause("NVFP4-SR-2")
def test_the_model_of_transformer_engines_fallback_carries_falsely():
    """A MODEL of TE's sm_120 fallback (fmaf to nearest, then floor), written from its source's
    description: refused on the false-carry inputs (every one of the 128 values just below
    k/512 with the byte 256 - k), and its false carries within 512 ulps below every boundary
    k/512 on (0, 0.25] counted by enumeration: 576."""
    kernel = te_fallback_model()
    assert _clauses(kernel) == {"NVFP4-SR-2"}
    exact = CarryExact()
    false_carries = 0
    for k in range(1, 129):
        below = [np.float32(k / 512)]
        for _ in range(512):
            below.append(np.nextafter(below[-1], np.float32(0)))
        x = np.repeat(np.asarray(below[1:], np.float32), PER_WORD)[None]
        words = np.full((1, 512), (256 - k) * 0x01010101, np.uint32)
        model = kernel.quantize_stochastic(x, random_bits=words)["codes"]
        rule = exact.quantize_stochastic(x, random_bits=words)["codes"]
        assert (model >= rule).all()  # only ever up, never down
        false_carries += int((model != rule).sum()) // PER_WORD
    assert false_carries == 576


@pytest.mark.clause("NVFP4-SR-4")
def test_the_random_words_case_tells_the_routings_apart():
    case = random_words_case()
    codes = {r: case.expected_for("none", r).codes for r in ROUTINGS}
    assert not np.array_equal(codes["straight"], codes["ptx-e2m1x4"])
    assert not np.array_equal(codes["straight"], codes["sm103a"])
    assert not np.array_equal(codes["ptx-e2m1x4"], codes["sm103a"])
