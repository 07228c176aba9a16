"""The rotation map of 3-D rotation lists (dim ``rotation``): axis–angle extraction against scipy,
the Hammer projection's equal area, the figures read back (each rotation's value at its axis in
its band's panel, one colour range, click data), and the layouts of other orbits left as they were.

Fake results carry the attrs of real runs (``orbit`` spec, ``orbit_dims``); each rotation gets a
distinct known value, so a marker or cell showing the wrong rotation fails.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch
import xarray as xr
from matplotlib.collections import PathCollection
from matplotlib.image import AxesImage, imread
from scipy import stats
from scipy.spatial.transform import Rotation as ScipyRotation

import orbitscope as osc
from helpers import TinyNet
from orbitscope.analysis.nero import layout_kind, prepare_aggregate, prepare_individual, rotation_quaternions
from orbitscope.app.state import element_from_click
from orbitscope.group.finite import D4
from orbitscope.group.orbits import Rotation, Rotation3D, Scale, Translation
from orbitscope.group.so3 import NeroSO3, Octahedral, SO3Grid
from orbitscope.results import OrbitResult
from orbitscope.tasks import Classification
from orbitscope.viz import so3_map
from orbitscope.viz.interactive import render_plotly
from orbitscope.viz.plot import render, save_figure

N = 512
HX, HY = 2 * np.sqrt(2), np.sqrt(2)


# --------------------------------------------------------------------------- helpers (independent)


def _scipy_axis_angle(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Axis and angle (degrees) from scipy's rotation vector of (w, x, y, z) quaternions."""
    rotvec = ScipyRotation.from_quat(np.asarray(q)[:, [1, 2, 3, 0]]).as_rotvec()
    angle = np.linalg.norm(rotvec, axis=1)
    axis = np.divide(rotvec, angle[:, None], out=np.tile([1.0, 0.0, 0.0], (len(q), 1)), where=angle[:, None] > 0)
    return axis, np.degrees(angle)


def _hammer(axis: np.ndarray) -> np.ndarray:
    """The Hammer projection written out again here (longitude atan2(y, x), latitude asin z)."""
    lon, lat = np.arctan2(axis[:, 1], axis[:, 0]), np.arcsin(np.clip(axis[:, 2], -1, 1))
    d = np.sqrt(1 + np.cos(lat) * np.cos(lon / 2))
    return np.stack([HX * np.cos(lat) * np.sin(lon / 2) / d, HY * np.sin(lat) / d], 1)


def _value(i: np.ndarray | int) -> np.ndarray:
    """A distinct value in (0, 1) per rotation position."""
    return (np.asarray(i) + 1.0) / (N + 1.0)


def _result(name: str, values: np.ndarray, orbit=None, dims=("rotation",), coords=None,
            variable: str = "confidence") -> OrbitResult:
    """A result like the engine's: two samples whose mean is ``values``, with the orbit's spec."""
    coords = coords if coords is not None else {"rotation": np.arange(len(values), dtype=float)}
    attrs = {"orbit_dims": json.dumps(list(dims)), "run_name": name, "model_name": name,
             "run_id": f"{name}-0123456789", "data_id": "fake-data"}
    if orbit is not None:
        attrs["orbit"] = orbit.spec_json()
    meta = Classification().variable(variable).attrs()
    v = np.asarray(values, dtype=float)
    ds = xr.Dataset({variable: (["sample", *dims], np.stack([v - 1e-4, v + 1e-4]), meta)},
                    coords={"sample": np.array([100, 101]), **coords}, attrs=attrs)
    return OrbitResult(ds)


@pytest.fixture(scope="module")
def grid_results() -> list[OrbitResult]:
    grid = SO3Grid(N)
    return [_result("A", _value(np.arange(N)), grid), _result("B", 1 - _value(np.arange(N)), grid)]


# --------------------------------------------------------------------------- geometry


