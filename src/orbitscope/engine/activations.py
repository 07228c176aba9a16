"""Statistics of intermediate activations, captured with forward hooks during an evaluation.

ML4ML (Liao, Zhang & Chen, arXiv 2109.12926) reads, besides the model's confidence, summary
statistics of the raw output of chosen layers (their last two conv layers) for every image and
transformation level. :class:`ActivationProbe` names the layers and statistics;
:func:`orbitscope.evaluate` attaches it to the model, so one pass over the orbit gives the
outputs and the activation statistics together. They are recorded as the variable
``activation`` with dims ``(sample, *orbit dims, layer, stat)``.

Statistics of an activation ``a`` of one image with ``C`` channels (shape ``(C, *spatial)``;
a fully connected layer's ``(F,)`` output counts as ``F`` channels of one value each). The name
reads "per-channel reduction over space"-"reduction over channels":

=============  ===============================================================
``mean``       mean of all values
``std``        standard deviation of all values (population, ddof = 0)
``max``        maximum of all values
``min``        minimum of all values
``mean-max``   max over channels of each channel's spatial mean
``mean-std``   std over channels of each channel's spatial mean
``max-mean``   mean over channels of each channel's spatial max
``max-std``    std over channels of each channel's spatial max
=============  ===============================================================
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["STATS", "ActivationProbe", "activation_stats", "conv_layers"]

#: All statistics, in the order they are stored.
STATS: tuple[str, ...] = ("mean", "std", "max", "min", "mean-max", "mean-std", "max-mean", "max-std")


def activation_stats(a: Tensor, stats: Sequence[str] = STATS) -> Tensor:
    """Per-image statistics of a batch of activations.

    Args:
        a: ``(B, C, *spatial)`` or ``(B, F)`` activations.
        stats: names from :data:`STATS`.

    Returns:
        ``(B, len(stats))`` float32 tensor.
    """
    unknown = [s for s in stats if s not in STATS]
    if unknown:
        raise ValueError(f"unknown activation statistics {unknown}; choose from {STATS}")
    a = a.detach().float()
    if a.ndim < 2:
        raise ValueError(f"activations must have a batch and a channel dim, got shape {tuple(a.shape)}")
    per_channel = a.reshape(a.shape[0], a.shape[1], -1)  # (B, C, spatial)
    flat = per_channel.reshape(a.shape[0], -1)
    ch_mean = per_channel.mean(-1)
    ch_max = per_channel.amax(-1)
    table = {
        "mean": lambda: flat.mean(-1),
        "std": lambda: flat.std(-1, correction=0),
        "max": lambda: flat.amax(-1),
        "min": lambda: flat.amin(-1),
        "mean-max": lambda: ch_mean.amax(-1),
        "mean-std": lambda: ch_mean.std(-1, correction=0),
        "max-mean": lambda: ch_max.mean(-1),
        "max-std": lambda: ch_max.std(-1, correction=0),
    }
    return torch.stack([table[s]() for s in stats], dim=1)


def conv_layers(model: nn.Module) -> list[str]:
    """Names (as in ``model.named_modules()``) of the model's convolution layers, in order."""
    return [n for n, m in model.named_modules() if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d))]


@dataclass(frozen=True)
class ActivationProbe:
    """Which layers to hook and which statistics to record.

    Args:
        layers: module names from ``model.named_modules()`` (e.g. ``"features.12"``); the
            statistics are of each module's raw output (for a convolution: before any
            BatchNorm or ReLU that follows it). ``("last-conv-2",)`` is shorthand for the
            model's last two convolution layers (ML4ML's choice).
        stats: statistics from :data:`STATS` (default: all).
    """

    layers: tuple[str, ...]
    stats: tuple[str, ...] = STATS

    def __post_init__(self) -> None:
        if isinstance(self.layers, str):
            object.__setattr__(self, "layers", (self.layers,))
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "stats", tuple(self.stats))
        if not self.layers:
            raise ValueError("an ActivationProbe needs at least one layer name")
        unknown = [s for s in self.stats if s not in STATS]
        if unknown or not self.stats:
            raise ValueError(f"unknown or no activation statistics {list(self.stats)}; choose from {STATS}")

    def resolve(self, model: nn.Module) -> ActivationProbe:
        """The probe with shorthands expanded and every layer checked against ``model``."""
        names: list[str] = []
        convs = conv_layers(model)
        for layer in self.layers:
            if layer.startswith("last-conv-"):
                k = int(layer.rsplit("-", 1)[1])
                if len(convs) < k:
                    raise ValueError(f"{layer!r}: the model has only {len(convs)} convolution layers")
                names.extend(convs[-k:])
            else:
                names.append(layer)
        modules = dict(model.named_modules())
        missing = [n for n in names if n not in modules or n == ""]
        if missing:
            sample = ", ".join(list(modules)[1:12])
            raise ValueError(f"no layer named {missing} in {type(model).__name__}; layers are named as in "
                             f"model.named_modules(), e.g. {sample}")
        return ActivationProbe(tuple(names), self.stats)

    def spec(self) -> dict[str, Any]:
        return {"layers": list(self.layers), "stats": list(self.stats)}

    @contextmanager
    def attach(self, model: nn.Module) -> Iterator[list[Tensor]]:
        """Hook the layers of ``model`` (names must be resolved); yields a list that receives, per
        forward call, a ``(B, layers, stats)`` tensor. Hooks are removed on exit."""
        modules = dict(model.named_modules())
        current: dict[str, Tensor] = {}
        collected: list[Tensor] = []

        def hook(name: str) -> Any:
            def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
                if name in current:
                    raise RuntimeError(f"layer {name!r} ran twice in one forward call; probe a layer that "
                                       "runs once per forward (a module reused in the graph cannot be probed)")
                if not isinstance(output, Tensor):
                    raise TypeError(f"layer {name!r} returned {type(output).__name__}, not a tensor")
                current[name] = activation_stats(output, self.stats)
                if len(current) == len(self.layers):
                    collected.append(torch.stack([current[n] for n in self.layers], dim=1))
                    current.clear()

            return record

        handles = [modules[n].register_forward_hook(hook(n)) for n in self.layers]
        try:
            yield collected
        finally:
            for h in handles:
                h.remove()
