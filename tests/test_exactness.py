"""osc.exactness: the largest output change at a finite group's elements, size by size, checked
against a plain loop over torch.rot90 / torch.flip, and the size conditions of its docs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.models.flow_cnn import FlowCNN
from orbitscope.models.reference import SmallCNN


class PoolMax(nn.Module):
    """avg-pool 2×2 (stride 2, floor mode), then the global maximum: exact under 90° turns of an
    even-sized image, not of an odd-sized one (the dropped last row becomes a kept first column)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.avg_pool2d(x, 2).amax((-2, -1))


def plain_loop(model: nn.Module, size: int, n: int = 4, seed: int = 0) -> list[float]:
    """max |f(rot90(x, k)) − f(x)| for k = 0..3, on the same seeded inputs as exactness."""
    x = torch.rand(n, 1, size, size, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y0 = model(x)
        return [float((model(torch.rot90(x, k, dims=(-2, -1))) - y0).abs().max()) for k in range(4)]


@pytest.mark.parametrize("size", [28, 29])
def test_rows_match_a_plain_rot90_loop(size):
    model = PoolMax()
    rows = osc.exactness(model, osc.Rotation90(), [size])
    assert [r["name"] for r in rows] == ["rotation 0°", "rotation 90°", "rotation 180°", "rotation 270°"]
    assert all(r["exact_action"] and r["size"] == (size, size) and r["error"] == "" for r in rows)
    np.testing.assert_allclose(sorted(r["max_change"] for r in rows), sorted(plain_loop(model, size)), rtol=1e-6)


def test_stride_two_pooling_is_exact_at_even_sizes_only():
    rows = osc.exactness(PoolMax(), "rotation90", [28, 29])
    even = max(r["max_change"] for r in rows if r["size"] == (28, 28))
    odd = max(r["max_change"] for r in rows if r["size"] == (29, 29))
    assert even < 1e-6 < 1e-2 < odd


def test_symmetrised_model_is_exact_and_a_plain_one_is_not():
    torch.manual_seed(1)
    plain = SmallCNN()
    sym = osc.symmetrize(plain, osc.Rotation90())
    for size in (28, 29):
        assert max(r["relative_change"] for r in osc.exactness(sym, "rotation90", [size])) < 1e-6
    assert max(r["relative_change"] for r in osc.exactness(plain, "rotation90", [28])) > 1e-4
    # a 90° turn of a non-square input crops it: the action is not exact, and symmetrize refuses it
    rows = osc.exactness(sym, "rotation90", [(28, 30)])
    assert all(np.isnan(r["max_change"]) and "square" in r["error"] for r in rows)
    crop = osc.exactness(plain, "rotation90", [(28, 30)])
    assert [r["exact_action"] for r in crop] == [True, False, True, False]  # 0° and 180° still exact


def test_equivariant_outputs_are_mapped_back_by_their_action():
    torch.manual_seed(2)
    flow = osc.symmetrize(FlowCNN(width=8), osc.Rotation90(), input_kind="frames", output_kind="flow")
    rows = osc.exactness(flow, "rotation90", [32], input_kind="frames", output_kind="flow", n=2)
    assert max(r["relative_change"] for r in rows) < 1e-5
    plain = osc.exactness(FlowCNN(width=8), "rotation90", [32], input_kind="frames", output_kind="flow", n=2)
    assert max(r["relative_change"] for r in plain) > 1e-3


def test_mirrors_match_torch_flip():
    model = PoolMax()
    rows = osc.exactness(model, "flip", [29])
    x = torch.rand(4, 1, 29, 29, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = float((model(torch.flip(x, dims=(-1,))) - model(x)).abs().max())
    mirrored = [r for r in rows if r["name"].startswith("mirror")]
    assert len(mirrored) == 1 and np.isclose(mirrored[0]["max_change"], expected, rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(osc.SpecError, match="input size"):
        osc.exactness(PoolMax(), "rotation90", [])
    with pytest.raises(osc.SpecError, match="planar"):
        osc.exactness(PoolMax(), "so3:8", [8])
