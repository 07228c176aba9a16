"""ModelNet folders (orbitscope.data.modelnet) on files written here: OFF parsing (the fused
header, comments, polygon faces) against the vertices and faces written, the OFF and resampled-text
layouts, normalisation, determinism, the data spec and the error messages."""

from pathlib import Path

import numpy as np
import pytest
import torch

from orbitscope.data import modelnet as MN
from orbitscope.data.specs import parse_data_spec
from orbitscope.errors import DataError, SpecError

CUBE_V = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float)
CUBE_QUADS = [[0, 3, 2, 1], [4, 5, 6, 7], [0, 1, 5, 4], [1, 2, 6, 5], [2, 3, 7, 6], [3, 0, 4, 7]]


def off_text(v: np.ndarray, faces: list[list[int]], fused: bool = False, comments: bool = False,
             colours: bool = False) -> str:
    head = f"OFF{len(v)} {len(faces)} 0\n" if fused else f"OFF\n{len(v)} {len(faces)} 0\n"
    lines = [head + ("# a comment line\n\n" if comments else "")]
    lines += [" ".join(f"{c:.6f}" for c in row) + (" # vertex" if comments else "") + "\n" for row in v]
    lines += [" ".join(map(str, [len(f), *f])) + (" 200 10 10" if colours else "") + "\n" for f in faces]
    return "".join(lines)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def triangle_area(v: np.ndarray, f: np.ndarray) -> float:
    return float(0.5 * np.linalg.norm(np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]), axis=1).sum())


# --------------------------------------------------------------------------- OFF parsing


@pytest.mark.parametrize("fused, comments, colours", [(False, False, False), (True, False, False),
                                                      (True, True, True), (False, True, False)])
def test_read_off_cube_of_quads(tmp_path: Path, fused: bool, comments: bool, colours: bool) -> None:
    p = write(tmp_path / "cube.off", off_text(CUBE_V, CUBE_QUADS, fused, comments, colours))
    v, f = MN.read_off(p)
    np.testing.assert_array_equal(v, CUBE_V)
    fans = [[q[0], q[j], q[j + 1]] for q in CUBE_QUADS for j in (1, 2)]
    assert f.dtype == np.int64 and f.tolist() == fans
    assert triangle_area(v, f) == pytest.approx(6.0)


def test_read_off_mixed_polygons(tmp_path: Path) -> None:
    v = np.array([[np.cos(a), np.sin(a), 0.0] for a in np.linspace(0, 2 * np.pi, 6)[:-1]] + [[0, 0, 1]])
    faces = [[0, 1, 2, 3, 4], [0, 1, 5], [1, 2, 5]]  # a pentagon and two triangles
    p = write(tmp_path / "m.off", off_text(v, faces, fused=True))
    rv, f = MN.read_off(p)
    np.testing.assert_allclose(rv, v, atol=1e-6)
    assert f.tolist() == [[0, 1, 2], [0, 2, 3], [0, 3, 4], [0, 1, 5], [1, 2, 5]]
    pentagon = 5 / 2 * np.sin(2 * np.pi / 5)  # area of the regular pentagon of circumradius 1
    assert triangle_area(rv, f[:3]) == pytest.approx(pentagon, rel=1e-5)


@pytest.mark.parametrize("text, message", [
    ("", "is empty"),
    ("PLY\n3 1 0\n", "line 1: expected the header 'OFF', got 'PLY'"),
    ("OFF\n", "ends after the header"),
    ("OFF\n3 x 0\n", "line 2: expected the counts 'V F E'"),
    ("OFF\n3 1 0\n0 0 0\n1 0 0\n", "announces 3 vertices and 1 faces, but the file ends after 2 vertices"),
    ("OFF\n3 1 0\n0 0 0\n1 zero 0\n0 1 0\n3 0 1 2\n", "line 4: expected a vertex 'x y z'"),
    ("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1\n3 0 1 2\n", "line 5: expected a vertex"),
    ("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 3\n", "line 6: vertex index 3 is out of range.*0..2"),
    ("OFF 3 1 0\n0 0 0\n1 0 0\n0 1 0\n4 0 1 2\n", "line 5: a face needs at least 3 indices and as many as it "
                                                   "announces"),
    ("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 a\n", "line 6: the face is not made of integers"),
    ("OFF BINARY\n", "binary OFF is not supported"),
])
def test_read_off_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    p = write(tmp_path / "bad.off", text)
    with pytest.raises(DataError, match=message) as info:
        MN.read_off(p)
    assert str(p) in str(info.value)


