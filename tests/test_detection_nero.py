"""NERO's detection counting (``nero_precision``, ``nero_recall``, ``nero_f1``) and NERO's "AP"
(``nero_ap``) against plain loops written from the reference facts (seeds.md §4, "NERO —
detection"): per crop every prediction above the score threshold counts, every right-label
prediction with IoU > 0.5 (+1-pixel sides) is a true positive (no one-to-one matching),
recall = min(1, TP / ground truth); "AP" is py-faster-rcnn's voc_ap of the per-image (recall,
precision) pairs in dataset order."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orbitscope.kinds import collate_boxes, read_detections
from orbitscope.tasks import Detection
from orbitscope.tasks.detection_metrics import nero_average_precision


def _plain_iou_plus_one(a, b) -> float:
    """IoU with inclusive pixel coordinates: every side is x1 − x0 + 1."""
    iw = min(a[2], b[2]) - max(a[0], b[0]) + 1
    ih = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
    area_b = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / (area_a + area_b - inter)


def _plain_nero_prf(gt_boxes, gt_labels, boxes, labels, scores, threshold):
    """One crop, by loops: (precision, recall, f1) as stated in the module docstring, NaN where
    undefined (no prediction: precision; no ground truth: recall and F1)."""
    tp = n_pred = 0
    for b, lab, s in zip(boxes, labels, scores):
        if s < threshold:
            continue
        n_pred += 1
        for g, gl in zip(gt_boxes, gt_labels):
            if lab == gl and _plain_iou_plus_one(b, g) > 0.5:
                tp += 1
                break  # one prediction is one true positive, however many boxes it hits
    precision = tp / n_pred if n_pred else math.nan
    if not len(gt_boxes):
        return precision, math.nan, math.nan
    recall = min(1.0, tp / len(gt_boxes))
    p = 0.0 if n_pred == 0 else precision
    f1 = 0.0 if p + recall == 0 else 2 * p * recall / (p + recall)
    return precision, recall, f1


def _crops(rng: np.random.Generator, n: int):
    """Ground truth and predictions with duplicates on one object, wrong classes, predictions
    below any threshold, crops without predictions and crops without ground truth; boxes on a
    whole-pixel grid, some only a pixel apart, so the +1 convention and the strict > 0.5 matter."""
    crops = []
    for i in range(n):
        n_gt = int(rng.integers(0, 4)) if i % 7 else 0
        xy = rng.integers(0, 60, (n_gt, 2)).astype(float)
        wh = rng.integers(3, 30, (n_gt, 2)).astype(float)
        gb, gl = np.concatenate([xy, xy + wh], 1).reshape(-1, 4), rng.integers(1, 4, n_gt)
        boxes, labels = [], []
        if i % 5:
            for b, lab in zip(gb, gl):
                for _ in range(int(rng.integers(0, 4))):  # duplicates of the same object
                    boxes.append(b + rng.integers(-3, 4, 4))
                    labels.append(lab if rng.random() < 0.8 else rng.integers(1, 4))
            for _ in range(int(rng.integers(0, 3))):
                xy = rng.integers(0, 70, 2).astype(float)
                boxes.append(np.concatenate([xy, xy + rng.integers(2, 25, 2)]))
                labels.append(rng.integers(1, 4))
        db = np.asarray(boxes, dtype=float).reshape(-1, 4)
        db[:, 2:] = np.maximum(db[:, 2:], db[:, :2] + 1)
        ds = rng.choice([0.01, 0.04, 0.05, 0.2, 0.6, 0.95], len(db))
        crops.append((gb, gl, db, np.asarray(labels, dtype=np.int64), ds))
    return crops


def _score(crops, task: Detection) -> dict[str, np.ndarray]:
    targets = collate_boxes([{"boxes": gb, "labels": gl} for gb, gl, *_ in crops])
    outputs = read_detections([{"boxes": torch.as_tensor(db, dtype=torch.float32), "scores": torch.as_tensor(ds),
                                "labels": torch.as_tensor(dl)} for _, _, db, dl, ds in crops])
    return {k: v.numpy() for k, v in task.score(outputs, targets, None).items()}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.5])
def test_nero_counting_against_a_plain_per_crop_loop(seed, threshold):
    rng = np.random.default_rng(seed)
    crops = _crops(rng, 60)
    # max_detections (COCO's top boxes per row) is 3: NERO's counting sees every prediction anyway
    ours = _score(crops, Detection(nero_score_threshold=threshold, max_detections=3))
    for i, (gb, gl, db, dl, ds) in enumerate(crops):
        p, r, f1 = _plain_nero_prf(gb, gl, db, dl, ds, threshold)
        for name, want in (("nero_precision", p), ("nero_recall", r), ("nero_f1", f1)):
            got = float(ours[name][i])
            assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-6), (i, name, got, want)
    assert np.isnan(ours["nero_precision"]).any() and np.isnan(ours["nero_recall"]).any()
    coco = _score(crops, Detection(score_threshold=threshold, max_detections=16))["precision"]
    both = np.isfinite(ours["nero_precision"]) & np.isfinite(coco)
    assert (ours["nero_precision"][both] > coco[both] + 1e-6).any()  # duplicates all count: not COCO's matching


def test_nero_counting_differs_from_coco_matching_on_duplicates():
    """Two boxes on one object: NERO counts both as true positives (precision 1), COCO one."""
    crop = (np.array([[10.0, 10.0, 40.0, 40.0]]), np.array([1]), np.array([[10.0, 10.0, 40.0, 40.0],
                                                                          [11.0, 11.0, 41.0, 41.0]]),
            np.array([1, 1]), np.array([0.9, 0.8]))
    ours = _score([crop], Detection())
    assert ours["nero_precision"][0] == 1.0 and ours["nero_recall"][0] == 1.0
    assert ours["precision"][0] == 0.5 and ours["recall"][0] == 1.0


def test_nero_iou_is_strictly_above_half_with_plus_one_sides():
    """A box whose +1 IoU is exactly 0.5 is not a hit; without the +1 it would be above 0.5."""
    gt = np.array([[0.0, 0.0, 9.0, 9.0]])  # 10 × 10 inclusive pixels
    exact = np.array([[0.0, 0.0, 9.0, 4.0]])  # 10 × 5: IoU 0.5 with +1
    assert _plain_iou_plus_one(exact[0], gt[0]) == 0.5
    above = np.array([[0.0, 0.0, 9.0, 5.0]])  # 10 × 6: IoU 0.6
    ours = _score([(gt, np.array([2]), exact, np.array([2]), np.array([0.9])),
                   (gt, np.array([2]), above, np.array([2]), np.array([0.9]))], Detection())
    assert ours["nero_recall"].tolist() == [0.0, 1.0]


def test_key_ground_truth_counts_predictions_of_other_objects_as_false_positives():
    """NERO's key-object crops: a prediction on another object is a false positive in NERO's
    counting (it is ignored in our COCO-style counting)."""
    gb = np.array([[10.0, 10.0, 30.0, 30.0], [40.0, 40.0, 60.0, 60.0]])
    crop = (gb, np.array([1, 1]), gb.copy(), np.array([1, 1]), np.array([0.9, 0.8]))
    key = _score([crop], Detection(ground_truth="key"))
    assert key["nero_precision"][0] == 0.5 and key["nero_recall"][0] == 1.0
    assert key["precision"][0] == 1.0  # ours: the other object's box is ignored
    every = _score([crop], Detection())
    assert every["nero_precision"][0] == 1.0 and every["nero_recall"][0] == 1.0


def _plain_voc_ap(recall, precision) -> float:
    """py-faster-rcnn's voc_ap (non-07), by loops, from its description."""
    r = [0.0] + [float(x) for x in recall] + [1.0]
    p = [0.0] + [float(x) for x in precision] + [0.0]
    for i in range(len(p) - 2, -1, -1):
        if p[i] < p[i + 1]:
            p[i] = p[i + 1]
    total = 0.0
    for i in range(len(r) - 1):
        if r[i + 1] != r[i]:
            total += (r[i + 1] - r[i]) * p[i + 1]
    return total