def test_axis_angle_matches_scipy_rotation_vectors():
    rng = np.random.default_rng(7)
    random = rng.normal(size=(2000, 4))
    random *= rng.choice([-1.0, 1.0], size=(2000, 1)) * rng.uniform(0.2, 3.0, size=(2000, 1))  # any sign, any norm
    tilt = rng.normal(size=(40, 3))
    tilt /= np.linalg.norm(tilt, axis=1, keepdims=True)
    w = np.repeat([1e-3, 1e-6, 1e-9, -1e-9, -1e-6, -1e-3], 40)[:, None]  # θ within 0.12° of 180°, w of both signs
    near_half = np.concatenate([w, np.tile(tilt, (6, 1)) * np.sqrt(1 - w**2)], axis=1)
    for q in (random, SO3Grid(N).quaternions, SO3Grid(4096).quaternions, near_half):
        axis, angle = so3_map.axis_angle(q)
        ref_axis, ref_angle = _scipy_axis_angle(q / np.linalg.norm(q, axis=1, keepdims=True))
        assert angle.min() >= 0 and angle.max() <= 180
        np.testing.assert_allclose(np.linalg.norm(axis, axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(angle, ref_angle, atol=1e-7)
        sign = np.sign(np.sum(axis * ref_axis, axis=1))  # the same axis except at exactly 180°
        np.testing.assert_allclose(axis, ref_axis * sign[:, None], atol=1e-7)
        assert np.all(sign[angle < 180 - 1e-6] > 0)
        rebuilt = ScipyRotation.from_rotvec(axis * np.radians(angle)[:, None])
        original = ScipyRotation.from_quat(q[:, [1, 2, 3, 0]])
        assert np.degrees((rebuilt.inv() * original).magnitude()).max() < 1e-6
    # near 180° with w of either sign: the angle comes from |w| (never above 180°)
    axis, angle = so3_map.axis_angle(near_half)
    assert angle.min() > 179.8


def test_identity_and_exact_half_turns():
    axis, angle = so3_map.axis_angle([[1, 0, 0, 0], [-1, 0, 0, 0], [0, 0, 0, -1], [0, 0, -1, 0], [0, -1, 0, 0],
                                      [0, 0.6, -0.8, 0], [0, 0.6, 0, -0.8]])
    np.testing.assert_allclose(angle, [0, 0, 180, 180, 180, 180, 180])
    np.testing.assert_allclose(axis[:2], [[1, 0, 0], [1, 0, 0]])  # the identity: +x, the map's centre
    # a half turn about a is one about -a: the axis whose first non-zero of (z, y, x) is positive
    np.testing.assert_allclose(axis[2:], [[0, 0, 1], [0, 1, 0], [1, 0, 0], [-0.6, 0.8, 0], [-0.6, 0, 0.8]])
    np.testing.assert_allclose(so3_map.hammer(axis[:1]), [[0, 0]], atol=1e-15)
    with pytest.raises(ValueError, match="shape"):
        so3_map.axis_angle(np.ones((3, 3)))
    with pytest.raises(ValueError, match="non-zero"):
        so3_map.axis_angle(np.zeros((1, 4)))


def test_hammer_projection_points_inverse_and_jacobian():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5000, 3))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    xy = so3_map.hammer(a)
    np.testing.assert_allclose(xy, _hammer(a), atol=1e-12)
    back, inside = so3_map.hammer_inverse(xy)
    assert inside.all()
    np.testing.assert_allclose(back, a, atol=1e-9)
    np.testing.assert_allclose(so3_map.hammer(np.eye(3)[[0, 2]]), [[0, 0], [0, HY]], atol=1e-12)  # +x centre, +z top
    assert so3_map.hammer([[0, 1, 0]])[0, 0] > 0 > so3_map.hammer([[0, -1, 0]])[0, 0]  # +y right, -y left
    rim = so3_map.hammer(np.stack([-np.cos(np.linspace(-1.5, 1.5, 50)), np.full(50, 1e-12),
                                   np.sin(np.linspace(-1.5, 1.5, 50))], 1))  # longitude ±180°: the rim
    np.testing.assert_allclose((rim[:, 0] / HX) ** 2 + (rim[:, 1] / HY) ** 2, 1.0, atol=1e-9)
    assert not so3_map.hammer_inverse([[HX, HY]])[1][0]

    def project(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        return so3_map.hammer(np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], 1))

    lon, lat = rng.uniform(-3.0, 3.0, 400), rng.uniform(-1.5, 1.5, 400)
    h = 1e-6
    d_lon = (project(lon + h, lat) - project(lon - h, lat)) / (2 * h)
    d_lat = (project(lon, lat + h) - project(lon, lat - h)) / (2 * h)
    det = d_lon[:, 0] * d_lat[:, 1] - d_lon[:, 1] * d_lat[:, 0]
    np.testing.assert_allclose(np.abs(det), np.cos(lat), rtol=1e-5)  # the sphere's area element cos φ dλ dφ


