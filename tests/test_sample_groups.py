"""Per-sample groups a dataset declares (``sample_groups``) are recorded by ``evaluate`` and split
results: checked against masks and means computed here with numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

import orbitscope as osc
from orbitscope.analysis.nero import sample_groups
from orbitscope.app.views.flow import FlowView
from orbitscope.data.piv import piv_synthetic
from orbitscope.errors import DataError
from orbitscope.group.parse import parse_orbit
from orbitscope.models.flow_estimators import HornSchunck
from orbitscope.results.result import aggregate
from orbitscope.results.store import Store
from orbitscope.tasks import Flow
from orbitscope.viz.report import write_report

N = 7
SITES = np.array(["north", "south", "north", "east", "south", "north", "east"])
BATCHES = np.array([3, 1, 3, 2, 1, 1, 2])


class Images(Dataset):
    """Seeded 1 × 8 × 8 images with labels 0..2; ``groups`` becomes ``sample_groups`` if given."""

    def __init__(self, groups: object = None) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(N, 1, 8, 8, generator=g)
        self.y = torch.arange(N) % 3
        self.data_id = "test-groups-images"
        if groups is not None:
            self.sample_groups = groups

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.Flatten(), nn.Linear(3 * 6 * 6, 3))


GROUPS = {"site": SITES, "batch": BATCHES}


@pytest.mark.parametrize("stored", [False, True])
def test_groups_are_recorded_per_sample_and_split_aggregates(tmp_path, stored: bool) -> None:
    run = osc.evaluate(_model(), Images(GROUPS), "rotation90", batch_size=3, store=tmp_path if stored else None)
    res = run.result
    groups = sample_groups(res)
    assert sorted(groups) == ["batch", "site"]
    np.testing.assert_array_equal(groups["site"], SITES)
    np.testing.assert_array_equal(groups["batch"], BATCHES)
    assert res.meta("site").kind == "state" and not res.meta("site").needs_labels
    confidence = res.data["confidence"].values  # (sample, angle)
    agg = aggregate(res, "confidence", by="site")
    for site in np.unique(SITES):
        np.testing.assert_allclose(agg["mean"].sel(site=site).values, confidence[SITES == site].mean(axis=0),
                                   rtol=1e-6)
    np.testing.assert_array_equal(agg["n"].values, [np.sum(SITES == s) for s in agg["site"].values])


def test_groups_change_the_run_id_but_no_recorded_value(tmp_path) -> None:
    plain = osc.evaluate(_model(), Images(), "rotation90", batch_size=3)
    grouped = osc.evaluate(_model(), Images(GROUPS), "rotation90", batch_size=3)
    assert plain.run_id != grouped.run_id  # a run without the groups is not reused for one with them
    assert sample_groups(plain.result) == {}
    for name in plain.result.data.data_vars:
        np.testing.assert_array_equal(plain.result.data[name].values, grouped.result.data[name].values)


def test_a_resumed_run_records_the_groups_of_every_chunk(tmp_path) -> None:
    class Stop(Exception):
        pass

    def stop_after_first(done: int, total: int | None) -> None:
        if done < (total or 0):
            raise Stop

    with pytest.raises(Stop):
        osc.evaluate(_model(), Images(GROUPS), "rotation90", batch_size=3, store=tmp_path, progress=stop_after_first)
    run = osc.evaluate(_model(), Images(GROUPS), "rotation90", batch_size=3, store=tmp_path)
    assert not run.reused
    np.testing.assert_array_equal(Store(tmp_path).load(run.run_id).data["site"].values, SITES)


@pytest.mark.parametrize("groups, match", [
    (["north"] * N, "must be a dict"),
    ({"site": SITES[:5]}, "one label per item"),
    ({"site": np.linspace(0, 1, N)}, "strings or integers"),
    ({"two words": SITES}, "identifiers"),
])
def test_bad_groups_are_refused_with_what_to_give(groups: object, match: str) -> None:
    with pytest.raises(DataError, match=match):
        osc.evaluate(_model(), Images(groups), "rotation90", batch_size=3)


def test_the_report_has_one_plot_per_group_value(tmp_path) -> None:
    res = osc.evaluate(_model(), Images({"site": SITES}), "rotation90", batch_size=3).result
    text = write_report([res], tmp_path / "r.html").read_text()
    assert "Aggregate plots per site" in text
    for site in np.unique(SITES):
        assert f"site {site} ({np.sum(SITES == site)} samples)" in text


def test_piv_pairs_record_their_flow_type_and_the_flow_view_offers_it() -> None:
    data = piv_synthetic(n=5, size=24, flow_types=("uniform", "rankine"), seed=2)
    res = osc.evaluate(HornSchunck(iterations=5), data, "d4xtime", Flow(), batch_size=2).result
    np.testing.assert_array_equal(sample_groups(res)["flow_type"], data.flow_type)
    view = FlowView()
    assert view.subset_options([res]) == [("flow type rankine", 0), ("flow type uniform", 1)]
    np.testing.assert_array_equal(view.subset_mask([res], 0, False), data.flow_type == "rankine")


def test_d4xtime_names_the_same_orbit_as_d4xt() -> None:
    assert parse_orbit("d4xtime").spec() == parse_orbit("d4xt").spec()


def test_the_report_names_a_group_with_too_many_values_instead_of_drawing_it(tmp_path, monkeypatch) -> None:
    from orbitscope.viz import report

    monkeypatch.setattr(report, "MAX_GROUP_PLOTS", 2)
    res = osc.evaluate(_model(), Images({"site": SITES}), "rotation90", batch_size=3).result
    text = write_report([res], tmp_path / "r.html").read_text()
    assert "3 distinct values, more than 2: not drawn" in text and "site north (" not in text


def test_a_group_named_like_a_recorded_variable_is_refused() -> None:
    with pytest.raises(DataError, match="'label' would replace a recorded variable"):
        osc.evaluate(_model(), Images({"label": SITES}), "rotation90", batch_size=3)


def test_other_group_labels_make_another_run(tmp_path) -> None:
    first = osc.evaluate(_model(), Images({"site": SITES}), "rotation90", batch_size=3, store=tmp_path)
    other = osc.evaluate(_model(), Images({"site": SITES[::-1]}), "rotation90", batch_size=3, store=tmp_path)
    assert first.run_id != other.run_id and not other.reused
    np.testing.assert_array_equal(sample_groups(other.result)["site"], SITES[::-1])


def test_an_empty_dataset_with_groups_says_it_is_empty() -> None:
    class Empty(Dataset):
        data_id = "empty"
        sample_groups = {"site": []}

        def __len__(self) -> int:
            return 0

        def __getitem__(self, i: int):
            raise IndexError(i)

    with pytest.raises(DataError, match="empty"):
        osc.evaluate(_model(), Empty(), "rotation90", batch_size=3)
