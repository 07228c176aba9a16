"""The interface's flow (PIV) view, through the callback functions (no browser), against numbers
computed here.

Store: four 32 × 32 random textures, each paired with itself rolled by an integer shift (a
uniform flow (u, v), |u|, |v| ≤ 2), over NERO's D4 × time reversal (``d4xt``), evaluated with
``store_inputs=True`` and ``consensus=True`` by two loadable estimators (weights in the store's
model cache, so the live panel re-runs them):

* ``exact``: :class:`ShiftSearch` (finds the shift exactly: equivariant by construction);
* ``ramp``: the same plus a u bias growing across the frame, RAMP · (x + ½) / W (not
  equivariant: its EPE map is a ramp whose direction follows the element).

The flow kind stores no per-sample ground truth, so the ground-truth panel says so; but the
exact estimator's consensus *is* the truth, so its moved consensus is checked against the closed
form of seeds.md: rot90 maps (u, v) to (v, −u), time reversal negates.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import orbitscope as osc
from orbitscope.app import AppData, Event, view_for
from orbitscope.app import callbacks as cb
from orbitscope.app.state import OrbitElement
from orbitscope.app.views import DetailRequest
from orbitscope.app.views.flow import FlowView, flow_colours, moved_flow, transformed_pair, wheel_legend
from orbitscope.group import NERO_MOSAIC
from orbitscope.group.finite import D4
from orbitscope.group.parse import parse_orbit
from orbitscope.models import register_model
from orbitscope.results.result import OrbitResult
from orbitscope.results.store import Store
from orbitscope.tasks import Flow

from test_equivariance_by_construction import ShiftSearch, _shift_pairs

ARCH = "test-app-flow-shift-search"
RAMP = 0.6
SIZE = 32
METRICS = ["epe", "rmse", "mae", "mse"]
CONSENSUS = [f"consensus_{m}" for m in METRICS]


class StoredShiftSearch(ShiftSearch):
    """ShiftSearch plus a u bias ``ramp · (x + ½) / W`` (0: exact), with a buffer (weights to save,
    a hash of its own) and a registered architecture (the store's model cache rebuilds it)."""

    def __init__(self, ramp: float = 0.0) -> None:
        super().__init__(0.0)
        self.ramp = float(ramp)
        self.register_buffer("tag", torch.tensor([self.ramp]))
        self.config = {"arch": ARCH, "ramp": self.ramp}

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        flow = super().forward(frames)
        w = frames.shape[-1]
        flow[:, 0] += self.ramp * (torch.arange(w, dtype=flow.dtype) + 0.5) / w
        return flow


register_model(ARCH, StoredShiftSearch)


def build_flow_store(home: Path) -> tuple[dict[str, str], np.ndarray]:
    """Evaluate both estimators into the store at ``home`` (see the module docstring); returns
    model name -> run id, and the true uniform (u, v) per sample."""
    frames, flows = _shift_pairs(n=4, size=SIZE, seed=3)
    ids = {}
    for name, ramp in (("exact", 0.0), ("ramp", RAMP)):
        model = StoredShiftSearch(ramp)
        osc.save_model(model, home / "models" / f"{name}.safetensors",
                       metadata={"info": {"model_hash": osc.model_hash(model)}})
        run = osc.evaluate(model, (frames, flows), parse_orbit("d4xt"), Flow(map_size=16), store=home, name=name,
                           model_name=name, store_inputs=True, consensus=True, data_id="shift-pairs")
        ids[name] = run.run_id
    return ids, flows[:, :, 0, 0].astype(np.float64)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[AppData, dict[str, str], np.ndarray]:
    home = tmp_path_factory.mktemp("flow-store")
    ids, uv = build_flow_store(home)
    return AppData(Store(home, create=False), ttl=0.0), ids, uv


# --------------------------------------------------------------------------- helpers


def _start(data: AppData, runs: list[str], metric: str = "epe", label_free: bool = False):
    group = data.groups()[0].key
    controls = cb.parse_controls(group, runs, metric, "all", "pca", "mean", "worst", ["on"] if label_free else [])
    return controls, cb.update_selection(data, None, controls, Event("context"))


def _cell_click(element: int) -> dict:
    """A plotly click on the flat mosaic cell of ``element``."""
    r, c = np.argwhere(np.array(NERO_MOSAIC) == element)[0]
    return {"points": [{"x": c + 0.5, "y": r + 0.5, "z": 0.1, "customdata": element, "curveNumber": 0}]}


def _find(component: object, id_: str) -> object:
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        hit = _find(child, id_)
        if hit is not None:
            return hit
    return None


def _array(value: object) -> np.ndarray:
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return arr.reshape([int(s) for s in str(value["shape"]).split(",")]) if "shape" in value else arr
    return np.asarray(value, dtype=float)


def _png(uri: str) -> np.ndarray:
    assert uri.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def _as_png(rgb: np.ndarray) -> np.ndarray:
    """(3, H, W) in [0, 1] quantised as png_data_uri does."""
    return (np.clip(rgb, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 0)


def _trace(fig: dict, role: str) -> dict:
    (trace,) = [t for t in fig["data"] if (t.get("meta") or {}).get("role") == role]
    return trace


def _closed_form(uv: np.ndarray, element: int) -> np.ndarray:
    """A uniform (u, v) moved by ``element`` (index 8·time reversed + d), by hand: the D4 part
    turns the vector in image axes (x right, y down), time reversal negates it."""
    u, v = uv
    d = element % 8
    by_d = {0: (u, v), 1: (-v, -u), 2: (v, -u), 3: (-u, v), 4: (-u, -v), 5: (v, u), 6: (-v, u), 7: (u, -v)}
    out = np.array(by_d[d], dtype=float)
    return -out if element >= 8 else out


def _check_field(fig: dict, uv: np.ndarray, scale: float | None = None) -> None:
    """The figure draws the uniform field ``uv``: its colour image and every arrow."""
    q = _trace(fig, "quiver")["meta"]
    np.testing.assert_allclose(q["u"], uv[0], atol=1e-5)
    np.testing.assert_allclose(q["v"], uv[1], atol=1e-5)
    h, w = fig["layout"]["meta"]["size"]
    assert q["step"] == max(h, w) // 16 and len(q["u"]) == 16 * 16  # 16 × 16 arrows (32 px: every 2 px)
    field = np.broadcast_to(uv[:, None, None], (2, h, w))
    want = _as_png(flow_colours(field, scale if scale is not None else fig["layout"]["meta"]["scale"]))
    np.testing.assert_array_equal(_png(_trace(fig, "wheel")["source"]), want)


# --------------------------------------------------------------------------- tests


def test_flow_runs_get_their_view_metrics_and_live_controls(store):
    data, ids, _ = store
    (group,) = data.groups()
    assert group.task_kind == "flow" and isinstance(view_for(group.task_kind), FlowView)
    c = cb.group_controls(data, group.key)
    assert c.models == [ids["exact"], ids["ramp"]]
    assert c.subset_options == [{"label": "all samples", "value": "all"}]  # no per-sample flow type stored
    assert [(d.dim, d.discrete, d.values) for d in c.live] == [("time_reversed", True, (0.0, 1.0)),
                                                               ("d4", True, tuple(float(i) for i in range(8)))]
    assert c.live[1].labels[2] == "rot90" and c.live[0].labels == ("time forward", "time reversed")
    options, value, msg = cb.metric_controls(data, group.key, c.models, False, None)
    assert [o["value"] for o in options] == METRICS + CONSENSUS and value == "epe" and msg is None  # no maps
    options, value, msg = cb.metric_controls(data, group.key, c.models, True, None)
    assert [o["value"] for o in options] == CONSENSUS and value == "consensus_epe" and msg is None


def test_the_shell_draws_mosaics_and_a_click_selects_the_element(store):
    data, ids, _ = store
    runs = [ids["exact"], ids["ramp"]]
    controls, up = _start(data, runs)
    assert up.selection["element"] == {"time_reversed": 0.0, "d4": 0.0}
    agg = cb.aggregate_figure(data, up.selection)
    values = [t for t in agg["data"] if t["meta"]["role"] == "value"]
    assert [t["type"] for t in values] == ["heatmap", "heatmap"]
    grid = np.array(NERO_MOSAIC)
    for trace, name in zip(values, ("exact", "ramp")):
        mean = data.store.load(ids[name]).epe.values.astype(float).reshape(4, -1).mean(0)
        np.testing.assert_allclose(_array(trace["z"]), mean[grid], rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(_array(trace["customdata"]), grid)
    for element in (10, 2, 7):
        up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(element)))
        t, d = divmod(element, 8)
        assert up.selection["element"] == {"time_reversed": float(t), "d4": float(d)} and up.live[:2] == [t, d]
        agg = cb.aggregate_figure(data, up.selection)
        assert {tr["meta"]["element"] for tr in agg["data"] if tr["meta"]["role"] == "marker"} == {element}
        ind = cb.individual_figure(data, up.selection)
        assert {tr["meta"]["element"] for tr in ind["data"] if tr["meta"]["role"] == "marker"} == {element}
    title = cb.stored_detail(data, up.selection)[0].children
    assert title == f"sample {up.selection['sample']} · time forward, vflip"


@pytest.mark.parametrize("element", [10, 2, 13, 0])
def test_the_detail_panel_draws_the_moved_pair_consensus_and_stored_epe_map(store, element):
    data, ids, uv = store
    runs = [ids["exact"], ids["ramp"]]
    controls, up = _start(data, runs)
    up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(element)))
    sample = up.selection["sample"]
    tr, d = divmod(element, 8)
    detail = cb.stored_detail(data, up.selection)
    name = ("time forward", "time reversed")[tr] + ", " + D4.NAMES[d]
    assert detail[0].children == f"sample {sample} · {name}"
    # the pair: each frame turned like an image (by index: rot90 is numpy's counter-clockwise
    # rot90), the frames swapped under time reversal
    raw = data.store.load(ids["exact"]).data["input"].sel(sample=sample).values[:, 0]
    by_d = {0: lambda a: a, 2: np.rot90, 5: lambda a: a.T, 7: lambda a: a[::-1]}
    want = [by_d[d](f) for f in (raw[::-1] if tr else raw)]
    for k in (0, 1):
        np.testing.assert_array_equal(_png(_find(detail[1], f"detail-pair-{k}").src), want[k])
    expect = _closed_form(uv[sample], element)
    gt = _find(detail[1], "detail-gt").figure  # the stored truth, moved by the element: the closed form
    _check_field(gt, expect)
    results = [data.store.load(r) for r in runs]
    for i, res in enumerate(results):
        fig = _find(detail[2], f"detail-consensus-{i}").figure
        # the exact estimator's consensus is the truth: moved, the closed form; the ramp's is the
        # flow kind's action applied to its own stored consensus
        want_field = (np.broadcast_to(expect[:, None, None], (2, SIZE, SIZE)) if i == 0 else
                      moved_flow(res.consensus_flow.sel(sample=sample).values, parse_orbit("d4xt").transforms()[[element]]))
        q = _trace(fig, "quiver")["meta"]
        np.testing.assert_allclose(q["u"], want_field[0, 1::2, 1::2].ravel(), atol=1e-5)
        np.testing.assert_allclose(q["v"], want_field[1, 1::2, 1::2].ravel(), atol=1e-5)
        if i == 0:
            _check_field(fig, expect)
        heat = _find(detail[2], f"detail-epe-{i}").figure
        stored = res.epe_map.sel(sample=sample, time_reversed=tr, d4=d).values.astype(float)
        np.testing.assert_allclose(_array(_trace(heat, "epe-map")["z"]), stored, rtol=1e-6)
        point = res.data.sel(sample=sample, time_reversed=tr, d4=d)
        line = _find(detail[2], f"detail-metrics-{i}").children
        for m, label in (("epe", "EPE"), ("rmse", "RMSE"), ("mae", "MAE"), ("mse", "MSE")):
            assert f"{label} {float(point[m]):.3f}" in line
        assert "consensus" not in line
    # the consensus of both shares one magnitude scale (colours compare)
    scales = {_find(detail[2], f"detail-consensus-{i}").figure["layout"]["meta"]["scale"] for i in (0, 1)}
    assert len(scales) == 1


