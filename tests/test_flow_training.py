"""The learned flow estimator and its recipe: shapes, the D4 × time-reversal augmentation keeps
pairs and flows consistent, and the symmetrised model is exactly equivariant."""

from __future__ import annotations

import numpy as np
import torch

import orbitscope as osc
from orbitscope.group.parse import parse_orbit
from orbitscope.models import FlowCNN, symmetrize
from orbitscope.training.flow import FlowRecipe, augment_pairs

from test_equivariance_by_construction import ShiftSearch, _shift_pairs


def test_augmented_pairs_still_match_their_flows():
    frames, flows = _shift_pairs(n=32, size=16, seed=3)
    a, b = augment_pairs(torch.from_numpy(frames), torch.from_numpy(flows), torch.Generator().manual_seed(1))
    assert not torch.equal(a, torch.from_numpy(frames))  # some pairs were moved
    # the exact shift search recovers the moved flow from the moved pair
    np.testing.assert_allclose(ShiftSearch()(a).numpy(), b.numpy(), atol=1e-6)


def test_the_symmetrised_flow_cnn_commutes_with_the_16_elements():
    torch.manual_seed(0)
    model = FlowCNN(width=8).eval()
    sym = symmetrize(model, "d4xt", input_kind="frames", output_kind="flow")
    frames, flows = _shift_pairs(n=2, size=16, seed=5)
    res = osc.evaluate(sym, (frames, flows), parse_orbit("d4xt"), osc.Flow(), consensus=True).result
    epe = res.epe.values  # (sample, time_reversed, d4): equal in all 16 cells
    np.testing.assert_allclose(epe, epe[:, :1, :1] * np.ones_like(epe), rtol=1e-4)
    plain = osc.evaluate(model, (frames, flows), parse_orbit("d4xt"), osc.Flow()).result.epe.values
    assert np.ptp(plain, axis=(1, 2)).min() > 1e-3  # the plain CNN is not


def test_recipes_are_checked_and_keyed():
    assert FlowRecipe().key() == FlowRecipe(name="other").key()
    assert FlowRecipe(augment="d4xt").key() != FlowRecipe().key()
    import pytest

    with pytest.raises(ValueError, match="d4xt"):
        FlowRecipe(augment="rotations")
