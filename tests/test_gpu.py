"""The engine on a CUDA device (skipped without one; benchmarks/gpu_check.sh runs it on a GPU
machine): the same numbers as on the CPU within the check's tolerance, pinned uint8 inputs,
forward batches sized to the device, mixed precision checked on the first batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.engine.optimization import TOLERANCE

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                        nn.Flatten(), nn.Linear(32, 10))
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    return net.eval()


def _record(run: osc.Run) -> dict:
    value = run.result.attrs["optimization"]
    return json.loads(value) if isinstance(value, str) else value


def test_cuda_matches_cpu_and_records_the_device() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 1, 16, 16), dtype=torch.uint8, generator=g)  # uint8: pinned, moved as is
    labels = torch.randint(0, 10, (64,), generator=g)
    orbit = osc.Rotation([0, 30, 90, 180])
    cpu = osc.evaluate(_net(), (images, labels), orbit, device="cpu", batch_size=16)
    gpu = osc.evaluate(_net(), (images, labels), orbit, device="cuda", batch_size=16)
    assert gpu.result.attrs["device"].startswith("cuda") and _record(gpu)["ran"] == "optimized"
    np.testing.assert_array_equal(gpu.result["correct"].values, cpu.result["correct"].values)
    np.testing.assert_allclose(gpu.result["confidence"].values, cpu.result["confidence"].values, atol=1e-4)


class _Margin(nn.Module):
    """Class 0 wins by 10 logits whatever the input: mixed precision cannot flip a prediction."""

    def __init__(self) -> None:
        super().__init__()
        self.body = _net()
        self.register_buffer("offset", torch.tensor([10.0] + [0.0] * 9))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.1 * torch.tanh(self.body(x)) + self.offset


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_mixed_precision_on_cuda_is_checked(precision: str) -> None:
    g = torch.Generator().manual_seed(1)
    data = (torch.rand(32, 1, 16, 16, generator=g), torch.randint(0, 10, (32,), generator=g))
    net = _Margin().eval()
    full = osc.evaluate(net, data, osc.Rotation([0, 90]), device="cuda", optimize=False)
    run = osc.evaluate(net, data, osc.Rotation([0, 90]), device="cuda", precision=precision)
    rec = _record(run)
    assert rec["check"]["tolerance"] == TOLERANCE[precision] and rec["check"]["passed"]
    assert rec["ran"] == "optimized" and rec["precision"] == precision
    np.testing.assert_allclose(run.result["confidence"].values, full.result["confidence"].values, atol=5e-3)
