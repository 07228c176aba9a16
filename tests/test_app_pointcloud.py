"""The interface's point-cloud view, through the callback functions (no browser), against numbers
computed here.

Store: nine clouds of 48 points (three per class: an "L", a ring with a stick, a tripod; centred,
largest norm 1), evaluated with ``PointCloudClassification(store_probabilities=True)``,
``store_inputs=True`` and ``consensus=True`` over NERO's SO(3) sample ``NeroSO3(axis_step=60, angle_step=45)`` and over
``SO3Grid(12)`` by two tiny point networks of a registered architecture: ``net-a`` (weights in the
store's model cache: live re-evaluation re-runs it) and ``net-b`` (no weights: not loadable);
``net-c`` over ``SO3Grid(12)`` without stored clouds, probabilities or NERO's score
(``nero_score=False``); and ``net-a`` over a planar ``Rotation([0, 30, 90])`` (rotations about z).
The networks return logits, so every run but net-c's records ``nero_score`` (the task's default).

References are computed independently of the library: NERO's rotation from its quaternion
``q = (cos ψ/2, sin ψ/2 · axis)`` with the axis of each plane written out here, the super-Fibonacci
rotations from Alexa's formula, and every rotation applied with ``scipy.spatial.transform``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation as R
from torch import nn

import orbitscope as osc
from orbitscope.app import AppData, Event, create_app, view_for
from orbitscope.app import callbacks as cb
from orbitscope.app.views.classification import ClassificationView
from orbitscope.app.views.pointcloud import (
    PointCloudView,
    axis_angle,
    axis_from_angles,
    element_axis_angle,
    free_rotation,
    live_control_id,
    live_rotation_detail,
    nero_coordinates,
)
from orbitscope.group.so3 import NeroSO3, SO3Grid
from orbitscope.models import register_model
from orbitscope.results.store import Store
from orbitscope.tasks import PointCloudClassification

ARCH = "test-app-pointcloud-net"
N_CLOUDS, N_POINTS, CLASSES = 9, 48, 3
ORBITS = {"so3_nero": NeroSO3(axis_step=60, angle_step=45), "so3_grid": SO3Grid(12)}


class StoredPointNet(nn.Module):
    """A tiny PointNet: a shared per-point layer, max pooling, a linear head; its weights follow
    from ``seed`` (the store's model cache rebuilds it from its config and loads them)."""

    def __init__(self, seed: int = 0, hidden: int = 16, classes: int = CLASSES) -> None:
        super().__init__()
        self.point = nn.Linear(3, hidden)
        self.head = nn.Linear(hidden, classes)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
        self.config = {"arch": ARCH, "seed": seed, "hidden": hidden, "classes": classes}

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.point(points.float())).amax(dim=1))


register_model(ARCH, StoredPointNet)


