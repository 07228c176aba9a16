"""orbitscope.stats against independent references.

Closed-form tests against statsmodels and scipy (McNemar, Cochran's Q, Friedman, Holm,
Bonferroni, Benjamini–Hochberg, the paired t-test, Clopper–Pearson); the resampling statistics
against plain-Python loops over the same random draws (bit-for-bit) and against exhaustive
enumeration of every sign flip / within-row permutation (within a stated Monte-Carlo error);
``orbit_values`` and ``simultaneous_band`` against the result's xarray data and
``orbitscope.aggregate`` on a small real evaluation.
"""

from __future__ import annotations

import gc
import itertools
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from orbitscope.stats import bands, invariance, paired
from orbitscope.stats.simulate import correlated_orbit

sm_tables = pytest.importorskip("statsmodels.stats.contingency_tables")
sm_multitest = pytest.importorskip("statsmodels.stats.multitest")
sm_proportion = pytest.importorskip("statsmodels.stats.proportion")


def _binary(rng: np.random.Generator, n: int, k: int, rho: float = 0.7) -> np.ndarray:
    return correlated_orbit(n, rng.uniform(0.3, 0.95, k), rho=rho, binary=True, rng=rng)


# --------------------------------------------------------------------------- closed forms


def test_mcnemar_exact_matches_statsmodels_per_column():
    rng = np.random.default_rng(0)
    n, k = 60, 12
    a = _binary(rng, n, k)
    b = np.where(rng.random((n, k)) < 0.25, 1 - a, a)  # flip a quarter: discordant pairs both ways
    b[:, 0] = a[:, 0]  # no discordant pair
    b[:, 1] = 0.0  # one-sided: c = 0
    a[:, 2], b[:, 2] = 1.0, 0.0  # every pair discordant one way
    b[:7, 3], a[:7, 3] = 0.0, 1.0  # b = c exactly (7 each way) on column 3
    b[7:14, 3], a[7:14, 3] = 1.0, 0.0
    a[14:, 3] = b[14:, 3] = 1.0
    a[[4, 9], 5] = np.nan  # rows with NaN in either are left out, column by column
    b[[9, 20], 5] = np.nan
    n10, n01, p = paired.mcnemar_exact(a, b)
    for j in range(k):
        ok = ~(np.isnan(a[:, j]) | np.isnan(b[:, j]))
        x, y = a[ok, j], b[ok, j]
        table = [[np.sum((x == 1) & (y == 1)), np.sum((x == 1) & (y == 0))],
                 [np.sum((x == 0) & (y == 1)), np.sum((x == 0) & (y == 0))]]
        ref = sm_tables.mcnemar(table, exact=True)
        assert (n10[j], n01[j]) == (table[0][1], table[1][0])
        assert min(n10[j], n01[j]) == ref.statistic
        assert p[j] == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-15), j
    assert p[0] == 1.0 and p[3] == 1.0 and p[2] < 1e-15


@pytest.mark.parametrize("seed", range(4))
def test_cochrans_q_matches_statsmodels(seed):
    rng = np.random.default_rng(seed)
    x = _binary(rng, 40 + 10 * seed, 3 + 4 * seed, rho=0.3 * seed)
    q, df, p = invariance.cochrans_q(x)
    ref = sm_tables.cochrans_q(x)
    assert q == pytest.approx(ref.statistic, rel=1e-12)
    assert df == ref.df
    assert p == pytest.approx(ref.pvalue, rel=1e-10, abs=1e-300)
    # rows with NaN are left out: the same as statsmodels on the complete rows
    y = x.copy()
    y[[1, 5], [0, 2]] = np.nan
    ref = sm_tables.cochrans_q(y[~np.isnan(y).any(1)])
    assert invariance.cochrans_q(y)[0] == pytest.approx(ref.statistic, rel=1e-12)


def test_cochrans_q_constant_rows():
    """Every row constant: statsmodels divides 0 by 0; we report Q = 0, p = 1 (documented)."""
    x = np.repeat(np.array([[1.0], [0.0], [1.0]]), 5, axis=1)
    assert invariance.cochrans_q(x) == (0.0, 4, 1.0)


