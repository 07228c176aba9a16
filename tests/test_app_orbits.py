"""The web interface on the finite and SO(3) orbits: D4, D4 × time reversal, a flip, NERO's SO(3)
sample and the octahedral group, as callback-level checks against numbers computed here.

Store: 30 real MNIST digits (3 per class), each evaluated over ``d4_time_reversal()``, ``D4()`` and
``Flip("x")`` by a small random ReferenceCNN (weights cached in the store: live re-evaluation
works) and a nearest-centroid classifier (not loadable); and 9 random point clouds (N, 3) over
``NeroSO3()`` and ``Octahedral()`` by two tiny MLPs, with a Classification subclass whose inputs
are points (no image view).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CentroidNet
from PIL import Image
from torch import nn

import orbitscope as osc
from orbitscope.app import AppData, Event, view_for
from orbitscope.app import callbacks as cb
from orbitscope.app.state import (
    OrbitElement,
    discrete_dims,
    element_from_click,
    live_dims,
    single_element_orbit,
)
from orbitscope.app.views.classification import ClassificationView
from orbitscope.group import NERO_MOSAIC
from orbitscope.group.finite import D4, Flip, TimeReversal, d4_time_reversal
from orbitscope.group.orbits import Product, Rotation, Scale, rotation_matrix
from orbitscope.group.so3 import NeroSO3, Octahedral
from orbitscope.results.store import Store
from orbitscope.tasks import Classification, register_task

ORBITS = {"d4t": d4_time_reversal(), "d4": D4(), "flip": Flip("x")}
POINT_ORBITS = {"so3": NeroSO3(), "octahedral": Octahedral()}


@register_task
@dataclass(frozen=True)
class AppPointClassification(Classification):
    """Classification of point clouds (B, N, 3)."""

    kind: str = field(default="test-app-point-classification", init=False)
    input_kind = "points"


class PointMLP(nn.Module):
    def __init__(self, seed: int, n: int = 16, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * n, 16), nn.ReLU(), nn.Linear(16, classes))

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        return self.net(p.float())


def build_store(home: Path) -> dict[tuple[str, str], str]:
    """Evaluate the image and point-cloud runs into a new store; returns (orbit, model) -> run id."""
    data = osc.mnist_subset("test").stratified(3)
    train = osc.mnist_subset("train")
    x = train.images.astype(np.float32) / 255.0
    torch.manual_seed(0)
    ref = osc.ReferenceCNN(widths=(4, 4, 8, 8, 8, 8), hidden=16).eval()
    with torch.no_grad():
        ref.classifier[-1].weight.mul_(40.0)
    osc.save_model(ref, home / "models" / "ref.safetensors", metadata={"info": {"model_hash": osc.model_hash(ref)}})
    centroid = CentroidNet(np.stack([x[train.labels == c].mean(0) for c in range(10)]), scale=0.2).eval()
    ids = {}
    for oname, orbit in ORBITS.items():
        for mname, model in (("ref", ref), ("centroid", centroid)):
            run = osc.evaluate(model, data, orbit, osc.Classification(store_probabilities=True), store=home,
                               name=f"{mname}-{oname}", model_name=mname, batch_size=30)
            ids[(oname, mname)] = run.run_id
    rng = np.random.default_rng(0)
    clouds = (rng.normal(size=(9, 16, 3)) * [1.0, 0.5, 0.2]).astype(np.float32)
    for oname, orbit in POINT_ORBITS.items():
        for seed in (0, 1):
            run = osc.evaluate(PointMLP(seed), (clouds, np.arange(9) % 3), orbit,
                               AppPointClassification(store_probabilities=True), store=home,
                               name=f"mlp{seed}-{oname}", model_name=f"mlp{seed}")
            ids[(oname, f"mlp{seed}")] = run.run_id
    return ids


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[AppData, dict[tuple[str, str], str]]:
    home = tmp_path_factory.mktemp("app-orbits")
    ids = build_store(home)
    return AppData(Store(home, create=False), ttl=0.0), ids


def _group(data: AppData, kind: str):
    (group,) = [g for g in data.groups() if g.orbit["kind"] == kind]
    return group


def _start(data: AppData, kind: str, metric: str = "confidence"):
    group = _group(data, kind)
    c = cb.group_controls(data, group.key)
    controls = cb.parse_controls(group.key, c.models, metric, "all", "pca", "mean", "worst", [])
    return c, controls, cb.update_selection(data, None, controls, Event("context"))


def _array(value: object) -> np.ndarray:
    """plotly's base64 typed arrays ({'bdata', 'dtype', 'shape'}) or plain lists."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return arr.reshape([int(s) for s in str(value["shape"]).split(",")]) if "shape" in value else arr
    return np.asarray(value)


