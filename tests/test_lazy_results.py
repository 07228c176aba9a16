"""Lazy results over the store and streaming aggregates (issue 12).

References are independent of the code under test: plain numpy indexing of the eagerly loaded
arrays, numpy's nanmean / nanstd, scipy's t quantiles and statsmodels' Wilson interval.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats
from statsmodels.stats.proportion import proportion_confint
from torch import nn

import orbitscope as osc
from orbitscope.data import mnist_subset
from orbitscope.errors import DamagedRunError
from orbitscope.results.lazy import ChunkBounds, RowChunkedArray, lazy_variable
from orbitscope.results.streaming import Moments

from helpers import assert_matches_stored, fixture_linear_model

DATA = Path(__file__).parent / "data"


class Scripted(nn.Module):
    """Logits that depend on the image and on how it was transformed (so every cell differs)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.fc = nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)) * 4.0


@pytest.fixture(scope="module")
def digits():
    return mnist_subset("test").stratified(6)  # 60 digits, 6 per class


@pytest.fixture(scope="module")
def stored(digits, tmp_path_factory):
    home = tmp_path_factory.mktemp("lazy") / "store"
    task = osc.Classification(store_probabilities=True)
    run = osc.evaluate(Scripted(), digits, osc.Rotation([0, 30, 90, 180, 270]), task, store=home, batch_size=7)
    mem = osc.evaluate(Scripted(), digits, osc.Rotation([0, 30, 90, 180, 270]), task, batch_size=7)
    return osc.Store(home), run, mem


def test_evaluate_and_load_return_lazy_results_equal_to_eager_ones(stored):
    store, run, mem = stored
    lazy = store.load(run.run_id)
    eager = store.load(run.run_id, lazy=False)
    assert lazy.source is not None and len(lazy.source.bounds) == 9  # 60 samples in chunks of 7
    for name in mem.result.data.data_vars:
        ref = mem.result.data[name].values
        for res in (run.result, lazy, eager):
            got = res.data[name].values
            assert got.dtype == ref.dtype and got.shape == ref.shape, name
            np.testing.assert_array_equal(got, ref, err_msg=name)
    assert lazy.equals(mem.result) and eager.equals(mem.result)


@pytest.mark.parametrize("select", [
    dict(sample=slice(3, 25)),
    dict(sample=slice(2, 60, 9)),
    dict(sample=[41, 2, 17, 3, 16]),  # unsorted, across chunks
    dict(sample=6), dict(sample=-1),
    dict(angle=2), dict(angle=[4, 0]),
    dict(sample=[8, 9, 10], angle=slice(1, 3), **{"class": [7, 1]}),
])
def test_selections_read_only_what_they_need_and_equal_numpy_indexing(stored, select):
    store, run, mem = stored
    lazy = store.load(run.run_id).data["probabilities"]
    ref = mem.result.data["probabilities"].values
    got = lazy.isel(**select).values
    dims = ("sample", "angle", "class")
    key = tuple(select.get(d, slice(None)) for d in dims)
    want = ref
    for axis in reversed(range(3)):  # outer indexing, axis by axis
        k = key[axis]
        want = want[(slice(None),) * axis + (k,)] if not isinstance(k, list) else np.take(want, k, axis=axis)
    np.testing.assert_array_equal(got, want)


def test_label_selection_and_a_class_subset(stored):
    store, run, mem = stored
    lazy = store.load(run.run_id)
    np.testing.assert_array_equal(lazy.confidence.sel(angle=90).values, mem.result.confidence.sel(angle=90).values)
    np.testing.assert_array_equal(lazy.probabilities.sel(sample=[5, 50], **{"class": 3}).values,
                                  mem.result.probabilities.values[[5, 50], :, 3])


def test_only_the_chunks_holding_the_selection_are_read(stored, monkeypatch):
    store, run, _ = stored
    import orbitscope.results.lazy as store_module

    read = []
    real = store_module.read_chunk_file
    monkeypatch.setattr(store_module, "read_chunk_file", lambda f, **kw: read.append(f.chunk) or real(f, **kw))
    lazy = store.load(run.run_id)
    lazy.confidence.isel(sample=slice(15, 20)).values  # chunk 2 holds samples 14..20
    assert read == [2]


