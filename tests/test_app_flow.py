"""The interface's flow (PIV) view, through the callback functions (no browser), against numbers
computed here.

Store: four 32 × 32 random textures, each paired with itself rolled by an integer shift (a
uniform flow (u, v), |u|, |v| ≤ 2), over NERO's D4 × time reversal (``d4xt``), evaluated with
``store_inputs=True`` and ``consensus=True`` by two loadable estimators (weights in the store's
model cache, so the live panel re-runs them):

* ``exact``: :class:`ShiftSearch` (finds the shift exactly: equivariant by construction);
* ``ramp``: the same plus a u bias growing across the frame, RAMP · (x + ½) / W (not
  equivariant: its EPE map is a ramp whose direction follows the element);
* ``gain``: the exact shift with u scaled by GAIN (not equivariant: its error (GAIN − 1)·|u| is
  |u| or |v| of the true shift depending on the element, so cells differ from element to
  element; made last, so the interface preselects the first two).

The flow kind stores no per-sample ground truth, so the ground-truth panel says so; but the
exact estimator's consensus *is* the truth, so its moved consensus is checked against the closed
form of seeds.md: rot90 maps (u, v) to (v, −u), time reversal negates.
"""

from __future__ import annotations

import base64
import dataclasses
import html
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
from orbitscope.analysis.nero import prepare_aggregate
from orbitscope.app.layout import CELLS, CELLS_ROW, build_layout
from orbitscope.app.views.flow import FlowView, flow_colours, moved_flow, transformed_pair, wheel_legend
from orbitscope.group import NERO_MOSAIC
from orbitscope.group.finite import D4
from orbitscope.group.parse import parse_orbit
from orbitscope.models import register_model
from orbitscope.results.result import OrbitResult
from orbitscope.results.store import Store
from orbitscope.tasks import Flow
from orbitscope.viz.mosaic import render_mosaic

from test_equivariance_by_construction import ShiftSearch, _shift_pairs

ARCH = "test-app-flow-shift-search"
RAMP = 0.6
GAIN = 1.5
SIZE = 32
METRICS = ["epe", "rmse", "mae", "mse"]
CONSENSUS = [f"consensus_{m}" for m in METRICS]


class StoredShiftSearch(ShiftSearch):
    """ShiftSearch with u scaled by ``gain`` plus a u bias ``ramp · (x + ½) / W`` (0 and 1:
    exact), with a buffer (weights to save, a hash of its own) and a registered architecture
    (the store's model cache rebuilds it)."""

    def __init__(self, ramp: float = 0.0, gain: float = 1.0) -> None:
        super().__init__(0.0)
        self.ramp, self.gain = float(ramp), float(gain)
        self.register_buffer("tag", torch.tensor([self.ramp, self.gain]))
        self.config = {"arch": ARCH, "ramp": self.ramp, "gain": self.gain}

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        flow = super().forward(frames)
        w = frames.shape[-1]
        flow[:, 0] = flow[:, 0] * self.gain + self.ramp * (torch.arange(w, dtype=flow.dtype) + 0.5) / w
        return flow


register_model(ARCH, StoredShiftSearch)


def build_flow_store(home: Path) -> tuple[dict[str, str], np.ndarray]:
    """Evaluate both estimators into the store at ``home`` (see the module docstring); returns
    model name -> run id, and the true uniform (u, v) per sample."""
    frames, flows = _shift_pairs(n=4, size=SIZE, seed=3)
    ids = {}
    for name, ramp, gain in (("exact", 0.0, 1.0), ("ramp", RAMP, 1.0), ("gain", 0.0, GAIN)):
        model = StoredShiftSearch(ramp, gain)
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


def _title(fig: dict) -> str:
    """The figure's title and caption as text (the caption is HTML-escaped in the figure)."""
    return html.unescape(fig["layout"]["title"]["text"])


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


