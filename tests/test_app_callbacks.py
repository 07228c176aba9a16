"""The web interface's callback functions, without a browser, against numbers computed here.

Store: 60 real MNIST digits (6 per class) × Rotation(0..360 by 30°) with class probabilities,
three models: a small random ReferenceCNN whose weights are cached in the store (live
re-evaluation works), a nearest-centroid classifier and TinyNet (neither loadable).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.app import AppData, Event, Selection, bind_warning, create_app
from orbitscope.app import callbacks as cb
from orbitscope.analysis.consensus import with_consensus
from orbitscope.analysis.ranking import rank_samples
from orbitscope.results.result import aggregate
from orbitscope.results.store import Store

from helpers import CentroidNet, TinyNet

ANGLES = range(0, 361, 30)


def build_store(home: Path, per_class: int = 6) -> dict[str, str]:
    """Evaluate three models into a new store at ``home``; cache the ReferenceCNN's weights
    under ``home/models`` (found by model hash). Returns model name -> run id."""
    data = osc.mnist_subset("test").stratified(per_class)
    train = osc.mnist_subset("train")
    x = train.images.astype(np.float32) / 255.0
    torch.manual_seed(0)
    models = {
        "ref-cnn": osc.ReferenceCNN(widths=(4, 4, 8, 8, 8, 8), hidden=16).eval(),
        "centroid": CentroidNet(np.stack([x[train.labels == c].mean(0) for c in range(10)]), scale=0.2).eval(),
        "tiny": TinyNet().eval(),
    }
    with torch.no_grad():  # sharper outputs than a fresh initialisation gives: orbit curves that vary
        models["ref-cnn"].classifier[-1].weight.mul_(40.0)
    osc.save_model(models["ref-cnn"], home / "models" / "ref-cnn.safetensors",
                   metadata={"info": {"model_hash": osc.model_hash(models["ref-cnn"])}})
    ids = {}
    for name, model in models.items():
        run = osc.evaluate(model, data, osc.Rotation(ANGLES), osc.Classification(store_probabilities=True),
                           store=home, name=name, model_name=name, batch_size=20)
        ids[name] = run.run_id
    return ids


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[AppData, dict[str, str]]:
    home = tmp_path_factory.mktemp("app-store")
    ids = build_store(home)
    return AppData(Store(home, create=False), ttl=0.0), ids


def _start(data: AppData, runs: list[str], metric: str = "confidence", **kw: object) -> tuple[Selection, cb.SelectionUpdate]:
    group = data.groups()[0].key
    controls = cb.parse_controls(group, runs, metric, kw.get("subset", "all"), kw.get("method", "pca"), "mean",
                                 kw.get("rank_by", "worst"), kw.get("label_free", []))
    return controls, cb.update_selection(data, None, controls, Event("context"))


def _values(fig: dict, role: str = "value") -> dict[str, np.ndarray]:
    out = {}
    for trace in fig["data"]:
        if (trace.get("meta") or {}).get("role") == role:
            out[trace["meta"]["series"]] = np.asarray(_array(trace.get("r", trace.get("y"))), dtype=float)
    return out


def _array(value: object) -> np.ndarray:
    """plotly may hand back numpy arrays or base64 typed arrays ({'bdata', 'dtype'})."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value)


def test_group_controls_list_runs_classes_and_live_dims(store):
    data, ids = store
    (group,) = data.groups()
    c = cb.group_controls(data, group.key)
    assert [o["value"] for o in c.model_options] == [ids["ref-cnn"], ids["centroid"], ids["tiny"]]
    assert c.models == [ids["ref-cnn"], ids["centroid"]]
    assert [o["value"] for o in c.subset_options] == ["all", *range(10)]
    assert [(d.dim, d.low, d.high) for d in c.live] == [("angle", 0.0, 360.0)]
    options, value, msg = cb.metric_controls(data, group.key, c.models, False, None)
    assert value == "confidence" and msg is None and "consensus_agreement" in [o["value"] for o in options]
    options, value, _ = cb.metric_controls(data, group.key, c.models, True, "confidence")
    assert value == "consensus_confidence" and "correct" not in [o["value"] for o in options]


