"""The Detection task's metrics against independent references: pycocotools' COCOeval for AP@0.5
and mAP@[.5:.95], plain loops for the per-row metrics, and an analytic detector through the
engine (boxes over a window moving on context)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.kinds import collate_boxes, read_detections
from orbitscope.tasks import Detection

from helpers import Pairs

pycocotools = pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402


def _scene(rng: np.random.Generator, n_images: int, n_classes: int = 3):
    """Ground truth and detections: jittered copies of true boxes (some with the wrong class),
    plus random false positives; scores random."""
    gts, dets = [], []
    for _ in range(n_images):
        n = int(rng.integers(0, 5))
        xy = rng.uniform(0, 80, (n, 2))
        wh = rng.uniform(8, 40, (n, 2))
        boxes = np.concatenate([xy, xy + wh], 1)
        labels = rng.integers(1, n_classes + 1, n)
        gts.append((boxes, labels))
        d_boxes, d_labels = [], []
        for b, lab in zip(boxes, labels):
            for _ in range(int(rng.integers(0, 3))):
                d_boxes.append(b + rng.normal(0, 4, 4))
                d_labels.append(lab if rng.random() < 0.85 else rng.integers(1, n_classes + 1))
        for _ in range(int(rng.integers(0, 3))):
            xy = rng.uniform(0, 90, 2)
            d_boxes.append(np.concatenate([xy, xy + rng.uniform(5, 30, 2)]))
            d_labels.append(rng.integers(1, n_classes + 1))
        d_boxes = np.asarray(d_boxes, dtype=np.float64).reshape(-1, 4)
        d_boxes[:, 2:] = np.maximum(d_boxes[:, 2:], d_boxes[:, :2] + 1)
        dets.append((d_boxes[:10], np.asarray(d_labels, dtype=np.int64)[:10], rng.random(len(d_boxes))[:10]))
    return gts, dets


def _cocoeval(gts, dets, n_classes: int = 3) -> tuple[float, float]:
    def xywh(b):
        return [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]

    images = [{"id": i + 1} for i in range(len(gts))]
    anns = [{"id": len(images) * 100 + j, "image_id": i + 1, "category_id": int(lab), "bbox": xywh(b),
             "area": float((b[2] - b[0]) * (b[3] - b[1])), "iscrowd": 0}
            for i, (boxes, labels) in enumerate(gts) for j, (b, lab) in enumerate(zip(boxes, labels))]
    for j, a in enumerate(anns):
        a["id"] = j + 1
    results = [{"image_id": i + 1, "category_id": int(lab), "bbox": xywh(b), "score": float(s)}
               for i, (boxes, labels, scores) in enumerate(dets) for b, lab, s in zip(boxes, labels, scores)]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {"images": images, "annotations": anns, "categories": [{"id": c} for c in range(1, n_classes + 1)]}
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[1]), float(ev.stats[0])  # AP@0.5, mAP@[.5:.95]


def _ours(gts, dets, task: Detection) -> dict:
    targets = collate_boxes([{"boxes": b, "labels": lab} for b, lab in gts])
    outputs = read_detections([{"boxes": torch.as_tensor(b, dtype=torch.float32), "scores": torch.as_tensor(s),
                                "labels": torch.as_tensor(lab)} for b, lab, s in dets])
    scored = task.score(outputs, targets, None)
    states = {k: v.numpy()[:, None] for k, v in scored.items()}  # one orbit element
    states["target_labels"] = targets.labels.numpy()
    return {**task.compute(states, 1), **{k: v.numpy() for k, v in scored.items()}}


@pytest.mark.parametrize("seed", range(6))
def test_ap_and_map_equal_pycocotools(seed):
    rng = np.random.default_rng(seed)
    gts, dets = _scene(rng, 30)
    if sum(len(b) for b, _ in gts) == 0:
        pytest.skip("no ground truth drawn")
    ap50, m_ap = _cocoeval(gts, dets)
    ours = _ours(gts, dets, Detection())
    assert ours["ap50"][0] == pytest.approx(ap50, abs=1e-9)
    assert ours["map"][0] == pytest.approx(m_ap, abs=1e-9)


def test_per_row_metrics_against_a_plain_loop():
    rng = np.random.default_rng(11)
    gts, dets = _scene(rng, 40)
    task = Detection(score_threshold=0.3)
    ours = _ours(gts, dets, task)

    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

    for i, ((gb, gl), (db, dl, ds)) in enumerate(zip(gts, dets)):
        order = np.argsort(-ds, kind="stable")
        db, dl, ds = db[order], dl[order], ds[order]
        conf = float(ds[0]) if len(ds) else 0.0
        assert ours["confidence"][i] == pytest.approx(conf, abs=1e-6)
        if len(gb) == 0:
            assert np.isnan(ours["iou"][i]) and np.isnan(ours["recall"][i])
        else:
            top = max(iou(db[0], g) for g in gb) if len(db) else 0.0
            assert ours["iou"][i] == pytest.approx(top, abs=1e-5)
            assert ours["conf_iou"][i] == pytest.approx(conf * top, abs=1e-5)
        taken, tp, shown = set(), 0, 0
        for b, lab, s in zip(db, dl, ds):  # greedy in score order, best unmatched same-class IoU >= 0.5
            if s < 0.3:
                continue
            shown += 1
            cand = [(iou(b, g), j) for j, (g, gl_j) in enumerate(zip(gb, gl)) if gl_j == lab and j not in taken]
            cand = [c for c in cand if c[0] >= 0.5]
            if cand:
                taken.add(max(cand)[1])
                tp += 1
        if shown:
            assert ours["precision"][i] == pytest.approx(tp / shown, abs=1e-6)
        if len(gb):
            assert ours["recall"][i] == pytest.approx(tp / len(gb), abs=1e-6)  # not NERO's / 4
        if shown + len(gb):
            assert ours["f1"][i] == pytest.approx(2 * tp / (shown + len(gb)), abs=1e-6)


def test_tensor_outputs_read_like_torchvision_lists():
    raw = torch.tensor([[[0, 0, 10, 10, 0.2, 1], [5, 5, 20, 20, 0.9, 2], [0, 0, 1, 1, -float("inf"), 0]]])
    boxes = Detection().read_outputs(raw)
    assert boxes.valid.tolist() == [[True, True]] and boxes.scores[0].tolist() == pytest.approx([0.9, 0.2])
    with pytest.raises(osc.errors.ModelError, match="list\\[dict"):
        Detection().read_outputs(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="score_threshold"):
        Detection(score_threshold=2)
    assert osc.task_from_spec(Detection(max_detections=5).spec()) == Detection(max_detections=5)


class BrightBoxDetector(nn.Module):
    """An exactly shift-equivariant detector: the bounding box of the pixels above 0.5, class 1,
    score 0.9 (nothing when no pixel is bright)."""

    def forward(self, x):
        out = []
        for img in x[:, 0]:
            on = img > 0.5
            if not on.any():
                out.append({"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)})
                continue
            ys, xs = torch.nonzero(on, as_tuple=True)
            box = torch.stack([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]).float()
            out.append({"boxes": box[None], "scores": torch.tensor([0.9]), "labels": torch.tensor([1])})
        return out


def bright_box_scenes(n: int, seed: int = 0) -> tuple[np.ndarray, list[dict]]:
    """``n`` dim 64×64 images, each with one bright 6–11 px box (class 1) near the centre, and
    their targets: what :class:`BrightBoxDetector` finds exactly."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 0.3, size=(n, 1, 64, 64)).astype(np.float32)
    targets = []
    for i in range(n):
        w, h = rng.integers(6, 12, size=2)
        x0, y0 = rng.integers(24, 34, size=2)
        images[i, 0, y0:y0 + h, x0:x0 + w] = 0.9
        targets.append({"boxes": np.array([[x0, y0, x0 + w, y0 + h]], np.float32), "labels": np.array([1])})
    return images, targets


