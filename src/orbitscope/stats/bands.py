"""Simultaneous confidence bands over a whole orbit: the sup-t bootstrap.

A pointwise 95 % band covers each element's true mean with probability 0.95 on its own; over 73
angles it misses somewhere far more often. A *simultaneous* band covers every element at once
with probability ≥ 1 − α. We use the **sup-t band** (Montiel Olea & Plagborg-Møller 2019,
"Simultaneous confidence bands: theory, implementation, and an application to SVARs", J. Appl.
Econometrics 34(1)): with per-element means m_k and standard errors σ_k,

    band_k = m_k ± c · σ_k,   c = the (1 − α) quantile of  max_k |m*_k − m_k| / σ_k

over nonparametric bootstrap resamples of the *samples* (rows), so the correlation between
elements (nearby angles fail together) is kept and c is smaller than a Bonferroni bound.

c is the critical value on the normal scale; the band holds each element at the pointwise
level 1 − α' = 2Φ(c) − 1 with an interval whose own coverage holds at that extreme level:

* real metrics: σ_k = s_k / √n_k and half-width t_{n_k − 1}(1 − α'/2) · σ_k, i.e. the
  **Student-t interval at level 1 − α'** (the bootstrap of the mean ignores that s_k is
  estimated; at K = 36 elements the t tail alone costs about 1 point of coverage at n = 200 and
  4 at n = 50, and with one element the band is the pointwise Student-t interval); elements
  with s_k = 0 (a constant column) have zero width and are left out of the max;
* binary metrics (accuracy): σ_k from the add-one proportion (k + 1) / (n + 2), so that no
  element has zero scale, and the band is the **Clopper–Pearson interval at level 1 − α'**
  (exact 0 / 1 ends), widened where needed to contain the pointwise Wilson interval (at k = 0
  or k = n Clopper–Pearson can be the tighter of the two when c is near 1.96). The Wilson interval at z = c was used before: at such extreme levels
  its non-coverage near 0 and 1 reaches 2–3× nominal, and the band covered ~0.94 at
  n = 200 and ~0.91 at n = 50 (36 elements, accuracies 0.5–0.99;
  ``benchmarks/stats_validity.py``).

NaNs (undefined values) are left out element by element. ``c`` never falls below the
pointwise normal quantile. Coverage ≥ 1 − α is checked by simulation in
``tests/test_stats_validity.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from ..results.intervals import wilson_interval
from ..results.metric_lookup import metric_result
from .values import OrbitValues, orbit_values

__all__ = ["Band", "sup_t_band", "sup_t_critical", "bootstrap_maxima", "difference_band", "difference_scale",
           "difference_test", "difference_statistic", "bootstrap_p", "studentized_maxima", "band_of", "bootstrap_weights", "simultaneous_band",
           "DEFAULT_RESAMPLES", "band_method"]

#: Bootstrap resamples per band (the quantile's Monte-Carlo error at 0.95 is about ±0.5 % in level).
DEFAULT_RESAMPLES = 2000
#: resamples per block of the bootstrap (bounds the memory of one block to block × elements floats)
_BLOCK = 250


@dataclass(frozen=True)
class Band:
    """A band over elements: ``mean``, ``lower``, ``upper`` (flat vectors), the critical value
    ``critical`` (c) and the number of ``resamples``; ``level`` is the simultaneous level.
    ``maxima``: the bootstrap maxima c was read from, for a difference band (so that
    :func:`bootstrap_p` tests with the same draws instead of drawing them again)."""

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    critical: float
    level: float
    resamples: int
    binary: bool
    maxima: np.ndarray | None = field(default=None, repr=False)

    @property
    def method(self) -> str:
        return band_method(self.level, self.resamples, self.binary)


def band_method(level: float, resamples: int, binary: bool) -> str:
    """The legend text naming a simultaneous band's method."""
    how = "Clopper–Pearson at the sup-t level" if binary else "Student-t at the sup-t level"
    return f"simultaneous {level:.0%} band (sup-t bootstrap, {resamples} resamples; {how})"


