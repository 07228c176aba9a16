"""Simulation tests of the whole-orbit statistics' validity (orbitscope.stats).

Synthetic results over samples × orbit elements with correlated elements
(:func:`orbitscope.stats.simulate.correlated_orbit`: a latent AR(1) process along the orbit,
ρ ∈ {0, 0.9}), α = 0.05. Every rate is a Monte-Carlo estimate over ``reps`` repetitions with
standard error √(r(1 − r)/reps) at the target rate r; each check allows 3 such standard errors
(:func:`_at_most`, :func:`_at_least`), so a correct method passes with probability > 0.998 per
check, and a wrong one (a pointwise band used as simultaneous, no correction across elements)
fails by far. All seeds are fixed, so the file is deterministic. The same simulations with more
repetitions: ``benchmarks/stats_validity.py``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import stats

from orbitscope.results.intervals import t_interval, wilson_interval
from orbitscope.stats import bands, gate, invariance, paired, planning
from orbitscope.stats.simulate import correlated_orbit
from orbitscope.stats.values import OrbitValues

ALPHA = 0.05
K, N = 36, 200
RESAMPLES = 500  # bootstrap resamples inside simulations (the quantile's own error is part of what is tested)
PERMUTATIONS = 200


def _se(rate: float, reps: int) -> float:
    return math.sqrt(rate * (1 - rate) / reps)


def _at_most(observed: float, target: float, reps: int) -> bool:
    return observed <= target + 3 * _se(target, reps)


def _at_least(observed: float, target: float, reps: int) -> bool:
    return observed >= target - 3 * _se(target, reps)


def _ov(values: np.ndarray, binary: bool, *, lower_is_better: bool = False, identity: int | None = 0) -> OrbitValues:
    k = values.shape[1]
    return OrbitValues(values=values, metric="m", label="m", binary=binary, lower_is_better=lower_is_better,
                       dims=("angle",), shape=(k,), coords={"angle": 10.0 * np.arange(k)}, identity=identity,
                       samples=np.arange(values.shape[0]))


def _latent(rng: np.random.Generator, n: int, k: int, rho: float) -> np.ndarray:
    """(n, k) standard normal latents with AR(1) correlation ρ^|j − l| along the orbit."""
    return correlated_orbit(n, np.zeros(k), rho=rho, binary=False, rng=rng)


def _pair(rng: np.random.Generator, means_a: np.ndarray, means_b: np.ndarray, *, rho: float, binary: bool,
          within: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Two models' values on the same samples: latents share a per-sample AR(1) component
    (correlation ``within`` between A and B at an element) and each has its own AR(1) part,
    so A and B are correlated within a sample and each is correlated across elements. With
    equal means, (A, B) is exchangeable: H0 of the paired tests."""
    k = means_a.size
    shared = _latent(rng, N, k, rho)
    za = math.sqrt(within) * shared + math.sqrt(1 - within) * _latent(rng, N, k, rho)
    zb = math.sqrt(within) * shared + math.sqrt(1 - within) * _latent(rng, N, k, rho)
    if binary:
        return (za < stats.norm.ppf(means_a)).astype(float), (zb < stats.norm.ppf(means_b)).astype(float)
    return means_a + za, means_b + zb


# ----------------------------------------------------------- (a) simultaneous coverage

BINARY_MEANS = np.linspace(0.5, 0.99, K)  # includes elements near 1 (0.99: ~2 failures in 200)
REAL_MEANS = np.linspace(0.0, 1.0, K)


