"""Object detection: does the box move with the object? (NERO's detection case study.)

Model outputs: torchvision-style ``list[dict(boxes (n, 4) xyxy, scores (n,), labels (n,))]``, one
dict per image, or a tensor (B, n, 6) of rows ``(x0, y0, x1, y1, score, label)`` (padding rows
with score −inf or label −1). Targets: boxes + labels per image (ragged), moved by each element
and clipped to the view by the ``boxes`` kind; a box with no area left in view is not a target.

Per sample and orbit element (see :mod:`orbitscope.tasks.detection_metrics` for the matching and
IoU conventions, those of pycocotools, and NERO's):

* ``confidence``: the top-scoring detection's score (0 when there is none);
* ``iou``: its IoU with the ground-truth box in view that it overlaps most (any class; NaN when no
  ground truth is in view, 0 when there is no detection);
* ``conf_iou``: ``confidence × iou`` per sample — NERO's default individual metric. Its mean over
  samples is *not* NERO's aggregate, which was mean(confidence) · mean(IoU): that one is the
  dataset-level ``nero_conf_iou`` of :meth:`Detection.compute`;
* ``precision``, ``recall``, ``f1`` with COCO's one-to-one matching at IoU ≥ 0.5 with the right
  class, over the detections scoring at least ``score_threshold`` (default 0.5; recall = true
  positives / ground-truth boxes in view — NERO's consensus code divided by 4 there, a slip;
  F1 = 2·TP / (detections + ground truth));
* ``nero_precision``, ``nero_recall``, ``nero_f1``: NERO's own counting
  (:func:`~orbitscope.tasks.detection_metrics.nero_counts`), over **every** prediction of the row
  (not only the top ``max_detections``) scoring at least ``nero_score_threshold`` (default 0.05:
  NERO counted all that its Faster R-CNN returned, which has torchvision's 0.05 floor; 0 counts
  every prediction). Every right-class prediction with IoU > 0.5 (NERO's +1-pixel sides) with a
  counted ground-truth box is a true positive, duplicates included (no one-to-one matching);
  precision = TP / predictions (NaN without predictions), recall = min(1, TP / ground-truth
  boxes) (NaN without ground truth: NERO had one key object per crop, so TP / 1), F1 = 2PR / (P + R)
  (0 when TP = 0, NaN without ground truth). With ``ground_truth="key"`` the key object alone is
  ground truth and predictions of the other objects are false positives, as in NERO (the
  COCO-style counting ignores them instead: see below); with ``"all"`` every box in view is, and
  recall may reach 1 with duplicates of one of several objects (NERO's rule, generalised);
* per-sample states for dataset-level AP: the top ``max_detections`` detections' scores, classes
  and true-positive flags at the ten COCO IoU thresholds, and which ground-truth boxes are in view.

Dataset level (:func:`orbitscope.results.dataset_metrics`): ``ap50`` (AP@0.5) and ``map`` (COCO
mAP@[.5:.95]) per orbit element, ``nero_conf_iou``, and ``nero_ap``, NERO's "AP": py-faster-rcnn's
``voc_ap`` of the samples' (``nero_recall``, ``nero_precision``) pairs **in sample order**
(:func:`~orbitscope.tasks.detection_metrics.nero_average_precision`; samples without ground
truth left out, a sample without predictions as (0, 0)). It is not a precision–recall curve:
it changes when the samples are reordered, duplicates raise it, and it ignores the scores, so it
is a different number from COCO's AP@0.5 (which ranks the detections of all samples by score).

Key-object ground truth (``ground_truth="key"``, NERO's protocol for key-object contexts such as
:func:`orbitscope.data.key_object_contexts`, whose first box is the key object): only box 0 is
ground truth: ``iou`` is the top detection's IoU with the key object, recall counts it alone, and
AP's classes and ground-truth counts are the key objects'. The other boxes in view are *ignored
regions*, as COCO treats ignored ground truth: a detection that is not the key object's match
but has IoU ≥ the threshold with another box of its class is neither a true nor a false positive
(left out of AP, per threshold, and out of precision's count at 0.5), while a detection matching
nothing is a false positive. NERO's code counted every other detection as a false positive, so a
detector was penalised for finding the other objects of the view; we ignore them instead. The
consensus metrics of such a run read the consensus objects the same way (the best fused box as
the key object, NERO's consensus of the top boxes; the others ignored). With the default
``ground_truth="all"`` every box in view is ground truth.

For the views, ``top_boxes`` keeps the three top-scoring boxes of every row (in the frame the
model saw: the view, for a window over context).

Consensus (``evaluate(..., consensus=True)``, label-free, NERO's): every element's top
``max_detections`` boxes are mapped back to the canonical frame by the inverse element and fused
by :func:`orbitscope.kinds.fuse_boxes` (greedy clustering at IoU > 0.5 across elements, mean
corners, majority class, score = mean score over the orbit with 0 where an element missed it).
The best fused box, and every other one scoring at least ``consensus_score``, are the sample's
consensus objects (at most ``max_objects``), so a sample on which the model detects anything has
a consensus, as in NERO (whose consensus was the mean of the top boxes). Each element's
consensus target is them moved by the element and clipped to the view, like the ground truth.
Every labelled metric above is then also scored against it (``consensus_iou``,
``consensus_conf_iou``, ``consensus_precision``, ``consensus_nero_precision``, …, and at dataset
level ``consensus_ap50``, ``consensus_map`` and ``consensus_nero_ap``), and the consensus objects are stored per sample (``consensus_boxes``,
``consensus_labels``, ``consensus_scores``, canonical frame). A sample with no detection at any
element has no consensus object: its consensus metrics are NaN (no target), as for an image with
no object in view. NERO's consensus was the mean over shifts of (top box − shift), **including
shifts without a prediction**, where a zero box entered the mean and pulled the consensus box
towards the origin; clustering leaves an element without a matching box out of the corners (it
only lowers the fused score).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError, ModelError
from ..group.elements import Transforms
from ..kinds.boxes import Boxes, box_iou, fuse_boxes, pad_boxes_dim, read_detections
from .base import Task, register_task
from .detection_metrics import (IOU_THRESHOLDS, average_precision, match_detections, nero_average_precision,
                                nero_box_iou, nero_counts, nero_rates)
from .detection_resampling import average_precision_resampled, weighted_nanmean
from .variables import Variable

__all__ = ["Detection"]

_METRICS = (
    Variable("confidence", "float32", description="score of the top detection (0 if none)", kind="probability",
             needs_labels=False, label="top-box confidence"),
    Variable("iou", "float32", description="IoU of the top detection with the ground truth it overlaps most",
             kind="probability", label="top-box IoU"),
    Variable("conf_iou", "float32", description="confidence × IoU of the top detection (NERO's default)",
             kind="probability", label="confidence × IoU"),
    Variable("precision", "float32", description="true positives / detections above the score threshold, IoU ≥ 0.5",
             kind="probability", label="precision@0.5"),
    Variable("recall", "float32", description="true positives / ground-truth boxes in view, IoU ≥ 0.5",
             kind="probability", label="recall@0.5"),
    Variable("f1", "float32", description="2·TP / (detections + ground truth), IoU ≥ 0.5", kind="probability",
             label="F1@0.5"),
    Variable("nero_precision", "float32", description="NERO's precision: predictions scoring at least "
             "nero_score_threshold that hit a ground-truth box of their class (IoU > 0.5, +1-pixel sides, no "
             "one-to-one matching) / those predictions", kind="probability", label="NERO precision"),
    Variable("nero_recall", "float32", description="NERO's recall: min(1, NERO's true positives / ground-truth "
             "boxes)", kind="probability", label="NERO recall"),
    Variable("nero_f1", "float32", description="NERO's F1: 2PR / (P + R) of nero_precision and nero_recall",
             kind="probability", label="NERO F1"),
)
_DATASET = (
    Variable("ap50", "float64", description="AP at IoU 0.5 (COCO's 101-point interpolation)", kind="probability",
             label="AP@0.5"),
    Variable("map", "float64", description="COCO mAP@[.5:.95]", kind="probability", label="mAP@[.5:.95]"),
    Variable("nero_conf_iou", "float64", description="NERO's aggregate: mean(confidence) · mean(IoU)",
             kind="probability", label="mean confidence × mean IoU"),
    Variable("nero_ap", "float64", description="NERO's 'AP': py-faster-rcnn's voc_ap of the per-sample (NERO recall, "
             "NERO precision) pairs in sample order; not a precision-recall curve, not COCO's AP",
             kind="probability", label="NERO AP"),
)
_CONSENSUS_DATASET = (
    Variable("consensus_ap50", "float64", description="AP at IoU 0.5 against the consensus objects",
             kind="probability", needs_labels=False, label="AP@0.5 vs consensus"),
    Variable("consensus_map", "float64", description="COCO mAP@[.5:.95] against the consensus objects",
             kind="probability", needs_labels=False, label="mAP@[.5:.95] vs consensus"),
    Variable("consensus_nero_ap", "float64", description="NERO's 'AP' (see nero_ap) against the consensus objects",
             kind="probability", needs_labels=False, label="NERO AP vs consensus"),
)
#: part of every detection run's identity: bumped when a metric's or the consensus's definition
#: changes, so that stored runs made under the old one are not reused
DEFINITIONS_VERSION = 3
#: boxes kept per row for the views (``top_boxes``)
TOP_BOXES = 3


@register_task
@dataclass(frozen=True)
class Detection(Task):
    """Object detection (see the module docstring).

    Args:
        score_threshold: detections scoring at least this count for precision, recall and F1
            (COCO-style counting: an operating point; AP uses every detection). On the detection
            demo's data 0.5 gives recall 0.14 and 0.52 for the two detectors and 0.05
            (torchvision's ``box_score_thresh``) precision 0.05 and 0.10, as they always return 10
            boxes (``benchmarks/results/detection_counting.txt``).
        max_detections: detections kept per row for AP (COCO keeps 100 per image and class).
        max_objects: most ground-truth boxes per image (the width of the in-view state).
        input_kind: ``"window"`` (a field of view moving over a larger context image, NERO's
            setting; evaluate with ``view_size=(h, w)``) or ``"image"`` (the whole image moves).
        consensus_score: besides the best fused box, fused boxes scoring at least this are
            consensus objects (see the module docstring; the fused score is the mean score over
            the orbit, 0 where missed).
        ground_truth: ``"all"`` (every box in view) or ``"key"`` (box 0 of each sample, the other
            boxes ignored regions: see the module docstring).
        nero_score_threshold: predictions scoring at least this count for NERO's precision,
            recall and F1 (``nero_*``). NERO counted every prediction its Faster R-CNN returned,
            i.e. those above torchvision's 0.05 floor: the default; 0 counts every prediction.
    """

    score_threshold: float = 0.5
    max_detections: int = 10
    max_objects: int = 16
    input_kind: str = "window"
    consensus_score: float = 0.25
    ground_truth: str = "all"
    nero_score_threshold: float = 0.05
    kind: str = field(default="detection", init=False)
    #: the detections and the top boxes of a row are ranked by score: near-ties swap
    unordered_dims = ("detection", "top")
    target_kind = "boxes"
    output_kind = "boxes"
    primary = "conf_iou"
    supports_consensus = True
    compute_reads = ("target_labels", "gt_visible", "det_scores", "det_labels", "det_matched", "det_ignored",
                     "confidence", "iou", "consensus_det_ignored", "nero_precision", "nero_recall",
                     "consensus_nero_precision", "consensus_nero_recall",
                     "consensus_labels", "consensus_gt_visible", "consensus_det_matched")
    consensus_stored = {"consensus_boxes": ("consensus_object", "coord"), "consensus_labels": ("consensus_object",),
                        "consensus_scores": ("consensus_object",)}

    def __post_init__(self) -> None:
        for name in ("score_threshold", "nero_score_threshold"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if int(self.max_detections) < 1 or int(self.max_objects) < 1:
            raise ValueError("max_detections and max_objects must be at least 1")
        if self.input_kind not in ("window", "image"):
            raise ValueError(f"input_kind must be 'window' or 'image', got {self.input_kind!r}")
        if not 0.0 < float(self.consensus_score) <= 1.0:
            raise ValueError(f"consensus_score must be in (0, 1], got {self.consensus_score!r}")
        if self.ground_truth not in ("all", "key"):
            raise ValueError(f"ground_truth must be 'all' (every box in view) or 'key' (box 0, the key object; "
                             f"the others ignored), got {self.ground_truth!r}")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "Detection":
        return cls(score_threshold=float(spec.get("score_threshold", 0.5)),
                   max_detections=int(spec.get("max_detections", 10)), max_objects=int(spec.get("max_objects", 16)),
                   input_kind=str(spec.get("input_kind", "window")),
                   consensus_score=float(spec.get("consensus_score", 0.25)),
                   ground_truth=str(spec.get("ground_truth", "all")),
                   nero_score_threshold=float(spec.get("nero_score_threshold", 0.05)))

    def spec(self) -> dict[str, Any]:
        out = {"kind": self.kind, "score_threshold": float(self.score_threshold),
               "max_detections": int(self.max_detections), "max_objects": int(self.max_objects),
               "input_kind": self.input_kind, "consensus_score": float(self.consensus_score),
               "nero_score_threshold": float(self.nero_score_threshold), "version": DEFINITIONS_VERSION}
        if self.ground_truth != "all":  # absent by default: earlier runs keep their identity
            out["ground_truth"] = self.ground_truth
        return out

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        k, m = ("detection",), ("gt",)
        return [*_METRICS,
                Variable("det_scores", "float32", k, "scores of the top detections (0 = none)", kind="state",
                         needs_labels=False),
                Variable("det_labels", "int16", k, "classes of the top detections (-1 = none)", kind="state",
                         needs_labels=False),
                Variable("det_matched", "uint16", k, "true positive at IoU 0.50, 0.55, …, 0.95 (bit i)", kind="state"),
                Variable("gt_visible", "uint8", m, "ground-truth box in view (order of target_labels)", kind="state"),
                *([Variable("det_ignored", "uint16", k, "ignored (matches another object than the key one) at IoU "
                            "0.50, 0.55, …, 0.95 (bit i)", kind="state")] if self.ground_truth == "key" else []),
                Variable("top_boxes", "float32", ("top", "coord"), f"the {TOP_BOXES} top-scoring boxes, xyxy pixels "
                         "of the model's frame (NaN = none)", kind="state", needs_labels=False)]

    def dataset_variables(self) -> list[Variable]:
        return [*_DATASET, *_CONSENSUS_DATASET]

    # -- consensus -----------------------------------------------------------------------------
    def consensus_variables(self) -> list[Variable]:
        """The labelled metrics against the consensus, and the states for consensus AP."""
        states = [v.renamed(self.consensus_name(v.name), needs_labels=False,
                            description=f"{v.description} (against the consensus objects)")
                  for v in self.variables(0) if v.name in ("det_matched", "gt_visible", "det_ignored")]
        return [*super().consensus_variables(), *states]

    def canonicalize(self, outputs: Boxes, g: Transforms, **context: Any) -> Boxes:
        """The top ``max_detections`` boxes of every row mapped back by its inverse element."""
        return super().canonicalize(outputs[:, : int(self.max_detections)], g, **context)

    def consensus(self, canonical: Boxes, n_elements: int, n_samples: int, weights: np.ndarray) -> Boxes:
        """The best fused box, and the others scoring at least ``consensus_score`` (at most
        ``max_objects`` in all)."""
        fused = fuse_boxes(canonical, n_elements, n_samples, weights, max_boxes=2 * int(self.max_objects))
        fused = fused[:, : int(self.max_objects)]
        top = torch.zeros_like(fused.valid)
        top[:, :1] = True  # the best fused box always (NERO's consensus of the top boxes)
        keep = fused.valid & ((fused.scores >= float(self.consensus_score)) | top)
        return Boxes(fused.xyxy, fused.labels, keep, fused.scores)

    def store_consensus(self, target: Boxes) -> dict[str, np.ndarray]:
        """The consensus objects per sample (canonical frame; padding NaN / -1)."""
        width = int(target.valid.sum(1).max()) if len(target) and target.valid.numel() else 0
        keep = target.valid[:, :width].cpu().numpy()  # kept boxes come first (sorted by score)
        boxes = np.where(keep[..., None], target.xyxy[:, :width].cpu().numpy(), np.nan).astype(np.float32)
        return {"consensus_boxes": boxes,
                "consensus_labels": np.where(keep, target.labels[:, :width].cpu().numpy(), -1).astype(np.int64),
                "consensus_scores": np.where(keep, target.scores[:, :width].cpu().numpy(), np.nan).astype(np.float32)}

    # -- outputs -------------------------------------------------------------------------------
    def read_outputs(self, raw: Any) -> Boxes:
        """torchvision-style ``list[dict]`` or a (B, n, 6) tensor -> padded :class:`Boxes` with
        scores, each row sorted by decreasing score."""
        if isinstance(raw, Boxes):
            return raw
        if isinstance(raw, Tensor):
            if raw.ndim != 3 or raw.shape[-1] != 6:
                raise ModelError("a detector returning a tensor must return (batch, n, 6) rows (x0, y0, x1, y1, score, "
                                 f"label), got shape {tuple(raw.shape)}; or return torchvision-style list[dict]")
            keep = (raw[..., 4] != -torch.inf) & (raw[..., 5] >= 0)  # padding; NaN is refused (read_detections)
            return read_detections([{"boxes": r[m, :4], "scores": r[m, 4], "labels": r[m, 5].long()}
                                    for r, m in zip(raw, keep)])
        if isinstance(raw, (list, tuple)) and all(isinstance(d, dict) for d in raw):
            return read_detections(list(raw))
        raise ModelError(f"a detector must return list[dict(boxes, scores, labels)] (torchvision style) or a (batch, n, "
                         f"6) tensor, got {type(raw).__name__}")

    # -- scoring -------------------------------------------------------------------------------
    def score(self, outputs: Boxes, targets: Boxes, g: Transforms | None = None) -> dict[str, Tensor]:
        """outputs: predictions (R rows); targets: the moved, clipped ground truth (R rows)."""
        if not isinstance(outputs, Boxes) or outputs.scores is None:
            raise ModelError("detection outputs must be boxes with scores (see Detection.read_outputs)")
        r = len(targets)
        if len(outputs) != r:
            raise DataError(f"{len(outputs)} detection outputs but {r} targets")
        n = targets.xyxy.shape[1]
        if n > self.max_objects:
            raise DataError(f"an image has {n} ground-truth boxes, more than max_objects={self.max_objects}: use "
                            f"Detection(max_objects={n})")
        device = targets.xyxy.device
        k = int(self.max_detections)
        boxes = pad_boxes_dim(outputs.xyxy.to(device).float(), k, 0.0)
        valid = outputs.valid.to(device)
        scores = pad_boxes_dim(torch.where(valid, outputs.scores.to(device).float(), -torch.inf), k, -torch.inf)
        labels = pad_boxes_dim(torch.where(valid, outputs.labels.to(device), -1), k, -1)
        det = torch.isfinite(scores) & (labels >= 0)
        gt_valid = targets.valid
        iou = box_iou(boxes, targets.xyxy.float())  # (R, K, N)
        same = labels[:, :, None] == targets.labels[:, None, :]
        ignored = None
        if self.ground_truth == "key":  # box 0 is the ground truth, the others ignored regions
            others = gt_valid.clone()
            others[:, :1] = False
            gt_valid = gt_valid.clone()
            gt_valid[:, 1:] = False
            near = torch.where(same & others[:, None, :], iou, torch.full_like(iou, -1.0)).amax(-1) if n else \
                torch.full(det.shape, -1.0, device=device)
        matched = match_detections(iou, same, det, gt_valid)  # (R, K, T)
        if self.ground_truth == "key":
            t = torch.as_tensor(np.minimum(IOU_THRESHOLDS, 1 - 1e-10), dtype=iou.dtype, device=device)
            ignored = det[..., None] & ~matched & (near[..., None] >= t)  # (R, K, T)

        any_gt = gt_valid.any(1)
        top = det[:, 0]
        confidence = torch.where(top, scores[:, 0], torch.zeros_like(scores[:, 0]))
        best = torch.where(gt_valid, iou[:, 0], torch.full_like(iou[:, 0], -1.0)).amax(1) if n else torch.zeros(r, device=device)
        top_iou = torch.where(any_gt, torch.where(top, best.clamp_min(0), torch.zeros_like(best)), torch.nan)
        shown = det & (scores >= float(self.score_threshold))
        if ignored is not None:
            shown = shown & ~ignored[:, :, 0]
        tp = (matched[:, :, 0] & shown).sum(1).float()
        n_pred, n_gt = shown.sum(1).float(), gt_valid.sum(1).float()
        nan = torch.full_like(tp, torch.nan)
        nero_p, nero_r, nero_f1 = self._nero_rates(outputs, targets, gt_valid)
        powers = 2 ** torch.arange(len(IOU_THRESHOLDS), device=device)
        bits = (matched.to(torch.int32) * powers).sum(-1)
        extra = {} if ignored is None else {"det_ignored": (ignored.to(torch.int32) * powers).sum(-1).to(torch.int32)}
        return {
            "confidence": confidence,
            "iou": top_iou,
            "conf_iou": confidence * top_iou,
            "precision": torch.where(n_pred > 0, tp / n_pred.clamp_min(1), nan),
            "recall": torch.where(n_gt > 0, tp / n_gt.clamp_min(1), nan),
            "f1": torch.where(n_pred + n_gt > 0, 2 * tp / (n_pred + n_gt).clamp_min(1), nan),
            "nero_precision": nero_p,
            "nero_recall": nero_r,
            "nero_f1": nero_f1,
            "det_scores": torch.where(det, scores, torch.zeros_like(scores)),
            "det_labels": labels.to(torch.int16),
            "det_matched": bits.to(torch.int32),
            "gt_visible": pad_boxes_dim(gt_valid.to(torch.uint8), int(self.max_objects), 0),
            "top_boxes": pad_boxes_dim(torch.where(det[..., None], boxes, torch.nan), TOP_BOXES, torch.nan),
            **extra,
        }

    def _nero_rates(self, outputs: Boxes, targets: Boxes, gt_valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """NERO's precision, recall and F1 over **all** of a row's predictions (not only the top
        ``max_detections``) scoring at least ``nero_score_threshold``, against the counted ground
        truth ``gt_valid`` (the key object alone for ``ground_truth="key"``: NERO counted
        predictions of the other objects as false positives, so they are not ignored here)."""
        device = targets.xyxy.device
        kept = outputs.valid.to(device) & (outputs.scores.to(device).float() >= float(self.nero_score_threshold))
        iou = nero_box_iou(outputs.xyxy.to(device).float(), targets.xyxy.float())
        same = outputs.labels.to(device)[:, :, None] == targets.labels[:, None, :]
        return nero_rates(*nero_counts(iou, same, kept, gt_valid))

    # -- dataset level -------------------------------------------------------------------------
    def compute(self, states: Mapping[str, np.ndarray], orbit_axes: int) -> dict[str, np.ndarray]:
        """``ap50``, ``map``, ``nero_conf_iou`` and ``nero_ap`` per orbit element from the
        per-sample states (and ``consensus_ap50`` / ``consensus_map`` / ``consensus_nero_ap`` for
        a consensus run).

        ``nero_ap`` is :func:`~orbitscope.tasks.detection_metrics.nero_average_precision` of the
        samples' (``nero_recall``, ``nero_precision``) pairs in sample order, per element. Samples
        whose recall is undefined (no ground truth in view) are left out; a sample without a
        prediction (precision undefined, recall 0) enters as (0, 0). NaN where no sample is left."""
        out: dict[str, np.ndarray] = {}
        for prefix in ("", "consensus_"):
            if f"{prefix}nero_recall" in states and f"{prefix}nero_precision" in states:
                out[f"{prefix}nero_ap"] = _nero_ap_per_element(np.asarray(states[f"{prefix}nero_recall"]),
                                                               np.asarray(states[f"{prefix}nero_precision"]), orbit_axes)
        need = ("det_scores", "det_labels", "det_matched")
        if any(name not in states for name in need):
            return out
        scores = np.asarray(states["det_scores"])
        s = scores.shape[0]
        orbit = scores.shape[1:1 + orbit_axes]
        e = int(np.prod(orbit))
        det = (scores.reshape(s, e, -1), np.asarray(states["det_labels"]).reshape(s, e, -1).astype(np.int64))
        for prefix, labels_name in (("", "target_labels"), ("consensus_", "consensus_labels")):
            names = (f"{prefix}det_matched", f"{prefix}gt_visible", labels_name)
            if all(name in states for name in names):
                ignored = states.get(f"{prefix}det_ignored")
                ap50, m_ap = _ap_per_element(*det, *(np.asarray(states[name]) for name in names), s, e,
                                             None if ignored is None else np.asarray(ignored))
                out[f"{prefix}ap50"], out[f"{prefix}map"] = ap50.reshape(orbit), m_ap.reshape(orbit)
        if "confidence" in states and "iou" in states:
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # elements with no object in view: NaN
                conf = np.asarray(states["confidence"], dtype=np.float64).reshape(s, e)
                iou = np.asarray(states["iou"], dtype=np.float64).reshape(s, e)
                out["nero_conf_iou"] = (np.nanmean(conf, 0) * np.nanmean(iou, 0)).reshape(orbit)
        return out

    def compute_resampled(self, states: Mapping[str, np.ndarray], orbit_axes: int, counts: np.ndarray,
                          metric: str) -> np.ndarray:
        """One dataset-level ``metric`` on every bootstrap resample (``counts`` (B, samples) draws),
        (B, *orbit shape), equal to :meth:`compute` on the repeated samples: AP and mAP weighted
        by the counts (:func:`~orbitscope.tasks.detection_resampling.average_precision_resampled`),
        ``nero_conf_iou`` from weighted means, ``nero_ap`` from the resample's samples in sample
        order. Only the states ``metric`` needs are read."""
        counts = np.asarray(counts)
        prefix = "consensus_" if metric.startswith("consensus_") else ""
        base = metric[len(prefix):]
        per_element = next((np.asarray(states[name]) for name in (f"{prefix}nero_recall", "confidence", "det_scores")
                            if name in states), None)
        if per_element is None:
            return super().compute_resampled(states, orbit_axes, counts, metric)
        s, orbit = per_element.shape[0], per_element.shape[1:1 + orbit_axes]
        e = int(np.prod(orbit))
        labels_name = "consensus_labels" if prefix else "target_labels"
        ap_states = ("det_scores", "det_labels", f"{prefix}det_matched", f"{prefix}gt_visible", labels_name)
        if base in ("ap50", "map") and all(name in states for name in ap_states):
            scores, labels, matched, visible, gt_labels, ignored = _ap_inputs(
                *(np.asarray(states[name]) for name in ap_states), s, e, states.get(f"{prefix}det_ignored"))
            which = slice(0, 1) if base == "ap50" else slice(None)
            per = [average_precision_resampled(scores[:, i], labels[:, i], matched[:, i], gt_labels, visible[:, i],
                                               counts, None if ignored is None else ignored[:, i], which)
                   for i in range(e)]
            return np.stack(per, 1).reshape(len(counts), *orbit)
        if metric == "nero_conf_iou" and "confidence" in states and "iou" in states:
            conf = weighted_nanmean(np.asarray(states["confidence"]).reshape(s, e), counts)
            iou = weighted_nanmean(np.asarray(states["iou"]).reshape(s, e), counts)
            return (conf * iou).reshape(len(counts), *orbit)
        if base == "nero_ap" and f"{prefix}nero_recall" in states and f"{prefix}nero_precision" in states:
            recall, precision = np.asarray(states[f"{prefix}nero_recall"]), np.asarray(states[f"{prefix}nero_precision"])
            out = []
            for row in counts:
                idx = np.repeat(np.arange(s), row)  # the resample's samples, in sample order
                out.append(_nero_ap_per_element(recall[idx], precision[idx], orbit_axes))
            return np.stack(out)
        return super().compute_resampled(states, orbit_axes, counts, metric)


def _nero_ap_per_element(recall: np.ndarray, precision: np.ndarray, orbit_axes: int) -> np.ndarray:
    """NERO's "AP" per orbit element from (samples, *orbit) recalls and precisions (see
    :meth:`Detection.compute`)."""
    orbit = recall.shape[1:1 + orbit_axes]
    r = recall.reshape(recall.shape[0], -1).astype(np.float64)
    p = np.nan_to_num(precision.reshape(precision.shape[0], -1).astype(np.float64), nan=0.0)
    out = np.full(r.shape[1], np.nan)
    for i in range(r.shape[1]):
        keep = ~np.isnan(r[:, i])
        if keep.any():
            out[i] = nero_average_precision(r[keep, i], p[keep, i])
    return out.reshape(orbit)


def _ap_inputs(scores: np.ndarray, labels: np.ndarray, matched_bits: np.ndarray, visible: np.ndarray,
               gt_labels: np.ndarray, s: int, e: int, ignored_bits: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The stored AP states as arrays per element: scores and labels (s, e, K), the true-positive
    and ignored flags (s, e, K, T) unpacked from their bits, which ground truth is in view (s, e, N)
    and its classes (s, N), N cut to the narrower of the two."""
    def unpack(b: np.ndarray) -> np.ndarray:
        return (np.asarray(b).reshape(s, e, -1).astype(np.int64)[..., None] >> np.arange(len(IOU_THRESHOLDS))) & 1

    gt_labels = gt_labels.reshape(s, -1)
    visible = visible.reshape(s, e, -1)
    n = min(gt_labels.shape[1], visible.shape[2])
    return (scores.reshape(s, e, -1), labels.reshape(s, e, -1).astype(np.int64), unpack(matched_bits),
            visible[:, :, :n], gt_labels[:, :n], None if ignored_bits is None else unpack(ignored_bits))


def _ap_per_element(scores: np.ndarray, labels: np.ndarray, matched_bits: np.ndarray, visible: np.ndarray,
                    gt_labels: np.ndarray, s: int, e: int, ignored_bits: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """AP@0.5 and mAP@[.5:.95] per element: ``scores``/``labels`` (s, e, K), the true-positive bits
    (s, e, K), which ground truth is in view (s, e, N), its classes (s, N), and the ignored bits
    (s, e, K) of a key-object run."""
    scores, labels, matched, visible, gt_labels, ignored = _ap_inputs(scores, labels, matched_bits, visible, gt_labels,
                                                                      s, e, ignored_bits)
    ap50, m_ap = np.full(e, np.nan), np.full(e, np.nan)
    for i in range(e):
        ap50[i], m_ap[i] = average_precision(scores[:, i], labels[:, i], matched[:, i], gt_labels, visible[:, i],
                                             None if ignored is None else ignored[:, i])
    return ap50, m_ap
