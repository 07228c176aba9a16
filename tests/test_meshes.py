"""The built-in real-mesh point clouds (orbitscope.data.meshes): the area-weighted sampler against
geometry worked out here, normalisation, determinism, split disjointness, canonical orientation,
class separability, skipped meshes, the data spec and the error messages."""

import math
import sys

import numpy as np
import pytest
import torch

from orbitscope.data import meshes as M
from orbitscope.data.specs import parse_data_spec
from orbitscope.errors import DataError, SpecError


@pytest.fixture(scope="module")
def default_sets() -> tuple[M.MeshClouds, M.MeshClouds]:
    # how long building them takes is a benchmark's business, not a test's (it depends on the machine)
    return M.MeshClouds("train"), M.MeshClouds("test")


def binomial_tol(p: float, n: int, z: float = 5.0) -> float:
    return z * math.sqrt(p * (1 - p) / n)


# --------------------------------------------------------------------------- the sampler


def two_triangles() -> tuple[np.ndarray, np.ndarray]:
    """Triangle 0 (x < 0) has area 1, triangle 1 (x > 0) area 3, triangle 2 is degenerate."""
    v = np.array([[-2, 0, 0], [-1, 0, 0], [-2, 2, 0],     # legs 1 and 2: area 1
                  [1, 0, 1], [4, 0, 1], [1, 2, 1],        # legs 3 and 2: area 3
                  [5, 5, 5], [6, 6, 6], [7, 7, 7]], float)  # collinear: area 0
    return v, np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8]])


def test_area_weighting_matches_the_area_ratio() -> None:
    v, f = two_triangles()
    n = 40_000
    pts, face = M.sample_surface(v, f, n, np.random.default_rng(3))
    assert pts.shape == (n, 3) and face.shape == (n,)
    frac = float(np.mean(pts[:, 0] < 0))  # by location, not by the returned index
    assert abs(frac - 0.25) < binomial_tol(0.25, n)
    assert np.array_equal(face == 0, pts[:, 0] < 0) and not (face == 2).any()
    # every point inside its triangle: z tells the plane, then the two legs' inequalities
    left, right = pts[face == 0], pts[face == 1]
    assert np.all(left[:, 2] == 0) and np.allclose(right[:, 2], 1)
    assert np.all((left[:, 0] + 2) / 1 + left[:, 1] / 2 <= 1 + 1e-12) and left[:, 1].min() >= 0
    assert np.all((right[:, 0] - 1) / 3 + right[:, 1] / 2 <= 1 + 1e-12) and right[:, 1].min() >= 0
    # uniform within a triangle: the corner sub-triangle cut by the mid-points holds a quarter
    corner = (right[:, 0] - 1) / 3 + right[:, 1] / 2 <= 0.5
    assert abs(corner.mean() - 0.25) < binomial_tol(0.25, len(right))
    # and the mid-point triangle (the one not touching a corner) another quarter
    b1, b2 = (right[:, 0] - 1) / 3, right[:, 1] / 2
    middle = (b1 <= 0.5) & (b2 <= 0.5) & (b1 + b2 >= 0.5)
    assert abs(middle.mean() - 0.25) < binomial_tol(0.25, len(right))


def test_sampler_is_deterministic_given_the_generator() -> None:
    v, f = two_triangles()
    a, fa = M.sample_surface(v, f, 500, 7)
    b, fb = M.Surface(v, f).sample(500, np.random.default_rng(7))
    c, _ = M.sample_surface(v, f, 500, 8)
    assert np.array_equal(a, b) and np.array_equal(fa, fb) and not np.array_equal(a, c)
    assert M.Surface(v, f).area == pytest.approx(4.0)


def test_surface_rejects_bad_meshes() -> None:
    v, f = two_triangles()
    with pytest.raises(DataError, match=r"shape \(F, 3\).*split polygons"):
        M.Surface(v, np.array([[0, 1, 2, 3]]))
    with pytest.raises(DataError, match="refers to vertex 9.*0..8"):
        M.Surface(v, np.array([[0, 1, 9]]))
    with pytest.raises(DataError, match="no surface area"):
        M.Surface(v, f[2:])
    with pytest.raises(DataError, match="NaN"):
        M.Surface(np.where(v == 4, np.nan, v), f)
    with pytest.raises(DataError, match="positive integer"):
        M.Surface(v, f).sample(0, np.random.default_rng(0))