def make_clouds(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Nine clouds (N_POINTS, 3), three per class, centred, largest norm 1; labels 0, 1, 2, 0, …

    Shapes whose orientation shows (so a rotation is visible): class 0 an "L" (a long arm along
    +x, a short one along +z), class 1 a ring in the xy plane with a stick along +z, class 2 a
    tripod with arms of three lengths along +x, +y, +z; jittered per sample."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, N_POINTS // 2)
    zeros = np.zeros_like(t)
    ring = np.linspace(0.0, 2 * np.pi, N_POINTS // 2, endpoint=False)
    third = np.linspace(0.0, 1.0, N_POINTS // 3)
    shapes = [
        np.concatenate([np.stack([t, zeros, zeros], 1), np.stack([zeros, zeros, 0.6 * t], 1)]),
        np.concatenate([np.stack([np.cos(ring), np.sin(ring), zeros], 1), np.stack([zeros, zeros, 1.2 * t], 1)]),
        np.concatenate([np.stack([third, 0 * third, 0 * third], 1), np.stack([0 * third, 0.6 * third, 0 * third], 1),
                        np.stack([0 * third, 0 * third, 0.35 * third], 1)]),
    ]
    clouds = np.stack([shapes[i % CLASSES] * rng.uniform(0.8, 1.2, size=3) + rng.normal(scale=0.03, size=(N_POINTS, 3))
                       for i in range(N_CLOUDS)])
    clouds -= clouds.mean(axis=1, keepdims=True)
    clouds /= np.linalg.norm(clouds, axis=2).max(axis=1)[:, None, None]
    return clouds.astype(np.float32), np.arange(N_CLOUDS) % CLASSES


def build_pointcloud_store(home: Path) -> dict[tuple[str, str], str]:
    """Evaluate the runs of the module docstring into the store at ``home``; returns
    (orbit kind, model name) -> run id."""
    clouds, labels = make_clouds()
    ids = {}
    saved = StoredPointNet(0)
    osc.save_model(saved, home / "models" / "net-a.safetensors",
                   metadata={"info": {"model_hash": osc.model_hash(saved)}})
    for kind, orbit in ORBITS.items():
        for name, seed in (("net-a", 0), ("net-b", 1)):
            run = osc.evaluate(StoredPointNet(seed), (clouds, labels), orbit,
                               PointCloudClassification(store_probabilities=True), store=home, name=f"{name}-{kind}",
                               model_name=name, store_inputs=True, consensus=True, data_id="clouds")
            ids[(kind, name)] = run.run_id
    run = osc.evaluate(saved, (clouds, labels), osc.Rotation([0, 30, 90]), PointCloudClassification(store_probabilities=True),
                       store=home, name="net-a-rotation", model_name="net-a", store_inputs=True, data_id="clouds")
    ids[("rotation", "net-a")] = run.run_id
    run = osc.evaluate(StoredPointNet(2), (clouds, labels), ORBITS["so3_grid"], PointCloudClassification(nero_score=False),
                       store=home, name="net-c-so3_grid", model_name="net-c", store_inputs=False, data_id="clouds")
    ids[("so3_grid", "net-c")] = run.run_id
    return ids


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[AppData, dict[tuple[str, str], str], Path]:
    home = tmp_path_factory.mktemp("pointcloud-store")
    ids = build_pointcloud_store(home)
    return AppData(Store(home, create=False), ttl=0.0), ids, home


# --------------------------------------------------------------------------- references


def nero_rotation(plane: int, phi: float, psi: float) -> R:
    """NERO's element as scipy rotation, from q = (cos ψ/2, sin ψ/2 · axis)."""
    c, s = math.cos(math.radians(phi)), math.sin(math.radians(phi))
    axis = {0: (c, s, 0.0), 1: (c, 0.0, -s), 2: (0.0, c, s)}[plane]
    h = math.radians(psi) / 2
    return R.from_quat([*(math.sin(h) * np.array(axis)), math.cos(h)])  # scipy: (x, y, z, w)


def super_fibonacci_rotation(n: int, i: int) -> R:
    """Alexa's super-Fibonacci rotation i of n (CVPR 2022, Algorithm 1), as (w, x, y, z)."""
    psi = max(r.real for r in np.roots([1, 0, 0, -1, -4]) if abs(r.imag) < 1e-12)
    s = i + 0.5
    a, b = 2 * math.pi * s / math.sqrt(2), 2 * math.pi * s / psi
    w, x, y, z = (math.sqrt(s / n) * math.sin(a), math.sqrt(s / n) * math.cos(a),
                  math.sqrt(1 - s / n) * math.sin(b), math.sqrt(1 - s / n) * math.cos(b))
    return R.from_quat([x, y, z, w])


def probabilities(model: nn.Module, cloud: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return torch.softmax(model(torch.from_numpy(np.asarray(cloud, dtype=np.float32))[None]), -1)[0].double().numpy()


# --------------------------------------------------------------------------- helpers


def _group(data: AppData, kind: str) -> Any:
    (group,) = [g for g in data.groups() if g.orbit["kind"] == kind]
    return group


def _start(data: AppData, kind: str, runs: list[str] | None = None, metric: str = "confidence",
           subset: Any = "all", label_free: bool = False) -> tuple[Any, Any]:
    group = _group(data, kind)
    models = runs if runs is not None else cb.group_controls(data, group.key).models
    controls = cb.parse_controls(group.key, models, metric, subset, "pca", "mean", "worst", ["on"] if label_free else [])
    return controls, cb.update_selection(data, None, controls, Event("context"))


def _find(component: Any, id_: Any) -> Any:
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        hit = _find(child, id_)
        if hit is not None:
            return hit
    return None


def _find_in(parts: list[Any], id_: Any) -> Any:
    for part in parts:
        hit = _find(part, id_)
        if hit is not None:
            return hit
    raise AssertionError(f"no component {id_!r}")


def _text(component: Any) -> str:
    if isinstance(component, str):
        return component
    children = getattr(component, "children", None)
    if children is None:
        return ""
    return " ".join(_text(c) for c in (children if isinstance(children, (list, tuple)) else [children]))


def _trace(fig: dict, role: str) -> dict:
    (trace,) = [t for t in fig["data"] if (t.get("meta") or {}).get("role") == role]
    return trace


def _xyz(trace: dict) -> np.ndarray:
    return np.stack([trace["x"], trace["y"], trace["z"]], axis=-1).astype(np.float64)


def _bars(fig: dict) -> dict[str, np.ndarray]:
    return {t["meta"]["series"]: np.asarray(t["y"], dtype=np.float64) for t in fig["data"] if t["type"] == "bar"}


def _disk_click(agg: dict, series: str, plane: str, phi: float, psi: float) -> dict:
    """A plotly click on the cell (φ, ψ) of ``series``'s disk of ``plane`` (as the shell tags it)."""
    (disk,) = [t for t in agg["data"] if t["type"] == "barpolar" and t["meta"]["plane"] == plane
               and t["meta"]["series"] == series]
    (cell,) = [c for c in disk["customdata"] if c[0] == phi and c[1] == psi]
    return {"points": [{"theta": cell[0], "r": cell[1], "customdata": cell, "curveNumber": 0}]}


# --------------------------------------------------------------------------- rotations


def test_axis_angle_rotation_matches_scipy_rotvec():
    rng = np.random.default_rng(5)
    cases = [(0, 0, 0), (0, 0, 180), (90, 0, 90), (-90, 90, 30), (45, -90, 180), (180, 0, 1e-7)]
    cases += [tuple(v) for v in np.column_stack([rng.uniform(-180, 180, 20), rng.uniform(-90, 90, 20),
                                                 rng.uniform(0, 180, 20)])]
    for az, el, psi in cases:
        a, e = math.radians(az), math.radians(el)
        axis = np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])
        np.testing.assert_allclose(axis_from_angles(az, el), axis, atol=1e-12)
        want = R.from_rotvec(math.radians(psi) * axis).as_matrix()
        one = free_rotation(az, el, psi)
        assert one.size == 1 and one.transforms().dim == 3
        np.testing.assert_allclose(one.transforms().linear[0], want, atol=1e-12)
        np.testing.assert_allclose(axis_angle(az, el, psi).matrix(), want, atol=1e-12)
        back = element_axis_angle(one)  # and back to an axis and angle
        assert back.angle == pytest.approx(psi, abs=1e-6)
        if 1e-3 < psi:
            np.testing.assert_allclose(back.axis, axis, atol=1e-6)
    # an angle beyond 180° is the turn the other way about the opposite axis
    np.testing.assert_allclose(axis_angle(30, 10, 300).matrix(), axis_angle(30, 10, -60).matrix(), atol=1e-12)
    np.testing.assert_allclose(axis_angle(30, 10, 300).matrix(),
                               R.from_rotvec(math.radians(300) * axis_from_angles(30, 10)).as_matrix(), atol=1e-12)
    assert axis_angle(30, 10, 300).angle == pytest.approx(60)
    for bad in (("x", 0, 0), (0, None, 0), (0, 0, float("inf")), (0, 0, float("nan"))):
        with pytest.raises(ValueError, match="rotation's"):
            axis_angle(*bad)


def test_nero_elements_as_axis_angle_and_coordinates():
    orbit = ORBITS["so3_nero"]
    for flat in range(orbit.size):
        p, a, r = np.unravel_index(flat, orbit.shape)
        phi, psi = float(orbit.coords["axis_angle"][a]), float(orbit.coords["rotation_angle"][r])
        rot = element_axis_angle(orbit, flat)
        np.testing.assert_allclose(rot.matrix(), nero_rotation(int(p), phi, psi).as_matrix(), atol=1e-12)
        assert rot.angle == pytest.approx(psi, abs=1e-9)
        plane = NeroSO3.PLANES[int(p)]
        coords = {(q, round(f % 360, 6) % 360, round(s, 6)) for q, f, s in nero_coordinates(rot)}
        if psi == 180 and (plane, phi % 360, psi) not in coords:  # ψ = 180° about ±axis: the same rotation
            phi += 180.0
        assert (plane, phi % 360, psi) in coords
    # an axis off the three planes has no NERO coordinates; one along y lies in xy and yz
    assert nero_coordinates(axis_angle(30, 20, 50)) == []
    assert {c[0] for c in nero_coordinates(axis_angle(90, 0, 50))} == {"xy", "yz"}


# --------------------------------------------------------------------------- selectors


def test_point_cloud_runs_get_their_view_and_the_classification_selectors(store):
    data, ids, _ = store
    view = view_for("pointcloud")
    assert isinstance(view, PointCloudView) and isinstance(view, ClassificationView)
    group = _group(data, "so3_nero")
    assert group.task_kind == "pointcloud"
    c = cb.group_controls(data, group.key)
    assert c.models == [ids[("so3_nero", "net-a")], ids[("so3_nero", "net-b")]] and c.message is None
    assert [o["value"] for o in c.subset_options] == ["all", 0, 1, 2]
    assert [d.dim for d in c.live] == ["plane", "axis_angle", "rotation_angle"]
    options, value, msg = cb.metric_controls(data, group.key, c.models, False, None)
    values = [o["value"] for o in options]
    assert value == "nero_score" and msg is None  # NERO's individual score: the runs recorded it
    assert values[:4] == ["confidence", "correct", "top1_confidence", "entropy"]  # prediction: a state
    assert "nero_score" in values and "true-class logit, min–max over classes (NERO)" in [o["label"] for o in options]
    assert {"consensus_confidence", "consensus_agreement"} <= set(values)
    options, value, msg = cb.metric_controls(data, group.key, c.models, True, None)
    assert value == "consensus_confidence" and msg is None
    assert "confidence" not in [o["value"] for o in options] and "correct" not in [o["value"] for o in options]


def test_class_subsets_by_label_and_by_consensus(store):
    data, ids, _ = store
    _, labels = make_clouds()
    for k in range(CLASSES):
        controls, up = _start(data, "so3_nero", subset=k)
        ctx = data.context(controls)
        assert up.message == "" and set(ctx.shown.tolist()) == set(np.flatnonzero(labels == k).tolist())
        assert up.selection["sample"] in ctx.shown and up.labels[0].endswith("/3")
    # label-free: the classes are the first compared model's consensus classes
    first = data.result(ids[("so3_nero", "net-a")], consensus=True)
    consensus = np.asarray(first.data["consensus_class"].values)
    for k in range(CLASSES):
        if not np.any(consensus == k):
            continue
        controls, up = _start(data, "so3_nero", metric="consensus_confidence", subset=k, label_free=True)
        ctx = data.context(controls)
        assert set(ctx.shown.tolist()) == set(np.asarray(first.data["sample"].values)[consensus == k].tolist())
        detail = cb.stored_detail(data, up.selection)
        assert f"consensus class {k}" in detail[0].children
        bars = _find_in(detail, "detail-bars").figure
        assert bars["layout"]["annotations"][0]["text"] == "▼ consensus"


# --------------------------------------------------------------------------- stored detail


@pytest.mark.parametrize("plane, phi, psi", [(0, 60.0, 45.0), (1, 120.0, 90.0), (2, 300.0, 135.0), (1, 0.0, 180.0),
                                             (2, 240.0, 0.0)])
def test_a_disk_click_shows_the_rotated_cloud_and_the_stored_bars(store, plane, phi, psi):
    data, ids, _ = store
    controls, up = _start(data, "so3_nero")
    agg = cb.aggregate_figure(data, up.selection)
    click = _disk_click(agg, "net-a-so3_nero", NeroSO3.PLANES[plane], phi, psi)
    up = cb.update_selection(data, up.selection, controls, Event("element", None, click))
    assert up.selection["element"] == {"plane": plane, "axis_angle": phi, "rotation_angle": psi}
    sample = up.selection["sample"]
    detail = cb.stored_detail(data, up.selection)
    where = f"{NeroSO3.PLANES[plane]} plane, axis_angle {phi:g}°, rotation_angle {psi:g}°"
    assert detail[0].children == f"sample {sample} · label {sample % CLASSES} · {where}"
    res = data.store.load(ids[("so3_nero", "net-a")])
    cloud = res.data["input_points"].sel(sample=sample).values.astype(np.float64)
    np.testing.assert_array_equal(cloud, make_clouds()[0][sample])
    fig = _find_in(detail, "detail-cloud").figure
    rotation = nero_rotation(plane, phi, psi)
    np.testing.assert_allclose(_xyz(_trace(fig, "cloud")), rotation.apply(cloud), atol=2e-6)
    np.testing.assert_allclose(_xyz(_trace(fig, "original")), cloud, atol=1e-7)
    np.testing.assert_allclose(_trace(fig, "cloud")["meta"]["matrix"], rotation.as_matrix(), atol=1e-12)
    np.testing.assert_allclose(_trace(fig, "cloud")["marker"]["color"], cloud[:, 2], atol=1e-7)  # stored height
    scene = fig["layout"]["scene"]
    assert scene["aspectmode"] == "cube"
    assert all(scene[a]["range"] == [-1.0, 1.0] and scene[a]["autorange"] is False for a in ("xaxis", "yaxis", "zaxis"))
    axis = _trace(fig, "axis")["meta"]
    assert axis["angle"] == pytest.approx(psi)
    np.testing.assert_allclose(R.from_rotvec(math.radians(psi) * np.array(axis["axis"])).as_matrix(),
                               rotation.as_matrix(), atol=1e-9)
    text = _text(_find_in(detail, "detail-rotation"))
    assert f"rotation {psi:g}° about axis" in text
    assert f"NERO coordinates: {NeroSO3.PLANES[plane]} plane, axis angle {phi:g}°, rotation angle {psi:g}°" in text
    bars = _bars(_find_in(detail, "detail-bars").figure)
    assert list(bars) == ["net-a-so3_nero", "net-b-so3_nero"]
    for model in ("net-a", "net-b"):
        stored = data.store.load(ids[("so3_nero", model)]).probabilities.sel(
            sample=sample, plane=plane, axis_angle=phi, rotation_angle=psi).values
        np.testing.assert_allclose(bars[f"{model}-so3_nero"], stored, rtol=1e-6)
    # the stored probabilities are the models' on the rotated cloud (the reference, end to end)
    np.testing.assert_allclose(bars["net-a-so3_nero"], probabilities(StoredPointNet(0), rotation.apply(cloud)),
                               atol=2e-5)


@pytest.mark.parametrize("index", [0, 5, 11])
def test_so3_grid_element_detail(store, index):
    data, ids, _ = store
    controls, up = _start(data, "so3_grid")
    up = cb.update_selection(data, up.selection, controls, Event("element", None, {"points": [{"x": float(index)}]}))
    assert up.selection["element"] == {"rotation": float(index)}
    sample = up.selection["sample"]
    detail = cb.stored_detail(data, up.selection)
    assert detail[0].children.endswith(f"· rotation {index}")
    cloud = make_clouds()[0][sample].astype(np.float64)
    rotation = super_fibonacci_rotation(12, index)
    fig = _find_in(detail, "detail-cloud").figure
    np.testing.assert_allclose(_xyz(_trace(fig, "cloud")), rotation.apply(cloud), atol=2e-6)
    rotvec = rotation.as_rotvec()
    angle = math.degrees(np.linalg.norm(rotvec))
    axis = rotvec / np.linalg.norm(rotvec)
    text = _text(_find_in(detail, "detail-rotation"))
    assert f"rotation {angle:.4g}° about axis ({axis[0]:+.3f}, {axis[1]:+.3f}, {axis[2]:+.3f})" in text
    assert "NERO coordinates: none" in text
    bars = _bars(_find_in(detail, "detail-bars").figure)
    for model in ("net-a", "net-b"):
        stored = data.store.load(ids[("so3_grid", model)]).probabilities.sel(sample=sample, rotation=index).values
        np.testing.assert_allclose(bars[f"{model}-so3_grid"], stored, rtol=1e-6)


# --------------------------------------------------------------------------- live


def test_live_panel_starts_at_the_sampled_element(store):
    data, ids, _ = store
    _, up = _start(data, "so3_nero")
    sample = up.selection["sample"]
    live = cb.live_detail(data, up.selection, [1, 120, 90])
    assert live[0].children == "live re-evaluation at any rotation · from xz plane, axis_angle 120°, rotation_angle 90°"
    rotation = nero_rotation(1, 120.0, 90.0)
    axis = rotation.as_rotvec() / np.linalg.norm(rotation.as_rotvec())
    values = {n: _find_in(live, live_control_id(n)).value for n in ("azimuth", "elevation", "angle")}
    assert values["angle"] == 90.0
    np.testing.assert_allclose(axis_from_angles(values["azimuth"], values["elevation"]), axis, atol=2e-3)
    cloud = make_clouds()[0][sample].astype(np.float64)
    fig = _find_in(live, "live-cloud").figure
    np.testing.assert_allclose(_xyz(_trace(fig, "cloud")), rotation.apply(cloud), atol=2e-6)
    bars = _bars(_find_in(live, "live-bars").figure)
    assert list(bars) == ["net-a-so3_nero"]  # net-b has no weights in the store
    stored = data.store.load(ids[("so3_nero", "net-a")]).probabilities.sel(
        sample=sample, plane=1, axis_angle=120, rotation_angle=90).values
    np.testing.assert_allclose(bars["net-a-so3_nero"], stored, atol=1e-5)
    notes = [c.children for part in live for c in _walk(part) if getattr(c, "className", None) == "note"]
    assert any(n.startswith("net-b-so3_nero: no weights for this model in the store's model cache") for n in notes)
    context = _find_in(live, live_control_id("context")).data
    assert context["runs"] == [ids[("so3_nero", "net-a")], ids[("so3_nero", "net-b")]] and context["sample"] == sample


def _walk(component: Any) -> list[Any]:
    out = [component]
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        out += _walk(child)
    return out


@pytest.mark.parametrize("kind", ["so3_nero", "so3_grid"])
@pytest.mark.parametrize("azimuth, elevation, angle", [(37.0, -21.0, 113.0), (-150.0, 64.0, 7.5), (0.0, 90.0, 180.0)])
def test_live_reevaluation_at_any_rotation(store, kind, azimuth, elevation, angle):
    data, _, _ = store
    _, up = _start(data, kind)
    sample = up.selection["sample"]
    live = cb.live_detail(data, up.selection, [0, 0, 0])
    context = _find_in(live, live_control_id("context")).data
    panel = live_rotation_detail(data, context, azimuth, elevation, angle)
    a, e = math.radians(azimuth), math.radians(elevation)
    rotation = R.from_rotvec(math.radians(angle) * np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a),
                                                               math.sin(e)]))
    cloud = make_clouds()[0][sample].astype(np.float64)
    rotated = rotation.apply(cloud)
    fig = _find_in(panel, "live-cloud").figure
    np.testing.assert_allclose(_xyz(_trace(fig, "cloud")), rotated, atol=2e-6)
    np.testing.assert_allclose(_xyz(_trace(fig, "original")), cloud, atol=1e-7)
    bars = _bars(_find_in(panel, "live-bars").figure)
    assert list(bars) == [f"net-a-{kind}"]
    np.testing.assert_allclose(bars[f"net-a-{kind}"], probabilities(StoredPointNet(0), rotated), atol=2e-5)
    text = _text(_find_in(panel, "live-rotation"))
    assert f"rotation {angle:.4g}° about axis" in text and f"elevation {elevation:.4g}°" in text
    assert any("net-b" in _text(c) and "no weights" in _text(c) for c in _walk(panel[0]))
    # cached: the same rotation again is the same answer
    assert live_rotation_detail(data, context, azimuth, elevation, angle) is panel


