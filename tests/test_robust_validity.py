"""Simulation tests of error control: oracles with known failure probability p.

Each check allows Monte-Carlo error: an observed rate must stay ≤ α + 3·sqrt(α(1 − α)/reps).
The many-rep checks run at α = κ = 0.05 (cheap); a smaller check runs at the paper's
α = κ = 0.01, and a longer one is marked slow.
"""

import math

import numpy as np
import pytest

from orbitscope.robust.bounds import tower_bound_population, tower_bound_test_set
from orbitscope.robust.sequential import DEFAULT_TEST, NOT_ROBUST, ROBUST, clopper_pearson, make_test, simulate

VALID = ["binomial", "sprt", "confidence-sequence"]


def _limit(rate_level: float, reps: int) -> float:
    return rate_level + 3 * math.sqrt(rate_level * (1 - rate_level) / reps)


@pytest.mark.parametrize("name", VALID)
@pytest.mark.parametrize("ratio", [1.0, 1.1])
def test_false_certification_at_and_above_kappa(name, ratio):
    kappa = alpha = 0.05
    reps = 20_000
    test = make_test(name, kappa=kappa, alpha=alpha)
    out, _, _ = simulate(test, ratio * kappa, reps, np.random.default_rng(100 + int(10 * ratio)))
    assert np.mean(out == ROBUST) <= _limit(alpha, reps)


@pytest.mark.parametrize("name", VALID)
def test_false_certification_at_the_papers_level(name):
    kappa = alpha = 0.01
    reps = 3_000
    out, _, _ = simulate(make_test(name, kappa=kappa, alpha=alpha), kappa, reps, np.random.default_rng(7))
    assert np.mean(out == ROBUST) <= _limit(alpha, reps)


def test_published_rule_inflates_false_certification():
    """Mu & Lim's re-testing after every round of 256: far above the nominal 1% at p = κ."""
    kappa = alpha = 0.01
    reps = 1_000
    test = make_test("published", kappa=kappa, alpha=alpha, look=256)
    out, n, _ = simulate(test, kappa, reps, np.random.default_rng(8), max_samples=16_384)
    rate = np.mean(out == ROBUST)
    assert rate > 2 * alpha + 3 * math.sqrt(2 * alpha * (1 - 2 * alpha) / reps)
    assert np.mean(out == 0) > 0.5  # and most inputs at p = κ are still undecided at the cap


@pytest.mark.parametrize("name", VALID)
def test_power_at_the_extremes(name):
    kappa = alpha = 0.01
    test = make_test(name, kappa=kappa, alpha=alpha)
    rng = np.random.default_rng(9)
    out, n, _ = simulate(test, 0.0, 200, rng)
    assert (out == ROBUST).all()
    if name != "binomial":  # sequential tests certify p = 0 within 2× the zero-failure minimum
        assert n.max() <= 2 * math.log(1 / alpha) / kappa
    out, _, _ = simulate(test, 10 * kappa, 500, rng)
    assert np.mean(out == NOT_ROBUST) >= 0.99


def test_default_test_power_at_half_kappa():
    """The default keeps at least the fixed test's power (0.99) at p = κ/2."""
    reps = 3_000
    out, _, _ = simulate(make_test(DEFAULT_TEST, kappa=0.01, alpha=0.01), 0.005, reps, np.random.default_rng(10))
    assert np.mean(out == ROBUST) >= 0.99 - 3 * math.sqrt(0.99 * 0.01 / reps)


def _ever_violated(bound, p, reps, horizon, look, rng):
    """Fraction of runs in which p ≥ bound(F_n, n) at some look n ≤ horizon. The bound is a
    function of (F_n, n), and at a look the runs share a few dozen distinct F_n: it is evaluated
    once per distinct count (the same values as run by run, a fraction of the bisections)."""
    f = np.zeros(reps, dtype=np.int64)
    violated = np.zeros(reps, dtype=bool)
    for n in range(look, horizon + 1, look):
        f += rng.binomial(look, p, reps)
        counts, run_count = np.unique(f, return_inverse=True)
        violated |= (p >= bound(counts, np.full(counts.size, n)))[run_count]
    return violated.mean()