def test_a_stored_result_is_read_only_and_load_gives_a_modifiable_copy(stored):
    store, run, _ = stored
    lazy = store.load(run.run_id)
    with pytest.raises(TypeError, match="read-only"):
        lazy.data["confidence"][0, 0] = 0.5
    before = float(lazy.confidence[0, 0])
    mine = lazy.load()
    mine.data["confidence"][0, 0] = 0.5
    assert mine.source is None and float(mine.confidence[0, 0]) == 0.5
    assert float(lazy.confidence[0, 0]) == before == float(store.load(run.run_id).confidence[0, 0])


def test_ragged_chunks_are_padded_like_the_in_memory_join():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(size=(3, k, 4)).astype(np.float32) for k in (2, 0, 5, 1)]
    arr = RowChunkedArray((12, 5, 4), np.float32, ChunkBounds.from_sizes([3, 3, 3, 3]), lambda i: chunks[i], fill=np.nan)
    import xarray as xr

    var = xr.Variable(("sample", "box", "coord"), lazy_variable(arr))
    want = np.concatenate([np.pad(c, [(0, 0), (0, 5 - c.shape[1]), (0, 0)], constant_values=np.nan) for c in chunks])
    np.testing.assert_array_equal(var.values, want)
    np.testing.assert_array_equal(var[[10, 1, 4]].values, want[[10, 1, 4]])


# --------------------------------------------------------------------------- streaming aggregates


def test_moments_merge_matches_numpy_and_is_stable_where_the_textbook_formula_is_not():
    rng = np.random.default_rng(1)
    x = 1e9 + rng.normal(0, 1, size=(5000, 3))
    x[rng.random(x.shape) < 0.05] = np.nan
    m = Moments.empty((3,))
    for part in np.array_split(x, 37):
        m = m.update(part)
    np.testing.assert_array_equal(m.n, np.sum(~np.isnan(x), axis=0))
    np.testing.assert_allclose(m.mean_or_nan(), np.nanmean(x, axis=0), rtol=1e-15)
    import statistics  # exact (rational) arithmetic on the float64 values

    exact = np.array([statistics.variance(col[~np.isnan(col)].tolist()) for col in x.T])
    np.testing.assert_allclose(m.variance(ddof=1), exact, rtol=1e-7)
    # the sum-of-squares formula loses every digit here
    s1, s2, n = np.nansum(x, 0), np.nansum(x * x, 0), m.n
    naive = (s2 - s1 * s1 / n) / (n - 1)
    assert np.max(np.abs(naive / np.nanvar(x, axis=0, ddof=1) - 1)) > 0.5


def test_one_chunk_moments_equal_numpy_bit_for_bit():
    x = np.random.default_rng(2).random((300, 4))
    m = Moments.of(x)
    assert np.array_equal(m.mean, np.nanmean(x, 0)) and np.array_equal(np.sqrt(m.variance()), np.nanstd(x, 0, ddof=1))


def test_streaming_aggregates_equal_independent_references(stored):
    store, run, mem = stored
    lazy = store.load(run.run_id)
    conf = mem.result.confidence.values.astype(np.float64)
    agg = osc.aggregate(lazy, "confidence")
    n = conf.shape[0]
    mean, sd = conf.mean(0), conf.std(0, ddof=1)
    lo, hi = stats.t.interval(0.95, n - 1, loc=mean, scale=sd / np.sqrt(n))
    np.testing.assert_allclose(agg["mean"].values, mean, rtol=1e-12)
    np.testing.assert_allclose(agg["lower"].values, np.clip(lo, 0, 1), rtol=1e-10)
    np.testing.assert_allclose(agg["upper"].values, np.clip(hi, 0, 1), rtol=1e-10)
    correct = mem.result.correct.values
    acc = osc.aggregate(lazy, "correct", level=0.9)
    k = correct.sum(0)
    np.testing.assert_array_equal(acc["mean"].values, k / n)  # counts are exact
    wl, wh = proportion_confint(k, n, alpha=0.1, method="wilson")
    np.testing.assert_allclose(acc["lower"].values, wl, atol=1e-12)
    np.testing.assert_allclose(acc["upper"].values, wh, atol=1e-12)


