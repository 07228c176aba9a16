"""The engine on a CUDA device (skipped without one; benchmarks/gpu_check.sh runs it on a GPU
machine): the same numbers as on the CPU within the check's tolerance, pinned uint8 inputs,
forward batches sized to the device, mixed precision checked on the first batch."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.engine.optimization import TOLERANCE

from test_optimization import MarginNet, bn_cnn, provenance

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def _no_tf32():
    """cuDNN convolutions run in TF32 by default on Ampere and newer (10-bit mantissa): full float32
    here, so that the GPU's numbers are comparable with the CPU's at float32 tolerance."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def test_cuda_matches_cpu_and_records_the_device() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 1, 16, 16), dtype=torch.uint8, generator=g)  # uint8: pinned, moved as is
    labels = torch.randint(0, 10, (64,), generator=g)
    orbit = osc.Rotation([0, 30, 90, 180])
    cpu = osc.evaluate(bn_cnn(), (images, labels), orbit, device="cpu", batch_size=16)
    gpu = osc.evaluate(bn_cnn(), (images, labels), orbit, device="cuda", batch_size=16)
    assert gpu.result.attrs["device"].startswith("cuda") and provenance(gpu)["ran"] == "optimized"
    np.testing.assert_array_equal(gpu.result["correct"].values, cpu.result["correct"].values)
    np.testing.assert_allclose(gpu.result["confidence"].values, cpu.result["confidence"].values, atol=1e-4)


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_mixed_precision_on_cuda_is_checked(precision: str) -> None:
    g = torch.Generator().manual_seed(1)
    data = (torch.rand(32, 1, 16, 16, generator=g), torch.randint(0, 10, (32,), generator=g))
    net = MarginNet().eval()
    full = osc.evaluate(net, data, osc.Rotation([0, 90]), device="cuda", optimize=False)
    run = osc.evaluate(net, data, osc.Rotation([0, 90]), device="cuda", precision=precision)
    rec = provenance(run)
    assert rec["check"]["tolerance"] == TOLERANCE[precision] and rec["check"]["passed"]
    assert rec["ran"] == "optimized" and rec["precision"] == precision
    np.testing.assert_allclose(run.result["confidence"].values, full.result["confidence"].values, atol=5e-3)
