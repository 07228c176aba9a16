"""Dataset-level metrics (class-mean accuracy, detection AP, NERO's mean(conf)·mean(IoU)) as
first-class plottable metrics: values against plain loops, the bootstrap band's resamples against a
plain resampling loop, its coverage in simulation, and every surface that draws them (nero_plot,
the report, ``orbitscope plot``, the interface)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.analysis.dataset_level import (bootstrap_counts, dataset_interval, dataset_metric_names,
                                               is_dataset_metric)
from orbitscope.analysis.nero import prepare_aggregate, prepare_individual
from orbitscope.errors import NotFoundError
from orbitscope.results.result import OrbitResult, dataset_states
from orbitscope.viz.report import write_report

from helpers import plotly_array


def _class_mean_accuracy_loop(labels: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Written from the definition: for each element, the mean over the classes present of the
    fraction of that class's samples that are correct."""
    out = np.zeros(correct.shape[1])
    for j in range(correct.shape[1]):
        accs = []
        for c in sorted(set(labels.tolist())):
            rows = [i for i in range(len(labels)) if labels[i] == c]
            accs.append(sum(float(correct[i, j]) for i in rows) / len(rows))
        out[j] = sum(accs) / len(accs)
    return out


def _classification_result(labels: np.ndarray, correct: np.ndarray) -> OrbitResult:
    """A classification result over an ``angle`` dim from arrays (labels (S,), correct (S, E))."""
    s, e = correct.shape
    ds = xr.Dataset({"label": (("sample",), labels.astype(np.int64)),
                     "correct": (("sample", "angle"), correct.astype(np.uint8), {"kind": "binary"})},
                    coords={"sample": np.arange(s), "angle": np.arange(e, dtype=np.float64)},
                    attrs={"task": json.dumps(osc.Classification().spec()), "orbit_dims": json.dumps(["angle"])})
    return OrbitResult(ds)


@pytest.fixture(scope="module")
def mnist_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[osc.OrbitResult]]:
    home = tmp_path_factory.mktemp("dataset-level")
    data = osc.mnist_subset("test").stratified(4)
    torch.manual_seed(0)
    out = []
    for i in range(2):
        model = osc.ReferenceCNN(widths=(4, 4, 8, 8, 8, 8), hidden=16).eval()
        with torch.no_grad():
            model.classifier[-1].weight.mul_(40.0)
        out.append(osc.evaluate(model, data, osc.Rotation(range(0, 361, 45)), osc.Classification(), store=home,
                                name=f"m{i}", model_name=f"m{i}").result)
    return home, out


def test_value_equals_the_plain_loop_and_the_resamples_equal_a_plain_resampling_loop() -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 40)
    correct = rng.random((40, 7)) < 0.6
    res = _classification_result(labels, correct)
    assert dataset_metric_names(res) == ["class_accuracy"]
    d = dataset_interval(res, "class_accuracy", n_boot=30, seed=5)
    np.testing.assert_allclose(d["mean"].values, _class_mean_accuracy_loop(labels, correct), rtol=1e-12)
    # the vectorised replicates = the plain loop on each resample (same counts)
    task, dims, states = dataset_states(res)
    counts = bootstrap_counts(40, 30, 5)
    reps = task.compute_resampled(states, 1, counts, "class_accuracy")
    for b in range(30):
        idx = np.repeat(np.arange(40), counts[b])
        np.testing.assert_allclose(reps[b], _class_mean_accuracy_loop(labels[idx], correct[idx]), rtol=1e-12)
    np.testing.assert_allclose(d["lower"].values, np.quantile(reps, 0.025, axis=0), rtol=1e-12)
    np.testing.assert_allclose(d["upper"].values, np.quantile(reps, 0.975, axis=0), rtol=1e-12)
    assert counts.sum(1).tolist() == [40] * 30


