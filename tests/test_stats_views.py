"""Whole-orbit statistics (orbitscope.stats) in the views: NERO plot data, the matplotlib and plotly
renderers, the HTML report and the web interface show the numbers that the statistics functions,
called here directly, compute.

Models: a nearest-centroid classifier (accurate upright, rotation-sensitive) and the same
classifier with its centroids turned a quarter turn (accurate near ±90° instead), so that the
first is significantly better at some angles and significantly worse at others.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import fields

import numpy as np
import pytest
import torch
import xarray as xr
from matplotlib.collections import LineCollection, PolyCollection

import orbitscope as osc
from orbitscope.analysis.nero import class_subset, prepare_aggregate
from orbitscope.app import AppData, Event
from orbitscope.app import callbacks as cb
from orbitscope.group.so3 import SO3Grid
from orbitscope.results import OrbitResult
from orbitscope.results.store import Store
from orbitscope.stats import compare_models, invariance_test, orbit_values, simultaneous_band
from orbitscope.stats.paired import compare_values
from orbitscope.tasks import Classification, Variable
from orbitscope.viz.interactive import render_plotly
from orbitscope.viz.plot import nero_plot, render
from orbitscope.viz.report import MAX_DROP_COLUMN, summary_rows, write_report

from helpers import CentroidNet
from test_app_callbacks import build_store

ANGLES = range(0, 361, 30)
NAMES = ["upright", "turned"]


def _centroids() -> np.ndarray:
    train = osc.mnist_subset("train")
    x = train.images.astype(np.float32) / 255.0
    return np.stack([x[train.labels == c].mean(0) for c in range(10)])


def _evaluate(orbit, per_class: int = 5) -> list[OrbitResult]:
    data = osc.mnist_subset("test").stratified(per_class)
    mu = _centroids()
    models = [CentroidNet(mu, scale=0.2).eval(), CentroidNet(np.rot90(mu, 1, axes=(-2, -1)).copy(), scale=0.2).eval()]
    return [osc.evaluate(m, data, orbit, osc.Classification(store_probabilities=True), model_name=n).result
            for m, n in zip(models, NAMES)]


@pytest.fixture(scope="module")
def rotation() -> list[OrbitResult]:
    return _evaluate(osc.Rotation(ANGLES))


@pytest.fixture(scope="module")
def brightness() -> list[OrbitResult]:
    torch.manual_seed(0)
    return _evaluate(osc.Brightness([0.2, 0.5, 1.0, 1.5, 2.0]))


def _text(plotly_title: str) -> str:
    """A plotly title as plain text (tags dropped, entities decoded, whitespace collapsed)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", plotly_title)).split())


def _flat(text: str) -> str:
    return " ".join(text.split())