@pytest.mark.parametrize("rho", [0.0, 0.9])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "real"])
def test_sup_t_band_covers_every_element_at_once(binary, rho):
    """Simultaneous coverage ≥ 0.95 (150 repetitions: s.e. 0.018, pass ≥ 0.897); on the same
    data the pointwise band (Wilson / Student-t at 95 %, what ``aggregate`` draws) covers all
    36 elements at once far less often (0.16–0.18 at ρ = 0, 0.3–0.55 at ρ = 0.9)."""
    reps = 150
    means = BINARY_MEANS if binary else REAL_MEANS
    rng = np.random.default_rng(100 + 10 * binary + int(10 * rho))
    sim = point = 0
    for r in range(reps):
        x = correlated_orbit(N, means, rho=rho, binary=binary, rng=rng)
        band = bands.sup_t_band(x, binary=binary, level=1 - ALPHA, resamples=RESAMPLES, seed=r)
        sim += bool(np.all((band.lower <= means) & (means <= band.upper)))
        if binary:
            lo, hi = wilson_interval(x.sum(0), np.full(K, N), 1 - ALPHA)
        else:
            lo, hi = t_interval(x.mean(0), x.std(0, ddof=1), np.full(K, N), 1 - ALPHA)
        point += bool(np.all((lo <= means) & (means <= hi)))
    assert _at_least(sim / reps, 1 - ALPHA, reps), f"simultaneous coverage {sim / reps:.3f}"
    assert point / reps < 1 - ALPHA - 3 * _se(1 - ALPHA, reps), f"pointwise coverage {point / reps:.3f}"
    assert point / reps < 0.7


def test_sup_t_band_covers_at_small_n():
    """n = 30, 36 independent real elements: the t-scale critical value matters here (the
    normal-scale band m ± c·s/√n covered ~0.85; 200 repetitions: s.e. 0.015, pass ≥ 0.904)."""
    reps, n = 200, 30
    rng = np.random.default_rng(7)
    hits = 0
    for r in range(reps):
        x = correlated_orbit(n, REAL_MEANS, rho=0.0, binary=False, rng=rng)
        band = bands.sup_t_band(x, resamples=RESAMPLES, seed=r)
        hits += bool(np.all((band.lower <= REAL_MEANS) & (REAL_MEANS <= band.upper)))
    assert _at_least(hits / reps, 1 - ALPHA, reps), f"coverage {hits / reps:.3f}"


# --------------------------------------------------- (b) family-wise error, FDR under H0


