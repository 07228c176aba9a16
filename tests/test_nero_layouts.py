"""NERO's mosaic (D4 × time reversal) and disk (SO(3) sample) layouts, read back from the figures.

Results are small fakes with the dims and attrs of real runs; every orbit element (and pixel)
gets a distinct known value, so a cell or polar cell showing the wrong element fails.
"""

import json

import numpy as np
import pytest
import xarray as xr
from matplotlib.collections import QuadMesh
from matplotlib.image import AxesImage, imread
from matplotlib.patches import Rectangle

from orbitscope.analysis.nero import layout_kind, prepare_aggregate, prepare_individual
from orbitscope.results import OrbitResult
from orbitscope.viz import mosaic
from orbitscope.viz.interactive import render_plotly
from orbitscope.viz.mosaic import cell_extent, element_name, mosaic_cells
from orbitscope.viz.plot import render, save_figure
from orbitscope.tasks import Classification, Variable

#: what a flow task's error variable carries (results carry their variables' meaning)
RMSE = Variable("rmse", "float32", kind="real", lower_is_better=True, label="RMSE", unit="px")
MOSAIC_DIMS = ("time_reversed", "d4")
DISK_DIMS = ("plane", "axis_angle", "rotation_angle")
#: NERO's mosaic as the contract gives it (row by row, each cell an element index 8·time_reversed + d).
NERO_MOSAIC = ((10, 2, 1, 9), (11, 3, 0, 8), (12, 4, 7, 15), (13, 5, 6, 14))
PHI = np.arange(0, 361, 5.0)  # 73 axis angles, 0 and 360 both
PSI = np.arange(0, 181, 15.0)  # 13 rotation angles


def _result(name, variable, dims, coords, values, extra=()):
    """An OrbitResult like the engine's: variable over ("sample", *dims, *extra)."""
    meta = RMSE.attrs() if variable == "rmse" else Classification().variable(variable).attrs()
    ds = xr.Dataset(
        {variable: (["sample", *dims, *extra], np.asarray(values, dtype=float), meta)},
        coords={"sample": np.arange(len(values)) + 100, **coords},
        attrs={"orbit_dims": json.dumps(list(dims)), "run_name": name, "model_name": name,
               "run_id": f"{name}-0123456789", "data_id": "fake-data"},
    )
    return OrbitResult(ds)


def _mosaic_result(name, element_value, extra_shape=(), variable="rmse"):
    """Two samples whose mean at element e = 8·time_reversed + d is element_value(e) (+ a map)."""
    e = np.arange(16).reshape(2, 8)
    base = np.vectorize(element_value)(e).astype(float)
    if extra_shape:
        h, w = extra_shape
        base = base[..., None, None] + (np.arange(h * w).reshape(h, w) / 1000.0)
    offset = 0.25 * np.ones_like(base)
    coords = {"time_reversed": np.array([0, 1]), "d4": np.arange(8)}
    return _result(name, variable, MOSAIC_DIMS, coords, np.stack([base - offset, base + offset]),
                   extra=("y", "x") if extra_shape else ())


def _disk_value(p, a, r):
    """A distinct value in [0, 1] per (plane, axis angle, rotation angle) position."""
    return (p * 73 * 13 + a * 13 + r + 1) / (3 * 73 * 13 + 2)


def _disk_result(name, flip=False):
    P, A, R = np.meshgrid(np.arange(3), np.arange(73), np.arange(13), indexing="ij")
    v = _disk_value(P, A, R)
    if flip:
        v = 1 - v
    coords = {"plane": np.array([0, 1, 2]), "axis_angle": PHI, "rotation_angle": PSI}
    return _result(name, "confidence", DISK_DIMS, coords, np.stack([v - 1e-3, v + 1e-3]))


def _cell_of_extent(left, right, bottom, top):
    return int(np.floor(min(top, bottom))), int(np.floor(left))


def _mpl_cells(ax):
    """{(r, c): image array} of the mosaic cells drawn on ``ax``."""
    out = {}
    for im in ax.get_images():
        if str(im.get_gid()).startswith("glyph"):  # the element's "F", drawn over flat cells
            continue
        assert isinstance(im, AxesImage) and im.origin == "upper"
        left, right, bottom, top = im.get_extent()
        assert top < bottom  # row 0 of the map at the smaller y, which is drawn on top (y axis inverted)
        out[_cell_of_extent(left, right, bottom, top)] = (np.asarray(im.get_array(), dtype=float), im)
    return out