def test_an_equivariant_detector_gives_iou_one_wherever_the_object_is_in_view(tmp_path):
    images, targets = bright_box_scenes(5)
    orbit = osc.Translation(range(-24, 25, 8))
    run = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                       store=tmp_path, batch_size=2)
    res = run.result
    # several model calls per chunk (forward_batch below the chunk's rows): the same numbers
    split = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                         batch_size=2, forward_batch=7).result
    for name in ("iou", "confidence", "det_scores", "det_matched", "gt_visible"):
        np.testing.assert_array_equal(split[name].values, res[name].values, err_msg=name)
    iou = res.iou.values
    seen = ~np.isnan(iou)
    assert seen.any() and (~seen).any()  # shifts that keep the object in view, and some that do not
    np.testing.assert_allclose(iou[seen], 1.0, atol=1e-6)
    np.testing.assert_allclose(res.recall.values[seen], 1.0)
    metrics = osc.dataset_metrics(res)
    any_seen = seen.any(axis=0)
    np.testing.assert_allclose(metrics["ap50"].values[any_seen], 1.0)
    np.testing.assert_allclose(metrics["map"].values[any_seen], 1.0)
    assert np.isnan(metrics["ap50"].values[~any_seen]).all()
    import warnings

    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # elements where no sample's object is in view
        conf, iou_mean = res.confidence.values.mean(0), np.nanmean(np.where(seen, iou, np.nan), 0)
        np.testing.assert_allclose(metrics["nero_conf_iou"].values[any_seen], (conf * iou_mean)[any_seen], rtol=1e-6)


