"""SO(3) samples: NERO's axis-angle grid, super-Fibonacci grids, the octahedral group.

Independent references: scipy.spatial.transform.Rotation (quaternions, rotation vectors, its
octahedral group), brute-force signed permutation matrices, random uniform rotations.
"""

import itertools
import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation as SciRotation

from orbitscope.errors import SpecError
from orbitscope.group import (
    NeroSO3,
    Octahedral,
    Product,
    Rotation3D,
    SO3Grid,
    TimeReversal,
    check_closed,
    orbit_from_spec,
    quaternion_to_matrix,
    super_fibonacci,
    unique_elements,
)

RNG = np.random.default_rng(11)


def scipy_matrices(q: np.ndarray) -> np.ndarray:
    return SciRotation.from_quat(np.asarray(q)[:, [1, 2, 3, 0]]).as_matrix()  # scipy is scalar-last


def angle_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rotation angles (radians) between every quaternion of a and of b: 2 acos |<a, b>|."""
    return 2.0 * np.arccos(np.clip(np.abs(a @ b.T), 0.0, 1.0))


def random_unit_quaternions(n: int, rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=(n, 4))  # isotropic Gaussian -> uniform on S^3 -> Haar-uniform on SO(3)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


# -- NERO's sample -------------------------------------------------------------------------------


def test_nero_so3_grid_and_counts():
    o = NeroSO3()
    assert o.kind == "so3_nero" and o.dims == ("plane", "axis_angle", "rotation_angle")
    assert o.units == ("index", "degrees", "degrees")
    assert NeroSO3.PLANES == ("xy", "xz", "yz") and o.coords["plane"].tolist() == [0, 1, 2]
    assert o.coords["axis_angle"].tolist() == list(range(0, 361, 5))
    assert o.coords["rotation_angle"].tolist() == list(range(0, 181, 15))
    assert o.shape == (3, 73, 13) and o.size == 2847 == len(o.quaternions)
    t = o.transforms()
    assert t.dim == 3 and len(t) == 2847
    rep = unique_elements(t)
    assert len(np.unique(rep)) == 2416
    assert np.sum(rep == rep[o.identity_index()]) == 219 and o.identity_index() == 0
    assert int(np.sum(t.is_geometric_identity)) == 219
    np.testing.assert_allclose(np.linalg.norm(o.quaternions, axis=1), 1.0, atol=1e-15)


def test_nero_so3_axes_and_angles_match_rotation_vectors():
    o = NeroSO3()
    q = o.quaternions.reshape(3, 73, 13, 4)
    mats = o.matrices.reshape(3, 73, 13, 3, 3)
    for plane, name in enumerate(NeroSO3.PLANES):
        for ia, ip in [(0, 5), (6, 3), (17, 12), (40, 7), (72, 1)]:
            phi, psi = math.radians(5 * ia), math.radians(15 * ip)
            axis = {"xy": (math.cos(phi), math.sin(phi), 0.0), "xz": (math.cos(phi), 0.0, -math.sin(phi)),
                    "yz": (0.0, math.cos(phi), math.sin(phi))}[name]
            ref = SciRotation.from_rotvec(psi * np.array(axis)).as_matrix()
            np.testing.assert_allclose(mats[plane, ia, ip], ref, atol=1e-12)
            np.testing.assert_allclose(q[plane, ia, ip, 0], math.cos(psi / 2), atol=1e-15)
    # right-handed: a quarter turn about +z (yz plane, φ = 90°) sends +x to +y
    np.testing.assert_allclose(mats[2, 18, 6] @ np.array([1.0, 0.0, 0.0]), [0.0, 1.0, 0.0], atol=1e-15)
    # half turns are exact (ψ/2 = 90°): about +x, y -> -y and z -> -z
    np.testing.assert_array_equal(mats[0, 0, 12], np.diag([1.0, -1.0, -1.0]))


def test_nero_so3_other_steps_and_spec():
    o = NeroSO3(axis_step=30.0, angle_step=45.0)
    assert o.shape == (3, 13, 5)
    assert o.spec() == {"kind": "so3_nero", "axis_step": 30.0, "angle_step": 45.0}
    assert orbit_from_spec(o.spec_json()) == o and orbit_from_spec({"kind": "so3_nero"}) == NeroSO3()
    for bad in (0.0, -5.0, math.nan, math.inf):
        with pytest.raises(SpecError):
            NeroSO3(axis_step=bad)
        with pytest.raises(SpecError):
            NeroSO3(angle_step=bad)


# -- quaternions against scipy -------------------------------------------------------------------


@pytest.mark.parametrize("orbit", [NeroSO3(), SO3Grid(200), Octahedral()], ids=["nero", "grid", "octahedral"])
def test_quaternion_to_matrix_agrees_with_scipy(orbit):
    np.testing.assert_allclose(orbit.matrices, scipy_matrices(orbit.quaternions), atol=1e-12)
    np.testing.assert_allclose(orbit.transforms().linear, orbit.matrices, atol=0)
    np.testing.assert_allclose(quaternion_to_matrix(orbit.quaternions), orbit.matrices, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(orbit.matrices), 1.0, atol=1e-12)
    assert orbit.quaternions.shape == (orbit.size, 4) and orbit.transforms().dim == 3


def test_composition_on_points_matches_quaternion_product():
    o = SO3Grid(30)
    t = o.transforms()
    p = RNG.normal(size=(9, 3))
    for i, j in itertools.product(range(0, 30, 7), repeat=2):
        gh = t[i].compose(t[j])
        np.testing.assert_allclose(p @ gh.linear[0].T, (p @ t.linear[j].T) @ t.linear[i].T, atol=1e-12)
        ref = (SciRotation.from_matrix(t.linear[i]) * SciRotation.from_matrix(t.linear[j])).as_matrix()
        np.testing.assert_allclose(gh.linear[0], ref, atol=1e-12)
    inv = t.inverse()
    np.testing.assert_allclose(inv.linear, np.transpose(t.linear, (0, 2, 1)), atol=1e-12)


# -- super-Fibonacci grid ------------------------------------------------------------------------


def test_super_fibonacci_constants_and_determinism():
    from orbitscope.group.so3 import _SUPER_FIBONACCI_PSI as psi

    assert abs(psi**4 - psi - 4) < 1e-12 and abs(psi - 1.533751168755204288) < 1e-12
    q = super_fibonacci(500)
    assert q.shape == (500, 4)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(q, super_fibonacci(500))
    o = SO3Grid(500)
    assert o.kind == "so3_grid" and o.dims == ("rotation",) and isinstance(o, Rotation3D)
    np.testing.assert_array_equal(o.quaternions, q)
    assert o.spec() == {"kind": "so3_grid", "n": 500, "method": "super-fibonacci"}
    assert orbit_from_spec(o.spec_json()) == o


def test_super_fibonacci_is_clearly_more_uniform_than_random():
    n = 600
    grid = super_fibonacci(n)
    rand = random_unit_quaternions(n, RNG)
    probes = random_unit_quaternions(20000, np.random.default_rng(5))

    def separation(q):
        d = angle_between(q, q)
        np.fill_diagonal(d, np.inf)
        return d.min()

    def covering_radius(q):
        return angle_between(probes, q).min(axis=1).max()

    # Haar measure: E[R] = 0; a low-discrepancy set is much closer to that than random points
    def mean_matrix(q):
        return np.abs(quaternion_to_matrix(q).mean(axis=0)).max()

    assert separation(grid) > 4 * separation(rand)
    assert covering_radius(grid) < 0.75 * covering_radius(rand)
    assert mean_matrix(grid) < 0.2 * mean_matrix(rand)
    # and the grid's own separation is near the best possible order: ball volume ~ 1/n
    assert math.degrees(separation(grid)) > 10.0


def test_so3_grid_bad_arguments():
    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(SpecError):
            SO3Grid(bad)
    with pytest.raises(SpecError, match="method"):
        SO3Grid(10, method="random")
    with pytest.raises(SpecError, match="20,000,000"):
        SO3Grid(20_000_000)
    assert SO3Grid(np.int64(4)).n == 4


# -- octahedral group ----------------------------------------------------------------------------


def signed_permutations_det1() -> np.ndarray:
    mats = []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            m = np.zeros((3, 3))
            m[np.arange(3), perm] = signs
            if np.linalg.det(m) > 0:
                mats.append(m)
    return np.array(mats)


def test_octahedral_is_the_cube_rotation_group():
    o = Octahedral()
    assert o.kind == "octahedral" and o.dims == ("rotation",) and o.size == 24
    t = o.transforms()
    assert o.identity_index() == 0 and t.is_geometric_identity[0]
    assert len(check_closed(t)) == 24
    assert len(np.unique(unique_elements(t))) == 24
    assert set(np.unique(o.matrices)) <= {-1.0, 0.0, 1.0}  # exact
    # the same set as the brute-force signed permutations with det +1 ...
    ref = signed_permutations_det1()
    assert len(ref) == 24
    ours = {tuple(m.ravel()) for m in o.matrices}
    assert ours == {tuple(m.ravel()) for m in ref}
    # ... and as scipy's octahedral group
    sci = SciRotation.create_group("O").as_matrix()
    assert ours == {tuple(np.rint(m).ravel()) for m in sci}
    # inverses stay in the group, and every element's inverse is its transpose
    inv = t.inverse()
    assert {tuple(m.ravel()) for m in np.rint(inv.linear)} == ours
    np.testing.assert_allclose(inv.linear, np.transpose(o.matrices, (0, 2, 1)), atol=1e-15)
    # unit quaternions, one per rotation (no q / -q pair)
    np.testing.assert_allclose(np.linalg.norm(o.quaternions, axis=1), 1.0, atol=1e-15)
    assert np.abs(o.quaternions @ o.quaternions.T)[~np.eye(24, dtype=bool)].max() < 1 - 1e-6


def test_products_with_so3_orbits():
    o = Product(TimeReversal(), Octahedral())
    assert o.dims == ("time_reversed", "rotation") and o.shape == (2, 24)
    t = o.transforms()
    assert t.dim == 3 and t.time_reversed.tolist() == [False] * 24 + [True] * 24
    assert len(check_closed(t)) == 48
    assert orbit_from_spec(o.spec_json()) == o