def _numbers(value: object) -> np.ndarray:
    """A figure dict's array as floats (plotly may send base64 typed arrays: {'bdata', 'dtype'})."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
    return np.asarray(value, dtype=float)


# --------------------------------------------------------------------------- NERO plot data


@pytest.mark.parametrize("metric", ["correct", "confidence"])
@pytest.mark.parametrize("subset", [None, 3, "mask"])
def test_simultaneous_bands_are_the_stats_bands(rotation, metric, subset):
    mask = (np.arange(rotation[0].n_samples) % 3 == 0) if subset == "mask" else subset
    data = prepare_aggregate(rotation, metric, subset=mask, level=0.9, simultaneous=True)
    plain = prepare_aggregate(rotation, metric, subset=mask, level=0.9)
    for s, p, res in zip(data.series, plain.series, rotation):
        rows = class_subset(res, subset) if isinstance(subset, int) else mask
        band = simultaneous_band(res, metric, level=0.9, subset=rows)
        np.testing.assert_array_equal(s.sim_lower, band["lower"].values)
        np.testing.assert_array_equal(s.sim_upper, band["upper"].values)
        assert data.simultaneous_method == band.attrs["method"] and "simultaneous 90%" in data.simultaneous_method
        for name in ("values", "lower", "upper"):  # the pointwise numbers do not change
            np.testing.assert_array_equal(getattr(s, name), getattr(p, name))
    assert data.band_method == plain.band_method


@pytest.mark.parametrize("metric", ["correct", "confidence"])
def test_the_simultaneous_band_contains_the_pointwise_band(rotation, metric):
    data = prepare_aggregate(rotation, metric, simultaneous=True)
    for s in data.series:
        assert np.all(s.sim_lower <= s.lower + 1e-12) and np.all(s.sim_upper >= s.upper - 1e-12), s.label
        assert np.any(s.sim_upper - s.sim_lower > s.upper - s.lower + 1e-6)  # and is wider somewhere


def test_flags_off_leave_the_data_as_before(rotation):
    default = prepare_aggregate(rotation, "correct", subset=2)
    explicit = prepare_aggregate(rotation, "correct", subset=2, simultaneous=False, compare=False)
    assert default.simultaneous_method is None and default.comparison is None and default.caption_lines() == []
    assert set(default.info) == {"subset", "n", "lower_is_better"}
    for s in default.series:
        assert s.sim_lower is None and s.sim_upper is None and s.has_band
    for f in fields(default):
        a, b = getattr(default, f.name), getattr(explicit, f.name)
        if f.name == "series":
            for sa, sb in zip(a, b):
                for g in fields(sa):
                    np.testing.assert_array_equal(getattr(sa, g.name), getattr(sb, g.name))
        elif f.name == "coords":
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        else:
            assert a == b, f.name
    roles = {t.meta["role"] for t in render_plotly(default).data}
    assert roles == {"value", "band"}
    fig = render(default)
    assert not fig.legends and not [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]


def test_comparison_marks_are_compare_models(rotation):
    data = prepare_aggregate(rotation, "correct", labels=NAMES, compare=True)
    expected = compare_models(*rotation, "correct", names=tuple(NAMES))
    ds = expected.to_dataset()
    comparison = data.comparison
    np.testing.assert_array_equal(comparison["worse"], ds["worse"].values)
    np.testing.assert_array_equal(comparison["better"], ds["better"].values)
    assert comparison["worse"].shape == (len(ANGLES),)
    assert comparison["worse"].any() and comparison["better"].any()  # the models differ both ways
    assert comparison["verdict"] == expected.verdict() and data.caption_lines() == [expected.verdict()]
    # a class subset and another alpha: the same test on those samples
    mask = class_subset(rotation[0], 1)
    sub = prepare_aggregate(rotation, "confidence", labels=NAMES, subset=1, compare=True, alpha=0.01)
    direct = compare_values(orbit_values(rotation[0], "confidence", subset=mask),
                            orbit_values(rotation[1], "confidence", subset=mask), alpha=0.01, names=tuple(NAMES))
    np.testing.assert_array_equal(sub.comparison["worse"], direct.worse)
    assert sub.comparison["verdict"] == direct.verdict() and "FWER 0.01" in direct.verdict()


def test_compare_needs_exactly_two_results(rotation):
    for results in ([rotation[0]], [rotation[0], rotation[1], rotation[0]]):
        with pytest.raises(ValueError, match="exactly two results"):
            prepare_aggregate(results, "correct", labels=["a", "b", "c"][:len(results)], compare=True)
    with pytest.raises(ValueError, match="alpha"):
        prepare_aggregate(rotation, "correct", compare=True, alpha=1.5)


# --------------------------------------------------------------------------- plotly


def _roles(fig) -> dict[tuple[str, str], object]:
    return {(t.meta["series"], t.meta["role"]): t for t in fig.data}


def _gapped(lower, upper) -> np.ndarray:
    out = np.concatenate([upper, [np.nan], lower]).astype(float)
    return np.where(np.isfinite(out), out, np.nan)


@pytest.mark.parametrize("layout", ["polar", "line"])
def test_plotly_draws_the_simultaneous_band_and_the_marks(rotation, brightness, layout):
    results = rotation if layout == "polar" else brightness
    data = prepare_aggregate(results, "correct", labels=NAMES, simultaneous=True, compare=True)
    assert data.kind == layout
    fig = render_plotly(data)
    by_role = _roles(fig)
    assert {r for (_, r) in by_role} == {"value", "band", "simultaneous-band", "worse", "better"}
    value, where = ("r", "theta") if layout == "polar" else ("y", "x")
    coords = np.asarray(data.coords[data.dims[0]])
    for s in data.series:
        sim = by_role[(s.label, "simultaneous-band")]
        np.testing.assert_array_equal(np.asarray(getattr(sim, value), dtype=float), _gapped(s.sim_lower, s.sim_upper))
        assert sim.line.dash == "dash" and sim.line.color == s.colour
    comparison = compare_models(*results, "correct", names=tuple(NAMES))
    for role in ("worse", "better"):
        marks = by_role[(NAMES[0], role)]
        at = getattr(comparison, role)
        np.testing.assert_allclose(np.asarray(getattr(marks, where), dtype=float), coords[at])
        np.testing.assert_allclose(np.asarray(getattr(marks, value), dtype=float), data.series[0].values[at])
    legend = {_text(t.name) for t in fig.data if t.showlegend is not False}
    assert _flat(f"pointwise: {data.band_method}") in legend
    assert any(_flat(data.simultaneous_method) in n for n in legend)
    assert _flat(comparison.verdict()) in _text(fig.layout.title.text)


def test_plotly_heatmap_hover_shows_both_intervals_and_marks(rotation):
    results = _evaluate(osc.Product(osc.Rotation([0, 90, 180, 270]), osc.Scale([0.8, 1.0])), per_class=4)
    data = prepare_aggregate(results, "correct", labels=NAMES, simultaneous=True, compare=True)
    assert data.kind == "heatmap"
    fig = render_plotly(data)
    by_role = _roles(fig)
    for s in data.series:
        heat = by_role[(s.label, "value")]
        custom = np.asarray(heat.customdata, dtype=float)
        for k, bound in enumerate((s.lower, s.upper, s.sim_lower, s.sim_upper)):
            np.testing.assert_allclose(custom[..., k], np.asarray(bound, dtype=float).T)
        assert "simultaneous" in heat.hovertemplate and "customdata[3]" in heat.hovertemplate
    worse = data.comparison["worse"]
    i, j = np.nonzero(worse)
    marks = by_role[(NAMES[0], "worse")]
    np.testing.assert_allclose(np.asarray(marks.x, dtype=float), data.coords["angle"][i])
    np.testing.assert_allclose(np.asarray(marks.y, dtype=float), data.coords["scale"][j])
    assert _flat(data.comparison["verdict"]) in _text(fig.layout.title.text)
    mfig = render(data)  # matplotlib: marks on the first panel, the verdict in the key's title
    key = next(lg for lg in mfig.legends if lg.get_gid() == "key")
    assert _flat(data.comparison["verdict"]) == _flat(key.get_title().get_text())


# --------------------------------------------------------------------------- matplotlib


@pytest.mark.parametrize("layout", ["polar", "line"])
def test_matplotlib_draws_both_bands_with_their_methods(rotation, brightness, layout, tmp_path):
    results = rotation if layout == "polar" else brightness
    fig = nero_plot(results, "correct", labels=NAMES, compare=True)  # simultaneous by default
    data = prepare_aggregate(results, "correct", labels=NAMES, simultaneous=True, compare=True)
    (ax,) = fig.axes
    x = np.deg2rad(data.coords["angle"]) if layout == "polar" else data.coords[data.dims[0]]
    sims = [c for c in ax.collections if isinstance(c, LineCollection) and c.get_gid() == "simultaneous-band"]
    assert len(sims) == 2 and len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 2
    for coll, s in zip(sims, data.series):
        lower, upper = coll.get_segments()
        np.testing.assert_allclose(lower, np.column_stack([x, s.sim_lower]))
        np.testing.assert_allclose(upper, np.column_stack([x, s.sim_upper]))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == NAMES  # the models' legend
    key = next(lg for lg in fig.legends if lg.get_gid() == "key")
    texts = [_flat(t.get_text()) for t in key.get_texts()]
    assert any("simultaneous" in t and _flat(data.simultaneous_method) == t for t in texts)
    assert f"pointwise: {data.band_method}" in texts
    assert _flat(key.get_title().get_text()) == _flat(data.comparison["verdict"])
    for role in ("worse", "better"):
        (marks,) = [ln for ln in ax.get_lines() if ln.get_gid() == role]
        at = data.comparison[role]
        np.testing.assert_allclose(marks.get_xdata(), x[at])
        np.testing.assert_allclose(marks.get_ydata(), data.series[0].values[at])
    fig.savefig(tmp_path / f"{layout}.png")
    assert (tmp_path / f"{layout}.png").stat().st_size > 10_000
    bare = nero_plot(results, "correct", band=False)  # no band of either kind
    assert not bare.axes[0].collections and not bare.legends
    pointwise = nero_plot(results, "correct", simultaneous=False)
    assert not [c for c in pointwise.axes[0].collections if isinstance(c, LineCollection)]


# --------------------------------------------------------------------------- other layouts


def _fake(name: str, dims: tuple[str, ...], coords: dict, values: np.ndarray, variable: str = "confidence",
          extra: tuple[str, ...] = (), orbit=None) -> OrbitResult:
    """A result like the engine's: ``variable`` over ("sample", *dims, *extra)."""
    if variable == "rmse":
        meta = Variable("rmse", "float32", kind="real", lower_is_better=True, label="RMSE", unit="px").attrs()
    else:
        meta = Classification().variable(variable).attrs()
    attrs = {"orbit_dims": json.dumps(list(dims)), "run_name": name, "model_name": name,
             "run_id": f"{name}-0123456789", "data_id": "fake-data"}
    if orbit is not None:
        attrs["orbit"] = orbit.spec_json()
    ds = xr.Dataset({variable: (["sample", *dims, *extra], values, meta)},
                    coords={"sample": np.arange(len(values)), **coords}, attrs=attrs)
    return OrbitResult(ds)