def _plain_iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _key_object_ap_plain(gts, dets, threshold: float) -> float:
    """AP at one IoU threshold with box 0 as the only ground truth and the other boxes ignored
    regions, by plain loops: per image in score order, the first same-class detection with IoU ≥ t
    with the key box is its true positive; a detection not matched to it with IoU ≥ t with another
    box of its class is ignored; the rest are false positives. Then COCO's 101-point AP per class
    over the key objects' classes."""
    records, n_gt = [], {}
    for (gb, gl), (db, dl, ds) in zip(gts, dets):
        if len(gb):
            n_gt[int(gl[0])] = n_gt.get(int(gl[0]), 0) + 1
        order = np.argsort(-ds, kind="stable")
        used = False
        for b, lab, s in zip(db[order], dl[order], ds[order]):
            if len(gb) and not used and lab == gl[0] and _plain_iou(b, gb[0]) >= threshold:
                used = True
                records.append((s, int(lab), 1.0, 0.0))
            elif any(lab == gl[j] and _plain_iou(b, gb[j]) >= threshold for j in range(1, len(gb))):
                records.append(None)  # ignored: neither a true nor a false positive
            else:
                records.append((s, int(lab), 0.0, 1.0))
    aps = []
    for c, total in sorted(n_gt.items()):
        rows = sorted([r for r in records if r is not None and r[1] == c], key=lambda r: -r[0])
        tp = np.cumsum([r[2] for r in rows])
        fp = np.cumsum([r[3] for r in rows])
        recall = tp / total
        precision = tp / np.maximum(tp + fp, np.finfo(float).eps)
        precision = np.maximum.accumulate(precision[::-1])[::-1] if len(rows) else precision
        q = []
        for level in np.linspace(0, 1, 101):
            idx = int(np.searchsorted(recall, level, side="left"))
            q.append(precision[idx] if idx < len(recall) else 0.0)
        aps.append(float(np.mean(q)))
    return float(np.mean(aps))


