"""The point-cloud classifiers and their recipe: shapes, invariances (DistanceNet to rotations,
all three to the order of the points), the Shoemake rotation sampler against scipy and the Haar
measure, recipe determinism and the safetensors cache.

Runs on small synthetic clouds (anisotropic ellipsoids, boxes and cylinders) made here, served
through a data spec registered by this module, so it does not depend on the mesh data set."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.spatial.transform import Rotation

from orbitscope.data.specs import register_data_spec
from orbitscope.errors import DataError
from orbitscope.models import build_model
from orbitscope.models.loading import load_model, save_model
from orbitscope.models.point_nets import (
    DGCNN,
    DistanceNet,
    PointNet,
    farthest_point_indices,
    pairwise_distance_features,
)
from orbitscope.training.pointcloud import (
    PointCloudRecipe,
    cached_point_model,
    point_accuracy,
    point_cache_path,
    random_rotations,
    rotate_clouds,
    subsample_points,
    train_point_model,
)

SHAPES = ("ellipsoid", "box", "cylinder")


def _shape(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points on the surface of a randomly stretched ellipsoid, box or cylinder, normalised
    (centroid at the origin, largest norm 1)."""
    if kind == "ellipsoid":
        p = rng.normal(size=(n, 3))
        p /= np.linalg.norm(p, axis=1, keepdims=True)
    elif kind == "box":
        p = rng.uniform(-1, 1, size=(n, 3))
        face = rng.integers(0, 3, n)
        p[np.arange(n), face] = rng.choice([-1.0, 1.0], n)
    else:  # cylinder about z, with caps
        t = rng.uniform(0, 2 * np.pi, n)
        p = np.stack([np.cos(t), np.sin(t), rng.uniform(-1, 1, n)], 1)
        cap = rng.random(n) < 0.25
        r = np.sqrt(rng.random(cap.sum()))
        p[cap, :2] *= r[:, None]
        p[cap, 2] = rng.choice([-1.0, 1.0], cap.sum())
    p *= rng.uniform([0.9, 0.5, 0.2], [1.1, 0.7, 0.35])  # anisotropic: a canonical pose matters
    p -= p.mean(0)
    return (p / np.linalg.norm(p, axis=1).max()).astype(np.float32)