@pytest.mark.parametrize("subset", ["all", 3])
def test_aggregate_figure_is_the_mean_over_samples(store, subset):
    data, ids = store
    runs = [ids["ref-cnn"], ids["centroid"]]
    _, up = _start(data, runs, subset=subset)
    fig = cb.aggregate_figure(data, up.selection)
    values, bands = _values(fig), _values(fig, "band")
    for name, run in zip(("ref-cnn", "centroid"), runs):
        res = data.store.load(run)
        conf = res.confidence.values.astype(float)
        mask = np.ones(len(conf), bool) if subset == "all" else res.label.values == subset
        np.testing.assert_allclose(values[name], conf[mask].mean(axis=0), rtol=1e-6)
        agg = aggregate(res, "confidence", subset=mask)  # band = upper, then lower reversed
        np.testing.assert_allclose(bands[name], np.concatenate([agg["upper"].values, agg["lower"].values[::-1]]),
                                   rtol=1e-6)
    assert f"n = {60 if subset == 'all' else 6}" in fig["layout"]["title"]["text"]


def test_sliders_show_the_rank_from_rank_samples(store):
    data, ids = store
    runs = [ids["ref-cnn"], ids["centroid"]]
    controls, up = _start(data, runs)
    results = [data.store.load(r) for r in runs]
    rankings = [rank_samples(r, "confidence", "worst") for r in results]
    sample = up.selection["sample"]
    assert sample == rankings[0].sample[0]  # first load: the worst sample of the first model
    for i, ranking in enumerate(rankings):
        assert up.labels[i] == f"{ranking.rank_of(sample)}/60" and up.ranks[i] == ranking.rank_of(sample)
    assert up.labels[2:] == ["", ""]
    # moving the second slider to rank 7 selects that sample; the first slider follows it
    up = cb.update_selection(data, up.selection, controls, Event("rank", 1, 7))
    sample = up.selection["sample"]
    assert sample == rankings[1].sample[6] and up.labels[1] == "7/60"
    assert up.labels[0] == f"{rankings[0].rank_of(sample)}/60"
    # next / previous on the first slider step through its ranking, clamped at the ends
    k = rankings[0].rank_of(sample)
    up = cb.update_selection(data, up.selection, controls, Event("step", 0, +1))
    assert up.selection["sample"] == rankings[0].sample[k] and up.labels[0] == f"{k + 1}/60"
    up = cb.update_selection(data, up.selection, controls, Event("rank", 0, 1))
    up = cb.update_selection(data, up.selection, controls, Event("step", 0, -1))
    assert up.labels[0] == "1/60"


def test_clicking_a_point_selects_the_sample_everywhere(store):
    data, ids = store
    runs = [ids["ref-cnn"], ids["centroid"]]
    controls, up = _start(data, runs)
    target = 17 if up.selection["sample"] != 17 else 18
    up = cb.update_selection(data, up.selection, controls, Event("sample", 0, target))
    assert up.selection["sample"] == target
    individual = _values(cb.individual_figure(data, up.selection))
    for name, run in zip(("ref-cnn", "centroid"), runs):
        stored = data.store.load(run).confidence.sel(sample=target).values
        np.testing.assert_allclose(individual[name], stored, rtol=1e-6)
    title = cb.stored_detail(data, up.selection)[0].children
    assert title.startswith(f"sample {target} · label {int(data.store.load(runs[0]).label.sel(sample=target))}")
    panels = cb.scatter_panels(data, up.selection)
    assert [p[2] for p in panels] == [True, True, False, False]
    marker = panels[0][0]["data"][0]["marker"]
    assert _array(marker["size"])[target] == 14 and _array(marker["size"]).sum() == 14 + 8 * 59
    # a sample that is not shown is refused with a message, the selection stays
    up2 = cb.update_selection(data, up.selection, controls, Event("sample", 0, 10_000))
    assert up2.selection["sample"] == target and "not among the samples" in up2.message


