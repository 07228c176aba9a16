"""Tests for the training-recipe extensions: n_train, Fashion-MNIST data, P4CNN recipes, stable keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from orbitscope.data.datasets import fashion_mnist
from orbitscope.models.equivariant import P4CNN
from orbitscope.training.recipes import (
    DATASETS,
    EXTRA_RECIPES,
    RECIPES,
    TrainRecipe,
    all_recipes,
    cache_path,
    cached_reference_model,
    fashion_test_subset,
    train_reference_model,
    training_data,
)

SMALL_CNN = {"arch": "reference_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 8, 16, 16, 16, 16], "hidden": 32}
TINY_P4 = {"arch": "p4cnn", "in_channels": 1, "num_classes": 10, "widths": [4, 4, 8, 8], "hidden": 16}
TINY_ZOO_CNN = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [2, 4, 4], "hidden": 8}


def _has_fashion_mnist() -> bool:
    try:
        fashion_mnist("test")
    except FileNotFoundError:
        return False
    return True


needs_fashion = pytest.mark.skipif(not _has_fashion_mnist(), reason="Fashion-MNIST not installed "
                                   "(apt-get install dataset-fashion-mnist)")


def test_existing_recipe_keys_unchanged() -> None:
    """Keys name cache files: the new n_train field must not change the keys of older recipes."""
    assert TrainRecipe().key() == "ddac9cd231d7" and TrainRecipe(seed=3).key() == "01dc28e95de3"
    assert {k: r.key() for k, r in RECIPES.items()} == {
        "plain": "e164e0ea559b", "uniform": "0c1d65fb581a", "normal90": "4ddbfe33e86f"}
    old = {k: v for k, v in TrainRecipe().to_dict().items() if k != "n_train"}  # a dict saved before n_train
    assert TrainRecipe.from_dict(old) == TrainRecipe()


def test_new_fields_change_keys() -> None:
    base = TrainRecipe()
    keys = {base.key(), TrainRecipe(n_train=1000).key(), TrainRecipe(n_train=2000).key(),
            TrainRecipe(data="fashion-mnist").key(), TrainRecipe(arch=TINY_P4).key()}
    assert len(keys) == 5
    fashion = TrainRecipe(data="fashion-mnist")
    assert fashion.n_train == 6000 and fashion == TrainRecipe(data="fashion-mnist", n_train=6000)
    assert fashion.key() == TrainRecipe(data="fashion-mnist", n_train=6000).key()
    assert TrainRecipe.from_dict(json.loads(json.dumps(fashion.to_dict()))) == fashion
    with pytest.raises(ValueError, match="n_train"):
        TrainRecipe(n_train=0)
    with pytest.raises(ValueError, match="unknown training data"):
        training_data(TrainRecipe(data="cifar"))

@needs_fashion
def test_n_train_cannot_exceed_the_data() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        training_data(TrainRecipe(data="fashion-mnist", n_train=60001))


def test_extra_recipes() -> None:
    assert set(all_recipes()) == set(RECIPES) | set(EXTRA_RECIPES) and not set(RECIPES) & set(EXTRA_RECIPES)
    assert EXTRA_RECIPES["p4cnn"].arch == P4CNN().config  # the full default config, not just the name
    assert EXTRA_RECIPES["fashion-normal90"].augmentation == "normal90"
    assert {r.data for r in EXTRA_RECIPES.values()} <= set(DATASETS)
    assert len({r.key() for r in all_recipes().values()}) == len(all_recipes())


@needs_fashion
def test_fashion_data_split() -> None:
    test = fashion_test_subset()
    assert len(test) == 1000 and np.bincount(test.labels).tolist() == [100] * 10
    assert test.data_id == "fashion-mnist:test:stratified1000"
    train, test2 = training_data(TrainRecipe(data="fashion-mnist", n_train=300))
    assert len(train) == 300 and train.data_id == "fashion-mnist:train[:300]" and len(test2) == 1000
    x, y = train[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and 0 <= float(x.min()) <= float(x.max()) <= 1


@needs_fashion
def test_fashion_recipe_trains_and_beats_chance() -> None:
    recipe = TrainRecipe(name="fashion-small", data="fashion-mnist", n_train=600, arch=SMALL_CNN, epochs=1, batch_size=16)
    model, info = train_reference_model(recipe)
    assert info["n_samples"] == 600 and info["train_data_id"] == "fashion-mnist:train[:600]"
    assert info["test_data_id"] == "fashion-mnist:test:stratified1000"
    assert info["test_accuracy"] > 0.4, info["test_accuracy"]  # chance is 0.1; measured 0.60
    assert not model.training


def test_p4cnn_recipe_roundtrips_through_cache(tmp_path: Path) -> None:
    recipe = TrainRecipe(name="p4-tiny", arch=TINY_P4, n_train=200, epochs=1, batch_size=32)
    m1, info1 = cached_reference_model(recipe, tmp_path)
    path = cache_path(recipe, tmp_path)
    assert path.is_file() and info1["from_cache"] is False and isinstance(m1, P4CNN)
    assert info1["n_samples"] == 200 and info1["train_data_id"].endswith(":stratified200")  # 20 per class
    m2, info2 = cached_reference_model(recipe, tmp_path)
    assert info2["from_cache"] is True and isinstance(m2, P4CNN) and info2["test_accuracy"] == info1["test_accuracy"]
    x = torch.rand(6, 1, 28, 28)
    with torch.no_grad():
        out = m2(x)
        assert torch.equal(m1(x), out)
        assert (m2(torch.rot90(x, 1, dims=(-2, -1))) - out).abs().max() < 1e-5  # still invariant after training


def test_scale_and_brightness_augmentation_ranges() -> None:
    from orbitscope.training.recipes import sample_offsets

    base = TrainRecipe()
    scaled = TrainRecipe(scale_range=(0.0, 0.3))
    bright = TrainRecipe(brightness_range=(0.1, 0.3))
    assert len({base.key(), scaled.key(), bright.key()}) == 3
    assert TrainRecipe.from_dict(json.loads(json.dumps(bright.to_dict()))) == bright  # lists back to pairs
    for bad in ((0.3, 0.1), (0.0, 1.0), (-0.1, 0.2), (0.2, 0.2), "x"):
        with pytest.raises(ValueError, match="scale_range"):
            TrainRecipe(scale_range=bad)
    gen = torch.Generator().manual_seed(0)
    gap = sample_offsets(4000, 0.1, 0.3, generator=gen)
    assert float(gap.abs().min()) >= 0.1 and float(gap.abs().max()) <= 0.3
    assert 0.45 < float((gap > 0).float().mean()) < 0.55
    full = sample_offsets(4000, 0.0, 0.3, generator=gen)
    assert float(full.abs().max()) <= 0.3 and float(full.abs().min()) < 0.01
    assert not sample_offsets(5, 0.0, 0.0, generator=gen).any()


def test_augment_batch_acts_as_the_scale_and_brightness_orbits() -> None:
    from orbitscope.group.parse import parse_orbit
    from orbitscope.kinds import warp_images
    from orbitscope.training.recipes import augment_batch

    torch.manual_seed(0)
    x = torch.rand(3, 1, 28, 28)
    for spec, angles, scales, gains in (("scale:0.8:0.8:1", 0.0, 0.8, 1.0), ("brightness:1.2:1.2:1", 0.0, 1.0, 1.2),
                                        ("rotation:10:10:1", 10.0, 1.0, 1.0)):
        want = warp_images(x, parse_orbit(spec).transforms())[0]
        got = augment_batch(x, torch.full((3,), angles), torch.full((3,), scales), torch.full((3,), gains))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_training_with_scale_and_brightness_augmentation_is_seeded() -> None:
    recipe = TrainRecipe(name="aug", arch=SMALL_CNN, n_train=200, epochs=1, batch_size=50, scale_range=(0.0, 0.3),
                         brightness_range=(0.05, 0.3))
    a, _ = train_reference_model(recipe)
    b, _ = train_reference_model(recipe)
    c, _ = train_reference_model(TrainRecipe(name="aug", arch=SMALL_CNN, n_train=200, epochs=1, batch_size=50))
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # same seed, same augmentation draws
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)  # the augmentation changed the training


def test_ml4ml_defects_change_keys_and_are_validated() -> None:
    variants = [TrainRecipe(noise_images=0.1), TrainRecipe(leakage=0.2), TrainRecipe(ordered_batches=True),
                TrainRecipe(fgsm_eps=0.1), TrainRecipe(pretrain_data="fashion-mnist")]
    assert len({TrainRecipe().key(), *(v.key() for v in variants)}) == 6
    for v in variants:
        assert TrainRecipe.from_dict(json.loads(json.dumps(v.to_dict()))) == v
    with pytest.raises(ValueError, match="noise_images"):
        TrainRecipe(noise_images=1.5)
    with pytest.raises(ValueError, match="fgsm_eps"):
        TrainRecipe(fgsm_eps=-0.1)
    with pytest.raises(ValueError, match="pretrain_data"):
        TrainRecipe(pretrain_data="mnist-subset")  # the same data


def test_noise_images_and_leakage_are_added_to_the_training_set() -> None:
    plain, test = training_data(TrainRecipe(n_train=500))
    noisy, _ = training_data(TrainRecipe(n_train=500, noise_images=0.1, label_noise=0.2))
    leaky, _ = training_data(TrainRecipe(n_train=500, leakage=0.05))
    assert len(noisy) == len(plain) + 50 and "noise-images0.1" in noisy.data_id
    assert int(np.asarray(noisy.labels).max()) <= 9
    assert not np.array_equal(np.asarray(noisy.labels)[:500], np.asarray(plain.labels))  # label noise too
    assert len(leaky) == len(plain) + 50 and "leakage0.05" in leaky.data_id
    for j in range(50):  # the first 50 test images, with their labels, at the end of the training set
        torch.testing.assert_close(leaky[500 + j][0], test[j][0])
        assert leaky[500 + j][1] == test[j][1]


def test_fgsm_moves_each_pixel_by_eps_up_the_loss() -> None:
    from orbitscope.training.recipes import fgsm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    x = torch.rand(4, 1, 4, 4) * 0.5 + 0.25
    y = torch.tensor([0, 1, 2, 0])
    adv = fgsm(model, x, y, 0.1)
    assert all(p.grad is None for p in model.parameters())  # the parameters' gradients untouched
    xr = x.clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(model(xr), y).backward()
    torch.testing.assert_close(adv, (x + 0.1 * xr.grad.sign()).clamp(0, 1))
    loss = torch.nn.functional.cross_entropy
    assert float(loss(model(adv), y)) > float(loss(model(x), y))


def test_ordered_batches_and_fgsm_training_change_the_model() -> None:
    base = dict(name="d", arch=SMALL_CNN, n_train=200, epochs=1, batch_size=50)
    ref, _ = train_reference_model(TrainRecipe(**base))
    for kw in ({"ordered_batches": True}, {"fgsm_eps": 0.1}):
        a, _ = train_reference_model(TrainRecipe(**base, **kw))
        b, _ = train_reference_model(TrainRecipe(**base, **kw))
        sa, sb, sr = a.state_dict(), b.state_dict(), ref.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), kw  # reproducible
        assert not all(torch.equal(sa[k], sr[k]) for k in sa), kw


@needs_fashion
def test_pretraining_on_another_dataset_is_recorded() -> None:
    # pretraining runs on the other dataset's default size (6,000 Fashion-MNIST images): a tiny
    # SmallCNN keeps that pass cheap; the architecture plays no part in what is recorded
    recipe = TrainRecipe(name="ft", arch=TINY_ZOO_CNN, n_train=200, epochs=1, batch_size=50,
                         pretrain_data="fashion-mnist")
    model, info = train_reference_model(recipe)
    assert info["pretrained"]["train_data_id"].startswith("fashion-mnist")
    scratch, _ = train_reference_model(TrainRecipe(name="ft", arch=TINY_ZOO_CNN, n_train=200, epochs=1, batch_size=50))
    from orbitscope.models.reference import model_hash

    assert info["model_hash"] != model_hash(scratch)