def _other_layouts() -> dict[str, list[OrbitResult]]:
    rng = np.random.default_rng(0)
    n = 24
    mosaic = {"time_reversed": np.array([0, 1]), "d4": np.arange(8)}
    disk = {"plane": np.array([0, 1, 2]), "axis_angle": np.arange(0, 361, 60.0),
            "rotation_angle": np.arange(0, 181, 45.0)}
    grid = SO3Grid(60)
    out = {}
    for kind, dims, coords, shape, variable, orbit in (
            ("mosaic", ("time_reversed", "d4"), mosaic, (2, 8), "rmse", None),
            ("disk", ("plane", "axis_angle", "rotation_angle"), disk, (3, 7, 5), "confidence", None),
            ("so3map", ("rotation",), {"rotation": np.arange(60.0)}, (60,), "confidence", grid)):
        base = rng.random(shape)
        out[kind] = [_fake(name, dims, coords, np.clip(base + shift + 0.1 * rng.standard_normal((n, *shape)), 0, 1),
                           variable, orbit=orbit) for name, shift in (("A", 0.0), ("B", 0.15))]
    return out


@pytest.mark.parametrize("kind", ["mosaic", "disk", "so3map"])
def test_other_layouts_take_the_flags_and_show_the_verdict(kind):
    results = _other_layouts()[kind]
    data = prepare_aggregate(results, results[0].primary_metric(), simultaneous=True, compare=True)
    assert data.kind == kind and data.simultaneous_method is not None
    verdict = compare_models(*results, results[0].primary_metric(), names=("A", "B")).verdict()
    assert data.comparison["verdict"] == verdict
    fig = render(data)
    shown = " ".join([fig.get_suptitle()] + [lg.get_title().get_text() for lg in fig.legends])
    assert _flat(verdict) in _flat(shown)
    assert _flat(verdict) in _text(render_plotly(data).layout.title.text)