def test_the_ramp_epe_map_is_drawn_as_stored(store):
    """The biased estimator's error is its u ramp, made in the frame the model sees: the stored
    EPE map (block averaged to 16 × 16) varies along x at every element, and is drawn so."""
    data, ids, _ = store
    controls, up = _start(data, [ids["ramp"]])
    maps = {}
    for element in (0, 2):
        up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(element)))
        heat = _find(cb.stored_detail(data, up.selection)[2], "detail-epe-0").figure
        maps[element] = _array(_trace(heat, "epe-map")["z"])
    assert maps[0].shape == (16, 16)
    np.testing.assert_allclose(maps[0], np.broadcast_to(RAMP * (np.arange(16) * 2 + 1.0) / SIZE, (16, 16)), atol=1e-4)  # 2-px blocks
    assert np.ptp(maps[0], axis=0).max() < 1e-5 and np.ptp(maps[0], axis=1).min() > 0.3  # varies along x only
    # the ramp is produced in the frame the model sees: whatever the element, it varies along x
    np.testing.assert_allclose(maps[2], maps[0], atol=1e-5)


def test_live_reevaluation_returns_the_moved_flow(store):
    data, ids, uv = store
    runs = [ids["exact"], ids["ramp"]]
    controls, up = _start(data, runs)
    sample = up.selection["sample"]
    for tr, d in ((1, 2), (0, 2), (1, 5), (0, 0)):
        element = 8 * tr + d
        live = cb.live_detail(data, up.selection, [tr, d])
        name = ("time forward", "time reversed")[tr] + ", " + D4.NAMES[d]
        assert live[0].children == f"live re-evaluation · {name}"
        fig = _find(live[2], "live-flow-0").figure
        _check_field(fig, _closed_form(uv[sample], element))  # the exact estimator: the moved truth
        line = _find(live[2], "live-metrics-0").children
        assert "EPE vs consensus 0.000" in line and "MSE vs consensus 0.000" in line
        # the ramp estimator: its estimate is the exact one plus the ramp, in the frame it sees
        ramp = _trace(_find(live[2], "live-flow-1").figure, "quiver")["meta"]
        x = np.asarray(ramp["x"])
        np.testing.assert_allclose(np.asarray(ramp["u"]) - _closed_form(uv[sample], element)[0], RAMP * x / SIZE,
                                   atol=1e-5)
        # scored against its own consensus moved by the element: the stored label-free map
        res = data.store.load(runs[1])
        stored = res.consensus_epe_map.sel(sample=sample, time_reversed=tr, d4=d).values.astype(float)
        heat = _find(live[2], "live-epe-1").figure
        np.testing.assert_allclose(_array(_trace(heat, "epe-map")["z"]), stored, atol=1e-5)
        line = _find(live[2], "live-metrics-1").children
        stored_epe = float(res.consensus_epe.sel(sample=sample, time_reversed=tr, d4=d))
        assert f"EPE vs consensus {stored_epe:.3f}" in line
    # the pair of the live panel is the stored panel's at the same element
    up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(13)))
    stored = cb.stored_detail(data, up.selection)
    live = cb.live_detail(data, up.selection, [1, 5])
    for k in (0, 1):
        assert _find(stored[1], f"detail-pair-{k}").src == _find(live[1], f"live-pair-{k}").src


