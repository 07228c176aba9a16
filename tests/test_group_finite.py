"""Finite planar groups (flip, D4, time reversal), the orbit registry, spec round trips and parsing.

Independent references: explicit mirror matrices and rotation_matrix, brute-force matrix products
for the Cayley table, points moved one element at a time.
"""

import itertools
import json
import math

import numpy as np
import pytest

import orbitscope.group as og
from orbitscope.errors import NotFoundError, SpecError
from orbitscope.group import (
    D4,
    NERO_MOSAIC,
    ORBITS,
    Brightness,
    Contrast,
    Flip,
    NeroSO3,
    Octahedral,
    Product,
    Rotation,
    Rotation3D,
    Rotation90,
    Scale,
    SO3Grid,
    RandomSO3,
    TimeReversal,
    Transforms,
    Translation,
    check_closed,
    d4_time_reversal,
    list_orbits,
    orbit_from_spec,
    parse_orbit,
    rotation_matrix,
    unique_elements,
)

RNG = np.random.default_rng(7)


def move(t: Transforms, i: int, p: np.ndarray) -> np.ndarray:
    """Element i of t applied to points p (N, d): linear @ p + shift."""
    return p @ t.linear[i].T + t.shift[i]


def index_of(matrix: np.ndarray, matrices: np.ndarray) -> int:
    hits = [k for k, m in enumerate(matrices) if np.array_equal(m, matrix)]
    assert len(hits) == 1, f"{matrix} found {len(hits)} times"
    return hits[0]


# -- D4 ------------------------------------------------------------------------------------------