def test_read_off_missing_and_binary(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="OFF file not found"):
        MN.read_off(tmp_path / "nope.off")
    p = tmp_path / "b.off"
    p.write_bytes(b"OFF\n\xff\xfe\x00\x01")
    with pytest.raises(DataError, match="not a text OFF file"):
        MN.read_off(p)


# --------------------------------------------------------------------------- the OFF layout


@pytest.fixture()
def off_root(tmp_path: Path) -> Path:
    """bed: 2 train / 3 test unit cubes (quads, fused headers); chair: 1 train / 2 test tetrahedra."""
    root = tmp_path / "ModelNet2"
    tet_v = np.array([[0, 0, 0], [2, 0, 0], [0, 2, 0], [0, 0, 2]], float)
    tet_f = [[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]]
    for split, nb, nc in (("train", 2, 1), ("test", 3, 2)):
        for i in range(nb):
            write(root / "bed" / split / f"bed_{i + 1:04d}.off", off_text(CUBE_V + i, CUBE_QUADS, fused=i % 2 == 0))
        for i in range(nc):
            write(root / "chair" / split / f"chair_{i + 1:04d}.off", off_text(tet_v * (i + 1), tet_f))
    (root / "README.txt").write_text("not a class")
    return root


def test_off_folder(off_root: Path) -> None:
    ds = MN.ModelNetFolder(off_root, split="test", points=2048, seed=0)
    assert ds.layout == "off" and ds.classes == ("bed", "chair") and len(ds) == 5
    assert ds.labels.tolist() == [0, 0, 0, 1, 1] and [f.name for f in ds.files][:2] == ["bed_0001.off", "bed_0002.off"]
    assert ds.data_id == f"modelnet:{off_root.resolve()},split=test,points=2048,seed=0"
    x, y = ds[1]
    assert x.dtype == torch.float32 and x.shape == (2048, 3) and y.dtype == torch.int64 and int(y) == 0
    c = x.numpy().astype(np.float64)
    assert np.abs(c.mean(axis=0)).max() < 1e-6 and abs(np.linalg.norm(c, axis=1).max() - 1) < 1e-6
    # on the surface of a cube: undo the unknown shift and scale from the extremes, then every point
    # has a coordinate on a face, and each of the six faces holds about a sixth of the points
    lo, hi = c.min(axis=0), c.max(axis=0)
    np.testing.assert_allclose(hi - lo, (hi - lo)[0], rtol=1e-3)
    u = (c - lo) / (hi - lo)
    on_face = (np.abs(u) < 1e-5) | (np.abs(u - 1) < 1e-5)
    assert on_face.any(axis=1).all()
    share = np.concatenate([np.abs(u) < 1e-5, np.abs(u - 1) < 1e-5], axis=1).mean(axis=0)
    assert np.abs(share - 1 / 6).max() < 5 * np.sqrt(1 / 6 * 5 / 6 / 2048)
    # a tetrahedron (corner at the origin, edges along the axes): every point on one of its four planes
    t = ds.cloud(3).astype(np.float64)
    u = t - t.min(axis=0)
    s = u.sum(axis=1)
    assert ((u.min(axis=1) < 1e-5) | (np.abs(s - s.max()) < 1e-5)).all()
    assert (u.min(axis=1) > 1e-3).sum() > 2048 / 4 - 5 * np.sqrt(2048 * 3 / 16)  # the slanted face: a quarter+


