"""NERO's plain MNIST CNN (NeroCNN), NERO's whole-degree augmentation and the two NERO recipes.

Zhao, Matsuzawa, Irvine, Maire, Kindlmann, "Visualizing and Understanding Equivariance with NERO",
arXiv 2305.19889.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from orbitscope.models import NeroCNN, build_model, fold_batchnorm, list_models, optimize_for_inference
from orbitscope.models.loading import load_model, read_metadata, save_model
from orbitscope.training.recipes import (
    AUGMENTATIONS,
    EXTRA_RECIPES,
    TrainRecipe,
    cached_reference_model,
    sample_angles,
)


def _digits(n: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))


def _trained_like(model: nn.Module) -> nn.Module:
    """Non-trivial BatchNorm statistics and affine parameters, as after training."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 0.4 - 0.2)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 1.5 + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) * 0.2 - 0.1)
    return model.eval()


# --------------------------------------------------------------------------- the architecture


def test_layer_by_layer_shapes_give_576_features() -> None:
    """29x29 (28x28 padded right/bottom by 1) with NERO's paddings: 29 25 25 12 12 12 6 6 4 3."""
    model = NeroCNN().eval()
    shapes: list[tuple[str, tuple[int, ...]]] = []
    hooks = [m.register_forward_hook(lambda mod, inp, out, n=name: shapes.append((n, tuple(out.shape[1:]))))
             for name, m in model.features.named_children()]
    with torch.no_grad():
        out = model(_digits(3))
    for h in hooks:
        h.remove()
    assert out.shape == (3, 10)
    convs = [(m.kernel_size, m.in_channels, m.out_channels, m.padding, m.bias) for m in model.features
             if isinstance(m, nn.Conv2d)]
    assert convs == [((7, 7), 1, 24, (1, 1), None), ((5, 5), 24, 48, (2, 2), None), ((5, 5), 48, 48, (2, 2), None),
                     ((5, 5), 48, 96, (2, 2), None), ((5, 5), 96, 96, (2, 2), None), ((5, 5), 96, 64, (1, 1), None)]
    kinds = [type(m).__name__ for m in model.features]
    assert kinds == (["Conv2d", "BatchNorm2d", "ReLU"] * 2 + ["AvgPool2d"]) * 2 + ["Conv2d", "BatchNorm2d", "ReLU"] * 2 \
        + ["AvgPool2d"]
    pools = [(m.kernel_size, m.stride) for m in model.features if isinstance(m, nn.AvgPool2d)]
    assert pools == [(2, 2), (2, 2), (2, 1)]
    # the output of each conv block (after its ReLU) and of each pool
    sides = [(s[0], s[1]) for name, s in shapes if kinds[int(name)] in ("ReLU", "AvgPool2d")]
    assert sides == [(24, 25), (48, 25), (48, 12), (48, 12), (96, 12), (96, 6), (96, 6), (64, 4), (64, 3)]
    assert shapes[-1][1] == (64, 3, 3) and 64 * 3 * 3 == 576 == model.n_features
    head = [type(m).__name__ for m in model.classifier]
    assert head == ["Flatten", "Linear", "BatchNorm1d", "ELU", "Linear"]
    assert (model.classifier[1].in_features, model.classifier[1].out_features) == (576, 64)
    assert (model.classifier[4].in_features, model.classifier[4].out_features) == (64, 10)


def test_parameter_count_by_hand() -> None:
    convs = [(1, 24, 7), (24, 48, 5), (48, 48, 5), (48, 96, 5), (96, 96, 5), (96, 64, 5)]
    conv_weights = sum(cin * cout * k * k for cin, cout, k in convs)  # no conv biases
    bn2d = sum(2 * cout for _, cout, _ in convs)                      # gamma and beta
    fc = (576 * 64 + 64) + 2 * 64 + (64 * 10 + 10)                    # FC, BatchNorm1d, FC
    expected = conv_weights + bn2d + fc
    assert expected == 625_234
    assert sum(p.numel() for p in NeroCNN().parameters()) == expected


def test_forward_pads_then_normalises_and_returns_logits() -> None:
    model = _trained_like(NeroCNN())
    x = _digits(5)
    manual = model.classifier(model.features((F.pad(x, (0, 1, 0, 1)) - 0.1307) / 0.3081))
    with torch.no_grad():
        torch.testing.assert_close(model(x), manual, rtol=0, atol=0)
        assert not torch.allclose(model(x).softmax(1).sum(1), model(x).sum(1))  # logits, not probabilities
    for bad in (torch.rand(2, 1, 29, 29), torch.rand(2, 3, 28, 28), torch.rand(1, 28, 28)):
        with pytest.raises(ValueError, match="28, 28"):
            model(bad)