@pytest.mark.parametrize("name", ["sprt", "confidence-sequence"])
@pytest.mark.parametrize("p", [0.02, 0.1])
def test_anytime_upper_bound_coverage(name, p):
    alpha, reps = 0.05, 4_000
    test = make_test(name, kappa=0.05, alpha=alpha)
    miss = _ever_violated(test.upper_bound, p, reps, horizon=2_000, look=16, rng=np.random.default_rng(11))
    assert miss <= _limit(alpha, reps)


def test_fixed_sample_bound_is_not_anytime_valid():
    """The control: the Clopper–Pearson bound re-checked at every look misses far more than α."""
    alpha, reps = 0.05, 4_000

    def cp_upper(f, n):
        return clopper_pearson(f, n, confidence=1 - alpha, alternative="less")[1]

    miss = _ever_violated(cp_upper, 0.05, reps, horizon=2_000, look=16, rng=np.random.default_rng(12))
    assert miss > 3 * alpha


def test_confidence_sequence_lower_bound_coverage():
    alpha, reps = 0.05, 4_000
    test = make_test("confidence-sequence", kappa=0.05, alpha=alpha)

    def lower_violated(f, n):  # p ≤ lower ⟺ "p ≥ bound" for the mirrored check below
        return np.where(0.05 <= test.lower_bound(f, n), 0.0, 1.0)

    miss = _ever_violated(lower_violated, 0.05, reps, horizon=2_000, look=16, rng=np.random.default_rng(13))
    assert miss <= _limit(alpha, reps)


def test_tower_bounds_coverage():
    """Test-set bound with m samples per input, population bound with one; naive pooling fails.

    The bound functions are Clopper–Pearson on the pooled counts (checked against the functions
    on the first repetition); coverage is then computed for all repetitions at once.
    """
    rng = np.random.default_rng(14)
    reps, n_inputs, m, conf = 4_000, 200, 16, 0.95
    tail = 1 - conf

    def draw_p(size):  # most inputs nearly robust, 10% fragile; E p = 0.1·0.4 + 0.9·0.005
        return np.where(rng.random(size) < 0.1, rng.uniform(0.2, 0.6, size), rng.uniform(0, 0.01, size))

    def upper(count, total):
        return clopper_pearson(count, total, confidence=conf, alternative="less")[1]

    # fixed test set, heterogeneous p_i: target is the mean over these inputs
    p_set = draw_p(n_inputs)
    counts = rng.binomial(m, p_set, size=(reps, n_inputs))
    assert tower_bound_test_set(counts[0], m, confidence=conf).upper == upper(counts[0].sum(), n_inputs * m)
    assert np.mean(upper(counts.sum(1), n_inputs * m) <= p_set.mean()) <= _limit(tail, reps)
    # population: fresh inputs every repetition; target E_x p(x)
    pop_mean = 0.1 * 0.4 + 0.9 * 0.005
    p = draw_p((reps, n_inputs))
    first = rng.random((reps, n_inputs)) < p
    assert tower_bound_population(first[0], confidence=conf).upper == upper(first[0].sum(), n_inputs)
    assert np.mean(upper(first.sum(1), n_inputs) <= pop_mean) <= _limit(tail, reps)
    pooled = rng.binomial(m, p).sum(1)  # m samples per input pooled as if binomial: over-dispersed
    assert np.mean(upper(pooled, n_inputs * m) <= pop_mean) > 3 * tail  # why the population bound uses m = 1


@pytest.mark.slow
@pytest.mark.parametrize("name", VALID)
def test_false_certification_at_the_papers_level_many_reps(name):
    kappa = alpha = 0.01
    reps = 10_000
    out, _, _ = simulate(make_test(name, kappa=kappa, alpha=alpha), 1.1 * kappa, reps, np.random.default_rng(15))
    assert np.mean(out == ROBUST) <= _limit(alpha, reps)