def test_normalise_cloud_against_the_definition() -> None:
    rng = np.random.default_rng(0)
    p = rng.normal(size=(1024, 3)) * [3.0, 0.5, 1.0] + [10.0, -4.0, 2.0]
    q = M.normalise_cloud(p)
    assert q.dtype == np.float32 and q.shape == (1024, 3)
    c = p - p.mean(axis=0)
    ref = c / np.linalg.norm(c, axis=1).max()
    np.testing.assert_allclose(q, ref, atol=1e-7)
    assert np.abs(q.astype(np.float64).mean(axis=0)).max() < 1e-6
    assert abs(np.linalg.norm(q.astype(np.float64), axis=1).max() - 1) < 1e-6
    with pytest.raises(DataError, match="all 5 points coincide"):
        M.normalise_cloud(np.ones((5, 3)))
    with pytest.raises(DataError, match=r"shape \(N, 3\)"):
        M.normalise_cloud(np.ones((5, 2)))
    with pytest.raises(DataError, match="NaN or infinite"):
        M.normalise_cloud(np.array([[0, 0, 0], [1, np.inf, 0]]))


def test_deform_follows_the_documented_formula_and_never_rotates() -> None:
    p = np.random.default_rng(1).uniform(-1, 1, size=(200, 3))
    out = M.deform(p, np.random.default_rng(5))
    r = np.random.default_rng(5)  # the documented draws, in order
    axis, t, b, s = r.uniform(0.8, 1.25, 3), r.uniform(-0.2, 0.2), r.uniform(-0.15, 0.15, 2), r.uniform(0.8, 1.2)
    noise = r.normal(0, 0.01, size=(200, 3))
    q = p * axis
    x = q[:, 0] * (1 + t * q[:, 2]) + b[0] * q[:, 2] ** 2
    y = q[:, 1] * (1 + t * q[:, 2]) + b[1] * q[:, 2] ** 2
    ref = np.stack([x, y, q[:, 2]], axis=1) * s + noise
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    # z is only scaled: never mixed with x or y (no rotation)
    np.testing.assert_allclose(out[:, 2] - noise[:, 2], p[:, 2] * axis[2] * s, atol=1e-12)


# --------------------------------------------------------------------------- the meshes


def test_the_class_list_and_canonical_meshes() -> None:
    assert M.MESH_CLASSES == ("bunny", "duck", "teddy", "mug", "ball", "torus", "shelf", "box", "cone", "cylinder")
    assert M.available_classes() == M.MESH_CLASSES and M.skipped_meshes() == {}
    assert str(M.MESH_SOURCES["bunny"]) == "pybullet_data/bunny.obj"
    assert str(M.MESH_SOURCES["cone"]).startswith("trimesh.creation.cone(radius=0.5, height=1.2")
    for name in M.MESH_CLASSES:
        v, f = M.canonical_mesh(name)
        used = v[np.unique(f)]
        assert not v.flags.writeable and f.shape[1] == 3
        np.testing.assert_allclose((used.min(0) + used.max(0)) / 2, 0, atol=1e-12)
        assert np.linalg.norm(used, axis=1).max() == pytest.approx(1.0)
    # the torus turned from axis y to axis z: thin along z only
    ext = np.ptp(M.canonical_mesh("torus")[0], axis=0)
    assert ext[2] < 0.5 * ext[0] and ext[2] < 0.5 * ext[1]
    with pytest.raises(DataError, match="unknown mesh class 'sphere'.*bunny, duck"):
        M.canonical_mesh("sphere")


def test_missing_libraries_name_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("trimesh", "pybullet_data"):
        with monkeypatch.context() as mp:
            mp.setitem(sys.modules, module, None)
            M._load_all.cache_clear()
            with pytest.raises(DataError, match=r"pip install 'orbitscope\[pointcloud\]'"):
                M.MeshClouds("test", 1)
            with pytest.raises(DataError, match=r"pip install 'orbitscope\[pointcloud\]'"):
                parse_data_spec("meshes:test")
    M._load_all.cache_clear()
    assert M.available_classes() == M.MESH_CLASSES