def _rejections(corrections: dict[str, int], binary: bool, rho: float, seed: int,
                planted: np.ndarray | None = None, shift: float = 0.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per correction, (reps, K) booleans: which elements compare_values flags (worse or better),
    and the raw p ≤ α, over that correction's ``reps`` (``corrections``: name -> reps). The
    corrections share the data: repetition r is the same pair (A, B) for each of them, as
    separate runs from the same seed drew it (compare_values does not use this generator)."""
    rng = np.random.default_rng(seed)
    means = np.linspace(0.6, 0.95, K) if binary else np.zeros(K)
    means_b = means.copy()
    if planted is not None:
        if binary:
            means_b[planted] = stats.norm.cdf(stats.norm.ppf(means[planted]) + shift)
        else:
            means_b[planted] += shift
    out = {c: (np.zeros((reps, K), bool), np.zeros((reps, K), bool)) for c, reps in corrections.items()}
    for r in range(max(corrections.values())):
        a, b = _pair(rng, means, means_b, rho=rho, binary=binary)
        for correction, reps in corrections.items():
            if r < reps:
                pc = paired.compare_values(_ov(a, binary), _ov(b, binary), alpha=ALPHA, correction=correction,
                                           permutations=PERMUTATIONS, seed=r)
                out[correction][0][r], out[correction][1][r] = pc.worse | pc.better, pc.p <= ALPHA
    return out


#: repetitions of the family-wise error check per correction (max-T pays for its sign flips)
FWER_REPS = {"holm": 400, "bonferroni": 400, "maxt": 150}


@functools.cache
def _null_rejections(binary: bool, rho: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The H0 simulation of test_family_wise_error_under_h0, run once per (binary, ρ) for the
    three corrections (each test case reads its own correction: the same numbers as a run of its own)."""
    return _rejections(FWER_REPS, binary, rho, seed=200 + 10 * binary + int(10 * rho))


@pytest.mark.parametrize("rho", [0.0, 0.9])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "real"])
@pytest.mark.parametrize("correction", ["holm", "bonferroni", "maxt"])
def test_family_wise_error_under_h0(correction, binary, rho):
    """A and B with identical marginals, correlated within sample and across elements: P(any
    element flagged) ≤ α (Holm, Bonferroni: 400 repetitions, pass ≤ 0.083; max-T with 200 sign
    flips: 150 repetitions, pass ≤ 0.103). Uncorrected per-element tests flag somewhere in
    ~40–75 % of the repetitions."""
    reps = FWER_REPS[correction]
    flagged, raw = _null_rejections(binary, rho)[correction]
    fwer = flagged.any(1).mean()
    assert _at_most(fwer, ALPHA, reps), f"{correction} FWER {fwer:.3f}"
    assert raw.any(1).mean() > 0.3  # the correction is what keeps it at α


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "real"])
def test_false_discovery_rate_under_a_partial_null(binary):
    """12 of 36 elements differ (B better), 24 are null, ρ = 0.9: FDR = E[V / max(R, 1)] ≤ α
    (Benjamini–Hochberg; 300 repetitions; pass ≤ α + 3 × the sample s.e. of V / max(R, 1),
    which is smaller than the 0/1 bound √(α(1 − α)/reps) = 0.013, so the check is stricter)."""
    reps = 300
    planted = np.arange(12)
    flagged, _ = _rejections({"fdr": reps}, binary, 0.9, seed=300 + binary, planted=planted,
                             shift=0.35 if binary else 0.25)["fdr"]
    null = np.ones(K, bool)
    null[planted] = False
    v, r = flagged[:, null].sum(1), flagged.sum(1)
    fdp = v / np.maximum(r, 1)
    se = fdp.std(ddof=1) / math.sqrt(reps)  # the Monte-Carlo s.e. of the mean false discovery proportion
    assert fdp.mean() <= ALPHA + 3 * se, f"FDR {fdp.mean():.3f} ± {se:.3f}"
    assert flagged[:, planted].mean() > 0.5  # and it finds the planted differences


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "real"])
def test_orbit_mean_test_holds_its_level_and_finds_a_planted_difference(binary):
    """The whole-orbit paired t-test (``PairedComparison.orbit_mean_p``) on correlated elements
    (ρ = 0.9), N = 200 samples: under H0 (A and B with the same marginals) it rejects at rate ≤ α
    (400 repetitions, pass ≤ 0.083); with B better by 0.1 in accuracy (or 0.25 latent s.d.) at
    every element it rejects in more than 80 % of the repetitions."""
    reps = 400
    rng = np.random.default_rng(500 + binary)
    means = rng.uniform(0.5, 0.9, K) if binary else np.linspace(0.0, 1.0, K)
    null, planted = [], []
    for _ in range(reps):
        a = correlated_orbit(N, means, rho=0.9, binary=binary, rng=rng)
        b = correlated_orbit(N, means, rho=0.9, binary=binary, rng=rng)
        better = correlated_orbit(N, np.minimum(means + 0.1, 1.0) if binary else means + 0.25, rho=0.9,
                                  binary=binary, rng=rng)
        null.append(paired.orbit_mean_test(a, b)[1] <= ALPHA)
        planted.append(paired.orbit_mean_test(a, better)[1] <= ALPHA)
    assert _at_most(float(np.mean(null)), ALPHA, reps), f"size {np.mean(null):.3f}"
    assert np.mean(planted) > 0.8, f"power {np.mean(planted):.3f}"


# -------------------------------------------------------------- (c) power on planted differences