def test_element_click_marks_plots_and_detail_shows_stored_probabilities(store):
    data, ids = store
    runs = [ids["ref-cnn"], ids["centroid"]]
    controls, up = _start(data, runs)
    up = cb.update_selection(data, up.selection, controls, Event("element", None, {"points": [{"theta": 61.0}]}))
    assert up.selection["element"] == {"angle": 60.0} and up.live[0] == 60.0
    markers = _values(cb.aggregate_figure(data, up.selection), "marker")
    assert set(markers) == {"ref-cnn", "centroid"}
    sample = up.selection["sample"]
    detail = cb.stored_detail(data, up.selection)
    assert "angle 60°" in detail[0].children
    bars = detail[1].children[1].children.figure
    for trace, run in zip(bars["data"], runs):
        stored = data.store.load(run).probabilities.sel(sample=sample, angle=60.0).values
        np.testing.assert_allclose(trace["y"], stored, rtol=1e-6)


def test_live_reevaluation_matches_stored_values_on_the_grid(store):
    data, ids = store
    runs = [ids["ref-cnn"], ids["centroid"]]
    _, up = _start(data, runs)
    sample = up.selection["sample"]
    live = cb.live_detail(data, up.selection, [90.0])
    assert live[0].children == "live re-evaluation · angle 90°"
    body = live[1].children[1].children
    (bars,) = [c for c in body if getattr(c, "id", None) == "live-bars"]
    notes = [c.children for c in body if getattr(c, "className", None) == "note"]
    assert notes == ["centroid: model not loadable: stored values only"]
    stored = data.store.load(runs[0]).probabilities.sel(sample=sample, angle=90.0).values
    np.testing.assert_allclose(bars.figure["data"][0]["y"], stored, atol=1e-5)
    off_grid = cb.live_detail(data, up.selection, [45.0])  # between grid angles: a new evaluation
    y = np.asarray(off_grid[1].children[1].children[0].figure["data"][0]["y"])
    assert y.sum() == pytest.approx(1.0, abs=1e-5) and off_grid[0].children.endswith("angle 45°")
    clamped = cb.live_detail(data, up.selection, [1e9])  # out of range: clamped to 360°
    assert clamped[0].children.endswith("angle 360°")


def test_label_free_mode_uses_consensus(store):
    data, ids = store
    runs = [ids["centroid"], ids["ref-cnn"]]
    first = with_consensus(data.store.load(runs[0]))
    classes = first.data["consensus_class"].values
    cls = int(np.bincount(classes).argmax())
    mask = classes == cls  # subsets follow the first model's consensus class
    _, up = _start(data, runs, metric="consensus_agreement", label_free=["on"], subset=cls)
    assert up.message == ""
    values = _values(cb.aggregate_figure(data, up.selection))
    for name, run in zip(("centroid", "ref-cnn"), runs):
        agree = with_consensus(data.store.load(run)).consensus_agreement.values.astype(float)
        np.testing.assert_allclose(values[name], agree[mask].mean(axis=0))
    assert "consensus class" in cb.stored_detail(data, up.selection)[0].children
    _, bad = _start(data, runs, metric="correct", label_free=["on"])  # needs labels: refused
    assert "not available" in bad.message


@pytest.mark.parametrize("runs", [["ffffffffffffffff"], ["../../etc/passwd"], [123], ["x" * 5000], []])
def test_bad_run_ids_give_messages_not_exceptions(store, runs):
    data, ids = store
    _, up = _start(data, runs)
    assert up.selection["sample"] is None and up.message
    for fn in (cb.aggregate_figure, cb.individual_figure):
        assert fn(data, up.selection)["layout"]["meta"]["message"]
    assert cb.stored_detail(data, up.selection)[0].children == up.message
    assert cb.live_detail(data, up.selection, [30])[0].children == up.message


@pytest.mark.parametrize("selection", [None, 7, "x", {"group": 5, "runs": "abc", "sample": "NaN", "element": {"angle": "inf"}},
                                       {"runs": ["a"] * 100, "element": [1, 2]}])
def test_malformed_selections_are_harmless(store, selection):
    data, _ = store
    assert "message" in cb.aggregate_figure(data, selection)["layout"]["meta"]
    assert all(not shown or "message" in fig["layout"].get("meta", {}) for fig, _, shown in cb.scatter_panels(data, selection))
    assert Selection.from_dict(selection).sample is None


