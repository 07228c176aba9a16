"""Detection metrics: COCO-style matching per row, and AP / mAP from per-sample states.

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
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["IOU_THRESHOLDS", "RECALL_LEVELS", "match_detections", "average_precision"]

#: COCO's IoU thresholds 0.50:0.05:0.95.
IOU_THRESHOLDS = np.round(np.linspace(0.5, 0.95, 10), 2)
#: COCO's 101 recall levels.
RECALL_LEVELS = np.linspace(0.0, 1.0, 101)


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