def test_live_panel_refuses_malformed_requests(store):
    data, _, _ = store
    _, up = _start(data, "so3_nero")
    context = _find_in(cb.live_detail(data, up.selection, [0, 0, 0]), live_control_id("context")).data
    for bad in (None, "x", {"runs": "abc", "sample": 0}, {"runs": [], "sample": 0}, {**context, "sample": 1.5},
                {**context, "sample": True}, {**context, "sample": 1e300}):
        with pytest.raises(ValueError, match="live panel"):
            live_rotation_detail(data, bad, 0, 0, 0)
    with pytest.raises(ValueError, match="unknown run id"):
        live_rotation_detail(data, {**context, "runs": ["nope"]}, 0, 0, 0)
    with pytest.raises(ValueError, match="not held"):
        live_rotation_detail(data, {**context, "sample": 999}, 0, 0, 0)
    with pytest.raises(ValueError, match="rotation's angle"):
        live_rotation_detail(data, context, 0, 0, None)
    # names and colours from the browser are only display strings: odd colours are replaced
    panel = live_rotation_detail(data, {**context, "colours": ["red;", "#00ff00"]}, 10, 20, 30)
    assert [t["marker"]["color"] for t in _find_in(panel, "live-bars").figure["data"]] == ["#444444"]


def test_every_app_gets_the_live_callback_and_it_answers_over_http(store):
    data, _, home = store
    app = create_app(home)
    (key,) = [k for k in app.callback_map if "pointcloud-live-result" in k]
    assert [i["id"] for i in app.callback_map[key]["inputs"]] == [
        f'{{"index":["MATCH"],"type":"pointcloud-{n}"}}' for n in ("azimuth", "elevation", "angle")]
    _, up = _start(data, "so3_nero")
    context = _find_in(cb.live_detail(data, up.selection, [0, 0, 0]), live_control_id("context")).data

    def post(context: Any, angle: Any) -> Any:
        ids_ = {n: live_control_id(n) for n in ("azimuth", "elevation", "angle", "context", "result")}
        body = {"output": key, "outputs": {"id": ids_["result"], "property": "children"},
                "inputs": [{"id": ids_[n], "property": "value", "value": v}
                           for n, v in (("azimuth", 37), ("elevation", -21), ("angle", angle))],
                "state": [{"id": ids_["context"], "property": "data", "value": context}],
                "changedPropIds": ['{"index":0,"type":"pointcloud-angle"}.value']}
        answer = app.server.test_client().post("/_dash-update-component", json=body)
        assert answer.status_code == 200, answer.data[:300]
        return answer.get_json()["response"][json.dumps(ids_["result"], separators=(",", ":"), sort_keys=True)]

    children = post(context, 113)["children"]
    assert "rotation 113° about axis" in json.dumps(children, ensure_ascii=False)
    assert "live-bars" in json.dumps(children, ensure_ascii=False) and "live-cloud" in json.dumps(children)
    # malformed requests are answered with a message, never an error
    assert "rotation's angle" in json.dumps(post(context, "x"), ensure_ascii=False)
    assert "live panel" in json.dumps(post({"runs": 3}, 10))


