"""NERO plot data and its two renderers (matplotlib, plotly) show the same, independently checked numbers."""

import numpy as np
import pytest
import torch
from matplotlib.collections import QuadMesh
from scipy import stats

import orbitscope as osc
from orbitscope.viz.interactive import figure_html, render_plotly
from orbitscope.analysis.nero import MODEL_COLOURS, class_subset, layout_kind, prepare_aggregate, prepare_individual
from orbitscope.viz.plot import individual_plot, render

from helpers import TinyNet



@pytest.fixture(scope="module")
def digits():
    test = osc.mnist_subset("test")
    idx = np.concatenate([np.flatnonzero(np.asarray(test.labels) == c)[:4] for c in range(10)])
    return test.subset(np.sort(idx))


def _results(digits, orbit, n=2):
    out = []
    for i in range(n):
        torch.manual_seed(i)
        out.append(osc.evaluate(TinyNet(), digits, orbit, osc.Classification(store_probabilities=True),
                                model_name=f"m{i}").result)
    return out


def _wilson(k, n, z=stats.norm.ppf(0.975)):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_layout_kinds():
    assert layout_kind(("angle",)) == "polar" and layout_kind(("scale",)) == "line"
    assert layout_kind(("tx", "ty")) == "heatmap"
    with pytest.raises(ValueError):
        layout_kind(("a", "b", "c"))


def test_aggregate_is_mean_of_individual_curves_in_both_renderers(digits):
    results = _results(digits, osc.Rotation(range(0, 361, 30)))
    data = prepare_aggregate(results, "correct", marker={"angle": 88})
    assert data.kind == "polar" and [s.colour for s in data.series] == MODEL_COLOURS[:2]
    for s, r in zip(data.series, results):
        individual = np.stack([prepare_individual(r, int(i), "correct").series[0].values for i in r.data.sample.values])
        np.testing.assert_allclose(s.values, individual.mean(axis=0))
        lo, hi = _wilson(r.correct.values.sum(axis=0).astype(float), r.n_samples)
        np.testing.assert_allclose(s.lower, np.clip(lo, 0, 1), atol=1e-12)
        np.testing.assert_allclose(s.upper, np.clip(hi, 0, 1), atol=1e-12)
    assert data.marker_index() == (3,)  # 88° -> nearest grid angle 90°

    fig = render(data)
    lines = fig.axes[0].get_lines()
    names = [s.label for s in data.series]
    assert names == ["m0-rotation", "m1-rotation"]  # default labels: run names
    values = [ln for ln in lines if ln.get_label() in names]
    assert len(values) == 2
    for ln, s in zip(values, data.series):
        np.testing.assert_allclose(ln.get_ydata(), s.values)
        assert not np.isnan(ln.get_ydata()).any()
    markers = [ln for ln in lines if ln.get_marker() == "o"]
    assert len(markers) == 2 and np.isclose(markers[0].get_xdata()[0], np.deg2rad(90))

    pfig = render_plotly(data)
    by_role = {(t.meta["series"], t.meta["role"]): t for t in pfig.data}
    assert set(by_role) == {(m, r) for m in names for r in ("value", "band", "marker")}
    for s in data.series:
        np.testing.assert_allclose(by_role[(s.label, "value")].r, s.values)
        np.testing.assert_allclose(by_role[(s.label, "band")].r, np.concatenate([s.upper, s.lower[::-1]]))
        assert by_role[(s.label, "marker")].r[0] == s.values[3]
    assert tuple(pfig.layout.polar.radialaxis.range) == (0.0, 1.0)
    assert pfig.layout.polar.angularaxis.direction == "counterclockwise"


