"""In-memory image classification datasets: :class:`ArrayDataset` and its image and label checks.

One item is ``(image, label)``: ``image`` is a ``torch.float32`` tensor of shape ``(C, H, W)``
with intensities in ``[0, 1]`` (8-bit pixels are divided by 255); ``label`` is a Python ``int``.
See :mod:`orbitscope.data.datasets` for the conventions on accepted arrays.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import DataError
from .subsets import picked_indices, subset_tag

__all__ = ["ArrayDataset", "Indices", "to_chw_tensor"]

#: Item indices for ``subset``: a slice (keeps memmap views), a sequence or an integer array.
Indices = slice | Sequence[int] | np.ndarray


def to_chw_tensor(pixels: np.ndarray, divisor: float | None) -> torch.Tensor:
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


def _content_hash(images: np.ndarray, labels: np.ndarray) -> str:
    """16 hex digits of SHA-256 over the arrays' shapes, dtypes and bytes."""
    h = hashlib.sha256()
    for a in (images, labels):
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype.str}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()[:16]


class ArrayDataset(Dataset):
    """In-memory (or memmapped) image classification dataset.

    Args:
        images: ``(N, H, W)`` or ``(N, C, H, W)``; ``uint8`` (0..255, divided by 255 per
            item) or floating point already in ``[0, 1]`` (checked via min/max).
        labels: ``(N,)`` integer class indices (stored as int64).
        data_id: provenance string, e.g. ``"fashion-mnist:test"``; by default ``"array:<hash>"``
            of the images' and labels' bytes (part of every run id: two different datasets must
            not share one, or a store would return one's stored run for the other).
        classes: class names (index = label); default ``["0", ..., str(max label)]``.

    Items are ``(float32 tensor (C, H, W) in [0, 1], int label)``. ``images`` is kept as
    given (no copy); ``labels`` is a small int64 array. Labels of another shape (a column
    ``(N, 1)``, one-hot ``(N, K)``) or dtype, channels-last images and other image dtypes raise
    :class:`~orbitscope.errors.DataError` with the conversion to apply (nothing is reshaped
    silently).
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray | Sequence[int],
                 data_id: str | None = None, classes: Sequence[str] | None = None) -> None:
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
        # without a name, the content names the data: two different arrays must never share a run id
        self.data_id = data_id if data_id is not None else f"array:{_content_hash(images, lab)}"
        self.classes: list[str] = list(classes)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return to_chw_tensor(self.images[index], self._divisor), int(self.labels[index])

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

        ``data_id`` defaults to ``self.data_id`` plus :func:`~orbitscope.data.subsets.subset_tag`
        of the indices (``[a:b]`` for a run, else ``[subset:<count>:<hash of the indices>]``), so
        two different subsets never share an id; ``classes`` is kept.
        """
        if not isinstance(indices, slice):
            indices = np.asarray(indices, dtype=np.int64).reshape(-1)
            bad = indices[(indices >= len(self)) | (indices < -len(self))]
            if bad.size:
                raise DataError(f"subset index {int(bad[0])} is out of range for {self.data_id} ({len(self)} items)")
        labels = self.labels[indices]
        if data_id is None:
            data_id = self.data_id + subset_tag(picked_indices(len(self), indices, self.data_id))
        return ArrayDataset(self.images[indices], labels, data_id, self.classes)