# --------------------------------------------------------------------------- missing data


def test_runs_without_clouds_or_probabilities_say_so(store):
    data, ids, _ = store
    run = ids[("so3_grid", "net-c")]
    _, up = _start(data, "so3_grid", runs=[run])
    assert up.message == ""
    detail = cb.stored_detail(data, up.selection)
    cloud = _find_in(detail, "detail-cloud")
    assert cloud.children == ("this run did not store its point clouds: re-run it with store_inputs=True to see "
                              "and rotate them")
    bars = _text(_find_in(detail, "detail-bars"))
    sample = up.selection["sample"]
    point = data.store.load(run).data.sel(sample=sample, rotation=0)
    assert "class probabilities were not stored (evaluate with store_probabilities=True" in bars
    assert (f"net-c-so3_grid: predicts class {int(point['prediction'])}, true-class confidence "
            f"{float(point['confidence']):.3f}") in bars
    assert "NERO coordinates" in _text(_find_in(detail, "detail-rotation"))  # the rotation is still described
    live = cb.live_detail(data, up.selection, [3])
    assert live[0].children == "live re-evaluation needs the stored point clouds: re-run with store_inputs=True"
    with pytest.raises(ValueError, match="store_inputs=True"):
        live_rotation_detail(data, {"runs": [run], "names": ["c"], "colours": ["#000000"], "sample": sample},
                             0, 0, 10)
    # compared with a run that stores everything: bars for that one, the other listed with the note
    _, up = _start(data, "so3_grid", runs=[ids[("so3_grid", "net-a")], run])
    detail = cb.stored_detail(data, up.selection)
    assert list(_bars(_find_in(detail, "detail-bars").figure)) == ["net-a-so3_grid"]
    assert "net-c-so3_grid: predicts class" in _text(_find_in(detail, "detail-stored-values"))
    assert _find_in(detail, "detail-cloud").figure["data"]  # the cloud from the run that stored it
    assert cb.live_detail(data, up.selection, [0])[0].children.startswith("live re-evaluation needs the stored")


