"""Paired comparison of two models on the same samples and orbit, element by element, with
error control across elements.

Per element (the samples are the pairs):

* binary metrics: the **exact McNemar test**: with b = #(A right, B wrong) and
  c = #(A wrong, B right), p = min(1, 2 · P[Bin(b + c, ½) ≤ min(b, c)]) (McNemar 1947,
  Psychometrika 12; the exact, conditional form);
* real metrics (e.g. confidence): the **paired t-test** on d = A − B, t = d̄ / (s_d / √n),
  two-sided with n − 1 df.

Across the K elements (``correction``):

* ``"holm"`` (default): Holm's step-down (1979, Scand. J. Statist. 6), family-wise error ≤ α
  under any dependence;
* ``"bonferroni"``;
* ``"maxt"``: the Westfall–Young step-down max-T permutation (Westfall & Young 1993, Algorithm
  2.8), flipping the sign of each sample's whole difference vector, so the correlation between
  elements is used (less conservative than Holm when elements are correlated) with
  T_k = |Σ_i d_ik| / √(Σ_i d_ik²) (for 0/1 metrics McNemar's z);
* ``"fdr"``: Benjamini–Hochberg (1995, JRSS B 57): controls the false discovery rate, not the
  family-wise error (the verdict says which).

Over the whole orbit (one number per model, ``orbit_mean_p``): each sample's metric averaged over
the elements (its orbit mean; undefined elements left out), then the **paired t-test** of A's
orbit means against B's across the samples (Student 1908; two-sided, n − 1 df; samples without
a defined value for either model left out). It asks whether A's mean over the orbit differs from
B's, where the per-element tests ask where.

An element counts as *worse* (or *better*) for A when its adjusted p ≤ α and A's mean is below
(above) B's, oriented by the metric's direction. Family-wise error ≤ α is checked by simulation
in ``tests/test_stats_validity.py``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from .values import OrbitValues, element_noun, orbit_values, result_name

__all__ = ["PairedComparison", "compare_models", "compare_values", "mcnemar_exact", "paired_t", "holm", "bonferroni",
           "benjamini_hochberg", "maxt_stepdown", "orbit_mean_test", "CORRECTIONS"]

CORRECTIONS = ("holm", "bonferroni", "maxt", "fdr")


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact McNemar test per column of two 0/1 matrices on the same rows: ``(b, c, p)`` with
    b = #(a = 1, b = 0), c = #(a = 0, b = 1) per column (rows with NaN in either left out)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ok = ~(np.isnan(a) | np.isnan(b))
    n10 = np.sum(ok & (a == 1) & (b == 0), axis=0)
    n01 = np.sum(ok & (a == 0) & (b == 1), axis=0)
    m = n10 + n01
    p = np.where(m > 0, np.minimum(1.0, 2.0 * stats.binom.cdf(np.minimum(n10, n01), np.maximum(m, 1), 0.5)), 1.0)
    return n10, n01, p


def paired_t(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Paired t-test per column on d = a − b (rows with NaN left out): ``(t, p)``, two-sided.
    A column of identical non-zero differences has p = 0, of zero differences p = 1."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    ok = ~np.isnan(d)
    n = ok.sum(0)
    x = np.where(ok, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(0) / n
        sd = np.sqrt((np.where(ok, d - mean, 0.0) ** 2).sum(0) / np.maximum(n - 1, 1))
        t = mean / (sd / np.sqrt(n))
    p = 2 * stats.t.sf(np.abs(t), np.maximum(n - 1, 1))
    p = np.where(sd > 0, p, np.where(mean != 0, 0.0, 1.0))
    p = np.where(n > 1, p, 1.0)
    signed_inf = np.where(mean > 0, np.inf, np.where(mean < 0, -np.inf, 0.0))
    return np.where(sd > 0, t, signed_inf), p


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control under any dependence)."""
    p = np.asarray(p, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    k = p.size
    adj = np.maximum.accumulate((k - np.arange(k)) * p[order])
    out = np.empty(k)
    out[order] = np.minimum(adj, 1.0)
    return out


def bonferroni(p: np.ndarray) -> np.ndarray:
    """Bonferroni adjusted p-values."""
    return np.minimum(np.asarray(p, dtype=np.float64) * np.size(p), 1.0)


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values; false discovery rate control)."""
    p = np.asarray(p, dtype=np.float64)
    k = p.size
    order = np.argsort(p, kind="stable")
    scaled = p[order] * k / np.arange(1, k + 1)
    adj = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(k)
    out[order] = np.minimum(adj, 1.0)
    return out


def maxt_stepdown(d: np.ndarray, *, permutations: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Westfall–Young step-down max-T adjusted p-values for paired differences ``d`` (rows:
    samples; NaN counted as 0 difference), by sign flips of whole rows: ``(T, p_adjusted)``."""
    d = np.nan_to_num(np.asarray(d, dtype=np.float64))
    norm = np.sqrt((d ** 2).sum(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(norm > 0, np.abs(d.sum(0)) / norm, 0.0)
    order = np.argsort(-t, kind="stable")
    ts = t[order]
    rng = np.random.default_rng(seed)
    exceed = np.zeros(t.size)
    safe = np.where(norm > 0, norm, 1.0)
    for start in range(0, permutations, 250):
        m = min(250, permutations - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, d.shape[0]))
        tp = np.where(norm > 0, np.abs(signs @ d) / safe, 0.0)[:, order]
        u = np.maximum.accumulate(tp[:, ::-1], axis=1)[:, ::-1]  # successive maxima from the smallest T up
        exceed += (u >= ts - 1e-12).sum(0)
    p_sorted = np.maximum.accumulate((exceed + 1) / (permutations + 1))
    out = np.empty(t.size)
    out[order] = p_sorted
    return t, out


@dataclass(frozen=True)
class PairedComparison:
    """The outcome of :func:`compare_models` (flat vectors over the orbit's elements)."""

    name_a: str
    name_b: str
    metric: str
    label: str
    test: str
    correction: str
    alpha: float
    difference: np.ndarray
    p: np.ndarray
    p_adjusted: np.ndarray
    worse: np.ndarray
    better: np.ndarray
    n_samples: int
    values: OrbitValues = field(repr=False)
    #: mean over the samples of (A's orbit mean − B's orbit mean), in the metric's units
    orbit_mean_difference: float = float("nan")
    #: the whole-orbit paired t-test's two-sided p-value (see the module docstring)
    orbit_mean_p: float = float("nan")

    @property
    def error_rate(self) -> str:
        """What ``alpha`` bounds: ``"FWER"`` or, for Benjamini–Hochberg, ``"FDR"``."""
        return "FDR" if self.correction == "fdr" else "FWER"

    @property
    def n_elements(self) -> int:
        return int(self.p.size)

    def worse_at(self) -> list[dict[str, Any]]:
        """The coordinates of the elements where A is significantly worse than B."""
        return [self.values.where(k) for k in np.flatnonzero(self.worse)]

    def better_at(self) -> list[dict[str, Any]]:
        return [self.values.where(k) for k in np.flatnonzero(self.better)]

    def verdict(self) -> str:
        """One line, e.g. ``"plain worse than augmented at 41 of 73 angles, better at 0 (FWER 0.05;
        exact McNemar per element, Holm)"``."""
        noun = element_noun(self.values.dims)
        how = {"holm": "Holm", "bonferroni": "Bonferroni", "maxt": "Westfall–Young max-T", "fdr": "Benjamini–Hochberg"}
        return (f"{self.name_a} worse than {self.name_b} at {int(self.worse.sum())} of {self.n_elements} {noun}, "
                f"better at {int(self.better.sum())} ({self.error_rate} {self.alpha:g}; {self.test} per element, "
                f"{how[self.correction]}; {self.label}, {self.n_samples} paired samples)")

    def orbit_mean_sentence(self) -> str:
        """One line on the whole orbit, e.g. ``"orbit mean of accuracy: plain − augmented = −0.312
        (paired t-test over 500 samples, p = 1.2e-80)"``."""
        from .invariance import format_p

        return (f"orbit mean of {self.label}: {self.name_a} − {self.name_b} = {self.orbit_mean_difference:+.4f} "
                f"(paired t-test of the samples' orbit means, {self.n_samples} samples, {format_p(self.orbit_mean_p)})")

    def to_dataset(self) -> xr.Dataset:
        """Per-element arrays over the orbit dims: ``difference`` (A − B), ``p``, ``p_adjusted``,
        ``worse``, ``better``."""
        ov = self.values
        dims = list(ov.dims)
        return xr.Dataset({k: (dims, ov.reshape(getattr(self, k))) for k in
                           ("difference", "p", "p_adjusted", "worse", "better")},
                          coords={d: ov.coords[d] for d in dims},
                          attrs={"verdict": self.verdict(), "a": self.name_a, "b": self.name_b, "metric": self.metric,
                                 "alpha": self.alpha, "error_rate": self.error_rate, "correction": self.correction})


def compare_models(a: Any, b: Any, metric: str | None = None, *, alpha: float = 0.05, correction: str = "holm",
                   names: tuple[str, str] | None = None, permutations: int = 2000, seed: int = 0) -> PairedComparison:
    """Compare model A's result with model B's on the same samples and orbit (see the module
    docstring for the tests).

    Args:
        a: :class:`~orbitscope.results.OrbitResult` of the first model.
        b: :class:`~orbitscope.results.OrbitResult` of the second model (same data, same orbit).
        metric: default: A's primary metric.
        correction: ``"holm"``, ``"bonferroni"``, ``"maxt"`` or ``"fdr"``.
        names: how the verdict calls them (default: run or model names).

    Raises:
        ValueError: the results are not on the same samples or orbit.
    """
    from ..results.result import check_same_orbit, check_same_samples

    check_same_orbit(a, b)
    check_same_samples([a, b])
    metric = metric or a.primary_metric()
    va, vb = orbit_values(a, metric), orbit_values(b, metric)
    names = names or (result_name(a, "A"), result_name(b, "B"))
    if names[0] == names[1]:
        names = (f"{names[0]} (A)", f"{names[1]} (B)")
    return compare_values(va, vb, alpha=alpha, correction=correction, names=names, permutations=permutations, seed=seed)


def compare_values(va: OrbitValues, vb: OrbitValues, *, alpha: float = 0.05, correction: str = "holm",
                   names: tuple[str, str] = ("A", "B"), permutations: int = 2000, seed: int = 0) -> PairedComparison:
    """:func:`compare_models` of two :class:`~orbitscope.stats.values.OrbitValues`."""
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; use one of {', '.join(CORRECTIONS)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if va.values.shape != vb.values.shape:
        raise ValueError(f"the results differ in shape ({va.values.shape} vs {vb.values.shape}); compare models on "
                         "the same samples and orbit")
    if va.binary:
        _, _, p = mcnemar_exact(va.values, vb.values)
        test = "exact McNemar"
    else:
        _, p = paired_t(va.values, vb.values)
        test = "paired t-test"
    qa, qb = va.quality(), vb.quality()
    with np.errstate(invalid="ignore"):
        diff_q = np.nanmean(qa - qb, axis=0)
    if correction == "maxt":
        _, adj = maxt_stepdown(qa - qb, permutations=permutations, seed=seed)
    else:
        adj = {"holm": holm, "bonferroni": bonferroni, "fdr": benjamini_hochberg}[correction](p)
    sig = adj <= alpha
    with np.errstate(invalid="ignore"):
        difference = np.nanmean(va.values - vb.values, axis=0)
    n = int((~(np.isnan(va.values) | np.isnan(vb.values)).any(axis=1)).sum())
    mean_difference, mean_p = orbit_mean_test(va.values, vb.values)
    return PairedComparison(name_a=names[0], name_b=names[1], metric=va.metric, label=va.label, test=test,
                            correction=correction, alpha=alpha, difference=difference, p=p, p_adjusted=adj,
                            worse=sig & (diff_q < 0), better=sig & (diff_q > 0), n_samples=n, values=va,
                            orbit_mean_difference=mean_difference, orbit_mean_p=mean_p)


def orbit_mean_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The whole-orbit paired t-test of two samples × elements matrices (see the module
    docstring): (mean of A's orbit means − B's, two-sided p), with :func:`paired_t`'s conventions
    for differences without spread. NaN for both when no sample has values for both models."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ma, mb = np.nanmean(a, axis=1), np.nanmean(b, axis=1)
    keep = np.isfinite(ma) & np.isfinite(mb)
    if not keep.any():
        return float("nan"), float("nan")
    _, p = paired_t(ma[keep, None], mb[keep, None])
    return float(np.mean(ma[keep] - mb[keep])), float(p[0])
