"""Unit tests of the robustness tests and dataset bounds against independent references.

References: scipy.stats (binomtest, binom, beta), numerical integration, brute-force loops and
exact Poisson-binomial distributions computed by convolution.
"""

import json
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from orbitscope.robust.bounds import certified_robust_accuracy, tower_bound_population, tower_bound_test_set
from orbitscope.robust.sequential import (
    DEFAULT_TEST,
    NOT_ROBUST,
    ROBUST,
    UNDECIDED,
    BinomialTest,
    ConfidenceSequenceTest,
    SPRTTest,
    binom_test_two_sided,
    clopper_pearson,
    fixed_sample_size,
    list_tests,
    make_test,
    simulate,
)

# --------------------------------------------------------------------------- exact binomial pieces


@pytest.mark.parametrize("p", [0.01, 0.05, 0.3, 0.5])
def test_two_sided_pvalue_matches_scipy_binomtest(p):
    rng = np.random.default_rng(1)
    n = np.concatenate([np.arange(1, 41), rng.integers(41, 5000, 300)])
    k = np.concatenate([rng.integers(0, m + 1, 1) for m in n])
    # add the edges and the counts near the mean, where the far-side search is delicate
    extra_n = np.repeat([1, 7, 100, 256, 2560], 5)
    extra_k = np.concatenate([np.clip(np.round(m * p) + np.arange(-2, 3), 0, m) for m in (1, 7, 100, 256, 2560)])
    n = np.concatenate([n, extra_n, [10, 10, 3000]])
    k = np.concatenate([k, extra_k, [0, 10, 0]]).astype(np.int64)
    got = binom_test_two_sided(k, n, p)
    ref = np.array([stats.binomtest(int(a), int(b), p).pvalue for a, b in zip(k, n)])
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.parametrize("confidence", [0.9, 0.99])
def test_clopper_pearson_matches_scipy(alternative, confidence):
    for k, n in [(0, 1), (1, 1), (0, 20), (3, 20), (20, 20), (7, 6314), (0, 459), (120, 1000)]:
        lo, hi = clopper_pearson(k, n, confidence=confidence, alternative=alternative)
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
        if alternative != "two-sided":  # scipy's one-sided interval comes from binomtest(alternative=...)
            ref = stats.binomtest(k, n, alternative=alternative).proportion_ci(confidence_level=confidence, method="exact")
        assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def _brute_fixed_n(kappa, alpha, power, p_alt):
    n = 0
    while True:
        n += 1
        c = -1
        while stats.binom.cdf(c + 1, n, kappa) < alpha:
            c += 1
        if c >= 0 and stats.binom.cdf(c, n, p_alt) >= power:
            return n


@pytest.mark.parametrize(("kappa", "alpha", "power", "p_alt"), [(0.1, 0.05, 0.8, 0.05), (0.2, 0.01, 0.9, 0.05), (0.05, 0.05, 0.9, 0.0)])
def test_fixed_sample_size_matches_brute_force(kappa, alpha, power, p_alt):
    assert fixed_sample_size(kappa, alpha, power, p_alt) == _brute_fixed_n(kappa, alpha, power, p_alt)


def test_fixed_sample_size_at_the_papers_setting():
    n = fixed_sample_size(0.01, 0.01)  # power 0.99 at p = κ/2
    assert 6000 < n < 7000
    ns = np.arange(1, n + 1)
    # brute force over every smaller n: the largest rejecting count and the power, with scipy
    c = np.array([stats.binom.ppf(0.01, m, 0.01) for m in ns]).astype(int)
    c = c - (stats.binom.cdf(c, ns, 0.01) >= 0.01)
    power = np.where(c >= 0, stats.binom.cdf(c, ns, 0.005), 0.0)
    assert power[-1] >= 0.99 and (power[:-1] < 0.99).all()
    assert fixed_sample_size(0.01, 0.01, 0.99, 0.0) == math.ceil(math.log(100) / -math.log(0.99)) == 459


# --------------------------------------------------------------------------- the fixed test