def _png(uri: str) -> np.ndarray:
    assert uri.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def _exact_warp(image: np.ndarray, linear: np.ndarray) -> np.ndarray:
    """out(p) = in(L⁻¹ p) on pixel centres about the image centre (+x right, +y down), for the
    signed permutation matrices of D4 and flips (computed here, independently of warp_images)."""
    h, w = image.shape
    i, j = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    p = np.stack([j + 0.5 - w / 2, i + 0.5 - h / 2], -1)  # (x, y)
    q = p @ np.linalg.inv(linear).T
    return image[np.rint(q[..., 1] + h / 2 - 0.5).astype(int), np.rint(q[..., 0] + w / 2 - 0.5).astype(int)]


def _cell_click(dims: tuple[str, ...], element: int) -> dict:
    """A plotly click on the mosaic cell of ``element`` (as the flat-cell heatmap reports it)."""
    grid = np.array(NERO_MOSAIC if len(dims) == 2 else [row[1:3] for row in NERO_MOSAIC])
    r, c = np.argwhere(grid == element)[0]
    return {"points": [{"x": c + 0.5, "y": r + 0.5, "z": 0.5, "customdata": element, "curveNumber": 0}]}


# --------------------------------------------------------------------------- state


def test_live_dims_of_element_indices_are_discrete():
    (d4,) = live_dims(D4())
    assert d4.discrete and d4.values == tuple(float(i) for i in range(8)) and d4.step == 1.0
    assert d4.labels == D4.NAMES and d4.marks() == dict(enumerate(D4.NAMES))
    assert d4.snap(2.4) == 2.0 and d4.snap(-3) == 0.0 and d4.snap(99) == 7.0
    tr, d4b = live_dims(d4_time_reversal())
    assert (tr.dim, tr.values, tr.labels) == ("time_reversed", (0.0, 1.0), ("time forward", "time reversed"))
    assert d4b == d4
    (flip,) = live_dims(Flip("y"))
    assert flip.values == (0.0, 1.0) and flip.labels == ("no flip", "top-bottom flip")
    plane, axis, angle = live_dims(NeroSO3())
    assert plane.labels == ("xy plane", "xz plane", "yz plane")
    assert (axis.step, len(axis.values), angle.step, len(angle.values)) == (5.0, 73, 15.0, 13)
    assert axis.marks() == {0: "axis_angle 0°", 360: "axis_angle 360°"}  # too many to label each
    (rot,) = live_dims(Octahedral())
    assert rot.discrete and rot.values == tuple(float(i) for i in range(24)) and rot.step == 1.0
    assert discrete_dims(d4_time_reversal()) == ("time_reversed", "d4") and discrete_dims(NeroSO3()) == NeroSO3.dims
    # continuous orbits are unchanged; a product mixes both kinds
    assert [(d.dim, d.low, d.high, d.step, d.discrete) for d in live_dims(Rotation(range(0, 361, 30)))] == [
        ("angle", 0.0, 360.0, 1.0, False)]
    angle2, flip2 = live_dims(Product(Rotation([0, 90]), Flip()))
    assert not angle2.discrete and flip2.discrete and discrete_dims(Product(Rotation([0, 90]), Flip())) == ("flip",)
    assert discrete_dims(Product(Rotation([0, 90]), Scale([1, 2]))) == ()


def test_single_element_orbit_holds_exactly_one_element():
    full = D4().transforms()
    for i in range(8):
        one = single_element_orbit(D4(), {"d4": float(i)})
        assert isinstance(one, OrbitElement) and one.size == 1 and len(one.transforms()) == 1
        np.testing.assert_array_equal(one.transforms().linear[0], full.linear[i])
    assert single_element_orbit(D4(), {"d4": 2.4}).index == 2  # snapped to a sampled element
    both = single_element_orbit(d4_time_reversal(), {"time_reversed": 1.0, "d4": 2.0})
    t = both.transforms()
    assert len(t) == 1 and bool(t.time_reversed[0])
    np.testing.assert_array_equal(t.linear[0], D4.matrices()[2])
    flip = single_element_orbit(Flip("x"), {"flip": 1.0}).transforms()
    np.testing.assert_array_equal(flip.linear[0], np.diag([-1.0, 1.0]))
    so3 = NeroSO3()
    one = single_element_orbit(so3, {"plane": 1.0, "axis_angle": 45.0, "rotation_angle": 30.0})
    flat = np.ravel_multi_index((1, 9, 2), so3.shape)
    assert one.index == flat and one.transforms().dim == 3
    np.testing.assert_allclose(one.transforms().linear[0], so3.matrices[flat])
    np.testing.assert_array_equal(single_element_orbit(Octahedral(), {"rotation": 5.0}).transforms().linear[0],
                                  Octahedral().matrices[5])
    # continuous factors still take any value: 37.5° is not on the grid
    mixed = single_element_orbit(Product(Rotation([0, 90]), Flip("x")), {"angle": 37.5, "flip": 1.0}).transforms()
    np.testing.assert_allclose(mixed.linear[0], rotation_matrix(37.5) @ np.diag([-1.0, 1.0]))
    assert single_element_orbit(Rotation([0, 90]), {"angle": 37.5}).coords["angle"].tolist() == [37.5]
    with pytest.raises(ValueError, match="needs values"):
        single_element_orbit(TimeReversal(), {"d4": 1.0})