def test_a_model_without_weights_is_named_and_inputs_are_needed_for_live():
    frames, flows = _shift_pairs(n=2, size=16, seed=1)
    res = osc.evaluate(ShiftSearch(), (frames, flows), parse_orbit("d4xt"), Flow(), consensus=True,
                       store_inputs=False).result
    view = FlowView()
    assert not view.supports_live([res]) and "store_inputs=True" in view.live_unavailable([res])
    req = DetailRequest(results=[res], run_ids=["x"], names=["plain"], colours=["#0072B2"], sample=1,
                        element={"time_reversed": 1.0, "d4": 2.0})
    title, shared, cards = view.stored_detail(req, "epe")
    assert title.children == "sample 1 · time reversed, rot90"
    assert "did not store its image pairs (evaluate with store_inputs=True)" in _find(shared, "detail-pair").children
    assert _find(cards, "detail-epe-0").figure is not None  # the stored map needs no input
    stored = osc.evaluate(ShiftSearch(), (frames, flows), parse_orbit("d4xt"), Flow(), store_inputs=True).result
    live = view.live_detail(DetailRequest(results=[stored], run_ids=["x"], names=["plain"], colours=["#0072B2"],
                                          sample=0, element={"time_reversed": 0.0, "d4": 0.0},
                                          live_point={"time_reversed": 0.0, "d4": 3.0},
                                          live_transform=OrbitElement(stored.orbit, 3),
                                          live_outputs=[None]))
    assert "plain: model not loadable" in live[-1].children and _find(live, "live-flow-0") is None
    # without consensus, scored against the stored truth: the exact estimator has no error
    out = view.evaluate_live(ShiftSearch(), stored, 0, OrbitElement(stored.orbit, 3))
    assert out.metrics["epe"] == pytest.approx(0.0, abs=1e-6) and out.estimate.shape == (2, 16, 16)
    np.testing.assert_allclose(out.estimate[:, 0, 0], _closed_form(flows[0, :, 0, 0].astype(float), 3), atol=1e-6)