def test_binomial_test_decisions_match_scipy():
    t = BinomialTest(kappa=0.05, alpha=0.05, budget=200)
    f = np.arange(0, 201)
    out = t.decide(f, np.full_like(f, 200))
    for k, o in zip(f, out):
        lower_p = stats.binomtest(int(k), 200, 0.05, alternative="less").pvalue
        upper_p = stats.binomtest(int(k), 200, 0.05, alternative="greater").pvalue
        assert o == (ROBUST if lower_p < 0.05 else NOT_ROBUST if upper_p < 0.05 else UNDECIDED)
    ub = t.upper_bound(f, 200)
    assert ((ub < 0.05) == (out == ROBUST)).all()
    assert (t.decide(f[:5], 199) == UNDECIDED).all()  # before the planned n: no decision
    assert t.next_look(0) == 200 and t.next_look(150) == 50 and t.next_look(200) == 0


def test_binomial_default_budget_is_the_fixed_sample_size():
    assert BinomialTest(kappa=0.01, alpha=0.01).budget == fixed_sample_size(0.01, 0.01, 0.99, 0.005)


# --------------------------------------------------------------------------- the published rule


def test_published_rule_matches_scalar_reimplementation():
    t = make_test("published", kappa=0.01, alpha=0.01, look=256)
    assert t.budget is None and t.next_look(10_000) == 256
    rng = np.random.default_rng(2)
    n = rng.integers(1, 60, 400) * 256
    f = rng.binomial(n, rng.choice([0.002, 0.01, 0.03], 400))
    got = t.decide(f, n)
    for k, m, o in zip(f, n, got):
        pv = stats.binomtest(int(k), int(m), 0.01, alternative="two-sided").pvalue
        ref = UNDECIDED if pv >= 0.02 else ROBUST if k / m < 0.01 else NOT_ROBUST
        assert o == ref


# --------------------------------------------------------------------------- SPRT


def test_sprt_matches_hand_written_loop():
    kappa, alpha, p1, beta = 0.05, 0.05, 0.02, 0.01
    t = SPRTTest(kappa=kappa, alpha=alpha, p1=p1, beta=beta, look=1, budget=10**6)
    up, down = math.log(p1 / kappa), math.log((1 - p1) / (1 - kappa))
    rng = np.random.default_rng(3)
    for p in [0.0, 0.02, 0.05, 0.1]:
        for _ in range(20):
            z = rng.random(3000) < p
            llr, ref = 0.0, None
            for i, zi in enumerate(z, start=1):  # Wald's rule, one sample at a time
                llr += up if zi else down
                if llr >= math.log(1 / alpha):
                    ref = (i, ROBUST)
                    break
                if llr <= math.log(beta):
                    ref = (i, NOT_ROBUST)
                    break
            f = np.cumsum(z)
            ns = np.arange(1, z.size + 1)
            out = t.decide(f, ns)
            first = int(np.flatnonzero(out != UNDECIDED)[0])
            assert ref == (first + 1, out[first])


def test_sprt_upper_bound_is_consistent_and_solves_the_boundary():
    t = SPRTTest(kappa=0.01, alpha=0.01)
    f, n = np.meshgrid(np.arange(0, 40), np.arange(100, 8000, 97))
    u = t.upper_bound(f, n)
    out = t.decide(f, n)
    assert ((u <= 0.01) == (out == ROBUST)).all()
    r = t.p1 / t.kappa
    for k, m, c in zip(f.ravel()[::37], n.ravel()[::37], u.ravel()[::37]):
        if c < 1:  # Λ_n(c) with alternative r·c equals 1/α at the bound (plain-Python log LR)
            llr = k * math.log(r) + (m - k) * (math.log(1 - r * c) - math.log(1 - c))
            assert llr == pytest.approx(math.log(100), rel=1e-9)
    assert t.upper_bound(5, 5) == 1.0 and t.upper_bound(0, 0) == 1.0


def test_sprt_zero_failures_certifies_at_the_closed_form_size():
    t = SPRTTest(kappa=0.01, alpha=0.01, look=1)
    need = math.ceil(math.log(100) / (math.log(1 - t.p1) - math.log(0.99)))
    assert t.decide(0, need - 1) == UNDECIDED and t.decide(0, need) == ROBUST


# --------------------------------------------------------------------------- confidence sequence


def test_mixture_martingale_matches_numerical_integration():
    t = ConfidenceSequenceTest(kappa=0.02, alpha=0.05, prior_a=0.7, prior_b=30.0)
    prior = stats.beta(0.7, 30.0)
    for k, n, c in [(0, 50, 0.02), (3, 200, 0.02), (10, 200, 0.01), (1, 400, 0.03)]:
        def integrand(q):
            return math.exp(k * math.log(q / c) + (n - k) * math.log((1 - q) / (1 - c))) * prior.pdf(q)

        ref, _ = integrate.quad(integrand, 0, 1, points=[k / n, c], limit=200)
        assert math.exp(t.log_mixture(k, n, c)) == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("n", [1, 17, 400, 3000])