def test_per_pixel_metrics_get_notes_instead_of_statistics():
    rng = np.random.default_rng(1)
    coords = {"time_reversed": np.array([0, 1]), "d4": np.arange(8)}
    results = [_fake(name, ("time_reversed", "d4"), coords, rng.random((6, 2, 8, 3, 4)), "rmse", extra=("y", "x"))
               for name in ("A", "B")]
    data = prepare_aggregate(results, "rmse", simultaneous=True, compare=True)
    assert data.simultaneous_method is None and data.comparison is None
    assert all(s.sim_lower is None for s in data.series)
    notes = data.info["notes"]
    assert notes[0].startswith("no simultaneous band:") and notes[1].startswith("no paired comparison:")
    assert "extra dims" in notes[0] and data.caption_lines() == notes
    assert _flat(notes[0]) in _text(render_plotly(data).layout.title.text)
    assert _flat(notes[1]) in _flat(render(data).get_suptitle() + " " + " ".join(
        lg.get_title().get_text() for lg in render(data).legends))


# --------------------------------------------------------------------------- report


def test_report_has_whole_orbit_statistics(rotation, tmp_path):
    path = write_report(rotation, tmp_path / "r.html", labels=NAMES, n_samples=2)
    text = html.unescape(path.read_text())
    start = text.index("<h2>Whole-orbit statistics</h2>")
    section = text[start:text.index("<h2>", start + 10)]
    tests = [invariance_test(r, "correct") for r in rotation]
    for name, t in zip(NAMES, tests):
        assert f"<b>{name}</b>: {t.sentence()}" in section
    verdict = compare_models(*rotation, "correct", names=tuple(NAMES)).verdict()
    assert f"<b>{verdict}</b>" in section and section.count("<svg") == 1
    assert "simultaneous band (sup-t bootstrap" in text  # the note on the plots' intervals
    assert "Whole-orbit statistics" in text and "<h2>Per-class aggregate plots" in text  # the sections stay
    rows = summary_rows(rotation, NAMES)
    for row, t in zip(rows, tests):
        assert row[f"invariance p ({t.method})"] == t.p_value
        lo, hi = t.max_drop_interval
        assert row[MAX_DROP_COLUMN] == f"{t.max_drop:.3f} [{lo:.3f}, {hi:.3f}]"
        assert row[MAX_DROP_COLUMN] in text
    assert f"invariance p ({tests[0].method})" in text and MAX_DROP_COLUMN in text