class _Shapes(torch.utils.data.Dataset):
    def __init__(self, n_per_class: int, points: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.classes = list(SHAPES)
        self.items = [(_shape(c, points, rng), i) for _ in range(n_per_class) for i, c in enumerate(SHAPES)]
        self.data_id = f"test-shapes:n={n_per_class},points={points},seed={seed}"

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.items[i]


def _parse_shapes(rest: str) -> _Shapes:
    kw = dict(a.split("=") for a in rest.split(",") if a)
    return _Shapes(int(kw.get("n", 4)), int(kw.get("points", 64)), int(kw.get("seed", 0)))


@pytest.fixture(autouse=True, scope="module")
def _test_shapes_spec():
    """The test-only data spec, registered for this module's tests and removed afterwards (the
    registry test pins the built-in specs)."""
    from orbitscope.data.specs import DATA_SPECS

    saved = dict(DATA_SPECS._entries)
    register_data_spec("test-shapes", _parse_shapes, replace=True)
    yield
    DATA_SPECS._entries.clear()
    DATA_SPECS._entries.update(saved)


def _clouds(b: int = 4, n: int = 128, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.stack([_shape(SHAPES[i % 3], n, rng) for i in range(b)]))


def _models() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [PointNet(3, width=8).eval(), DGCNN(3, k=8, width=8, emb=32).eval(), DistanceNet(3, bins=16).eval()]


# --------------------------------------------------------------------------- models


def test_models_give_logits_per_cloud_and_reject_bad_shapes():
    x = _clouds(3, 64)
    for model in _models():
        with torch.no_grad():
            out = model(x)
        assert out.shape == (3, 3) and out.dtype == torch.float32 and torch.isfinite(out).all()
        with pytest.raises(DataError, match=r"\(B, N, 3\)"):
            model(x[..., :2])
        # the config rebuilds the same architecture from the registry
        rebuilt = build_model(model.config)
        assert type(rebuilt) is type(model) and rebuilt.config == model.config
    with pytest.raises(ValueError, match="classes"):
        PointNet(0)


def test_dgcnn_accepts_fewer_points_than_neighbours():
    model = DGCNN(3, k=16, width=8, emb=16).eval()
    with torch.no_grad():
        assert model(_clouds(2, 10)).shape == (2, 3)


def test_distance_net_is_rotation_invariant_to_float_precision():
    model = _models()[2]
    x = _clouds(4, 256, seed=1)
    rots = torch.tensor(Rotation.random(12, random_state=7).as_matrix(), dtype=torch.float32)
    with torch.no_grad():
        base, feats = model(x), model.features(x)
        moved = [rotate_clouds(x, r.expand(len(x), 3, 3)) for r in rots]
        worst = max(float((model(m) - base).abs().max()) for m in moved)
        worst_feat = max(float((model.features(m) - feats).abs().max()) for m in moved)
        plain = PointNet(3, width=8).eval()
        plain_change = max(float((plain(m) - plain(x)).abs().max()) for m in moved)
    assert worst <= 1e-5, worst
    assert worst_feat <= 1e-5, worst_feat
    assert plain_change > 1e-2  # the check can see a rotation-dependent model
    # a fixed sample of index pairs keeps the invariance exact (here 2,000 of the 32,640 pairs)
    torch.manual_seed(1)
    sampled = DistanceNet(3, bins=16, pairs=2000).eval()
    with torch.no_grad():
        ref = sampled(x)
        assert max(float((sampled(m) - ref).abs().max()) for m in moved) <= 1e-5
        assert float((sampled(x) - ref).abs().max()) == 0.0  # the same pairs every call
    # with an exact (float64) rotation the features agree to float64 rounding: what is left
    # above comes from rounding the rotated clouds to float32
    r64 = torch.tensor(Rotation.random(1, random_state=8).as_matrix()[0])
    f64 = pairwise_distance_features(x.double(), bins=16)
    f64r = pairwise_distance_features(torch.einsum("ij,bnj->bni", r64, x.double()), bins=16)
    assert float((f64r - f64).abs().max()) < 1e-10
    # translation does not matter either; the pair histogram is a density of the N(N-1)/2 pairs
    with torch.no_grad():
        assert float((model(x + torch.tensor([0.1, -0.2, 0.05])) - base).abs().max()) <= 1e-5
    f = pairwise_distance_features(x.double(), bins=16)
    np.testing.assert_allclose(f.mean(1).numpy(), 1.0, atol=1e-12)


@pytest.mark.parametrize("which", [0, 1, 2], ids=["pointnet", "dgcnn", "distance"])
def test_models_ignore_the_order_of_the_points(which):
    model = _models()[which]
    x = _clouds(4, 200, seed=2)
    perm = torch.randperm(200, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        delta = float((model(x[:, perm]) - model(x)).abs().max())
    assert delta <= 1e-5, delta


def test_dgcnn_reduces_large_clouds_by_farthest_point_sampling():
    x = _clouds(3, 300, seed=4)
    idx = farthest_point_indices(x, 40)
    assert idx.shape == (3, 40) and all(len(set(row.tolist())) == 40 for row in idx)
    # the subset depends on the geometry alone: the same points when shuffled or rotated
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(0))
    assert all(set(perm[a].tolist()) == set(b.tolist()) for a, b in zip(farthest_point_indices(x[:, perm], 40), idx))
    r = torch.tensor(Rotation.random(1, random_state=3).as_matrix()[0], dtype=torch.float32)
    assert torch.equal(farthest_point_indices(rotate_clouds(x, r.expand(3, 3, 3)), 40), idx)
    # the first point is the one farthest from the centroid, then each next is the farthest
    assert torch.equal(idx[:, 0], (x - x.mean(1, keepdim=True)).norm(dim=2).argmax(1))
    torch.manual_seed(0)
    model = DGCNN(3, k=8, width=8, emb=16, max_points=40).eval()
    assert model.reduce(x).shape == (3, 40, 3)
    with torch.no_grad():
        assert float((model(x[:, perm]) - model(x)).abs().max()) <= 1e-5
        assert torch.equal(DGCNN(3, max_points=0).reduce(x), x)


# --------------------------------------------------------------------------- rotations


def test_training_rotations_are_proper_seeded_and_follow_the_haar_density():
    r = random_rotations(4000, torch.Generator().manual_seed(11), dtype=torch.float64).numpy()
    np.testing.assert_allclose(r @ np.swapaxes(r, 1, 2), np.broadcast_to(np.eye(3), r.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-12)
    again = random_rotations(4000, torch.Generator().manual_seed(11), dtype=torch.float64).numpy()
    np.testing.assert_array_equal(r, again)
    assert random_rotations(3, torch.Generator().manual_seed(0)).dtype == torch.float32
    angle = Rotation.from_matrix(r).magnitude()  # scipy as the independent reference, in [0, pi]
    # Haar measure on SO(3): density (1 - cos t) / pi, CDF (t - sin t) / pi on [0, pi]
    assert stats.kstest(angle, lambda t: (t - np.sin(t)) / math.pi).pvalue > 0.01
    # and not uniform in angle (the test has power)
    assert stats.kstest(angle, "uniform", args=(0, math.pi)).pvalue < 1e-6
    axes = Rotation.from_matrix(r).as_rotvec() / angle[:, None]
    assert np.abs(axes.mean(0)).max() < 0.06  # axes spread over the sphere
    with pytest.raises(ValueError, match="non-negative"):
        random_rotations(-1)


def test_subsample_points_draws_a_subset_of_each_cloud():
    x = _clouds(2, 50)
    s = subsample_points(x, 20, torch.Generator().manual_seed(0))
    assert s.shape == (2, 20, 3)
    for b in range(2):
        rows = {tuple(p) for p in x[b].tolist()}
        assert all(tuple(p) in rows for p in s[b].tolist())
        assert len({tuple(p) for p in s[b].tolist()}) == 20
    assert subsample_points(x, 0) is x and subsample_points(x, 99) is x


# --------------------------------------------------------------------------- recipes


def _tiny(**kw) -> PointCloudRecipe:
    base = dict(data="test-shapes:n=4,points=48,seed=0", epochs=2, batch_size=4, points=32, width=8, k=6, bins=8)
    return PointCloudRecipe(**{**base, **kw})


def test_recipes_are_validated_and_keyed():
    with pytest.raises(ValueError, match="so3"):
        PointCloudRecipe(augment="rotations")
    with pytest.raises(ValueError, match="arch"):
        PointCloudRecipe(arch="resnet")
    with pytest.raises(ValueError, match="epochs"):
        PointCloudRecipe(epochs=0)
    with pytest.raises(ValueError, match="batch_size"):
        PointCloudRecipe(batch_size=1)
    with pytest.raises(ValueError, match="points"):
        PointCloudRecipe(points=-1)
    with pytest.raises(ValueError, match="lr"):
        PointCloudRecipe(lr=0.0)
    assert PointCloudRecipe().key() == PointCloudRecipe(name="other").key()
    assert PointCloudRecipe(augment="so3").key() != PointCloudRecipe().key()
    resolved = PointCloudRecipe(arch="dgcnn")  # the defaults of the architecture are resolved
    assert resolved.epochs >= 1 and resolved.points == 256 and resolved.key() == PointCloudRecipe(
        arch="dgcnn", epochs=resolved.epochs, points=256).key()


@pytest.mark.parametrize("kw", [dict(arch="pointnet"), dict(arch="dgcnn", augment="so3"), dict(arch="distance")],
                         ids=["pointnet", "dgcnn-so3", "distance"])
def test_training_is_deterministic(kw):
    recipe = _tiny(**kw)
    before = torch.random.get_rng_state()
    m1, info = train_point_model(recipe)
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's random state is kept
    m2, _ = train_point_model(recipe)
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    assert info["steps"] == 2 * 3 and info["classes"] == list(SHAPES) and info["train_clouds"] == 12
    assert info["augment_applied"] == (kw.get("augment") == "so3")
    m3, _ = train_point_model(_tiny(**kw, seed=1))
    assert any(not torch.equal(s1[k], m3.state_dict()[k]) for k in s1)


def test_cache_round_trip(tmp_path):
    recipe = _tiny(arch="dgcnn")
    model, info = cached_point_model(recipe, tmp_path)
    path = point_cache_path(recipe, tmp_path)
    assert not info["from_cache"] and path.is_file() and path.name.startswith("points-dgcnn-none-")
    again, info2 = cached_point_model(recipe, tmp_path)
    assert info2["from_cache"] and isinstance(again, DGCNN) and not again.training
    x = _clouds(3, 48, seed=5)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
    assert 0.0 <= point_accuracy(again, "test-shapes:n=2,points=48,seed=9") <= 1.0


def test_saved_models_reload_through_the_registry(tmp_path):
    for model in _models():
        path = save_model(model, tmp_path / f"{model.config['arch']}.safetensors")
        back = load_model(path)
        x = _clouds(2, 40)
        with torch.no_grad():
            assert torch.equal(model(x), back(x))
