"""Tests for NERO's dimension-reduction view (:mod:`orbitscope.analysis.reduce`, :mod:`orbitscope.viz.reduce_plots`).

Numbers are checked against independent computations written here: a direct SVD for PCA, plain
numpy for orbit statistics, Python ``sorted`` with explicit tie keys for rankings, and the raw
arrays that the figures were fed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from matplotlib.collections import PathCollection

import orbitscope as osc
from orbitscope.analysis.reduce import (
    METHODS,
    embed,
    embed_models,
    orbit_statistic,
    orbit_vectors,
    reducible_variables,
)
from orbitscope.analysis.ranking import rank_differences, rank_samples
from orbitscope.viz.reduce_plots import prepare_scatter, scatter_figure, scatter_plotly

from helpers import CentroidNet

# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------




@pytest.fixture(scope="module")
def runs() -> tuple[osc.Run, osc.Run]:
    """Two real evaluations of 60 MNIST test digits over 13 rotations (0…360° by 30°): a plain
    centroid model and one whose centroids are averaged over quarter turns (more invariant)."""
    train = osc.mnist_subset("train")
    images = train.images.astype(np.float32) / 255.0
    mu = np.stack([images[train.labels == c].mean(0) for c in range(10)])
    mu_sym = np.mean([np.rot90(mu, k, axes=(1, 2)) for k in range(4)], axis=0)
    test = osc.mnist_subset("test").subset(range(0, 1000, 16)[:60])
    orbit = osc.Rotation(range(0, 361, 30))
    a = osc.evaluate(CentroidNet(mu, scale=20.0), test, orbit, model_name="centroids")
    b = osc.evaluate(CentroidNet(mu_sym, scale=20.0), test, orbit, model_name="centroids-sym")
    return a, b


def make_result(values: np.ndarray, dims: tuple[str, ...] = ("angle",), name: str = "correct",
                sample: np.ndarray | None = None, coords: dict | None = None) -> osc.OrbitResult:
    """An OrbitResult built directly from an array (n, *orbit_shape)."""
    values = np.asarray(values)
    coords = dict(coords or {})
    for d, size in zip(dims, values.shape[1:]):
        coords.setdefault(d, np.arange(size) * 10.0)
    coords["sample"] = np.arange(values.shape[0]) if sample is None else np.asarray(sample)
    ds = xr.Dataset({name: (("sample", *dims), values)}, coords=coords,
                    attrs={"orbit_dims": json.dumps(list(dims)), "model_name": "hand", "run_id": "hand-run",
                           # the task says what its variables mean (entropy: lower is better)
                           "task": json.dumps(osc.Classification().spec())})
    return osc.OrbitResult(ds)


def same_up_to_sign(a: np.ndarray, b: np.ndarray, atol: float = 1e-8) -> bool:
    """Equal columns up to one sign flip per column (PCA axes have no preferred sign)."""
    signs = np.where(np.sum(a * b, axis=0) < 0, -1.0, 1.0)
    return a.shape == b.shape and np.allclose(a, b * signs, atol=atol)


# ---------------------------------------------------------------------------------------------
# orbit vectors and statistics
# ---------------------------------------------------------------------------------------------


def test_orbit_vectors_flatten_orbit_dims_in_c_order_whatever_the_storage_order():
    rng = np.random.default_rng(1)
    values = rng.random((4, 3, 5))  # sample, tx, ty
    res = make_result(values, ("tx", "ty"), name="confidence")
    swapped = osc.OrbitResult(res.data.transpose("sample", "ty", "tx"))
    for r in (res, swapped):
        vec = orbit_vectors(r, "confidence")
        assert vec.shape == (4, 15) and vec.dtype == np.float64
        for j in range(15):
            itx, ity = divmod(j, 5)
            np.testing.assert_array_equal(vec[:, j], values[:, itx, ity])


def test_orbit_vectors_rejects_extra_dims_and_unknown_variables():
    res = make_result(np.ones((5, 4)))
    res.data["probabilities"] = (("sample", "angle", "class"), np.ones((5, 4, 3)))
    assert reducible_variables(res) == ["correct"]
    with pytest.raises(ValueError, match="class"):
        orbit_vectors(res, "probabilities")
    with pytest.raises(KeyError, match="nope"):
        orbit_vectors(res, "nope")


@pytest.mark.parametrize("stat,ref", [("mean", np.mean), ("variance", np.var), ("std", np.std),
                                      ("min", np.min), ("max", np.max)])
def test_orbit_statistic_matches_numpy(runs, stat, ref):
    res = runs[0].result
    values = res.data["confidence"].values.astype(np.float64)
    np.testing.assert_allclose(orbit_statistic(res, "confidence", stat), ref(values, axis=1), rtol=1e-12)


def test_orbit_statistic_rejects_unknown_stat(runs):
    with pytest.raises(ValueError, match="median"):
        orbit_statistic(runs[0], "correct", "median")


# ---------------------------------------------------------------------------------------------
# embeddings
# ---------------------------------------------------------------------------------------------


def test_pca_equals_direct_svd_of_centred_vectors(runs):
    res = runs[0].result
    x = res.data["confidence"].values.astype(np.float64)
    xc = x - x.mean(axis=0)
    u, s, _ = np.linalg.svd(xc, full_matrices=False)
    emb = embed(runs[0], "confidence", "pca")
    assert emb.coords.shape == (60, 2)
    assert same_up_to_sign(emb.coords, u[:, :2] * s[:2], atol=1e-8)
    np.testing.assert_allclose(emb.explained_variance_ratio, s[:2] ** 2 / np.sum(s**2), rtol=1e-8)
    np.testing.assert_array_equal(emb.sample, res.data["sample"].values)
    assert emb.source == res.attrs["run_id"] and emb.variable == "confidence"
    # standardised: SVD of z-scored columns (the 0° and 360° columns are identical, none constant)
    z = xc / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    uz, sz, _ = np.linalg.svd(z, full_matrices=False)
    assert same_up_to_sign(embed(res, "confidence", "pca", standardize=True).coords, uz[:, :2] * sz[:2])


@pytest.mark.parametrize("method", ["ica", "isomap", "tsne"])
def test_nonlinear_and_ica_are_finite_and_seed_deterministic(runs, method):
    res = runs[0].result
    kw = {"init": "random"} if method == "tsne" else {}
    first = embed(res, "confidence", method, seed=3, **kw)
    again = embed(res, "confidence", method, seed=3, **kw)
    assert first.coords.shape == (60, 2) and np.isfinite(first.coords).all()
    assert np.ptp(first.coords, axis=0).min() > 0  # a real spread, not a collapsed output
    np.testing.assert_array_equal(first.coords, again.coords)
    assert first.params["seed"] == 3 and first.method == method
    if method == "tsne":
        other = embed(res, "confidence", method, seed=4, **kw)
        assert not np.allclose(first.coords, other.coords)


@pytest.mark.slow  # numba compiles UMAP on first use (~20 s)
def test_umap_runs_is_seed_deterministic_and_handles_tiny_inputs(runs):
    res = runs[0].result
    first = embed(res, "confidence", "umap", seed=0)
    assert first.coords.shape == (60, 2) and np.isfinite(first.coords).all()
    np.testing.assert_array_equal(first.coords, embed(res, "confidence", "umap", seed=0).coords)
    assert not np.allclose(first.coords, embed(res, "confidence", "umap", seed=1).coords)
    tiny = embed(np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]]), method="umap")
    assert tiny.coords.shape == (4, 2) and np.isfinite(tiny.coords).all()
    np.testing.assert_array_equal(tiny.coords[2], tiny.coords[3])  # duplicates coincide
    assert tiny.params["n_neighbors"] == 2 and tiny.params["init"] == "random"


@pytest.mark.parametrize("method", METHODS)
def test_identical_vectors_embed_at_the_origin(method):
    res = make_result(np.ones((12, 13), dtype=np.uint8))  # a perfectly invariant, always-right model
    emb = embed(res, "correct", method)
    np.testing.assert_array_equal(emb.coords, np.zeros((12, 2)))
    assert any("identical" in n for n in emb.notes)
    if method == "pca":
        np.testing.assert_array_equal(emb.explained_variance_ratio, [0.0, 0.0])


@pytest.mark.parametrize("method", ["pca", "ica", "isomap", "tsne"])
def test_low_rank_binary_vectors_do_not_crash(method):
    x = np.ones((20, 13))
    x[:4, 3:7] = 0  # two distinct vectors: rank 1 after centring
    emb = embed(x, method=method)
    assert emb.coords.shape == (20, 2) and np.isfinite(emb.coords).all()
    assert len({tuple(r) for r in emb.coords.round(9)}) == 2  # duplicates coincide
    if method in ("pca", "ica"):
        np.testing.assert_allclose(emb.coords[:, 1], 0.0, atol=1e-9)  # beyond the rank: zero
    else:  # exact placement of 2 distinct vectors: ±distance/2
        np.testing.assert_allclose(sorted(set(emb.coords[:, 0].round(9))), [-1.0, 1.0])
    three = x.copy()
    three[10:12, 0] = 0.5  # three distinct vectors: the method itself runs on them
    assert np.isfinite(embed(three, method=method).coords).all()


def test_tsne_perplexity_and_isomap_neighbours_are_clamped_and_recorded():
    x = np.random.default_rng(0).random((10, 6))
    emb = embed(x, method="tsne")
    assert emb.params["perplexity"] == 3.0 and emb.params["perplexity_requested"] == 30.0
    assert any("perplexity" in n for n in emb.notes)
    assert np.isfinite(emb.coords).all()
    iso = embed(x[:4], method="isomap")
    assert iso.params["n_neighbors"] == 3 and iso.params["n_neighbors_requested"] == 5
    assert embed(x, method="tsne", perplexity=2.0).params["perplexity"] == 2.0  # small enough: kept


def test_invalid_inputs_raise_clear_errors(runs):
    with pytest.raises(ValueError, match="at least 3 samples"):
        embed(np.ones((2, 5)))
    bad = np.random.default_rng(0).random((6, 4))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN.*\[2\]"):
        embed(bad)
    with pytest.raises(ValueError, match="method"):
        embed(np.ones((5, 3)), method="lda")
    with pytest.raises(ValueError, match="variable"):
        embed(runs[0].result)


def test_embed_models_per_model_and_joint(runs):
    res_a, res_b = runs[0].result, runs[1].result
    embs = embed_models([runs[0], runs[1]], "confidence", "pca", seed=0)
    assert [e.source for e in embs] == [res_a.attrs["run_id"], res_b.attrs["run_id"]]
    for e, r in zip(embs, (res_a, res_b)):
        np.testing.assert_array_equal(e.coords, embed(r, "confidence", "pca").coords)
    assert embs[0].params == embs[1].params
    joint = embed_models([res_a, res_b], "confidence", "pca", joint=True)
    stacked = np.concatenate([orbit_vectors(res_a, "confidence"), orbit_vectors(res_b, "confidence")])
    xc = stacked - stacked.mean(axis=0)
    u, s, _ = np.linalg.svd(xc, full_matrices=False)
    ref = u[:, :2] * s[:2]
    assert same_up_to_sign(np.concatenate([joint[0].coords, joint[1].coords]), ref)
    assert joint[0].params["joint"] is True and joint[1].coords.shape == (60, 2)


# ---------------------------------------------------------------------------------------------
# rankings
# ---------------------------------------------------------------------------------------------

# 8 samples × 4 orbit elements, multiples of 0.25 so that equal means are exactly equal
TIES = np.array([
    [1.0, 1.0, 1.0, 1.0],   # mean 1,    var 0
    [0.0, 0.5, 0.5, 1.0],   # mean 0.5,  var 0.125
    [0.5, 0.5, 0.5, 0.5],   # mean 0.5,  var 0
    [0.0, 0.0, 0.0, 0.0],   # mean 0,    var 0
    [1.0, 0.0, 1.0, 0.0],   # mean 0.5,  var 0.25
    [0.0, 0.0, 0.0, 0.0],   # mean 0 (tie with 3)
    [0.25, 0.75, 0.25, 0.75],  # mean 0.5, var 0.0625
    [1.0, 1.0, 1.0, 1.0],   # mean 1 (tie with 0)
])


def reference_order(scores: np.ndarray, descending: bool, positions=None) -> list[int]:
    positions = range(len(scores)) if positions is None else positions
    return sorted(positions, key=lambda i: ((-scores[i]) if descending else scores[i], i))


def test_rank_samples_matches_reference_with_ties():
    res = make_result(TIES, name="confidence")
    mean, var = TIES.mean(axis=1), TIES.var(axis=1)
    worst = rank_samples(res, "confidence", "worst")
    assert worst.indices.tolist() == reference_order(mean, False) == [3, 5, 1, 2, 4, 6, 0, 7]
    np.testing.assert_array_equal(worst.scores, mean[worst.indices])
    assert rank_samples(res, "confidence", "best").indices.tolist() == reference_order(mean, True)
    mv = rank_samples(res, "confidence", "most_variable")
    assert mv.indices.tolist() == reference_order(var, True)
    np.testing.assert_allclose(mv.scores, var[mv.indices])
    assert len(worst) == 8 and worst.rank_of(1) == 3 and worst.top(2).tolist() == [3, 5]
    with pytest.raises(ValueError, match="by"):
        rank_samples(res, "confidence", "median")


def test_rank_samples_subset_returns_full_positions_and_respects_orientation():
    sample_ids = np.arange(100, 108)
    res = make_result(TIES, name="confidence", sample=sample_ids)
    mask = np.array([True, True, False, True, False, True, True, False])
    ranked = rank_samples(res, "confidence", "worst", subset=mask)
    assert ranked.indices.tolist() == reference_order(TIES.mean(1), False, np.flatnonzero(mask))
    assert ranked.sample.tolist() == (sample_ids[ranked.indices]).tolist() and ranked.n_total == 8
    unordered = rank_samples(res, "confidence", "worst", subset=[6, 1, 5, 3])
    assert unordered.indices.tolist() == [3, 5, 1, 6]
    # entropy: lower is better, so the worst samples have the highest orbit mean
    ent = make_result(TIES, name="entropy")
    assert rank_samples(ent, "entropy", "worst").indices.tolist() == reference_order(TIES.mean(1), True)
    assert rank_samples(ent, "entropy", "worst", higher_is_better=True).indices.tolist() == \
        reference_order(TIES.mean(1), False)


def test_rank_differences_matches_reference_with_ties():
    b_values = TIES[::-1].copy()
    a, b = make_result(TIES, name="confidence"), make_result(b_values, name="confidence")
    diff = (b_values - TIES).mean(axis=1)
    ranked = rank_differences(a, b, "confidence", "a_worse")
    assert ranked.indices.tolist() == reference_order(diff, True)
    np.testing.assert_allclose(ranked.scores, diff[ranked.indices])
    assert rank_differences(a, b, "confidence", "b_worse").indices.tolist() == reference_order(-diff, True)
    absdiff = np.abs(TIES - b_values).mean(axis=1)
    assert rank_differences(a, b, "confidence", "abs").indices.tolist() == reference_order(absdiff, True)
    ea, eb = make_result(TIES, name="entropy"), make_result(b_values, name="entropy")
    assert rank_differences(ea, eb, "entropy", "a_worse").indices.tolist() == reference_order(-diff, True)


def test_rank_differences_on_real_runs(runs):
    a, b = runs[0].result, runs[1].result
    va, vb = a.data["correct"].values.astype(float), b.data["correct"].values.astype(float)
    ranked = rank_differences(a, b, "correct", "abs")
    assert ranked.indices.tolist() == reference_order(np.abs(va - vb).mean(1), True)


def test_rank_differences_requires_aligned_samples_and_orbits():
    a = make_result(TIES, name="confidence")
    with pytest.raises(ValueError, match="aligned"):
        rank_differences(a, make_result(TIES, name="confidence", sample=np.arange(1, 9)), "confidence")
    with pytest.raises(ValueError, match="aligned"):
        rank_differences(a, make_result(TIES[:7], name="confidence"), "confidence")
    shifted = make_result(TIES, name="confidence", coords={"angle": np.arange(4) * 5.0})
    with pytest.raises(ValueError, match="angle"):
        rank_differences(a, shifted, "confidence")


# ---------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------


def test_scatter_figure_draws_the_embedding(runs, tmp_path):
    res = runs[0].result
    emb = embed(res, "confidence", "pca")
    colour = orbit_statistic(res, "confidence", "mean")
    fig = scatter_figure(emb, colour, "mean confidence", "PCA of confidence", highlight=[5, 7])
    ax = fig.axes[0]
    collections = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(collections) == 1
    np.testing.assert_allclose(collections[0].get_offsets(), emb.coords)
    np.testing.assert_allclose(collections[0].get_array(), colour)
    assert len(fig.axes) == 2  # the colour bar
    ring = ax.lines[0]
    np.testing.assert_allclose(np.column_stack([ring.get_xdata(), ring.get_ydata()]), emb.coords[[5, 7]])
    assert ax.get_xlabel().startswith("PC1 (")
    fig.savefig(tmp_path / "scatter.png")
    with pytest.raises(ValueError, match="colour"):
        scatter_figure(emb, colour[:-1], "c", "t")


def test_scatter_plotly_feeds_coords_colours_and_sample_ids(runs):
    res = runs[0].result
    emb = embed(res, "correct", "pca")
    colour = orbit_statistic(res, "correct", "variance")
    fig = scatter_plotly(emb, colour, "variance of correctness", "PCA", highlight=3)
    traces = [t for t in fig.data if t.type == "scatter"]
    assert len(fig.data) == 1 and len(traces) == 1
    t = traces[0]
    np.testing.assert_allclose(np.asarray(t.x), emb.coords[:, 0])
    np.testing.assert_allclose(np.asarray(t.y), emb.coords[:, 1])
    np.testing.assert_array_equal(np.asarray(t.customdata), res.data["sample"].values)
    np.testing.assert_allclose(np.asarray(t.marker.color), colour)
    width = np.asarray(t.marker.line.width)
    assert width[3] > 0 and np.count_nonzero(width) == 1
    assert fig.layout.annotations[0].text == str(res.data["sample"].values[3])
    data = prepare_scatter(emb, colour, "v", "t", highlight=3)
    np.testing.assert_array_equal(data.x, np.asarray(t.x))
    with pytest.raises(IndexError):
        scatter_plotly(emb, colour, "v", "t", highlight=60)