def test_class_subset_and_individual(digits):
    (res,) = _results(digits, osc.Rotation([0, 90, 180]), n=1)
    mask = class_subset(res, 3)
    assert mask.sum() == 4
    data = prepare_aggregate(res, "confidence", subset=3)
    np.testing.assert_allclose(data.series[0].values, res.confidence.values[np.asarray(res.label) == 3].mean(axis=0),
                               rtol=1e-6)
    assert "class 3" in data.title
    sample = int(res.data.sample.values[5])
    ind = prepare_individual(res, sample, "confidence")
    np.testing.assert_allclose(ind.series[0].values, res.confidence.sel(sample=sample).values)
    assert ind.info["label"] == int(res.label.sel(sample=sample)) and ind.series[0].lower is None
    fig = individual_plot(res, sample, "confidence")
    assert str(sample) in fig._suptitle.get_text()
    with pytest.raises(KeyError, match="not in run"):
        prepare_individual(res, 10_000)


def test_heatmap_and_line_in_both_renderers(digits):
    results = _results(digits, osc.Product(osc.Rotation([0, 90, 180]), osc.Scale([0.8, 1.0])))
    data = prepare_aggregate(results, "entropy", marker={"angle": 90, "scale": 1.0})
    assert data.kind == "heatmap"
    lo, hi = data.value_range
    # entropy is unbounded: the shared range runs from 0 to the largest upper band value
    top = max(stats.t.interval(0.95, r.n_samples - 1, loc=r.entropy.values.mean(0),
                               scale=stats.sem(r.entropy.values, axis=0))[1].max() for r in results)
    assert lo == 0.0 and hi == pytest.approx(top, rel=1e-5)
    fig = render(data)
    mesh = [c for c in fig.axes[0].collections if isinstance(c, QuadMesh)][0]
    expected = results[0].entropy.values.mean(axis=0).T
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(expected.shape), expected, rtol=1e-6)
    pfig = render_plotly(data)
    heat = [t for t in pfig.data if t.type == "heatmap"]
    assert len(heat) == 2
    np.testing.assert_allclose(np.asarray(heat[0].z), expected, rtol=1e-6)
    marks = [t for t in pfig.data if t.meta["role"] == "marker"]
    assert [(m.x[0], m.y[0]) for m in marks] == [(90.0, 1.0)] * 2

    line = prepare_aggregate(_results(digits, osc.Brightness([0.5, 1.0, 1.5])), "correct")
    assert line.kind == "line"
    lfig = render_plotly(line)
    vals = [t for t in lfig.data if t.meta["role"] == "value"]
    np.testing.assert_allclose(vals[0].y, line.series[0].values)
    html = figure_html(lfig)
    assert "<div" in html and "cdn.plot.ly" not in html


def test_incompatible_results_and_unknown_metric(digits):
    a = _results(digits, osc.Rotation([0, 90]), n=1)[0]
    b = _results(digits, osc.Rotation([0, 45]), n=1)[0]
    with pytest.raises(ValueError, match="grids differ"):
        prepare_aggregate([a, b])
    with pytest.raises(KeyError, match="unknown metric"):
        prepare_aggregate(a, "sharpness")


def test_per_sample_views_refuse_different_data_and_labels_stay_distinct(digits, tmp_path):
    """Found by a newcomer: runs on different datasets were overlaid sample by sample."""
    from orbitscope.viz.report import write_report

    a = _results(digits, osc.Rotation([0, 90]), n=1)[0]
    other = osc.evaluate(TinyNet(), osc.mnist_subset("train").stratified(4), osc.Rotation([0, 90])).result
    with pytest.raises(ValueError, match="different data"):
        prepare_individual([a, other], int(a.data.sample.values[0]))
    with pytest.raises(ValueError, match="different data"):
        write_report([a, other], tmp_path / "r.html")
    assert len(prepare_aggregate([a, other]).series) == 2  # aggregates may compare datasets
    same_name = _results(digits, osc.Rotation([0, 90]), n=2)
    for r in same_name:
        r.data.attrs["run_name"] = "ReferenceCNN-rotation"
    labels = [s.label for s in prepare_aggregate(same_name).series]
    assert len(set(labels)) == 2 and all(lab.startswith("ReferenceCNN-rotation (") for lab in labels)
    with pytest.raises(ValueError, match="selects no samples"):
        prepare_aggregate(a, subset=42)