@pytest.mark.parametrize("kind", ["ties", "real", "binary"])
def test_friedman_matches_scipy(kind):
    rng = np.random.default_rng({"ties": 1, "real": 2, "binary": 3}[kind])
    n, k = 30, 7
    if kind == "ties":
        x = rng.integers(0, 4, (n, k)).astype(np.float64)  # many ties within rows
    elif kind == "real":
        x = correlated_orbit(n, np.linspace(0, 0.3, k), rho=0.5, binary=False, rng=rng)
    else:
        x = _binary(rng, n, k)
        x[0] = 1.0  # a constant row (all ties)
    chi2, df, p = invariance.friedman(x)
    ref = stats.friedmanchisquare(*x.T)
    assert df == k - 1
    assert chi2 == pytest.approx(ref.statistic, rel=1e-10)
    assert p == pytest.approx(ref.pvalue, rel=1e-8)
    y = x.copy()
    y[3, 2] = np.nan
    ref = stats.friedmanchisquare(*np.delete(x, 3, axis=0).T)
    assert invariance.friedman(y)[0] == pytest.approx(ref.statistic, rel=1e-10)


@pytest.mark.parametrize("case", ["random", "ties", "ones", "single", "tiny"])
def test_corrections_match_statsmodels(case, monkeypatch):
    # statsmodels' Holm branch calls gc.collect() (0.2-0.5 s each in a process holding torch);
    # a collection has no effect on the p-values it returns
    monkeypatch.setattr(gc, "collect", lambda *args, **kwargs: 0)
    rng = np.random.default_rng(4)
    p = {"random": rng.uniform(0, 0.2, 40) ** 2,
         "ties": np.array([0.01, 0.04, 0.01, 0.3, 0.04, 0.001, 0.3, 0.04, 0.02, 0.02]),
         "ones": np.array([1.0, 0.5, 0.9, 1.0, 0.02]),
         "single": np.array([0.03]),
         "tiny": np.round(rng.uniform(0, 0.05, 25), 3)}[case]  # rounding makes ties
    for ours, method in ((paired.holm, "holm"), (paired.bonferroni, "bonferroni"),
                         (paired.benjamini_hochberg, "fdr_bh")):
        reject, ref, _, _ = sm_multitest.multipletests(p, alpha=0.05, method=method)
        np.testing.assert_allclose(ours(p), ref, rtol=1e-12, atol=1e-15, err_msg=method)
        assert np.array_equal(ours(p) <= 0.05, reject)


def test_paired_t_matches_scipy():
    rng = np.random.default_rng(5)
    n, k = 25, 9
    a = correlated_orbit(n, np.linspace(0.2, 0.8, k), rho=0.6, binary=False, sd=0.2, rng=rng)
    b = a + rng.normal(np.linspace(-0.1, 0.1, k), 0.15, (n, k))
    b[[2, 7], 4] = np.nan
    t, p = paired.paired_t(a, b)
    ref = stats.ttest_rel(a, b, axis=0, nan_policy="omit")
    np.testing.assert_allclose(t, np.asarray(ref.statistic), rtol=1e-10)
    np.testing.assert_allclose(p, np.asarray(ref.pvalue), rtol=1e-8)


def test_paired_t_zero_variance_edge_cases():
    """The documented edge cases: identical non-zero differences give p = 0 and t = ±inf
    (scipy: the same); identical zero differences give p = 1 (scipy: NaN); one pair, p = 1."""
    a = np.array([[1.0, 1.0, 1.0, 2.0], [2.0, 2.0, 2.0, np.nan], [3.0, 3.0, 3.0, np.nan]])
    b = np.column_stack([a[:, 0] - 0.5, a[:, 1], a[:, 2] + 0.25, [1.0, 0.0, 0.0]])
    t, p = paired.paired_t(a, b)
    assert p.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert t[0] == np.inf and t[2] == -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in (0, 2):
            ref = stats.ttest_rel(a[:, j], b[:, j])
            assert ref.pvalue == 0.0 and ref.statistic == t[j]
        assert np.isnan(stats.ttest_rel(a[:, 1], b[:, 1]).pvalue)
    assert t[1] == 0.0 or np.isnan(t[1])  # no difference: not ±inf