def test_statistics_are_test_martingales(n):
    """E[M_n(c)] = 1 under p = c (exact sum over Bin(n, c)): what Ville's inequality needs.

    The SPRT's ratio is also a supermartingale for p > κ (E ≤ 1); the two-sided mixture is not
    (nor needs to be: its guarantee is about M_n at the true p).
    """
    f = np.arange(n + 1)
    cs = ConfidenceSequenceTest(kappa=0.02, alpha=0.05)
    sprt = SPRTTest(kappa=0.02, alpha=0.05)

    def mean(log_stat, p):  # E_p[exp(log_stat)] in log space
        return math.exp(special.logsumexp(stats.binom.logpmf(f, n, p) + log_stat))

    for c in (0.02, 0.3):
        assert mean(cs.log_mixture(f, n, c), c) == pytest.approx(1.0, rel=1e-8)
    assert mean(sprt.log_likelihood_ratio(f, n), 0.02) == pytest.approx(1.0, rel=1e-8)
    assert mean(sprt.log_likelihood_ratio(f, n), 0.03) <= 1.0 + 1e-12


def test_confidence_sequence_bounds_are_consistent():
    t = ConfidenceSequenceTest(kappa=0.01, alpha=0.01)
    f, n = np.meshgrid(np.arange(0, 120), np.arange(128, 6000, 211))
    lo, hi = t.lower_bound(f, n), t.upper_bound(f, n)
    mle = f / n
    assert (lo <= mle + 1e-12).all() and (mle <= hi + 1e-12).all()
    out = t.decide(f, n)
    # decisions agree with the interval's ends (away from floating ties at the boundary)
    clear = (np.abs(hi - 0.01) > 1e-9) & (np.abs(lo - 0.01) > 1e-9)
    assert ((out == ROBUST) == (hi < 0.01))[clear].all()
    assert ((out == NOT_ROBUST) == (lo > 0.01))[clear].all()
    inner = (hi < 1) & (f < n)
    np.testing.assert_allclose(t.log_mixture(f, n, hi)[inner], math.log(100), atol=1e-6)


# --------------------------------------------------------------------------- API


def test_registry_spec_roundtrip_and_default():
    assert set(list_tests()) == {"binomial", "published", "sprt", "confidence-sequence"}
    assert DEFAULT_TEST in list_tests()
    for name in list_tests():
        t = make_test(name, kappa=0.01, alpha=0.01)
        spec = json.loads(json.dumps(t.spec()))
        assert spec["name"] == name
        assert make_test(spec.pop("name"), **spec) == t