def test_inference_optimisations_keep_outputs() -> None:
    model = _trained_like(NeroCNN())
    x = _digits(6)
    with torch.no_grad():
        ref = model(x)
        torch.testing.assert_close(fold_batchnorm(model)(x), ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(optimize_for_inference(model)(x), ref, rtol=1e-4, atol=1e-4)


def test_config_round_trip_build_save_load(tmp_path) -> None:
    assert "nero-cnn" in list_models()
    model = _trained_like(NeroCNN())
    assert model.config == {"arch": "nero-cnn", "in_channels": 1, "num_classes": 10, "mean": 0.1307, "std": 0.3081}
    rebuilt = build_model(dict(model.config))
    assert type(rebuilt) is NeroCNN and rebuilt.config == model.config
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    path = save_model(model, tmp_path / "nero.safetensors")
    assert '"nero-cnn"' in read_metadata(path)["config"]
    loaded = load_model(path)
    assert type(loaded) is NeroCNN and not loaded.training
    x = _digits(4)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    other = NeroCNN(in_channels=3, num_classes=5, mean=0.5, std=0.25)
    assert build_model(other.config).config == other.config
    with pytest.raises(ValueError):
        NeroCNN(std=0.0)


# --------------------------------------------------------------------------- augmentation


def _old_normal90(n: int, seed: int) -> torch.Tensor:
    """The "normal90" draw as first written: N(0, 90²); values outside ±180° redrawn in index order."""
    gen = torch.Generator().manual_seed(seed)
    values = (torch.randn(n, generator=gen) * 90.0).tolist()
    pending = [i for i, v in enumerate(values) if abs(v) > 180.0]
    while pending:
        fresh = (torch.randn(len(pending), generator=gen) * 90.0).tolist()
        for i, v in zip(pending, fresh):
            values[i] = v
        pending = [i for i in pending if abs(values[i]) > 180.0]
    return torch.tensor(values, dtype=torch.float32)


@pytest.mark.parametrize("seed", [0, 7, 123])
def test_normal90_is_unchanged(seed: int) -> None:
    new = sample_angles("normal90", 5000, generator=torch.Generator().manual_seed(seed))
    assert new.dtype == torch.float32
    assert torch.equal(new, _old_normal90(5000, seed))
    assert not torch.equal(new, torch.round(new))  # still continuous angles


def test_nero_normal90_whole_degrees_truncated_normal() -> None:
    assert "nero-normal90" in AUGMENTATIONS and "normal90" in AUGMENTATIONS
    n = 200_000
    angles = sample_angles("nero-normal90", n, generator=torch.Generator().manual_seed(0))
    assert angles.shape == (n,) and angles.dtype == torch.float32
    assert torch.equal(angles, torch.round(angles))  # whole degrees
    assert float(angles.min()) >= -180 and float(angles.max()) <= 180
    # the same draw as normal90, rounded (NERO: rint(90 * truncnorm(-2, 2)))
    assert torch.equal(angles, torch.round(sample_angles("normal90", n, generator=torch.Generator().manual_seed(0))))
    # std against the closed form of the truncated normal; rounding adds variance 1/12 (deg²), negligible
    dist = stats.truncnorm(-2, 2)
    sigma = float(dist.std()) * 90.0
    assert abs(sigma - 79.166) < 0.01
    excess_kurtosis = float(dist.stats(moments="k"))
    se_std = sigma * math.sqrt((excess_kurtosis + 2) / (4 * n))  # large-n standard error of a sample std
    std = float(angles.double().std())
    assert abs(std - math.sqrt(sigma**2 + 1 / 12)) < 5 * se_std, (std, sigma, se_std)
    assert abs(float(angles.double().mean())) < 5 * sigma / math.sqrt(n)
    # upright stays over-represented: density ratio at 0° vs ±175° is exp(1.94² / 2) ≈ 6.6
    near_upright, near_flipped = int((angles.abs() <= 10).sum()), int((angles.abs() >= 170).sum())
    assert 5 * near_flipped < near_upright < 8 * near_flipped


# --------------------------------------------------------------------------- recipes


def test_nero_recipes() -> None:
    plain, aug = EXTRA_RECIPES["nero-cnn"], EXTRA_RECIPES["nero-cnn-normal90"]
    assert plain.arch == aug.arch == NeroCNN().config
    assert (plain.augmentation, aug.augmentation) == ("none", "nero-normal90")
    for r in (plain, aug):
        assert (r.data, r.batch_size, r.weight_decay, r.lr) == ("mnist-subset", 64, 1e-5, plain.lr)
    assert plain.key() != aug.key()
    assert TrainRecipe.from_dict(aug.to_dict()) == aug
    # weight_decay is a later field: left out of the key at its default 0
    assert TrainRecipe(weight_decay=0.0).key() == TrainRecipe().key() != TrainRecipe(weight_decay=1e-5).key()
    with pytest.raises(ValueError, match="weight_decay"):
        TrainRecipe(weight_decay=-1.0)


def test_nero_recipe_trains_and_caches(tmp_path) -> None:
    recipe = TrainRecipe(name="mini-nero", arch={"arch": "nero-cnn"}, augmentation="nero-normal90", epochs=1,
                         n_train=200, batch_size=64, lr=1e-3, weight_decay=1e-5)
    model, info = cached_reference_model(recipe, tmp_path)
    assert isinstance(model, NeroCNN) and not info["from_cache"] and 0.0 <= info["test_accuracy"] <= 1.0
    again, info2 = cached_reference_model(recipe, tmp_path)
    assert info2["from_cache"] and isinstance(again, NeroCNN)
    x = _digits(3)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)
