"""Training the small centre detector with NERO's jitter augmentation (reproducible, cached).

Data: key-object contexts of the built-in digit scenes (:func:`orbitscope.data.digit_scenes`,
``split="train"`` digits; :func:`orbitscope.data.key_object_contexts`). Each step cuts the field
of view from the context at an offset t = (tx, ty) per sample: with jitter p, tx and ty are drawn
from a normal with σ = view · p / 4 px (NERO: σ = 128 · p / 400 px with p in percent, 32 px at
100 % for its 128-px view), truncated to [−max_shift, max_shift) by redrawing, and rounded to whole pixels; p = 0 keeps
every object at the centre. The boxes move with the view and are clipped to it.

Loss (CenterNet): penalty-reduced focal loss (α = 2, β = 4) on Gaussian centre heatmaps (σ from
the box size: σ = max(w, h) / 6 in cells, at least 0.5, a simplification of CornerNet's radius rule)
plus L1 on the centre offsets and log sizes at the centre cells. Adam, seeded shuffling and
augmentation (:func:`~orbitscope.training.recipes.derive_seed`), one thread-independent CPU run;
the learning rate constant or (``schedule="cosine"``, the default) decaying to 0 along a cosine.

Cost and quality of the defaults (12,000 scenes: 2,946 training objects; 30 epochs of batches of
32, 2,790 steps; width 32), measured on this project's 2-core machine with one torch thread while
other work ran: 457 s for one model alone, 714 s for the demo's two trained side by side. On 500
held-out key objects at the centred view, key-object AP@0.5 (``Detection(ground_truth="key")``)
0.889 (0 % jitter) and 0.903 (100 % jitter); the previous recipe (4,800 scenes, 8 epochs, constant
rate) reached 0.33 on 293 held-out objects (all boxes in view as ground truth), mostly by
misreading the digit: its top box overlapped a ground-truth box with IoU > 0.5 in 98 % of the
centred views, but had the key object's class in 47 %.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from ..data.coco import DetectionSet, key_object_contexts
from ..data.scenes import digit_scenes
from ..models.centre_detector import STRIDE, CentreDetector
from .recipes import cosine_lr, derive_seed, load_or_train

__all__ = ["DetectorRecipe", "detection_training_data", "train_detector", "cached_detector", "detector_cache_path", "jitter_offsets",
           "centre_targets", "detector_loss"]

ProgressFn = Callable[[int, int, float], None]


@dataclass(frozen=True)
class DetectorRecipe:
    """Everything that determines a trained detector. ``name`` only labels the cache file."""

    name: str = "centre-detector"
    jitter: float = 0.0
    view: int = 64
    max_shift: int = 32
    scenes: int = 12000
    scene_size: int = 192
    epochs: int = 30
    batch_size: int = 32
    lr: float = 2e-3
    width: int = 32
    schedule: str = "cosine"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine' (decay to 0 over the steps), got {self.schedule!r}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter is a fraction in [0, 1] (1 = NERO's 100 %), got {self.jitter}")
        if self.view % STRIDE or self.max_shift < 0:
            raise ValueError(f"view must be a multiple of {STRIDE} and max_shift >= 0")

    def key(self) -> str:
        d = asdict(self)
        d.pop("name")
        import hashlib

        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def detection_training_data(recipe: DetectorRecipe, split: str = "train") -> DetectionSet:
    """Key-object contexts ((view + 2·max_shift)² crops) of the recipe's digit scenes."""
    scenes = digit_scenes(recipe.scenes, size=recipe.scene_size, scale=(recipe.view * 2 // 5, recipe.view * 3 // 4),
                          seed=derive_seed(recipe.seed, f"scenes:{split}") % 2**31, split=split)
    return key_object_contexts(scenes, view=recipe.view, max_shift=recipe.max_shift, area=(0.10, 0.50))


def jitter_offsets(n: int, jitter: float, view: int, max_shift: int, generator: torch.Generator) -> Tensor:
    """(n, 2) integer offsets (tx, ty) in pixels (see the module docstring)."""
    if jitter == 0 or max_shift == 0:
        return torch.zeros(n, 2, dtype=torch.long)
    sigma = view * jitter / 4
    out = torch.randn(n, 2, generator=generator) * sigma
    for _ in range(100):  # truncation by redrawing
        bad = (out < -max_shift) | (out >= max_shift)
        if not bad.any():
            break
        out[bad] = torch.randn(int(bad.sum()), generator=generator) * sigma
    return out.round().clamp(-max_shift, max_shift - 1).long()


def _views(data: DetectionSet, index: list[int], offsets: Tensor, view: int, max_shift: int
           ) -> tuple[Tensor, list[np.ndarray], list[np.ndarray]]:
    """The fields of view at the offsets (content displaced by +t), and their clipped boxes."""
    images, boxes, labels = [], [], []
    for k, (tx, ty) in zip(index, offsets.tolist()):
        img = data.image(k)
        x0, y0 = max_shift - tx, max_shift - ty
        images.append(torch.from_numpy(img[:, y0:y0 + view, x0:x0 + view].astype(np.float32) / 255.0))
        t = data.target(k)
        b = np.clip(t["boxes"] - np.array([x0, y0, x0, y0], np.float32), 0, view)
        keep = (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
        boxes.append(b[keep])
        labels.append(t["labels"][keep])
    return torch.stack(images), boxes, labels


def centre_targets(boxes: list[np.ndarray], labels: list[np.ndarray], num_classes: int, size: int
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """CenterNet targets on the stride-4 grid: heatmaps (B, K, h, w), centre cells (B, M) flat
    index (−1 = none), offsets and log sizes (B, M, 2) in cells."""
    h = w = size // STRIDE
    b = len(boxes)
    m = max((len(x) for x in boxes), default=0)
    heat = torch.zeros(b, num_classes, h, w)
    cells = torch.full((b, max(m, 1)), -1, dtype=torch.long)
    off = torch.zeros(b, max(m, 1), 2)
    logs = torch.zeros(b, max(m, 1), 2)
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    for n, (bx, lab) in enumerate(zip(boxes, labels)):
        for q, (box, c) in enumerate(zip(bx, lab)):
            cx, cy = (box[0] + box[2]) / 2 / STRIDE, (box[1] + box[3]) / 2 / STRIDE
            bw, bh = max((box[2] - box[0]) / STRIDE, 1e-3), max((box[3] - box[1]) / STRIDE, 1e-3)
            i, j = min(int(cy), h - 1), min(int(cx), w - 1)
            sigma = max(max(bw, bh) / 6, 0.5)
            g = torch.exp(-((xx - j) ** 2 + (yy - i) ** 2) / (2 * sigma ** 2))
            heat[n, int(c)] = torch.maximum(heat[n, int(c)], g)
            cells[n, q] = i * w + j
            off[n, q] = torch.tensor([cx - j, cy - i])
            logs[n, q] = torch.tensor([np.log(bw), np.log(bh)])
    return heat, cells, off, logs


def detector_loss(model: CentreDetector, x: Tensor, targets: tuple[Tensor, Tensor, Tensor, Tensor]) -> Tensor:
    """Focal heatmap loss + L1 offset and log-size losses at the centres (normalised by objects)."""
    heat_t, cells, off_t, logs_t = targets
    heat, off, logs = model.raw(x)
    p = torch.sigmoid(heat).clamp(1e-4, 1 - 1e-4)
    pos = heat_t == 1
    focal = -(torch.where(pos, (1 - p) ** 2 * torch.log(p), (1 - heat_t) ** 4 * p ** 2 * torch.log(1 - p))).sum()
    n_obj = max(int((cells >= 0).sum()), 1)
    valid = cells >= 0
    flat = cells.clamp_min(0)
    b = x.shape[0]
    pick = lambda t: t.reshape(b, 2, -1).gather(2, flat[:, None, :].expand(b, 2, flat.shape[1])).transpose(1, 2)  # noqa: E731
    l1 = ((pick(off) - off_t).abs().sum(-1) + (pick(logs) - logs_t).abs().sum(-1))[valid].sum()
    return (focal + l1) / n_obj


def train_detector(recipe: DetectorRecipe, progress: ProgressFn | None = None) -> tuple[CentreDetector, dict[str, Any]]:
    """Train a :class:`CentreDetector` by ``recipe`` (see the module docstring)."""
    data = detection_training_data(recipe)
    torch.manual_seed(derive_seed(recipe.seed, "init") % 2**63)
    model = CentreDetector(num_classes=10, width=recipe.width)
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    shuffle = torch.Generator().manual_seed(derive_seed(recipe.seed, "shuffle") % 2**63)
    jitter = torch.Generator().manual_seed(derive_seed(recipe.seed, "jitter") % 2**63)
    losses = []
    model.train()
    steps = 0
    total = recipe.epochs * -(-len(data) // recipe.batch_size)
    for _ in range(recipe.epochs):
        order = torch.randperm(len(data), generator=shuffle).tolist()
        for s in range(0, len(order), recipe.batch_size):
            idx = order[s:s + recipe.batch_size]
            offsets = jitter_offsets(len(idx), recipe.jitter, recipe.view, recipe.max_shift, jitter)
            x, boxes, labels = _views(data, idx, offsets, recipe.view, recipe.max_shift)
            if recipe.schedule == "cosine":
                cosine_lr(opt, recipe.lr, steps, total)
            loss = detector_loss(model, x, centre_targets(boxes, labels, 10, recipe.view))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            steps += 1
            if progress is not None:
                progress(steps, total, losses[-1])
    model.eval()
    return model, {"recipe_key": recipe.key(), "train_objects": len(data), "steps": steps,
                   "first_loss": losses[0], "final_loss": float(np.mean(losses[-5:]))}


def detector_cache_path(recipe: DetectorRecipe, cache_dir: str | os.PathLike[str]) -> Path:
    """Where :func:`cached_detector` keeps the detector of ``recipe``."""
    return Path(cache_dir) / f"{recipe.name}-{recipe.key()}.safetensors"


def cached_detector(recipe: DetectorRecipe, cache_dir: str | os.PathLike[str],
                    progress: ProgressFn | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """The trained detector of ``recipe`` from ``cache_dir`` (trained and saved when absent)."""
    path = detector_cache_path(recipe, cache_dir)
    return load_or_train(path, recipe.key(), asdict(recipe), lambda: train_detector(recipe, progress))