def test_orbit_mean_test_is_scipys_paired_t_on_the_samples_orbit_means():
    """The whole-orbit test: scipy's ttest_rel on each sample's mean over its defined elements;
    a sample with no defined value for either model is left out."""
    rng = np.random.default_rng(11)
    n, k = 40, 12
    a = correlated_orbit(n, np.linspace(0.3, 0.9, k), rho=0.8, binary=True, rng=rng)
    b = correlated_orbit(n, np.linspace(0.5, 0.7, k), rho=0.8, binary=True, rng=rng)
    a[3, :5] = np.nan
    b[9, :] = np.nan  # no value for B: sample 9 is left out
    diff, p = paired.orbit_mean_test(a, b)
    keep = np.arange(n) != 9
    ma, mb = np.nanmean(a[keep], axis=1), np.nanmean(b[keep], axis=1)
    ref = stats.ttest_rel(ma, mb)
    assert diff == pytest.approx(float(np.mean(ma - mb)), rel=1e-12)
    assert p == pytest.approx(float(ref.pvalue), rel=1e-9)
    assert paired.orbit_mean_test(a, a) == (0.0, 1.0)  # no difference at all
    assert all(math.isnan(x) for x in paired.orbit_mean_test(a[:, :0], b[:, :0]))  # no elements


def test_clopper_pearson_matches_statsmodels():
    """The binary band's per-element interval (the exact binomial interval)."""
    n = np.array([0, 1, 10, 10, 10, 200, 200, 200, 37])
    k = np.array([0, 1, 0, 10, 3, 1, 100, 199, 20])
    for alpha in (0.05, 0.0014, 1e-6):
        lo, hi = bands._clopper_pearson(k, n, alpha)
        for j in range(n.size):
            if n[j] == 0:
                assert (lo[j], hi[j]) == (0.0, 1.0)
                continue
            ref = sm_proportion.proportion_confint(k[j], n[j], alpha=alpha, method="beta")
            assert lo[j] == pytest.approx(ref[0], abs=1e-12) and hi[j] == pytest.approx(ref[1], abs=1e-12)


# ------------------------------------------------------- resampling: plain loops, enumeration


def _plain_sup_t_critical(values, scale, level, resamples, seed):
    """sup_t_critical written out: bootstrap counts w (the same multinomial stream), then for each
    resample and element the weighted mean over the rows that have a value."""
    n, k = values.shape
    z = stats.norm.ppf(0.5 + level / 2)
    means = [np.mean(values[~np.isnan(values[:, j]), j]) if (~np.isnan(values[:, j])).any() else np.nan
             for j in range(k)]
    use = [j for j in range(k) if np.isfinite(means[j]) and scale[j] > 0 and np.isfinite(scale[j])]
    if not use or n < 2:
        return z
    w_all = np.random.default_rng(seed).multinomial(n, [1.0 / n] * n, size=resamples)
    maxima = []
    for w in w_all:
        best = 0.0
        for j in use:
            num = cnt = 0.0
            for i in range(n):
                if not math.isnan(values[i, j]):
                    num += w[i] * values[i, j]
                    cnt += w[i]
            if cnt > 0:
                best = max(best, abs(num / cnt - means[j]) / scale[j])
        maxima.append(best)
    maxima.sort()
    return max(z, maxima[math.ceil(level * (resamples - 1) - 1e-9)])  # numpy's "higher" quantile