def test_a_mesh_that_fails_is_skipped_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(M.MESH_SOURCES, "duck", M.MeshSource("duck", "pybullet", "no_such_duck.obj", up="y"))
    monkeypatch.setitem(M.MESH_SOURCES, "mug", M.MeshSource("mug", "pybullet", "cloth_z_up.obj"))  # a flat sheet
    M._load_all.cache_clear()
    M._surface.cache_clear()
    try:
        with pytest.warns(RuntimeWarning) as caught:
            skipped = M.skipped_meshes()
        messages = sorted(str(w.message) for w in caught)
        assert len(messages) == 2 and "'duck' is skipped" in messages[0] and "no_such_duck.obj is missing" in messages[0]
        assert "'mug' is skipped: pybullet_data/cloth_z_up.obj: flat" in messages[1]
        assert set(skipped) == {"duck", "mug"} and "flat" in skipped["mug"]
        ds = M.MeshClouds("test", 2)
        assert "duck" not in ds.classes and len(ds.classes) == 8
        assert ds.data_id.endswith(",classes=" + "+".join(ds.classes))
        assert parse_data_spec(ds.data_id).data_id == ds.data_id
        with pytest.raises(DataError, match="'duck' is not available here.*missing"):
            M.MeshClouds("test", 2, classes=["duck", "box"])
    finally:
        monkeypatch.undo()
        M._load_all.cache_clear()
        M._surface.cache_clear()
    assert M.available_classes() == M.MESH_CLASSES


# --------------------------------------------------------------------------- the dataset


def test_default_sets(default_sets: tuple[M.MeshClouds, M.MeshClouds]) -> None:
    train, test = default_sets
    for ds, n in ((train, 64), (test, 16)):
        assert ds.classes == M.MESH_CLASSES and len(ds) == 10 * n and ds.n_per_class == n
        assert np.array_equal(np.bincount(ds.labels), np.full(10, n))
        assert np.array_equal(ds.labels[:20], np.tile(np.arange(10), 2))  # interleaved
        assert ds.clouds.shape == (10 * n, 1024, 3) and ds.clouds.dtype == np.float32
        c = ds.clouds.astype(np.float64)
        assert np.abs(c.mean(axis=1)).max() < 1e-6
        assert np.abs(np.linalg.norm(c, axis=2).max(axis=1) - 1).max() < 1e-6
    assert train.data_id == "meshes:train,n=64,points=1024,seed=0,v=1"
    assert test.data_id == "meshes:test,n=16,points=1024,seed=0,v=1"
    x, y = test[3]
    assert x.dtype == torch.float32 and x.shape == (1024, 3) and y.dtype == torch.int64 and y.shape == () and y == 3
    x[:] = 0  # items are copies
    assert test.clouds[3].any()
    with pytest.raises(IndexError):
        test[len(test)]


def test_train_and_test_share_no_cloud(default_sets: tuple[M.MeshClouds, M.MeshClouds]) -> None:
    train, test = default_sets
    for k in range(10):
        a = train.clouds[train.labels == k].reshape(64, -1).astype(np.float64)
        b = test.clouds[test.labels == k].reshape(16, -1).astype(np.float64)
        d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        assert d.min() > 1.0  # summed over 1024 points: nowhere near a copy
        assert len({r.tobytes() for r in a}) == 64  # and no duplicates within a split


def test_clouds_are_deterministic_and_seeded() -> None:
    a, b = M.MeshClouds("test", 3, points=256), M.MeshClouds("test", 3, points=256)
    assert np.array_equal(a.clouds, b.clouds)
    c = M.MeshClouds("test", 3, points=256, seed=1)
    assert not np.isclose(a.clouds, c.clouds).all(axis=(1, 2)).any()
    assert c.data_id == "meshes:test,n=3,points=256,seed=1,v=1"
    # n is a prefix, and a class's clouds do not depend on which classes are chosen
    five = M.MeshClouds("test", 5, points=256)
    assert np.array_equal(five.clouds[:30], a.clouds)
    pair = M.MeshClouds("test", 3, points=256, classes=("cone", "bunny"))
    assert pair.classes == ("cone", "bunny") and pair.data_id.endswith(",classes=cone+bunny")
    assert np.array_equal(pair.clouds[pair.labels == 0], a.clouds[a.labels == M.MESH_CLASSES.index("cone")])
    np.testing.assert_array_equal(M.make_cloud("bunny", "test", 2, 256), a.clouds[20])


def test_canonical_orientation_is_kept(default_sets: tuple[M.MeshClouds, M.MeshClouds]) -> None:
    """No per-sample rotation: the ring stays flat in xy and the cylinder stands along z in every
    cloud (a random rotation would lay some of them down)."""
    train, _ = default_sets
    var = train.clouds.astype(np.float64).var(axis=1)
    torus = var[train.labels == M.MESH_CLASSES.index("torus")]
    cyl = var[train.labels == M.MESH_CLASSES.index("cylinder")]
    assert (torus[:, 2] / torus[:, :2].min(axis=1)).max() < 0.6
    assert (cyl[:, 2] / cyl[:, :2].max(axis=1)).min() > 1.5


