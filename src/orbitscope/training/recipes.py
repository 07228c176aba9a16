"""Deterministic training of small reference classifiers (with optional rotation augmentation).

Conventions
-----------
* Datasets yield ``(float32 image (C, H, W) in [0, 1], int label)``.
* Angles are in degrees, positive = counter-clockwise as displayed
  (applied with :func:`orbitscope.kinds.rotate_images`, bilinear, zero padding).
* Training is deterministic for ``recipe.seed`` on a given torch build and thread
  count (default: 1 intra-op thread while training): the global torch seed is set,
  and separate seeded ``torch.Generator`` s drive shuffling and augmentation
  angles. Data loading is single-process.
* Accuracies are fractions in ``[0, 1]``; times are wall-clock seconds.

Augmentations (per sample, fresh every batch):

* ``"none"``: upright images only.
* ``"uniform"``: angle ~ Uniform(-max_angle, max_angle); with ``min_angle`` > 0 the magnitude is
  Uniform(min_angle, max_angle) with a random sign, leaving a gap (-min_angle, min_angle).
* ``"normal90"``: NERO's scheme, angle ~ Normal(0, 90) truncated to [-180, 180]
  by resampling values outside, so upright digits stay over-represented.
* ``"nero-normal90"``: NERO's draw exactly as its code made it, whole degrees:
  ``rint(90 * truncnorm(-2, 2))``, i.e. the ``"normal90"`` angle rounded to the nearest integer
  (half to even), so every angle is one of -180, -179, …, 180 (Zhao et al., arXiv 2305.19889).

Training data (``recipe.data``):

* ``"mnist-subset"``: the 4,000 training digits of :func:`orbitscope.data.mnist_subset`
  (with ``n_train`` set: the first ``n_train // 10`` of each class, as that split is ordered by
  class); tested on its 1,000 held-out digits.
* ``"fashion-mnist"``: the first ``n_train`` (default 6,000) images of the Fashion-MNIST
  training set; tested on a stratified 1,000 images of its test set (the first 100 of each
  class, :func:`fashion_test_subset`).

Deliberate defects (for model zoos, applied to the training set only, seeded by the recipe seed):

* ``label_noise`` = q: a fraction q of the training labels is replaced by a different class
  drawn uniformly at random;
* ``class_imbalance`` = r: a fraction r of the images of the upper half of the classes
  (labels >= num_classes // 2) is dropped;
* ``noise_images`` = u: u × (training images) images of uniform noise with random labels are
  added;
* ``leakage`` = l: the first l × (test images) of the test set, with their labels, are added to
  the training set (test-set leakage: the reported test accuracy is inflated);
* ``ordered_batches``: the training set is sorted by label and read in that order, unshuffled;
* ``fgsm_eps`` = ε: FGSM adversarial training: every batch (after augmentation) is replaced by
  ``clamp(x + ε · sign(∇ₓ loss), 0, 1)`` for the current model;
* ``pretrain_data``: the model is first trained on another dataset (the same recipe with that
  data, its default size, and no defects), then fine-tuned on this one.

These are ML4ML's database anomalies (arXiv 2109.12926); all default to off, and recipes that
use none of them keep their keys and train exactly as before.

Architectures are any registered config, e.g. the reference CNN,
:class:`orbitscope.models.equivariant.P4CNN` (``{"arch": "p4cnn"}``), the C8-equivariant
:class:`orbitscope.models.c8.C8CNN` (``{"arch": "c8cnn"}``) or NERO's own MNIST CNN
:class:`orbitscope.models.nero_cnn.NeroCNN` (``{"arch": "nero-cnn"}``); see :data:`EXTRA_RECIPES`.

NERO's two MNIST models (``EXTRA_RECIPES["nero-cnn"]`` and ``["nero-cnn-normal90"]``): NERO trained
them with Adam, lr 5e-5, weight decay 1e-5, batch 64 on a 50,000-digit split. Our recipes keep
Adam, the weight decay and the batch size, but train on the 4,000-digit MNIST subset for a few
epochs (3 upright, 6 augmented: both fit in about two minutes, one CPU thread each), with one
larger learning rate for both, 7e-4: at NERO's 5e-5 the plain model still converges in 3 epochs,
but the augmented one lags (measured accuracies beside the recipes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from ..models.loading import load_model, read_metadata, save_model
from ..models.reference import default_config, model_device, model_hash
from ..models.registry import build_model

__all__ = [
    "cosine_lr",
    "AUGMENTATIONS",
    "sample_offsets",
    "augment_batch",
    "fgsm",
    "TrainRecipe",
    "RECIPES",
    "EXTRA_RECIPES",
    "DATASETS",
    "all_recipes",
    "training_data",
    "fashion_test_subset",
    "sample_angles",
    "with_defects",
    "train_classifier",
    "evaluate_accuracy",
    "train_reference_model",
    "cached_reference_model",
    "cache_path",
    "load_or_train",
    "fit_epochs",
    "derive_seed",
]

logger = logging.getLogger(__name__)

#: The rotation augmentations a :class:`TrainRecipe` may name (see the module docstring).
AUGMENTATIONS = ("none", "uniform", "normal90", "nero-normal90")
#: Training data ids understood by :func:`train_reference_model`.
DATASETS = ("mnist-subset", "fashion-mnist")
#: Default number of Fashion-MNIST training images (keeps training near a minute on one thread).
FASHION_N_TRAIN = 6000
ProgressFn = Callable[[int, int, float], None]


@dataclass(frozen=True)
class TrainRecipe:
    """Everything that determines a trained reference model.

    Attributes:
        name: label used in cache file names (``<name>-<key>.safetensors``).
        arch: model config for :func:`orbitscope.models.build_model`.
        data: training data id, one of :data:`DATASETS` (see the module docs).
        n_train: use only the first ``n_train`` training images; ``None`` means all of the
            MNIST subset (4,000) and is replaced by 6,000 for ``"fashion-mnist"``.
        epochs: passes over the training set.
        lr: Adam learning rate.
        weight_decay: Adam weight decay (L2 penalty added to the gradients, ``torch.optim.Adam``'s).
        batch_size: mini-batch size.
        seed: seeds model init, shuffling and augmentation angles.
        augmentation: one of :data:`AUGMENTATIONS` (see module docs).
        max_angle: half-width in degrees of the ``"uniform"`` range.
        min_angle: with ``"uniform"``, the smallest angle magnitude drawn (a gap around 0°).
        label_noise: fraction of training labels replaced by a random other class.
        class_imbalance: fraction of the upper-half classes' training images dropped.
        scale_range: ``(lo, hi)``: each training image is also scaled by a factor 1 + δ with
            |δ| uniform in [lo, hi] and a random sign (lo = 0: δ uniform in [−hi, hi]; lo > 0
            leaves a gap around factor 1); ``(0, 0)`` (default): no scaling. E.g. ``(0, 0.3)``
            covers ML4ML's scale test 0.70…1.30.
        brightness_range: the same for a brightness gain 1 + δ (values multiplied, then clipped
            to [0, 1], as the ``brightness`` orbit acts).
        noise_images, leakage, ordered_batches, fgsm_eps, pretrain_data: deliberate defects
            (see the module docs).
    """

    name: str = "reference"
    arch: dict[str, Any] = field(default_factory=default_config)
    data: str = "mnist-subset"
    epochs: int = 6
    lr: float = 3e-3
    batch_size: int = 128
    seed: int = 0
    augmentation: str = "none"
    max_angle: float = 180.0
    n_train: int | None = None
    min_angle: float = 0.0
    label_noise: float = 0.0
    class_imbalance: float = 0.0
    weight_decay: float = 0.0
    scale_range: tuple[float, float] = (0.0, 0.0)
    brightness_range: tuple[float, float] = (0.0, 0.0)
    noise_images: float = 0.0
    leakage: float = 0.0
    ordered_batches: bool = False
    fgsm_eps: float = 0.0
    pretrain_data: str | None = None

    def __post_init__(self) -> None:
        if self.augmentation not in AUGMENTATIONS:
            raise ValueError(f"augmentation must be one of {AUGMENTATIONS}, got {self.augmentation!r}")
        if not isinstance(self.arch, Mapping) or "arch" not in self.arch:
            raise ValueError(f"arch must be a model config dict with an 'arch' key, got {self.arch!r}")
        if int(self.epochs) < 1 or int(self.batch_size) < 1:
            raise ValueError("epochs and batch_size must be >= 1")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be positive and finite, got {self.lr}")
        if not (0 < self.max_angle <= 180):
            raise ValueError(f"max_angle must be in (0, 180] degrees, got {self.max_angle}")
        if not (0 <= self.min_angle < self.max_angle):
            raise ValueError(f"min_angle must be in [0, max_angle), got {self.min_angle}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"weight_decay must be >= 0 and finite, got {self.weight_decay}")
        if not (0 <= self.label_noise < 1) or not (0 <= self.class_imbalance < 1):
            raise ValueError("label_noise and class_imbalance must be fractions in [0, 1)")
        for f in ("scale_range", "brightness_range"):
            try:
                lo, hi = (float(v) for v in getattr(self, f))
            except (TypeError, ValueError):
                raise ValueError(f"{f} must be a pair (lo, hi) of offset magnitudes, got {getattr(self, f)!r}") from None
            if not ((lo == hi == 0.0) or 0.0 <= lo < hi < 1.0):
                raise ValueError(f"{f} must be (0, 0) (none) or 0 <= lo < hi < 1 (factors 1 ± [lo, hi]), got {(lo, hi)}")
            object.__setattr__(self, f, (lo, hi))
        for f in ("noise_images", "leakage"):
            v = float(getattr(self, f))
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{f} must be a fraction in [0, 1], got {v}")
            object.__setattr__(self, f, v)
        if not (0.0 <= float(self.fgsm_eps) < 1.0):
            raise ValueError(f"fgsm_eps must be in [0, 1) (a pixel-value radius), got {self.fgsm_eps}")
        object.__setattr__(self, "fgsm_eps", float(self.fgsm_eps))
        object.__setattr__(self, "ordered_batches", bool(self.ordered_batches))
        if self.pretrain_data is not None and (self.pretrain_data not in DATASETS or self.pretrain_data == self.data):
            raise ValueError(f"pretrain_data must be another of {DATASETS} than data ({self.data!r}), "
                             f"got {self.pretrain_data!r}")
        if not self.name or "/" in self.name or os.sep in self.name:
            raise ValueError(f"name must be a non-empty file-name-safe string, got {self.name!r}")
        # normalise to plain JSON types (tuples -> lists) so key() is stable
        object.__setattr__(self, "arch", json.loads(json.dumps(dict(self.arch), sort_keys=True)))
        for f, typ in (("epochs", int), ("batch_size", int), ("seed", int), ("lr", float), ("max_angle", float),
                       ("min_angle", float), ("label_noise", float), ("class_imbalance", float),
                       ("weight_decay", float)):
            object.__setattr__(self, f, typ(getattr(self, f)))
        if self.n_train is None and self.data == "fashion-mnist":
            object.__setattr__(self, "n_train", FASHION_N_TRAIN)
        if self.n_train is not None:
            if int(self.n_train) < 1:
                raise ValueError(f"n_train must be >= 1 (or None for all images), got {self.n_train}")
            object.__setattr__(self, "n_train", int(self.n_train))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of all fields (inverse of :meth:`from_dict`; the range pairs as lists)."""
        out = dataclasses.asdict(self)
        for f in ("scale_range", "brightness_range"):
            out[f] = list(out[f])
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainRecipe:
        """Rebuild a recipe from :meth:`to_dict` output (JSON lists become the range pairs)."""
        return cls(**dict(d))

    @property
    def augments_scale_or_brightness(self) -> bool:
        return self.scale_range[1] > 0 or self.brightness_range[1] > 0

    def key(self) -> str:
        """Short stable hash (12 hex chars) of all fields, for cache file names.

        Fields added later (``n_train``, ``min_angle``, ``label_noise``, ``class_imbalance``,
        ``weight_decay``) are
        left out of the hash while they have their defaults, so older recipes keep their keys (and
        their cached models).
        """
        fields = self.to_dict()
        for name, default in _LATER_FIELDS.items():
            if fields[name] == default or isinstance(default, tuple) and tuple(fields[name]) == default:
                del fields[name]
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def __hash__(self) -> int:
        return hash(self.key())


_LATER_FIELDS: dict[str, Any] = {"n_train": None, "min_angle": 0.0, "label_noise": 0.0, "class_imbalance": 0.0,
                                 "weight_decay": 0.0, "scale_range": (0.0, 0.0), "brightness_range": (0.0, 0.0),
                                 "noise_images": 0.0, "leakage": 0.0, "ordered_batches": False, "fgsm_eps": 0.0,
                                 "pretrain_data": None}

#: Named presets: upright training and the two rotation-augmented variants.
RECIPES: dict[str, TrainRecipe] = {
    "plain": TrainRecipe(name="plain"),
    "uniform": TrainRecipe(name="uniform", augmentation="uniform"),
    "normal90": TrainRecipe(name="normal90", augmentation="normal90"),
}

#: Further presets: the p4- and C8-equivariant CNNs, Fashion-MNIST models and NERO's own MNIST CNN
#: (:class:`~orbitscope.models.nero_cnn.NeroCNN`) upright and augmented (kept apart from
#: :data:`RECIPES`, whose three upright/augmented MNIST presets other code relies on).
_P4CNN = {"arch": "p4cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 16, 32], "hidden": 64}
_C8CNN = {"arch": "c8cnn", "in_channels": 1, "num_classes": 10, "widths": [4, 8, 8, 16], "hidden": 64, "kernel_size": 5}
_NERO_CNN = {"arch": "nero-cnn", "in_channels": 1, "num_classes": 10, "mean": 0.1307, "std": 0.3081}
EXTRA_RECIPES: dict[str, TrainRecipe] = {
    "p4cnn": TrainRecipe(name="p4cnn", arch=_P4CNN),
    # NERO's third MNIST model is a C8 steerable CNN (e2cnn); ours is C8CNN, trained upright like
    # the p4 CNN (the default recipe: Adam lr 3e-3, 6 epochs of the 4,000-digit subset, batch 128).
    # Measured (one torch thread on a busy 2-core CPU: 60-130 s; accuracy on the 1,000 held-out
    # digits at 0° / 22.5° / 45° / 90°): 0.965 / 0.926 / 0.891 / 0.965; the p4 CNN's:
    # 0.955 / 0.811 / 0.565 / 0.955. Ring harmonics up to m = 1 only (0.930 at 0°, 0.864 at 45°)
    # did not do better; neither did Gaussian-blurred 2×2 average pooling (0.960 / 0.874).
    "c8cnn": TrainRecipe(name="c8cnn", arch=_C8CNN),
    "fashion-plain": TrainRecipe(name="fashion-plain", data="fashion-mnist"),
    "fashion-normal90": TrainRecipe(name="fashion-normal90", data="fashion-mnist", augmentation="normal90"),
    "fashion-p4cnn": TrainRecipe(name="fashion-p4cnn", data="fashion-mnist", arch=_P4CNN),
    # NERO's MNIST pair (Zhao et al., arXiv 2305.19889): its plain CNN, upright and with its
    # whole-degree truncated-normal angles. NERO: Adam lr 5e-5, weight decay 1e-5, batch 64 on
    # 50,000 digits. Here: the 4,000-digit subset for 3 and 6 epochs (63 steps each), keeping
    # the weight decay and the batch size, and one lr for both, 7e-4: at NERO's 5e-5 the
    # augmented model lags within that budget. Measured (one torch thread each, side by side on
    # a 2-core CPU; accuracy on the 1,000 held-out digits at 0° / 90° / 180°):
    #   lr 7e-4: plain 3 epochs ≈ 35-45 s, 0.974 / 0.164 / 0.362; augmented 6 epochs ≈ 100 s,
    #            0.939 / 0.917 / 0.874 (the presets);
    #   lr 5e-5: plain 0.978 / 0.128 / 0.383; augmented 0.927 / 0.903 / 0.767;
    #   also lr 1e-3 (plain 0.957 at 4 epochs, augmented 0.925), 3e-3 (0.953; 0.899 at 5 epochs),
    #   5e-4 (0.974; 0.932 at 7 epochs).
    "nero-cnn": TrainRecipe(name="nero-cnn", arch=_NERO_CNN, epochs=3, lr=7e-4, batch_size=64, weight_decay=1e-5),
    "nero-cnn-normal90": TrainRecipe(name="nero-cnn-normal90", arch=_NERO_CNN, augmentation="nero-normal90",
                                     epochs=6, lr=7e-4, batch_size=64, weight_decay=1e-5),
}


def all_recipes() -> dict[str, TrainRecipe]:
    """:data:`RECIPES` and :data:`EXTRA_RECIPES` together, by name."""
    return {**RECIPES, **EXTRA_RECIPES}


def cosine_lr(opt: torch.optim.Optimizer, lr: float, step: int, total: int) -> None:
    """Set every parameter group's learning rate to the cosine decay from ``lr`` at step 0 to 0 at
    step ``total`` (Loshchilov & Hutter 2017, SGDR, without restarts)."""
    for group in opt.param_groups:
        group["lr"] = 0.5 * lr * (1.0 + math.cos(math.pi * step / max(total, 1)))


def derive_seed(seed: int, purpose: str) -> int:
    """Independent 63-bit seed for one purpose (shuffling, augmentation) from the recipe seed."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{purpose}".encode()).digest()[:8], "little") >> 1


def sample_angles(
    augmentation: str, n: int, *, generator: torch.Generator, max_angle: float = 180.0, min_angle: float = 0.0
) -> Tensor:
    """Draw ``n`` rotation angles (degrees, float32, shape ``(n,)``) for an augmentation scheme.

    ``"none"`` gives zeros; ``"uniform"`` Uniform(-max_angle, max_angle), or with ``min_angle`` > 0
    a magnitude Uniform(min_angle, max_angle) with a random sign;
    ``"normal90"`` Normal(0, 90) resampled until inside [-180, 180]; ``"nero-normal90"`` the same
    draw rounded to whole degrees (``torch.round``: half to even, as NumPy's ``rint``), i.e. NERO's
    ``rint(90 * truncnorm(-2, 2))``, integers in [-180, 180] stored as float32.
    """
    if augmentation == "none":
        return torch.zeros(n)
    if augmentation == "uniform":
        if min_angle == 0:  # the original draw, kept so existing recipes reproduce exactly
            return (torch.rand(n, generator=generator) * 2.0 - 1.0) * float(max_angle)
        magnitude = min_angle + torch.rand(n, generator=generator) * (max_angle - min_angle)
        sign = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
        return sign * magnitude
    if augmentation == "nero-normal90":
        # the "normal90" draw itself (same generator use), then whole degrees
        return torch.round(sample_angles("normal90", n, generator=generator))
    if augmentation == "normal90":  # unchanged: existing cached models and run ids depend on it
        out = torch.randn(n, generator=generator) * 90.0
        bad = out.abs() > 180.0
        while bool(bad.any()):
            out[bad] = torch.randn(int(bad.sum()), generator=generator) * 90.0
            bad = out.abs() > 180.0
        return out
    raise ValueError(f"augmentation must be one of {AUGMENTATIONS}, got {augmentation!r}")


def sample_offsets(n: int, lo: float, hi: float, *, generator: torch.Generator) -> Tensor:
    """``n`` offsets δ (float32): uniform in [−hi, hi] for lo = 0, else |δ| uniform in [lo, hi]
    with a random sign (a gap around 0); zeros for hi = 0."""
    if hi == 0:
        return torch.zeros(n)
    if lo == 0:
        return (torch.rand(n, generator=generator) * 2.0 - 1.0) * float(hi)
    magnitude = lo + torch.rand(n, generator=generator) * (hi - lo)
    return torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0) * magnitude


def augment_batch(images: Tensor, angles: Tensor, scales: Tensor, gains: Tensor) -> Tensor:
    """Rotate (degrees, CCW), scale (factors about the centre) and brighten (gains, then clip to
    [0, 1]) each image of (B, C, H, W) by its own values, in one warp, as the rotation, scale
    and brightness orbits act."""
    from ..group.elements import Transforms, rotation_matrix
    from ..kinds import warp_images

    lin = rotation_matrix(angles.double().numpy()) * scales.double().numpy()[:, None, None]
    t = Transforms.create(len(angles), linear=lin, gain=gains.double().numpy())
    return warp_images(images, t, layout="paired")


def _rotate(images: Tensor, angles: Tensor) -> Tensor:
    from ..kinds import rotate_images  # imported lazily: keeps this module importable on its own

    return rotate_images(images, angles)


def train_classifier(
    model: nn.Module,
    dataset: Dataset,
    recipe: TrainRecipe,
    progress: ProgressFn | None = None,
    *,
    num_threads: int | None = 1,
    channels_last: bool = True,
) -> dict[str, Any]:
    """Train ``model`` in place with Adam + cross-entropy following ``recipe``.

    Uses ``recipe.epochs``, ``lr``, ``batch_size``, ``seed`` and ``augmentation``
    (``recipe.arch``/``data`` are not used here). Batches are shuffled by a seeded
    generator (single-process ``DataLoader``); augmentation rotates each image of a
    batch by its own angle. The model is left in eval mode.

    Args:
        progress: optional ``progress(epoch, n_epochs, mean_loss)`` called after
            each epoch (``epoch`` counts from 1).
        num_threads: torch intra-op threads while training (restored afterwards);
            ``None`` keeps the current setting. The default 1 is fastest for these
            small models on a busy few-core CPU (2 threads on a loaded 2-core machine
            can be ~10x slower) and makes results independent of the core count.
        channels_last: train in ``torch.channels_last`` memory format (~30% faster
            on CPU); the model is converted back to contiguous format afterwards.

    Returns:
        ``{"final_train_loss", "train_accuracy" (last epoch, on augmented batches),
        "loss_history" (per epoch), "epochs", "n_samples", "train_seconds"}``.
    """
    old_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    try:
        if channels_last:
            model.to(memory_format=torch.channels_last)
        return _train(model, dataset, recipe, progress)
    finally:
        if channels_last:
            model.to(memory_format=torch.contiguous_format)
        torch.set_num_threads(old_threads)


def _train(model: nn.Module, dataset: Dataset, recipe: TrainRecipe, progress: ProgressFn | None) -> dict[str, Any]:
    torch.manual_seed(recipe.seed)
    shuffle_gen = torch.Generator().manual_seed(derive_seed(recipe.seed, "shuffle"))
    aug_gen = torch.Generator().manual_seed(derive_seed(recipe.seed, "augmentation"))
    if recipe.ordered_batches:  # a defect: sorted by label, never shuffled
        import numpy as np

        order = np.argsort(np.asarray(dataset.labels), kind="stable")  # type: ignore[attr-defined]
        loader = DataLoader(torch.utils.data.Subset(dataset, order.tolist()), batch_size=recipe.batch_size,
                            shuffle=False, num_workers=0)
    else:
        loader = DataLoader(dataset, batch_size=recipe.batch_size, shuffle=True, generator=shuffle_gen, num_workers=0)

    scale_gen = torch.Generator().manual_seed(derive_seed(recipe.seed, "scale-augmentation"))
    gain_gen = torch.Generator().manual_seed(derive_seed(recipe.seed, "brightness-augmentation"))

    def augment(images: Tensor, labels: Tensor) -> Tensor:
        if recipe.augmentation == "none" and not recipe.augments_scale_or_brightness:
            return images
        n = len(labels)
        angles = sample_angles(recipe.augmentation, n, generator=aug_gen, max_angle=recipe.max_angle,
                               min_angle=recipe.min_angle)
        if not recipe.augments_scale_or_brightness:  # rotation only: the original path, bit for bit
            return _rotate(images, angles)
        scales = 1.0 + sample_offsets(n, *recipe.scale_range, generator=scale_gen)
        gains = 1.0 + sample_offsets(n, *recipe.brightness_range, generator=gain_gen)
        return augment_batch(images, angles, scales, gains)

    def inputs(images: Tensor, labels: Tensor) -> Tensor:
        images = augment(images, labels)
        return fgsm(model, images, labels, recipe.fgsm_eps) if recipe.fgsm_eps > 0 else images

    return fit_epochs(model, loader, epochs=recipe.epochs, lr=recipe.lr, batch_inputs=inputs, progress=progress,
                      weight_decay=recipe.weight_decay)


def fgsm(model: nn.Module, images: Tensor, labels: Tensor, eps: float) -> Tensor:
    """FGSM examples (Goodfellow et al., arXiv 1412.6572): ``clamp(x + eps · sign(∇ₓ CE(f(x), y)),
    0, 1)`` for the model as it is (its mode and parameter gradients are left untouched)."""
    device = model_device(model)
    x = images.detach().to(device).requires_grad_(True)
    loss = nn.functional.cross_entropy(model(x), labels.to(device))
    (grad,) = torch.autograd.grad(loss, x)
    return (x + eps * grad.sign()).clamp(0.0, 1.0).detach().to(images.device)


def fit_epochs(
    model: nn.Module,
    loader: DataLoader,
    *,
    epochs: int,
    lr: float,
    batch_inputs: Callable[[Tensor, Tensor], Tensor],
    progress: ProgressFn | None = None,
    what: str = "train",
    weight_decay: float = 0.0,
) -> dict[str, Any]:
    """Adam (learning rate ``lr``, ``weight_decay``) + cross-entropy over ``epochs`` passes of
    ``loader``; the model trains on ``batch_inputs(images, labels)`` of each batch (augmented
    images, adversarial examples, …; called before the batch moves to the model's device).
    Leaves the model in eval mode.

    Returns ``{"final_train_loss", "train_accuracy" (last epoch, on the trained-on inputs),
    "loss_history", "epochs", "n_samples", "train_seconds"}``.
    """
    device = model_device(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    history: list[float] = []
    correct = seen = 0
    t0 = time.perf_counter()
    model.train()
    for epoch in range(1, epochs + 1):
        total, correct, seen = 0.0, 0, 0
        for images, labels in loader:
            images = batch_inputs(images, labels)
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            logits = model(images)
            loss = loss_fn(logits, labels)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(labels)
            correct += int((logits.detach().argmax(1) == labels).sum())
            seen += len(labels)
        if seen == 0:
            raise ValueError("training dataset is empty")
        history.append(total / seen)
        logger.info("%s epoch %d/%d: loss %.4f, accuracy %.4f", what, epoch, epochs, history[-1], correct / seen)
        if progress is not None:
            progress(epoch, epochs, history[-1])
    model.eval()
    return {
        "final_train_loss": history[-1],
        "train_accuracy": correct / seen,
        "loss_history": history,
        "epochs": epochs,
        "n_samples": seen,
        "train_seconds": time.perf_counter() - t0,
    }


@torch.no_grad()
def evaluate_accuracy(
    model: nn.Module, dataset: Dataset, *, angle_deg: float = 0.0, batch_size: int = 500
) -> float:
    """Top-1 accuracy (fraction) of ``model`` (eval mode) on ``dataset`` rotated by ``angle_deg``."""
    model.eval()
    device = model_device(model)
    correct = seen = 0
    for images, labels in DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0):
        if angle_deg != 0.0:
            images = _rotate(images, torch.full((len(labels),), float(angle_deg)))
        pred = model(images.to(device)).argmax(1).cpu()
        correct += int((pred == labels).sum())
        seen += len(labels)
    if seen == 0:
        raise ValueError("evaluation dataset is empty")
    return correct / seen


def fashion_test_subset(per_class: int = 100) -> Dataset:
    """The first ``per_class`` images of each class of the Fashion-MNIST test set (index order)."""
    from ..data.datasets import fashion_mnist

    return fashion_mnist("test").stratified(per_class)


def training_data(recipe: TrainRecipe) -> tuple[Dataset, Dataset]:
    """``(train set, test set)`` of a recipe (see the module docs); both have a ``data_id``."""
    if recipe.data not in DATASETS:
        raise ValueError(f"unknown training data {recipe.data!r}; supported: {DATASETS}")
    from ..data.datasets import fashion_mnist, mnist_subset

    if recipe.data == "mnist-subset":
        train, test = mnist_subset("train"), mnist_subset("test")
    else:
        train, test = fashion_mnist("train"), fashion_test_subset()
    if recipe.n_train is not None:
        if recipe.n_train > len(train):
            raise ValueError(f"n_train={recipe.n_train} exceeds the {len(train)} training images of {recipe.data!r}")
        if recipe.n_train < len(train) and recipe.data == "mnist-subset":
            # its training split is ordered by class: take the first n_train/10 digits of each class
            train = train.stratified(recipe.n_train // 10)
        elif recipe.n_train < len(train):
            train = train.subset(slice(0, recipe.n_train), data_id=f"{train.data_id}[:{recipe.n_train}]")
    return with_defects(train, recipe, test), test


def with_defects(train: Any, recipe: TrainRecipe, test: Any = None) -> Any:
    """``train`` with the recipe's class imbalance, label noise, noise images and test-set
    leakage (from ``test``) applied (see the module docs); unchanged when none is set.
    Deterministic for the recipe seed."""
    if recipe.noise_images > 0 or recipe.leakage > 0:
        train = _added_images(with_defects(train, dataclasses.replace(recipe, noise_images=0.0, leakage=0.0)),
                              recipe, test)
        return train
    if recipe.label_noise == 0 and recipe.class_imbalance == 0:
        return train
    import numpy as np

    from ..data.datasets import ArrayDataset

    rng = np.random.default_rng(derive_seed(recipe.seed, "defects"))
    labels = np.asarray(train.labels)
    n_classes = int(labels.max()) + 1
    keep = np.ones(len(labels), bool)
    if recipe.class_imbalance > 0:
        upper = np.flatnonzero(labels >= n_classes // 2)
        drop = rng.choice(upper, size=int(round(recipe.class_imbalance * len(upper))), replace=False)
        keep[drop] = False
    idx = np.flatnonzero(keep)
    new_labels = labels[idx].copy()
    if recipe.label_noise > 0:
        flip = rng.random(len(idx)) < recipe.label_noise
        shift = rng.integers(1, n_classes, size=int(flip.sum()))  # a different class, uniformly
        new_labels[flip] = (new_labels[flip] + shift) % n_classes
    tag = f"[defects:noise{recipe.label_noise:g},imbalance{recipe.class_imbalance:g}]"
    return ArrayDataset(np.asarray(train.images)[idx], new_labels, f"{train.data_id}{tag}", train.classes)


def _added_images(train: Any, recipe: TrainRecipe, test: Any) -> Any:
    """``train`` plus the recipe's noise images (uniform, random labels) and leaked test images."""
    import numpy as np

    from ..data.datasets import ArrayDataset

    rng = np.random.default_rng(derive_seed(recipe.seed, "added-images"))
    images, labels = np.asarray(train.images), np.asarray(train.labels)
    n_classes = int(labels.max()) + 1
    parts, tags = [(images, labels)], []
    if recipe.noise_images > 0:
        k = int(round(recipe.noise_images * len(labels)))
        noise = rng.random((k, *images.shape[1:]))
        noise = (noise * 255).astype(np.uint8) if images.dtype == np.uint8 else noise.astype(images.dtype)
        parts.append((noise, rng.integers(0, n_classes, size=k)))
        tags.append(f"noise-images{recipe.noise_images:g}")
    if recipe.leakage > 0:
        if test is None:
            raise ValueError("leakage needs the test set to leak from")
        k = int(round(recipe.leakage * len(test)))
        leaked = np.asarray(test.images)[:k]
        if leaked.dtype != images.dtype:
            leaked = (leaked * 255).round().astype(np.uint8) if images.dtype == np.uint8 else leaked.astype(images.dtype)
        parts.append((leaked.reshape(k, *images.shape[1:]), np.asarray(test.labels)[:k]))
        tags.append(f"leakage{recipe.leakage:g}")
    return ArrayDataset(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]).astype(np.int64),
                        f"{train.data_id}[{','.join(tags)}]", getattr(train, "classes", None))


def train_reference_model(recipe: TrainRecipe, progress: ProgressFn | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Build ``recipe.arch`` (seeded), train on the recipe's data, test on its upright test set.

    Data per :func:`training_data`: the MNIST subset (train 4,000 / test 1,000) or Fashion-MNIST
    (first ``n_train`` training images / stratified 1,000 test images).

    Returns:
        ``(model in eval mode, info)``; ``info`` holds the recipe, its key, the
        training metrics of :func:`train_classifier`, ``test_accuracy``, the data
        ids, the model hash and the torch version.
    """
    train_set, test_set = training_data(recipe)
    torch.manual_seed(recipe.seed)
    model = build_model(recipe.arch)
    pretrained = None
    if recipe.pretrain_data is not None:  # a defect: trained on another dataset first, then fine-tuned
        base = TrainRecipe(name=f"{recipe.name}-pretrain", arch=recipe.arch, data=recipe.pretrain_data,
                           epochs=recipe.epochs, lr=recipe.lr, batch_size=recipe.batch_size, seed=recipe.seed)
        model, pretrained = train_reference_model(base)
        model.train()
    metrics = train_classifier(model, train_set, recipe, progress=progress)
    test_acc = evaluate_accuracy(model, test_set)
    logger.info("recipe %s (%s): test accuracy %.4f in %.1f s", recipe.name, recipe.key(), test_acc, metrics["train_seconds"])
    info: dict[str, Any] = {
        "recipe": recipe.to_dict(),
        "recipe_key": recipe.key(),
        **metrics,
        "test_accuracy": test_acc,
        "train_data_id": train_set.data_id,
        "test_data_id": test_set.data_id,
        "model_hash": model_hash(model),
        "torch_version": torch.__version__,
    }
    if pretrained is not None:
        info["pretrained"] = {k: pretrained[k] for k in ("recipe_key", "test_accuracy", "train_data_id", "model_hash")}
    return model, info


def cache_path(recipe: TrainRecipe, cache_dir: str | os.PathLike[str]) -> Path:
    """Cache file of a recipe: ``<cache_dir>/<name>-<key>.safetensors``."""
    return Path(cache_dir) / f"{recipe.name}-{recipe.key()}.safetensors"


def cached_reference_model(
    recipe: TrainRecipe, cache_dir: str | os.PathLike[str], progress: ProgressFn | None = None
) -> tuple[nn.Module, dict[str, Any]]:
    """Load the trained model of ``recipe`` from ``cache_dir``, training and saving it if absent.

    The file (see :func:`cache_path`) is written atomically with the model config,
    the recipe (``"recipe"``) and ``info`` (``"info"``) as JSON in its safetensors
    metadata. An unreadable or mismatching cache file is retrained and replaced.
    The returned ``info`` has ``"from_cache"`` set accordingly.
    """
    path = cache_path(recipe, cache_dir)
    return load_or_train(path, recipe.key(), recipe.to_dict(), lambda: train_reference_model(recipe, progress=progress))


def load_or_train(
    path: Path, recipe_key: str, recipe: dict[str, Any], train: Callable[[], tuple[nn.Module, dict[str, Any]]]
) -> tuple[nn.Module, dict[str, Any]]:
    """The model cached at ``path`` if its ``info["recipe_key"]`` is ``recipe_key``; otherwise
    ``train()`` it and save it atomically there (the recipe and info as safetensors metadata).
    An unreadable or mismatching file is retrained and replaced; ``info["from_cache"]`` says
    which happened."""
    if path.is_file():
        try:
            meta = read_metadata(path)
            info = json.loads(meta["info"])
            if info.get("recipe_key") != recipe_key:
                raise ValueError(f"cache file is for recipe {info.get('recipe_key')}, not {recipe_key}")
            model = load_model(path)
            logger.info("loaded cached model %s", path)
            return model, {**info, "from_cache": True}
        except Exception as exc:  # noqa: BLE001 - any unusable cache entry is rebuilt
            logger.warning("ignoring unusable cache file %s (%s); retraining", path, exc)
    model, info = train()
    info = {**info, "model_hash": info.get("model_hash") or model_hash(model)}  # the interface finds weights by it
    save_model(model, path, metadata={"recipe": recipe, "info": info})
    logger.info("saved trained model to %s", path)
    return model, {**info, "from_cache": False}