def _chi_square_p(xy: np.ndarray, n_total: int, nx: int = 16, ny: int = 8) -> float:
    """p-value of the counts in the grid cells that lie fully inside the ellipse against a uniform
    density over the map (expected count = n · cell area / 4π)."""
    xe, ye = np.linspace(-HX, HX, nx + 1), np.linspace(-HY, HY, ny + 1)
    counts, _, _ = np.histogram2d(xy[:, 0], xy[:, 1], bins=[xe, ye])
    cx, cy = np.meshgrid(xe, ye, indexing="ij")
    corner_in = (cx / HX) ** 2 + (cy / HY) ** 2 <= 1
    full = corner_in[:-1, :-1] & corner_in[1:, :-1] & corner_in[:-1, 1:] & corner_in[1:, 1:]
    expected = n_total * (xe[1] - xe[0]) * (ye[1] - ye[0]) / (4 * np.pi)
    observed = counts[full]
    assert observed.size >= 60
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    return float(stats.chi2.sf(statistic, df=observed.size))


def test_uniform_axes_fill_equal_map_areas_equally():
    rng = np.random.default_rng(2024)
    n = 200_000
    a = rng.normal(size=(n, 3))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    assert _chi_square_p(so3_map.hammer(a), n) > 1e-3
    # the test has the power to see a projection that is not equal-area: plate carrée, same ellipse box
    lon, lat = np.arctan2(a[:, 1], a[:, 0]), np.arcsin(a[:, 2])
    plate = np.stack([lon / np.pi * HX, lat / (np.pi / 2) * HY], 1)
    assert _chi_square_p(plate, n) < 1e-12


def test_angle_bands_default_count_and_edges():
    _, theta = so3_map.axis_angle(SO3Grid(N).quaternions)
    bands = so3_map.angle_bands(theta)
    np.testing.assert_allclose(bands.edges, [0, 45, 90, 135, 180])
    assert bands.labels[0] == "θ 0–45°" and not bands.exact
    counts = np.bincount(bands.index(theta), minlength=4)
    haar = np.diff([(t - np.sin(t)) / np.pi for t in np.radians(bands.edges)]) * N  # uniform: (θ - sin θ)/π
    np.testing.assert_allclose(counts, haar, atol=5)
    assert so3_map.angle_bands([180.0, 10.0, 20.0], 3).index([0.0, 59.999, 60.0, 180.0]).tolist() == [0, 0, 1, 2]
    # few rotations: fewer, wider bands, each with enough of them
    _, few = so3_map.axis_angle(SO3Grid(60).quaternions)
    coarse = so3_map.angle_bands(few)
    assert len(coarse) < 4 and np.bincount(coarse.index(few)).min() >= so3_map.MIN_PER_BAND
    # a finite group: one band per angle
    _, octa = so3_map.axis_angle(Octahedral().quaternions)
    exact = so3_map.angle_bands(octa)
    assert exact.exact and exact.labels == ("θ = 0°", "θ = 90°", "θ = 120°", "θ = 180°")
    assert np.bincount(exact.index(octa)).tolist() == [1, 6, 8, 9]
    assert len(so3_map.angle_bands(theta, [0, 30, 180])) == 2
    for bad in ([0, 90], [0, 90, 90, 180], 0):
        with pytest.raises(ValueError):
            so3_map.angle_bands(theta, bad)


# --------------------------------------------------------------------------- data and figures