def test_planted_differences_are_found_and_maxt_is_at_least_as_powerful_as_holm():
    """Real metric, strongly correlated elements (ρ = 0.9), B better by 0.25 (in units of a
    latent s.d.) at 6 neighbouring elements: each correction finds the planted elements (mean
    per-element power reported) and never flags a null one beyond its FWER; max-T uses the
    correlation, so its power is ≥ Holm's minus 3 Monte-Carlo s.e. of the paired difference
    (100 repetitions on the same data)."""
    reps = 100
    planted = np.arange(15, 21)
    power = {}
    runs = _rejections({"holm": reps, "maxt": reps}, False, 0.9, seed=400, planted=planted, shift=0.25)
    for correction, (flagged, _) in runs.items():
        per_rep = flagged[:, planted].mean(1)
        power[correction] = per_rep
        null = np.setdiff1d(np.arange(K), planted)
        assert flagged[:, null].any(1).mean() <= ALPHA + 3 * _se(ALPHA, reps)
    diff = power["maxt"] - power["holm"]
    assert power["holm"].mean() > 0.4, power
    assert diff.mean() >= -3 * diff.std(ddof=1) / math.sqrt(reps), \
        f"max-T power {power['maxt'].mean():.3f} vs Holm {power['holm'].mean():.3f}"


# ------------------------------------------------------------------- (d) invariance tests

SIZE_REPS = {"cochran": 600, "friedman": 600, "permutation": 150, "sup-t-binary": 300, "sup-t-real": 300}
#: the default test of invariance (the sup-t bootstrap test), on binary and on real values
SUP_T = ["sup-t-binary", "sup-t-real"]


def _invariance_p(method: str, x: np.ndarray, seed: int) -> float:
    if method in SUP_T:
        ov = _ov(x, binary=method == "sup-t-binary")
        return invariance.invariance_test_values(ov, resamples=500, seed=seed).p_value
    if method == "cochran":
        return invariance.cochrans_q(x)[2]
    if method == "friedman":
        return invariance.friedman(x)[2]
    return invariance.permutation_invariance(x, permutations=PERMUTATIONS, seed=seed)[2]


