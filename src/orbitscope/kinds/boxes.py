"""Bounding boxes: a ragged number of xyxy boxes per image, padded, with labels and a validity mask.

Convention:
    Boxes are ``(x0, y0, x1, y1)`` in pixels of the image frame (origin top-left, +y down; a box
    covering pixels 0..9 is (0, 0, 10, 10): edges, not centres; area = (x1 − x0)(y1 − y0), no +1).
    An element moves the four corners like keypoints and takes their axis-aligned bounding box
    (exact for shifts, flips, 90° rotations and scales; for other rotations the box grows). The
    result is **clipped to the frame** (the view, for a window over context), and a box whose
    clipped area is zero is no longer valid: an object moved out of view is not a target.

A batch is a :class:`Boxes`: ``xyxy`` (B, N, 4) float, ``labels`` (B, N) int64, ``valid`` (B, N)
bool, with N the largest count in the batch (padding rows are invalid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError, ModelError
from ..group.elements import Transforms
from .base import Kind, Layout, register_kind
from .points import transform_keypoints

__all__ = ["Boxes", "transform_boxes", "clip_boxes", "box_area", "BoxesKind", "collate_boxes", "read_detections",
           "box_iou", "fuse_boxes", "pad_boxes_dim"]


@dataclass
class Boxes:
    """A padded batch of boxes (see the module docstring); leading dims may be (B,) or (K, B)."""

    xyxy: Tensor
    labels: Tensor
    valid: Tensor
    #: confidence per box (B, N) for predictions; None for targets
    scores: Tensor | None = None

    def __len__(self) -> int:
        return int(self.xyxy.shape[0])

    def to(self, device: torch.device | str) -> "Boxes":
        return Boxes(self.xyxy.to(device), self.labels.to(device), self.valid.to(device),
                     None if self.scores is None else self.scores.to(device))

    def reshape_rows(self) -> "Boxes":
        """(K, B, N, ...) -> (K·B, N, ...)."""
        k, b = self.xyxy.shape[:2]
        return Boxes(self.xyxy.reshape(k * b, *self.xyxy.shape[2:]), self.labels.reshape(k * b, -1),
                     self.valid.reshape(k * b, -1), None if self.scores is None else self.scores.reshape(k * b, -1))

    def __getitem__(self, index: Any) -> "Boxes":
        return Boxes(self.xyxy[index], self.labels[index], self.valid[index],
                     None if self.scores is None else self.scores[index])

    @classmethod
    def concat(cls, parts: Sequence["Boxes"]) -> "Boxes":
        """Rows of several batches in one, padded to the largest number of boxes (padding rows
        invalid, score −inf)."""
        n = max(p.xyxy.shape[1] for p in parts)
        scores = (None if any(p.scores is None for p in parts)
                  else torch.cat([pad_boxes_dim(p.scores, n, -torch.inf) for p in parts]))
        return cls(torch.cat([pad_boxes_dim(p.xyxy, n, 0.0) for p in parts]),
                   torch.cat([pad_boxes_dim(p.labels, n, -1) for p in parts]),
                   torch.cat([pad_boxes_dim(p.valid, n, False) for p in parts]), scores)

    def per_image(self) -> list[tuple[Tensor, Tensor]]:
        """Valid (boxes (n, 4), labels (n,)) of every image."""
        return [(self.xyxy[i][self.valid[i]], self.labels[i][self.valid[i]]) for i in range(len(self))]


def box_area(xyxy: Tensor) -> Tensor:
    """Areas (...,) of xyxy boxes (...,4) in square pixels; empty boxes give 0."""
    return (xyxy[..., 2] - xyxy[..., 0]).clamp_min(0) * (xyxy[..., 3] - xyxy[..., 1]).clamp_min(0)


def transform_boxes(boxes: Tensor, t: Transforms, image_size: tuple[int, int], *, layout: Layout = "orbit",
                    view_size: tuple[int, int] | None = None) -> Tensor:
    """Boxes (B, N, 4) xyxy in pixels -> axis-aligned bounding boxes of the transformed corners
    (not clipped; see :func:`clip_boxes`)."""
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must have shape (B, N, 4) as xyxy pixels, got {tuple(boxes.shape)}")
    x0, y0, x1, y1 = boxes.unbind(-1)
    corners = torch.stack([torch.stack(c, -1) for c in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))], -2)  # B,N,4,2
    bsz, n = boxes.shape[:2]
    moved = transform_keypoints(corners.reshape(bsz, n * 4, 2), t, image_size, layout=layout, view_size=view_size)
    moved = moved.reshape(*moved.shape[:-2], n, 4, 2)
    lo, hi = moved.amin(-2), moved.amax(-2)
    return torch.cat([lo, hi], -1)


def clip_boxes(xyxy: Tensor, size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Clip boxes (..., 4) to the frame [0, W] × [0, H]; returns (clipped, visible) where visible
    means a positive clipped area."""
    h, w = size
    lim = torch.tensor([w, h, w, h], dtype=xyxy.dtype, device=xyxy.device)
    clipped = torch.minimum(xyxy.clamp_min(0), lim)
    return clipped, box_area(clipped) > 0