def test_d4_matrices_are_rotations_and_explicit_mirrors():
    m = D4().transforms().linear
    # rotations from rotation_matrix (exact at multiples of 90°)
    for idx, angle in ((0, 0.0), (2, 90.0), (4, 180.0), (6, 270.0)):
        assert np.array_equal(m[idx], rotation_matrix(angle)), idx
    # mirrors, written out from where they send a point (x, y)
    x, y = 3.0, -5.0
    expected = {1: (-y, -x), 3: (-x, y), 5: (y, x), 7: (x, -y)}
    for idx, image in expected.items():
        assert tuple(m[idx] @ np.array([x, y])) == image, D4.NAMES[idx]
    assert np.array_equal(m[3], np.diag([-1.0, 1.0])) and np.array_equal(m[7], np.diag([1.0, -1.0]))
    assert np.array_equal(m[5], np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert np.array_equal(m[1], np.array([[0.0, -1.0], [-1.0, 0.0]]))
    # rot90 is counter-clockwise as displayed (y down): right (+x) goes up (-y)
    assert tuple(m[2] @ np.array([1.0, 0.0])) == (0.0, -1.0)
    # exact integers, proper/improper as expected
    assert set(np.unique(m)) <= {-1.0, 0.0, 1.0}
    assert np.array_equal(np.round(np.linalg.det(m)), [1, -1, 1, -1, 1, -1, 1, -1])
    assert len(D4.NAMES) == 8 and len(set(D4.NAMES)) == 8
    assert D4().dims == ("d4",) and D4().coords["d4"].tolist() == list(range(8)) and D4().kind == "d4"


def test_d4_cayley_table_matches_brute_force_products():
    m = D4.matrices()
    brute = np.array([[index_of(m[i] @ m[j], m) for j in range(8)] for i in range(8)])
    assert np.array_equal(D4.cayley_table(), brute)
    # and Transforms.compose agrees: (g_i ∘ g_j) is element table[i, j]
    t = D4().transforms()
    ia, ib = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    prods = t[ia.ravel()].compose(t[ib.ravel()])
    assert prods.allclose(t[brute.ravel()], atol=0)
    # a Latin square with the identity row/column first (a group table)
    for row in brute:
        assert sorted(row) == list(range(8))
    assert brute[0].tolist() == list(range(8)) and brute[:, 0].tolist() == list(range(8))


def test_composition_acts_on_points_for_every_pair():
    p = RNG.normal(size=(11, 2)) * 10
    for orbit in (D4(), Flip("x"), Flip("y"), d4_time_reversal()):
        t = orbit.transforms()
        for i, j in itertools.product(range(len(t)), repeat=2):
            gh = t[i].compose(t[j])
            np.testing.assert_array_equal(move(t, i, move(t, j, p)), move(gh, 0, p))
            assert gh.time_reversed[0] == (t.time_reversed[i] != t.time_reversed[j])


def test_inverses():
    t = D4().transforms()
    table = D4.cayley_table()
    inv = t.inverse()
    for i in range(8):
        j = int(np.flatnonzero(table[i] == 0)[0])
        assert table[j, i] == 0
        assert inv[i].allclose(t[j], atol=0)
        assert t[i].compose(inv[i]).is_geometric_identity.all()
    # rotations invert to the opposite rotation, mirrors are their own inverse
    assert [int(np.flatnonzero(table[i] == 0)[0]) for i in range(8)] == [0, 1, 6, 3, 4, 5, 2, 7]
    tt = d4_time_reversal().transforms()
    ident = tt.compose(tt.inverse())
    assert ident.is_geometric_identity.all() and not ident.time_reversed.any()


def test_closure_of_the_finite_groups():
    assert len(check_closed(D4().transforms())) == 8
    assert len(check_closed(Flip("x").transforms())) == 2
    assert len(check_closed(Flip("y").transforms())) == 2
    assert len(check_closed(TimeReversal().transforms())) == 2
    t = d4_time_reversal().transforms()
    assert len(np.unique(unique_elements(t))) == 16
    assert len(check_closed(t)) == 16
    # Rotation90 is the subgroup of even D4 elements
    assert Rotation90().transforms().allclose(D4().transforms()[[0, 2, 4, 6]], atol=0)


# -- flip, time reversal, NERO's 16 -------------------------------------------------------------


def test_flip_axes():
    fx, fy = Flip().transforms(), Flip("y").transforms()
    assert Flip().axis == "x" and Flip().dims == ("flip",) and Flip().coords["flip"].tolist() == [0, 1]
    assert fx.is_geometric_identity.tolist() == [True, False]
    uv = np.array([2.0, 3.0])  # a flow vector (u, v) transforms with the same matrix
    assert tuple(fx.linear[1] @ uv) == (-2.0, 3.0)
    assert tuple(fy.linear[1] @ uv) == (2.0, -3.0)
    assert Flip().identity_index() == 0
    with pytest.raises(SpecError, match="axis"):
        Flip("z")


def test_time_reversal():
    tr = TimeReversal()
    assert tr.kind == "time_reversal" and tr.dims == ("time_reversed",) and tr.coords["time_reversed"].tolist() == [0, 1]
    t = tr.transforms()
    assert t.time_reversed.tolist() == [False, True]
    assert t.is_geometric_identity.all() and t.is_photometric_identity.all()
    assert tr.identity_index() == 0


def test_d4_time_reversal_follows_nero_index():
    o = d4_time_reversal()
    assert isinstance(o, Product)
    assert o.dims == ("time_reversed", "d4") and o.shape == (2, 8)
    t = o.transforms()
    m = D4.matrices()
    for index in range(16):
        rev, d = divmod(index, 8)
        assert t.time_reversed[index] == bool(rev)
        assert np.array_equal(t.linear[index], m[d])
    assert o.identity_index() == 0


def test_nero_mosaic_layout():
    assert og.NERO_MOSAIC is NERO_MOSAIC
    cells = np.array(NERO_MOSAIC)
    assert cells.shape == (4, 4) and sorted(cells.ravel()) == list(range(16))
    assert sorted(cells[:, 1:3].ravel()) == list(range(8))  # middle columns: the D4 elements
    assert np.array_equal(cells[:, 0], cells[:, 1] + 8) and np.array_equal(cells[:, 3], cells[:, 2] + 8)
    assert cells[1, 2] == 0  # the identity


# -- registry, spec round trips -----------------------------------------------------------------


def every_kind() -> list:
    return [
        Rotation(range(0, 361, 5)), Rotation90(), Translation([-2, 0, 2], [1, 3]), Scale([0.5, 1, 2]),
        Brightness([0.7, 1.3]), Contrast([0.5, 1.0]), Rotation3D(RNG.normal(size=(4, 4))),
        Product(Rotation([0, 45]), Scale([1, 2])),
        Flip(), Flip("y"), D4(), TimeReversal(), NeroSO3(), NeroSO3(30.0, 45.0), SO3Grid(17), RandomSO3(9, seed=4), Octahedral(),
        d4_time_reversal(), Product(Flip("y"), Rotation90()), Product(d4_time_reversal(), Brightness([0.5, 1.0])),
        Product(TimeReversal(), Octahedral()), Product(NeroSO3(90.0, 90.0), TimeReversal()),
        Product(SO3Grid(5), Scale([1.0, 2.0])),
    ]


def test_spec_round_trip_for_every_registered_kind():
    orbits = every_kind()
    assert {o.kind for o in orbits} == set(list_orbits())
    assert {"flip", "d4", "time_reversal", "so3_nero", "so3_grid", "octahedral"} <= set(list_orbits())
    for o in orbits:
        back = orbit_from_spec(o.spec_json())
        assert type(back) is type(o) and back == o and back.shape == o.shape and back.dims == o.dims
        assert back.transforms().allclose(o.transforms(), atol=0)
        assert orbit_from_spec(json.loads(json.dumps(o.spec()))) == o
    assert Flip("y").spec() == {"kind": "flip", "axis": "y"}
    assert Flip("y") != Flip("x")


def test_registry_is_the_shared_mechanism():
    assert ORBITS.get("d4") is D4 and ORBITS.get("so3_nero") is NeroSO3
    assert ORBITS.names() == list_orbits()
    with pytest.raises(NotFoundError, match="unknown orbit kind"):
        ORBITS.get("nope")
    with pytest.raises(SpecError, match="unknown orbit kind 'nope'"):
        orbit_from_spec({"kind": "nope"})
    with pytest.raises(SpecError, match="already registered"):
        og.register_orbit(type("Other", (og.Orbit,), {"kind": "d4"}))
    with pytest.raises(SpecError, match="JSON"):
        orbit_from_spec("rotation:0:360:5")
    with pytest.raises(SpecError, match="factors"):
        orbit_from_spec({"kind": "product", "factors": [{"kind": "d4"}]})
    with pytest.raises(SpecError, match="angle"):
        orbit_from_spec({"kind": "rotation"})


def test_spec_dicts_with_bad_values_are_refused():
    with pytest.raises(SpecError, match="angles must be finite numbers, got nan"):
        orbit_from_spec({"kind": "rotation", "angle": [0.0, math.nan]})
    with pytest.raises(SpecError, match="inf"):
        orbit_from_spec({"kind": "scale", "scale": [1.0, math.inf]})
    with pytest.raises(SpecError, match="16,000,000"):
        orbit_from_spec({"kind": "translation", "tx": list(range(4000)), "ty": list(range(4000))})
    with pytest.raises(SpecError, match="100,000,000"):
        orbit_from_spec({"kind": "so3_grid", "n": 10**8})
    with pytest.raises(SpecError, match="axis"):
        orbit_from_spec({"kind": "flip", "axis": "diagonal"})
    with pytest.raises(SpecError, match="quaternions must be finite"):
        orbit_from_spec({"kind": "rotation3d", "quaternions": [[1.0, 0.0, 0.0, 0.0], [math.nan, 0.0, 1.0, 0.0]]})


# -- parse_orbit --------------------------------------------------------------------------------


def test_parse_new_forms():
    assert parse_orbit("flip") == Flip("x") and parse_orbit("flip:x") == Flip("x")
    assert parse_orbit("flip:y") == Flip("y") and parse_orbit("FLIP:Y") == Flip("y")
    assert parse_orbit("d4") == D4()
    assert parse_orbit("time-reversal") == TimeReversal() == parse_orbit("time_reversal")
    o = parse_orbit("d4xt")
    assert o == d4_time_reversal() and o.dims == ("time_reversed", "d4")
    assert parse_orbit("so3-nero") == NeroSO3()
    assert parse_orbit("so3-nero:10:30") == NeroSO3(10.0, 30.0)
    assert parse_orbit("so3:64") == SO3Grid(64)
    assert parse_orbit("octahedral") == Octahedral()
    prod = parse_orbit("d4 x time-reversal")  # the factors commute: read in NERO's order
    assert prod.dims == ("time_reversed", "d4") and prod.shape == (2, 8) and prod == parse_orbit("d4xt")
    other = parse_orbit("d4 x flip")  # other products keep the order given
    assert other.dims == ("d4", "flip")
    prod = parse_orbit("d4xt x brightness:0.5:1:0.5")
    assert prod.dims == ("time_reversed", "d4", "brightness") and prod.size == 32
    # the old forms still parse
    assert parse_orbit("rotation:0:360:5").size == 73 and parse_orbit("rotation90") == Rotation90()


@pytest.mark.parametrize(
    "text, message",
    [
        ("rotation:0:nan:5", "STOP must be a finite number, got 'nan'"),
        ("rotation:nan:360:5", "START must be a finite number, got 'nan'"),
        ("rotation:0:360:nan", "STEP must be a finite number, got 'nan'"),
        ("rotation:0:inf:5", "STOP must be a finite number, got 'inf'"),
        ("shift:-inf:0:1", "START must be a finite number, got '-inf'"),
        ("scale:0.5:1:-0.1", "STEP must be > 0"),
        ("rotation:0:1e9:0.001", "1,000,000,000,001 elements"),
        ("shift:0:10000:1", "100,020,001 elements"),
        ("rotation:0:3600:1 x scale:1:10000:1", "36,010,000 elements"),
        ("so3:20000000", "20,000,000 elements"),
        ("so3-nero:0.01:0.01", "elements"),
        ("so3-nero:nan:15", "AXIS_STEP must be a finite number"),
        ("so3-nero:5:0", "STEP must be > 0"),
        ("so3-nero:5", "cannot parse"),
        ("so3:0", "n >= 1"),
        ("so3:2.5", "whole number"),
        ("so3:many", "whole number"),
        ("flip:z", "flip axis"),
        ("d4:2", "cannot parse"),
        ("octahedral:1", "cannot parse"),
        ("d4xt:1", "cannot parse"),
        ("dihedral", "unknown orbit 'dihedral'"),
        ("", "empty"),
    ],
)
def test_parse_errors_are_spec_errors(text, message):
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("(", r"\(")) as info:
        parse_orbit(text)
    assert isinstance(info.value, ValueError)


def test_help_text_lists_the_new_forms():
    with pytest.raises(ValueError) as info:  # the message of a spec that cannot be parsed lists the forms
        og.parse_orbit("spin:0:1:1")
    help_text = str(info.value)
    for form in ("flip:y", "'d4'", "time-reversal", "d4xt", "so3-nero", "so3:N", "octahedral"):
        assert form in help_text, form
