"""Group laws and orbit specs (independent references: closed forms, scipy's rotations)."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation as SciRotation

from orbitscope.group import (
    Brightness,
    Contrast,
    Product,
    Rotation,
    Rotation3D,
    Rotation90,
    Scale,
    Transforms,
    Translation,
    list_orbits,
    orbit_from_spec,
    parse_orbit,
    quaternion_to_matrix,
    rotation_matrix,
)

RNG = np.random.default_rng(0)


def random_elements(k: int = 20) -> Transforms:
    ang = RNG.uniform(-180, 180, k)
    sc = RNG.uniform(0.5, 2.0, k)
    lin = rotation_matrix(ang) * sc[:, None, None]
    lin[::3, :, 0] *= -1  # some mirrors
    return Transforms.create(
        k, linear=lin, shift=RNG.normal(0, 5, (k, 2)), gain=RNG.uniform(0.5, 2, k),
        contrast=RNG.uniform(0.5, 2, k), time_reversed=RNG.random(k) < 0.5,
    )


def test_rotation_matrix_closed_form_and_exact_quarters():
    th = np.deg2rad(30.0)
    # y axis down: counter-clockwise as displayed maps +x (right) towards -y (up).
    np.testing.assert_allclose(rotation_matrix(30.0), [[np.cos(th), np.sin(th)], [-np.sin(th), np.cos(th)]])
    np.testing.assert_allclose(rotation_matrix(30.0) @ [1.0, 0.0], [np.cos(th), -np.sin(th)])
    for k, expected in enumerate([[[1, 0], [0, 1]], [[0, 1], [-1, 0]], [[-1, 0], [0, -1]], [[0, -1], [1, 0]]]):
        m = rotation_matrix(90.0 * k)
        assert np.array_equal(m, np.array(expected, dtype=float)), k
        assert np.array_equal(rotation_matrix(90.0 * k - 360.0), m)


def test_composition_inverse_identity_associativity():
    g, h, f = random_elements(), random_elements(), random_elements()
    ident = Transforms.identity(len(g))
    assert g.compose(g.inverse()).allclose(ident)
    assert g.inverse().compose(g).allclose(ident)
    assert g.compose(ident).allclose(g) and ident.compose(g).allclose(g)
    assert g.compose(h).compose(f).allclose(g.compose(h.compose(f)))
    # inverse of a composition reverses the order
    assert g.compose(h).inverse().allclose(h.inverse().compose(g.inverse()))


def test_compose_acts_on_points_as_function_composition():
    g, h = random_elements(5), random_elements(5)
    p = RNG.normal(size=(5, 2))
    apply = lambda t, q: (t.linear @ q[..., None])[..., 0] + t.shift  # noqa: E731
    np.testing.assert_allclose(apply(g, apply(h, p)), apply(g.compose(h), p), atol=1e-12)


def test_rotation_angles_add():
    a, b = Rotation([17.0]).transforms(), Rotation([-41.5]).transforms()
    assert a.compose(b).allclose(Rotation([17.0 - 41.5]).transforms())


def test_scale_brightness_contrast_multiply_translation_adds():
    assert Scale([2.0]).transforms().compose(Scale([0.25]).transforms()).allclose(Scale([0.5]).transforms())
    assert Brightness([1.2]).transforms().compose(Brightness([0.5]).transforms()).allclose(Brightness([0.6]).transforms())
    assert Contrast([1.5]).transforms().compose(Contrast([2.0]).transforms()).allclose(Contrast([3.0]).transforms())
    t = Translation([3.0], [-2.0]).transforms().compose(Translation([1.0], [5.0]).transforms())
    np.testing.assert_allclose(t.shift, [[4.0, 3.0]])


def test_product_order_and_dims():
    a, b = Rotation([0, 90, 180]), Scale([0.5, 1.0])
    prod = Product(a, b)
    assert prod.dims == ("angle", "scale") and prod.shape == (3, 2) and prod.size == 6
    t = prod.transforms()
    for i, ang in enumerate([0, 90, 180]):
        for j, s in enumerate([0.5, 1.0]):
            expected = Rotation([ang]).transforms().compose(Scale([s]).transforms())
            assert t[i * 2 + j].allclose(expected)
    assert prod.identity_index() == 1
    with pytest.raises(ValueError, match="sharing dims"):
        Product(Rotation([0]), Rotation([1]))


def test_translation_grid_c_order():
    t = Translation([-1, 0, 1], [10, 20]).transforms()
    assert len(t) == 6
    np.testing.assert_array_equal(t.shift[:3], [[-1, 10], [-1, 20], [0, 10]])


def test_parse_orbit_grids():
    o = parse_orbit("rotation:0:360:5")
    assert o.size == 73 and o.coords["angle"][0] == 0 and o.coords["angle"][-1] == 360
    s = parse_orbit("shift:-64:60:4")
    assert s.shape == (32, 32) and s.coords["tx"][0] == -64 and s.coords["tx"][-1] == 60
    sc = parse_orbit("scale:0.7:1.3:0.02")
    assert sc.size == 31 and np.isclose(sc.coords["scale"][15], 1.0)
    assert sc.identity_index() == 15
    prod = parse_orbit("rotation:0:360:30 x scale:0.8:1.2:0.1")
    assert prod.dims == ("angle", "scale") and prod.shape == (13, 5)
    assert parse_orbit("rotation90").coords["angle"].tolist() == [0, 90, 180, 270]
    for bad in ["", "rotation:0:360", "spin:0:1:1", "rotation:a:b:c", "rotation:10:0:5", "rotation:0:10:0"]:
        with pytest.raises(ValueError):
            parse_orbit(bad)


def test_spec_round_trip_every_kind():
    orbits = [
        Rotation(range(0, 361, 5)), Rotation90(), Translation([-2, 0, 2], [1, 3]), Scale([0.5, 1, 2]),
        Brightness([0.7, 1.3]), Contrast([0.5, 1.0]), Rotation3D(RNG.normal(size=(4, 4))),
        Product(Rotation([0, 45]), Scale([1, 2])),
    ]
    assert {o.kind for o in orbits} <= set(list_orbits())  # the newer kinds: tests/test_group_finite.py
    for o in orbits:
        back = orbit_from_spec(o.spec_json())
        assert back == o and back.shape == o.shape
        assert back.transforms().allclose(o.transforms())
    with pytest.raises(ValueError, match="unknown orbit kind"):
        orbit_from_spec({"kind": "nope"})


def test_quaternions_match_scipy_and_are_rotations():
    q = RNG.normal(size=(50, 4))
    ours = quaternion_to_matrix(q)
    ref = SciRotation.from_quat(q[:, [1, 2, 3, 0]]).as_matrix()  # scipy is scalar-last
    np.testing.assert_allclose(ours, ref, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(ours), 1.0, atol=1e-12)
    with pytest.raises(ValueError):
        quaternion_to_matrix(np.zeros(4))


def test_invalid_values_rejected():
    with pytest.raises(ValueError):
        Scale([0.0, 1.0])
    with pytest.raises(ValueError):
        Brightness([-1.0])
    with pytest.raises(ValueError):
        Rotation([])
    with pytest.raises(ValueError):
        Rotation([np.nan])
    with pytest.raises(ValueError):
        Transforms.create(2, gain=[1.0, 0.0])
