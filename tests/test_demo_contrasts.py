"""The case studies' whole-orbit statistics (orbitscope.demos.common.contrast_rows and
with_invariance) against the statistics computed directly: scipy's paired t-test on the samples'
orbit means, the per-element exact McNemar (statsmodels) with Holm, and invariance_test."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import orbitscope as osc
from orbitscope.demos.common import contrast_rows, with_invariance
from orbitscope.stats import invariance_test

sm_tables = pytest.importorskip("statsmodels.stats.contingency_tables")
sm_multitest = pytest.importorskip("statsmodels.stats.multitest")


@pytest.fixture(scope="module")
def runs():
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers import CentroidNet

    train = osc.mnist_subset("train")
    x = train.images.astype(np.float32) / 255.0
    full = np.stack([x[train.labels == c].mean(0) for c in range(10)])
    few = np.stack([x[train.labels == c][:3].mean(0) for c in range(10)])  # centroids of 3 images: another model
    sharp, soft = CentroidNet(full, scale=0.2).eval(), CentroidNet(few, scale=0.05).eval()
    data = osc.mnist_subset("test").stratified(6)
    orbit = osc.Rotation(range(0, 361, 30))
    return [osc.evaluate(m, data, orbit, name=n) for m, n in ((sharp, "sharp"), (soft, "soft"))]


def test_contrast_rows_match_the_statistics_computed_directly(runs):
    rows = contrast_rows(runs, ["sharp", "soft"], [("sharp", "soft")], ("correct", "confidence"))
    assert [(r["a"], r["b"], r["metric"]) for r in rows] == [("sharp", "soft", "correct"), ("sharp", "soft", "confidence")]
    for row in rows:
        a = runs[0].result.data[row["metric"]].transpose("sample", "angle").values.astype(float)
        b = runs[1].result.data[row["metric"]].transpose("sample", "angle").values.astype(float)
        ref = stats.ttest_rel(a.mean(1), b.mean(1))
        assert row["orbit-mean paired t p"] == pytest.approx(float(ref.pvalue), rel=1e-9)
        assert row["a orbit mean"] == pytest.approx(a.mean(), abs=5e-5)
        assert row["b orbit mean"] == pytest.approx(b.mean(), abs=5e-5)
        assert row["orbit-mean difference (a - b)"] == pytest.approx((a - b).mean(), abs=5e-5)
        assert row["samples"] == a.shape[0] and row["elements"] == a.shape[1]
        for side, res in (("a", runs[0].result), ("b", runs[1].result)):
            assert row[f"{side} invariance p"] == invariance_test(res, row["metric"]).p_value
    # per element: exact McNemar (statsmodels), Holm across the 13 angles
    a = runs[0].result.data["correct"].transpose("sample", "angle").values.astype(bool)
    b = runs[1].result.data["correct"].transpose("sample", "angle").values.astype(bool)
    p = []
    for k in range(a.shape[1]):
        table = [[np.sum(a[:, k] & b[:, k]), np.sum(a[:, k] & ~b[:, k])], [np.sum(~a[:, k] & b[:, k]), np.sum(~a[:, k] & ~b[:, k])]]
        p.append(sm_tables.mcnemar(table, exact=True).pvalue)
    adjusted = sm_multitest.multipletests(p, method="holm")[1]
    worse = (adjusted <= 0.05) & (a.mean(0) < b.mean(0))
    better = (adjusted <= 0.05) & (a.mean(0) > b.mean(0))
    assert rows[0]["smallest Holm-adjusted p"] == pytest.approx(float(adjusted.min()), rel=1e-9)
    assert (rows[0]["a worse at"], rows[0]["a better at"]) == (int(worse.sum()), int(better.sum()))


def test_with_invariance_adds_the_test_before_the_run_column(runs):
    rows = [{"model": "sharp", "x": 1, "run": "r1"}, {"model": "soft", "x": 2, "run": "r2"}]
    out = with_invariance(rows, runs, "correct")
    assert list(out[0]) == ["model", "x", "correct invariance p", "correct max drop [95% interval]", "run"]
    for row, run in zip(out, runs):
        test = invariance_test(run.result, "correct")
        lo, hi = test.max_drop_interval
        assert row["correct invariance p"] == test.p_value
        assert row["correct max drop [95% interval]"] == f"{test.max_drop:.4f} [{lo:.4f}, {hi:.4f}]"