@pytest.mark.parametrize("seed", range(4))
def test_key_object_ground_truth_against_a_plain_loop(seed):
    """``ground_truth="key"``: AP@0.5 and AP@0.75 (from mAP's per-threshold states) equal the
    plain-loop key-object AP with the other boxes ignored; recall counts the key object alone and
    the top box's IoU is its IoU with the key object."""
    rng = np.random.default_rng(100 + seed)
    gts, dets = _scene(rng, 40)
    gts = [(b, lab) if len(b) else (np.array([[10.0, 10.0, 40.0, 40.0]]), np.array([1])) for b, lab in gts]
    task = Detection(ground_truth="key")
    ours = _ours(gts, dets, task)
    assert ours["ap50"][0] == pytest.approx(_key_object_ap_plain(gts, dets, 0.5), abs=1e-9)
    # every box in view as ground truth is another number (the test can tell the two apart)
    assert _ours(gts, dets, Detection())["ap50"][0] != pytest.approx(ours["ap50"][0], abs=1e-6)
    for i, ((gb, gl), (db, dl, ds)) in enumerate(zip(gts, dets)):
        order = np.argsort(-ds, kind="stable")
        top = _plain_iou(db[order][0], gb[0]) if len(db) else 0.0
        assert ours["iou"][i] == pytest.approx(top, abs=1e-5)
        hit = any(lab == gl[0] and s >= task.score_threshold and _plain_iou(b, gb[0]) >= 0.5
                  for b, lab, s in zip(db, dl, ds))
        assert ours["recall"][i] == pytest.approx(float(hit), abs=1e-6)


def test_key_object_ground_truth_is_part_of_the_run_identity_only_when_asked():
    assert "ground_truth" not in Detection().spec()
    assert Detection(ground_truth="key").spec()["ground_truth"] == "key"
    assert Detection.from_spec(Detection(ground_truth="key").spec()) == Detection(ground_truth="key")
    with pytest.raises(ValueError, match="ground_truth"):
        Detection(ground_truth="keys")


def test_key_object_ground_truth_with_the_consensus_stores_both_ignore_states(tmp_path):
    """A key-object run with the consensus: the consensus is read the same way (its best box as the
    key), so both ignore states are stored and both APs are defined."""
    from orbitscope.demos.detection import DETECTORS
    from orbitscope.demos.shipped import cache_ready
    from orbitscope.results.result import dataset_metrics
    from orbitscope.training.detection import DetectorRecipe, cached_detector, detection_training_data, detector_cache_path

    recipe = DETECTORS["centre-detector-jitter100"]
    assert cache_ready(detector_cache_path(recipe, tmp_path))  # the shipped weights, copied: nothing trains
    model, info = cached_detector(recipe, tmp_path)
    assert info["from_cache"]
    data = detection_training_data(DetectorRecipe(scenes=40, seed=1), split="test").subset(range(6))
    res = osc.evaluate(model, data, "window-shift:-8:8:8", Detection(ground_truth="key"), view_size=(64, 64),
                       consensus=True).result
    assert {"det_ignored", "consensus_det_ignored"} <= set(res.data.data_vars)
    metrics = dataset_metrics(res)
    assert np.isfinite(metrics["ap50"].values).all() and np.isfinite(metrics["consensus_ap50"].values).all()


@pytest.mark.parametrize("ground_truth", ["all", "key"])
def test_resampled_dataset_metrics_equal_compute_on_the_repeated_samples(ground_truth):
    """``Detection.compute_resampled`` (weighted AP, weighted means, NERO's AP per resample) gives
    what the plain path gives: ``compute`` on the samples each repeated as often as drawn
    (:meth:`orbitscope.tasks.Task.compute_resampled`, the base class's loop)."""
    from orbitscope.analysis.dataset_level import bootstrap_counts
    from orbitscope.tasks.base import Task

    rng = np.random.default_rng(21)
    gts, dets = _scene(rng, 30)
    gts = [(b, lab) if len(b) else (np.array([[10.0, 10.0, 40.0, 40.0]]), np.array([1])) for b, lab in gts]
    task = Detection(ground_truth=ground_truth, score_threshold=0.3)
    targets = collate_boxes([{"boxes": b, "labels": lab} for b, lab in gts])
    outputs = read_detections([{"boxes": torch.as_tensor(b, dtype=torch.float32), "scores": torch.as_tensor(s),
                                "labels": torch.as_tensor(lab)} for b, lab, s in dets])
    scored = {k: v.numpy() for k, v in task.score(outputs, targets, None).items()}
    half = {k: v.numpy() for k, v in task.score(outputs[:, :2], targets, None).items()}  # another element
    states = {k: np.stack([scored[k], half[k]], 1) for k in scored}
    states["target_labels"] = targets.labels.numpy()
    counts = bootstrap_counts(30, 12, 3)
    for metric in ("ap50", "map", "nero_conf_iou", "nero_ap"):
        got = task.compute_resampled(states, 1, counts, metric)
        want = Task.compute_resampled(task, states, 1, counts, metric)
        assert got.shape == (12, 2)
        np.testing.assert_allclose(got, want, atol=1e-9, err_msg=metric)