def collate_boxes(items: Sequence[Any]) -> Boxes:
    """Per-image targets -> a padded :class:`Boxes`.

    Each item is a dict with ``boxes`` (n, 4) and ``labels`` (n,) (torchvision's target format),
    or a pair (boxes, labels); n may differ between items and may be 0."""
    xs, ls = [], []
    for i, item in enumerate(items):
        if isinstance(item, dict):
            if "boxes" not in item:
                raise DataError(f"detection target {i} is a dict without 'boxes' (keys: {sorted(item)}); give "
                                "{'boxes': (n, 4) xyxy pixels, 'labels': (n,)}")
            b, lab = item["boxes"], item.get("labels")
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            b, lab = item
        else:
            raise DataError(f"detection target {i} must be a dict {{'boxes', 'labels'}} or a pair (boxes, labels), "
                            f"got {type(item).__name__}")
        b = torch.as_tensor(np.asarray(b, dtype=np.float64) if not isinstance(b, Tensor) else b, dtype=torch.float32)
        b = b.reshape(-1, 4) if b.numel() == 0 else b
        if b.ndim != 2 or b.shape[-1] != 4:
            raise DataError(f"detection target {i}: boxes must be (n, 4) xyxy pixels, got shape {tuple(b.shape)}")
        if bool((b[:, 2] < b[:, 0]).any() | (b[:, 3] < b[:, 1]).any()):
            raise DataError(f"detection target {i}: boxes must be xyxy with x1 >= x0 and y1 >= y0 "
                            "(convert xywh with x1 = x0 + w, y1 = y0 + h)")
        lab_t = torch.zeros(len(b), dtype=torch.int64) if lab is None else torch.as_tensor(lab).long().reshape(-1)
        if len(lab_t) != len(b):
            raise DataError(f"detection target {i}: {len(b)} boxes but {len(lab_t)} labels")
        xs.append(b)
        ls.append(lab_t)
    n = max((len(b) for b in xs), default=0)
    xyxy = torch.zeros(len(xs), n, 4)
    labels = torch.full((len(xs), n), -1, dtype=torch.int64)
    valid = torch.zeros(len(xs), n, dtype=torch.bool)
    for i, (b, lab) in enumerate(zip(xs, ls)):
        xyxy[i, : len(b)], labels[i, : len(b)], valid[i, : len(b)] = b, lab, True
    return Boxes(xyxy, labels, valid)


