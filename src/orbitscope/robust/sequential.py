"""Tests of per-input probabilistic robustness that stay valid under sequential sampling.

An input x is *robust* at tolerance κ when its failure probability p(x) = P(f(x') ≠ y) over random
perturbations x' is below κ (Mu & Lim, arXiv 2404.16457). A test draws perturbations, counts
failures and decides, per input, one of

    ROBUST (1)       certified: the test rejected H0: p(x) ≥ κ,
    NOT_ROBUST (-1)  stopped without certifying (evidence that p(x) is not below κ; what this
                     claims, and at which error rate, is stated by each test),
    UNDECIDED (0)    wants more samples; at the test's budget UNDECIDED is final.

Convention (every test here):
    * ``failures`` and ``n`` are *cumulative* per-input counts (int arrays, broadcastable); a test is
      a pure function of them, so a certification loop can interleave any number of inputs.
    * ``alpha`` bounds false certification: P(ROBUST ever | p(x) ≥ κ) ≤ α for every x. The
      sequential tests keep it for any schedule of looks, even one chosen from the counts seen so
      far (their guarantee is anytime, by Ville's inequality); the fixed test needs its n fixed in
      advance. The ``"published"`` rule is the exception: it reproduces Mu & Lim's procedure,
      which is *not* error-controlled (≈10% false certification at p = κ for nominal 1%, measured
      here with rounds of 256 and a 65,536-sample cap).
    * ``budget`` is the most samples per input; at ``n >= budget`` the outcome is final.

Tests: ``"binomial"`` (fixed-sample exact test), ``"published"`` (Mu & Lim's rule, faithfully),
``"sprt"`` (Wald's sequential probability ratio test; :data:`DEFAULT_TEST`), and
``"confidence-sequence"`` (Robbins' beta-binomial mixture confidence sequence).
Build them with :func:`make_test`; simulate them with :func:`simulate`. :data:`TESTS` is the
registry behind :func:`make_test` and :func:`list_tests`: register your own test (a frozen,
keyword-only dataclass subclass of :class:`RobustnessTest` with a ``name``) with
:func:`register_test` and it is usable everywhere a test name is (``certify(test="mine")``, the
CLI's ``--test``).

Bad parameters raise :class:`~orbitscope.errors.SpecError` and bad counts
:class:`~orbitscope.errors.DataError` (both ``ValueError``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, NamedTuple

import numpy as np
from scipy import special, stats

from .._registry import Registry
from ..errors import DataError, SpecError

__all__ = [
    "DEFAULT_TEST",
    "NOT_ROBUST",
    "ROBUST",
    "UNDECIDED",
    "BinomialTest",
    "ConfidenceSequenceTest",
    "PublishedTest",
    "RobustnessTest",
    "SPRTTest",
    "SimulationResult",
    "TESTS",
    "binom_test_two_sided",
    "clopper_pearson",
    "default_budget",
    "fixed_sample_size",
    "list_tests",
    "make_test",
    "register_test",
    "simulate",
]

#: A test's outcome for one input (int8): ``ROBUST`` (1) certified, ``NOT_ROBUST`` (-1) stopped
#: without certifying, ``UNDECIDED`` (0) wants more samples (final at the test's budget).
ROBUST, NOT_ROBUST, UNDECIDED = 1, -1, 0

#: The default: Wald's SPRT with p1 = 0.45κ, β = α/10, looks of 16. Measured at α = κ = 0.01
#: (benchmarks/results/robust_queries.txt): mean queries 832 at p = 0 (1.8× the zero-failure
#: minimum), ≈3,030 at p = κ/2 (0.48× the fixed test's 6,314), fewer elsewhere, power ≈ 0.996
#: at κ/2. The mixture confidence sequence needs ≈3,850 at κ/2: its prior spreads the evidence.
DEFAULT_TEST = "sprt"

# ---------------------------------------------------------------------------------------------
# exact binomial machinery


def _check_unit(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number in (0, 1), got {type(value).__name__}")
    value = float(value)
    if not 0.0 < value < 1.0:
        raise SpecError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return value


def _counts(failures: Any, n: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate cumulative counts and broadcast them to int64 arrays."""
    f = np.asarray(failures)
    t = np.asarray(n)
    for name, a in (("failures", f), ("n", t)):
        if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.array_equal(a, np.round(a))):
            raise TypeError(f"{name} must hold integer counts, got dtype {a.dtype}")
    f, t = np.broadcast_arrays(f.astype(np.int64, copy=False), t.astype(np.int64, copy=False))
    if f.size and (f.min() < 0 or t.min() < 0):
        raise DataError("counts must be non-negative")
    if f.size and (f > t).any():
        raise DataError("failures cannot exceed the number of samples n (pass cumulative counts)")
    return f, t