def bootstrap_weights(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(resamples, n)`` nonparametric bootstrap counts: how often each row is drawn (rows sum to n)."""
    if n == 0:
        return np.zeros((resamples, 0))
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)


def _moments(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validity mask, values with NaN as 0, count, mean and variance (ddof 1) per column."""
    ok = ~np.isnan(values)
    x = np.where(ok, values, 0.0)
    n = ok.sum(0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(0) / n
        var = np.where(n > 1, (np.where(ok, values - mean, 0.0) ** 2).sum(0) / np.maximum(n - 1, 1), 0.0)
    return ok, x, n, mean, var


def _pointwise_alpha(c: float) -> float:
    """α' = 2(1 − Φ(c)): the two-sided pointwise level that the normal-scale critical value c stands for."""
    return float(max(2 * stats.norm.sf(c), 1e-300))


def _t_critical(c: float, n: np.ndarray) -> np.ndarray:
    """c moved from the normal to the Student-t scale with n − 1 df: t_{n−1}(1 − α'/2), same tail probability."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return stats.t.isf(_pointwise_alpha(c) / 2, np.maximum(np.asarray(n, dtype=np.float64) - 1, 1))


def _clopper_pearson(successes: np.ndarray, n: np.ndarray | int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact (Clopper–Pearson) two-sided 1 − ``alpha`` interval for a binomial proportion,
    elementwise: coverage ≥ 1 − alpha at every p; 0 / 1 at k = 0 / k = n; n = 0 gives (0, 1)."""
    k = np.asarray(successes, dtype=np.float64)
    n_arr = np.broadcast_to(np.asarray(n, dtype=np.float64), k.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = stats.beta.ppf(alpha / 2, np.maximum(k, 1), np.maximum(n_arr - k + 1, 1))
        hi = stats.beta.isf(alpha / 2, np.maximum(k + 1, 1), np.maximum(n_arr - k, 1))
    lo = np.where((n_arr > 0) & (k > 0), lo, 0.0)
    hi = np.where((n_arr > 0) & (k < n_arr), hi, 1.0)
    return np.clip(lo, 0, 1), np.clip(hi, 0, 1)


def bootstrap_maxima(values: np.ndarray, scale: np.ndarray, *, resamples: int, seed: int) -> np.ndarray:
    """max_k |m*_k − m_k| / scale_k for each of ``resamples`` bootstrap resamples of the rows
    (elements with scale 0 or no values left out; all zeros when none is left or n < 2). The
    seed fixes the draws, so a band and a test with the same seed share them."""
    ok, x, n, mean, _ = _moments(values)
    use = np.isfinite(mean) & (scale > 0) & np.isfinite(scale)
    if not use.any() or values.shape[0] < 2:
        return np.zeros(resamples)
    x, okf, mean, scale = x[:, use], ok[:, use].astype(np.float64), mean[use], scale[use]
    rng = np.random.default_rng(seed)
    maxima = np.empty(resamples)
    all_ok = bool(okf.all())
    for start in range(0, resamples, _BLOCK):
        w = bootstrap_weights(values.shape[0], min(_BLOCK, resamples - start), rng)
        counts = np.full((w.shape[0], x.shape[1]), float(values.shape[0])) if all_ok else w @ okf
        with np.errstate(invalid="ignore", divide="ignore"):
            dev = np.abs((w @ x) / counts - mean) / scale
        maxima[start:start + w.shape[0]] = np.nanmax(np.where(np.isfinite(dev), dev, 0.0), axis=1)
    return maxima


def sup_t_critical(values: np.ndarray, scale: np.ndarray, *, level: float, resamples: int, seed: int) -> float:
    """The (``level``) quantile of :func:`bootstrap_maxima`; at least the pointwise normal quantile."""
    z = float(stats.norm.ppf(0.5 + level / 2))
    return max(z, float(np.quantile(bootstrap_maxima(values, scale, resamples=resamples, seed=seed), level,
                                    method="higher")))


def sup_t_band(values: np.ndarray, *, binary: bool = False, level: float = 0.95,
               resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Band:
    """A simultaneous band for the column means of ``values`` (rows: samples, columns: elements).

    Args:
        values: ``(n, K)`` array, NaN where undefined.
        binary: values are 0/1: Clopper–Pearson intervals at the sup-t level.
        level: simultaneous coverage 1 − α.
        resamples: bootstrap resamples (the seed makes the band reproducible).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 100:
        raise ValueError(f"use at least 100 bootstrap resamples (got {resamples}); the default is {DEFAULT_RESAMPLES}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be (samples, elements), got shape {values.shape}")
    _, x, n, mean, var = _moments(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        if binary:
            p = (x.sum(0) + 1.0) / (n + 2.0)
            scale = np.sqrt(p * (1 - p) / np.maximum(n, 1))
        else:
            scale = np.sqrt(var / n)
    c = sup_t_critical(values, scale, level=level, resamples=resamples, seed=seed)
    if binary:
        lower, upper = _clopper_pearson(x.sum(0), n, _pointwise_alpha(c))
        # never inside the pointwise Wilson interval (Clopper–Pearson at k = 0 or n can be tighter)
        w_lo, w_hi = wilson_interval(x.sum(0), n, level)
        lower, upper = np.minimum(lower, w_lo), np.maximum(upper, w_hi)
        lower, upper = np.where(n > 0, lower, np.nan), np.where(n > 0, upper, np.nan)
    else:
        half = np.where(n > 1, _t_critical(c, n) * scale, np.inf)
        lower, upper = mean - half, mean + half
    return Band(mean=mean, lower=lower, upper=upper, critical=c, level=level, resamples=resamples, binary=binary)


def studentized_maxima(differences: np.ndarray, *, from_binary: bool, resamples: int, seed: int,
                       use: np.ndarray | None = None) -> np.ndarray:
    """max_k |d̄*_k − d̄_k| / σ*_k over bootstrap resamples of the rows, with each resample's own
    standard error σ*_k (the *studentized* bootstrap: it carries the t tails and the skewness of
    the differences, which a fixed σ does not), over the columns in ``use`` (default: all with
    a positive standard error). Zeros when no column is used or n < 2."""
    d = np.asarray(differences, dtype=np.float64)
    ok = ~np.isnan(d)
    x = np.where(ok, d, 0.0)
    n_rows = d.shape[0]
    n, mean, scale = difference_scale(d, from_binary=from_binary)
    cols = (np.isfinite(scale) & (scale > 0)) if use is None else (np.asarray(use, bool) & np.isfinite(scale))
    if not cols.any() or n_rows < 2:
        return np.zeros(resamples)
    x, okf, mean = x[:, cols], ok[:, cols].astype(np.float64), mean[cols]
    x2 = x * x
    rng = np.random.default_rng(seed)
    maxima = np.empty(resamples)
    for start in range(0, resamples, _BLOCK):
        w = bootstrap_weights(n_rows, min(_BLOCK, resamples - start), rng)
        cnt = w @ okf
        with np.errstate(invalid="ignore", divide="ignore"):
            m = (w @ x) / cnt
            var = ((w @ x2) - cnt * m * m) / (cnt - 1)
            if from_binary:
                var = np.maximum(var, 1.0 / np.maximum(cnt, 1))
            dev = np.abs(m - mean)
            # a resample without spread: infinitely far if its mean moved (a few samples drawn
            # again and again, as happens at small n), else not at all
            t = np.where(var > 0, dev / np.sqrt(np.maximum(var, 0.0) / cnt), np.where(dev > 1e-12, np.inf, 0.0))
        maxima[start:start + w.shape[0]] = np.max(np.where(np.isnan(t), 0.0, t), axis=1)
    return maxima


def difference_band(differences: np.ndarray, *, from_binary: bool, level: float = 0.95,
                    resamples: int = DEFAULT_RESAMPLES, seed: int = 0, tested: np.ndarray | None = None) -> Band:
    """A simultaneous band for the column means of per-sample *differences* (paired: one metric
    minus another on the same samples): d̄_k ± c·σ_k with c the ``level`` quantile of the
    studentized bootstrap maxima (:func:`studentized_maxima`), at least the pointwise Student-t
    quantile. For differences of 0/1 values the variance is floored at 1/n (one discordant
    pair), so that an element with no discordant pair still has a non-zero width; a real
    column that does not vary has zero width. ``tested``: the columns the critical value is
    taken over (default: all), as a test of the same columns takes it."""
    d = np.asarray(differences, dtype=np.float64)
    n, mean, scale = difference_scale(d, from_binary=from_binary)
    use = None if tested is None else np.asarray(tested, bool) & (scale > 0)
    maxima = studentized_maxima(d, from_binary=from_binary, resamples=resamples, seed=seed, use=use)
    floor = float(stats.t.ppf(0.5 + level / 2, max(int(np.nanmax(n, initial=2)) - 1, 1)))
    c = max(floor, float(np.quantile(maxima, level, method="higher")))
    with np.errstate(invalid="ignore"):  # an infinite critical value (too few samples) times a zero scale
        half = np.where(n > 1, c * scale, np.inf)
    return Band(mean=mean, lower=mean - half, upper=mean + half, critical=c, level=level, resamples=resamples,
                binary=False, maxima=maxima)


def difference_scale(differences: np.ndarray, *, from_binary: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count, mean and standard error per column of paired differences (the variance of
    differences of 0/1 values floored at 1/n, see :func:`difference_band`)."""
    _, _, n, mean, var = _moments(np.asarray(differences, dtype=np.float64))
    if from_binary:
        var = np.maximum(var, 1.0 / np.maximum(n, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return n, mean, np.sqrt(var / n)


def difference_statistic(differences: np.ndarray, *, from_binary: bool) -> float:
    """T = max_k |d̄_k| / σ_k of paired differences (σ_k as in :func:`difference_band`); a
    column that does not vary but is not 0 (every sample drops by the same amount) gives ∞."""
    d = np.asarray(differences, dtype=np.float64)
    n, mean, scale = difference_scale(d, from_binary=from_binary)
    if d.shape[1] == 0 or not (n > 1).any():
        return 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(scale > 0, np.abs(mean) / scale, np.where(np.abs(mean) > 0, np.inf, 0.0))
    return float(np.max(np.where((n > 1) & np.isfinite(mean), t, 0.0)))


def bootstrap_p(statistic: float, maxima: np.ndarray) -> float:
    """p = (1 + #{T* ≥ T}) / (1 + B) of an observed maximum against B bootstrap maxima T*
    (1 / (1 + B) for an infinite T)."""
    if not np.isfinite(statistic):
        return 1.0 / (1 + maxima.size)
    return float((1 + np.sum(maxima >= statistic - 1e-12)) / (1 + maxima.size))


def difference_test(differences: np.ndarray, *, from_binary: bool, resamples: int = DEFAULT_RESAMPLES,
                    seed: int = 0) -> tuple[float, float]:
    """The studentized sup-t bootstrap test that every column of paired differences has mean 0:
    ``(T, p)`` with T = :func:`difference_statistic` and p = :func:`bootstrap_p` over the same
    bootstrap maxima T* as :func:`difference_band` (same seed, same draws), so p ≤ α exactly
    when the simultaneous 1 − α band excludes 0 at some element (up to the quantile's
    discreteness and the band's pointwise floor). A column that does not vary but is not 0 is
    infinitely significant (p = 1 / (1 + B)). Valid whatever the correlation between elements
    (no exchangeability needed), asymptotically in n."""
    d = np.asarray(differences, dtype=np.float64)
    n, _, _ = difference_scale(d, from_binary=from_binary)
    if d.shape[1] == 0 or not (n > 1).any():
        return 0.0, 1.0
    observed = difference_statistic(d, from_binary=from_binary)
    if not np.isfinite(observed):
        return observed, 1.0 / (1 + resamples)
    return observed, bootstrap_p(observed, studentized_maxima(d, from_binary=from_binary, resamples=resamples,
                                                              seed=seed))


def simultaneous_band(result: Any, metric: str | None = None, *, level: float = 0.95, subset: Any = None,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> xr.Dataset:
    """A simultaneous band over every element of the result's orbit, next to the pointwise one.

    Returns a Dataset over the orbit dims with ``mean``, ``lower``, ``upper`` (simultaneous) and
    ``pointwise_lower``, ``pointwise_upper`` (:func:`~orbitscope.results.aggregate`'s intervals);
    attrs ``method``, ``critical`` (c), ``level``, ``n``, ``variable``. Bounded metrics are
    clipped to [0, 1] as the pointwise band is.
    """
    from ..results.result import aggregate

    ov = orbit_values(result, metric, subset=subset)
    band = band_of(ov, level=level, resamples=resamples, seed=seed)
    res = metric_result(result, ov.metric)  # with the consensus variables when the metric is one of them
    point = aggregate(res, ov.metric, level=level, subset=subset)
    lower, upper = band.lower, band.upper
    if res.meta(ov.metric).bounded:
        lower, upper = np.clip(lower, 0, 1), np.clip(upper, 0, 1)
    dims = list(ov.dims)
    return xr.Dataset(
        {"mean": (dims, ov.reshape(band.mean)), "lower": (dims, ov.reshape(lower)), "upper": (dims, ov.reshape(upper)),
         "pointwise_lower": (dims, point["lower"].values), "pointwise_upper": (dims, point["upper"].values)},
        coords={d: ov.coords[d] for d in dims},
        attrs={"variable": ov.metric, "n": ov.n_samples, "method": band.method, "critical": band.critical,
               "level": level, "pointwise_method": point.attrs["method"]})


def band_of(ov: OrbitValues, *, level: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Band:
    """:func:`sup_t_band` of an :class:`OrbitValues`."""
    return sup_t_band(ov.values, binary=ov.binary, level=level, resamples=resamples, seed=seed)