def test_the_averaged_mosaic_and_a_click_selects_the_element(store):
    """The averaged mode (the toggle): one flat cell per element, the mean over samples of the
    stored mean EPE, with the moved letter F."""
    data, ids, _ = store
    runs = [ids["exact"], ids["ramp"]]
    controls, up = _start(data, runs)
    assert up.selection["element"] == {"time_reversed": 0.0, "d4": 0.0}
    up = dataclasses.replace(up, selection=cb.set_cell_mode(up.selection, "averaged"))
    assert up.selection["averaged"] is True
    agg = cb.aggregate_figure(data, up.selection)
    assert "averaged: each cell is the element's mean" in _title(agg)
    assert len([t for t in agg["data"] if t["meta"]["role"] == "glyph"]) >= 2  # NERO's transformed "F"
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
        assert up.selection["averaged"] is True  # a click keeps the mode
        agg = cb.aggregate_figure(data, up.selection)
        assert {tr["meta"]["element"] for tr in agg["data"] if tr["meta"]["role"] == "marker"} == {element}
        ind = cb.individual_figure(data, up.selection)
        assert {tr["meta"]["element"] for tr in ind["data"] if tr["meta"]["role"] == "marker"} == {element}
    title = cb.stored_detail(data, up.selection)[0].children
    assert title == f"sample {up.selection['sample']} · time forward, vflip"


#: NERO's PIV mosaic as seeds.md §4 writes it (row by row, the element index 8·time reversed + d
#: in each cell), copied here rather than imported, so that the layout is checked independently
SEEDS_MOSAIC = [[10, 2, 1, 9], [11, 3, 0, 8], [12, 4, 7, 15], [13, 5, 6, 14]]


def _map_cells(fig: dict) -> dict[str, dict[tuple[int, int], tuple[int, np.ndarray, dict]]]:
    """Per series: (row, column) -> (element, drawn map, trace) of the per-pixel mosaic."""
    out: dict = {}
    for t in fig["data"]:
        meta = t.get("meta") or {}
        if meta.get("role") == "value" and "cell" in meta:
            out.setdefault(meta["series"], {})[tuple(meta["cell"])] = (meta["element"], _array(t["z"]), t)
    return out