def features(clouds: np.ndarray) -> np.ndarray:
    """Histograms of x, y, z and of the norm (12 bins each), per cloud."""
    out = []
    for c in clouds:
        h = [np.histogram(c[:, a], bins=12, range=(-1, 1))[0] for a in range(3)]
        h.append(np.histogram(np.linalg.norm(c, axis=1), bins=12, range=(0, 1))[0])
        out.append(np.concatenate(h) / len(c))
    return np.array(out)


def test_the_classes_are_distinguishable(default_sets: tuple[M.MeshClouds, M.MeshClouds]) -> None:
    """A linear classifier on coordinate histograms tells the ten shapes apart; on the same test
    clouds turned by 90° about x it fails, as the set is canonically oriented."""
    from sklearn.linear_model import LogisticRegression

    train, test = default_sets
    clf = LogisticRegression(max_iter=2000, C=10).fit(features(train.clouds), train.labels)
    assert (clf.predict(features(test.clouds)) == test.labels).mean() >= 0.9
    turned = test.clouds[..., [0, 2, 1]] * np.array([1, -1, 1], np.float32)
    assert (clf.predict(features(turned)) == test.labels).mean() < 0.7


def test_subset_and_stratified(default_sets: tuple[M.MeshClouds, M.MeshClouds]) -> None:
    _, test = default_sets
    s = test.stratified(2)
    assert len(s) == 20 and np.array_equal(np.bincount(s.labels), np.full(10, 2)) and s.data_id == test.data_id + "[0:20]"
    t = test.subset([5, -1])
    assert np.array_equal(t.labels, [5, 9]) and np.array_equal(t.clouds[1], test.clouds[-1])
    assert t.data_id.startswith(test.data_id + "[subset:2:")
    with pytest.raises(DataError, match="out of range"):
        test.subset([160])
    with pytest.raises(DataError, match="per_class=17 but .* has 16"):
        test.stratified(17)


def test_bad_arguments() -> None:
    with pytest.raises(DataError, match="split must be 'train' or 'test', got 'val'"):
        M.MeshClouds("val")
    with pytest.raises(DataError, match="n_per_class must be a positive integer"):
        M.MeshClouds("test", 0)
    with pytest.raises(DataError, match="points must be a positive integer"):
        M.MeshClouds("test", 1, points=0)
    with pytest.raises(DataError, match="seed must be an integer >= 0"):
        M.MeshClouds("test", 1, seed=-1)
    with pytest.raises(DataError, match="distinct names from bunny"):
        M.MeshClouds("test", 1, classes=["box", "sphere"])


# --------------------------------------------------------------------------- data specs


def test_data_specs(default_sets: tuple[M.MeshClouds, M.MeshClouds]) -> None:
    _, test = default_sets
    ds = parse_data_spec("meshes:test")
    assert isinstance(ds, M.MeshClouds) and ds.data_id == test.data_id and np.array_equal(ds.clouds, test.clouds)
    assert parse_data_spec("meshes").data_id == test.data_id
    ds = parse_data_spec("meshes:train,n=40,points=512,seed=0")
    assert len(ds) == 400 and ds.clouds.shape[1:] == (512, 3) and ds.data_id == "meshes:train,n=40,points=512,seed=0,v=1"
    assert parse_data_spec(ds.data_id).data_id == ds.data_id
    ds = parse_data_spec("meshes:split=test,n=2,classes=box+cone,points=64")
    assert ds.classes == ("box", "cone") and len(ds) == 4
    sub = parse_data_spec("meshes:test@25")
    assert len(sub) == 25 and sub.data_id == test.data_id + "@25" and np.array_equal(sub.clouds, test.clouds[:25])


@pytest.mark.parametrize("spec, message", [
    ("meshes:val", "expected KEY=VALUE, got 'val'"),
    ("meshes:test,n=0", "n_per_class must be a positive integer"),
    ("meshes:test,n=two", "n must be an integer, got 'two'"),
    ("meshes:test,size=3", "unknown key 'size'"),
    ("meshes:test,split=train", "key 'split' given twice"),
    ("meshes:test,v=2", "generator version 1, not v=2"),
    ("meshes:test,classes=box+sphere", "distinct names from bunny"),
])
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_data_spec(spec)