@pytest.mark.parametrize("nan", [False, True])
def test_sup_t_critical_matches_plain_loop(nan):
    rng = np.random.default_rng(6)
    x = correlated_orbit(23, np.linspace(0, 1, 6), rho=0.8, binary=False, rng=rng)
    if nan:
        x[[0, 3, 4], 2] = np.nan
        x[:, 5] = np.nan  # an element with no value at all
        x[:, 4] = 0.7  # a constant element (scale 0, left out)
    _, _, n, _, var = bands._moments(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.sqrt(var / n)
    for resamples, level in ((613, 0.95), (250, 0.9)):  # 613: not a multiple of the block size
        ours = bands.sup_t_critical(x, scale, level=level, resamples=resamples, seed=11)
        assert ours == pytest.approx(_plain_sup_t_critical(x, scale, level, resamples, 11), rel=1e-12)


def test_sup_t_critical_matches_theory_at_the_extremes():
    """Independent elements: c → the exact quantile of the max of K independent |N(0,1)|;
    identical elements: c = z_{0.975}. Tolerance: 4 Monte-Carlo s.e. of the bootstrap
    quantile (√(q(1 − q)/B) / f(c), f the max's density) plus 0.03 for the bootstrap's own
    approximation at n = 3000."""
    rng = np.random.default_rng(7)
    n, k, resamples = 3000, 8, 4000
    x = rng.standard_normal((n, k))
    scale = x.std(0, ddof=1) / math.sqrt(n)
    c = bands.sup_t_critical(x, scale, level=0.95, resamples=resamples, seed=0)
    exact = stats.norm.ppf(0.5 + 0.95 ** (1 / k) / 2)
    density = k * 0.95 ** ((k - 1) / k) * 2 * stats.norm.pdf(exact)
    se = math.sqrt(0.95 * 0.05 / resamples) / density
    assert abs(c - exact) <= 4 * se + 0.03, (c, exact, se)
    same = np.repeat(x[:, :1], k, axis=1)
    assert bands.sup_t_critical(same, np.repeat(scale[:1], k), level=0.95, resamples=resamples, seed=0) == \
        pytest.approx(stats.norm.ppf(0.975), abs=4 * math.sqrt(0.95 * 0.05 / resamples) / (2 * stats.norm.pdf(1.96)) + 0.03)


def _plain_maxt(d, permutations, seed):
    """Westfall–Young step-down max-T (Algorithm 2.8) as a loop, on the same sign-flip stream."""
    n, k = d.shape
    norm = np.sqrt((d ** 2).sum(0))
    t = np.array([abs(d[:, j].sum()) / norm[j] if norm[j] > 0 else 0.0 for j in range(k)])
    order = sorted(range(k), key=lambda j: -t[j])
    signs = np.random.default_rng(seed).choice(np.array([-1.0, 1.0]), size=(permutations, n))
    counts = [0] * k
    for s in signs:
        tp = [abs(float(s @ d[:, j])) / norm[j] if norm[j] > 0 else 0.0 for j in range(k)]
        for pos, j in enumerate(order):
            if max(tp[jj] for jj in order[pos:]) >= t[j] - 1e-12:
                counts[pos] += 1
    p, out = 0.0, np.empty(k)
    for pos, j in enumerate(order):
        p = max(p, (counts[pos] + 1) / (permutations + 1))
        out[j] = p
    return t, out


def _exact_maxt(d):
    """The exact step-down max-T p-values: every one of the 2^n sign flips (the identity included)."""
    n, k = d.shape
    norm = np.sqrt((d ** 2).sum(0))
    t = np.abs(d.sum(0)) / norm
    order = np.argsort(-t, kind="stable")
    flips = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
    tp = (np.abs(flips @ d) / norm)[:, order]
    raw = np.array([(tp[:, pos:].max(1) >= t[order][pos] - 1e-12).mean() for pos in range(k)])
    out = np.empty(k)
    out[order] = np.maximum.accumulate(raw)
    return out, raw


def test_maxt_matches_plain_loop():
    rng = np.random.default_rng(8)
    a, b = _binary(rng, 30, 7), _binary(rng, 30, 7)
    d = a - b
    d[:, 3] = 0.0  # an element with no discordant pair: T = 0, p = 1
    t, p = paired.maxt_stepdown(d, permutations=517, seed=3)
    t_ref, p_ref = _plain_maxt(d, 517, 3)
    np.testing.assert_allclose(t, t_ref, rtol=1e-12)
    np.testing.assert_allclose(p, p_ref, rtol=1e-12)
    assert p[3] == 1.0


@pytest.mark.parametrize("kind", ["real", "binary"])
def test_maxt_matches_exhaustive_enumeration(kind):
    """n = 10 pairs: all 1024 sign flips give the exact step-down p. With B = 20,000 random flips
    each raw step-down p is (1 + Bin(B, p_exact)) / (1 + B): its error is at most
    4.5 · √(p(1 − p)/B) + 1/B (a binomial tail of ~7e-6 per element, ~4e-5 over 6 elements), and
    the step-down's running maximum cannot enlarge the largest error."""
    rng = np.random.default_rng(9)
    n, k = 10, 6
    if kind == "real":
        d = correlated_orbit(n, np.array([0.9, 0.5, 0.3, 0.0, -0.2, 0.6]), rho=0.8, binary=False, rng=rng)
    else:
        d = _binary(rng, n, k) - _binary(rng, n, k)
        d[:, 0] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 0]  # a strong element
        d[:, 1] = [1, 1, 0, 1, 0, 1, 1, 1, 0, 0]
    d = d[:, np.sqrt((d ** 2).sum(0)) > 0]
    exact, raw = _exact_maxt(d)
    B = 20_000
    _, mc = paired.maxt_stepdown(d, permutations=B, seed=1)
    tol = 4.5 * np.sqrt(np.maximum(raw * (1 - raw), 1 / B) / B) + 1 / B
    order = np.argsort(-(np.abs(d.sum(0)) / np.sqrt((d ** 2).sum(0))), kind="stable")
    assert np.all(np.abs(mc - exact)[order] <= np.maximum.accumulate(tol)), (mc, exact)
    assert exact.min() < 0.05  # the data carry a signal, so small p-values are compared too


