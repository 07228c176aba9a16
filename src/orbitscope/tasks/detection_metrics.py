"""Detection metrics: COCO-style matching per row, AP / mAP from per-sample states, and NERO's
own counting and "AP".

Conventions (as pycocotools' ``COCOeval`` for ``iouType="bbox"``, which the tests compare with):
    * Boxes are xyxy in pixels, edges not centres: area = (x1 − x0)(y1 − y0), IoU without NERO's
      +1-pixel areas (:func:`orbitscope.kinds.box_iou`).
    * Matching, per image and class, in decreasing score order: a detection takes the unmatched
      ground-truth box of its class with the largest IoU, if that IoU is **≥** the threshold
      (NERO counted > 0.5). Thresholds 0.50, 0.55, …, 0.95.
    * AP of a class at a threshold: detections of all images pooled and sorted by score (stable),
      precision made monotone from the right, sampled at the 101 recall levels 0, 0.01, …, 1
      (0 where a recall level is not reached). Classes without ground truth are left out of the
      mean (their false positives do not count), as COCO does. mAP = mean over classes and the ten
      thresholds; AP@0.5 = mean over classes at 0.5.
    * Each row keeps its ``max_detections`` highest-scoring detections; COCO keeps 100 per image
      *and class*, the same whenever an image has at most ``max_detections`` detections.

NERO's counting (:func:`nero_counts`, :func:`nero_rates`; facts from the authors' code, see
``docs/deviations.md``):
    * IoU with **+1-pixel** sides (:func:`nero_box_iou`): width = x1 − x0 + 1 for both boxes and
      for their intersection, py-faster-rcnn's convention for inclusive pixel coordinates, which
      NERO applied to torchvision's boxes. A true positive needs IoU **> 0.5** and the right class.
    * No one-to-one matching: every prediction that hits a ground-truth box is a true positive,
      so duplicates of one object all count. Precision = TP / predictions, recall =
      min(1, TP / ground-truth boxes), F1 = 2PR / (P + R).
    * NERO's "AP" (:func:`nero_average_precision`) is py-faster-rcnn's ``voc_ap`` (not the
      2007 11-point one) applied to the per-image (recall, precision) pairs **in dataset order**:
      not a score-ranked precision–recall curve, and a different number from COCO's AP@0.5.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["IOU_THRESHOLDS", "RECALL_LEVELS", "NERO_IOU_THRESHOLD", "match_detections", "average_precision",
           "nero_box_iou", "nero_counts", "nero_rates", "nero_average_precision"]

#: COCO's IoU thresholds 0.50:0.05:0.95.
IOU_THRESHOLDS = np.round(np.linspace(0.5, 0.95, 10), 2)
#: COCO's 101 recall levels.
RECALL_LEVELS = np.linspace(0.0, 1.0, 101)
#: NERO's true-positive rule: IoU strictly above this (with +1-pixel sides).
NERO_IOU_THRESHOLD = 0.5


def match_detections(iou: Tensor, same_label: Tensor, det_valid: Tensor, gt_valid: Tensor,
                     thresholds: np.ndarray = IOU_THRESHOLDS) -> Tensor:
    """Greedy COCO matching, vectorised over rows and thresholds.

    Args:
        iou: (R, K, N) IoU of each row's K detections (in decreasing score order) with its N
            ground-truth boxes.
        same_label: (R, K, N) whether detection and ground truth have the same class.
        det_valid, gt_valid: (R, K), (R, N) which entries exist.

    Returns:
        (R, K, T) bool: detection k of row r is a true positive at threshold t.
    """
    r, k, n = iou.shape
    t = torch.as_tensor(np.minimum(thresholds, 1 - 1e-10), dtype=iou.dtype, device=iou.device)
    taken = torch.zeros(r, len(t), n, dtype=torch.bool, device=iou.device)
    matched = torch.zeros(r, k, len(t), dtype=torch.bool, device=iou.device)
    if n == 0 or k == 0:
        return matched
    rows = torch.arange(r, device=iou.device)[:, None].expand(r, len(t))
    ts = torch.arange(len(t), device=iou.device)[None, :].expand(r, len(t))
    for j in range(k):
        cand = (same_label[:, j] & gt_valid & det_valid[:, j, None])[:, None, :] & ~taken  # (R, T, N)
        score = torch.where(cand, iou[:, j, None, :].expand(r, len(t), n), torch.full_like(taken, -1.0, dtype=iou.dtype))
        best, which = score.max(-1)  # ties: the first (pycocotools takes the last; equal IoUs are rare)
        hit = best >= t[None, :]
        matched[:, j] = hit
        taken[rows[hit], ts[hit], which[hit]] = True
    return matched


def average_precision(scores: np.ndarray, labels: np.ndarray, matched: np.ndarray, gt_labels: np.ndarray,
                      gt_visible: np.ndarray, ignored: np.ndarray | None = None) -> tuple[float, float]:
    """(AP@0.5, mAP@[.5:.95]) of one orbit element over all samples (see the module docstring).

    Args:
        scores, labels: (S, K) detections per sample (label −1 = none), in decreasing score order.
        matched: (S, K, T) true positive at each threshold.
        gt_labels, gt_visible: (S, N) ground-truth classes and whether each box is in view.
        ignored: (S, K, T) detections that count neither as true nor as false positives at a
            threshold (COCO's ignored detections: those matching an ignored ground-truth region;
            see :class:`~orbitscope.tasks.Detection`'s ``ground_truth="key"``); None: none.

    Returns:
        NaN, NaN when no ground-truth box is in view anywhere.
    """
    classes = np.unique(gt_labels[gt_visible.astype(bool) & (gt_labels >= 0)])
    if classes.size == 0:
        return float("nan"), float("nan")
    flat_s, flat_l = scores.reshape(-1), labels.reshape(-1)
    flat_m = matched.reshape(-1, matched.shape[-1])
    flat_i = None if ignored is None else ignored.reshape(-1, ignored.shape[-1]).astype(np.float64)
    per_class = np.zeros((classes.size, flat_m.shape[-1]))
    for ci, c in enumerate(classes):
        n_gt = int(np.sum((gt_labels == c) & gt_visible.astype(bool)))
        keep = flat_l == c
        order = np.argsort(-flat_s[keep], kind="mergesort")
        tp = flat_m[keep][order].astype(np.float64)
        if tp.shape[0] == 0:
            continue  # no detections: AP 0
        fp = 1 - tp if flat_i is None else (1 - tp) * (1 - flat_i[keep][order])
        ctp, cfp = np.cumsum(tp, 0), np.cumsum(fp, 0)  # an ignored detection adds to neither
        recall = ctp / n_gt
        precision = ctp / np.maximum(ctp + cfp, np.finfo(np.float64).eps)
        precision = np.maximum.accumulate(precision[::-1], axis=0)[::-1]  # monotone from the right
        for ti in range(tp.shape[1]):
            idx = np.searchsorted(recall[:, ti], RECALL_LEVELS, side="left")
            q = np.where(idx < len(recall), precision[np.minimum(idx, len(recall) - 1), ti], 0.0)
            per_class[ci, ti] = q.mean()
    return float(per_class[:, 0].mean()), float(per_class.mean())


def nero_box_iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU (..., n, m) of xyxy boxes a (..., n, 4) and b (..., m, 4) with NERO's +1-pixel
    sides (py-faster-rcnn's convention): every width and height, the intersection's included, is
    x1 − x0 + 1, and boxes that overlap by less than that share no area. :func:`orbitscope.kinds.box_iou`
    is the edge convention without +1 that COCO's metrics use."""
    lo = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    hi = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (hi - lo + 1).clamp_min(0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2] + 1).clamp_min(0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2] + 1).clamp_min(0).prod(-1)
    union = area_a[..., :, None] + area_b[..., None, :] - inter
    return torch.where(union > 0, inter / union, torch.zeros_like(inter))


