"""Training recipe for the learned flow estimator (:class:`~orbitscope.models.FlowCNN`).

A :class:`FlowRecipe` fixes everything that determines the trained model: the training data (a
data spec string, e.g. ``"piv-synthetic:n=2000,size=64"``: pairs with exact ground truth), the
augmentation, the optimiser settings and the seed. ``augment="d4xt"`` draws, for every pair of
every batch, one of NERO's 16 elements of D4 × time reversal uniformly and applies it to the pair
(frames turned or mirrored, swapped under time reversal) and to its flow (vectors turned or
mirrored, negated under time reversal) through the same actions the evaluation uses, so the
model sees the group's orbit; ``augment="none"`` trains on the pairs as they are. Loss: the mean
endpoint error over the pixels with ground truth (NaN pixels and unlabelled pairs are skipped;
robust to the heavy tails of turbulent fields). Adam, fixed epochs, the learning rate constant
or (``schedule="cosine"``, the default) decaying to 0 along a cosine over the steps.

Models are cached by :func:`cached_flow_model` under ``<cache>/<name>-<key>.safetensors`` (the key
hashes the recipe), like the classification and detection recipes.

Cost and quality of the defaults (1,600 pairs, 20 epochs: 2,000 steps of 16 pairs, width 16, cosine
schedule), measured on this project's 2-core machine with one torch thread while other work ran:
458 s for the plain model; mean end-point error at the identity on 200 held-out pairs
(``piv-synthetic:n=200,size=64,seed=1``) 0.236 px against Farnebäck's 0.365 px (the previous
recipe, 960 pairs × 5 epochs at a constant rate, reached 0.428 px: worse than Farnebäck).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..group.parse import parse_orbit
from ..kinds.base import get_kind
from ..models.flow_cnn import FlowCNN
from .recipes import cosine_lr, derive_seed, load_or_train

__all__ = ["FlowRecipe", "train_flow_model", "cached_flow_model", "flow_cache_path", "augment_pairs"]

ProgressFn = Callable[[int, int, float], None]


@dataclass(frozen=True)
class FlowRecipe:
    """Everything that determines a trained :class:`FlowCNN`. ``name`` only labels the cache file."""

    name: str = "flow-cnn"
    data: str = "piv-synthetic:n=1600,size=64,seed=0"
    augment: str = "none"
    epochs: int = 20
    batch_size: int = 16
    lr: float = 2e-3
    width: int = 16
    schedule: str = "cosine"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine' (decay to 0 over the steps), got {self.schedule!r}")
        if self.augment not in ("none", "d4xt"):
            raise ValueError(f"augment must be 'none' or 'd4xt' (NERO's 16 elements), got {self.augment!r}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be at least 1")

    def key(self) -> str:
        d = asdict(self)
        d.pop("name")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def augment_pairs(frames: torch.Tensor, flow: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pair (and its flow) moved by one of the 16 elements of D4 × time reversal, drawn
    uniformly from ``generator``."""
    group = parse_orbit("d4xt").transforms()
    pick = torch.randint(len(group), (len(frames),), generator=generator)
    t = group[pick.tolist()]
    return (get_kind("frames").act(frames, t, layout="paired"), get_kind("flow").act(flow, t, layout="paired"))


def _stack(data: Any, index: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    items = [data[i] for i in index]
    frames = torch.stack([torch.as_tensor(np.asarray(it[0]), dtype=torch.float32) for it in items])
    flow = torch.stack([torch.as_tensor(np.asarray(it[1]), dtype=torch.float32) for it in items])
    return frames, flow


def train_flow_model(recipe: FlowRecipe, progress: ProgressFn | None = None) -> tuple[FlowCNN, dict[str, Any]]:
    """Train a :class:`FlowCNN` by ``recipe`` (see the module docstring)."""
    from ..data.specs import parse_data_spec

    data = parse_data_spec(recipe.data)
    all_frames, all_flows = _stack(data, list(range(len(data))))  # generated once, then reused every epoch
    torch.manual_seed(derive_seed(recipe.seed, "init") % 2**63)
    model = FlowCNN(channels=int(all_frames.shape[2]), width=recipe.width)
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    shuffle = torch.Generator().manual_seed(derive_seed(recipe.seed, "shuffle") % 2**63)
    group = torch.Generator().manual_seed(derive_seed(recipe.seed, "augment") % 2**63)
    total = recipe.epochs * -(-len(data) // recipe.batch_size)
    losses: list[float] = []
    model.train()
    for _ in range(recipe.epochs):
        order = torch.randperm(len(data), generator=shuffle).tolist()
        for s in range(0, len(order), recipe.batch_size):
            idx = order[s:s + recipe.batch_size]
            frames, flow = all_frames[idx], all_flows[idx]
            if recipe.augment == "d4xt":
                frames, flow = augment_pairs(frames, flow, group)
            known = torch.isfinite(flow).all(1)  # pixels without ground truth (NaN) do not train
            if not bool(known.any()):
                continue
            if recipe.schedule == "cosine":
                cosine_lr(opt, recipe.lr, len(losses), total)
            pred = model(frames)
            # unknown pixels get the prediction itself as target: zero error and zero gradient there
            err = (pred - torch.where(torch.isfinite(flow), flow, pred.detach())).norm(dim=1)
            loss = err.mean() if bool(known.all()) else err[known].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if progress is not None:
                progress(len(losses), total, losses[-1])
    model.eval()
    return model, {"recipe_key": recipe.key(), "train_pairs": len(data), "steps": len(losses),
                   "first_loss": losses[0], "final_loss": float(np.mean(losses[-5:]))}


def flow_cache_path(recipe: FlowRecipe, cache_dir: str | os.PathLike[str]) -> Path:
    """Where :func:`cached_flow_model` keeps the model of ``recipe``."""
    return Path(cache_dir) / f"{recipe.name}-{recipe.key()}.safetensors"


def cached_flow_model(recipe: FlowRecipe, cache_dir: str | os.PathLike[str],
                      progress: ProgressFn | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """The trained model of ``recipe`` from ``cache_dir`` (trained and saved when absent)."""
    return load_or_train(flow_cache_path(recipe, cache_dir), recipe.key(), asdict(recipe),
                         lambda: train_flow_model(recipe, progress))