def test_permutation_invariance_matches_plain_loop():
    rng = np.random.default_rng(10)
    x = correlated_orbit(15, np.linspace(0, 0.5, 5), rho=0.5, binary=False, rng=rng)
    x[4, 1] = np.nan  # a row with NaN is left out
    stat, perms, p = invariance.permutation_invariance(x, permutations=300, seed=2)
    y = x[~np.isnan(x).any(1)]
    t_stat = lambda m: float(np.sum((m.mean(0) - m.mean()) ** 2))  # noqa: E731
    r = np.random.default_rng(2)
    exceed = 0
    for _ in range(300):
        perm = np.array([r.permutation(row) for row in y])  # the same stream as Generator.permuted(axis=1)
        exceed += t_stat(perm) >= t_stat(y) - 1e-12
    assert stat == pytest.approx(t_stat(y), rel=1e-12) and perms == 300
    assert p == (1 + exceed) / 301


def test_permutation_invariance_matches_exhaustive_enumeration():
    """4 rows × 3 elements: 6^4 = 1296 within-row arrangements give the exact p; with B = 20,000
    random ones, |p_MC − p_exact| ≤ 4.5 · √(p(1 − p)/B) + 1/B."""
    x = np.array([[0.9, 0.1, 0.3], [0.8, 0.5, 0.0], [1.0, 0.2, 0.4], [0.3, 0.6, 0.1]])
    t_stat = lambda m: float(np.sum((m.mean(0) - m.mean()) ** 2))  # noqa: E731
    t0 = t_stat(x)
    perms = list(itertools.permutations(range(3)))
    hits = sum(t_stat(np.array([row[list(pi)] for row, pi in zip(x, combo)])) >= t0 - 1e-12
               for combo in itertools.product(perms, repeat=4))
    exact = hits / 6 ** 4
    B = 20_000
    _, _, p = invariance.permutation_invariance(x, permutations=B, seed=0)
    assert abs(p - exact) <= 4.5 * math.sqrt(exact * (1 - exact) / B) + 1 / B, (p, exact)
    assert exact < 0.2


# ----------------------------------------------------------------- on a real evaluation


@pytest.fixture(scope="module")
def evaluated():
    import orbitscope as osc

    sys.path.insert(0, str(Path(__file__).parent))
    from helpers import CentroidNet

    train = osc.mnist_subset("train")
    x = train.images.astype(np.float32) / 255.0
    net = CentroidNet(np.stack([x[train.labels == c].mean(0) for c in range(10)]), scale=0.2).eval()
    data = osc.mnist_subset("test").stratified(5)
    rot = osc.evaluate(net, data, osc.Rotation(range(0, 361, 30))).result
    prod = osc.evaluate(net, osc.mnist_subset("test").stratified(2),
                        osc.Product(osc.Rotation([0, 90, 180]), osc.Scale([1.0, 0.8]))).result
    return rot, prod