def test_next_look_respects_budget():
    t = make_test("sprt", kappa=0.05, alpha=0.05, budget=100, look=32)
    np.testing.assert_array_equal(t.next_look(np.array([0, 64, 90, 100, 120])), [32, 32, 10, 0, 0])
    np.testing.assert_array_equal(t.is_final(np.array([0, 1, 0]), np.array([99, 10, 100])), [False, True, True])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_test("sprt", kappa=0.0, alpha=0.01), "kappa"),
        (lambda: make_test("sprt", kappa=1.0, alpha=0.01), "kappa"),
        (lambda: make_test("sprt", kappa=0.01, alpha=1.5), "alpha"),
        (lambda: make_test("binomial", kappa=0.01, alpha=-0.1), "alpha"),
        (lambda: make_test("nope", kappa=0.01, alpha=0.01), "choose one of"),
        (lambda: make_test("sprt", kappa=0.01, alpha=0.01, prior_a=1.0), "options are"),
        (lambda: make_test("sprt", kappa=0.01, alpha=0.01, p1=0.02), "p1"),
        (lambda: make_test("sprt", kappa=0.01, alpha=0.01, budget=0), "budget"),
        (lambda: make_test("published", kappa=0.01, alpha=0.01, look=0), "look"),
        (lambda: make_test("confidence-sequence", kappa=0.01, alpha=0.01, prior_b=-1.0), "prior_b"),
        (lambda: make_test("sprt", kappa=0.01, alpha=0.01).decide(5, 3), "exceed"),
        (lambda: make_test("sprt", kappa=0.01, alpha=0.01).decide(-1, 3), "non-negative"),
        (lambda: fixed_sample_size(0.01, 0.01, 0.99, 0.01), "p_alt"),
        (lambda: simulate(make_test("published", kappa=0.01, alpha=0.01), 0.0, 3, np.random.default_rng()), "max_samples"),
        (lambda: certified_robust_accuracy(np.array([1, 1, 0]), np.array([True, False, True])), "misclassified"),
        (lambda: certified_robust_accuracy(np.array([2, 0])), "codes"),
        (lambda: tower_bound_test_set(np.array([3, 5]), 4), "exceed"),
        (lambda: tower_bound_population(np.array([0, 3])), "tower_bound_test_set"),
    ],
)
def test_errors_say_what_to_do(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_counts_must_be_integers():
    with pytest.raises(TypeError, match="integer"):
        make_test("sprt", kappa=0.01, alpha=0.01).decide(np.array([0.5]), np.array([3]))


def test_simulate_extremes_and_cap():
    rng = np.random.default_rng(4)
    t = make_test("sprt", kappa=0.01, alpha=0.01)
    out, n, f = simulate(t, 0.0, 50, rng)
    need = math.ceil(math.log(100) / (math.log(1 - t.p1) - math.log(0.99)))
    assert (out == ROBUST).all() and (f == 0).all() and (n == -(-need // t.look) * t.look).all()
    out, n, f = simulate(t, 1.0, 50, rng)
    assert (out == NOT_ROBUST).all() and (n == t.look).all()
    out, n, _ = simulate(make_test("published", kappa=0.01, alpha=0.01), 0.01, 200, rng, max_samples=1000)
    assert n.max() <= 1000 and ((out != UNDECIDED) | (n == 1000)).all()


# --------------------------------------------------------------------------- dataset bounds


def test_certified_robust_accuracy_counts_and_intervals():
    out = np.array([1] * 30 + [-1] * 15 + [0] * 5, dtype=np.int8)
    correct = np.array([True] * 40 + [False] * 10)
    acc = certified_robust_accuracy(out, correct, confidence=0.9, alpha=0.01)
    assert (acc.n_inputs, acc.n_certified, acc.n_not_robust, acc.n_undecided) == (50, 30, 15, 5)
    assert acc.certified.estimate == 0.6 and acc.among_correct.estimate == 0.75 and acc.clean_accuracy.estimate == 0.8
    ref = stats.binomtest(30, 40).proportion_ci(confidence_level=0.9, method="exact")
    assert (acc.among_correct.lower, acc.among_correct.upper) == pytest.approx((ref.low, ref.high), abs=1e-12)
    low = stats.binomtest(30, 50, alternative="greater").proportion_ci(confidence_level=0.9, method="exact").low
    assert acc.robust_lower == pytest.approx((low - 0.01) / 0.99, abs=1e-12)


def _poisson_binomial_pmf(p):
    pmf = np.array([1.0])
    for q in p:  # exact distribution of a sum of independent Bernoulli(q) by convolution
        pmf = np.convolve(pmf, [1 - q, q])
    return pmf


@pytest.mark.parametrize("alternative", ["less", "two-sided"])
def test_test_set_tower_bound_exact_coverage_under_heterogeneity(alternative):
    """Exact (not simulated) coverage of the pooled bound: Poisson-binomial pmf by convolution."""
    rng = np.random.default_rng(5)
    m, conf = 4, 0.9
    for p_inputs in [rng.beta(0.3, 30, 60), np.r_[np.zeros(55), np.full(5, 0.2)], np.full(60, 0.02), rng.beta(2, 5, 40)]:
        pmf = _poisson_binomial_pmf(np.repeat(p_inputs, m))
        counts = np.arange(pmf.size)
        lo, hi = clopper_pearson(counts, pmf.size - 1, confidence=conf, alternative=alternative)
        mean = p_inputs.mean()
        miss_hi = pmf[hi <= mean].sum()
        miss_lo = pmf[lo > mean].sum()
        tail = 1 - conf if alternative == "less" else (1 - conf) / 2
        assert miss_hi <= tail + 1e-12
        if alternative == "two-sided" and mean * pmf.size > 2:  # Hoeffding's range for the lower end
            assert miss_lo <= tail + 1e-12
        # and the function uses exactly this interval
        est = tower_bound_test_set(np.full(p_inputs.size, 1), m, confidence=conf, alternative=alternative)
        ref = clopper_pearson(p_inputs.size, p_inputs.size * m, confidence=conf, alternative=alternative)
        assert (est.lower, est.upper) == pytest.approx((float(ref[0]), float(ref[1])))