def test_layout_kinds_for_the_new_groups():
    assert layout_kind(MOSAIC_DIMS) == "mosaic" and layout_kind(("d4",)) == "mosaic"
    assert layout_kind(DISK_DIMS) == "disk"
    assert layout_kind(("angle",)) == "polar" and layout_kind(("scale",)) == "line"
    assert layout_kind(("tx", "ty")) == "heatmap" and layout_kind(("d4", "time_reversed")) == "heatmap"
    for dims in [("a", "b", "c"), ("plane", "axis_angle", "angle"), ("x", "plane", "axis_angle", "rotation_angle")]:
        with pytest.raises(ValueError, match="no NERO layout"):
            layout_kind(dims)
    assert tuple(map(tuple, mosaic.NERO_MOSAIC)) == NERO_MOSAIC
    assert mosaic_cells(MOSAIC_DIMS).tolist() == [list(r) for r in NERO_MOSAIC]
    assert mosaic_cells(("d4",)).tolist() == [[2, 1], [3, 0], [4, 7], [5, 6]]
    assert element_name(0) == "identity" and element_name(10) == "rot90 (time reversed)"
    assert [element_name(d) for d in range(8)] == ["identity", "anti-diagonal flip", "rot90", "horizontal flip",
                                                   "rot180", "diagonal flip", "rot270", "vertical flip"]


def test_aggregate_mosaic_shows_each_element_in_its_cell_with_one_colour_range():
    """Two models, flat cells: cell (r, c) = mean of element NERO_MOSAIC[r][c]; errors use reversed
    viridis over the 0th–80th percentile of both models' values."""
    fa, fb = (lambda e: 1.0 + e), (lambda e: 3.0 * e + 0.5)
    data = prepare_aggregate([_mosaic_result("A", fa), _mosaic_result("B", fb)], "rmse",
                             marker={"time_reversed": 1, "d4": "rot90"})
    assert data.kind == "mosaic" and data.marker_index() == (1, 2)
    all_values = np.concatenate([[fa(e) for e in range(16)], [fb(e) for e in range(16)]])
    lo, hi = np.percentile(all_values, [0, 80])

    fig = render(data)
    axes = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in axes] == ["A", "B"]
    for ax, f in zip(axes, (fa, fb)):
        cells = _mpl_cells(ax)
        assert sorted(cells) == [(r, c) for r in range(4) for c in range(4)]
        for (r, c), (arr, im) in cells.items():
            e = NERO_MOSAIC[r][c]
            assert arr.shape == (1, 1) and arr[0, 0] == pytest.approx(f(e))
            assert im.get_clim() == pytest.approx((lo, hi)) and im.get_cmap().name == "viridis_r"
            assert im.get_gid() == f"element {e}"
        labels = {(int(np.floor(t.get_position()[1])), int(np.floor(t.get_position()[0]))): t.get_text()
                  for t in ax.texts}
        assert labels[(1, 2)].startswith("id\n") and labels[(0, 0)].startswith("rot90 (T)\n")
        frames = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
        assert len(frames) == 1 and (int(frames[0].get_y()), int(frames[0].get_x())) == (0, 0)  # element 10

    pfig = render_plotly(data)
    heat = [t for t in pfig.data if t.type == "heatmap"]
    assert [t.meta["series"] for t in heat] == ["A", "B"]
    for t, f in zip(heat, (fa, fb)):
        assert t.meta["elements"] == [list(r) for r in NERO_MOSAIC] and t.coloraxis == "coloraxis"
        z = np.asarray(t.z, dtype=float)
        np.testing.assert_allclose(z, [[f(e) for e in row] for row in NERO_MOSAIC])
        np.testing.assert_allclose(t.x, np.arange(4) + 0.5)
        np.testing.assert_allclose(t.y, np.arange(4) + 0.5)
        assert t.text[1][2] == "id" and t.text[0][0] == "rot90 (T)"
    ca = pfig.layout.coloraxis
    assert (ca.cmin, ca.cmax) == pytest.approx((lo, hi)) and ca.reversescale is True
    assert ca.colorbar.title.text == data.metric_label
    for axis in ("yaxis", "yaxis2"):
        assert tuple(pfig.layout[axis].range) == (4, 0)  # row 0 on top
    marks = [t for t in pfig.data if t.meta["role"] == "marker"]
    assert [m.meta["element"] for m in marks] == [10, 10]
    assert all(0 < x < 1 for x in marks[0].x) and all(0 < y < 1 for y in marks[0].y)