def test_subsets_and_grouping_by_label_in_one_pass(stored):
    store, run, mem = stored
    lazy = store.load(run.run_id)
    labels = mem.result.label.values
    conf = mem.result.confidence.values.astype(np.float64)
    grouped = osc.aggregate(lazy, "confidence", by="label")
    assert list(grouped["label"].values) == sorted(set(labels.tolist()))
    for c in range(10):
        one = osc.aggregate(lazy, "confidence", subset=labels == c)
        np.testing.assert_allclose(one["mean"].values, conf[labels == c].mean(0), rtol=1e-12)
        np.testing.assert_allclose(grouped["mean"].sel(label=c).values, one["mean"].values, rtol=1e-12)
        np.testing.assert_allclose(grouped["lower"].sel(label=c).values, one["lower"].values, rtol=1e-10)
        assert int(grouped["n"].sel(label=c)) == one.attrs["n"] == 6
    positions = np.flatnonzero(labels == 4)[::-1]  # positions, in any order
    np.testing.assert_allclose(osc.aggregate(lazy, "confidence", subset=positions)["mean"].values,
                               conf[labels == 4].mean(0), rtol=1e-12)
    with pytest.raises(ValueError, match="twice"):
        osc.aggregate(lazy, "confidence", subset=[1, 1, 2])


def test_aggregates_are_cached_in_the_store_and_invalidated_when_chunks_change(stored, monkeypatch, tmp_path):
    store, run, mem = stored
    home = tmp_path / "copy"
    shutil.copytree(store.home, home)
    st = osc.Store(home)
    first = osc.aggregate(st.load(run.run_id), "confidence", by="label")
    import orbitscope.results.lazy as store_module

    def no_reading(f, **kw):
        raise AssertionError(f"chunk {f.chunk} of {f.path.parent.name} was read")

    monkeypatch.setattr(store_module, "read_chunk_file", no_reading)
    again = osc.aggregate(st.load(run.run_id), "confidence", by="label")  # from the cache
    assert again.identical(first)
    with pytest.raises(AssertionError, match="was read"):  # a new aggregate has to read
        osc.aggregate(st.load(run.run_id), "entropy")
    monkeypatch.undo()
    # rewrite chunk 0 with other values: the cached aggregate must not be served
    lazy = st.load(run.run_id, lazy=False)
    arrays = {k: lazy.data[k].values[:7] for k in lazy.data.data_vars}
    arrays["confidence"] = np.zeros_like(arrays["confidence"])
    st.write_chunk(run.run_id, 0, 0, arrays)
    changed = osc.aggregate(st.load(run.run_id), "confidence", by="label")
    conf = mem.result.confidence.values.astype(np.float64).copy()
    conf[:7] = 0
    labels = mem.result.label.values
    np.testing.assert_allclose(changed["mean"].sel(label=0).values, conf[labels == 0].mean(0), rtol=1e-12)


def test_summary_and_dataset_level_counts_are_exact(stored):
    store, run, mem = stored
    lazy = store.load(run.run_id)
    assert lazy.summary() == mem.result.summary()  # one chunk in memory vs nine on disk: counts exact


# --------------------------------------------------------------------------- stores written before


@pytest.mark.parametrize("fixture", ["store_format2", "store_d7b6042"])
def test_stores_written_by_earlier_versions_open_lazily_and_cache_aggregates(fixture, tmp_path):
    """store_format2: written at e7f1787 (before chunk checksums); store_d7b6042: by the main
    branch just before lazy results (tests/data/make_store_format2.py at each commit). Their floats
    were computed on another machine: a fresh evaluation matches them within float32 tolerance
    (helpers.assert_matches_stored); the lazy and the eager reading of one store agree exactly."""
    home = tmp_path / fixture
    shutil.copytree(DATA / fixture, home)
    st = osc.Store(home)
    rec = st.get_run("fixture-rotation")
    assert rec.run_id == "187669ed8d01fce5"
    fresh = osc.evaluate(fixture_linear_model(), mnist_subset("test").stratified(2), osc.Rotation([0, 45, 90, 180]),
                         osc.Classification(store_probabilities=True), batch_size=8)
    assert fresh.run_id == rec.run_id
    lazy, eager = st.load(rec.run_id), st.load(rec.run_id, lazy=False, verify=True)
    for k in fresh.result.data.data_vars:
        assert_matches_stored(lazy.data[k].values, fresh.result.data[k].values, err_msg=k)
        assert lazy.data[k].values.tobytes() == eager.data[k].values.tobytes(), k  # one store, two readers
    agg = osc.aggregate(lazy, "correct")
    assert_matches_stored(agg["mean"].values, fresh.result.correct.values.mean(0))
    key = lazy.source.cache_key("moments:correct:all")
    assert st.cache_get(rec.run_id, key) is not None