def test_off_sampling_is_deterministic(off_root: Path) -> None:
    a = MN.ModelNetFolder(off_root, points=256)
    b = MN.ModelNetFolder(off_root, points=256, cache=False)
    c = MN.ModelNetFolder(off_root, points=256, seed=1)
    for i in range(len(a)):
        assert np.array_equal(a.cloud(i), b.cloud(i)) and not np.array_equal(a.cloud(i), c.cloud(i))
    assert a.cloud(0) is a.cloud(0) and not a.cloud(0).flags.writeable  # cached
    only = MN.ModelNetFolder(off_root, points=256, classes=["chair"])
    assert only.classes == ("chair",) and only.labels.tolist() == [0, 0]
    assert np.array_equal(only.cloud(0), a.cloud(3))  # a file's cloud does not depend on the other classes
    assert only.data_id.endswith(",classes=chair")
    train = MN.ModelNetFolder(off_root, split="train", points=256)
    assert len(train) == 3 and train.labels.tolist() == [0, 0, 1]


def test_off_folder_errors(tmp_path: Path, off_root: Path) -> None:
    with pytest.raises(DataError, match="does not exist; give the folder in the OFF layout"):
        MN.ModelNetFolder(tmp_path / "missing")
    with pytest.raises(DataError, match="is a file, not a folder"):
        MN.ModelNetFolder(off_root / "README.txt")
    with pytest.raises(DataError, match=r"not a ModelNet folder.*did you mean .*ModelNet2\?"):
        MN.ModelNetFolder(tmp_path)
    empty = tmp_path / "Empty"
    (empty / "desk" / "train").mkdir(parents=True)
    with pytest.raises(DataError, match=r"no \.off files in .*/<class>/test/ \(found the class folders desk\)"):
        MN.ModelNetFolder(empty)
    with pytest.raises(DataError, match=r"unknown class\(es\) \['sofa'\].*bed, chair"):
        MN.ModelNetFolder(off_root, classes=["sofa"])
    with pytest.raises(DataError, match="split must be 'train' or 'test'"):
        MN.ModelNetFolder(off_root, split="val")
    write(off_root / "bed" / "test" / "bed_0009.off", "OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n")
    ds = MN.ModelNetFolder(off_root)
    with pytest.raises(DataError, match=r"bed_0009\.off, line 6: vertex index 7 is out of range"):
        ds[3]
    write(off_root / "bed" / "test" / "bed_0009.off", "OFF\n3 1 0\n0 0 0\n1 0 0\n2 0 0\n3 0 1 2\n")
    with pytest.raises(DataError, match=r"bed_0009\.off: the mesh has no surface area"):
        MN.ModelNetFolder(off_root)[3]


# --------------------------------------------------------------------------- the resampled text layout


