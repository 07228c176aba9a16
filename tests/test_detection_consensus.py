"""Detection consensus (NERO, label-free): fused boxes against a plain-loop reference, majority
labels, and the exactly equivariant detector, whose consensus is its ground truth."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope import Detection
from orbitscope.kinds import Boxes, fuse_boxes

from helpers import Pairs
from test_detection_task import BrightBoxDetector


def _iou(a, b) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _fuse_reference(cands: list[tuple[int, list[float], int, float]], weights: list[float], thr: float = 0.5):
    """The documented rule, one candidate at a time: cands are (element, box, label, score)."""
    cands = sorted([c for c in cands if weights[c[0]] > 0], key=lambda c: -c[3])  # stable, as argsort
    used = [False] * len(cands)
    total = sum(weights)
    out = []
    for i, (k0, box0, lab0, _) in enumerate(cands):
        if used[i]:
            continue
        members = [i]
        used[i] = True
        best: dict[int, tuple[float, int]] = {}
        for j, (k, box, _, _) in enumerate(cands):
            if used[j] or k == k0:
                continue
            v = _iou(box0, box)
            if v > thr and (k not in best or v > best[k][0]):
                best[k] = (v, j)
        for _, j in best.values():
            members.append(j)
            used[j] = True
        votes: dict[int, list[float]] = {}
        for j in members:
            k, _, lab, sc = cands[j]
            votes.setdefault(lab, [0.0, 0.0])
            votes[lab][0] += weights[k]
            votes[lab][1] += sc
        top = max(v for v in votes.values())
        winners = [lab for lab, v in votes.items() if v == top]
        label = lab0 if lab0 in winners else min(winners)
        wsum = sum(weights[cands[j][0]] for j in members)
        box = [sum(weights[cands[j][0]] * cands[j][1][c] for j in members) / wsum for c in range(4)]
        out.append((box, label, sum(weights[cands[j][0]] * cands[j][3] for j in members) / total))
    return sorted(out, key=lambda f: -f[2])


@pytest.mark.parametrize("seed", range(6))
def test_fuse_boxes_equals_a_plain_loop_reference(seed):
    rng = np.random.default_rng(seed)
    n_el, n_s, n = 7, 3, 4
    base = rng.uniform(0, 60, size=(n_s, 3, 2))
    xyxy = np.zeros((n_el, n_s, n, 4))
    for k in range(n_el):  # jittered copies of three objects per sample, plus noise boxes
        for b in range(n_s):
            for j in range(n):
                c = base[b, j % 3] + rng.normal(0, 2, 2)
                size = rng.uniform(8, 14, 2)
                xyxy[k, b, j] = [*c, *(c + size)]
    labels = rng.integers(0, 3, size=(n_el, n_s, n))
    scores = rng.uniform(0.05, 1, size=(n_el, n_s, n)).round(3)
    valid = rng.uniform(size=(n_el, n_s, n)) < 0.8
    weights = [1.0] * n_el
    weights[rng.integers(n_el)] = 0.0  # a repeated element
    rows = Boxes(torch.tensor(xyxy.reshape(-1, n, 4), dtype=torch.float32), torch.tensor(labels.reshape(-1, n)),
                 torch.tensor(valid.reshape(-1, n)), torch.tensor(scores.reshape(-1, n), dtype=torch.float32))
    fused = fuse_boxes(rows, n_el, n_s, weights)
    for b in range(n_s):
        cands = [(k, rows.xyxy[k * n_s + b, j].double().tolist(), int(labels[k, b, j]),
                  float(rows.scores[k * n_s + b, j])) for k in range(n_el) for j in range(n) if valid[k, b, j]]
        ref = _fuse_reference(cands, weights)
        got = fused[b : b + 1]
        m = int(got.valid.sum())
        assert m == len(ref)
        np.testing.assert_allclose(got.xyxy[0, :m].numpy(), np.array([r[0] for r in ref]).reshape(-1, 4), atol=1e-4)
        assert got.labels[0, :m].tolist() == [r[1] for r in ref]
        np.testing.assert_allclose(got.scores[0, :m].numpy(), [r[2] for r in ref], atol=1e-6)


def test_the_fused_label_is_the_majority_not_a_mean_of_class_ids():
    # three elements see one object: class 1 (score 0.9, opens the cluster), then class 3 twice.
    # NERO's truncated mean of class ids would say int((1 + 3 + 3) / 3) = 2, a class nobody saw.
    xyxy = torch.tensor([[[10.0, 10, 20, 20]], [[11.0, 10, 21, 20]], [[10.0, 11, 20, 21]]])
    rows = Boxes(xyxy, torch.tensor([[1], [3], [3]]), torch.ones(3, 1, dtype=torch.bool),
                 torch.tensor([[0.9], [0.6], [0.5]]))
    fused = fuse_boxes(rows, 3, 1, [1.0, 1.0, 1.0])
    assert int(fused.valid.sum()) == 1
    assert int(fused.labels[0, 0]) == 3
    assert float(fused.scores[0, 0]) == pytest.approx((0.9 + 0.6 + 0.5) / 3)
    # a tie in votes goes to the larger summed score, here the opener's class
    tie = fuse_boxes(rows[:2], 2, 1, [1.0, 1.0])
    assert int(tie.labels[0, 0]) == 1


def _contexts(n: int, unlabelled: bool = False, size: tuple[int, int] = (4, 7)):
    rng = np.random.default_rng(3)
    images = rng.uniform(0, 0.3, size=(n, 1, 64, 64)).astype(np.float32)
    targets = []
    for i in range(n):
        w, h = rng.integers(*size, size=2)
        x0, y0 = rng.integers(28, 31, size=2)
        images[i, 0, y0:y0 + h, x0:x0 + w] = 0.9
        box = np.array([[x0, y0, x0 + w, y0 + h]], np.float32)
        targets.append({"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)} if unlabelled
                       else {"boxes": box, "labels": np.array([1])})
    return images, targets


@pytest.mark.parametrize("stored", [False, True])
def test_the_equivariant_detectors_consensus_is_its_ground_truth(tmp_path, stored):
    images, targets = _contexts(5)
    orbit = osc.Translation(range(-8, 9, 4))  # the object stays wholly in the 32-px view
    run = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                       consensus=True, batch_size=2, store=tmp_path if stored else None)
    res = run.result
    gt = np.stack([t["boxes"][0] for t in targets])
    np.testing.assert_allclose(res.consensus_boxes.values[:, 0], gt, atol=1e-5)
    assert res.consensus_labels.values[:, 0].tolist() == [1] * 5
    np.testing.assert_allclose(res.consensus_scores.values[:, 0], 0.9, atol=1e-6)
    for name in ("iou", "conf_iou", "precision", "recall", "f1"):
        np.testing.assert_allclose(res[f"consensus_{name}"].values, res[name].values, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(res.consensus_iou.values, 1.0, atol=1e-6)
    metrics = osc.dataset_metrics(res)
    np.testing.assert_allclose(metrics["consensus_ap50"].values, 1.0)
    np.testing.assert_allclose(metrics["consensus_map"].values, metrics["map"].values)
    assert res.meta("consensus_iou").needs_labels is False


class GridDetector(nn.Module):
    """Not shift-equivariant: the bright box with its corners snapped to a 4-px grid of the view."""

    def forward(self, x):
        out = BrightBoxDetector()(x)
        for d in out:
            d["boxes"] = torch.round(d["boxes"] / 4) * 4
        return out


def test_consensus_on_unlabelled_images_shows_a_non_equivariant_detector():
    images, targets = _contexts(4, unlabelled=True, size=(8, 11))
    orbit = osc.Translation(range(-4, 5, 1))
    res = osc.evaluate(GridDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                       consensus=True).result
    assert np.isnan(res.iou.values).all()  # no labels: the labelled metrics are undefined
    c = res.consensus_iou.values
    assert np.isfinite(c).all()
    assert c.min() < 0.8 and c.max() > 0.6  # the snapped box disagrees with the fused one at some shifts
    eq = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                      consensus=True).result
    np.testing.assert_allclose(eq.consensus_iou.values, 1.0, atol=1e-6)


class FaintDetector(nn.Module):
    """The bright box, but scored 0.1 and found only while the object is within 4 px of the view
    centre: its fused score (mean over the orbit) is far below consensus_score."""

    def forward(self, x):
        out = BrightBoxDetector()(x)
        for d in out:
            centre = (d["boxes"][:, :2] + d["boxes"][:, 2:]) / 2 if len(d["boxes"]) else torch.zeros(0, 2)
            near = (centre - x.shape[-1] / 2).abs().amax(-1) <= 4
            d["boxes"], d["labels"] = d["boxes"][near], d["labels"][near]
            d["scores"] = torch.full((int(near.sum()),), 0.1)
        return out


def test_the_best_fused_box_is_always_a_consensus_object():
    images, targets = _contexts(3)
    orbit = osc.Translation(range(-8, 9, 4))
    res = osc.evaluate(FaintDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                       consensus=True).result
    scores = res.consensus_scores.values[:, 0]
    assert (scores < 0.25).all() and (scores > 0).all()  # below consensus_score, kept as the best box
    gt = np.stack([t["boxes"][0] for t in targets])
    np.testing.assert_allclose(res.consensus_boxes.values[:, 0], gt, atol=1e-5)
    found = res.confidence.values > 0
    assert found.any() and (~found).any()
    np.testing.assert_allclose(res.consensus_iou.values[found], 1.0, atol=1e-6)
    np.testing.assert_allclose(res.consensus_iou.values[~found], 0.0)  # missed: IoU 0 against the consensus


def test_many_one_off_false_positives_do_not_crowd_out_the_stable_object():
    # 40 elements: the object at score 0.6 in the same place at every element, plus a tiny false
    # positive at 0.95 somewhere else each time; the consensus keeps max_objects boxes
    n_el = 40
    xyxy, scores = torch.zeros(n_el, 2, 4), torch.zeros(n_el, 2)
    for k in range(n_el):
        xyxy[k, 0], scores[k, 0] = torch.tensor([3.0 * k, 200, 3.0 * k + 2, 202]), 0.95
        xyxy[k, 1], scores[k, 1] = torch.tensor([50.0, 50, 80, 80]), 0.6
    rows = Boxes(xyxy, torch.ones(n_el, 2, dtype=torch.long), torch.ones(n_el, 2, dtype=torch.bool), scores)
    cons = Detection(max_objects=4).consensus(rows, n_el, 1, np.ones(n_el))
    kept = cons.valid[0]
    assert cons.xyxy[0][kept].tolist() == [[50.0, 50.0, 80.0, 80.0]]
    assert float(cons.scores[0, 0]) == pytest.approx(0.6)
    bounded = fuse_boxes(rows, n_el, 1, np.ones(n_el), max_boxes=3)
    full = fuse_boxes(rows, n_el, 1, np.ones(n_el))
    np.testing.assert_allclose(bounded.scores[0, :3].numpy(), full.scores[0, :3].numpy())  # the same best 3


class PaddedDetector(nn.Module):
    """list[dict] padded by the model itself to 3 rows with label -1 and score 0 (as exported models do)."""

    def forward(self, x):
        out = []
        for d in BrightBoxDetector()(x):
            pad = 3 - len(d["boxes"])
            out.append({"boxes": torch.cat([d["boxes"], torch.zeros(pad, 4)]),
                        "scores": torch.cat([d["scores"], torch.zeros(pad)]),
                        "labels": torch.cat([d["labels"], torch.full((pad,), -1)])})
        return out


def test_rows_a_model_padded_itself_are_ignored_with_and_without_consensus():
    images, targets = _contexts(3)
    orbit = osc.Translation(range(-8, 9, 4))
    args = (Pairs(images, targets), orbit, Detection())
    padded = osc.evaluate(PaddedDetector(), *args, view_size=(32, 32), consensus=True).result
    plain = osc.evaluate(BrightBoxDetector(), *args, view_size=(32, 32), consensus=True).result
    for name in ("confidence", "iou", "precision", "consensus_iou", "consensus_boxes", "det_labels"):
        np.testing.assert_array_equal(padded[name].values, plain[name].values, err_msg=name)


def test_scoring_stays_on_the_targets_device_when_no_image_has_a_box():
    # the meta device stands in for a GPU: every tensor of the result must live where the targets do
    device = torch.device("meta")
    from orbitscope.kinds import read_detections

    out = read_detections([{"boxes": torch.tensor([[1.0, 1, 5, 5]]), "scores": torch.tensor([0.9]),
                            "labels": torch.tensor([1])}] * 2).to(device)
    empty = Boxes(torch.zeros(2, 0, 4), torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.bool)).to(device)
    scores = Detection().score(out, empty)
    assert {v.device.type for v in scores.values()} == {"meta"}