def test_dataset_metrics_read_only_what_the_task_computes_from(stored, monkeypatch):
    store, run, mem = stored
    import orbitscope.results.lazy as store_module

    read = set()
    real = store_module.read_chunk_file
    monkeypatch.setattr(store_module, "read_chunk_file", lambda f, **kw: read.add(f.path.parent.name) or real(f, **kw))
    lazy = osc.dataset_metrics(store.load(run.run_id))
    assert read == {"label", "correct"}  # not the inputs, not the probabilities
    np.testing.assert_array_equal(lazy["class_accuracy"].values, osc.dataset_metrics(mem.result)["class_accuracy"].values)


def test_per_sample_orbit_statistics_are_cached_too(stored, monkeypatch, tmp_path):
    from orbitscope.analysis.reduce import orbit_statistic

    store, run, mem = stored
    home = tmp_path / "copy"
    shutil.copytree(store.home, home)
    st = osc.Store(home)
    first = orbit_statistic(st.load(run.run_id), "confidence", "std")
    import orbitscope.results.lazy as store_module

    monkeypatch.setattr(store_module, "read_chunk_file", lambda f, **kw: (_ for _ in ()).throw(AssertionError("read")))
    np.testing.assert_array_equal(orbit_statistic(st.load(run.run_id), "confidence", "std"), first)
    np.testing.assert_array_equal(first, mem.result.confidence.values.astype(np.float64).std(axis=1))


# --------------------------------------------------------------------------- found in review


def _small_run(home):
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 1, 8, 8), dtype=np.float32), rng.integers(0, 3, 40)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()
    return lambda: osc.evaluate(model, (x, y), osc.Rotation([0, 90]), store=home, batch_size=7)


@pytest.mark.parametrize("damage", ["empty", "garbage header", "float64", "wrong rows"])
def test_a_damaged_checksummed_chunk_is_damaged_not_corrupt_and_re_evaluating_repairs_it(tmp_path, damage):
    """d7b6042 reported all of these as damaged and recomputed them; lazy opening must too."""
    run = _small_run(tmp_path)
    first = run()
    f = tmp_path / "runs" / first.run_id / "confidence" / "000002.npy"
    good = np.load(f)
    if damage == "empty":
        f.write_bytes(b"")
    elif damage == "garbage header":
        f.write_bytes(b"\x00" * 300)
    elif damage == "float64":
        np.save(f, good.astype(np.float64))
    else:
        np.save(f, good[:3])
    with pytest.raises(DamagedRunError, match="damaged"):
        osc.Store(tmp_path).load(first.run_id)
    again = run()
    np.testing.assert_array_equal(again.result.confidence.values, first.result.load().confidence.values)


def test_a_replaced_variable_is_neither_cached_nor_served_from_the_cache(tmp_path):
    first = _small_run(tmp_path)()
    st = osc.Store(tmp_path)
    truth = st.load(first.run_id, lazy=False).correct.values.mean(0)
    cached = st.load(first.run_id)
    cached.aggregate("correct")  # now in the store's cache
    flipped = st.load(first.run_id)
    flipped.data["correct"] = 1 - flipped.data["correct"]
    np.testing.assert_allclose(flipped.aggregate("correct")["mean"].values, 1 - truth)  # not the cached value
    np.testing.assert_allclose(st.load(first.run_id).aggregate("correct")["mean"].values, truth)  # cache unharmed
    st.clear_cache(first.run_id)
    flipped.aggregate("correct")  # computed from the replacement: must not be cached for the run
    np.testing.assert_allclose(st.load(first.run_id).aggregate("correct")["mean"].values, truth)


def test_a_run_with_no_samples_yet_aggregates_to_empty_groups(tmp_path):
    from orbitscope.analysis.consensus import invariance_measures

    first = _small_run(tmp_path)()
    st = osc.Store(tmp_path)
    st.reopen_run(first.run_id)
    with st.connection() as con:
        con.execute("DELETE FROM chunks WHERE run_id = ?", (first.run_id,))
    empty = st.load(first.run_id, allow_partial=True)
    assert empty.n_samples == 0
    assert np.isnan(empty.aggregate("correct")["mean"].values).all()
    grouped = empty.aggregate("correct", by="label")
    assert grouped["mean"].shape == (0, 2) and grouped.attrs["n"] == 0
    with pytest.raises(ValueError, match="probabilities|no samples"):
        invariance_measures(empty)