def box_iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU (..., n, m) of xyxy boxes a (..., n, 4) and b (..., m, 4), batched over any
    leading dims (areas without +1, see the module docstring); 0 where both boxes are empty."""
    lo = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    hi = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (hi - lo).clamp_min(0).prod(-1)
    union = box_area(a)[..., :, None] + box_area(b)[..., None, :] - inter
    return torch.where(union > 0, inter / union, torch.zeros_like(inter))


def pad_boxes_dim(t: Tensor, n: int, value: float) -> Tensor:
    """``t`` (R, K, ...) cut or padded with ``value`` to K = n entries along dim 1 (the box dim)."""
    if t.shape[1] >= n:
        return t[:, :n]
    pad = torch.full((t.shape[0], n - t.shape[1], *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([t, pad], 1)


def fuse_boxes(rows: Boxes, n_elements: int, n_samples: int, weights: Sequence[float] | np.ndarray,
               iou_threshold: float = 0.5, max_boxes: int | None = None) -> Boxes:
    """Consensus of detections over an orbit, in the canonical frame (NERO's detection consensus,
    generalised to several objects and classes).

    Per sample, the boxes of all elements with positive weight are clustered greedily: the
    highest-scoring unassigned box opens a cluster, and every *other* element adds its unassigned
    box with the highest IoU with the opener, if that IoU exceeds ``iou_threshold`` (any class:
    an element that calls the object by another class still votes on where it is). Each cluster
    becomes one box:

    * corners: the mean of its members' corners, weighted by their elements' ``weights``;
    * label: the **majority** class among its members (votes weighted by element weight; a tie
      goes to the class with the larger summed score, then the opener's) — not NERO's truncated
      mean of class ids;
    * score: Σ weight × score over members / total weight, i.e. the mean score over the orbit
      with 0 where an element missed the object (a box found at every element with score s
      keeps s).

    Args:
        rows: element-major rows (row ``k·n_samples + b``), already mapped back by g⁻¹.
        weights: per element, 0 for repeated elements (e.g. 360° after 0°).
        max_boxes: keep the best this many fused boxes per sample (None: all). Clustering stops
            early only when no later cluster could be among them (a fused score never exceeds
            its opener's score).

    Returns:
        A padded :class:`Boxes` (n_samples, M) sorted by fused score.
    """
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    if w.shape != (n_elements,):
        raise ValueError(f"weights must have one entry per element ({n_elements}), got shape {tuple(w.shape)}")
    total = float(w.sum())
    n = rows.xyxy.shape[1]
    xyxy = rows.xyxy.reshape(n_elements, n_samples, n, 4).double().cpu()
    labels = rows.labels.reshape(n_elements, n_samples, n).cpu()
    valid = rows.valid.reshape(n_elements, n_samples, n).cpu() & (w > 0)[:, None, None]
    scores = (torch.ones(n_elements, n_samples, n, dtype=torch.float64) if rows.scores is None
              else rows.scores.reshape(n_elements, n_samples, n).double().cpu())
    element = torch.arange(n_elements)[:, None].expand(n_elements, n)
    out: list[tuple[Tensor, Tensor, Tensor]] = []
    for b in range(n_samples):
        ok = valid[:, b]
        order = torch.argsort(scores[:, b][ok], descending=True, stable=True)
        box, lab, sc, el = (xyxy[:, b][ok][order], labels[:, b][ok][order], scores[:, b][ok][order],
                            element[ok][order])
        used = torch.zeros(len(box), dtype=torch.bool)
        fused: list[tuple[Tensor, int, float]] = []
        while not bool(used.all()):
            opener = int(torch.nonzero(~used)[0])
            if max_boxes is not None and len(fused) >= max_boxes:
                # a cluster's fused score is at most its opener's score: stop once no later
                # cluster can enter the best max_boxes
                kth = sorted((f[2] for f in fused), reverse=True)[max_boxes - 1]
                if float(sc[opener]) <= kth:
                    break
            iou = box_iou(box[opener][None], box)[0]
            ok_j = ~used & (iou > iou_threshold) & (el != el[opener])
            best = torch.full((n_elements,), -1.0, dtype=torch.float64).scatter_reduce(
                0, el[ok_j], iou[ok_j], "amax", include_self=True)
            pick = ok_j & (iou == best[el])  # each element's best box (the first of equal IoUs)
            first = torch.full((n_elements,), len(box)).scatter_reduce(0, el[pick], torch.nonzero(pick)[:, 0],
                                                                      "amin", include_self=True)
            members = torch.cat([torch.tensor([opener]), first[first < len(box)]])
            used[members] = True
            mw = w[el[members]]
            classes = lab[members]
            votes = torch.zeros(int(classes.max()) + 1, dtype=torch.float64).index_add_(0, classes.clamp_min(0), mw)
            mass = torch.zeros_like(votes).index_add_(0, classes.clamp_min(0), sc[members])
            top = torch.nonzero(votes == votes.max())[:, 0]
            top = top[mass[top] == mass[top].max()]
            label = int(lab[opener]) if int(lab[opener]) in top.tolist() else int(top[0])
            fused.append(((box[members] * mw[:, None]).sum(0) / mw.sum(), label,
                          float((mw * sc[members]).sum()) / total))
        fused.sort(key=lambda f: -f[2])
        fused = fused if max_boxes is None else fused[:max_boxes]
        out.append((torch.stack([f[0] for f in fused]).float() if fused else torch.zeros(0, 4),
                    torch.tensor([f[1] for f in fused], dtype=torch.int64),
                    torch.tensor([f[2] for f in fused], dtype=torch.float32)))
    m = max((len(o[0]) for o in out), default=0)
    xyxy_out, labels_out = torch.zeros(n_samples, m, 4), torch.full((n_samples, m), -1, dtype=torch.int64)
    valid_out, scores_out = torch.zeros(n_samples, m, dtype=torch.bool), torch.full((n_samples, m), -torch.inf)
    for i, (bx, lab_i, sc_i) in enumerate(out):
        k = len(bx)
        xyxy_out[i, :k], labels_out[i, :k], valid_out[i, :k], scores_out[i, :k] = bx, lab_i, True, sc_i
    return Boxes(xyxy_out, labels_out, valid_out, scores_out)


def read_detections(raw: Sequence[Any]) -> Boxes:
    """torchvision-style detections (a list, one dict per image, with ``boxes`` (n, 4) xyxy,
    ``scores`` (n,) and ``labels`` (n,)) -> a padded :class:`Boxes` with ``scores``, each image's
    boxes sorted by decreasing score (stable: equal scores keep the model's order; padding rows
    are invalid, score -inf; so are rows a model padded itself, with label -1 or score -inf).
    The images are padded into one tensor and sorted together (one batched sort).

    Raises:
        ModelError: a detection that is not padding has a NaN or infinite box coordinate, or a
            score of NaN or +inf (as flow and point-cloud models with non-finite outputs).
    """
    if not isinstance(raw, (list, tuple)) or not all(isinstance(d, dict) for d in raw):
        raise DataError(f"detections must be a list with one dict per image, got {type(raw).__name__}")
    boxes, scores, labels = [], [], []
    for i, d in enumerate(raw):
        if "boxes" not in d:
            raise DataError(f"detection output {i} has no 'boxes' (keys {sorted(d)})")
        b = torch.as_tensor(d["boxes"], dtype=torch.float32).reshape(-1, 4)
        sc = torch.as_tensor(d["scores"], dtype=torch.float32).reshape(-1) if "scores" in d else torch.ones(len(b))
        lab = (torch.as_tensor(d["labels"], dtype=torch.int64).reshape(-1) if "labels" in d
               else torch.zeros(len(b), dtype=torch.int64))
        if not (len(b) == len(sc) == len(lab)):
            raise DataError(f"detection output {i}: {len(b)} boxes, {len(sc)} scores, {len(lab)} labels")
        real = (lab >= 0) & (sc != -torch.inf)  # not a model's own padding
        bad = real & ~(torch.isfinite(sc) & torch.isfinite(b).all(dim=1))
        if bool(bad.any()):
            j = int(torch.nonzero(bad)[0])
            what = "score" if not bool(torch.isfinite(sc[j])) else "box"
            raise ModelError(f"the detector returned a non-finite {what} for image {i} of a batch (detection {j} of "
                             f"{len(b)}: box {[round(float(v), 3) for v in b[j]]}, score {float(sc[j])}; "
                             f"{int(bad.sum())} such); pad with label -1 or score -inf, else return finite values: "
                             "check the model and its inputs")
        boxes.append(b)
        scores.append(sc)
        labels.append(lab)
    lengths = [len(b) for b in boxes]
    n, r = max(lengths, default=0), len(boxes)
    if r == 0 or n == 0:
        return Boxes(torch.zeros(r, n, 4), torch.full((r, n), -1, dtype=torch.int64), torch.zeros(r, n, dtype=torch.bool),
                     torch.full((r, n), -torch.inf))
    device = torch.device("cpu")  # as before: detections are read on the CPU
    if min(lengths) == n:  # every image the same number of detections (e.g. a fixed top-k): no padding
        xyxy, sc, lab = (torch.stack([t.to(device) for t in ts]) for ts in (boxes, scores, labels))
    else:
        count = torch.as_tensor(lengths, device=device)
        row = torch.repeat_interleave(torch.arange(r, device=device), count)
        col = torch.arange(len(row), device=device) - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
        xyxy = torch.zeros(r, n, 4, device=device)
        sc = torch.full((r, n), -torch.inf, device=device)
        lab = torch.full((r, n), -1, dtype=torch.int64, device=device)
        xyxy[row, col] = torch.cat([t.to(device) for t in boxes])
        sc[row, col] = torch.cat([t.to(device) for t in scores])
        lab[row, col] = torch.cat([t.to(device) for t in labels])
    # padding scores are -inf and come last: a stable sort keeps a real -inf before them
    order = torch.argsort(sc, dim=1, descending=True, stable=True)
    xyxy, sc, lab = xyxy.gather(1, order[..., None].expand(r, n, 4)), sc.gather(1, order), lab.gather(1, order)
    filled = torch.arange(n, device=device)[None, :] < torch.as_tensor(lengths, device=device)[:, None]
    valid = filled & (lab >= 0) & torch.isfinite(sc)  # label -1 or score -inf: a model's padding
    return Boxes(xyxy, torch.where(filled, lab, -1), valid, torch.where(filled, sc, -torch.inf))


class BoxesKind(Kind):
    """Padded boxes with labels and validity (:class:`Boxes`); context ``image_size`` (H, W) of
    their frame and, for a window over context, ``view_size`` (h, w). Acting clips to the frame
    (or view) and marks boxes with no area left invalid.

    Stored per sample as ``target_boxes`` (float32, N × 4), ``target_labels`` (int64) and
    ``target_valid`` (uint8), padded to the largest N of the run."""

    name = "boxes"
    stored = {"target_boxes": ("object", "coord"), "target_labels": ("object",), "target_valid": ("object",)}
    ragged = ("target_boxes", "target_labels", "target_valid")

    def collate(self, items: list[Any]) -> Boxes:
        return collate_boxes(items)

    def prepare(self, data: Any, device: torch.device) -> Boxes:
        if not isinstance(data, Boxes):
            data = collate_boxes(data)
        return data.to(device)

    def act(self, data: Boxes, t: Transforms, *, layout: Layout = "orbit", image_size: tuple[int, int] | None = None,
            view_size: tuple[int, int] | None = None, clip: bool = True, **_: Any) -> Boxes:
        if image_size is None:
            raise ValueError("boxes need image_size=(H, W) of the frame they live in")
        moved = transform_boxes(data.xyxy, t, image_size, layout=layout, view_size=view_size)
        scores = data.scores
        if layout == "orbit":
            labels = data.labels.unsqueeze(0).expand(len(t), *data.labels.shape)
            valid = data.valid.unsqueeze(0).expand(len(t), *data.valid.shape)
            scores = None if scores is None else scores.unsqueeze(0).expand(len(t), *scores.shape)
        else:
            labels, valid = data.labels, data.valid
        if clip:
            moved, visible = clip_boxes(moved, view_size or image_size)
            valid = valid & visible
        return Boxes(moved, labels, valid, scores)

    def rows(self, acted: Boxes) -> Boxes:
        return acted.reshape_rows()

    def store(self, data: Boxes) -> dict[str, np.ndarray]:
        return {"target_boxes": data.xyxy.cpu().numpy().astype(np.float32),
                "target_labels": data.labels.cpu().numpy().astype(np.int64),
                "target_valid": data.valid.cpu().numpy().astype(np.uint8)}


register_kind(BoxesKind())