def test_a_stored_ground_truth_and_flow_types_are_used_when_present():
    """Runs that store the target field (``target_flow``) and a per-sample ``flow_type`` (no
    built-in data source does yet): the truth is drawn moved, and the samples split by type."""
    frames, flows = _shift_pairs(n=4, size=16, seed=2)
    base = osc.evaluate(StoredShiftSearch(), (frames, flows), parse_orbit("d4xt"), Flow(), store_inputs=True).result
    ds = base.data.assign(target_flow=(("sample", "component", "flow_y", "flow_x"), flows),
                          flow_type=(("sample",), np.array(["uniform", "shear", "uniform", "shear"])))
    res = OrbitResult(ds)
    view = FlowView()
    assert view.subset_options([res]) == [("flow type shear", 0), ("flow type uniform", 1)]
    np.testing.assert_array_equal(view.subset_mask([res], 1, False), [True, False, True, False])
    req = DetailRequest(results=[res], run_ids=["x"], names=["exact"], colours=["#0072B2"], sample=2,
                        element={"time_reversed": 1.0, "d4": 6.0})
    title, shared, _ = view.stored_detail(req, "epe")
    assert title.children == "sample 2 · uniform · time reversed, rot270"
    _check_field(_find(shared, "detail-gt").figure, _closed_form(flows[2, :, 0, 0].astype(float), 14))
    element = OrbitElement(res.orbit, 14)
    out = view.evaluate_live(StoredShiftSearch(), res, 2, element)
    assert out.metrics["epe"] == pytest.approx(0.0, abs=1e-6) and "epe_map" in out.maps