def clopper_pearson(
    count: Any, total: Any, *, confidence: float = 0.95, alternative: str = "two-sided"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper–Pearson, 1934) confidence interval for a binomial proportion.

    ``alternative``: ``"two-sided"`` (each tail (1 − confidence)/2), ``"less"`` (upper bound only:
    the interval is [0, upper]) or ``"greater"`` (lower bound only: [lower, 1]), as in
    ``scipy.stats.binomtest(...).proportion_ci(method="exact")``. Vectorised over counts;
    ``total == 0`` gives [0, 1]. Returns ``(lower, upper)`` float arrays.
    """
    confidence = _check_unit("confidence", confidence)
    k, n = _counts(count, total)
    tail = {"two-sided": (1.0 - confidence) / 2, "less": 1.0 - confidence, "greater": 1.0 - confidence}.get(alternative)
    if tail is None:
        raise SpecError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = stats.beta.ppf(tail, k, n - k + 1)
        hi = stats.beta.ppf(1.0 - tail, k + 1, n - k)
    lo = np.where(k == 0, 0.0, lo)
    hi = np.where(k == n, 1.0, hi)
    if alternative == "less":
        lo = np.zeros_like(hi)
    elif alternative == "greater":
        hi = np.ones_like(lo)
    return lo, hi


def binom_test_two_sided(k: Any, n: Any, p: float) -> np.ndarray:
    """Exact two-sided binomial p-value, vectorised; same definition as ``scipy.stats.binomtest``.

    p-value = Σ P(Bin(n, p) = j) over all j with P(Bin(n, p) = j) ≤ P(Bin(n, p) = k)·(1 + 1e-7)
    (the relative tolerance scipy uses against rounding). The pmf is unimodal, so the far side is a
    tail found by vectorised bisection on the log-pmf: O(log n) pmf evaluations per count.
    """
    p = _check_unit("p", p)
    k, n = _counts(k, n)
    logd = stats.binom.logpmf(k, n, p) + math.log1p(1e-7)
    mean = n * p
    below = k < mean
    above = k > mean
    # k below the mean: far side is [ceil(np), n], pmf non-increasing there; find the first j
    # with pmf(j) <= d (n + 1 if none). k above: far side [0, floor(np)], pmf non-decreasing;
    # find the first j + 1 past the last j with pmf(j) <= d (0 if none), searching on -j.
    lo = np.where(below, np.ceil(mean), -np.floor(mean)).astype(np.int64)
    hi = np.where(below, n + 1, 1).astype(np.int64)
    active = below | above
    lo = np.where(active, lo, 0)
    hi = np.where(active, hi, 0)
    while True:
        todo = lo < hi
        if not todo.any():
            break
        mid = (lo + hi) // 2
        j = np.where(below, mid, -mid)
        ok = stats.binom.logpmf(j, n, p) <= logd  # monotone in mid on both sides
        hi = np.where(todo & ok, mid, hi)
        lo = np.where(todo & ~ok, mid + 1, lo)
    with np.errstate(invalid="ignore"):
        p_below = stats.binom.cdf(k, n, p) + stats.binom.sf(lo - 1, n, p)
        p_above = stats.binom.cdf(-lo, n, p) + stats.binom.sf(k - 1, n, p)
    p_below = np.where(lo > n, stats.binom.cdf(k, n, p), p_below)
    p_above = np.where(-lo < 0, stats.binom.sf(k - 1, n, p), p_above)
    out = np.where(below, p_below, np.where(above, p_above, 1.0))
    return np.minimum(out, 1.0)


def _reject_threshold(n: np.ndarray, kappa: float, alpha: float) -> np.ndarray:
    """Largest c with P(Bin(n, κ) ≤ c) < α (−1 where no count rejects)."""
    c = stats.binom.ppf(alpha, n, kappa).astype(np.int64) - 1
    for _ in range(3):  # guard against rounding in ppf
        c = np.where((c >= 0) & (stats.binom.cdf(c, n, kappa) >= alpha), c - 1, c)
        c = np.where(stats.binom.cdf(c + 1, n, kappa) < alpha, c + 1, c)
    return c


@lru_cache(maxsize=256)
def fixed_sample_size(kappa: float, alpha: float, power: float = 0.99, p_alt: float | None = None) -> int:
    """Smallest n for which the fixed exact binomial test has the given power at ``p_alt``.

    The test certifies when P(Bin(n, κ) ≤ F) < α (level α, exact); its power at p_alt is
    P(Bin(n, p_alt) ≤ c_n) with c_n the largest such F. Power is saw-toothed in n; this is the
    first n that reaches it (6,314 at α = κ = 0.01, power 0.99, p_alt = κ/2; at p_alt = 0 it is
    the zero-failure size ⌈ln(1/α)/−ln(1−κ)⌉ = 459). ``p_alt`` defaults to κ/2.
    """
    kappa = _check_unit("kappa", kappa)
    alpha = _check_unit("alpha", alpha)
    power = _check_unit("power", power)
    p_alt = kappa / 2 if p_alt is None else float(p_alt)
    if not 0.0 <= p_alt < kappa:
        raise SpecError(f"p_alt must satisfy 0 <= p_alt < kappa (= {kappa}), got {p_alt!r}")
    start, chunk = 1, 1024
    while start < 10**9:
        n = np.arange(start, start + chunk, dtype=np.int64)
        c = _reject_threshold(n, kappa, alpha)
        pw = np.where(c >= 0, stats.binom.cdf(np.maximum(c, 0), n, p_alt), 0.0)
        hit = np.flatnonzero(pw >= power)
        if hit.size:
            return int(n[hit[0]])
        start += chunk
        chunk = min(2 * chunk, 1 << 20)
    raise SpecError("no sample size below 1e9 reaches that power; move p_alt further below kappa")


def default_budget(kappa: float, alpha: float) -> int:
    """Default sample cap of the sequential tests: 8 × the fixed test's n (≈52,000 at α = κ = 0.01)."""
    return 8 * fixed_sample_size(float(kappa), float(alpha))


