"""Confidence intervals, elementwise: Wilson for proportions, Student-t for means.

* binary variables (``correct``): the **Wilson score interval** for a binomial proportion
  (Wilson 1927, "Probable inference, the law of succession, and statistical inference");
* continuous variables: the **Student-t interval** for the mean,
  mean ± t_{1-a/2, n-1} · s / sqrt(n) (a CLT approximation).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["wilson_interval", "t_interval", "mean_interval"]


def wilson_interval(successes: np.ndarray, n: np.ndarray | int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion (elementwise); n = 0 gives (0, 1)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    k = np.asarray(successes, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    z = stats.norm.ppf(0.5 + level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n_arr
        denom = 1 + z * z / n_arr
        centre = (p + z * z / (2 * n_arr)) / denom
        half = z * np.sqrt(p * (1 - p) / n_arr + z * z / (4 * n_arr * n_arr)) / denom
    lo = np.where((n_arr > 0) & (k > 0), centre - half, 0.0)  # exact 0 / 1 at k = 0 / k = n
    hi = np.where((n_arr > 0) & (k < n_arr), centre + half, 1.0)
    return np.clip(lo, 0, 1), np.clip(hi, 0, 1)


def t_interval(mean: np.ndarray, sd: np.ndarray, n: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Student-t interval mean ± t_{1-a/2, n-1} · sd / sqrt(n) (elementwise); infinite for n <= 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        t = stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1))
        half = np.where(n > 1, t * sd / np.sqrt(n), np.inf)
    return mean - half, mean + half


def mean_interval(values: np.ndarray, axis: int = 0, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and Student-t confidence interval along ``axis`` (NaNs ignored), of values in memory
    (:func:`aggregate` computes the same chunk by chunk)."""
    v = np.asarray(values, dtype=np.float64)
    n = np.sum(~np.isnan(v), axis=axis)
    mean = np.nanmean(v, axis=axis) if v.size else np.full(np.delete(v.shape, axis), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.nanstd(v, axis=axis, ddof=1) if v.shape[axis] > 1 else np.zeros_like(mean)
    lo, hi = t_interval(mean, sd, n, level)
    return mean, lo, hi