def test_nero_ap_by_hand():
    # recall 0.5 at precision 1, then recall 1 at precision 0.5: 0.5·1 + 0.5·0.5
    assert nero_average_precision([0.5, 1.0], [1.0, 0.5]) == pytest.approx(0.75)
    # dataset order, not sorted: recalls 1, 0, 1 with precisions 0.5, 0, 1 -> envelope 1, 1, 1, 1, 0 over
    # recalls 0, 1, 0, 1, 1: steps +1·1, −1·1, +1·1 = 1
    assert nero_average_precision([1.0, 0.0, 1.0], [0.5, 0.0, 1.0]) == pytest.approx(1.0)
    # the first pairs in the other order: recalls 0, 1, 0.5, 1 with envelope 1, 1, 1, 0 -> 1 − 0.5·1 + 0.5·0
    assert nero_average_precision([1.0, 0.5], [0.5, 1.0]) == pytest.approx(0.5)
    assert math.isnan(nero_average_precision([], []))
    with pytest.raises(ValueError, match="finite"):
        nero_average_precision([0.5, np.nan], [1.0, 1.0])


@pytest.mark.parametrize("seed", range(5))
def test_nero_ap_against_a_plain_voc_ap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    recall = rng.choice([0.0, 0.5, 1.0, rng.random()], n)
    precision = rng.random(n)
    assert nero_average_precision(recall, precision) == pytest.approx(_plain_voc_ap(recall, precision), abs=1e-12)