def test_prepare_carries_the_rotations_only_for_rotation_lists(grid_results):
    data = prepare_aggregate(grid_results, "confidence", marker={"rotation": 100})
    assert data.kind == "so3map" and data.marker_index() == (100,)
    np.testing.assert_array_equal(data.info["quaternions"], SO3Grid(N).quaternions)
    individual = prepare_individual(grid_results, 100, "confidence")
    assert individual.kind == "so3map" and individual.info["quaternions"].shape == (N, 4)
    assert layout_kind(("rotation",)) == "line" and layout_kind(("rotation",), SO3Grid(4).quaternions) == "so3map"
    assert layout_kind(("angle",), SO3Grid(4).quaternions) == "polar"
    # a plain rotation-dimmed result that does not record its orbit keeps the line
    plain = prepare_aggregate(_result("A", _value(np.arange(N))), "confidence")
    assert plain.kind == "line" and "quaternions" not in plain.info
    # a selection of the rotations keeps their own quaternions
    part = _result("A", _value(np.arange(3)), SO3Grid(N), coords={"rotation": np.array([5.0, 7.0, 400.0])})
    np.testing.assert_array_equal(rotation_quaternions(part), SO3Grid(N).quaternions[[5, 7, 400]])
    # any Rotation3D list, e.g. random rotations; models on different rotations are refused
    rng = np.random.default_rng(3)
    r1, r2 = Rotation3D(rng.normal(size=(40, 4))), Rotation3D(rng.normal(size=(40, 4)))
    assert prepare_aggregate(_result("A", _value(np.arange(40)), r1), "confidence").kind == "so3map"
    with pytest.raises(ValueError, match="different 3-D rotations"):
        prepare_aggregate([_result("A", _value(np.arange(40)), r1), _result("B", _value(np.arange(40)), r2)],
                          "confidence")


def _truth(name: str) -> np.ndarray:
    return _value(np.arange(N)) if name == "A" else 1 - _value(np.arange(N))


