"""The interface's detection view, through the callback functions (no browser), against numbers
computed here.

Store: four 64 × 64 context images with one bright box each (classes 1, 2, 1, 2), a 32 × 32
field of view shifted by Translation(-8 … 8 by 4) in tx and ty, two detectors:

* ``bright-box``: :class:`BrightBoxDetector` (exactly shift-equivariant: the box of the bright
  pixels, class 1, score 0.9), evaluated with consensus; its weights are in the store's model
  cache, so the live panel re-runs it;
* ``centre-biased``: the same box pulled towards the view's centre (not equivariant), score
  falling off with its distance from the centre; no consensus, not loadable.

For the equivariant detector the predicted box mapped back to the context frame is the ground
truth at every shift, and so is its consensus: a check of the view → context conversion.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.app import AppData, Event, view_for
from orbitscope.app import callbacks as cb
from orbitscope.app.views import DetailRequest
from orbitscope.app.views.detection import (
    DetectionView, context_to_view, field_of_view, frame_sizes, view_to_context,
)
from orbitscope.kinds import box_iou
from orbitscope.models import register_model
from orbitscope.results.store import Store
from orbitscope.tasks import Detection

from helpers import Pairs
from test_detection_task import BrightBoxDetector

SHIFTS = range(-8, 9, 4)
VIEW = (32, 32)
CONTEXT = (64, 64)
LABELS = (1, 2, 1, 2)
ARCH = "test-app-bright-box"
OFFSET = ((CONTEXT[1] - VIEW[1]) / 2, (CONTEXT[0] - VIEW[0]) / 2)  # view origin in the context at tx = ty = 0


class StoredBrightBox(BrightBoxDetector):
    """BrightBoxDetector with a buffer (so it has weights to save and a hash of its own) and a
    registered architecture (so the store's model cache can rebuild it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("tag", torch.tensor([1.0]))
        self.config = {"arch": ARCH}


register_model(ARCH, StoredBrightBox)


class CentreBiased(BrightBoxDetector):
    """Not equivariant: the bright box pulled 20 % towards the view's centre; its score falls off
    with the box's distance from the centre."""

    def forward(self, x):
        out = super().forward(x)
        centre = torch.tensor([x.shape[-1] / 2, x.shape[-2] / 2] * 2)
        for d in out:
            if len(d["boxes"]):
                d["boxes"] = centre + (d["boxes"] - centre) * 0.8
                mid = (d["boxes"][:, :2] + d["boxes"][:, 2:]) / 2 - centre[:2]
                d["scores"] = 0.95 * torch.exp(-(mid ** 2).sum(1) / 200.0)
        return out


def contexts() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """Four contexts: a faint gradient with noise (< 0.35) and one bright (0.9) box that stays
    wholly in view at every shift of the orbit."""
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:64, 0:64]
    images = (0.08 + 0.17 * (xx + yy) / 126 + rng.uniform(0, 0.08, (len(LABELS), 1, 64, 64))).astype(np.float32)
    targets = []
    for i, label in enumerate(LABELS):
        w, h = rng.integers(6, 12, size=2)
        x0, y0 = rng.integers(25, 29, size=2)
        images[i, 0, y0:y0 + h, x0:x0 + w] = 0.9
        targets.append({"boxes": np.array([[x0, y0, x0 + w, y0 + h]], np.float32), "labels": np.array([label])})
    return images, targets


def build_detection_store(home: Path) -> dict[str, str]:
    """Evaluate both detectors into the store at ``home`` (see the module docstring); cache the
    equivariant one's weights under ``home/models``. Returns model name -> run id."""
    images, targets = contexts()
    data = Pairs(images, targets)
    orbit = osc.Translation(SHIFTS)
    stored = StoredBrightBox()
    osc.save_model(stored, home / "models" / "bright-box.safetensors",
                   metadata={"info": {"model_hash": osc.model_hash(stored)}})
    ids = {}
    for name, model, consensus in (("bright-box", stored, True), ("centre-biased", CentreBiased(), False)):
        run = osc.evaluate(model, data, orbit, Detection(), view_size=VIEW, store=home, name=name, model_name=name,
                           store_inputs=True, consensus=consensus, batch_size=2, data_id="bright-boxes")
        ids[name] = run.run_id
    return ids


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[AppData, dict[str, str]]:
    home = tmp_path_factory.mktemp("detection-store")
    ids = build_detection_store(home)
    return AppData(Store(home, create=False), ttl=0.0), ids