def test_bootstrap_band_covers_the_true_class_mean_accuracy_at_its_level() -> None:
    """Each of 1,000 orbit elements is an independent dataset of 80 samples (4 classes, each
    correct with its own probability): the 95 % band must contain the true mean of the four
    probabilities at about 95 % of the elements (percentile bootstrap: slightly under)."""
    rng = np.random.default_rng(11)
    p = np.array([0.9, 0.7, 0.5, 0.8])
    labels = np.repeat(np.arange(4), 20)
    correct = rng.random((80, 1000)) < p[labels][:, None]
    d = dataset_interval(_classification_result(labels, correct), "class_accuracy", n_boot=400, seed=0)
    covered = (d["lower"].values <= p.mean()) & (p.mean() <= d["upper"].values)
    assert 0.91 <= covered.mean() <= 0.975, covered.mean()


def test_aggregate_plot_draws_a_dataset_metric_with_its_band_and_refuses_the_individual_one(mnist_runs) -> None:
    _, (a, b) = mnist_runs
    data = prepare_aggregate([a, b], "class_accuracy", simultaneous=True, compare=True)
    want = osc.dataset_metrics(a)["class_accuracy"].values
    np.testing.assert_allclose(data.series[0].values, want)
    assert data.series[0].has_band and not data.series[0].has_simultaneous_band
    assert np.all(data.series[0].lower <= want + 1e-12) and np.all(want <= data.series[0].upper + 1e-12)
    assert "bootstrap" in data.band_method
    assert any("no simultaneous band" in n for n in data.caption_lines())
    assert data.comparison is None
    with pytest.raises(ValueError, match="dataset-level"):
        prepare_individual([a, b], int(a.data.sample.values[0]), "class_accuracy")
    with pytest.raises(NotFoundError, match="dataset-level"):
        dataset_interval(a, "correct")
    assert is_dataset_metric(a, "class_accuracy") and not is_dataset_metric(a, "correct")
    # a subset: the band of one class
    mask = a.data["label"].values == 3
    sub = prepare_aggregate(a, "class_accuracy", subset=mask)
    np.testing.assert_allclose(sub.series[0].values, osc.dataset_metrics(a, subset=mask)["class_accuracy"].values)