def test_orbit_values_matches_the_xarray(evaluated):
    from orbitscope.stats import orbit_values

    rot, prod = evaluated
    ov = orbit_values(rot)
    assert ov.metric == "correct" and ov.binary and not ov.lower_is_better
    np.testing.assert_array_equal(ov.values, rot.data["correct"].transpose("sample", "angle").values.astype(float))
    assert ov.values.dtype == np.float64 and ov.shape == (13,) and ov.dims == ("angle",)
    assert ov.identity == 0 and rot.data["angle"].values[ov.identity] == 0.0
    np.testing.assert_array_equal(ov.samples, rot.data["sample"].values)
    for k in range(ov.n_elements):
        assert ov.where(k) == {"angle": float(rot.data["angle"].values[k])}
    conf = orbit_values(rot, "confidence")
    assert not conf.binary
    np.testing.assert_allclose(conf.values, rot.data["confidence"].transpose("sample", "angle").values, rtol=0)
    mask = rot.data["label"].values == 3
    sub = orbit_values(rot, subset=mask)
    np.testing.assert_array_equal(sub.values, ov.values[mask])
    np.testing.assert_array_equal(sub.samples, ov.samples[mask])
    np.testing.assert_array_equal(orbit_values(rot, subset=[4, 0, 9]).values, ov.values[[0, 4, 9]])  # positions

    # a 2-D orbit: element k is np.unravel_index(k, shape) in C order over (angle, scale)
    pv = orbit_values(prod)
    assert pv.dims == ("angle", "scale") and pv.shape == (3, 2)
    da = prod.data["correct"]
    for k in range(6):
        i, j = np.unravel_index(k, pv.shape)
        np.testing.assert_array_equal(pv.values[:, k], da.isel(angle=i, scale=j).values)
        assert pv.where(k) == {"angle": float(da["angle"].values[i]), "scale": float(da["scale"].values[j])}
    assert pv.where(pv.identity) == {"angle": 0.0, "scale": 1.0}
    np.testing.assert_array_equal(pv.reshape(np.arange(6)), np.arange(6).reshape(3, 2))


@pytest.mark.parametrize("metric", ["correct", "confidence"])
def test_simultaneous_band_pointwise_columns_match_aggregate(evaluated, metric):
    from orbitscope import aggregate
    from orbitscope.stats import orbit_values, simultaneous_band

    rot, _ = evaluated
    for subset in (None, rot.data["label"].values >= 5):
        sb = simultaneous_band(rot, metric, subset=subset, resamples=500)
        agg = aggregate(rot, metric, subset=subset)
        np.testing.assert_allclose(sb["pointwise_lower"].values, agg["lower"].values, rtol=1e-12)
        np.testing.assert_allclose(sb["pointwise_upper"].values, agg["upper"].values, rtol=1e-12)
        np.testing.assert_allclose(sb["mean"].values, agg["mean"].values, rtol=1e-6)
        assert sb.attrs["pointwise_method"] == agg.attrs["method"] and sb.attrs["n"] == agg.attrs["n"]
        # the simultaneous band contains the pointwise one (its level is higher at every element)
        assert np.all(sb["lower"].values <= sb["pointwise_lower"].values + 1e-12)
        assert np.all(sb["upper"].values >= sb["pointwise_upper"].values - 1e-12)
        ov = orbit_values(rot, metric, subset=subset)
        band = bands.band_of(ov, resamples=500)
        lower = np.clip(band.lower, 0, 1)
        np.testing.assert_allclose(sb["lower"].values, lower)
        assert sb.attrs["critical"] == band.critical


def test_one_element_band_is_the_pointwise_interval():
    """With one element the sup-t critical value is z_{0.975} (the bootstrap of one mean never
    exceeds it), so the band must be the pointwise interval at 95 %: the Student-t interval for
    a real metric and Clopper–Pearson for a binary one. (The normal-scale band m ± 1.96·s/√n
    used before was narrower than the pointwise t interval the plots draw next to it.)"""
    from orbitscope.results.intervals import mean_interval

    rng = np.random.default_rng(12)
    x = rng.normal(0.3, 1.0, (10, 1))
    band = bands.sup_t_band(x, resamples=500)
    assert band.critical == pytest.approx(stats.norm.ppf(0.975))
    _, lo, hi = mean_interval(x)
    np.testing.assert_allclose([band.lower[0], band.upper[0]], [lo[0], hi[0]], rtol=1e-10)
    y = (rng.random((40, 1)) < 0.8).astype(float)
    band = bands.sup_t_band(y, binary=True, resamples=500)
    assert band.critical >= stats.norm.ppf(0.975)  # = z, or a step above it (a discrete bootstrap)
    ref = sm_proportion.proportion_confint(int(y.sum()), 40, alpha=2 * stats.norm.sf(band.critical), method="beta")
    np.testing.assert_allclose([band.lower[0], band.upper[0]], ref, rtol=1e-10)
    d = rng.normal(0.1, 0.5, (12, 1))
    band = bands.difference_band(d, from_binary=False, resamples=500)
    _, lo, hi = mean_interval(d)
    np.testing.assert_allclose([band.lower[0], band.upper[0]], [lo[0], hi[0]], rtol=1e-10)
