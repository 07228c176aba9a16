"""Image folders: :class:`ImageFolder` reads ``root/<class_name>/<image>`` files lazily with PIL."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import DataError, SpecError
from .arrays import Indices, to_chw_tensor
from .idx import PathLike
from .image_files import open_image, read_image
from .subsets import subset_tag

__all__ = ["IMAGE_EXTENSIONS", "ImageFolder"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")


class ImageFolder(Dataset):
    """Images in ``root/<class_name>/<file>.{png,jpg,jpeg,bmp}``, loaded lazily with PIL.

    Classes are the sub-directory names sorted (hidden ones skipped); files are sorted
    within each class; extensions are matched case-insensitively. Items are converted
    to grey (``grayscale=True``, C=1) or RGB (C=3), optionally resized bilinearly to
    ``size=(H, W)``, and returned as ``(float32 (C, H, W) in [0, 1], int label)``, read at
    their depth by :func:`~orbitscope.data.image_files.read_image` (8-bit / 255, 16-bit /
    65535). Without ``size`` all images must share the first image's size; a different one
    raises DataError when that item is loaded. ``data_id`` is ``"folder:<abs root>"``.

    Every image's declared size is checked before it is decoded: over ``max_pixels``
    (width × height; default :data:`~orbitscope.data.image_files.MAX_IMAGE_PIXELS`, 8192²,
    or ``$ORBITSCOPE_MAX_IMAGE_PIXELS``) it is refused with a DataError naming the file.
    """

    def __init__(self, root: PathLike, grayscale: bool = False,
                 size: tuple[int, int] | None = None, max_pixels: int | None = None) -> None:
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
        self.max_pixels = max_pixels
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
            with open_image(self.samples[0][0], max_pixels) as im:
                self._ref_size = im.size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        if self.size is None:
            with open_image(path, self.max_pixels) as im:  # the header only
                if im.size != self._ref_size:
                    w, h = im.size
                    rw, rh = self._ref_size  # type: ignore[misc]
                    raise DataError(f"{path} is {h}x{w} (HxW) but {self.samples[0][0]} is {rh}x{rw}; "
                                    "pass size=(H, W) to resize all images")
        arr = read_image(path, colour=not self.grayscale, size=self.size, max_pixels=self.max_pixels)
        if arr.ndim == 3:
            arr = arr.transpose(2, 0, 1)
        return to_chw_tensor(arr, None), label

    def subset(self, indices: Indices, data_id: str | None = None) -> ImageFolder:
        """New ImageFolder restricted to ``indices`` (same classes/options; no file I/O)."""
        picked = list(range(len(self)))[indices] if isinstance(indices, slice) else \
            [int(i) for i in np.asarray(indices).reshape(-1)]
        new = copy.copy(self)
        new.samples = [self.samples[i] for i in picked]
        new.labels = self.labels[np.asarray(picked, dtype=np.int64)]
        new.data_id = data_id if data_id is not None else self.data_id + subset_tag(np.asarray(picked, dtype=np.int64))
        return new
