"""Model factories the Ray tests ship by reference: Ray workers import this module (the tests put
its folder on the workers' PYTHONPATH) and build the models from these functions."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

from orbitscope.models.registry import build_model

SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}


class Watched(nn.Module):
    """A small CNN whose forward records its process id in ``marker`` (a folder) and, until a
    file ``released`` appears there, sleeps ``delay`` seconds per call: a slow job whose worker
    a test can find and kill."""

    def __init__(self, marker: str, delay: float) -> None:
        super().__init__()
        self.net = build_model(SMALL)
        self.marker, self.delay = marker, delay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        folder = Path(self.marker)
        (folder / f"pid-{os.getpid()}").touch()
        if not (folder / "released").exists():
            time.sleep(self.delay)
        return self.net(x)


def watched_cnn(marker: str, delay: float = 1.0, seed: int = 0) -> nn.Module:
    """:class:`Watched`, with weights from ``seed``."""
    torch.manual_seed(seed)
    return Watched(marker, delay)


class Failing(nn.Module):
    """A model that fails on every batch (a model bug on a worker)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = build_model(SMALL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("deliberate failure in Failing.forward")


def failing_cnn() -> nn.Module:
    torch.manual_seed(0)
    return Failing()