def _mean_map_by_loop(maps: np.ndarray, element: int) -> np.ndarray:
    """The mean over samples of one element's stored map, by a plain loop (maps: sample ×
    time_reversed × d4 × y × x; element = 8·time reversed + d)."""
    total = np.zeros(maps.shape[-2:])
    for s in range(maps.shape[0]):
        total += maps[s, element // 8, element % 8]
    return total / maps.shape[0]


def _pixel_click(trace: dict, i: int, j: int) -> dict:
    """A plotly click on pixel (i, j) of a per-cell map heatmap (its centre in data coordinates)."""
    x, y = trace["x0"] + j * trace["dx"], trace["y0"] + i * trace["dy"]
    return {"points": [{"x": x, "y": y, "z": 0.1, "curveNumber": 3, "pointNumber": [i, j]}]}


def test_per_pixel_maps_are_the_default_mosaic_as_nero(store):
    """NERO's default PIV view: each cell the element's EPE map (aggregate: the mean over the
    samples; individual: the sample's own), at the cell seeds.md gives it, one colour range for
    both models: reversed viridis over the 0th–80th percentile of all their map values."""
    data, ids, _ = store
    runs = [ids["ramp"], ids["gain"]]
    controls, up = _start(data, runs)
    assert up.selection["averaged"] is False
    mode, options = cb.pixel_controls(data, up.selection["group"], runs, "epe")
    assert mode.shown and mode.variable == "epe_map" and not options[0]["disabled"]
    assert [o["value"] for o in options] == ["maps", "averaged"]
    agg = cb.aggregate_figure(data, up.selection)
    cells = _map_cells(agg)
    assert set(cells) == {"ramp", "gain"}
    assert "per pixel: each cell is the element's EPE map" in _title(agg)
    want = {}
    for name in ("ramp", "gain"):
        stored = data.store.load(ids[name]).epe_map.values.astype(np.float64)  # sample × 2 × 8 × 16 × 16
        assert sorted(cells[name]) == [(r, c) for r in range(4) for c in range(4)]
        for r in range(4):
            for c in range(4):
                element, z, trace = cells[name][(r, c)]
                assert element == SEEDS_MOSAIC[r][c]
                want[name, element] = _mean_map_by_loop(stored, element)
                assert z.shape == (16, 16)  # as stored (map_size 16), at most max_side = 64 a side
                np.testing.assert_allclose(z, want[name, element], rtol=1e-5, atol=1e-7)
                assert c < trace["x0"] < c + 1 and r < trace["y0"] < r + 1  # drawn inside its cell
    # the maps tell the cells apart: the ramp's vary across a map, the gain's from element to element
    assert min(float(np.ptp(w, axis=1).min()) for (n, _), w in want.items() if n == "ramp") > 0.3
    assert np.ptp([want["gain", e].mean() for e in range(16)]) > 0.1
    everything = np.concatenate([w.ravel() for w in want.values()])
    lo, hi = np.percentile(everything, [0, 80])
    axis = agg["layout"]["coloraxis"]
    assert (axis["cmin"], axis["cmax"]) == pytest.approx((lo, hi)) and axis["reversescale"] is True
    assert axis["colorscale"][0][1].lower() in ("#440154", "rgb(68,1,84)")  # viridis, reversed by reversescale
    (rule,) = [a for a in agg["layout"]["annotations"] if a.get("name") == "colour-rule"]
    assert rule["text"] == ("colour: reversed viridis (low = bright), 0th–80th percentile of all models' values")

    # individual: the selected sample's own maps
    sample = up.selection["sample"]
    ind = _map_cells(cb.individual_figure(data, up.selection))
    for name in ("ramp", "gain"):
        stored = data.store.load(ids[name]).epe_map.sel(sample=sample).values.astype(np.float64)
        for (r, c), (element, z, _) in ind[name].items():
            assert element == SEEDS_MOSAIC[r][c]
            np.testing.assert_allclose(z, stored[element // 8, element % 8], rtol=1e-6)


def test_a_click_on_a_map_cell_selects_its_element(store):
    data, ids, _ = store
    controls, up = _start(data, [ids["exact"], ids["gain"]])
    for element, (i, j) in ((10, (0, 0)), (15, (7, 11)), (5, (15, 15)), (0, (3, 9))):
        cells = _map_cells(cb.aggregate_figure(data, up.selection))
        r, c = np.argwhere(np.array(SEEDS_MOSAIC) == element)[0]
        assert cells["gain"][(r, c)][0] == element  # drawn where a click reads it
        click = _pixel_click(cells["gain"][(r, c)][2], i, j)  # the second model's grid, a corner pixel too
        up = cb.update_selection(data, up.selection, controls, Event("element", None, click))
        t, d = divmod(element, 8)
        assert up.selection["element"] == {"time_reversed": float(t), "d4": float(d)} and up.live[:2] == [t, d]
        agg = cb.aggregate_figure(data, up.selection)
        assert {tr["meta"]["element"] for tr in agg["data"] if tr["meta"]["role"] == "marker"} == {element}
        assert _map_cells(agg)  # still the per-pixel mosaic


def test_the_averaged_toggle_switches_to_each_elements_mean_and_back(store):
    data, ids, _ = store
    runs = [ids["exact"], ids["gain"]]
    controls, up = _start(data, runs)
    flat = cb.set_cell_mode(up.selection, "averaged")
    agg = cb.aggregate_figure(data, flat)
    assert not _map_cells(agg)
    values = [t for t in agg["data"] if t["meta"]["role"] == "value"]
    assert [t["meta"]["series"] for t in values] == ["exact", "gain"]
    for trace, name in zip(values, ("exact", "gain")):
        epe = data.store.load(ids[name]).epe.values.astype(np.float64)  # sample × 2 × 8
        assert name == "exact" or np.ptp(epe.mean(0)) > 0.1  # the gain's cells differ
        for r in range(4):
            for c in range(4):
                e = SEEDS_MOSAIC[r][c]
                mean = sum(epe[s, e // 8, e % 8] for s in range(epe.shape[0])) / epe.shape[0]
                assert _array(trace["z"])[r, c] == pytest.approx(mean, rel=1e-5, abs=1e-7)
    ind = cb.individual_figure(data, flat)
    assert not _map_cells(ind) and "averaged" in _title(ind)
    back = cb.set_cell_mode(flat, "maps")
    assert back["averaged"] is False and _map_cells(cb.aggregate_figure(data, back))
    # another control keeps the mode (the selection callback carries it over)
    moved = cb.update_selection(data, flat, dataclasses.replace(controls, rank_by="most_variable"), Event("context"))
    assert moved.selection["averaged"] is True


def test_metrics_without_a_stored_map_keep_the_averaged_mosaic_with_a_note(store):
    data, ids, _ = store
    runs = [ids["exact"], ids["ramp"]]
    group = data.groups()[0].key
    # the store's runs keep the EPE map only (Flow's default): MAE falls back, and says how
    mode, options = cb.pixel_controls(data, group, runs, "mae")
    assert mode.shown and mode.variable is None and options[0]["disabled"] and not options[1]["disabled"]
    assert "Flow(maps=('epe', 'mae'))" in mode.note and "exact, ramp" in mode.note
    controls, up = _start(data, runs, "mae")
    agg = cb.aggregate_figure(data, up.selection)
    assert not _map_cells(agg) and [t["meta"]["series"] for t in agg["data"] if t["meta"]["role"] == "value"] == \
        ["exact", "ramp"]
    assert "no stored per-pixel MAE map in exact, ramp" in _title(agg)
    # RMSE has no map at all (NERO's "RMSE" map is the MAE map)
    mode, _ = cb.pixel_controls(data, group, runs, "rmse")
    assert mode.shown and mode.variable is None and "RMSE has no per-pixel map" in mode.note
    # label-free: the consensus EPE map
    mode, _ = cb.pixel_controls(data, group, runs, "consensus_epe")
    assert mode.variable == "consensus_epe_map"
    _, up = _start(data, runs, "consensus_epe", label_free=True)
    cells = _map_cells(cb.aggregate_figure(data, up.selection))
    stored = data.store.load(ids["ramp"]).consensus_epe_map.values.astype(np.float64)
    for (r, c), (element, z, _) in cells["ramp"].items():
        np.testing.assert_allclose(z, _mean_map_by_loop(stored, element), rtol=1e-5, atol=1e-7)
    # a run evaluated without maps: the toggle is off, and names the option that records them
    frames, flows = _shift_pairs(n=2, size=16, seed=1)
    bare = osc.evaluate(ShiftSearch(), (frames, flows), parse_orbit("d4xt"), Flow(maps=())).result
    assert "epe_map" not in bare.data
    mode = FlowView().pixel_mode([bare], "epe")
    assert mode.shown and mode.variable is None and "evaluate with Flow(maps=('epe',))" in mode.note
    assert mode.drawn("epe", averaged=False) == ("epe", mode.note)
    # other views offer no toggle; an unknown group neither
    assert not cb.pixel_controls(data, "no such group", runs, "epe")[0].shown
    assert not view_for("classification").pixel_mode([bare], "epe").shown


def test_the_static_mosaic_of_maps_uses_the_same_colour_rule(store):
    """matplotlib (figures, report): the same shared range, reversed viridis, 0th–80th
    percentile of both models' map values, and the rule under the figure."""
    data, ids, _ = store
    results = [data.store.load(ids[n]) for n in ("ramp", "gain")]
    nero = prepare_aggregate(results, "epe_map", labels=["ramp", "gain"])
    fig = render_mosaic(nero)
    both = np.concatenate([_mean_map_by_loop(r.epe_map.values.astype(np.float64), e).ravel()
                           for r in results for e in range(16)])
    lo, hi = np.percentile(both, [0, 80])
    images = [im for ax in fig.axes for im in ax.get_images() if str(im.get_gid()).startswith("element")]
    assert len(images) == 32
    for im in images:
        assert im.get_clim() == pytest.approx((lo, hi)) and im.get_cmap().name == "viridis_r"
    assert fig.get_supxlabel() == "colour: reversed viridis (low = bright), 0th–80th percentile of all models' values"


def test_the_page_has_the_mosaic_cells_toggle_hidden_until_a_view_offers_maps(store):
    data, _, _ = store
    row = _find(build_layout(data), CELLS_ROW)
    assert row is not None and row.style == {"display": "none"}
    radio = _find(row, CELLS)
    assert radio.value == "maps" and [o["value"] for o in radio.options] == ["maps", "averaged"]


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