@pytest.mark.parametrize("controls", [(5, {"a": 1}, 7, "x", None, 3, [], 5), (None, "abc", None, 2.0, "tsne", "variance",
                                                                          "most_variable", ["on"])])
def test_parse_controls_accepts_anything(controls):
    sel = cb.parse_controls(*controls)
    assert isinstance(sel, Selection) and sel.method in ("pca", "tsne") and isinstance(sel.label_free, bool)


def test_unknown_group_metric_and_class(store, tmp_path):
    data, ids = store
    assert cb.group_controls(data, "nope").message.startswith("unknown run group")
    empty = AppData(Store(tmp_path / "empty"))
    assert "no runs in the store" in cb.group_controls(empty, None).message
    assert "no runs in the store" in cb.update_selection(empty, None, Selection(), Event("context")).message
    assert create_app(data=empty).layout() is not None
    _, up = _start(data, [ids["ref-cnn"]], metric="no-such-metric")
    assert "not available" in up.message
    _, up = _start(data, [ids["ref-cnn"]], subset=42)
    assert up.message == "no samples in class 42"


def test_incomplete_runs_are_listed_and_served(store, tmp_path):
    data, ids = store
    home = Path(data.home)
    done = data.store.load(ids["centroid"])
    rec = data.store.get_run(ids["centroid"])
    st = Store(home)
    for run_id, n_chunks in (("0123456789abcdef", 1), ("fedcba9876543210", 0)):  # running evaluations
        st.create_run(run_id, name=f"running-{n_chunks}", model_id=rec.model_id, data_id=rec.data_id,
                      orbit=rec.orbit, task=rec.task, layout=rec.layout, attrs=rec.attrs, n_samples=60, chunk_size=20)
        for c in range(n_chunks):
            part = done.data.isel(sample=slice(20 * c, 20 * c + 20))
            st.write_chunk(run_id, c, 20 * c, {v: part[v].values for v in rec.layout["variables"]})
    try:
        c = cb.group_controls(data, data.groups()[0].key)
        labels = {o["value"]: (o["label"], o["disabled"]) for o in c.model_options}
        assert labels["0123456789abcdef"] == ("running-1 (running: 1 chunks so far)", False)
        assert labels["fedcba9876543210"][1] is True  # nothing to show yet
        controls, up = _start(data, [ids["ref-cnn"], "0123456789abcdef"])
        assert up.message == "" and up.labels[:2] == [up.labels[0], up.labels[1]] and up.labels[0].endswith("/20")
        values = _values(cb.aggregate_figure(data, up.selection))
        ref = data.store.load(ids["ref-cnn"]).confidence.values[:20].astype(float)
        np.testing.assert_allclose(values["ref-cnn"], ref.mean(axis=0), rtol=1e-6)  # aligned on the 20 shared
        _, empty = _start(data, [ids["ref-cnn"], "fedcba9876543210"])
        assert "has no samples yet" in empty.message
    finally:
        st.delete_run("0123456789abcdef")
        st.delete_run("fedcba9876543210")


def test_bind_warning_and_serve_command(store):
    data, _ = store
    assert bind_warning("127.0.0.1") is None and bind_warning("localhost") is None
    assert "all interfaces" in bind_warning("0.0.0.0") and bind_warning("192.168.1.5")
    from orbitscope.cli import app as cli_app

    result = CliRunner().invoke(cli_app, ["serve", "--home", str(data.home / "missing")])
    assert result.exit_code == 2 and "no orbitscope store" in result.output


def test_http_callback_with_a_bad_selection_answers(store):
    data, _ = store
    app = create_app(data=data)
    client = app.server.test_client()
    assert client.get("/").status_code == 200
    layout = client.get("/_dash-layout")
    assert layout.status_code == 200 and b'"models"' in layout.data
    payload = {"output": "aggregate.figure", "outputs": {"id": "aggregate", "property": "figure"},
               "inputs": [{"id": "selection", "property": "data", "value": {"group": "x", "runs": ["../x"]}}],
               "changedPropIds": ["selection.data"], "state": []}
    resp = client.post("/_dash-update-component", json=payload)
    assert resp.status_code == 200 and b"unknown run group" in resp.data