def test_individual_mosaic_of_per_pixel_maps_puts_each_map_in_its_cell():
    maps_a = _mosaic_result("A", lambda e: 10.0 * e, extra_shape=(3, 5))
    maps_b = _mosaic_result("B", lambda e: 10.0 * e + 5, extra_shape=(3, 5))
    sample = 101
    data = prepare_individual([maps_a, maps_b], sample, "rmse")
    assert data.kind == "mosaic" and data.series[0].values.shape == (2, 8, 3, 5)
    expected = {name: res.data["rmse"].sel(sample=sample).values.reshape(16, 3, 5)
                for name, res in (("A", maps_a), ("B", maps_b))}
    both = np.concatenate([expected["A"].ravel(), expected["B"].ravel()])

    fig = render(data)
    axes = [ax for ax in fig.axes if ax.get_images()]
    for ax, name in zip(axes, ("A", "B")):
        assert ax.get_ylim()[0] > ax.get_ylim()[1]  # y down
        cells = _mpl_cells(ax)
        assert len(cells) == 16
        for (r, c), (arr, im) in cells.items():
            e = NERO_MOSAIC[r][c]
            np.testing.assert_array_equal(arr, expected[name][e])  # the map, not transposed or flipped
            left, right, bottom, top = im.get_extent()
            assert c < left < right < c + 1 and r < top < bottom < r + 1
            assert (right - left) / (bottom - top) == pytest.approx(5 / 3)  # the map keeps its aspect
            assert im.get_clim() == pytest.approx(tuple(np.percentile(both, [0, 80])))

    pfig = render_plotly(data)
    for name in ("A", "B"):
        heat = [t for t in pfig.data if t.type == "heatmap" and t.meta["series"] == name]
        assert len(heat) == 16
        for t in heat:
            r, c = t.meta["cell"]
            assert t.meta["element"] == NERO_MOSAIC[r][c]
            np.testing.assert_array_equal(np.asarray(t.z, dtype=float), expected[name][t.meta["element"]])
            left, right, top, bottom = cell_extent(r, c, (3, 5))
            assert t.x0 - t.dx / 2 == pytest.approx(left) and t.x0 + 4.5 * t.dx == pytest.approx(right)
            assert t.y0 - t.dy / 2 == pytest.approx(top) and t.y0 + 2.5 * t.dy == pytest.approx(bottom)
            assert int(np.floor(t.x0)) == c and int(np.floor(t.y0)) == r and t.coloraxis == "coloraxis"
    labels = [t for t in pfig.data if t.meta["role"] == "label"]
    assert len(labels) == 2 and "rot90 (T)" in labels[0].text


def test_plotly_maps_are_block_averaged_when_large():
    from orbitscope.viz.mosaic import render_mosaic_plotly

    res = _mosaic_result("A", lambda e: float(e), extra_shape=(8, 8))
    data = prepare_individual(res, 100, "rmse")
    small = render_mosaic_plotly(data, max_side=4)
    t = next(t for t in small.data if t.type == "heatmap" and t.meta["element"] == 3)
    full = res.data["rmse"].sel(sample=100).values[0, 3]
    np.testing.assert_allclose(np.asarray(t.z), full.reshape(4, 2, 4, 2).mean(axis=(1, 3)))