def _pixel(xy: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of map points in a raster of ``width`` columns, row 0 at the bottom."""
    height = width // 2
    col = np.floor((xy[:, 0] + HX) / (2 * HX) * width).astype(int)
    row = np.floor((xy[:, 1] + HY) / (2 * HY) * height).astype(int)
    return row, col


def test_matplotlib_markers_and_cells_show_each_rotations_value_at_its_axis(grid_results):
    data = prepare_aggregate(grid_results, "confidence", marker={"rotation": 100})
    ref_axis, ref_angle = _scipy_axis_angle(SO3Grid(N).quaternions)
    band = np.minimum((ref_angle // 45).astype(int), 3)
    position = _hammer(ref_axis)
    fig = render(data)
    dots = {c.get_gid(): c for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)}
    assert sorted(dots) == sorted(f"{m}/{k}" for m in "AB" for k in range(4))  # rows = models, columns = bands
    row, col = _pixel(position, so3_map.RASTER_WIDTH)
    for gid, dot in dots.items():
        name, k = gid.split("/")
        k = int(k)
        members = np.flatnonzero(band == k)
        offsets, colours = np.asarray(dot.get_offsets()), np.asarray(dot.get_array())
        assert len(offsets) == len(members)
        for i in members:  # rotation i's value at its axis' point, in its band's panel
            j = int(np.argmin(np.linalg.norm(offsets - position[i], axis=1)))
            assert np.linalg.norm(offsets[j] - position[i]) < 1e-9
            assert colours[j] == pytest.approx(_truth(name)[i], abs=1e-12)
        assert dot.get_clim() == (0.0, 1.0) and dot.get_cmap().name == "viridis"
        ax = dot.axes
        (image,) = [im for im in ax.get_images() if isinstance(im, AxesImage)]
        assert image.get_gid() == f"{name}/{k}/cells" and image.get_clim() == (0.0, 1.0)
        cells = np.asarray(np.ma.filled(image.get_array(), np.nan))
        np.testing.assert_allclose(cells[row[members], col[members]], _truth(name)[members], atol=1e-12)
        rings = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        if k == band[100]:  # the selected rotation, circled in its band's panel
            assert len(rings) == 1 and np.hypot(rings[0].get_xdata()[0] - position[100, 0],
                                                rings[0].get_ydata()[0] - position[100, 1]) < 1e-9
        else:
            assert not rings
    assert fig.axes[-1].get_ylabel() == data.metric_label  # one shared colour bar


def test_plotly_markers_cells_colour_range_and_clicks(grid_results):
    data = prepare_aggregate(grid_results, "confidence", marker={"rotation": 100})
    ref_axis, ref_angle = _scipy_axis_angle(SO3Grid(N).quaternions)
    band = np.minimum((ref_angle // 45).astype(int), 3)
    position = _hammer(ref_axis)
    fig = render_plotly(data)
    coords = {"rotation": np.arange(N, dtype=float)}
    markers = [t for t in fig.data if t.meta["role"] == "value"]
    assert [(t.meta["series"], t.meta["band"]) for t in markers] == [(m, k) for m in "AB" for k in range(4)]
    row, col = _pixel(position, so3_map.PLOTLY_RASTER_WIDTH)
    for t in markers:
        name, k = t.meta["series"], t.meta["band"]
        custom = np.asarray(t.customdata, dtype=float)
        idx = custom[:, 0].astype(int)
        assert sorted(idx) == sorted(np.flatnonzero(band == k)) and t.marker.coloraxis == "coloraxis"
        np.testing.assert_allclose(np.stack([t.x, t.y], 1), position[idx], atol=1e-5)  # float32 on the wire
        np.testing.assert_allclose(np.asarray(t.marker.color, float), _truth(name)[idx], atol=1e-12)
        np.testing.assert_allclose(custom[:, 1], ref_angle[idx], atol=1e-4)
        np.testing.assert_allclose(custom[:, 2:], ref_axis[idx], atol=1e-6)
        for j in (0, len(idx) - 1):  # a click on a marker selects its rotation
            click = {"points": [{"x": float(t.x[j]), "y": float(t.y[j]), "customdata": custom[j].tolist()}]}
            assert element_from_click(click, ("rotation",), coords) == {"rotation": float(idx[j])}
        (cells,) = [c for c in fig.data if c.meta["role"] == "cells" and c.meta["series"] == name and c.meta["band"] == k]
        assert cells.type == "heatmap" and cells.coloraxis == "coloraxis"
        members = np.flatnonzero(band == k)
        owner = np.asarray(cells.customdata)
        np.testing.assert_array_equal(owner[row[members], col[members]], members)
        np.testing.assert_allclose(np.asarray(cells.z)[row[members], col[members]], _truth(name)[members], atol=1e-6)
        i = int(members[0])  # a click on a cell selects the rotation it belongs to
        assert element_from_click({"points": [{"x": 0.1, "y": 0.2, "customdata": int(owner[row[i], col[i]])}]},
                                  ("rotation",), coords) == {"rotation": float(i)}
    ca = fig.layout.coloraxis
    assert (ca.cmin, ca.cmax) == (0.0, 1.0) and ca.reversescale is False and ca.colorbar.title.text == data.metric_label
    rings = [t for t in fig.data if t.meta["role"] == "marker"]
    assert [(t.meta["series"], t.meta["band"], t.meta["rotation"]) for t in rings] == [
        ("A", band[100], 100), ("B", band[100], 100)]
    # off-map cells name nothing (never the map's x); a line plot's click (no customdata) reads x
    assert element_from_click({"points": [{"x": 1.0, "customdata": -1}]}, ("rotation",), coords) is None
    assert element_from_click({"points": [{"x": 5.0}]}, ("rotation",), coords) == {"rotation": 5.0}
    # every model and panel on one colour axis
    assert {t.coloraxis for t in fig.data if t.type == "heatmap"} == {"coloraxis"}


def test_error_metrics_use_the_reversed_shared_scale(grid_results):
    res = grid_results[0]
    res.data["mae"] = res.data["confidence"].copy()
    res.data["mae"].attrs = osc.tasks.Variable("mae", "float32", kind="real", lower_is_better=True, label="MAE").attrs()
    data = prepare_individual(res, 100, "mae")
    expected = np.percentile(res.data["mae"].sel(sample=100).values, [0, 80])
    dots = [c for ax in render(data).axes for c in ax.collections if isinstance(c, PathCollection)]
    assert {d.get_cmap().name for d in dots} == {"viridis_r"}
    assert all(d.get_clim() == pytest.approx(tuple(expected)) for d in dots)
    assert render_plotly(data).layout.coloraxis.reversescale is True


def test_real_point_cloud_run_draws_the_map_and_saves(tmp_path):
    rng = np.random.default_rng(0)
    clouds = (rng.normal(size=(6, 32, 3)) * [1.0, 0.4, 0.2]).astype(np.float32)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(96, 3))
    run = osc.evaluate(model, (clouds, np.arange(6) % 3), SO3Grid(128), osc.tasks.PointCloudClassification())
    data = prepare_aggregate(run.result, "confidence", marker={"rotation": 3})
    assert data.kind == "so3map"
    np.testing.assert_array_equal(data.info["quaternions"], SO3Grid(128).quaternions)
    path = save_figure(render(data), tmp_path / "map.png", dpi=60)
    image = imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 100 and image[..., :3].std() > 0.05  # not blank
    assert render_plotly(data).layout.height == 210 + 170
    octa = osc.evaluate(model, (clouds, np.arange(6) % 3), Octahedral(), osc.tasks.PointCloudClassification())
    octa_data = prepare_aggregate(octa.result, "confidence")
    assert octa_data.kind == "so3map" and so3_map.so3_map_layout(octa_data).bands.exact


def test_other_orbits_keep_their_layouts():
    """Image orbits (real runs) and the other groups (fakes with their orbit specs) get the layouts
    they had, and carry no rotations."""
    images = np.random.default_rng(0).random((4, 1, 28, 28)).astype(np.float32)
    torch.manual_seed(0)
    for orbit, kind in ((Rotation([0, 90, 180, 270]), "polar"), (Scale([0.9, 1.0, 1.1]), "line"),
                        (Translation([-2, 0, 2]), "heatmap"), (D4(), "mosaic")):
        run = osc.evaluate(TinyNet(), (images, np.arange(4)), orbit, osc.Classification())
        data = prepare_aggregate(run.result, "correct")
        assert data.kind == kind and "quaternions" not in data.info, orbit
        assert prepare_individual(run.result, int(run.result.data.sample.values[0]), "confidence").kind == kind
    disk = NeroSO3(axis_step=90, angle_step=90)
    shape = tuple(len(disk.coords[d]) for d in disk.dims)
    fake = _result("A", np.full(shape, 0.5), disk, dims=disk.dims, coords=disk.coords)
    assert prepare_aggregate(fake, "confidence").kind == "disk" and rotation_quaternions(fake) is None


def test_the_interface_draws_the_map_and_a_click_selects_the_rotation(tmp_path):
    """Two tiny models over SO3Grid(64) in a store: the interface's NERO plots are rotation maps,
    and a click on a marker (what plotly sends: its customdata) selects that rotation."""
    from orbitscope.app import AppData, Event
    from orbitscope.app import callbacks as cb
    from orbitscope.results.store import Store

    rng = np.random.default_rng(0)
    clouds = (rng.normal(size=(6, 16, 3)) * [1.0, 0.5, 0.2]).astype(np.float32)
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 3))
        osc.evaluate(model, (clouds, np.arange(6) % 3), SO3Grid(64), osc.tasks.PointCloudClassification(),
                     store=tmp_path, name=f"mlp{seed}", model_name=f"mlp{seed}")
    data = AppData(Store(tmp_path, create=False), ttl=0.0)
    (group,) = data.groups()
    c = cb.group_controls(data, group.key)
    controls = cb.parse_controls(group.key, c.models, "confidence", "all", "pca", "mean", "worst", [])
    up = cb.update_selection(data, None, controls, Event("context"))
    agg = cb.aggregate_figure(data, up.selection)
    kinds = {(t["type"], t["meta"]["role"]) for t in agg["data"]}
    assert {("heatmap", "cells"), ("scatter", "value")} <= kinds
    marker = next(t for t in agg["data"] if t["meta"]["role"] == "value" and t["meta"]["band"] == 1)
    custom = marker["customdata"]
    point = (np.frombuffer(base64.b64decode(custom["bdata"]), dtype=custom["dtype"]).reshape(-1, 5)
             if isinstance(custom, dict) else np.asarray(custom))[2]  # plotly's typed array, or a list
    click = {"points": [{"x": 0.5, "y": 0.5, "curveNumber": 3, "customdata": point.tolist()}]}
    up = cb.update_selection(data, up.selection, controls, Event("element", None, click))
    assert up.selection["element"] == {"rotation": float(point[0])}
    ind = cb.individual_figure(data, up.selection)
    rings = [t for t in ind["data"] if t["meta"]["role"] == "marker"]
    assert rings and all(t["meta"]["rotation"] == int(point[0]) for t in rings)
    assert cb.stored_detail(data, up.selection)[0].children.endswith(f"· rotation {point[0]:g}")