def test_a_planar_orbit_turns_the_cloud_about_z(store):
    """A planar angle θ is counter-clockwise *as displayed with y down* (the image convention of
    ``rotation_matrix``), so on a right-handed cloud it turns by θ about -z; the view shows and
    describes the rotation the model saw."""
    data, ids, _ = store
    controls, up = _start(data, "rotation")
    up = cb.update_selection(data, up.selection, controls, Event("element", None, {"points": [{"theta": 30.0}]}))
    assert up.selection["element"] == {"angle": 30.0}
    sample = up.selection["sample"]
    cloud = make_clouds()[0][sample].astype(np.float64)
    detail = cb.stored_detail(data, up.selection)
    fig = _find_in(detail, "detail-cloud").figure
    np.testing.assert_allclose(_xyz(_trace(fig, "cloud")), R.from_euler("z", -30, degrees=True).apply(cloud), atol=2e-6)
    text = _text(_find_in(detail, "detail-rotation"))
    assert "rotation 30° about axis (+0.000, +0.000, -1.000)" in text and "elevation -90°" in text
    stored = data.store.load(ids[("rotation", "net-a")]).probabilities.sel(sample=sample, angle=30).values
    np.testing.assert_allclose(_bars(_find_in(detail, "detail-bars").figure)["net-a-rotation"], stored, rtol=1e-6)
    # the planar angle is continuous: the shell's live slider takes 37.5°, between the grid angles
    live = cb.live_detail(data, up.selection, [37.5])
    assert live[0].children == "live re-evaluation at any rotation · from angle 37.5°"
    turned = R.from_euler("z", -37.5, degrees=True).apply(cloud)
    np.testing.assert_allclose(_xyz(_trace(_find_in(live, "live-cloud").figure, "cloud")), turned, atol=2e-6)
    np.testing.assert_allclose(_bars(_find_in(live, "live-bars").figure)["net-a-rotation"],
                               probabilities(StoredPointNet(0), turned), atol=2e-5)
    assert _find_in(live, live_control_id("elevation")).value == -90.0