@pytest.fixture()
def txt_root(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path / "modelnet40_normal_resampled"
    root.mkdir()
    rng = np.random.default_rng(0)
    names = ["airplane", "night_stand"]
    (root / "modelnet40_shape_names.txt").write_text("\n".join(names) + "\n")
    (root / "modelnet10_shape_names.txt").write_text("night_stand\n")
    (root / "modelnet40_train.txt").write_text("airplane_0001\nnight_stand_0001\nairplane_0002\n")
    (root / "modelnet40_test.txt").write_text("night_stand_0002\nairplane_0003\n")
    (root / "modelnet10_train.txt").write_text("night_stand_0001\n")
    (root / "modelnet10_test.txt").write_text("night_stand_0002\n")
    arrays = {}
    for sid in ("airplane_0001", "airplane_0002", "airplane_0003", "night_stand_0001", "night_stand_0002"):
        a = rng.normal(size=(1100, 6)) * [2, 1, 0.5, 1, 1, 1] + [5, 0, 0, 0, 0, 0]
        arrays[sid] = a
        write(root / sid.rsplit("_", 1)[0] / f"{sid}.txt", "".join(",".join(f"{x:.6f}" for x in r) + "\n" for r in a))
    return root, arrays


def test_txt_folder_uses_the_first_points(txt_root: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, arrays = txt_root
    ds = MN.ModelNetFolder(root)
    assert ds.layout == "txt" and ds.listing == "modelnet40" and ds.classes == ("airplane", "night_stand")
    assert [f.stem for f in ds.files] == ["airplane_0003", "night_stand_0002"] and ds.labels.tolist() == [0, 1]
    assert ds.data_id == f"modelnet:{root.resolve()},split=test,points=1024,listing=modelnet40"
    ref = np.loadtxt(root / "night_stand" / "night_stand_0002.txt", delimiter=",")[:1024, :3]
    np.testing.assert_allclose(ref, np.round(arrays["night_stand_0002"][:1024, :3], 6), atol=1e-9)
    ref = ref - ref.mean(axis=0)
    ref /= np.linalg.norm(ref, axis=1).max()
    x, y = ds[1]
    np.testing.assert_allclose(x.numpy(), ref, atol=1e-6)
    assert int(y) == 1 and x.dtype == torch.float32
    train = MN.ModelNetFolder(root, split="train", points=1100)
    assert [f.stem for f in train.files] == ["airplane_0001", "airplane_0002", "night_stand_0001"]
    ten = MN.ModelNetFolder(root, split="train", listing="modelnet10")
    assert ten.classes == ("night_stand",) and len(ten) == 1 and ten.data_id.endswith("listing=modelnet10")


def test_txt_folder_errors(txt_root: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, _ = txt_root
    with pytest.raises(DataError, match="has only 1100 points .* but 2000 were asked for; use points=1100"):
        MN.ModelNetFolder(root, points=2000)[0]
    bad = root / "airplane" / "airplane_0003.txt"
    lines = bad.read_text().splitlines()
    lines[6] = "0.1,oops,0.3,0,0,1"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"airplane_0003\.txt, line 7: expected 'x,y,z,nx,ny,nz'.*oops"):
        MN.ModelNetFolder(root)[0]
    (root / "night_stand" / "night_stand_0002.txt").unlink()
    with pytest.raises(DataError, match=r"1 of the 2 files listed in modelnet40_test\.txt are missing.*night_stand_0002"):
        MN.ModelNetFolder(root)
    (root / "modelnet40_train.txt").write_text("airplane_0001\nbicycle_0001\n")
    with pytest.raises(DataError, match=r"modelnet40_train\.txt, line 2: sample id 'bicycle_0001' does not start"):
        MN.ModelNetFolder(root, split="train")
    (root / "modelnet10_test.txt").unlink()
    with pytest.raises(DataError, match=r"modelnet10_test\.txt is missing"):
        MN.ModelNetFolder(root, listing="modelnet10")


# --------------------------------------------------------------------------- data specs


def test_modelnet_specs(off_root: Path, txt_root: tuple[Path, dict[str, np.ndarray]]) -> None:
    ds = parse_data_spec(f"modelnet:{off_root}")
    assert isinstance(ds, MN.ModelNetFolder) and len(ds) == 5 and ds.split == "test" and ds.points == 1024
    ds = parse_data_spec(f"modelnet:{off_root},split=train,points=128,seed=3")
    assert len(ds) == 3 and ds[0][0].shape == (128, 3) and ds.seed == 3
    again = parse_data_spec(ds.data_id)
    assert again.data_id == ds.data_id and np.array_equal(again.cloud(2), ds.cloud(2))
    sub = parse_data_spec(f"modelnet:{off_root},split=test@2")
    assert len(sub) == 2 and sub.data_id.endswith(",split=test,points=1024,seed=0@2")
    ds = parse_data_spec(f"modelnet:{off_root},classes=chair")
    assert ds.classes == ("chair",)
    root, _ = txt_root
    ds = parse_data_spec(f"modelnet:{root},split=train,listing=modelnet10")
    assert ds.layout == "txt" and ds.classes == ("night_stand",)


def test_a_path_with_a_comma(tmp_path: Path, off_root: Path) -> None:
    odd = tmp_path / "a,b"
    off_root.rename(odd)
    assert len(parse_data_spec(f"modelnet:{odd},split=test")) == 5


@pytest.mark.parametrize("rest, message", [
    ("", "has nothing after ':'"),
    ("{root},split=val", "split must be 'train' or 'test'"),
    ("{root},points=many", "points must be an integer"),
    ("{root},size=3", "unknown option 'size=3'"),
    ("{root},split=test,split=train", "option 'split' given twice"),
    (",split=test", "expected modelnet:PATH before the options"),
])
def test_bad_modelnet_specs(off_root: Path, rest: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_data_spec("modelnet:" + rest.format(root=off_root))


def test_missing_folder_spec(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        parse_data_spec(f"modelnet:{tmp_path / 'ModelNet10'},split=test")
