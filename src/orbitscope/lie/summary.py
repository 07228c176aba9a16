"""Summaries of LEE runs: the mean LEE per generator with its interval, each layer's share, and
the rank agreement of per-sample LEE with a per-sample orbit measure.

* ``lee_rows``: one row per generator: the mean LEE over samples with its BCa bootstrap interval
  (:func:`mean_interval_bca`; :func:`orbitscope.aggregate` gives the Student-t one), the median, and the layer with the largest mean contribution
  ``‖c_i‖²`` with its share of the layers' total ("" and NaN for a run without layers) (the shares of squared norms need not add to the
  end-to-end LEE: the contributions' cross terms are left out, as in Gruver et al.'s layer plots);
* ``layer_shares``: per layer, its mean ``‖c_i‖²`` as a fraction of the sum over layers;
* ``rank_agreement``: Spearman's ρ between two per-sample measures, with a 95 % interval from
  Fisher's z with the variance 1.06 / (n − 3) of Fieller, Hartley & Pearson (1957, Biometrika 44).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from scipy import stats

from ..results.result import OrbitResult

__all__ = ["mean_interval_bca", "lee_rows", "layer_shares", "rank_agreement", "listed_attr", "output_unit"]


def mean_interval_bca(values: np.ndarray, level: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> tuple[float, float]:
    """The BCa bootstrap interval of the mean of ``values`` (NaNs dropped; scipy's
    ``stats.bootstrap``, seeded): LEE is non-negative and heavy-tailed, where a Student-t
    interval can reach below 0. ``(mean, mean)`` when the values are constant."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size < 2 or np.ptp(v) == 0:
        m = float(v.mean()) if v.size else float("nan")
        return m, m
    res = stats.bootstrap((v,), np.mean, confidence_level=level, n_resamples=resamples, method="BCa",
                          random_state=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):  # degenerate acceleration: the percentile interval
        res = stats.bootstrap((v,), np.mean, confidence_level=level, n_resamples=resamples, method="percentile",
                              random_state=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return lo, hi


def layer_shares(result: OrbitResult, generator: str) -> dict[str, float]:
    """Layer -> its mean ``‖c_i‖²`` over samples as a fraction of the sum over layers (empty for a
    run without layers)."""
    if "layer_lee" not in result.data:
        return {}
    means = np.asarray(result.data["layer_lee"].sel(generator=generator).mean("sample").values, dtype=np.float64)
    total = means.sum()
    layers = [str(v) for v in result.data["layer"].values]
    return {name: float(m / total) if total > 0 else 0.0 for name, m in zip(layers, means)}


def lee_rows(result: OrbitResult, model: str | None = None, level: float = 0.95) -> list[dict[str, Any]]:
    """One row per generator of a LEE run (see the module docstring)."""
    units = dict(zip(listed_attr(result, "generators"), listed_attr(result, "generator_units")))
    out = output_unit(result)
    rows = []
    for g in [str(v) for v in result.data["generator"].values]:
        values = np.asarray(result.data["lee"].sel(generator=g).values, dtype=np.float64)
        lo, hi = mean_interval_bca(values, level)
        row: dict[str, Any] = {"model": model or result.attrs.get("model_name"), "generator": g,
                               "unit": f"{out}/{units.get(g, '?')}²", "n": int(np.isfinite(values).sum()),
                               "mean_lee": float(np.nanmean(values)), "lee_lo": lo, "lee_hi": hi,
                               "median_lee": float(np.nanmedian(values))}
        shares = layer_shares(result, g)
        top = max(shares, key=shares.get) if shares else ""  # type: ignore[arg-type]
        row.update(top_layer=top, top_layer_share=shares[top] if shares else float("nan"))
        rows.append(row)
    return rows


def output_unit(result: OrbitResult) -> str:
    """The squared unit of a LEE run's output: probability² for classifiers (the default scores),
    (px/frame)² for flow, px² and score² for detections."""
    task = result.attrs.get("task")
    kind = (json.loads(task) if isinstance(task, str) else task or {}).get("kind")
    if kind == "flow":
        return "(px/frame)²"
    if kind == "detection":
        return "(px or score)²"
    return "probability²" if result.attrs.get("scores", "probabilities") == "probabilities" else "score²"


def listed_attr(result: OrbitResult, key: str) -> list[Any]:
    """A list-valued run attribute (stored as JSON in the result's attrs), ``[]`` when absent."""
    value = result.attrs.get(key, [])
    return list(json.loads(value) if isinstance(value, str) else value)


def rank_agreement(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float, float, int]:
    """Spearman's ρ of two per-sample measures (pairs with a NaN dropped), with its interval
    (see the module docstring): ``(rho, lo, hi, n)``; NaNs when fewer than 4 pairs."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    n = int(ok.sum())
    if n < 4:
        return float("nan"), float("nan"), float("nan"), n
    rho = float(stats.spearmanr(a[ok], b[ok]).statistic)
    if not np.isfinite(rho):
        return float("nan"), float("nan"), float("nan"), n
    z = np.arctanh(np.clip(rho, -0.999999, 0.999999))
    half = stats.norm.ppf(0.5 + level / 2) * np.sqrt(1.06 / (n - 3))
    return rho, float(np.tanh(z - half)), float(np.tanh(z + half)), n