def _invariance_size(method: str, correlation: str, *, reps: int, seed: int, n: int = N, k: int = K,
                     drop: float = 0.0) -> float:
    """Rejection rate at α; elements exchangeable (``"exchangeable"``: a per-sample effect
    shared by every element, plus independent noise) or AR(1) ρ = 0.9 along the orbit."""
    rng = np.random.default_rng(seed)
    binary = method in ("cochran", "sup-t-binary")
    rejections = 0
    for r in range(reps):
        if correlation == "exchangeable":
            z = math.sqrt(0.5) * rng.standard_normal((n, 1)) + math.sqrt(0.5) * rng.standard_normal((n, k))
        else:
            z = _latent(rng, n, k, 0.9)
        shift = np.zeros(k)
        shift[k // 3: k // 3 + 3] = drop
        x = (z < stats.norm.ppf(0.8) - shift).astype(float) if binary else z - shift
        rejections += _invariance_p(method, x, r) <= ALPHA
    return rejections / reps


def _size_shape(method: str) -> tuple[int, int]:
    return (100, 12) if method == "permutation" else (N, K)  # the permutation test loops in Python


@pytest.mark.parametrize("method", ["cochran", "friedman", "permutation", *SUP_T])
def test_invariance_test_size_under_exchangeable_h0(method):
    """Same mean at every element, elements exchangeable within a sample (correlated through a
    shared per-sample effect): size ≤ α (600 repetitions: pass ≤ 0.077; permutation: 150,
    pass ≤ 0.103)."""
    reps = SIZE_REPS[method]
    n, k = _size_shape(method)
    size = _invariance_size(method, "exchangeable", reps=reps, seed=500, n=n, k=k)
    assert _at_most(size, ALPHA, reps), f"{method} size {size:.3f}"


@pytest.mark.xfail(strict=True, reason="KNOWN LIMITATION: Cochran's Q, Friedman and the within-row permutation "
                   "test assume the elements are exchangeable within a sample; with AR(1) ρ = 0.9 along the orbit "
                   "and the same mean everywhere they reject in 13–18 % of samples at α = 0.05 (7–9 % at ρ = 0.5; "
                   "benchmarks/stats_validity.py). The drop band (gate) is not affected.")
@pytest.mark.parametrize("method", ["cochran", "friedman", "permutation"])
def test_invariance_test_size_under_ar1_h0(method):
    """The same mean at every element, AR(1) correlation ρ = 0.9 along the orbit: size ≤ α
    (300 repetitions, pass ≤ 0.088; permutation: 150, pass ≤ 0.103)."""
    reps = 150 if method == "permutation" else 300
    n, k = _size_shape(method)
    size = _invariance_size(method, "ar1", reps=reps, seed=510, n=n, k=k)
    assert _at_most(size, ALPHA, reps), f"{method} size {size:.3f}"


@pytest.mark.parametrize("method", SUP_T)
def test_the_default_test_of_invariance_holds_its_size_under_ar1_correlation(method):
    """The default sup-t bootstrap test needs no exchangeability: the same mean everywhere with
    AR(1) ρ = 0.9 along the orbit (where the classical tests reject 13–18 %), size ≤ α
    (300 repetitions, pass ≤ 0.088)."""
    reps = SIZE_REPS[method]
    size = _invariance_size(method, "ar1", reps=reps, seed=510)
    assert _at_most(size, ALPHA, reps), f"{method} size {size:.3f}"


@pytest.mark.parametrize("method", ["cochran", "friedman", "permutation", *SUP_T])
def test_invariance_test_power_under_a_planted_drop(method):
    """Three neighbouring elements drop (accuracy 0.8 → ~0.7, or a real mean by 0.3 latent
    s.d.; permutation: by 0.6 on its smaller 100 × 12 problem): rejected in ≥ 80 % of 100 repetitions."""
    reps = 100
    n, k = _size_shape(method)
    drop = {"cochran": 0.3, "friedman": 0.3, "permutation": 0.6, "sup-t-binary": 0.3, "sup-t-real": 0.3}[method]
    power = _invariance_size(method, "exchangeable", reps=reps, seed=520, n=n, k=k, drop=drop)
    # the max-type sup-t test pays for its validity under correlation on this diffuse binary
    # alternative: about 0.6 where Cochran's Q (valid only for exchangeable elements) has > 0.8
    floor = 0.5 if method == "sup-t-binary" else 0.8
    assert power >= floor, f"{method} power {power:.3f}"


# ------------------------------------------------------------------------------ (e) the gate


class _Result:
    """Just enough of an OrbitResult for check_result, with orbit_values patched to return ``ov``."""

    def __init__(self, ov: OrbitValues) -> None:
        self.ov, self.attrs = ov, {"run_name": "sim"}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "real-lower-is-better"])
