"""Dataset-level robustness: certified robust accuracy and the global ("tower") failure bound.

Inputs are per-input arrays produced by a certification loop: ``outcome`` (int8, ROBUST = 1,
NOT_ROBUST = −1, UNDECIDED = 0, see :mod:`orbitscope.robust.sequential`), ``samples`` and
``failures`` (cumulative counts), ``clean_correct`` (bool: the unperturbed input is classified
correctly) and, for the tower bound, the failures among the *first m* samples of every input.

Conventions:
    * failures are counted against the true label, so a misclassified input is never certified;
      :func:`certified_robust_accuracy` raises if it sees one (a bug in the caller's loop);
    * every interval is exact (Clopper–Pearson, 1934) and comes as an :class:`Estimate`;
      ``alternative="less"`` gives the one-sided upper bound [0, upper] (what certifies
      "failure rate below κ"), ``"two-sided"`` the central interval, ``"greater"`` [lower, 1].

Two tower bounds, for two different targets (law of total probability: E_x[p(x)] = P(failure)):
    * :func:`tower_bound_test_set` — the mean (1/N) Σ p(x_i) over the *given* inputs, from m
      perturbations per input (m equal for all, fixed in advance, e.g. the first m of each input's
      sequential run; pooling all samples of a sequential run is biased by its stopping rule).
      The pooled count is Poisson-binomial (N·m independent trials with probabilities p_i). By
      Hoeffding (1956, Ann. Math. Statist. 27:713–721, Theorem 4), P(S ≤ b) ≤ P(Bin(N·m, p̄) ≤ b)
      for b ≤ N·m·p̄ − 1: the binomial is the extreme case, so the Clopper–Pearson upper bound is
      valid, and conservative unless all p_i are equal (exact then). The condition holds whenever
      α ≤ P(Bin(M, p̄) ≤ ⌊M p̄⌋), which is ≥ 1/4 for p̄ ≤ 1/2 (numerical check), i.e. for every usual
      level. The lower end uses the upper tail, covered by the theorem only from one count above the
      mean; with fewer than about one expected failure it can exceed its nominal error by O(α²).
    * :func:`tower_bound_population` — E_x[p(x)] for inputs drawn i.i.d. from the data distribution,
      from ONE perturbation per input: the indicators are then i.i.d. Bernoulli(E_x p(x)) and the
      Clopper–Pearson interval is exact. With m > 1 per input the per-input counts are
      over-dispersed (the p_i vary), a binomial interval on the N·m pooled samples is too narrow,
      so this function accepts m = 1 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .sequential import NOT_ROBUST, ROBUST, UNDECIDED, clopper_pearson

__all__ = [
    "CertifiedAccuracy",
    "Estimate",
    "certified_robust_accuracy",
    "tower_bound_population",
    "tower_bound_test_set",
]


@dataclass(frozen=True)
class Estimate:
    """A proportion ``count / total`` with an exact (Clopper–Pearson) interval [lower, upper]."""

    estimate: float
    lower: float
    upper: float
    count: int
    total: int
    confidence: float
    alternative: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _estimate(count: int, total: int, confidence: float, alternative: str) -> Estimate:
    lo, hi = clopper_pearson(count, total, confidence=confidence, alternative=alternative)
    est = count / total if total else float("nan")
    return Estimate(float(est), float(lo), float(hi), int(count), int(total), float(confidence), alternative)


def _vector(name: str, values: Any, *, kind: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D per-input array, got shape {a.shape}")
    if kind == "bool":
        if a.dtype.kind != "b" and not (a.dtype.kind in "iu" and np.isin(a, (0, 1)).all()):
            raise TypeError(f"{name} must be boolean (or 0/1) per input, got dtype {a.dtype}")
        return a.astype(bool)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer counts, got dtype {a.dtype}")
    if (a < 0).any():
        raise ValueError(f"{name} must be non-negative")
    return a.astype(np.int64)


@dataclass(frozen=True)
class CertifiedAccuracy:
    """Certified robust accuracy of a dataset and its parts.

    ``certified``: certified inputs / all inputs (Mu & Lim's "certified robust accuracy");
    ``among_correct``: certified / correctly classified inputs; ``clean_accuracy``: correct / all.
    The intervals are for the probability that a random input from the data distribution is
    certified (inputs i.i.d.). ``robust_lower`` (needs the per-input level α): since each test
    certifies a non-robust input with probability ≤ α, P(certified) ≤ P(robust) + α·(1 − P(robust)),
    so P(p(x) < κ) ≥ (L − α)/(1 − α) with L the interval's lower end: a lower bound on the population
    robust accuracy at the same confidence. Counts of each outcome are kept for reports.
    """

    n_inputs: int
    n_certified: int
    n_not_robust: int
    n_undecided: int
    certified: Estimate
    among_correct: Estimate | None
    clean_accuracy: Estimate | None
    robust_lower: float | None


def certified_robust_accuracy(
    outcome: Any,
    clean_correct: Any | None = None,
    *,
    confidence: float = 0.95,
    alpha: float | None = None,
) -> CertifiedAccuracy:
    """Certified robust accuracy with exact two-sided intervals; see :class:`CertifiedAccuracy`."""
    out = np.asarray(outcome)
    if out.ndim != 1 or out.dtype.kind not in "iu":
        raise TypeError(f"outcome must be a 1-D integer array of ROBUST/NOT_ROBUST/UNDECIDED codes, got {out.dtype} {out.shape}")
    if not np.isin(out, (ROBUST, NOT_ROBUST, UNDECIDED)).all():
        raise ValueError("outcome codes must be 1 (ROBUST), -1 (NOT_ROBUST) or 0 (UNDECIDED)")
    n = out.size
    if n == 0:
        raise ValueError("no inputs: pass the outcomes of at least one input")
    cert = out == ROBUST
    among = clean = None
    if clean_correct is not None:
        ok = _vector("clean_correct", clean_correct, kind="bool")
        if ok.size != n:
            raise ValueError(f"clean_correct has {ok.size} entries for {n} outcomes")
        if (cert & ~ok).any():
            raise ValueError(
                f"{int((cert & ~ok).sum())} certified input(s) are misclassified; count failures against the true "
                "label and mark misclassified inputs NOT_ROBUST before certification"
            )
        clean = _estimate(int(ok.sum()), n, confidence, "two-sided")
        among = _estimate(int(cert.sum()), int(ok.sum()), confidence, "two-sided") if ok.any() else None
    rate = _estimate(int(cert.sum()), n, confidence, "two-sided")
    robust_lower = None
    if alpha is not None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
        one_sided = _estimate(int(cert.sum()), n, confidence, "greater")
        robust_lower = max(0.0, (one_sided.lower - alpha) / (1 - alpha))
    return CertifiedAccuracy(
        n_inputs=n,
        n_certified=int(cert.sum()),
        n_not_robust=int((out == NOT_ROBUST).sum()),
        n_undecided=int((out == UNDECIDED).sum()),
        certified=rate,
        among_correct=among,
        clean_accuracy=clean,
        robust_lower=robust_lower,
    )


def tower_bound_test_set(
    first_failures: Any, m: int, *, confidence: float = 0.95, alternative: str = "less"
) -> Estimate:
    """Bound on the test-set mean failure probability (1/N) Σ p(x_i) from m samples per input.

    ``first_failures[i]`` is the number of failures among the first ``m`` perturbations of input i
    (m the same for every input and fixed before sampling). Validity: module docstring (Hoeffding
    1956). ``estimate`` is the pooled failure rate; ``upper < κ`` certifies the set at level
    1 − confidence.
    """
    f = _vector("first_failures", first_failures, kind="int")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (samples per input) must be a positive integer, got {m!r}")
    if (f > m).any():
        raise ValueError(f"first_failures cannot exceed m = {m}; pass failures among each input's first m samples")
    if f.size == 0:
        raise ValueError("no inputs: pass the failures of at least one input")
    return _estimate(int(f.sum()), int(f.size) * int(m), confidence, alternative)


def tower_bound_population(first_failure: Any, *, confidence: float = 0.95, alternative: str = "less") -> Estimate:
    """Exact bound on E_x[p(x)] over the data distribution from ONE perturbation per input.

    ``first_failure[i]``: did input i's first perturbation fail (bool or 0/1)? Inputs must be an
    i.i.d. sample of the distribution. For more samples per input use
    :func:`tower_bound_test_set`, which bounds the mean over these inputs instead.
    """
    try:
        z = _vector("first_failure", first_failure, kind="bool")
    except TypeError as err:
        raise TypeError(
            f"{err}; the population bound uses one perturbation per input (0/1). For m > 1 samples per "
            "input use tower_bound_test_set, which bounds the mean over the given inputs"
        ) from None
    if z.size == 0:
        raise ValueError("no inputs: pass the first-perturbation outcome of at least one input")
    return _estimate(int(z.sum()), int(z.size), confidence, alternative)