def test_dataset_nero_ap_from_the_per_sample_pairs_in_sample_order():
    """``nero_ap`` per orbit element: the plain voc_ap of the samples' (recall, precision) in sample
    order, samples without ground truth left out, samples without predictions as (0, 0)."""
    rng = np.random.default_rng(7)
    crops = _crops(rng, 50)
    task = Detection()
    scored = _score(crops, task)
    # two orbit elements: the crops as scored, and in reverse (the order of samples matters)
    states = {k: np.stack([scored[k], scored[k][::-1]], 1) for k in ("nero_precision", "nero_recall")}
    got = task.compute(states, 1)["nero_ap"]
    for e, order in enumerate((range(50), range(49, -1, -1))):
        pairs = []
        for i in order:
            p, r, _ = _plain_nero_prf(*crops[i], 0.05)
            if not math.isnan(r):
                pairs.append((r, 0.0 if math.isnan(p) else p))
        want = _plain_voc_ap([r for r, _ in pairs], [p for _, p in pairs])
        assert got[e] == pytest.approx(want, abs=1e-6)  # the pairs are stored as float32
    assert got[0] != pytest.approx(got[1], abs=1e-6)  # the order matters: not a precision-recall curve
    none = task.compute({k: np.full((3, 2), np.nan) for k in ("nero_precision", "nero_recall")}, 1)["nero_ap"]
    assert np.isnan(none).all()


def test_nero_thresholds_are_part_of_the_run_identity():
    assert Detection().spec()["nero_score_threshold"] == 0.05
    assert Detection(nero_score_threshold=0.0).spec() != Detection().spec()
    assert Detection.from_spec(Detection(nero_score_threshold=0.3).spec()) == Detection(nero_score_threshold=0.3)
    with pytest.raises(ValueError, match="nero_score_threshold"):
        Detection(nero_score_threshold=-0.1)
    names = {v.name for v in Detection().dataset_variables()}
    assert {"nero_ap", "consensus_nero_ap"} <= names
    assert {"nero_precision", "nero_recall", "consensus_nero_precision"} <= set(Detection.compute_reads)


def test_the_demo_counting_table_reads_both_countings_from_the_run(tmp_path):
    """``counting_rows`` (the demo's ``counting.csv``): per model one row with COCO's matching and one
    with NERO's counting, each the orbit mean of the stored per-sample means, and the APs those of
    ``dataset_metrics`` (AP@0.5 and nero_ap), at the centred view too."""
    import warnings

    import orbitscope as osc
    from orbitscope.demos.detection import DETECTORS
    from orbitscope.demos.detection_summary import counting_rows
    from orbitscope.demos.shipped import cache_ready
    from orbitscope.training.detection import DetectorRecipe, cached_detector, detection_training_data, detector_cache_path

    recipe = DETECTORS["centre-detector-jitter100"]
    assert cache_ready(detector_cache_path(recipe, tmp_path))  # the shipped weights: nothing trains
    model, _ = cached_detector(recipe, tmp_path)
    data = detection_training_data(DetectorRecipe(scenes=40, seed=1), split="test").subset(range(8))
    run = osc.evaluate(model, data, "window-shift:-16:16:16", Detection(ground_truth="key"), view_size=(64, 64))
    rows = counting_rows([run], ["m"])
    assert [(r["model"], r["counting"], r["predictions"]) for r in rows] == [
        ("m", "COCO matching", "score ≥ 0.5"), ("m", "NERO counting", "score ≥ 0.05")]
    res, dm = run.result, osc.dataset_metrics(run.result)
    centre = (1, 1)  # tx = ty = 0 on -16, 0, 16
    for row, names, ap in ((rows[0], ("precision", "recall", "f1"), "ap50"),
                           (rows[1], ("nero_precision", "nero_recall", "nero_f1"), "nero_ap")):
        for label, name in zip(("precision", "recall", "F1"), names):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                per_element = np.nanmean(res[name].values.astype(np.float64), 0)
            assert row[f"{label} mean"] == pytest.approx(np.nanmean(per_element), abs=1e-4)
            assert row[f"{label} centre"] == pytest.approx(per_element[centre], abs=1e-4)
        assert row["AP mean"] == pytest.approx(np.nanmean(dm[ap].values), abs=1e-4)
        assert row["AP centre"] == pytest.approx(dm[ap].values[centre], abs=1e-4)
    assert rows[0]["precision mean"] != rows[1]["precision mean"]
