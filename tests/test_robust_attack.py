"""The TorchAttacks adapter: a torchattacks.Attack returning counterexamples, with verdicts."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch import Tensor, nn

torchattacks = pytest.importorskip("torchattacks")

from orbitscope.robust.attack import ProbabilisticRobustness  # noqa: E402
from orbitscope.robust.sequential import NOT_ROBUST, ROBUST  # noqa: E402

T = 0.5


class PixelThreshold(nn.Module):
    """Class 1 iff pixel (0, 0, 0) (after undoing the normalisation it expects) exceeds t.

    A weight on the pixel keeps gradients flowing, so PGD can attack it as well.
    """

    def __init__(self, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        self.mean, self.std = mean, std
        self.w = nn.Parameter(torch.tensor(1.0))
        self.drop = nn.Dropout(0.5)
        self.modes: list[bool] = []

    def forward(self, x: Tensor) -> Tensor:
        self.modes.append(self.training)
        v = self.w * (x[:, 0, 0, 0] * self.std + self.mean)
        return torch.stack([T - v, v - T], 1) * 10


def images(values: list[float]) -> Tensor:
    x = torch.full((len(values), 1, 5, 5), 0.3)
    x[:, 0, 0, 0] = torch.tensor(values)
    return x


VALUES = [0.1, 0.2, 0.45, 0.48, 0.35, 0.49]  # with ε = 0.1: p = 0, 0, 0.25, 0.4, 0, 0.45
LABELS = torch.zeros(len(VALUES), dtype=torch.long)


def test_returns_counterexamples_like_an_attack() -> None:
    model = PixelThreshold()
    atk = ProbabilisticRobustness(model, "linf:0.1", kappa=0.05, budget=2000)
    x = images(VALUES)
    adv = atk(x, LABELS)
    assert isinstance(adv, Tensor) and adv.shape == x.shape and adv.dtype == x.dtype and adv.device == x.device
    assert float(adv.min()) >= 0 and float(adv.max()) <= 1 and float((adv - x).abs().max()) <= 0.1 + 1e-6
    res = atk.last_result
    assert res is not None and res.outcome.tolist() == [ROBUST, ROBUST, NOT_ROBUST, NOT_ROBUST, ROBUST, NOT_ROBUST]
    changed = (adv != x).flatten(1).any(1).numpy()
    assert np.array_equal(changed, res.failures > 0)
    with torch.no_grad():
        pred = model(adv).argmax(1)
    assert bool((pred[torch.from_numpy(changed)] == 1).all())  # counterexamples really fail
    assert torch.equal(adv[~torch.from_numpy(changed)], x[~torch.from_numpy(changed)])  # robust: unchanged
    assert "ProbabilisticRobustness" in repr(atk) and "last_result" not in repr(atk)


def test_fresh_streams_per_call_and_seeded() -> None:
    x = images(VALUES)
    a = ProbabilisticRobustness(PixelThreshold(), "linf:0.1", kappa=0.05, budget=500, seed=1)
    b = ProbabilisticRobustness(PixelThreshold(), "linf:0.1", kappa=0.05, budget=500, seed=1)
    first, again = a(x, LABELS), a(x, LABELS)
    assert torch.equal(b(x, LABELS), first) and not torch.equal(first, again) and a.inputs_seen == 2 * len(x)


def test_normalisation_is_used_consistently() -> None:
    """A model expecting (x − m)/s: with set_normalization_used, inputs and outputs are normalised,
    sampling happens in [0, 1] pixel space, and the verdicts equal those of the plain model."""
    m, s = 0.3, 0.2
    x = images(VALUES)
    plain = ProbabilisticRobustness(PixelThreshold(), "linf:0.1", kappa=0.05, budget=1000, seed=2)
    ref = plain(x, LABELS)
    normed_model = PixelThreshold(mean=m, std=s)
    atk = ProbabilisticRobustness(normed_model, "linf:0.1", kappa=0.05, budget=1000, seed=2)
    atk.set_normalization_used(mean=[m], std=[s])
    adv = atk((x - m) / s, LABELS)
    assert torch.allclose(adv * s + m, ref, atol=1e-6)
    assert np.array_equal(atk.last_result.outcome, plain.last_result.outcome)
    with torch.no_grad():
        assert torch.equal(normed_model(adv).argmax(1), PixelThreshold()(ref).argmax(1))


def test_model_mode_device_and_training_mode_setting() -> None:
    model = PixelThreshold().train()
    atk = ProbabilisticRobustness(model, "linf:0.1", kappa=0.05, budget=300)
    atk.set_device("cpu")
    atk(images([0.1, 0.45]), LABELS[:2])
    assert not any(model.modes) and model.training  # eval during the attack, restored after
    model.modes.clear()
    atk.set_model_training_mode(model_training=True, dropout_training=True)
    atk(images([0.1]), LABELS[:1])
    assert all(model.modes)


def test_inside_multiattack_with_pgd() -> None:
    """PGD breaks what it can; ours runs only on the rest and adds the counterexamples it finds."""
    model = PixelThreshold()
    x = images([0.1, 0.49, 0.485, 0.41, 0.42])
    pgd = torchattacks.PGD(model, eps=0.02, alpha=0.01, steps=5)  # breaks 0.49 and 0.485 only
    ours = ProbabilisticRobustness(model, "linf:0.1", kappa=0.05, budget=2000)
    multi = torchattacks.MultiAttack([pgd, ours])
    adv = multi(x, LABELS[:5])
    with torch.no_grad():
        pred = model(adv).argmax(1)
    assert pred.tolist() == [0, 1, 1, 1, 1]
    assert ours.last_result is not None and ours.last_result.n_inputs == 3  # 0.1, 0.41, 0.42
    # with normalisation set on the MultiAttack it propagates to both attacks
    m, s = 0.3, 0.2
    nm = PixelThreshold(mean=m, std=s)
    multi = torchattacks.MultiAttack([torchattacks.PGD(nm, eps=0.02, alpha=0.01, steps=5),
                                      ProbabilisticRobustness(nm, "linf:0.1", kappa=0.05, budget=2000)])
    multi.set_normalization_used(mean=[m], std=[s])
    adv = multi((x - m) / s, LABELS[:5])
    with torch.no_grad():
        assert nm(adv).argmax(1).tolist() == [0, 1, 1, 1, 1]


def test_errors() -> None:
    atk = ProbabilisticRobustness(PixelThreshold(), "linf:0.1")
    with pytest.raises(ValueError, match="labels"):
        atk(images([0.1]))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        atk(torch.zeros(2, 5, 5), LABELS[:2])
    with pytest.raises(ValueError):
        ProbabilisticRobustness(PixelThreshold(), "linf:nope")


def test_module_imports_without_torchattacks(monkeypatch) -> None:
    """Without torchattacks the module imports; the class raises an ImportError saying what to do."""
    import importlib

    import orbitscope.robust.attack as mod

    monkeypatch.setitem(sys.modules, "torchattacks", None)
    monkeypatch.setitem(sys.modules, "torchattacks.attack", None)
    try:
        bare = importlib.reload(mod)
        assert not bare.torchattacks_available()
        with pytest.raises(ImportError, match="pip install --no-deps torchattacks"):
            bare.ProbabilisticRobustness(PixelThreshold())
    finally:
        monkeypatch.undo()
        importlib.reload(mod)
    assert mod.torchattacks_available()
