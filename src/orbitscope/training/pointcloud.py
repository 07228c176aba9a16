"""Training recipe for the point-cloud classifiers (:mod:`orbitscope.models.point_nets`).

A :class:`PointCloudRecipe` fixes everything that determines the trained model: the architecture
(``"pointnet"``, ``"dgcnn"`` or ``"distance"``), the training data (a data spec, by default
``"meshes:train"``: clouds ``(N, 3)`` with integer labels), the augmentation, the optimiser
settings, the number of points seen per cloud per step and the seed. Same recipe, same machine,
same weights: the shuffling, the point subsets, the rotations and the dropout masks all come from
generators seeded by the recipe (the global torch generator is forked, so the caller's random
state is left as it was), and nothing depends on the wall clock.

* ``augment="none"`` trains on the clouds as they are (NERO's upright model).
* ``augment="so3"`` rotates every cloud by a uniformly random rotation every time it is seen
  (NERO's "data aug" model): unit quaternions drawn by Shoemake's method (Shoemake, "Uniform
  random rotations", Graphics Gems III, 1992), uniform on the 3-sphere, so their rotations are
  Haar-uniform on SO(3) (:func:`random_rotations`).

Each step sees ``points`` of each cloud's points (all of them when ``points`` is 0 or at least
the cloud's size): cheaper steps and a mild augmentation. PointNet sees a fresh uniformly random
subset for every cloud and step (its max pool does not mind the density, so it is evaluated on
whole clouds). DGCNN is built with ``max_points=points``, so that it reduces any larger cloud by
farthest-point sampling itself (a kNN graph depends on the density of the points); in training it
sees, per cloud and step, one of :data:`FPS_VARIANTS` farthest-point subsets computed once per
cloud (the first from the start DGCNN uses, the others from random starts). As farthest-point
sampling depends on distances only, a rotated cloud has the same subset, rotated.

The ``"distance"`` architecture (:class:`~orbitscope.models.point_nets.DistanceNet`) has no
parameters before its MLP and is rotation-invariant by construction, so its features are computed
once per whole training cloud and only the MLP is trained on them; for it ``augment="so3"``
would change its features by float rounding alone and is not applied (``info["augment_applied"]``
says so).

Measured on the default ``meshes:train`` (10 classes × 64 clouds × 1,024 points) on this
project's 2-core machine, lightly loaded, with the defaults of :func:`point_recipes`: PointNet
11 s (plain) and 33 s (``so3``), DGCNN 18 s and 43 s, DistanceNet 4 s: about 110 s for all five
(expect up to twice that when the machine is busy). Held-out accuracy on ``meshes:test`` (160
clouds), upright / each cloud randomly rotated: PointNet 100 % / 26 %, PointNet-so3 93 % / 96 %,
DGCNN 100 % / 34 %, DGCNN-so3 99 % / 99 %, DistanceNet 98 % / 98 %.

Loss: cross-entropy. Adam with a cosine learning-rate decay to zero over the fixed number of
steps. Models are cached by :func:`cached_point_model` under
``<cache>/<name>-<key>.safetensors`` (the key hashes the recipe), like the other recipes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import DataError
from ..group.elements import quaternion_to_matrix
from ..group.so3 import shoemake_quaternions
from ..models.point_nets import DGCNN, DistanceNet, PointNet, farthest_point_indices
from .recipes import cosine_lr, derive_seed, load_or_train

__all__ = ["ARCHS", "POINT_AUGMENTATIONS", "DEFAULT_EPOCHS", "DEFAULT_POINTS", "FPS_VARIANTS", "PointCloudRecipe",
           "train_point_model", "point_cache_path", "cached_point_model", "point_recipes",
           "random_rotations", "rotate_clouds", "subsample_points", "build_point_model",
           "stack_clouds", "point_accuracy"]

#: The architectures a recipe can train and their models.
ARCHS: dict[str, type[nn.Module]] = {"pointnet": PointNet, "dgcnn": DGCNN, "distance": DistanceNet}
#: The augmentations: none, or a uniformly random 3-D rotation per cloud per step.
POINT_AUGMENTATIONS = ("none", "so3")
#: Epochs per (architecture, augmentation) when a recipe leaves ``epochs`` out: sized for the
#: default ``meshes:train`` (640 clouds of 1,024 points) on 2 CPU cores; rotated training needs more.
DEFAULT_EPOCHS = {("pointnet", "none"): 20, ("pointnet", "so3"): 60, ("dgcnn", "none"): 10, ("dgcnn", "so3"): 25,
                  ("distance", "none"): 150, ("distance", "so3"): 150}
#: Points per cloud per step when a recipe leaves ``points`` out (DGCNN: also its ``max_points``).
DEFAULT_POINTS = {"pointnet": 512, "dgcnn": 256, "distance": 0}
#: Farthest-point subsets drawn per training cloud for DGCNN (the first from DGCNN's own start).
FPS_VARIANTS = 4

ProgressFn = Callable[[int, int, float], None]


@dataclass(frozen=True)
class PointCloudRecipe:
    """Everything that determines a trained point-cloud classifier (see the module docstring).

    Args:
        arch: ``"pointnet"``, ``"dgcnn"`` or ``"distance"``.
        augment: ``"none"`` or ``"so3"`` (a uniformly random rotation per cloud per step).
        data: data spec of the training clouds (:func:`orbitscope.data.specs.parse_data_spec`).
        epochs: passes over the data; ``None`` takes the default of the architecture and
            augmentation (:data:`DEFAULT_EPOCHS`), resolved at construction (so it is in the key).
        batch_size: clouds per step.
        lr: Adam's initial learning rate (cosine decay to 0).
        seed: seeds initialisation, shuffling, point subsets, rotations and dropout.
        points: points per cloud per step; 0 uses every point; ``None`` takes the architecture's
            default (:data:`DEFAULT_POINTS`: 512 for PointNet, 256 for DGCNN), resolved at
            construction. PointNet sees a fresh random subset per cloud and step; DGCNN is built
            with ``max_points=points`` and sees farthest-point subsets (see the module docstring).
        width: first-layer width of PointNet / DGCNN (unused by ``"distance"``).
        k: neighbours of DGCNN's graphs (used by ``"dgcnn"`` only).
        bins: histogram bins of DistanceNet (used by ``"distance"`` only).
        pairs: point pairs of DistanceNet's distance histogram, 0 for all (``"distance"`` only).
        name: labels the cache file only (not part of the key); ``""`` gives
            ``"points-<arch>-<augment>"``.
    """

    arch: str = "pointnet"
    augment: str = "none"
    data: str = "meshes:train"
    epochs: int | None = None
    batch_size: int = 32
    lr: float = 2e-3
    seed: int = 0
    points: int | None = None
    width: int = 32
    k: int = 16
    bins: int = 32
    pairs: int = 65536
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {sorted(ARCHS)}, got {self.arch!r}")
        if self.augment not in POINT_AUGMENTATIONS:
            raise ValueError(f"augment must be 'none' or 'so3' (a uniformly random 3-D rotation per cloud), "
                             f"got {self.augment!r}")
        if not isinstance(self.data, str) or not self.data.strip():
            raise ValueError(f"data must be a non-empty data spec string, got {self.data!r}")
        if self.epochs is None:
            object.__setattr__(self, "epochs", DEFAULT_EPOCHS[self.arch, self.augment])
        if self.points is None:
            object.__setattr__(self, "points", DEFAULT_POINTS[self.arch])
        for name in ("epochs", "batch_size", "width", "k", "bins"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2 (the models use batch normalisation)")
        if isinstance(self.pairs, bool) or not isinstance(self.pairs, int) or self.pairs < 0:
            raise ValueError(f"pairs must be a non-negative integer (0: all pairs), got {self.pairs!r}")
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points < 0:
            raise ValueError(f"points must be a non-negative integer (0: every point), got {self.points!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an integer, got {self.seed!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")

    @property
    def label(self) -> str:
        """The cache file's name stem: ``name`` or ``"points-<arch>-<augment>"``."""
        return self.name or f"points-{self.arch}-{self.augment}"

    def key(self) -> str:
        """12 hex characters hashing every field but ``name``."""
        d = asdict(self)
        d.pop("name")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def point_recipes(data: str = "meshes:train", seed: int = 0) -> list[PointCloudRecipe]:
    """The five recipes of the point-cloud demo: PointNet and DGCNN, each plain and
    ``"so3"``-augmented, and the invariant DistanceNet (default epochs and points). Measured on the
    default ``meshes:train`` on this project's 2-core machine: about 2 minutes for all five when
    it is otherwise idle."""
    return [PointCloudRecipe(arch=a, augment=g, data=data, seed=seed)
            for a, g in (("pointnet", "none"), ("pointnet", "so3"), ("dgcnn", "none"), ("dgcnn", "so3"),
                         ("distance", "none"))]