# ---------------------------------------------------------------------------------------------
# the tests


@dataclass(frozen=True, kw_only=True)
class RobustnessTest:
    """Base class: a test of H0: p(x) ≥ κ, vectorised over inputs (see the module docstring).

    Subclasses implement ``_decide`` and ``upper_bound``; ``look`` samples are drawn per look.
    """

    kappa: float
    alpha: float
    budget: int | None = None
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kappa", _check_unit("kappa", self.kappa))
        object.__setattr__(self, "alpha", _check_unit("alpha", self.alpha))
        if self.budget is not None:
            if isinstance(self.budget, bool) or not isinstance(self.budget, (int, np.integer)) or self.budget < 1:
                raise SpecError(f"budget must be a positive integer number of samples (or None), got {self.budget!r}")
            object.__setattr__(self, "budget", int(self.budget))

    def _look_size(self) -> int:
        return int(getattr(self, "look"))

    def next_look(self, n: Any) -> np.ndarray:
        """Samples to draw per input before the next decision look, given ``n`` drawn so far.

        ≥ 1 below the budget (never past it); 0 where ``n >= budget`` (the outcome is final there).
        """
        t = np.asarray(n, dtype=np.int64)
        k = np.full(t.shape, self._look_size(), dtype=np.int64)
        if self.budget is not None:
            k = np.clip(np.minimum(k, self.budget - t), 0, None)
        return k

    def decide(self, failures: Any, n: Any) -> np.ndarray:
        """int8 outcome (ROBUST / NOT_ROBUST / UNDECIDED) per input for cumulative counts."""
        f, t = _counts(failures, n)
        return self._decide(f, t).astype(np.int8)

    def is_final(self, outcome: Any, n: Any) -> np.ndarray:
        """True where an input needs no more samples: decided, or at the budget."""
        done = np.asarray(outcome) != UNDECIDED
        if self.budget is not None:
            done = done | (np.asarray(n) >= self.budget)
        return done

    def upper_bound(self, failures: Any, n: Any) -> np.ndarray:  # pragma: no cover - abstract
        """Upper confidence bound on p(x) at level α (its validity is stated by each test)."""
        raise NotImplementedError

    def _decide(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """Plain-dict description (name and every parameter, defaults resolved), JSON-serialisable."""
        return {"name": self.name, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}


@dataclass(frozen=True, kw_only=True)
class BinomialTest(RobustnessTest):
    """Fixed-sample exact binomial test: draw exactly ``budget`` samples, then decide once.

    ROBUST iff P(Bin(n, κ) ≤ F) < α, i.e. the one-sided Clopper–Pearson (1 − α) upper bound on p is
    below κ; NOT_ROBUST iff P(Bin(n, κ) ≥ F) < α, i.e. the test of H0: p ≤ κ rejects at α (the
    lower bound exceeds κ); otherwise UNDECIDED. Both error rates are ≤ α exactly for any p.
    Valid only when n was fixed in advance: re-testing as samples accrue is what the published
    rule does wrong. ``budget`` defaults to :func:`fixed_sample_size` (κ, α, ``power``, ``p_alt``).
    """

    power: float = 0.99
    p_alt: float | None = None
    name: ClassVar[str] = "binomial"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "power", _check_unit("power", self.power))
        if self.p_alt is None:
            object.__setattr__(self, "p_alt", self.kappa / 2)
        if self.budget is None:
            object.__setattr__(self, "budget", fixed_sample_size(self.kappa, self.alpha, self.power, self.p_alt))

    def _look_size(self) -> int:
        return int(self.budget)

    def _decide(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        robust = stats.binom.cdf(f, t, self.kappa) < self.alpha
        not_robust = stats.binom.sf(f - 1, t, self.kappa) < self.alpha
        out = np.where(robust, ROBUST, np.where(not_robust, NOT_ROBUST, UNDECIDED))
        return np.where(t >= self.budget, out, UNDECIDED)

    def upper_bound(self, failures: Any, n: Any) -> np.ndarray:
        """One-sided Clopper–Pearson upper (1 − α) bound: valid for a sample size fixed in advance."""
        return clopper_pearson(failures, n, confidence=1 - self.alpha, alternative="less")[1]

    def lower_bound(self, failures: Any, n: Any) -> np.ndarray:
        """One-sided Clopper–Pearson lower (1 − α) bound (fixed sample size)."""
        return clopper_pearson(failures, n, confidence=1 - self.alpha, alternative="greater")[0]


@dataclass(frozen=True, kw_only=True)
class PublishedTest(RobustnessTest):
    """Mu & Lim's rule, reproduced faithfully (arXiv 2404.16457; their TorchAttacks fork).

    Draw rounds of ``look`` samples (256 in their experiments; 128 in their code's default); after
    every round compute scipy's exact two-sided binomial p-value of F failures in N samples
    against κ; stop when it is < 2α: ROBUST if F/N < κ, else NOT_ROBUST. ``budget=None`` (no cap)
    as published. NOT error-controlled: the repeated looks inflate false certification well above
    α (≈11% at p = κ for nominal 1%); kept to measure and reproduce, not to certify.
    """

    look: int = 256
    name: ClassVar[str] = "published"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_look(self.look)

    def _decide(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        out = np.zeros(f.shape, dtype=np.int8)
        seen = t > 0
        if seen.any():
            stop = binom_test_two_sided(f[seen], t[seen], self.kappa) < 2 * self.alpha
            out[seen] = np.where(stop, np.where(f[seen] < self.kappa * t[seen], ROBUST, NOT_ROBUST), UNDECIDED)
        return out

    def upper_bound(self, failures: Any, n: Any) -> np.ndarray:
        """The one-sided Clopper–Pearson bound the rule implies; NOT valid after optional stopping."""
        return clopper_pearson(failures, n, confidence=1 - self.alpha, alternative="less")[1]


@dataclass(frozen=True, kw_only=True)
class _AnytimeTest(RobustnessTest):
    """Shared set-up of the anytime-valid tests: ``look`` samples per look, a default budget."""

    look: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_look(self.look)
        if self.budget is None:
            object.__setattr__(self, "budget", default_budget(self.kappa, self.alpha))


@dataclass(frozen=True, kw_only=True)
class SPRTTest(_AnytimeTest):
    """Wald's sequential probability ratio test (Wald 1945) of H0: p = κ against H1: p = ``p1``.

    Λ_n = (p1/κ)^F ((1 − p1)/(1 − κ))^(n − F). ROBUST when Λ_n ≥ 1/α; NOT_ROBUST when Λ_n ≤ β.
    Validity (any looks, any stopping): for p ≥ κ, Λ_n is a non-negative supermartingale with
    Λ_0 = 1 (a martingale at p = κ), so by Ville's inequality P(sup_n Λ_n ≥ 1/α) ≤ α; for p ≤ p1,
    1/Λ_n is one, so P(NOT_ROBUST) ≤ β. Between p1 and κ (the indifference region) NOT_ROBUST only
    means "not certified". Thresholds are Ville's 1/α and β, not Wald's approximations, so the
    bounds hold exactly (no overshoot correction needed).

    Defaults tuned with ``benchmarks/robust_queries.py`` at α = κ = 0.01: ``p1 = 0.45 κ`` (mean
    832 samples at p = 0, within 2× the zero-failure minimum ln(1/α)/κ ≈ 461; ≈3,000 at p = κ/2,
    within 3% of Wald's lower bound for any test with these error rates), ``beta = α/10``
    (power ≈ 0.996 at p = κ/2, at least that of the fixed test sized for power 0.99 there; β = α
    gives only ≈ 0.977) and ``look = 16`` samples per look (the overshoot past the boundary
    costs ≈ look/2 samples). ``budget`` defaults to :func:`default_budget`.
    """

    p1: float | None = None
    beta: float | None = None
    name: ClassVar[str] = "sprt"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.p1 is None:
            object.__setattr__(self, "p1", 0.45 * self.kappa)
        p1 = float(self.p1)
        if not 0.0 < p1 < self.kappa:
            raise SpecError(f"p1 (the alternative) must satisfy 0 < p1 < kappa (= {self.kappa}), got {p1!r}")
        object.__setattr__(self, "p1", p1)
        object.__setattr__(self, "beta", self.alpha / 10 if self.beta is None else _check_unit("beta", self.beta))

    def log_likelihood_ratio(self, failures: Any, n: Any) -> np.ndarray:
        """ln Λ_n for cumulative counts."""
        f, t = _counts(failures, n)
        return f * math.log(self.p1 / self.kappa) + (t - f) * (math.log1p(-self.p1) - math.log1p(-self.kappa))

    def _decide(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        llr = self.log_likelihood_ratio(f, t)
        return np.where(llr >= -math.log(self.alpha), ROBUST, np.where(llr <= math.log(self.beta), NOT_ROBUST, UNDECIDED))

    def upper_bound(self, failures: Any, n: Any) -> np.ndarray:
        """Anytime-valid upper bound u_n: P(∃n: p ≥ u_n) ≤ α, and ROBUST ⟺ u_n ≤ κ.

        For each c, Λ_n(c) tests H0: p ≥ c against the scaled alternative r·c (r = p1/κ); Λ_n(c)
        increases in c, and u_n is the c where it crosses 1/α (closed form). 1 when F = n.
        """
        f, t = _counts(failures, n)
        r = self.p1 / self.kappa
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s = (-math.log(self.alpha) - f * math.log(r)) / (t - f)  # needed ln((1 − rc)/(1 − c))
            e = np.expm1(s)
            u = e / (e + 1.0 - r)
        return np.where(t > f, np.minimum(u, 1.0), 1.0)


@dataclass(frozen=True, kw_only=True)
class ConfidenceSequenceTest(_AnytimeTest):
    """Beta-binomial mixture confidence sequence (Robbins 1970; Howard et al. 2021, Ann. Statist.).

    For each c, M_n(c) = ∫ L_n(q)/L_n(c) dBeta(q; a, b) = B(F + a, n − F + b) / (B(a, b) c^F (1 − c)^(n − F))
    is a non-negative martingale with M_0 = 1 when p = c (a mixture of likelihood ratios), so by
    Ville's inequality C_n = {c : M_n(c) < 1/α} contains p at every n simultaneously with
    probability ≥ 1 − α (Robbins' method of mixtures; Howard, Ramdas, McAuliffe & Sekhon 2021,
    "Time-uniform, nonparametric, nonasymptotic confidence sequences"). C_n is an interval
    (−ln L_n is convex). ROBUST when its upper end is ≤ κ, NOT_ROBUST when its lower end is ≥ κ;
    the total error of both is ≤ α for every p. (Betting confidence sequences, Waudby-Smith &
    Ramdas 2023, JRSS-B, are the nonparametric relative; for Bernoulli data the mixture is exact.)

    Prior: Beta(``prior_a``, ``prior_b``); default a = 1/2, b = 1/(2κ) (mean ≈ κ), which makes the
    sequence tight at the sample sizes that matter around κ; measured by the benchmark.
    """

    prior_a: float = 0.5
    prior_b: float | None = None
    name: ClassVar[str] = "confidence-sequence"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prior_b is None:
            object.__setattr__(self, "prior_b", 0.5 / self.kappa)
        for key in ("prior_a", "prior_b"):
            v = float(getattr(self, key))
            if not (v > 0 and math.isfinite(v)):
                raise SpecError(f"{key} must be a positive finite Beta prior parameter, got {v!r}")
            object.__setattr__(self, key, v)

    def _log_marginal(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        """ln of the Beta-binomial marginal likelihood ratio to the prior: ln B(F+a, n−F+b) − ln B(a, b)."""
        return special.betaln(f + self.prior_a, t - f + self.prior_b) - special.betaln(self.prior_a, self.prior_b)

    def log_mixture(self, failures: Any, n: Any, c: Any) -> np.ndarray:
        """ln M_n(c), the mixture martingale against H0: p = c."""
        f, t = _counts(failures, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.asarray(c, dtype=float)
            return self._log_marginal(f, t) - special.xlogy(f, c) - special.xlog1py(t - f, -c)

    def _decide(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        lm = self._log_marginal(f, t) - f * math.log(self.kappa) - (t - f) * math.log1p(-self.kappa)
        side = np.where(f < self.kappa * t, ROBUST, NOT_ROBUST)
        return np.where(lm >= -math.log(self.alpha), side, UNDECIDED)

    def _edge(self, f: np.ndarray, t: np.ndarray, upper: bool) -> np.ndarray:
        """End of C_n by bisection (60 halvings) between the MLE and 1 (upper) or 0 (lower)."""
        level = -math.log(self.alpha) - self._log_marginal(f, t)  # −ln L_n(c) must reach this
        inside = np.where(t > 0, f / np.maximum(t, 1), 0.5)
        outside = np.full(inside.shape, 1.0 if upper else 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            for _ in range(60):
                mid = 0.5 * (inside + outside)
                out = -special.xlogy(f, mid) - special.xlog1py(t - f, -mid) >= level
                outside = np.where(out, mid, outside)
                inside = np.where(out, inside, mid)
        return outside

    def upper_bound(self, failures: Any, n: Any) -> np.ndarray:
        """Upper end of the confidence sequence: P(∃n: p ≥ upper_n) ≤ α (anytime-valid)."""
        f, t = _counts(failures, n)
        return np.where(f == t, 1.0, self._edge(f, t, upper=True))

    def lower_bound(self, failures: Any, n: Any) -> np.ndarray:
        """Lower end of the confidence sequence (anytime-valid, jointly with the upper end)."""
        f, t = _counts(failures, n)
        return np.where(f == 0, 0.0, self._edge(f, t, upper=False))


def _check_look(look: Any) -> None:
    if isinstance(look, bool) or not isinstance(look, (int, np.integer)) or look < 1:
        raise SpecError(f"look (samples per look) must be a positive integer, got {look!r}")


#: The robustness tests by name: name -> test class (see :func:`register_test`).
TESTS: Registry[type[RobustnessTest]] = Registry("robustness test", key="name")
#: The built-in tests in the order :func:`list_tests` gives them (user tests follow, sorted).
_BUILTIN_ORDER = ("binomial", "published", "sprt", "confidence-sequence")


def register_test(cls: type[RobustnessTest], *, replace: bool = False) -> type[RobustnessTest]:
    """Register a test class under its ``name`` (usable as a class decorator).

    The class must subclass :class:`RobustnessTest` (a frozen, keyword-only dataclass: its extra
    fields are the options :func:`make_test` accepts) and set the ``name`` class variable.
    """
    if not (isinstance(cls, type) and issubclass(cls, RobustnessTest)):
        raise TypeError(f"a robustness test must be a RobustnessTest subclass, got {cls!r}")
    if not dataclasses.is_dataclass(cls) or "name" in {f.name for f in dataclasses.fields(cls)}:
        raise TypeError(f"{cls.__name__} must be a @dataclass(frozen=True, kw_only=True) with name as a ClassVar")
    name = cls.name
    if not isinstance(name, str) or not name.strip() or name != name.strip().lower():
        raise SpecError(f"{cls.__name__}.name must be a non-empty lower-case string, got {name!r}")
    TESTS.register(name, cls, replace=replace)
    return cls


for _cls in (BinomialTest, PublishedTest, SPRTTest, ConfidenceSequenceTest):
    register_test(_cls)
del _cls


def list_tests() -> list[str]:
    """Names accepted by :func:`make_test`: the built-in tests, then registered ones (sorted)."""
    return [n for n in _BUILTIN_ORDER if n in TESTS] + [n for n in TESTS.names() if n not in _BUILTIN_ORDER]


def make_test(name: str = DEFAULT_TEST, *, kappa: float, alpha: float, budget: int | None = None, **options: Any) -> RobustnessTest:
    """Build a test by name (see :func:`list_tests`), e.g. ``make_test("sprt", kappa=0.01, alpha=0.01)``.

    ``budget=None`` means the test's default: the fixed test's n (``"binomial"``), no cap
    (``"published"``), :func:`default_budget` (``"sprt"``, ``"confidence-sequence"``).
    ``options`` are the test's own parameters (``look``, ``p1``, ``beta``, ``prior_a``, ...).
    Names are case-insensitive. Raises :class:`~orbitscope.errors.SpecError` for an unknown
    name or option.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if not isinstance(key, str) or key not in TESTS:
        raise SpecError(f"unknown robustness test {name!r}; choose one of {list_tests()}")
    cls = TESTS.get(key)
    allowed = {f.name for f in dataclasses.fields(cls)} - {"kappa", "alpha", "budget"}
    unknown = set(options) - allowed
    if unknown:
        raise SpecError(f"test {key!r} has no option(s) {sorted(unknown)}; its options are {sorted(allowed)}")
    return cls(kappa=kappa, alpha=alpha, budget=budget, **options)


# ---------------------------------------------------------------------------------------------
# simulation


class SimulationResult(NamedTuple):
    """Per-input outcome (int8), samples drawn and failures seen (int64)."""

    outcomes: np.ndarray
    samples: np.ndarray
    failures: np.ndarray


def simulate(
    test: RobustnessTest, p: float, n_inputs: int, rng: np.random.Generator, *, max_samples: int | None = None
) -> SimulationResult:
    """Run ``test`` on ``n_inputs`` independent oracle inputs that each fail with probability ``p``.

    Draws each look's failure count with ``rng.binomial`` (exact for i.i.d. Bernoulli samples);
    only undecided inputs keep drawing. ``max_samples`` is a safety cap (required for a test
    without a budget, e.g. the published rule); inputs still undecided there are UNDECIDED.
    """
    if not 0.0 <= float(p) <= 1.0:
        raise SpecError(f"p must be a probability in [0, 1], got {p!r}")
    if isinstance(n_inputs, bool) or not isinstance(n_inputs, (int, np.integer)) or n_inputs < 0:
        raise SpecError(f"n_inputs must be a non-negative integer, got {n_inputs!r}")
    limit = test.budget if max_samples is None else min(int(max_samples), test.budget or int(max_samples))
    if limit is None:
        raise SpecError(f"test {test.name!r} has no budget; pass max_samples= as a safety cap")
    out = np.zeros(n_inputs, dtype=np.int8)
    n = np.zeros(n_inputs, dtype=np.int64)
    f = np.zeros(n_inputs, dtype=np.int64)
    idx = np.arange(n_inputs)
    while idx.size:
        k = np.minimum(test.next_look(n[idx]), limit - n[idx])
        f[idx] += rng.binomial(k, p)
        n[idx] += k
        out[idx] = test.decide(f[idx], n[idx])
        idx = idx[(out[idx] == UNDECIDED) & (n[idx] < limit)]
    return SimulationResult(out, n, f)