def nero_counts(iou: Tensor, same_label: Tensor, kept: Tensor, gt_valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """NERO's per-row counts (see the module docstring), vectorised over rows.

    Args:
        iou: (R, K, N) IoU (NERO's: :func:`nero_box_iou`) of each row's K predictions with its N
            ground-truth boxes.
        same_label: (R, K, N) whether prediction and ground truth have the same class.
        kept: (R, K) the predictions that count (those that exist and pass the score threshold).
        gt_valid: (R, N) the ground-truth boxes that count.

    Returns:
        (true positives, predictions, ground-truth boxes), each (R,) float: a kept prediction is
        a true positive when its IoU with some counted ground-truth box of its class is > 0.5
        (no matching: several predictions may hit the same box).
    """
    hit = same_label & gt_valid[:, None, :] & (iou > NERO_IOU_THRESHOLD)
    tp = (kept & hit.any(-1)).sum(1) if iou.shape[-1] else torch.zeros(kept.shape[0], device=kept.device)
    return tp.float(), kept.sum(1).float(), gt_valid.sum(1).float()


def nero_rates(tp: Tensor, n_pred: Tensor, n_gt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """NERO's precision, recall and F1 from :func:`nero_counts`.

    Returns:
        precision = TP / predictions (NaN without predictions), recall = min(1, TP / ground
        truth) (NaN without ground truth), F1 = 2PR / (P + R) with P taken as 0 when there is no
        prediction, 0 when P + R = 0, NaN without ground truth.
    """
    nan = torch.full_like(tp, torch.nan)
    precision = torch.where(n_pred > 0, tp / n_pred.clamp_min(1), nan)
    recall = torch.where(n_gt > 0, (tp / n_gt.clamp_min(1)).clamp_max(1), nan)
    p = torch.nan_to_num(precision, nan=0.0)
    f1 = torch.where(p + recall > 0, 2 * p * recall / (p + recall).clamp_min(1e-12), torch.zeros_like(tp))
    return precision, recall, torch.where(n_gt > 0, f1, nan)


def nero_average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """NERO's "AP": py-faster-rcnn's ``voc_ap`` (continuous, not the 2007 11-point version) of the
    (recall, precision) pairs **in the order given** (NERO: one pair per image, dataset order).

    The recalls are framed by 0 and 1 and the precisions by 0 and 0; the precisions are made
    non-increasing from the right (each the largest at or after it); then AP = Σ (r[i+1] − r[i]) ·
    p[i+1] over the places where the recall changes. The pairs are not sorted: with recalls out
    of order some steps are negative, as in NERO.

    Args:
        recall: (n,) recalls in [0, 1], finite.
        precision: (n,) precisions in [0, 1], finite.

    Returns:
        The area (NaN for n = 0).
    """
    r = np.asarray(recall, dtype=np.float64).reshape(-1)
    p = np.asarray(precision, dtype=np.float64).reshape(-1)
    if r.shape != p.shape:
        raise ValueError(f"recall and precision must have the same length, got {r.size} and {p.size}")
    if r.size == 0:
        return float("nan")
    if not (np.isfinite(r).all() and np.isfinite(p).all()):
        raise ValueError("nero_average_precision needs finite recalls and precisions: leave out the pairs whose "
                         "recall is undefined (no ground truth) and give a precision to those without predictions")
    mr = np.concatenate([[0.0], r, [1.0]])
    mp = np.concatenate([[0.0], p, [0.0]])
    mp = np.maximum.accumulate(mp[::-1])[::-1]
    step = np.flatnonzero(mr[1:] != mr[:-1])
    return float(np.sum((mr[step + 1] - mr[step]) * mp[step + 1]))