def test_element_from_click_reads_mosaic_and_disk_cells():
    dims = ("time_reversed", "d4")
    coords = {d: v for d, v in d4_time_reversal().coords.items()}
    for e in range(16):
        assert element_from_click(_cell_click(dims, e), dims, coords) == {"time_reversed": e // 8, "d4": e % 8}
    # a per-pixel mosaic cell reports a position inside the cell and no customdata
    assert element_from_click({"points": [{"x": 0.3, "y": 0.9}]}, dims, coords) == {"time_reversed": 1.0, "d4": 2.0}
    assert element_from_click({"points": [{"customdata": 11}]}, dims, coords) == {"time_reversed": 1.0, "d4": 3.0}
    d4 = D4().coords
    for e in range(8):
        assert element_from_click(_cell_click(("d4",), e), ("d4",), d4) == {"d4": float(e)}
    assert element_from_click({"points": [{"x": 7.5, "y": 9.5}]}, ("d4",), d4) is None  # off the grid
    so3 = NeroSO3()
    flat = int(np.ravel_multi_index((2, 3, 4), so3.shape))
    click = {"points": [{"theta": 15.0, "r": 60.0, "customdata": [15.0, 60.0, flat]}]}
    assert element_from_click(click, so3.dims, so3.coords) == {"plane": 2.0, "axis_angle": 15.0, "rotation_angle": 60.0}
    assert element_from_click({"points": [{"customdata": [15.0, 60.0]}]}, so3.dims, so3.coords) is None
    assert element_from_click({"points": [{"x": 1.0, "y": 0.3}]}, ("flip",), Flip().coords) == {"flip": 1.0}


# --------------------------------------------------------------------------- image runs


@pytest.mark.parametrize("kind", ["d4t", "d4", "flip"])
def test_group_controls_offer_discrete_live_selectors(store, kind):
    data, ids = store
    c = cb.group_controls(data, _group(data, {"d4t": "product"}.get(kind, kind)).key)
    assert c.models == [ids[(kind, "ref")], ids[(kind, "centroid")]] and c.message is None
    assert [o["value"] for o in c.subset_options] == ["all", *range(10)]
    expected = {"d4t": ["time_reversed", "d4"], "d4": ["d4"], "flip": ["flip"]}[kind]
    assert [d.dim for d in c.live] == expected
    assert all(d.discrete and d.step == 1.0 and d.marks() for d in c.live)  # never a 0.07-step slider


@pytest.mark.parametrize("kind", ["product", "d4"])
def test_aggregate_and_individual_mosaics_show_the_stored_means(store, kind):
    data, ids = store
    name = "d4t" if kind == "product" else "d4"
    _, _, up = _start(data, kind)
    assert up.message == "" and up.labels[:2] == [up.labels[0], up.labels[1]] and up.labels[0].endswith("/30")
    agg = cb.aggregate_figure(data, up.selection)
    values = [t for t in agg["data"] if t["meta"]["role"] == "value"]
    assert [t["type"] for t in values] == ["heatmap", "heatmap"]
    dims = ORBITS[name].dims
    grid = np.array(NERO_MOSAIC if len(dims) == 2 else [row[1:3] for row in NERO_MOSAIC])
    sample = up.selection["sample"]
    ind = cb.individual_figure(data, up.selection)
    ind_values = [t for t in ind["data"] if t["meta"]["role"] == "value"]
    for trace, itrace, model in zip(values, ind_values, ("ref", "centroid")):
        res = data.store.load(ids[(name, model)])
        mean = res.confidence.values.astype(float).reshape(30, -1).mean(axis=0)
        np.testing.assert_allclose(_array(trace["z"]), mean[grid], rtol=1e-6)
        np.testing.assert_array_equal(_array(trace["customdata"]), grid)
        own = res.confidence.sel(sample=sample).values.astype(float).reshape(-1)
        np.testing.assert_allclose(_array(itrace["z"]), own[grid], rtol=1e-6)
    # the identity is selected first: the red frame is around element 0
    assert [t["meta"]["element"] for t in agg["data"] if t["meta"]["role"] == "marker"] == [0, 0]
    panels = cb.scatter_panels(data, up.selection)
    assert [p[2] for p in panels] == [True, True, False, False]
    assert len(panels[0][0]["data"][0]["customdata"]) == 30


@pytest.mark.parametrize("element", [10, 2, 7, 13])
def test_clicking_a_mosaic_cell_selects_the_element_and_shows_the_transformed_digit(store, element):
    data, ids = store
    _, controls, up = _start(data, "product")
    dims = ("time_reversed", "d4")
    up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(dims, element)))
    t, d = divmod(element, 8)
    assert up.selection["element"] == {"time_reversed": float(t), "d4": float(d)} and up.live[:2] == [t, d]
    agg = cb.aggregate_figure(data, up.selection)
    assert {tr["meta"]["element"] for tr in agg["data"] if tr["meta"]["role"] == "marker"} == {element}
    sample = up.selection["sample"]
    detail = cb.stored_detail(data, up.selection)
    name = ("time forward", "time reversed")[t] + ", " + D4.NAMES[d]
    assert detail[0].children.endswith(f"· {name}")
    res = data.store.load(ids[("d4t", "ref")])
    raw = res.data["input"].sel(sample=sample).values[0]
    image = _png(detail[1].children[0].src)
    np.testing.assert_array_equal(image, _exact_warp(raw, D4.matrices()[d]))  # time reversal leaves images alone
    bars = detail[1].children[1].children.figure
    for trace, model in zip(bars["data"], ("ref", "centroid")):
        stored = data.store.load(ids[("d4t", model)]).probabilities.sel(sample=sample, time_reversed=t, d4=d).values
        np.testing.assert_allclose(trace["y"], stored, rtol=1e-6)