# --------------------------------------------------------------------------- random rotations


def random_rotations(n: int, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """``n`` Haar-uniform rotation matrices ``(n, 3, 3)`` (acting as ``p' = R p``): uniforms from
    ``generator`` through Shoemake's map (:func:`orbitscope.group.so3.shoemake_quaternions`)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    u = torch.rand(3, n, generator=generator, dtype=torch.float64).numpy()
    return torch.from_numpy(quaternion_to_matrix(shoemake_quaternions(u)) if n else np.zeros((0, 3, 3))).to(dtype)


def rotate_clouds(points: Tensor, rotations: Tensor) -> Tensor:
    """Clouds ``(B, N, 3)`` each turned by its rotation ``(B, 3, 3)``: ``p -> R p``."""
    if rotations.shape != (points.shape[0], 3, 3):
        raise ValueError(f"need one (3, 3) rotation per cloud, got {tuple(rotations.shape)} for "
                         f"{tuple(points.shape)}")
    return torch.einsum("bij,bnj->bni", rotations.to(points.dtype), points)


def subsample_points(points: Tensor, m: int, generator: torch.Generator | None = None) -> Tensor:
    """A uniformly random subset of ``m`` points of every cloud ``(B, N, 3)`` -> ``(B, m, 3)``
    (drawn independently per cloud; ``points`` itself when ``m`` is 0 or at least ``N``)."""
    b, n = points.shape[:2]
    if m <= 0 or m >= n:
        return points
    idx = torch.rand(b, n, generator=generator).argsort(dim=1)[:, :m]
    return points.gather(1, idx.unsqueeze(2).expand(-1, -1, points.shape[2]))


# --------------------------------------------------------------------------- training


def stack_clouds(data: Any) -> tuple[Tensor, Tensor]:
    """All items ``(points (N, 3), label)`` of a map-style dataset as ``(clouds (M, N, 3) float32,
    labels (M,) int64)``; every cloud must have the same number of points."""
    if len(data) == 0:
        raise DataError("the point-cloud dataset is empty")
    clouds, labels = [], []
    for i in range(len(data)):
        item = data[i]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise DataError(f"point-cloud dataset items must be (points, label), item {i} is {type(item).__name__}")
        p = torch.as_tensor(np.asarray(item[0]), dtype=torch.float32)
        if p.ndim != 2 or p.shape[1] != 3:
            raise DataError(f"item {i} has points of shape {tuple(p.shape)}, expected (N, 3)")
        if clouds and p.shape != clouds[0].shape:
            raise DataError(f"every cloud needs the same number of points: item 0 has {clouds[0].shape[0]}, "
                            f"item {i} has {p.shape[0]}")
        clouds.append(p)
        labels.append(int(np.asarray(item[1])))
    x, y = torch.stack(clouds), torch.tensor(labels, dtype=torch.int64)
    if not bool(torch.isfinite(x).all()):
        raise DataError("the point clouds contain NaN or infinite coordinates")
    if int(y.min()) < 0:
        raise DataError(f"labels must be non-negative class indices, got {int(y.min())}")
    return x, y


def _parse(spec: str) -> Any:
    """``parse_data_spec(spec)``, with the built-in mesh shapes' ``meshes`` prefix registered first
    (its module registers it when imported)."""
    from ..data.specs import DATA_SPECS, parse_data_spec

    if spec.strip().lower().startswith("meshes") and "meshes" not in DATA_SPECS:
        try:
            from ..data import meshes  # noqa: F401 - registers the "meshes" data spec
        except ImportError:  # reported by parse_data_spec as an unknown spec
            pass
    return parse_data_spec(spec)


def _class_names(data: Any, labels: Tensor) -> list[str]:
    names = getattr(data, "classes", None)
    if isinstance(names, Sequence) and not isinstance(names, str) and len(names) > int(labels.max()):
        return [str(c) for c in names]
    return [str(i) for i in range(int(labels.max()) + 1)]


def build_point_model(recipe: PointCloudRecipe, classes: int) -> nn.Module:
    """The untrained model of ``recipe`` for ``classes`` classes (initialised from the global
    torch generator)."""
    if recipe.arch == "pointnet":
        return PointNet(classes, width=recipe.width)
    if recipe.arch == "dgcnn":
        return DGCNN(classes, k=recipe.k, width=recipe.width, max_points=int(recipe.points or 0))
    return DistanceNet(classes, bins=recipe.bins, pairs=recipe.pairs)


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    order = torch.randperm(n, generator=generator)
    out = [order[s:s + batch_size] for s in range(0, n, batch_size)]
    if len(out) > 1 and len(out[-1]) < 2:  # batch normalisation needs 2 samples: fold a lone one in
        out[-2] = torch.cat([out[-2], out.pop()])
    return out


def _fps_variants(clouds: Tensor, m: int, generator: torch.Generator) -> Tensor:
    """``(M, FPS_VARIANTS, m, 3)`` farthest-point subsets of every cloud: the first from the point
    farthest from the centroid (as :class:`DGCNN` does), the others from random points; the whole
    clouds ``(M, 1, N, 3)`` when ``m`` is 0 or not below their size."""
    n = clouds.shape[1]
    if not 0 < m < n:
        return clouds.unsqueeze(1)
    out = []
    for v in range(FPS_VARIANTS):
        start = None if v == 0 else torch.randint(n, (len(clouds),), generator=generator)
        idx = farthest_point_indices(clouds, m, start)
        out.append(clouds.gather(1, idx.unsqueeze(2).expand(-1, -1, 3)))
    return torch.stack(out, dim=1)


def train_point_model(recipe: PointCloudRecipe, progress: ProgressFn | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Train the model of ``recipe`` (see the module docstring) on the CPU.

    Args:
        recipe: what to train.
        progress: called as ``progress(step, total_steps, loss)`` after every step.

    Returns:
        ``(model, info)``: the model in eval mode and a JSON-able summary (``recipe_key``,
        ``arch``, ``augment``, ``augment_applied``, ``train_clouds``, ``points_per_cloud``,
        ``points_per_step``, ``classes``, ``steps``, ``first_loss``, ``final_loss``).
    """
    data = _parse(recipe.data)
    clouds, labels = stack_clouds(data)
    names = _class_names(data, labels)
    if len(clouds) < 2:
        raise DataError(f"training needs at least 2 clouds, {recipe.data!r} has {len(clouds)}")
    shuffle = torch.Generator().manual_seed(derive_seed(recipe.seed, "shuffle") % 2**63)
    rotate = torch.Generator().manual_seed(derive_seed(recipe.seed, "augment") % 2**63)
    subset = torch.Generator().manual_seed(derive_seed(recipe.seed, "points") % 2**63)
    m = int(recipe.points or 0)
    n_batches = len(_batches(len(clouds), recipe.batch_size, torch.Generator().manual_seed(0)))
    total = int(recipe.epochs) * n_batches
    losses: list[float] = []
    with torch.random.fork_rng(devices=[]):  # init and dropout from the recipe; the caller's state is kept
        torch.manual_seed(derive_seed(recipe.seed, "init") % 2**63)
        model = build_point_model(recipe, len(names))
        opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
        invariant = model if isinstance(model, DistanceNet) else None
        with torch.no_grad():  # DistanceNet's features have no parameters: once per whole cloud
            feats = invariant.features(clouds) if invariant is not None else None
        fps = _fps_variants(clouds, m, subset) if recipe.arch == "dgcnn" else None
        model.train()
        for _ in range(int(recipe.epochs)):
            for idx in _batches(len(clouds), recipe.batch_size, shuffle):
                cosine_lr(opt, recipe.lr, len(losses), total)
                if invariant is not None and feats is not None:
                    logits = invariant.classify(feats[idx])
                else:
                    if fps is None:
                        x = subsample_points(clouds[idx], m, subset)
                    else:
                        x = fps[idx, torch.randint(len(fps[0]), (len(idx),), generator=subset)]
                    if recipe.augment == "so3":
                        x = rotate_clouds(x, random_rotations(len(idx), rotate))
                    logits = model(x)
                loss = F.cross_entropy(logits, labels[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                if progress is not None:
                    progress(len(losses), total, losses[-1])
    model.eval()
    return model, {"recipe_key": recipe.key(), "arch": recipe.arch, "augment": recipe.augment,
                   "augment_applied": recipe.augment != "none" and invariant is None, "train_clouds": len(clouds),
                   "points_per_cloud": int(clouds.shape[1]),
                   "points_per_step": m if invariant is None and 0 < m < clouds.shape[1] else int(clouds.shape[1]),
                   "classes": names, "steps": len(losses), "first_loss": losses[0],
                   "final_loss": float(np.mean(losses[-5:]))}


def point_cache_path(recipe: PointCloudRecipe, cache_dir: str | os.PathLike[str]) -> Path:
    """Where :func:`cached_point_model` keeps the model of ``recipe``:
    ``<cache_dir>/<label>-<key>.safetensors``."""
    return Path(cache_dir) / f"{recipe.label}-{recipe.key()}.safetensors"


def cached_point_model(recipe: PointCloudRecipe, cache_dir: str | os.PathLike[str],
                       progress: ProgressFn | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """The trained model of ``recipe`` from ``cache_dir`` (trained and saved when absent or
    unusable); ``info["from_cache"]`` says which."""
    return load_or_train(point_cache_path(recipe, cache_dir), recipe.key(), asdict(recipe),
                         lambda: train_point_model(recipe, progress))


@torch.no_grad()
def point_accuracy(model: nn.Module, data: Any, batch_size: int = 64) -> float:
    """Top-1 accuracy of ``model`` (put in eval mode) on whole clouds: ``data`` is a data spec, a
    dataset of ``(points, label)`` or a tuple ``(clouds (M, N, 3), labels (M,))``."""
    if isinstance(data, str):
        data = _parse(data)
    if isinstance(data, tuple) and len(data) == 2 and torch.is_tensor(data[0]) and data[0].ndim == 3:
        clouds, labels = data[0].float(), torch.as_tensor(data[1]).long()
    else:
        clouds, labels = stack_clouds(data)
    model.eval()
    correct = 0
    for s in range(0, len(clouds), int(batch_size)):
        correct += int((model(clouds[s:s + batch_size]).argmax(1) == labels[s:s + batch_size]).sum())
    return correct / len(clouds)