def _read_one_by_one(raw):
    """Plain reference for read_detections: per image, sort by decreasing score (stable), pad
    with zero boxes, label -1, score -inf; valid = a real row with label >= 0 and a finite score."""
    rows = []
    for d in raw:
        b = np.asarray(d["boxes"], np.float32).reshape(-1, 4)
        sc = np.asarray(d["scores"], np.float32).reshape(-1) if "scores" in d else np.ones(len(b), np.float32)
        lab = np.asarray(d["labels"], np.int64).reshape(-1) if "labels" in d else np.zeros(len(b), np.int64)
        order = sorted(range(len(sc)), key=lambda i: (0 if np.isnan(sc[i]) else 1, -sc[i] if not np.isnan(sc[i]) else 0))
        rows.append((b[order], sc[order], lab[order]))
    n = max((len(r[0]) for r in rows), default=0)
    xyxy = np.zeros((len(rows), n, 4), np.float32)
    scores = np.full((len(rows), n), -np.inf, np.float32)
    labels = np.full((len(rows), n), -1, np.int64)
    valid = np.zeros((len(rows), n), bool)
    for i, (b, sc, lab) in enumerate(rows):
        for j in range(len(b)):
            xyxy[i, j], scores[i, j], labels[i, j] = b[j], sc[j], lab[j]
            valid[i, j] = lab[j] >= 0 and np.isfinite(sc[j])
    return xyxy, scores, labels, valid


@pytest.mark.parametrize("ragged", [False, True])
def test_read_detections_pads_and_sorts_all_images_at_once_as_one_by_one(ragged):
    """The batched padding and sort equal a per-image loop: ties keep the model's order, a model's
    own padding rows (label -1, score -inf) stay invalid, empty images are all padding."""
    from orbitscope.kinds import read_detections

    rng = np.random.default_rng(5)
    raw = []
    for i in range(40):
        n = int(rng.integers(0, 7)) if ragged else 6
        sc = np.round(rng.uniform(0, 1, n), 1).astype(np.float32)  # rounded: many ties
        lab = rng.integers(0, 4, n)
        if n > 2 and i % 3 == 0:
            sc[-1], lab[-1] = -np.inf, -1  # a model's padding row
        if n > 3 and i % 5 == 0:
            sc[1] = -np.inf  # score -inf is padding whatever the label (NaN or +inf would be a ModelError)
        box = rng.uniform(0, 50, (n, 4)).astype(np.float32)
        d = {"boxes": torch.from_numpy(box) if i % 2 else box, "scores": torch.from_numpy(sc), "labels": torch.from_numpy(lab)}
        if i % 7 == 6:
            del d["labels"]
        raw.append(d)
    got = read_detections(raw)
    xyxy, scores, labels, valid = _read_one_by_one(raw)
    assert np.array_equal(got.xyxy.numpy(), xyxy)
    assert np.array_equal(got.scores.numpy(), scores)
    assert np.array_equal(got.labels.numpy(), labels)
    assert np.array_equal(got.valid.numpy(), valid)
    assert read_detections([{"boxes": np.zeros((0, 4))}] * 3).xyxy.shape == (3, 0, 4)