def test_every_d4_element_warps_the_digit_exactly(store):
    data, ids = store
    _, controls, up = _start(data, "d4")
    raw = data.store.load(ids[("d4", "ref")]).data["input"].sel(sample=up.selection["sample"]).values[0]
    for e in range(8):
        up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(("d4",), e)))
        assert up.selection["element"] == {"d4": float(e)}
        detail = cb.stored_detail(data, up.selection)
        assert detail[0].children.endswith(f"· {D4.NAMES[e]}")
        np.testing.assert_array_equal(_png(detail[1].children[0].src), _exact_warp(raw, D4.matrices()[e]))
    np.testing.assert_array_equal(_exact_warp(raw, D4.matrices()[2]), np.rot90(raw))  # rot90: counter-clockwise
    np.testing.assert_array_equal(_exact_warp(raw, D4.matrices()[3]), raw[:, ::-1])  # h-flip: left-right


def test_live_reevaluation_chooses_sampled_elements(store):
    data, ids = store
    _, _, up = _start(data, "product")
    sample = up.selection["sample"]
    live = cb.live_detail(data, up.selection, [1, 2, 0])
    assert live[0].children == "live re-evaluation · time reversed, rot90"
    body = live[1].children[1].children
    (bars,) = [c for c in body if getattr(c, "id", None) == "live-bars"]
    assert [c.children for c in body if getattr(c, "className", None) == "note"] == [
        "centroid-d4t: model not loadable: stored values only"]
    stored = data.store.load(ids[("d4t", "ref")]).probabilities.sel(sample=sample, time_reversed=1, d4=2).values
    np.testing.assert_allclose(bars.figure["data"][0]["y"], stored, atol=1e-5)
    raw = data.store.load(ids[("d4t", "ref")]).data["input"].sel(sample=sample).values[0]
    np.testing.assert_array_equal(_png(live[1].children[0].src), np.rot90(raw))
    # values between (or beyond) the elements snap to a sampled element; no slider value: the selection
    assert cb.live_detail(data, up.selection, [0.7, 2.4])[0].children.endswith("time reversed, rot90")
    assert cb.live_detail(data, up.selection, [-5, 1e9])[0].children.endswith("time forward, vflip")
    assert cb.live_detail(data, up.selection, [None, None])[0].children.endswith("time forward, identity")