def test_report_on_a_one_element_orbit_notes_what_cannot_be_computed(tmp_path):
    results = _evaluate(osc.Rotation([0]), per_class=1)
    text = html.unescape(write_report(results, tmp_path / "one.html", labels=NAMES, n_samples=1).read_text())
    assert text.count("not computed: a test of invariance needs at least two orbit elements") == 2
    assert all(r[MAX_DROP_COLUMN] == "n/a" for r in summary_rows(results, NAMES))


# --------------------------------------------------------------------------- interface


@pytest.fixture(scope="module")
def app_store(tmp_path_factory):
    home = tmp_path_factory.mktemp("stats-app")
    ids = build_store(home, per_class=3)
    return AppData(Store(home, create=False), ttl=0.0), ids


def _controls(data: AppData, runs: list[str]):
    return cb.parse_controls(data.groups()[0].key, runs, "confidence", "all", "pca", "mean", "worst", [])


def _start(data: AppData, runs: list[str]) -> dict:
    return cb.update_selection(data, None, _controls(data, runs), Event("context")).selection


def test_interface_toggles_add_the_band_and_the_marks(app_store):
    data, ids = app_store
    runs = [ids["ref-cnn"], ids["centroid"]]
    selection = _start(data, runs)
    plain = cb.aggregate_figure(data, selection)
    assert {t["meta"]["role"] for t in plain["data"]} == {"value", "band", "marker"}
    on = cb.set_toggles(selection, ["on"], [])
    assert on["simultaneous"] and not on["compare"] and on["sample"] == selection["sample"]
    fig = cb.aggregate_figure(data, on)
    stored = [data.store.load(r) for r in runs]
    sims = {t["meta"]["series"]: t for t in fig["data"] if t["meta"]["role"] == "simultaneous-band"}
    for name, res in zip(("ref-cnn", "centroid"), stored):
        band = simultaneous_band(res, "confidence")
        np.testing.assert_allclose(_numbers(sims[name]["r"]),
                                   _gapped(band["lower"].values, band["upper"].values), rtol=1e-12)
    # the toggles survive other events (here: another sample)
    up = cb.update_selection(data, on, _controls(data, runs), Event("sample", 0, 5))
    assert up.selection["simultaneous"] is True and up.selection["sample"] == 5
    both = cb.aggregate_figure(data, cb.set_toggles(up.selection, ["on"], ["on"]))
    expected = compare_models(*stored, "confidence", names=("ref-cnn", "centroid"))
    assert expected.worse.any()  # ref-cnn is behind the centroid model at some angles
    worse = [t for t in both["data"] if t["meta"]["role"] == "worse"]
    np.testing.assert_allclose(_numbers(worse[0]["theta"]), np.asarray(list(ANGLES))[expected.worse])
    assert _flat(expected.verdict()) in _text(both["layout"]["title"]["text"])
    # one run: no comparison to draw, and the toggle is not offered
    single = cb.set_toggles(_start(data, runs[:1]), ["on"], ["on"])
    assert not {"worse", "better"} & {t["meta"]["role"] for t in cb.aggregate_figure(data, single)["data"]}
    assert cb.compare_available(runs) and not cb.compare_available(runs[:1]) and not cb.compare_available(runs * 2)
    assert cb.checked(["on"]) and cb.checked(True) and not cb.checked("on") and not cb.checked(None)