def test_cli_plot_and_report_draw_dataset_metrics(mnist_runs, tmp_path: Path) -> None:
    from orbitscope.cli import app

    home, (a, b) = mnist_runs
    runner = CliRunner()
    out = tmp_path / "ca.png"
    r = runner.invoke(app, ["plot", "m0", "m1", "--metric", "class_accuracy", "-o", str(out), "--home", str(home)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 5000
    html = tmp_path / "ca.html"
    r = runner.invoke(app, ["plot", "m0", "--metric", "class_accuracy", "-o", str(html), "--home", str(home)])
    assert r.exit_code == 0, r.output
    assert "class-mean accuracy" in html.read_text()
    r = runner.invoke(app, ["plot", "m0", "--kind", "individual", "--sample", str(int(a.data.sample.values[0])),
                            "--metric", "class_accuracy", "-o", str(tmp_path / "x.png"), "--home", str(home)])
    assert r.exit_code == 2 and "dataset-level" in r.output
    r = runner.invoke(app, ["plot", "m0", "--metric", "nonsense", "-o", str(tmp_path / "y.png"), "--home", str(home)])
    assert r.exit_code == 2 and "class_accuracy" in r.output  # the unknown-metric message lists them
    report = write_report([a, b], tmp_path / "report.html")
    text = Path(report).read_text()
    assert "Dataset-level metrics" in text and "percentile bootstrap" in text


def test_interface_offers_dataset_metrics_and_draws_them(mnist_runs) -> None:
    from orbitscope.app import AppData, Event
    from orbitscope.app import callbacks as cb
    from orbitscope.results.store import Store

    home, (a, b) = mnist_runs
    data = AppData(Store(home, create=False), ttl=0.0)
    group = data.groups()[0].key
    runs = [r.run_id for r in data.groups()[0].runs][:2]
    options, value, message = cb.metric_controls(data, group, runs, False, "class_accuracy")
    assert message is None and value == "class_accuracy"
    assert {"label": "class-mean accuracy (dataset level)", "value": "class_accuracy"} in options
    controls = cb.parse_controls(group, runs, "class_accuracy", "all", "pca", "mean", "worst", [])
    selection = cb.update_selection(data, None, controls, Event("context"))
    sel = selection.selection if hasattr(selection, "selection") else selection
    fig = cb.aggregate_figure(data, sel)
    values = [t for t in fig["data"] if (t.get("meta") or {}).get("role") == "value"]
    assert len(values) == 2
    by_run = {data.run(r).name: data.result(r) for r in runs}
    for t in values:
        got = plotly_array(t.get("r", t.get("y"))).astype(float)
        want = osc.dataset_metrics(by_run[t["meta"]["series"]])["class_accuracy"].values
        np.testing.assert_allclose(got[: len(want)], want, rtol=1e-6)
    ind = cb.individual_figure(data, sel)
    title = ind["layout"]["title"]["text"]
    assert "dataset-level" in title and "confidence" in title


@pytest.mark.parametrize("with_ignored", [False, True])
def test_resampled_detection_ap_equals_ap_of_the_repeated_samples(with_ignored: bool) -> None:
    """The weighted AP of each resample = the AP (tested against pycocotools elsewhere) of the data
    with each sample repeated as often as the resample draws it (continuous scores: no ties)."""
    from orbitscope.tasks.detection_metrics import average_precision
    from orbitscope.tasks.detection_resampling import average_precision_resampled, weighted_nanmean

    rng = np.random.default_rng(7)
    s, k, n = 30, 6, 4
    for _ in range(4):
        scores = np.sort(rng.random((s, k)), axis=1)[:, ::-1]
        labels = rng.integers(-1, 3, (s, k))
        matched = np.sort(rng.random((s, k, 10)) < 0.4, axis=2)[:, :, ::-1]  # nested over thresholds
        ignored = (rng.random((s, k, 10)) < 0.15) & ~matched if with_ignored else None
        gt_labels, gt_visible = rng.integers(0, 3, (s, n)), rng.random((s, n)) < 0.5
        counts = bootstrap_counts(s, 20, int(rng.integers(1000)))
        ap50 = average_precision_resampled(scores, labels, matched, gt_labels, gt_visible, counts, ignored, slice(0, 1))
        m_ap = average_precision_resampled(scores, labels, matched, gt_labels, gt_visible, counts, ignored)
        for b in range(20):
            idx = np.repeat(np.arange(s), counts[b])
            want = average_precision(scores[idx], labels[idx], matched[idx], gt_labels[idx], gt_visible[idx],
                                     None if ignored is None else ignored[idx])
            np.testing.assert_allclose([ap50[b], m_ap[b]], want, atol=1e-12)
    values = rng.random((12, 5))
    values[rng.random((12, 5)) < 0.3] = np.nan
    counts = bootstrap_counts(12, 6, 1)
    got = weighted_nanmean(values, counts)
    for b in range(6):
        rep = np.repeat(values, counts[b], axis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: NaN
            np.testing.assert_allclose(got[b], np.nanmean(rep, axis=0))


def test_a_stored_runs_interval_is_computed_once(mnist_runs, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbitscope.results.store import Store

    home, (a, _) = mnist_runs
    store = Store(home, create=False)
    first = dataset_interval(store.load(a.attrs["run_id"]), "class_accuracy", level=0.9, seed=3)

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("recomputed")

    monkeypatch.setattr(osc.Classification, "compute_resampled", fail)
    again = dataset_interval(store.load(a.attrs["run_id"]), "class_accuracy", level=0.9, seed=3)
    for name in ("mean", "lower", "upper"):
        np.testing.assert_array_equal(first[name].values, again[name].values)
    with pytest.raises(AssertionError, match="recomputed"):  # another seed is another value
        dataset_interval(store.load(a.attrs["run_id"]), "class_accuracy", level=0.9, seed=4)