def test_flip_run_line_plot_click_detail_and_live(store):
    data, ids = store
    _, controls, up = _start(data, "flip")
    agg = cb.aggregate_figure(data, up.selection)
    values = [t for t in agg["data"] if t["meta"]["role"] == "value"]
    assert [t["type"] for t in values] == ["scatter", "scatter"]
    assert agg["layout"]["xaxis"]["ticktext"] == ["no flip", "left-right flip"]
    mean = data.store.load(ids[("flip", "ref")]).confidence.values.astype(float).mean(axis=0)
    np.testing.assert_allclose(_array(values[0]["y"]), mean, rtol=1e-6)
    up = cb.update_selection(data, up.selection, controls, Event("element", None, {"points": [{"x": 1.0, "y": 0.4}]}))
    assert up.selection["element"] == {"flip": 1.0} and up.live[0] == 1.0
    sample = up.selection["sample"]
    raw = data.store.load(ids[("flip", "ref")]).data["input"].sel(sample=sample).values[0]
    detail = cb.stored_detail(data, up.selection)
    assert detail[0].children.endswith("· left-right flip")
    np.testing.assert_array_equal(_png(detail[1].children[0].src), raw[:, ::-1])
    live = cb.live_detail(data, up.selection, [1])
    assert live[0].children == "live re-evaluation · left-right flip"
    np.testing.assert_array_equal(_png(live[1].children[0].src), raw[:, ::-1])
    stored = data.store.load(ids[("flip", "ref")]).probabilities.sel(sample=sample, flip=1).values
    np.testing.assert_allclose(live[1].children[1].children[0].figure["data"][0]["y"], stored, atol=1e-5)
    # the rankings and the individual plot work as for any orbit
    up = cb.update_selection(data, up.selection, controls, Event("rank", 1, 5))
    assert up.labels[1] == "5/30"
    ind = cb.individual_figure(data, up.selection)
    own = data.store.load(ids[("flip", "centroid")]).confidence.sel(sample=up.selection["sample"]).values
    np.testing.assert_allclose(_array([t for t in ind["data"] if t["meta"]["role"] == "value"][1]["y"]), own,
                               rtol=1e-6)


# --------------------------------------------------------------------------- point clouds


@pytest.mark.parametrize("kind", ["so3_nero", "octahedral"])
def test_point_cloud_runs_have_no_image_view(store, kind):
    data, _ = store
    assert isinstance(view_for("test-app-point-classification"), ClassificationView)
    c, controls, up = _start(data, kind)
    assert up.message == "" and c.live == [] and up.labels[0] == f"{up.ranks[0]}/9"
    agg = cb.aggregate_figure(data, up.selection)
    assert "message" not in agg["layout"].get("meta", {})
    if kind == "so3_nero":
        disks = [t for t in agg["data"] if t["type"] == "barpolar"]
        assert len(disks) == 6  # 2 models × 3 planes
        # a click on a cell of the xz disk selects that element (the plane comes from the cell)
        cell = disks[1]["customdata"][40]
        click = {"points": [{"theta": cell[0], "r": 10.0, "customdata": cell}]}
        up = cb.update_selection(data, up.selection, controls, Event("element", None, click))
        assert up.selection["element"] == {"plane": 1.0, "axis_angle": cell[0], "rotation_angle": cell[1]}
        expected = f"xz plane, axis_angle {cell[0]:g}°, rotation_angle {cell[1]:g}°"
    else:
        up = cb.update_selection(data, up.selection, controls, Event("element", None, {"points": [{"x": 5.0}]}))
        assert up.selection["element"] == {"rotation": 5.0}
        expected = "rotation 5"
    assert "message" not in cb.individual_figure(data, up.selection)["layout"].get("meta", {})
    assert all(shown for _, _, shown in cb.scatter_panels(data, up.selection)[:2])
    detail = cb.stored_detail(data, up.selection)
    assert detail[0].children.endswith(f"· {expected}")
    assert detail[1].children[0].children == "no image view for this input kind (points)"
    assert detail[1].children[1].children.id == "detail-bars"
    live = cb.live_detail(data, up.selection, [0, 0, 0])
    assert live[0].children == "no image view for this input kind (points): no live re-evaluation"


def test_a_slider_with_many_stops_labels_about_five_of_them() -> None:
    from orbitscope.app.state import live_dims

    psi = [d for d in live_dims(NeroSO3()) if d.dim == "rotation_angle"][0]
    marks = psi.marks()
    assert len(marks) == 13  # every sampled angle is a stop
    assert [k for k, v in marks.items() if v] == [0, 45, 90, 135, 180]