def test_gate_false_failure_when_every_drop_is_within_the_tolerance(binary, monkeypatch):
    """check_result (evidence mode) on orbits whose true drops from the identity are 0, half
    the tolerance or exactly the tolerance (12 elements each, AR(1) ρ = 0.9): it fails in
    ≤ α of the repetitions (150: pass ≤ 0.103); with a drop far above the tolerance at one
    element it fails in ≥ 80 % of 30 repetitions. The real metric is an error (lower is better), so a drop is an
    increase."""
    monkeypatch.setattr(gate, "orbit_values", lambda result, metric=None, **_: result.ov)
    reps, k = 150, K + 1
    tol = 0.03 if binary else 0.15
    drops = np.zeros(k)
    drops[1::3], drops[2::3] = tol / 2, tol
    rng = np.random.default_rng(600 + binary)

    def run(d: np.ndarray, r: int) -> bool:
        if binary:
            x = correlated_orbit(N, 0.93 - d, rho=0.9, binary=True, rng=rng)
        else:
            x = correlated_orbit(N, 1.0 + d, rho=0.9, binary=False, sd=0.5, rng=rng)
        ov = _ov(x, binary, lower_is_better=not binary)
        report = gate.check_result(_Result(ov), max_drop=tol, alpha=ALPHA, resamples=RESAMPLES, seed=r)
        return report.passed

    false_fail = sum(not run(drops, r) for r in range(reps)) / reps
    assert _at_most(false_fail, ALPHA, reps), f"false failure rate {false_fail:.3f}"
    worse = drops.copy()
    worse[k // 2] = tol + (0.2 if binary else 0.3)
    caught = sum(not run(worse, r) for r in range(30)) / 30
    assert caught >= 0.8, f"caught {caught:.2f}"


def test_drop_band_covers_every_true_drop():
    """orbit_drops' simultaneous band covers all 36 true drops at once in ≥ 0.95 (binary,
    identity 0.93, drops 0–0.03, ρ = 0.9; 150 repetitions: pass ≥ 0.897)."""
    reps = 150
    means = np.full(K + 1, 0.93)
    means[1::3], means[2::3] = 0.915, 0.90
    true = means[0] - means
    rng = np.random.default_rng(650)
    hits = 0
    for r in range(reps):
        x = correlated_orbit(N, means, rho=0.9, binary=True, rng=rng)
        band = invariance.orbit_drops(_ov(x, True), level=1 - ALPHA, resamples=RESAMPLES, seed=r).band
        hits += bool(np.all((band.lower <= true + 1e-12) & (true <= band.upper + 1e-12)))
    assert _at_least(hits / reps, 1 - ALPHA, reps), f"coverage {hits / reps:.3f}"


# ------------------------------------------------------------------------- (f) planning


@pytest.mark.parametrize("max_drop", [0.0, 0.02])
def test_planned_sample_size_reaches_the_planned_power(max_drop):
    """simulate_power at plan_samples' n (36 elements, identity accuracy 0.9, a drop of 0.1) is
    ≥ the planned 0.8 minus 3 Monte-Carlo s.e. (150 repetitions: pass ≥ 0.702)."""
    plan = planning.plan_samples(0.1, elements=K, accuracy=0.9, power=0.8, alpha=ALPHA, max_drop=max_drop)
    est = planning.simulate_power(plan.n, 0.1, elements=K, accuracy=0.9, max_drop=max_drop, alpha=ALPHA,
                                  repetitions=150, resamples=300, seed=700)
    assert est.repetitions == 150 and est.se == pytest.approx(_se(est.power, 150), abs=1e-12)
    assert _at_least(est.power, plan.power, 150), f"n = {plan.n}: {est.sentence()}"


# ------------------------------------------------- (g) orbits without the identity element

def test_an_orbit_without_identity_keeps_the_gate_and_the_test_valid():
    """No identity (e.g. an SO(3) grid): the reference is the first element, chosen without
    looking at the values, so an invariant model fails the gate (tolerance 0) and the default
    test rejects at most α of the time (200 repetitions each: pass ≤ 0.096). Choosing the best
    element as the reference instead made both reject 40–90 % of the time."""
    reps = 200
    rng = np.random.default_rng(900)
    fails = rejections = 0
    for r in range(reps):
        binary = r % 2 == 0
        z = _latent(rng, N, K, 0.5)
        x = (z < stats.norm.ppf(0.9)).astype(float) if binary else z
        ov = _ov(x, binary, identity=None)
        test = invariance.invariance_test_values(ov, resamples=RESAMPLES, seed=r)
        rejections += test.p_value <= ALPHA
        fails += bool(np.any(test.drops.band.lower[test.drops.tested] > 0))
        assert test.drops.reference == 0 and not test.drops.reference_is_identity
    assert _at_most(fails / reps, ALPHA, reps), f"gate false failures {fails / reps:.3f}"
    assert _at_most(rejections / reps, ALPHA, reps), f"test size {rejections / reps:.3f}"
