"""Tests for orbitscope.models.reference (reference CNN, registry, BN folding, hashing) and orbitscope.training.recipes."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from orbitscope.models import (
    ReferenceCNN,
    build_model,
    fold_batchnorm,
    list_models,
    model_hash,
    optimize_for_inference,
)
from orbitscope.training.recipes import (
    RECIPES,
    TrainRecipe,
    cache_path,
    cached_reference_model,
    evaluate_accuracy,
    sample_angles,
    train_classifier,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")
TINY = {"arch": "reference_cnn", "in_channels": 1, "num_classes": 10, "widths": [4, 4, 8, 8, 8, 8], "hidden": 16}
SMALL = {"arch": "reference_cnn", "in_channels": 1, "num_classes": 10, "widths": [4, 8, 8, 16, 16, 32], "hidden": 32}




def _randomise_bn(model: nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g))
            m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.2)
            if m.affine:
                m.weight.data.copy_(torch.randn(n, generator=g))
                m.bias.data.copy_(torch.randn(n, generator=g))


# --------------------------------------------------------------------------- ReferenceCNN


def test_reference_cnn_output_shape_and_layout() -> None:
    m = ReferenceCNN()
    assert m(torch.rand(5, 1, 28, 28)).shape == (5, 10)
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [8, 16, 16, 32, 32, 64]
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in convs)
    assert sum(isinstance(c, nn.BatchNorm2d) for c in m.modules()) == 6
    assert sum(isinstance(c, nn.AvgPool2d) for c in m.modules()) == 3
    linears = [c for c in m.modules() if isinstance(c, nn.Linear)]
    assert [(l.in_features, l.out_features) for l in linears] == [(576, 64), (64, 10)]


def test_reference_cnn_custom_args() -> None:
    m = ReferenceCNN(in_channels=3, num_classes=7, widths=(2, 2, 2, 2, 2, 5))
    assert m(torch.rand(2, 3, 28, 28)).shape == (2, 7)
    with pytest.raises(ValueError, match="6 conv widths"):
        ReferenceCNN(widths=(8, 16))


@pytest.mark.parametrize(
    "shape, fragment",
    [((1, 28, 28), r"\(1, 28, 28\)"), ((2, 3, 28, 28), r"\(2, 3, 28, 28\)"), ((2, 1, 32, 32), r"\(2, 1, 32, 32\)"),
     ((2, 1, 16, 16), r"\(2, 1, 16, 16\)"), ((2, 1, 28, 1, 28), r"\(2, 1, 28, 1, 28\)")],
)
def test_reference_cnn_shape_errors(shape: tuple[int, ...], fragment: str) -> None:
    with pytest.raises(ValueError, match=r"expected input of shape \(B, C, H, W\)") as info:
        ReferenceCNN()(torch.rand(*shape))
    assert re.search(fragment, str(info.value)), str(info.value)


def test_registry_and_config_roundtrip() -> None:
    assert "reference_cnn" in list_models()
    torch.manual_seed(1)
    m = ReferenceCNN(widths=(4, 4, 8, 8, 8, 16), hidden=12).eval()
    cfg = json.loads(json.dumps(m.config))  # JSON-able
    assert cfg["arch"] == "reference_cnn"
    rebuilt = build_model(cfg)
    assert isinstance(rebuilt, ReferenceCNN) and rebuilt.config == m.config
    rebuilt.load_state_dict(m.state_dict())  # strict: same architecture
    x = torch.rand(3, 1, 28, 28)
    assert torch.equal(rebuilt.eval()(x), m(x))
    with pytest.raises(ValueError, match="unknown architecture"):
        build_model({"arch": "nope"})
    with pytest.raises(ValueError, match="'arch'"):
        build_model({"widths": [1] * 6})
    with pytest.raises(TypeError, match="bad arguments"):
        build_model({"arch": "reference_cnn", "depth": 3})


# --------------------------------------------------------------------------- BN folding / inference


def test_fold_batchnorm_reference_cnn_matches_eval_outputs() -> None:
    torch.manual_seed(0)
    m = ReferenceCNN()
    _randomise_bn(m)
    m.train()
    folded = fold_batchnorm(m)
    assert m.training, "the original must not be modified"
    assert sum(isinstance(c, nn.BatchNorm2d) for c in m.modules()) == 6
    assert not any(isinstance(c, nn.BatchNorm2d) for c in folded.modules())
    assert sum(isinstance(c, nn.Identity) for c in folded.modules()) == 6
    assert not folded.training
    x = torch.rand(8, 1, 28, 28)
    with torch.no_grad():
        ref = m.eval()(x)
        out = folded(x)
    assert ref.abs().max() > 1e-3  # non-trivial outputs
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_fold_batchnorm_generic_sequential() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, 4, 3, bias=False), nn.BatchNorm2d(4, eps=0.1), nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 3, groups=2), nn.BatchNorm2d(4, affine=False)),
        nn.Conv2d(4, 3, 1), nn.ReLU(), nn.BatchNorm2d(3),  # BN not directly after a conv: kept
    )
    _randomise_bn(net, seed=3)
    net.eval()
    folded = fold_batchnorm(net)
    assert sum(isinstance(c, nn.BatchNorm2d) for c in folded.modules()) == 1
    assert isinstance(folded[6], nn.BatchNorm2d)
    x = torch.rand(4, 2, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(folded(x), net(x), atol=1e-5, rtol=1e-5)


def test_optimize_for_inference_matches() -> None:
    torch.manual_seed(0)
    m = ReferenceCNN()
    _randomise_bn(m, seed=1)
    opt = optimize_for_inference(m)
    assert not opt.training
    conv = next(c for c in opt.modules() if isinstance(c, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not any(isinstance(c, nn.BatchNorm2d) for c in opt.modules())
    plain = optimize_for_inference(m, fold_bn=False, channels_last=False)
    assert any(isinstance(c, nn.BatchNorm2d) for c in plain.modules())
    x = torch.rand(6, 1, 28, 28)
    with torch.no_grad():
        ref = m.eval()(x)
        torch.testing.assert_close(opt(x), ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(plain(x), ref, atol=1e-6, rtol=1e-6)


# --------------------------------------------------------------------------- model_hash


def test_model_hash_stable_and_sensitive() -> None:
    torch.manual_seed(0)
    a = ReferenceCNN()
    torch.manual_seed(0)
    b = ReferenceCNN()
    h = model_hash(a)
    assert len(h) == 16 and int(h, 16) >= 0
    assert model_hash(b) == h
    assert model_hash(a.to(memory_format=torch.channels_last)) == h  # layout does not matter
    a.requires_grad_(False)
    assert model_hash(a) == h
    with torch.no_grad():
        b.classifier[3].bias[2] += 1e-6
    assert model_hash(b) != h
    torch.manual_seed(0)
    c = ReferenceCNN()
    c.features[1].running_var[0] = 1.5  # buffers count too
    assert model_hash(c) != h
    torch.manual_seed(0)
    d = ReferenceCNN().double()  # dtype counts
    assert model_hash(d) != h


@pytest.mark.slow  # a fresh interpreter imports torch
def test_model_hash_same_in_fresh_process() -> None:
    code = (
        "import torch; from orbitscope.models import ReferenceCNN, model_hash; "
        "from orbitscope.training.recipes import TrainRecipe; "
        "torch.manual_seed(0); print(model_hash(ReferenceCNN())); print(TrainRecipe(seed=3).key())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": SRC, "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin",
             "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]},
    ).stdout.split()
    torch.manual_seed(0)
    assert out == [model_hash(ReferenceCNN()), TrainRecipe(seed=3).key()]


# --------------------------------------------------------------------------- training


def test_recipe_defaults_key_and_validation() -> None:
    r = TrainRecipe()
    assert (r.epochs, r.lr, r.batch_size, r.seed, r.augmentation, r.data) == (6, 3e-3, 128, 0, "none", "mnist-subset")
    assert r.arch["arch"] == "reference_cnn"
    assert r.key() == TrainRecipe().key() and len(r.key()) == 12
    assert hash(r) == hash(TrainRecipe())
    keys = {r.key(), TrainRecipe(seed=1).key(), TrainRecipe(lr=1e-3).key(), TrainRecipe(augmentation="uniform").key(),
            TrainRecipe(arch=TINY).key(), TrainRecipe(name="other").key()}
    assert len(keys) == 6
    # tuple vs list in arch normalise to the same recipe
    assert TrainRecipe(arch={**TINY, "widths": tuple(TINY["widths"])}).key() == TrainRecipe(arch=TINY).key()
    assert TrainRecipe.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.epochs = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="augmentation"):
        TrainRecipe(augmentation="rot")
    assert {k: v.augmentation for k, v in RECIPES.items()} == {"plain": "none", "uniform": "uniform", "normal90": "normal90"}


def test_sample_angles_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    n90 = sample_angles("normal90", 20000, generator=g).numpy()
    assert n90.shape == (20000,) and np.abs(n90).max() <= 180
    # truncated N(0, 90) on [-180, 180]: std = 90 * 0.8796 = 79.2; P(|a| < 45) = 0.401
    assert 75 < n90.std() < 83 and abs(n90.mean()) < 3
    assert 0.38 < np.mean(np.abs(n90) < 45) < 0.42
    uni = sample_angles("uniform", 20000, generator=g, max_angle=30).numpy()
    assert np.abs(uni).max() <= 30 and uni.min() < -29 and uni.max() > 29
    assert 0.23 < np.mean(np.abs(uni) < 7.5) < 0.27
    assert torch.equal(sample_angles("none", 4, generator=g), torch.zeros(4))
    a = sample_angles("normal90", 50, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, sample_angles("normal90", 50, generator=torch.Generator().manual_seed(5)))


@pytest.fixture(scope="module")
def mnist() -> tuple[object, object]:
    from orbitscope.data.datasets import mnist_subset

    return mnist_subset("train"), mnist_subset("test")


def _train_tiny(dataset: object, seed: int, augmentation: str = "normal90") -> tuple[nn.Module, dict]:
    torch.manual_seed(0)  # same init for every call: only the recipe seed varies
    model = build_model(TINY)
    recipe = TrainRecipe(arch=TINY, epochs=1, batch_size=32, seed=seed, augmentation=augmentation)
    return model, train_classifier(model, dataset, recipe)


def test_training_deterministic_for_seed(mnist: tuple) -> None:
    small = mnist[0].subset(np.arange(0, 4000, 25))  # 160 images
    a, info_a = _train_tiny(small, seed=0)
    b, _ = _train_tiny(small, seed=0)
    c, _ = _train_tiny(small, seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert info_a["n_samples"] == 160 and info_a["epochs"] == 1 and len(info_a["loss_history"]) == 1
    assert not a.training


def test_short_training_beats_chance(mnist: tuple) -> None:
    train, test = mnist
    torch.manual_seed(0)
    model = build_model(SMALL)
    calls: list[tuple[int, int, float]] = []
    recipe = TrainRecipe(arch=SMALL, epochs=2, batch_size=32, seed=0)
    info = train_classifier(model, train.subset(np.arange(0, 4000, 4)), recipe,
                            progress=lambda e, n, loss: calls.append((e, n, loss)))
    assert [(e, n) for e, n, _ in calls] == [(1, 2), (2, 2)]
    assert calls[-1][2] == info["final_train_loss"] < calls[0][2]
    acc = evaluate_accuracy(model, test.subset(np.arange(0, 1000, 2)))
    assert acc > 0.6, acc  # chance is 0.1


def test_cached_reference_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import orbitscope.training.recipes as training

    from orbitscope.data.datasets import mnist_subset

    calls = []
    real = training.train_reference_model

    def counting(recipe: TrainRecipe, progress: object = None) -> tuple:
        calls.append(recipe)
        return real(recipe, progress=progress)

    monkeypatch.setattr(training, "train_reference_model", counting)
    # training on 4000 images with the tiny net would take a few seconds: shrink the data
    full = mnist_subset("train")
    # patched where training_data looks it up (it imports mnist_subset from orbitscope.data.datasets)
    monkeypatch.setattr("orbitscope.data.datasets.mnist_subset",
                        lambda split="train", seed=0: full.subset(np.arange(0, 4000, 20)) if split == "train"
                        else mnist_subset("test").subset(np.arange(0, 1000, 10)))
    recipe = TrainRecipe(name="tiny", arch=TINY, epochs=1, batch_size=32)
    m1, info1 = cached_reference_model(recipe, tmp_path)
    path = cache_path(recipe, tmp_path)
    assert path == tmp_path / f"tiny-{recipe.key()}.safetensors" and path.is_file()
    assert info1["from_cache"] is False and len(calls) == 1
    assert info1["n_samples"] == 200  # trained on the shrunk data: the patch above took effect
    assert 0 <= info1["test_accuracy"] <= 1 and info1["recipe_key"] == recipe.key()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left
    m2, info2 = cached_reference_model(recipe, tmp_path)
    assert info2["from_cache"] is True and len(calls) == 1
    assert info2["test_accuracy"] == info1["test_accuracy"] and info2["model_hash"] == model_hash(m2)
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(m1(x), m2(x))
    path.write_bytes(b"garbage")  # unusable cache: retrained
    _, info3 = cached_reference_model(recipe, tmp_path)
    assert info3["from_cache"] is False and len(calls) == 2