def test_d4_mosaic_is_the_middle_two_columns():
    coords = {"d4": np.arange(8)}
    value = np.array([0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    res = _result("A", "confidence", ("d4",), coords, np.stack([value, value]))
    data = prepare_aggregate(res, "confidence", marker={"d4": 5})
    assert data.kind == "mosaic"
    fig = render(data)
    (ax,) = [ax for ax in fig.axes if ax.get_images()]
    cells = _mpl_cells(ax)
    assert sorted(cells) == [(r, c) for r in range(4) for c in range(2)]
    for (r, c), (arr, im) in cells.items():
        assert arr[0, 0] == pytest.approx(value[NERO_MOSAIC[r][c + 1]])
        assert im.get_cmap().name == "viridis" and im.get_clim() == (0.0, 1.0)  # a probability: its range
    frame = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(frame) == 1 and (int(frame[0].get_y()), int(frame[0].get_x())) == (3, 0)  # diagonal flip
    pfig = render_plotly(data)
    (heat,) = [t for t in pfig.data if t.type == "heatmap"]
    np.testing.assert_allclose(np.asarray(heat.z), value[[[2, 1], [3, 0], [4, 7], [5, 6]]])
    assert pfig.layout.coloraxis.reversescale is False and (pfig.layout.coloraxis.cmin, pfig.layout.coloraxis.cmax) == (0, 1)


def test_mosaic_refuses_values_of_the_wrong_shape():
    res = _result("A", "rmse", MOSAIC_DIMS, {"time_reversed": [0, 1], "d4": np.arange(4)}, np.ones((2, 2, 4)))
    with pytest.raises(ValueError, match="orbit shape"):
        render(prepare_aggregate(res, "rmse"))


def _nearest_position(values, x):
    return int(np.argmin(np.abs(np.asarray(values) - x)))


def test_disk_colour_at_each_rotation_is_that_elements_value():
    results = [_disk_result("A"), _disk_result("B", flip=True)]
    data = prepare_aggregate(results, "confidence", marker={"plane": "xz", "axis_angle": 92, "rotation_angle": 88})
    assert data.kind == "disk" and data.marker_index() == (1, 18, 6)
    truth = {"A": lambda p, a, r: _disk_value(p, a, r), "B": lambda p, a, r: 1 - _disk_value(p, a, r)}

    fig = render(data)
    meshes = [(ax, c) for ax in fig.axes if ax.name == "polar" for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(meshes) == 6  # rows = models, columns = planes
    for k, (ax, mesh) in enumerate(meshes):
        name, plane = mesh.get_gid().split("/")
        p, f = ["xy", "xz", "yz"].index(plane), truth[name]
        assert (name, p) == (("A", "B")[k // 3], k % 3)
        assert ax.name == "polar" and ax.get_ylim() == (0.0, 180.0)
        assert ax.get_theta_direction() == 1 and ax.get_theta_offset() == 0.0  # counter-clockwise from the right
        xy = mesh.get_coordinates()  # (rings + 1, axes + 1, 2): (theta in rad, radius in degrees)
        vals = np.asarray(mesh.get_array()).reshape(xy.shape[0] - 1, xy.shape[1] - 1)
        assert vals.shape == (13, 72)  # 360° not drawn again over 0°
        theta_edges, r_edges = np.rad2deg(xy[0, :, 0]), xy[:, 0, 1]
        np.testing.assert_allclose(theta_edges[[0, -1]], [-2.5, 357.5])  # a filled, closed disk
        np.testing.assert_allclose(r_edges, np.concatenate([[0], PSI[:-1] + 7.5, [180]]))
        for i in range(13):
            for j in range(72):
                phi = (theta_edges[j] + theta_edges[j + 1]) / 2
                psi = (r_edges[i] + r_edges[i + 1]) / 2
                a, r = _nearest_position(PHI, phi % 360), _nearest_position(PSI, psi)
                assert vals[i, j] == pytest.approx(f(p, a, r), abs=1e-12)
        assert mesh.get_clim() == (0.0, 1.0) and mesh.get_cmap().name == "viridis"
        dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        if p == 1:
            assert len(dots) == 1 and np.rad2deg(dots[0].get_xdata()[0]) == pytest.approx(90)
            assert dots[0].get_ydata()[0] == 90
        else:
            assert not dots
    assert fig.axes[-1].get_ylabel() == data.metric_label  # the colour bar

    pfig = render_plotly(data)
    bars = [t for t in pfig.data if t.type == "barpolar"]
    assert [(t.meta["series"], t.meta["plane"]) for t in bars] == [(m, q) for m in "AB" for q in ("xy", "xz", "yz")]
    for t in bars:
        p, f = ["xy", "xz", "yz"].index(t.meta["plane"]), truth[t.meta["series"]]
        theta, width = np.asarray(t.theta, float), np.asarray(t.width, float)
        base, ring = np.asarray(t.base, float), np.asarray(t.r, float)
        colour = np.asarray(t.marker.color, float)
        assert len(colour) == 72 * 13 and t.marker.coloraxis == "coloraxis"
        assert width.sum() == pytest.approx(13 * 360)  # every ring closed
        assert set(np.round(base + ring, 9)) - set(np.round(base, 9)) == {180.0}  # rings tile 0…180
        for k in range(len(colour)):
            a = _nearest_position(PHI, theta[k] % 360)
            r = _nearest_position(PSI, base[k] + ring[k] / 2)
            assert colour[k] == pytest.approx(f(p, a, r), abs=1e-12)
            assert tuple(t.customdata[k]) == (PHI[a], PSI[r])
    ca = pfig.layout.coloraxis
    assert (ca.cmin, ca.cmax) == (0.0, 1.0) and ca.reversescale is False and ca.colorbar.title.text == data.metric_label
    polars = [pfig.layout[k] for k in pfig.layout if k.startswith("polar")]
    assert len(polars) == 6
    for pol in polars:
        assert pol.angularaxis.direction == "counterclockwise" and pol.angularaxis.rotation == 0
        assert tuple(pol.radialaxis.range) == (0, 180)
    marks = [t for t in pfig.data if t.meta["role"] == "marker"]
    assert [(m.meta["series"], m.meta["plane"], m.theta[0], m.r[0]) for m in marks] == [
        ("A", "xz", 90.0, 90.0), ("B", "xz", 90.0, 90.0)]


def test_individual_disk_and_error_colours():
    """An individual disk shows the sample's values; an error metric gets reversed viridis over the
    0th–80th percentile."""
    res = _disk_result("A")
    sample = 100
    data = prepare_individual(res, sample, "confidence")
    fig = render(data)
    mesh = next(c for ax in fig.axes if ax.name == "polar" for c in ax.collections if isinstance(c, QuadMesh))
    vals = np.asarray(mesh.get_array()).reshape(13, 72)
    np.testing.assert_allclose(vals, res.data["confidence"].sel(sample=sample).values[0, :72, :].T)
    res.data["mae"] = res.data["confidence"].copy()
    res.data["mae"].attrs = Variable("mae", "float32", kind="real", lower_is_better=True, label="MAE").attrs()
    err = prepare_individual(res, sample, "mae")
    mesh = next(c for ax in render(err).axes if ax.name == "polar" for c in ax.collections if isinstance(c, QuadMesh))
    expected = np.percentile(res.data["mae"].sel(sample=sample).values, [0, 80])
    assert mesh.get_cmap().name == "viridis_r" and mesh.get_clim() == pytest.approx(tuple(expected))
    assert render_plotly(err).layout.coloraxis.reversescale is True


def test_new_layouts_save_as_png(tmp_path):
    flat = prepare_aggregate([_mosaic_result("A", float), _mosaic_result("B", lambda e: 2.0 * e)], "rmse")
    maps = prepare_individual(_mosaic_result("A", float, extra_shape=(16, 16)), 100, "rmse")
    disk = prepare_aggregate([_disk_result("A"), _disk_result("B", flip=True)], "confidence",
                             marker={"plane": 0, "axis_angle": 45, "rotation_angle": 90})
    for name, data in (("mosaic", flat), ("maps", maps), ("disk", disk)):
        path = save_figure(render(data), tmp_path / f"{name}.png", dpi=60)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = imread(path)
        assert image.ndim == 3 and min(image.shape[:2]) > 100 and image[..., :3].std() > 0.05  # not blank


def test_heatmaps_share_one_colour_range_and_reverse_it_for_errors():
    """Like the mosaic: one range across models; errors bright when low (reversed viridis, 0–80th pct)."""
    coords = {"tx": np.array([-2.0, 0.0, 2.0]), "ty": np.array([-2.0, 0.0, 2.0])}
    a = _result("A", "rmse", ("tx", "ty"), coords, np.stack([np.arange(9.0).reshape(3, 3)] * 2))
    b = _result("B", "rmse", ("tx", "ty"), coords, np.stack([10 + np.arange(9.0).reshape(3, 3)] * 2))
    data = prepare_aggregate([a, b], "rmse")
    meshes = [c for ax in render(data).axes for c in ax.collections if isinstance(c, QuadMesh)
              and c.get_cmap().name != "Greys"]  # not the interval half-width panels
    lo, hi = np.percentile(np.r_[np.arange(9.0), 10 + np.arange(9.0)], [0, 80])
    assert len(meshes) >= 2 and all(m.get_cmap().name == "viridis_r" for m in meshes)  # + the colour bar
    assert all(m.get_clim() == pytest.approx((lo, hi)) for m in meshes)
    traces = [t for t in render_plotly(data).data if t.type == "heatmap"]
    assert all(t.reversescale and (t.zmin, t.zmax) == pytest.approx((lo, hi)) for t in traces)


def test_the_mosaic_glyph_is_the_letter_f_moved_by_neros_elements():
    from orbitscope.viz.mosaic import F_GLYPH, element_glyph

    c = np.zeros((7, 7), dtype=bool)
    c[:, 1:6] = F_GLYPH
    # NERO's D4 order (seeds.md): id, anti-diagonal flip (x, y) -> (-y, -x), rot90 counter-clockwise,
    # horizontal flip, rot180, diagonal flip (transpose), rot270, vertical flip; as displayed, row 0 on top
    want = [c, c[::-1, ::-1].T, np.rot90(c, 1), c[:, ::-1], np.rot90(c, 2), c.T, np.rot90(c, 3), c[::-1]]
    for e in range(16):
        np.testing.assert_array_equal(element_glyph(e), want[e % 8], err_msg=f"element {e}")
    assert len({element_glyph(e).tobytes() for e in range(8)}) == 8  # all eight glyphs differ