def _start(data: AppData, runs: list[str], metric: str = "conf_iou", subset: object = "all",
           label_free: list[str] | None = None) -> tuple[object, cb.SelectionUpdate]:
    group = data.groups()[0].key
    controls = cb.parse_controls(group, runs, metric, subset, "pca", "mean", "worst", label_free or [])
    return controls, cb.update_selection(data, None, controls, Event("context"))


def _click(data: AppData, controls: object, selection: dict, tx: float, ty: float) -> cb.SelectionUpdate:
    """A click on the heat-map cell at (tx, ty), as plotly reports it."""
    return cb.update_selection(data, selection, controls, Event("element", None,
                                                                {"points": [{"x": tx, "y": ty, "z": 0.5}]}))


def _array(value: object) -> np.ndarray:
    if isinstance(value, dict) and "bdata" in value:  # plotly's base64 typed arrays
        import base64

        shape = [int(n) for n in str(value.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).reshape(shape)
    return np.asarray(value, dtype=float)


def _find(component: object, id_: str) -> object:
    """The component with ``id_`` anywhere below ``component``."""
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        hit = _find(child, id_)
        if hit is not None:
            return hit
    return None


def _boxes(fig: dict, role: str) -> list[dict]:
    return [t["meta"] for t in fig["data"] if (t.get("meta") or {}).get("role") == role]


def _table(table: object) -> tuple[list[str], list[list[str]]]:
    head, body = table.children
    return [th.children for th in head.children.children], [[td.children for td in tr.children] for tr in body.children]


def _text(component: object) -> str:
    children = getattr(component, "children", component)
    if isinstance(children, (list, tuple)):
        return " ".join(_text(c) for c in children)
    return "" if children is None else str(children) if not hasattr(children, "children") else _text(children)


def test_detection_runs_get_their_view_metrics_classes_and_live_controls(store):
    data, ids = store
    (group,) = data.groups()
    assert group.task_kind == "detection" and isinstance(view_for(group.task_kind), DetectionView)
    c = cb.group_controls(data, group.key)
    assert c.models == [ids["bright-box"], ids["centre-biased"]]
    assert c.subset_options == [{"label": "all samples", "value": "all"}, {"label": "class 1", "value": 1},
                                {"label": "class 2", "value": 2}]  # the first object's class
    assert [(d.dim, d.low, d.high, d.discrete) for d in c.live] == [("tx", -8.0, 8.0, False), ("ty", -8.0, 8.0, False)]
    metrics = ["confidence", "iou", "conf_iou", "precision", "recall", "f1", "nero_precision", "nero_recall", "nero_f1"]
    consensus = ["consensus_iou", "consensus_conf_iou", "consensus_precision", "consensus_recall", "consensus_f1",
                 "consensus_nero_precision", "consensus_nero_recall", "consensus_nero_f1"]
    dataset = ["ap50", "map", "nero_conf_iou", "nero_ap"]  # dataset level, after the per-sample metrics
    consensus_dataset = ["consensus_ap50", "consensus_map", "consensus_nero_ap"]
    options, value, msg = cb.metric_controls(data, group.key, [ids["bright-box"]], False, None)
    assert [o["value"] for o in options] == metrics + consensus + dataset + consensus_dataset
    assert value == "conf_iou" and msg is None
    assert all(o["label"].endswith("(dataset level)") for o in options[len(metrics + consensus):])
    options, value, _ = cb.metric_controls(data, group.key, c.models, False, "iou")  # no consensus in the 2nd run
    assert [o["value"] for o in options] == metrics + dataset and value == "iou"
    options, value, msg = cb.metric_controls(data, group.key, [ids["bright-box"]], True, None)
    assert [o["value"] for o in options] == ["confidence", *consensus, *consensus_dataset]
    assert value == "consensus_conf_iou"
    _, _, msg = cb.metric_controls(data, group.key, c.models, True, None)
    assert "consensus=True" in msg
    _, up = _start(data, c.models, "conf_iou", label_free=["on"])
    assert "needs the detection consensus" in up.message


def test_a_dataset_level_metric_is_an_aggregate_heatmap_with_the_task_s_values(store):
    """ap50 (COCO AP@0.5 over all samples per shift) drawn like conf × IoU: rows = ty, values as
    dataset_metrics computes them, the bootstrap interval in the hover; the individual plot shows
    the view's per-sample metric and says why."""
    data, ids = store
    runs = [ids["bright-box"], ids["centre-biased"]]
    controls, up = _start(data, runs, "ap50")
    fig = cb.aggregate_figure(data, up.selection)
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    want = osc.dataset_metrics(data.store.load(ids["centre-biased"]))["ap50"].transpose("tx", "ty").values
    np.testing.assert_allclose(_array(heat[1]["z"]), want.T, rtol=1e-6)
    assert "bootstrap" in str(fig["layout"])  # the band method, in the caption
    title = cb.individual_figure(data, up.selection)["layout"]["title"]["text"]
    assert "dataset-level" in title and "confidence × IoU" in title


def test_heatmaps_put_ty_downwards_and_a_click_selects_the_shift(store):
    data, ids = store
    runs = [ids["bright-box"], ids["centre-biased"]]
    controls, up = _start(data, runs)
    assert up.selection["element"] == {"tx": 0.0, "ty": 0.0}  # the identity first
    up = _click(data, controls, up.selection, 4.2, -7.6)  # near the cell (4, -8): snapped to it
    assert up.selection["element"] == {"tx": 4.0, "ty": -8.0} and up.live[:2] == [4.0, -8.0]
    fig = cb.aggregate_figure(data, up.selection)
    axes = [k for k in fig["layout"] if k.startswith("yaxis")]
    assert len(axes) == 2 and all(fig["layout"][a]["autorange"] == "reversed" for a in axes)  # +ty down
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    marks = [t for t in fig["data"] if (t.get("meta") or {}).get("role") == "marker"]
    biased = data.store.load(ids["centre-biased"]).conf_iou.transpose("sample", "tx", "ty").values.astype(float)
    z = _array(heat[1]["z"])
    np.testing.assert_allclose(z, biased.mean(0).T, rtol=1e-5)  # rows = ty, columns = tx
    assert not np.allclose(z, z.T)  # the check above can tell tx from ty
    assert [(m["x"][0], m["y"][0]) for m in marks] == [(4.0, -8.0)] * 2
    # the individual heat map of the selected sample, and a click on it
    sample = up.selection["sample"]
    ind = cb.individual_figure(data, up.selection)
    z = _array([t for t in ind["data"] if t["type"] == "heatmap"][1]["z"])
    np.testing.assert_allclose(z, biased[sample].T, rtol=1e-5)  # sample ids are 0 … 3
    up = _click(data, controls, up.selection, -8.0, 4.0)
    assert up.selection["element"] == {"tx": -8.0, "ty": 4.0}
    assert cb.stored_detail(data, up.selection)[0].children.endswith("· tx -8, ty 4")


def test_boxes_are_drawn_in_context_coordinates_at_every_shift(store):
    data, ids = store
    runs = [ids["bright-box"], ids["centre-biased"]]
    controls, up = _start(data, runs)
    results = [data.store.load(r) for r in runs]
    gt = results[0].target_boxes.values[:, 0].astype(float)
    for sample in range(len(LABELS)):
        up = cb.update_selection(data, up.selection, controls, Event("sample", 0, sample))
        for tx in SHIFTS:
            for ty in SHIFTS:
                up = _click(data, controls, up.selection, tx, ty)
                detail = cb.stored_detail(data, up.selection)
                assert detail[0].children == (f"sample {sample} · 1 object (class {LABELS[sample]}) · tx {tx}, ty {ty}")
                offset = np.array([OFFSET[0] - tx, OFFSET[1] - ty] * 2)  # view origin in the context
                for i, res in enumerate(results):
                    fig = _find(detail[1], f"detail-boxes-{i}").figure
                    (fov,) = _boxes(fig, "fov")
                    np.testing.assert_allclose(fov["polygon"], [[offset[0], offset[1]], [offset[0] + 32, offset[1]],
                                                                [offset[0] + 32, offset[1] + 32],
                                                                [offset[0], offset[1] + 32]])
                    (truth,) = _boxes(fig, "gt")
                    np.testing.assert_allclose(truth["box"], gt[sample])
                    assert truth["label"] == LABELS[sample] and truth["in_view"]
                    (pred,) = _boxes(fig, "prediction")  # one detection: one row of the top 3
                    top = res.top_boxes.sel(sample=sample, tx=tx, ty=ty).values[0].astype(float)
                    np.testing.assert_allclose(pred["box"], top + offset, atol=1e-4)  # view -> context
                    if i == 0:  # equivariant: the box in context coordinates is the ground truth
                        np.testing.assert_allclose(pred["box"], gt[sample], atol=1e-4)
                        (cons,) = _boxes(fig, "consensus")
                        np.testing.assert_allclose(cons["box"], gt[sample], atol=1e-4)
                        head, rows = _table(_find(detail[1], "detail-table-0"))
                        assert head == ["rank", "class", "confidence", "IoU (GT)", "IoU (consensus)"]
                        assert rows == [["1", "1", "0.900", "1.000", "1.000"]]
                    else:
                        assert not _boxes(fig, "consensus")  # evaluated without consensus
                        assert len(_find(detail[1], "detail-table-1").children[0].children.children) == 4
    _, up = _start(data, runs)  # the non-equivariant detector's box leaves the object at some shift
    up = _click(data, controls, up.selection, 8, 8)
    fig = _find(cb.stored_detail(data, up.selection)[1], "detail-boxes-1").figure
    assert np.abs(np.asarray(_boxes(fig, "prediction")[0]["box"]) - gt[up.selection["sample"]]).max() > 1


def test_the_table_iou_is_against_the_ground_truth_moved_into_the_view(store):
    data, ids = store
    runs = [ids["bright-box"], ids["centre-biased"]]
    controls, up = _start(data, runs)
    biased = data.store.load(runs[1])
    seen = set()
    for tx, ty in ((8, 8), (-8, 4), (4, -4), (0, 0)):
        up = _click(data, controls, up.selection, tx, ty)
        sample = up.selection["sample"]
        detail = cb.stored_detail(data, up.selection)
        _, rows = _table(_find(detail[1], "detail-table-1"))
        top = biased.top_boxes.sel(sample=sample, tx=tx, ty=ty).values[:1].astype(np.float64)
        moved = biased.target_boxes.sel(sample=sample).values.astype(np.float64) + np.array([tx, ty] * 2) - np.array(
            OFFSET * 2)
        moved = np.clip(moved, 0, 32)  # into the view, clipped to it
        iou = float(box_iou(torch.as_tensor(top), torch.as_tensor(moved))[0, 0])
        assert rows[0][3] == f"{iou:.3f}"
        assert iou == pytest.approx(float(biased.iou.sel(sample=sample, tx=tx, ty=ty)), abs=1e-5)  # the task's IoU
        score = float(biased.det_scores.sel(sample=sample, tx=tx, ty=ty).values[0])
        assert rows[0][:3] == ["1", "1", f"{score:.3f}"]
        line = _find(detail[1], "detail-metrics-1").children
        assert f"IoU {iou:.3f}" in line and "precision" in line and "F1" in line
        seen.add(rows[0][3])
    assert len(seen) > 1  # the IoU does change with the shift


def test_class_subsets_follow_the_first_object(store):
    data, ids = store
    runs = [ids["bright-box"], ids["centre-biased"]]
    _, up = _start(data, runs, subset=2)
    assert up.message == "" and up.labels[0] == "1/2"
    assert "(n = 2)" in cb.aggregate_figure(data, up.selection)["layout"]["title"]["text"]
    assert up.selection["sample"] in (1, 3)


def test_live_reevaluation_between_grid_shifts(store):
    data, ids = store
    runs = [ids["bright-box"], ids["centre-biased"]]
    controls, up = _start(data, runs)
    sample = up.selection["sample"]
    gt = data.store.load(runs[0]).target_boxes.sel(sample=sample).values[0].astype(float)
    for tx, ty in ((3.0, 0.0), (3.0, -5.0), (-7.0, 6.0)):
        live = cb.live_detail(data, up.selection, [tx, ty])
        assert live[0].children == f"live re-evaluation · tx {tx:g}, ty {ty:g}"
        fig = _find(live[1], "live-boxes-0").figure
        (fov,) = _boxes(fig, "fov")
        np.testing.assert_allclose(fov["polygon"][0], [OFFSET[0] - tx, OFFSET[1] - ty])
        (pred,) = _boxes(fig, "prediction")
        np.testing.assert_allclose(pred["box"], gt, atol=1e-4)  # the equivariant detector, off the grid
        (truth,) = _boxes(fig, "gt")
        np.testing.assert_allclose(truth["box"], gt)
        _, rows = _table(_find(live[1], "live-table-0"))
        assert rows == [["1", "1", "0.900", "1.000", "1.000"]]
        assert "IoU 1.000" in _find(live[1], "live-metrics-0").children
        assert _find(live[1], "live-boxes-1") is None
        assert _text(live[2]) == "centre-biased: model not loadable: stored values only"
    # on a grid shift, the live model gives the stored boxes
    up = _click(data, controls, up.selection, 4, -8)
    stored = _boxes(_find(cb.stored_detail(data, up.selection)[1], "detail-boxes-0").figure, "prediction")
    live = _boxes(_find(cb.live_detail(data, up.selection, [4, -8])[1], "live-boxes-0").figure, "prediction")
    np.testing.assert_allclose(live[0]["box"], stored[0]["box"], atol=1e-4)


def test_label_free_mode_scores_against_the_consensus(store):
    data, ids = store
    controls, up = _start(data, [ids["bright-box"]], "consensus_conf_iou", subset=1, label_free=["on"])
    assert up.message == "" and up.labels[0] == "1/4"  # every consensus object is class 1
    up = _click(data, controls, up.selection, -4, 8)
    detail = cb.stored_detail(data, up.selection)
    assert "consensus: 1 object (class 1) (bright-box)" in detail[0].children
    head, rows = _table(_find(detail[1], "detail-table-0"))
    assert head[3:] == ["IoU (consensus)"] and rows[0][3] == "1.000"
    line = _find(detail[1], "detail-metrics-0").children
    assert line.startswith("confidence 0.900") and "IoU vs consensus 1.000" in line and " IoU 1" not in line
    _, up = _start(data, [ids["bright-box"]], "consensus_iou", subset=2, label_free=["on"])
    assert up.message == "no samples in class 2 (by consensus)"


def test_without_stored_contexts_the_panel_says_so():
    images, targets = contexts()
    res = osc.evaluate(BrightBoxDetector(), Pairs(images[:2], targets[:2]), osc.Translation(SHIFTS), Detection(),
                       view_size=VIEW).result
    assert "input" not in res.data
    view = DetectionView()
    req = DetailRequest(results=[res], run_ids=["x"], names=["plain"], colours=["#0072B2"], sample=1,
                        element={"tx": 4.0, "ty": 0.0})
    title, cards = view.stored_detail(req, "conf_iou")
    assert title.children == "sample 1 · 1 object (class 2) · tx 4, ty 0"
    assert "did not store its context images (evaluate with store_inputs=True)" in _find(cards, "detail-boxes-0").children
    head, rows = _table(_find(cards, "detail-table-0"))
    assert head == ["rank", "class", "confidence"] and rows == [["1", "1", "0.900"]]
    assert not view.supports_live([res]) and "store_inputs=True" in view.live_unavailable([res])
    assert frame_sizes(res) == (None, VIEW)


def test_view_and_context_frames_convert_both_ways():
    t = osc.Translation([3.0], [-5.0]).transforms()
    context, view = (48, 64), (32, 40)  # (H, W): view origin at ((64 - 40)/2 - 3, (48 - 32)/2 + 5) = (9, 13)
    boxes = np.array([[1.0, 2.0, 11.0, 9.0], [0.0, 0.0, 40.0, 32.0]])
    back = view_to_context(boxes, t, context, view)
    np.testing.assert_allclose(back, boxes + [9, 13, 9, 13])
    again, visible = context_to_view(back, t, context, view)
    np.testing.assert_allclose(again, boxes)
    assert visible.all()
    np.testing.assert_allclose(field_of_view(t, context, view), [[9, 13], [49, 13], [49, 45], [9, 45]])
    moved, visible = context_to_view(np.array([[0.0, 0.0, 12.0, 20.0], [55.0, 0.0, 60.0, 10.0]]), t, context, view)
    np.testing.assert_allclose(moved[0], [0, 0, 3, 7])  # clipped to the view
    assert visible.tolist() == [True, False]  # the second is out of view
    # the whole image moving (no window): its frame is the context's
    np.testing.assert_allclose(view_to_context(boxes, t, context, None), boxes + [-3, 5, -3, 5])


def test_a_moving_image_is_its_own_context():
    """``Detection(input_kind="image")``: the whole image moves (no window); the stored input is
    the image, the frame drawn is the image's frame moved back, and boxes map back by g⁻¹."""
    images, targets = contexts()
    crop = images[:2, :, 16:48, 16:48].copy()  # 32 × 32 images, the box stays inside at every shift
    moved_targets = [{"boxes": t["boxes"] - 16, "labels": t["labels"]} for t in targets[:2]]
    res = osc.evaluate(BrightBoxDetector(), Pairs(crop, moved_targets), osc.Translation(SHIFTS),
                       Detection(input_kind="image"), store_inputs=True).result
    assert frame_sizes(res) == ((32, 32), None)
    view = DetectionView()
    req = DetailRequest(results=[res], run_ids=["x"], names=["image"], colours=["#0072B2"], sample=0,
                        element={"tx": -4.0, "ty": 8.0})
    fig = _find(view.stored_detail(req, "iou")[1], "detail-boxes-0").figure
    np.testing.assert_allclose(_boxes(fig, "fov")[0]["polygon"], [[4, -8], [36, -8], [36, 24], [4, 24]])
    np.testing.assert_allclose(_boxes(fig, "prediction")[0]["box"], moved_targets[0]["boxes"][0], atol=1e-4)
    assert view.supports_live([res])
    element = osc.Translation([3.0], [-5.0])
    out = view.evaluate_live(BrightBoxDetector(), res, 0, element)
    np.testing.assert_allclose(out.boxes[0], moved_targets[0]["boxes"][0] + [3, -5, 3, -5], atol=1e-4)
    assert out.metrics["iou"] == pytest.approx(1.0) and out.metrics["conf_iou"] == pytest.approx(0.9)


@pytest.mark.parametrize("max_detections", [1, 2])
def test_the_detail_panel_of_runs_keeping_fewer_than_three_detections(max_detections):
    rng = np.random.default_rng(4)
    images = rng.uniform(0, 0.3, size=(2, 1, 64, 64)).astype(np.float32)
    images[:, 0, 28:34, 28:35] = 0.9
    targets = [{"boxes": np.array([[28, 28, 35, 34]], np.float32), "labels": np.array([1])}] * 2
    res = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), osc.Translation(range(-8, 9, 8)),
                       Detection(max_detections=max_detections), view_size=(32, 32), store_inputs=True).result
    req = DetailRequest(results=[res], run_ids=["x"], names=["m"], colours=["#0072B2"], sample=0,
                        element={"tx": 8.0, "ty": 0.0})
    parts = view_for("detection").stored_detail(req, "conf_iou")
    assert "tx 8, ty 0" in str(parts[0].children)
