"""Views over stored results read them chunk by chunk (issue 12): per-sample orbit summaries,
rankings, consensus and invariance measures equal the in-memory computations; embeddings of
large runs fit a stated, seeded subsample; the report and the interface say so."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.analysis.consensus import invariance_measures, with_consensus
from orbitscope.analysis.ranking import rank_differences, rank_samples
from orbitscope.analysis.reduce import embed, orbit_statistic, orbit_vectors
from orbitscope.app import AppData, Event
from orbitscope.app import callbacks as cb
from orbitscope.viz.report import summary_rows

ANGLES = [0, 45, 90, 180, 270, 360]


def _models() -> list[nn.Module]:
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        out.append(nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.Tanh(), nn.Linear(10, 10)).eval())
        with torch.no_grad():
            out[-1][-1].weight.mul_(8.0)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    home = tmp_path_factory.mktemp("views")
    data = osc.mnist_subset("test").stratified(5)
    task = osc.Classification(store_probabilities=True)
    stored = [osc.evaluate(m, data, osc.Rotation(ANGLES), task, store=home, batch_size=9, name=f"m{i}").result
              for i, m in enumerate(_models())]
    memory = [osc.evaluate(m, data, osc.Rotation(ANGLES), task, batch_size=9).result for m in _models()]
    assert all(r.source is not None for r in stored) and all(r.source is None for r in memory)
    return stored, memory


def test_orbit_statistics_and_rankings_equal_the_in_memory_ones(runs):
    (a, b), (ma, mb) = runs
    for stat in ("mean", "variance", "std", "min", "max"):
        ref = getattr(np, {"variance": "var"}.get(stat, stat))(ma.confidence.values.astype(np.float64), axis=1)
        np.testing.assert_array_equal(orbit_statistic(a, "confidence", stat), ref)
    for by in ("worst", "best", "most_variable"):
        np.testing.assert_array_equal(rank_samples(a, "confidence", by).indices, rank_samples(ma, "confidence", by).indices)
    for by in ("abs", "a_worse", "b_worse"):
        lazy, eager = rank_differences(a, b, "confidence", by), rank_differences(ma, mb, "confidence", by)
        np.testing.assert_array_equal(lazy.indices, eager.indices)
        np.testing.assert_allclose(lazy.scores, eager.scores, rtol=1e-12)


def test_consensus_of_a_stored_result_is_lazy_and_equal(runs):
    (a, _), (ma, _) = runs
    lazy, eager = with_consensus(a), with_consensus(ma)
    assert lazy.source is not None and lazy.source.namespace.startswith("consensus")
    for name in ("consensus_agreement", "consensus_confidence", "kl_to_consensus", "tv_to_consensus",
                 "consensus_class", "consensus_probabilities"):
        np.testing.assert_array_equal(lazy.data[name].values, eager.data[name].values, err_msg=name)
    np.testing.assert_array_equal(lazy.data["kl_to_consensus"].isel(sample=[13, 2]).values,
                                  eager.data["kl_to_consensus"].values[[13, 2]])
    agg_l, agg_e = osc.aggregate(lazy, "consensus_agreement"), osc.aggregate(eager, "consensus_agreement")
    np.testing.assert_array_equal(agg_l["mean"].values, agg_e["mean"].values)
    inv_l, inv_e = invariance_measures(a), invariance_measures(ma)
    for name in inv_e.data_vars:
        np.testing.assert_array_equal(inv_l[name].values, inv_e[name].values, err_msg=str(name))
    assert inv_l.attrs == inv_e.attrs


def test_summary_rows_of_stored_and_in_memory_results_agree(runs):
    (a, b), (ma, mb) = runs
    lazy, eager = summary_rows([a, b], ["a", "b"]), summary_rows([ma, mb], ["a", "b"])
    for rl, re in zip(lazy, eager):
        assert rl.keys() == re.keys()
        for k in rl:
            if isinstance(rl[k], float):
                assert rl[k] == pytest.approx(re[k], rel=1e-12, abs=1e-15), k
            else:
                assert rl[k] == re[k], k


def test_embedding_above_max_samples_fits_a_stated_seeded_subsample(runs):
    (a, _), _ = runs
    emb = embed(a, "confidence", "pca", max_samples=12, seed=3)
    assert emb.subsampled and emb.n_samples == 12 and np.all(np.diff(emb.positions) > 0)
    assert any("subsampled: 12 of 50" in n for n in emb.notes)
    np.testing.assert_array_equal(emb.sample, a.data["sample"].values[emb.positions])
    direct = embed(orbit_vectors(a, "confidence")[emb.positions], method="pca", seed=3, max_samples=None)
    np.testing.assert_allclose(np.abs(emb.coords), np.abs(direct.coords), atol=1e-10)  # PCA signs may flip
    again = embed(a, "confidence", "pca", max_samples=12, seed=3)
    np.testing.assert_array_equal(again.positions, emb.positions)  # seeded
    assert not embed(a, "confidence", "pca").subsampled  # 50 < 5,000


def test_interface_scatter_of_a_large_run_draws_a_subsample_and_says_so(tmp_path):
    """6,000 samples: above the embedding's 5,000-sample limit."""
    rng = np.random.default_rng(0)
    x = rng.random((6000, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 3, 6000)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()
    run = osc.evaluate(model, (x, y), osc.Rotation([0, 90, 180]), store=tmp_path, batch_size=1000, name="big")
    data = AppData(osc.Store(tmp_path, create=False), ttl=0.0)
    group = data.groups()[0]
    controls = cb.parse_controls(group.key, [run.run_id], "confidence", "all", "pca", "mean", "worst", [])
    up = cb.update_selection(data, None, controls, Event("context"))
    fig, title, visible = cb.scatter_panels(data, up.selection)[0]
    trace = fig["data"][0]
    assert visible and len(trace["customdata"]) == 5000
    assert "5,000 of 6,000, subsampled" in fig["layout"]["title"]["text"]
    stat = orbit_statistic(run.result, "confidence", "mean")
    drawn = np.asarray(trace["customdata"])
    colour = trace["marker"]["color"]
    if isinstance(colour, dict):  # plotly's typed-array encoding
        import base64

        colour = np.frombuffer(base64.b64decode(colour["bdata"]), dtype=colour["dtype"])
    np.testing.assert_allclose(np.asarray(colour, dtype=float), stat[drawn])
    hidden = int(np.setdiff1d(np.arange(6000), drawn)[0])  # a sample not drawn: selecting it draws no ring
    up2 = cb.update_selection(data, up.selection, controls, Event("sample", 0, hidden))
    assert cb.scatter_panels(data, up2.selection)[0][0]["layout"].get("annotations") in (None, [])


def test_a_second_interface_page_load_draws_the_aggregate_plot_from_the_cache(tmp_path, monkeypatch):
    """The aggregate NERO plot of a stored run is computed once (streamed) and then read from the
    store's cache: a fresh interface process draws it without reading any chunk."""
    data = osc.mnist_subset("test").stratified(4)
    run = osc.evaluate(_models()[0], data, osc.Rotation(ANGLES), store=tmp_path, batch_size=8, name="m")

    def page(app: AppData) -> dict:
        group = app.groups()[0]
        controls = cb.parse_controls(group.key, [run.run_id], "confidence", "all", "pca", "mean", "worst", [])
        up = cb.update_selection(app, None, controls, Event("context"))
        return cb.aggregate_figure(app, up.selection)

    first = page(AppData(osc.Store(tmp_path, create=False), ttl=0.0))
    mean = run.result.load().confidence.values.astype(np.float64).mean(0)
    import orbitscope.results.lazy as lazy

    def no_reading(f, **kw):
        raise AssertionError(f"read {f.path}")

    monkeypatch.setattr(lazy, "read_chunk_file", no_reading)
    again = page(AppData(osc.Store(tmp_path, create=False), ttl=0.0))
    assert [t.get("r", t.get("y")) for t in again["data"]] == [t.get("r", t.get("y")) for t in first["data"]]
    drawn = [t for t in first["data"] if t.get("name") == "m"][0]
    values = drawn.get("r", drawn.get("y"))
    if isinstance(values, dict):
        import base64

        values = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
    np.testing.assert_allclose(np.asarray(values, dtype=float)[: len(mean)], mean, rtol=1e-12)