def test_the_default_metric_is_nero_score_where_every_run_has_it_else_confidence(store):
    """NERO's individual score by default for runs of logit models; the true-class confidence for
    a run without it (net-c, ``nero_score=False``) and for a comparison that includes one; in
    label-free mode the consensus confidence. The view's own rule, then through the callback."""
    data, ids, _ = store
    view = view_for("pointcloud")
    options = [("confidence", "c"), ("correct", "a"), ("nero_score", "n")]
    assert view.default_metric(options, False) == "nero_score"
    assert view.default_metric(options[:2], False) == "confidence"
    assert view.default_metric([("consensus_confidence", "cc"), *options], True) == "consensus_confidence"
    group = _group(data, "so3_grid")
    with_score, without = ids[("so3_grid", "net-a")], ids[("so3_grid", "net-c")]
    assert "nero_score" in data.store.load(with_score).data and "nero_score" not in data.store.load(without).data
    for runs, want in (([with_score], "nero_score"), ([without], "confidence"), ([with_score, without], "confidence")):
        _, value, msg = cb.metric_controls(data, group.key, runs, False, None)
        assert (value, msg) == (want, None), runs
    # a metric the user chose is kept
    assert cb.metric_controls(data, group.key, [with_score], False, "correct")[1] == "correct"
    # the classification view keeps its own default
    assert ClassificationView().default_metric(options, False) == "confidence"
