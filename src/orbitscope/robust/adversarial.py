"""A small adversarially trained MNIST classifier: our PGD recipe, deterministic and cached.

Recipe (:data:`ADVERSARIAL_RECIPES`\\ ``["pgd"]``): PGD adversarial training in the style of
Madry et al. (arXiv 1706.06083): every mini-batch is replaced by its L∞ PGD adversarial
examples (``torchattacks.PGD``: random start in the ε-box, ``steps`` signed-gradient steps of
``step_size``, projection and clipping to [0, 1]; generated with the model in eval mode, as
torchattacks does) and the model takes an Adam step on their cross-entropy. ε ramps linearly
from 0 over the first ``warmup_epochs`` (per batch), which lets a small CNN trained from scratch
leave the trivial solution at large ε. Defaults: ε = 0.2, 5 steps of 2.5·ε/5, 4 epochs on the
4,000 training digits of :func:`orbitscope.data.mnist_subset`, with a narrower reference CNN
(widths 8, 8, 16, 16, 32, 32; hidden 64) than the plain recipes to keep training near a
minute or two on one CPU thread.

Determinism: ``torch.manual_seed(seed)`` before building the model (initialisation and PGD's
random starts use the global generator), a separate seeded generator shuffles; training runs on
one intra-op thread. Models are cached like :func:`orbitscope.training.recipes.cached_reference_model`:
``<cache_dir>/<name>-<key>.safetensors`` with the recipe and training info in the metadata;
the default cache dir is ``<$ORBITSCOPE_HOME or ./orbitscope-runs>/models``.

Needs torchattacks (``pip install --no-deps torchattacks``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from ..models.reference import default_config, model_device, model_hash
from ..models.registry import build_model
from ..training.recipes import TrainRecipe, derive_seed, fit_epochs, load_or_train, training_data

__all__ = [
    "AdversarialRecipe",
    "ADVERSARIAL_RECIPES",
    "train_adversarial_model",
    "cached_adversarial_model",
    "adversarial_cache_path",
    "pgd_accuracy",
    "default_cache_dir",
]

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int, float], None]


def _small_arch() -> dict[str, Any]:
    return {**default_config(), "widths": [8, 8, 16, 16, 32, 32], "hidden": 64}


@dataclass(frozen=True)
class AdversarialRecipe:
    """Everything that determines a PGD-trained model (see the module docstring).

    Attributes:
        name: label in cache file names (``<name>-<key>.safetensors``).
        arch: model config for :func:`orbitscope.models.build_model`.
        data: training data id (as :class:`orbitscope.training.recipes.TrainRecipe`).
        n_train: first ``n_train`` training images (None: all 4,000 of the MNIST subset).
        epochs, lr, batch_size, seed: Adam training as in the reference recipes.
        eps: L∞ radius of the training attack (pixel values in [0, 1]).
        steps: PGD steps per batch.
        step_size: PGD step; None means 2.5·eps/steps (Madry et al.'s heuristic).
        warmup_epochs: ε ramps linearly from 0 to ``eps`` over this many epochs (0: no ramp).
    """

    name: str = "pgd"
    arch: dict[str, Any] = field(default_factory=_small_arch)
    data: str = "mnist-subset"
    n_train: int | None = None
    epochs: int = 4
    lr: float = 3e-3
    batch_size: int = 128
    seed: int = 0
    eps: float = 0.2
    steps: int = 5
    step_size: float | None = None
    warmup_epochs: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.arch, Mapping) or "arch" not in self.arch:
            raise ValueError(f"arch must be a model config dict with an 'arch' key, got {self.arch!r}")
        object.__setattr__(self, "arch", json.loads(json.dumps(dict(self.arch), sort_keys=True)))
        for f, typ in (("epochs", int), ("batch_size", int), ("seed", int), ("steps", int), ("lr", float),
                       ("eps", float), ("warmup_epochs", float)):
            object.__setattr__(self, f, typ(getattr(self, f)))
        if self.epochs < 1 or self.batch_size < 1 or self.steps < 1:
            raise ValueError("epochs, batch_size and steps must be >= 1")
        if not (0 < self.eps <= 1) or not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"eps must be in (0, 1] and lr positive, got eps={self.eps}, lr={self.lr}")
        if self.step_size is None:
            object.__setattr__(self, "step_size", 2.5 * self.eps / self.steps)
        if not (float(self.step_size) > 0):  # type: ignore[arg-type]
            raise ValueError(f"step_size must be positive, got {self.step_size}")
        object.__setattr__(self, "step_size", float(self.step_size))  # type: ignore[arg-type]
        if self.warmup_epochs < 0:
            raise ValueError(f"warmup_epochs must be >= 0, got {self.warmup_epochs}")
        if not self.name or "/" in self.name or os.sep in self.name:
            raise ValueError(f"name must be a non-empty file-name-safe string, got {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "pgd-adversarial", **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AdversarialRecipe:
        return cls(**{k: v for k, v in d.items() if k != "kind"})

    def key(self) -> str:
        """Short stable hash (12 hex chars) of all fields, for cache file names."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def data_recipe(self) -> TrainRecipe:
        """The plain recipe with the same data (for :func:`orbitscope.training.recipes.training_data`)."""
        return TrainRecipe(name=self.name, arch=self.arch, data=self.data, n_train=self.n_train)


#: Named presets.
ADVERSARIAL_RECIPES: dict[str, AdversarialRecipe] = {"pgd": AdversarialRecipe()}


def default_cache_dir() -> Path:
    """``<$ORBITSCOPE_HOME or ./orbitscope-runs>/models`` (where the demo caches its models)."""
    from ..results.store import default_home

    return default_home() / "models"


def _require_torchattacks() -> Any:
    try:
        import torchattacks
    except ImportError as exc:
        raise ImportError("adversarial training uses torchattacks' PGD: pip install --no-deps torchattacks "
                          "(--no-deps keeps your torch)") from exc
    return torchattacks


def pgd_accuracy(
    model: nn.Module, images: Tensor, labels: Tensor, *, eps: float, steps: int = 10, step_size: float | None = None,
    batch_size: int = 256, seed: int = 0,
) -> float:
    """Accuracy (fraction) of ``model`` on ``torchattacks.PGD`` adversarial examples (L∞, random start).

    ``step_size`` defaults to 2.5·eps/steps. The global torch RNG (PGD's random start) is seeded
    with ``seed`` inside a forked RNG state, so the caller's RNG is untouched.
    """
    ta = _require_torchattacks()
    if len(images) == 0:
        raise ValueError("no images to attack")
    device = model_device(model)
    atk = ta.PGD(model, eps=eps, alpha=step_size if step_size is not None else 2.5 * eps / steps, steps=steps,
                 random_start=True)
    correct = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for s in range(0, len(images), batch_size):
            x, y = images[s : s + batch_size].to(device), labels[s : s + batch_size].to(device)
            adv = atk(x, y)
            with torch.no_grad():
                correct += int((model(adv).argmax(1) == y).sum())
    return correct / len(images)


def _train(model: nn.Module, dataset: Dataset, recipe: AdversarialRecipe, progress: ProgressFn | None) -> dict[str, Any]:
    ta = _require_torchattacks()
    shuffle_gen = torch.Generator().manual_seed(derive_seed(recipe.seed, "shuffle"))
    loader = DataLoader(dataset, batch_size=recipe.batch_size, shuffle=True, generator=shuffle_gen, num_workers=0)
    device = model_device(model)
    atk = ta.PGD(model, eps=recipe.eps, alpha=recipe.step_size, steps=recipe.steps, random_start=True)
    warmup = recipe.warmup_epochs * len(loader)
    step = 0

    def adversarial(images: Tensor, labels: Tensor) -> Tensor:
        nonlocal step
        frac = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
        atk.eps, atk.alpha = recipe.eps * frac, recipe.step_size * frac  # type: ignore[operator]
        step += 1
        return atk(images.to(device), labels.to(device))  # eval mode inside, training mode restored

    metrics = fit_epochs(model, loader, epochs=recipe.epochs, lr=recipe.lr, batch_inputs=adversarial,
                         progress=progress, what="adversarial")
    metrics["adversarial_train_accuracy"] = metrics.pop("train_accuracy")
    return metrics


def train_adversarial_model(
    recipe: AdversarialRecipe, progress: ProgressFn | None = None, *, num_threads: int | None = 1, n_eval_pgd: int = 200,
) -> tuple[nn.Module, dict[str, Any]]:
    """Train ``recipe``'s model (eval mode on return) and measure it on the held-out digits.

    ``info`` holds the recipe and key, training metrics, ``test_accuracy`` (clean, all test
    images), ``pgd_test_accuracy`` (PGD-10 at the recipe's ε on ``n_eval_pgd`` test images
    spread evenly over the split), data ids, the model hash and the torch version.
    """
    old_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    try:
        train_set, test_set = training_data(recipe.data_recipe())
        torch.manual_seed(recipe.seed)
        model = build_model(recipe.arch)
        metrics = _train(model, train_set, recipe, progress)
        x = torch.stack([test_set[i][0] for i in range(len(test_set))])
        y = torch.as_tensor([test_set[i][1] for i in range(len(test_set))])
        with torch.no_grad():
            clean = float((model(x).argmax(1) == y).float().mean())
        k = min(n_eval_pgd, len(x))
        pick = torch.linspace(0, len(x) - 1, k).round().long()  # spread over the split (it is ordered by class)
        robust = pgd_accuracy(model, x[pick], y[pick], eps=recipe.eps, steps=10, seed=recipe.seed)
    finally:
        torch.set_num_threads(old_threads)
    info = {
        "recipe": recipe.to_dict(),
        "recipe_key": recipe.key(),
        **metrics,
        "test_accuracy": clean,
        "pgd_test_accuracy": robust,
        "pgd_test_n": k,
        "train_data_id": train_set.data_id,
        "test_data_id": test_set.data_id,
        "model_hash": model_hash(model),
        "torch_version": torch.__version__,
    }
    logger.info("adversarial recipe %s (%s): clean %.4f, PGD %.4f, %.1f s", recipe.name, recipe.key(), clean, robust,
                metrics["train_seconds"])
    return model, info


def _recipe(recipe: AdversarialRecipe | str) -> AdversarialRecipe:
    if isinstance(recipe, str):
        if recipe not in ADVERSARIAL_RECIPES:
            raise ValueError(f"unknown adversarial recipe {recipe!r}; known: {sorted(ADVERSARIAL_RECIPES)}")
        return ADVERSARIAL_RECIPES[recipe]
    return recipe


def adversarial_cache_path(recipe: AdversarialRecipe | str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Cache file of a recipe: ``<cache_dir>/<name>-<key>.safetensors`` (cache_dir: :func:`default_cache_dir`)."""
    recipe = _recipe(recipe)
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / f"{recipe.name}-{recipe.key()}.safetensors"


def cached_adversarial_model(
    recipe: AdversarialRecipe | str = "pgd",
    cache_dir: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    *,
    n_eval_pgd: int = 200,
) -> tuple[nn.Module, dict[str, Any]]:
    """Load ``recipe``'s model from ``cache_dir`` (default :func:`default_cache_dir`), training
    and saving it first if absent or unusable (``n_eval_pgd`` as in :func:`train_adversarial_model`).
    ``info["from_cache"]`` says which happened."""
    recipe = _recipe(recipe)
    path = adversarial_cache_path(recipe, cache_dir)
    return load_or_train(path, recipe.key(), recipe.to_dict(),
                         lambda: train_adversarial_model(recipe, progress=progress, n_eval_pgd=n_eval_pgd))
