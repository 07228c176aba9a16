"""Tests for results and their statistics (:mod:`orbitscope.results.result`).

Intervals are checked against closed forms written here (Wilson score formula and the roots of
its defining quadratic; ``scipy.stats.t.interval``) and by coverage simulations; aggregates and
summaries against plain numpy on the raw per-sample arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr
from scipy import stats
from torch import nn

from orbitscope import Rotation, Translation, aggregate, evaluate, wilson_interval
from orbitscope.data.datasets import mnist_subset
from orbitscope.results.result import OrbitResult, mean_interval

from helpers import CentroidNet




# ---------------------------------------------------------------------------------------------
# Wilson interval
# ---------------------------------------------------------------------------------------------


def wilson_closed_form(k: float, n: float, level: float) -> tuple[float, float]:
    """(p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), written out independently."""
    z = stats.norm.ppf(1 - (1 - level) / 2)
    p = k / n
    centre = p + z**2 / (2 * n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    denom = 1 + z**2 / n
    return (centre - half) / denom, (centre + half) / denom


def wilson_by_roots(k: int, n: int, level: float) -> tuple[float, float]:
    """The Wilson interval is {p : (p_hat - p)^2 <= z^2 p (1 - p) / n}: the roots of
    (n + z^2) p^2 - (2k + z^2) p + k^2 / n = 0."""
    z = stats.norm.ppf(1 - (1 - level) / 2)
    roots = np.sort(np.roots([n + z**2, -(2 * k + z**2), k**2 / n]).real)
    return float(roots[0]), float(roots[1])


@pytest.mark.parametrize("level", [0.8, 0.95, 0.99])
@pytest.mark.parametrize("n", [1, 7, 50, 1000])
def test_wilson_matches_closed_form(n, level):
    k = np.arange(n + 1)
    lo, hi = wilson_interval(k, n, level)
    assert lo.shape == hi.shape == k.shape
    for ki in range(n + 1):
        elo, ehi = wilson_closed_form(ki, n, level)
        assert lo[ki] == pytest.approx(max(elo, 0.0), abs=1e-12)
        assert hi[ki] == pytest.approx(min(ehi, 1.0), abs=1e-12)
    for ki in range(0, n + 1, max(1, n // 40)):
        rlo, rhi = wilson_by_roots(ki, n, level)
        assert lo[ki] == pytest.approx(max(rlo, 0.0), abs=1e-9)
        assert hi[ki] == pytest.approx(min(rhi, 1.0), abs=1e-9)
    # the interval contains the point estimate and is nested in the level
    assert np.all(lo <= k / n + 1e-12) and np.all(k / n <= hi + 1e-12)


def test_wilson_nested_levels_and_broadcasting():
    k = np.array([[0, 3, 10], [5, 20, 40]])
    n = np.array([[10, 10, 10], [40, 40, 40]])
    lo90, hi90 = wilson_interval(k, n, 0.90)
    lo99, hi99 = wilson_interval(k, n, 0.99)
    assert lo90.shape == (2, 3)
    assert np.all(lo99 <= lo90 + 1e-15) and np.all(hi90 <= hi99 + 1e-15)
    assert np.all(lo99[k > 0] < lo90[k > 0]) and np.all(hi90[k < n] < hi99[k < n])
    lo, hi = wilson_interval(k, 40, 0.95)  # scalar n broadcasts
    for idx in np.ndindex(k.shape):
        elo, ehi = wilson_closed_form(k[idx], 40, 0.95)
        assert lo[idx] == pytest.approx(max(elo, 0), abs=1e-12) and hi[idx] == pytest.approx(min(ehi, 1), abs=1e-12)


@pytest.mark.parametrize("n", [1, 10, 200])
def test_wilson_edge_cases(n):
    """No successes: the lower bound is exactly 0; all successes: the upper bound is exactly 1
    (the true bounds, not 1e-18 / 1 - 1e-16 from rounding)."""
    z2 = stats.norm.ppf(0.975) ** 2
    lo, hi = wilson_interval(0, n)
    assert float(lo) == 0.0 and float(hi) == pytest.approx(z2 / (n + z2), rel=1e-12)
    lo, hi = wilson_interval(n, n)
    assert float(hi) == 1.0 and float(lo) == pytest.approx(n / (n + z2), rel=1e-12)


def test_wilson_no_trials_is_uninformative():
    lo, hi = wilson_interval(np.array([0, 0, 3]), np.array([0, 0, 5]))
    assert lo[0] == 0.0 and hi[0] == 1.0 and lo[1] == 0.0 and hi[1] == 1.0
    assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
    lo, hi = wilson_interval(0, 0)
    assert float(lo) == 0.0 and float(hi) == 1.0


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 95])
def test_wilson_rejects_bad_level(level):
    with pytest.raises(ValueError, match="level"):
        wilson_interval(3, 10, level)


def exact_wilson_coverage(p: float, n: int) -> float:
    """Coverage of the 95 % Wilson interval: sum of the binomial pmf over the k it covers."""
    k = np.arange(n + 1)
    covered = [wilson_closed_form(ki, n, 0.95)[0] <= p <= wilson_closed_form(ki, n, 0.95)[1] for ki in k]
    return float(stats.binom.pmf(k, n, p)[np.array(covered)].sum())


@pytest.mark.parametrize("p", [0.05, 0.5])
def test_wilson_coverage_simulation(p):
    n, sims = 200, 4000
    rng = np.random.default_rng(20240501)
    k = rng.binomial(n, p, size=sims)
    lo, hi = wilson_interval(k, n, 0.95)
    coverage = float(np.mean((lo <= p) & (p <= hi)))
    assert 0.93 <= coverage <= 0.97, coverage
    # and the simulation agrees with the exact coverage within 4 standard errors
    exact = exact_wilson_coverage(p, n)
    assert 0.93 <= exact <= 0.97
    assert abs(coverage - exact) <= 4 * np.sqrt(exact * (1 - exact) / sims)


# ---------------------------------------------------------------------------------------------
# Student-t interval for means
# ---------------------------------------------------------------------------------------------


def test_mean_interval_matches_scipy_t_interval():
    rng = np.random.default_rng(3)
    for n in (2, 5, 31):
        for level in (0.9, 0.95):
            v = rng.beta(2, 5, size=n)
            mean, lo, hi = mean_interval(v, level=level)
            elo, ehi = stats.t.interval(level, n - 1, loc=v.mean(), scale=stats.sem(v))
            assert float(mean) == pytest.approx(v.mean(), rel=1e-12)
            assert float(lo) == pytest.approx(elo, rel=1e-10) and float(hi) == pytest.approx(ehi, rel=1e-10)


def test_mean_interval_axis_nan_and_single_value():
    rng = np.random.default_rng(4)
    v = rng.random((6, 3))
    v[2, 1] = np.nan
    mean, lo, hi = mean_interval(v, axis=0)
    for j in range(3):
        col = v[:, j][~np.isnan(v[:, j])]
        elo, ehi = stats.t.interval(0.95, len(col) - 1, loc=col.mean(), scale=stats.sem(col))
        assert mean[j] == pytest.approx(col.mean()) and lo[j] == pytest.approx(elo) and hi[j] == pytest.approx(ehi)
    m1, lo1, hi1 = mean_interval(np.array([0.3]))
    assert float(m1) == 0.3 and float(lo1) == -np.inf and float(hi1) == np.inf


def test_t_interval_coverage_for_beta_means():
    a, b, n, sims = 2.0, 5.0, 30, 4000
    true_mean = a / (a + b)
    rng = np.random.default_rng(11)
    values = rng.beta(a, b, size=(n, sims))
    _, lo, hi = mean_interval(values, axis=0, level=0.95)
    coverage = float(np.mean((lo <= true_mean) & (true_mean <= hi)))
    assert 0.935 <= coverage <= 0.965, coverage
    # the same through aggregate(): each "orbit element" is one simulated data set of n samples
    ds = xr.Dataset({"confidence": (("sample", "angle"), values)}, coords={"angle": np.arange(sims)})
    agg = aggregate(ds, "confidence")
    np.testing.assert_allclose(agg["lower"].values, np.clip(lo, 0, 1))
    np.testing.assert_allclose(agg["upper"].values, np.clip(hi, 0, 1))
    cov2 = float(np.mean((agg["lower"].values <= true_mean) & (true_mean <= agg["upper"].values)))
    assert cov2 == coverage


# ---------------------------------------------------------------------------------------------
# aggregate and summary on a real evaluation
# ---------------------------------------------------------------------------------------------




ANGLES = list(range(0, 361, 30))


@pytest.fixture(scope="module")
def evaluated():
    """60 real MNIST digits (6 per class) x 13 angles, evaluated by a nearest-centroid model."""
    train, test = mnist_subset("train"), mnist_subset("test")
    x = train.images.reshape(len(train), -1) / 255.0
    model = CentroidNet(np.stack([x[train.labels == c].mean(0) for c in range(10)]))
    idx = np.concatenate([np.flatnonzero(test.labels == c)[:6] for c in range(10)])
    sub = test.subset(idx)
    run = evaluate(model, sub, Rotation(ANGLES), batch_size=16)
    return run, sub.labels


def test_aggregate_accuracy_is_mean_of_individual_curves(evaluated):
    run, _ = evaluated
    res = run.result
    correct = res.correct.values  # (sample, angle)
    n = correct.shape[0]
    manual = np.array([sum(int(correct[i, j]) for i in range(n)) / n for j in range(len(ANGLES))])
    agg = aggregate(res, "correct")
    np.testing.assert_allclose(agg["mean"].values, manual, rtol=0, atol=1e-15)
    assert agg["mean"].dims == ("angle",)
    np.testing.assert_array_equal(agg["angle"].values, ANGLES)
    assert agg.attrs["n"] == n and "Wilson" in agg.attrs["method"]
    for j in range(len(ANGLES)):
        elo, ehi = wilson_closed_form(manual[j] * n, n, 0.95)
        assert agg["lower"].values[j] == pytest.approx(max(elo, 0), abs=1e-12)
        assert agg["upper"].values[j] == pytest.approx(min(ehi, 1), abs=1e-12)
    # the method on the result is the same function, with the same default
    xr.testing.assert_identical(res.aggregate(), agg)
    # the curve is not flat (upright much better than upside down)
    assert manual[0] > manual[ANGLES.index(180)] + 0.2


def test_aggregate_confidence_is_t_interval(evaluated):
    run, _ = evaluated
    conf = run.result.confidence.values.astype(np.float64)
    agg = aggregate(run.result, "confidence", level=0.9)
    assert "Student-t" in agg.attrs["method"] and agg.attrs["level"] == 0.9
    for j in range(len(ANGLES)):
        col = conf[:, j]
        elo, ehi = stats.t.interval(0.9, len(col) - 1, loc=col.mean(), scale=stats.sem(col))
        assert agg["mean"].values[j] == pytest.approx(col.mean(), rel=1e-9)
        assert agg["lower"].values[j] == pytest.approx(max(elo, 0), rel=1e-9, abs=1e-12)
        assert agg["upper"].values[j] == pytest.approx(min(ehi, 1), rel=1e-9)


def test_aggregate_clips_probability_intervals_to_unit_range():
    from orbitscope.tasks import Classification

    meta = {v.name: v.attrs() for v in Classification().variables()}  # what a result's variables carry
    vals = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 0.02], [0.3, 1.0]])
    ds = xr.Dataset({"confidence": (("sample", "angle"), vals, meta["confidence"]),
                     "entropy": (("sample", "angle"), vals - 0.5, meta["entropy"])},
                    coords={"angle": [0.0, 90.0]})
    agg = aggregate(ds, "confidence")
    assert np.all(agg["lower"].values >= 0) and np.all(agg["upper"].values <= 1)
    assert agg["lower"].values[0] == 0.0 and agg["upper"].values[1] == 1.0
    # entropy is not a probability: no clipping
    _, lo, _ = mean_interval(vals - 0.5, axis=0)
    np.testing.assert_allclose(aggregate(ds, "entropy")["lower"].values, lo)
    assert aggregate(ds, "entropy")["lower"].values[0] < -0.5


def test_aggregate_subset_equals_manual_filtering(evaluated):
    run, labels = evaluated
    res = run.result
    for cls in (0, 7):
        mask = labels == cls
        agg_mask = aggregate(res, "correct", subset=mask)
        agg_idx = res.aggregate("correct", subset=np.flatnonzero(mask))
        manual = res.correct.values[mask].mean(axis=0)
        np.testing.assert_allclose(agg_mask["mean"].values, manual, atol=1e-15)
        xr.testing.assert_identical(agg_mask, agg_idx)
        assert agg_mask.attrs["n"] == mask.sum() == 6
        k = res.correct.values[mask].sum(axis=0)
        lo, hi = zip(*(wilson_closed_form(kj, 6, 0.95) for kj in k))
        np.testing.assert_allclose(agg_mask["lower"].values, np.clip(lo, 0, 1), atol=1e-12)
        np.testing.assert_allclose(agg_mask["upper"].values, np.clip(hi, 0, 1), atol=1e-12)
        conf = aggregate(res, "confidence", subset=mask)
        np.testing.assert_allclose(conf["mean"].values, res.confidence.values[mask].astype(np.float64).mean(0))


def test_aggregate_empty_subset_and_unknown_variable(evaluated):
    run, labels = evaluated
    empty = aggregate(run.result, "correct", subset=np.zeros(len(labels), bool))
    assert empty.attrs["n"] == 0 and np.all(np.isnan(empty["mean"].values))
    assert np.all(empty["lower"].values == 0) and np.all(empty["upper"].values == 1)
    with pytest.raises(KeyError, match="no variable 'accuracy'"):
        aggregate(run.result, "accuracy")


def test_summary_matches_numpy_on_the_aggregate(evaluated):
    run, _ = evaluated
    res = run.result
    for variable in ("correct", "confidence"):
        curve = res[variable].values.astype(np.float64).mean(axis=0)  # plain mean per angle
        s = res.summary(variable)
        assert s["variable"] == variable and s["n_samples"] == res.n_samples == 60
        assert s["at_identity"] == pytest.approx(curve[ANGLES.index(0)])
        assert s["mean"] == pytest.approx(curve.mean())
        assert s["worst"] == pytest.approx(curve.min()) and s["best"] == pytest.approx(curve.max())
        assert s["worst_at"] == {"angle": float(ANGLES[int(np.argmin(curve))])}
        assert s["best_at"] == {"angle": float(ANGLES[int(np.argmax(curve))])}
        assert run.summary(variable) == s


def test_summary_without_identity_element():
    images = np.random.default_rng(0).random((8, 1, 8, 8), dtype=np.float32)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    res = evaluate(model, (images, np.arange(8) % 3), Rotation([10, 20, 30])).result
    s = res.summary("confidence")
    assert s["at_identity"] is None
    curve = res.confidence.values.astype(np.float64).mean(0)
    assert s["worst_at"] == {"angle": [10.0, 20.0, 30.0][int(np.argmin(curve))]}


def test_summary_on_two_dimensional_orbit():
    rng = np.random.default_rng(1)
    images = rng.random((10, 1, 8, 8), dtype=np.float32)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4))
    orbit = Translation([-2, 0, 1], [-1, 0, 3, 4])
    res = evaluate(model, (images, np.arange(10) % 4), orbit).result
    assert res.confidence.dims == ("sample", "tx", "ty") and res.confidence.shape == (10, 3, 4)
    curve = res.confidence.values.astype(np.float64).mean(0)  # (tx, ty)
    s = res.summary("confidence")
    i, j = np.unravel_index(np.argmin(curve), curve.shape)
    assert s["worst_at"] == {"tx": [-2.0, 0.0, 1.0][i], "ty": [-1.0, 0.0, 3.0, 4.0][j]}
    i, j = np.unravel_index(np.argmax(curve), curve.shape)
    assert s["best_at"] == {"tx": [-2.0, 0.0, 1.0][i], "ty": [-1.0, 0.0, 3.0, 4.0][j]}
    assert s["at_identity"] == pytest.approx(curve[1, 1])  # tx = 0, ty = 0
    agg = aggregate(res, "confidence")
    assert agg["mean"].dims == ("tx", "ty")
    np.testing.assert_allclose(agg["mean"].values, curve)


def test_orbit_result_access_and_orbit_roundtrip(evaluated):
    run, _ = evaluated
    res = run.result
    assert isinstance(res, OrbitResult)
    assert res.orbit == Rotation(ANGLES) and res.orbit_dims == ("angle",)
    np.testing.assert_array_equal(res.confidence.sel(angle=90).values, res["confidence"].values[:, 3])
    assert res.confidence.dims == ("sample", "angle")
    assert "samples=60" in repr(res)
    assert res.equals(res) and not res.equals(OrbitResult(res.data.isel(sample=slice(0, 10))))
    with pytest.raises(ValueError, match="sample"):
        OrbitResult(xr.Dataset({"x": (("angle",), np.zeros(3))}))
