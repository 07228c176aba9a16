"""Detection's dataset-level metrics on many bootstrap resamples at once.

A bootstrap resample of the samples is given by draw counts ``w`` (how often each sample is
drawn). Each metric is computed as if every sample's rows were repeated ``w`` times, without
repeating them:

* AP (:func:`average_precision_resampled`): the detections of one class are sorted by score once
  (stably, as :func:`~orbitscope.tasks.detection_metrics.average_precision` sorts them); in
  resample b a detection of sample i adds ``w[b, i]`` true or false positives at its place in that
  order and sample i adds ``w[b, i]`` times its ground-truth boxes. Copies of one detection are
  adjacent in the repeated order, and the points that skipping them leaves out of the
  precision–recall curve never raise COCO's precision envelope (a true positive raises precision,
  a false positive keeps recall), so the values equal those of the repeated data (tested against
  the plain loop). Classes without ground truth in a resample are left out of its mean.
* means (:func:`weighted_nanmean`): weighted by the counts, NaN values left out.
"""

from __future__ import annotations

import numpy as np

from .detection_metrics import IOU_THRESHOLDS, RECALL_LEVELS

__all__ = ["average_precision_resampled", "weighted_nanmean"]


def weighted_nanmean(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(S, E) values, (B, S) counts -> (B, E): the mean over the samples of each resample,
    NaN values left out (NaN where none is left)."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    w = np.asarray(counts, dtype=np.float64)
    total = w @ np.where(finite, v, 0.0)
    n = w @ finite.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1e-300), np.nan)


def _ap_at_threshold(wd: np.ndarray, counted: np.ndarray, tp: np.ndarray, ignored: np.ndarray | None,
                     n_gt: np.ndarray) -> np.ndarray:
    """(B,) AP of one class at one IoU threshold from the detections in score order: weights
    ``wd`` (B, D), their running count ``counted`` (B, D), true positives ``tp`` (D,), ignored
    ones (D,) or None; ``n_gt`` (B, 1) ground-truth boxes (NaN: none in that resample).

    Only the true positives matter: COCO's 101-point AP takes the precision envelope at the first
    position reaching each recall level, recall only grows at a true positive, and the envelope
    there (the largest precision at or after it) is attained at a true positive, since a false or
    ignored detection never raises precision. Position p gains the levels j with
    n_{p-1} <= j < n_p, n_p = how many levels are <= its recall (the float comparisons of
    ``searchsorted(recall, level, "left")``); unreached levels add 0."""
    hits = np.flatnonzero(tp)
    if hits.size == 0:
        return np.zeros(wd.shape[0])
    ctp = np.cumsum(wd[:, hits], axis=1)  # (B, H) true positives up to each hit
    seen = counted[:, hits]
    if ignored is not None and ignored.any():
        skipped = np.flatnonzero(ignored)
        before = np.searchsorted(skipped, hits, side="right")  # ignored detections up to each hit
        cum = np.concatenate([np.zeros((wd.shape[0], 1)), np.cumsum(wd[:, skipped], axis=1)], axis=1)
        seen = seen - cum[:, before]
    precision = ctp / np.maximum(seen, np.finfo(np.float64).eps)
    envelope = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
    with np.errstate(invalid="ignore"):
        recall = ctp / n_gt
    reached = np.searchsorted(RECALL_LEVELS, np.where(np.isfinite(recall), recall, 0.0).ravel(), side="right")
    gained = np.diff(reached.reshape(recall.shape), axis=1, prepend=0)
    return (envelope * gained).sum(1) / RECALL_LEVELS.size


def average_precision_resampled(scores: np.ndarray, labels: np.ndarray, matched: np.ndarray, gt_labels: np.ndarray,
                                gt_visible: np.ndarray, counts: np.ndarray, ignored: np.ndarray | None = None,
                                thresholds: slice = slice(None)) -> np.ndarray:
    """COCO AP of one orbit element on each resample: (B,) means over classes and the chosen
    thresholds.

    Args:
        scores, labels: (S, K) detections per sample (label −1 = none), in decreasing score order.
        matched: (S, K, T) true positive at each of COCO's IoU thresholds.
        gt_labels, gt_visible: (S, N) ground-truth classes and whether each box is in view.
        counts: (B, S) draw counts of the resamples.
        ignored: (S, K, T) detections that count neither as true nor as false positives; None: none.
        thresholds: which thresholds to average: ``slice(0, 1)`` gives AP@0.5, all give mAP.

    Returns:
        (B,) float64; NaN for a resample without any ground truth in view.
    """
    w = np.asarray(counts, dtype=np.float64)
    b, s = w.shape
    k = scores.shape[1]
    visible = gt_visible.astype(bool) & (gt_labels >= 0)
    classes = np.unique(gt_labels[visible])
    t_idx = np.arange(len(IOU_THRESHOLDS))[thresholds]
    per_class = np.full((classes.size, b), np.nan)
    flat_s, flat_l = scores.reshape(-1), labels.reshape(-1)
    owner = np.repeat(np.arange(s), k)
    flat_m = matched.reshape(-1, matched.shape[-1])[:, t_idx].astype(np.float64)
    flat_i = None if ignored is None else ignored.reshape(-1, ignored.shape[-1])[:, t_idx].astype(np.float64)
    levels = RECALL_LEVELS
    for ci, c in enumerate(classes):
        n_gt = w @ np.sum((gt_labels == c) & visible, axis=1).astype(np.float64)  # (B,)
        present = n_gt > 0
        keep = np.flatnonzero(flat_l == c)
        if keep.size == 0:
            per_class[ci] = np.where(present, 0.0, np.nan)
            continue
        order = keep[np.argsort(-flat_s[keep], kind="mergesort")]
        wd = w[:, owner[order]]  # (B, D): each detection's weight in each resample
        counted = np.cumsum(wd, axis=1)  # detections so far, ignored ones included
        gt = np.where(present, n_gt, np.nan)[:, None]
        ap = np.zeros(b)
        for j in range(flat_m.shape[1]):
            ap += _ap_at_threshold(wd, counted, flat_m[order, j] > 0,
                                   None if flat_i is None else flat_i[order, j] > 0, gt)
        per_class[ci] = np.where(present, ap / flat_m.shape[1], np.nan)
    if classes.size == 0:
        return np.full(b, np.nan)
    with np.errstate(invalid="ignore"):
        counted = np.sum(~np.isnan(per_class), axis=0)
        return np.where(counted > 0, np.nansum(per_class, axis=0) / np.maximum(counted, 1), np.nan)