def test_colour_wheel_conventions():
    """Hue is the direction as drawn (y down): right red, up (v < 0) at 90°, saturation the
    magnitude; the legend wheel colours each pixel by its offset from the centre."""
    field = np.array([[[1.0, 0.0, -1.0, 0.0, 0.5, np.nan]], [[0.0, -1.0, 0.0, 1.0, 0.0, 0.0]]])
    rgb = flow_colours(field, scale=1.0)[:, 0].T
    np.testing.assert_allclose(rgb[0], [1, 0, 0], atol=1e-9)  # right: red
    np.testing.assert_allclose(rgb[1], [0.5, 1, 0], atol=1e-9)  # up: hue 1/4
    np.testing.assert_allclose(rgb[2], [0, 1, 1], atol=1e-9)  # left: cyan
    np.testing.assert_allclose(rgb[3], [0.5, 0, 1], atol=1e-9)  # down: hue 3/4
    np.testing.assert_allclose(rgb[4], [1, 0.5, 0.5], atol=1e-9)  # half magnitude: half saturated
    np.testing.assert_allclose(rgb[5], [0.6, 0.6, 0.6])  # no vector: grey
    wheel = wheel_legend(49)
    np.testing.assert_allclose(wheel[:, 24, 48], [1, 0, 0], atol=0.05)  # rightmost pixel: red
    np.testing.assert_allclose(wheel[:, 0, 24], [0.5, 1, 0], atol=0.05)  # top: as "up"
    np.testing.assert_allclose(wheel[:, 0, 0], [1, 1, 1])  # outside the disk
    # the pair helper applies the engine's frames action (time reversal swaps the frames)
    frames, flows = _shift_pairs(n=1, size=8)
    res = osc.evaluate(ShiftSearch(), (frames, flows), parse_orbit("d4xt"), Flow(), store_inputs=True).result
    pair = transformed_pair(res, 0, parse_orbit("d4xt").transforms()[[8]])
    raw = res.data["input"].sel(sample=0).values.astype(np.float32) / 255
    np.testing.assert_allclose(pair, raw[::-1], atol=1e-6)


def test_label_free_mode_shows_the_consensus_map_and_metrics(store):
    data, ids, _ = store
    controls, up = _start(data, [ids["exact"], ids["ramp"]], "consensus_epe", label_free=True)
    assert up.message == ""
    up = cb.update_selection(data, up.selection, controls, Event("element", None, _cell_click(11)))
    sample = up.selection["sample"]
    detail = cb.stored_detail(data, up.selection)
    res = data.store.load(ids["ramp"])
    point = res.data.sel(sample=sample, time_reversed=1, d4=3)
    heat = _find(detail[2], "detail-epe-1").figure
    np.testing.assert_allclose(_array(_trace(heat, "epe-map")["z"]), point["consensus_epe_map"].values, rtol=1e-6)
    assert heat["layout"]["title"]["text"].startswith("EPE vs consensus")
    line = _find(detail[2], "detail-metrics-1").children
    assert line.startswith(f"EPE vs consensus {float(point['consensus_epe']):.3f} px") and " EPE 0" not in line
    assert "MSE vs consensus" in line
